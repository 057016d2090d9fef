/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff, LAN VSI-context side: the vendor's Linux 6.1
 * ice_lib.c VSI-context builders, for src/lan_vsi.rs.
 *
 * ice_lib.c as a whole needs the whole netdev driver (see switch_glue.c),
 * so build_ice.rs cuts out of the fetched, unmodified file, verbatim, the
 * contiguous run of static functions from ice_set_dflt_vsi_ctx through
 * ice_vsi_init (ice_set_dflt_vsi_ctx, ice_vsi_setup_q_map,
 * ice_set_fd_vsi_ctx, ice_set_rss_vsi_ctx, ice_chnl_vsi_setup_q_map,
 * ice_vsi_init) and ice_vsi_set_tc_cfg, into OUT_DIR/ice_lib_cut/
 * vd_ice_lib_vsi_ctx.c, which is #included below. Nothing vendor is
 * committed.
 *
 * ice.h's include guard (_ICE_H_) and ice_lib.h's are predefined; what the
 * cut functions use of them is supplied here, written from each item's
 * documented meaning: the fields of struct ice_vsi / struct ice_pf they
 * touch (nothing else), the PF flag bits they test, ICE_MAX_RXQS_PER_TC,
 * ICE_DFLT_TRAFFIC_CLASS, the user-priority table macro, order_base_2 and
 * the switch's bridge modes. ice_vsi_init's two admin-queue calls
 * (ice_add_vsi / ice_update_vsi, ice_switch.c) are redirected by macro to a
 * recorder that keeps the context they were handed and answers success:
 * the context is what is compared, the admin queue is lan_switch.rs's.
 */
#include "ice_shim_kernel.h"

#define _ICE_H_
#define _ICE_LIB_H_

#include "ice_switch.h"

/* ice.h: most Rx queues a TC maps in a VSI context (the TC map's count
 * field is a power of two up to 2^8) */
#define ICE_MAX_RXQS_PER_TC 256
/* ice.h: TC 0 alone */
#define ICE_DFLT_TRAFFIC_CLASS BIT(0)
/* ice.h: user priority `val` in slot `i` of a UP table, from the
 * ICE_AQ_VSI_UP_TABLE_UPn fields of ice_adminq_cmd.h */
#define ICE_UP_TABLE_TRANSLATE(val, i) FIELD_PREP(ICE_AQ_VSI_UP_TABLE_UP##i##_M, (u32)(val))
/* include/uapi/linux/if_bridge.h */
#define BRIDGE_MODE_VEB 0
#define BRIDGE_MODE_VEPA 1

/* include/linux/log2.h: ceil(log2(n)), 0 for n <= 1 */
static inline int order_base_2(unsigned long n)
{
	return n > 1 ? 64 - __builtin_clzl(n - 1) : 0;
}

/* ice.h's PF flag bits the cut functions test (the harness's own numbering) */
enum ice_pf_flags {
	ICE_FLAG_RSS_ENA,
	ICE_FLAG_DCB_ENA,
	ICE_FLAG_FD_ENA,
	ICE_PF_FLAGS_NBITS
};

struct ice_vf {
	u16 vf_id;
};

/* the virtual switch a VSI hangs off: VEB or VEPA */
struct ice_vsw {
	u16 bridge_mode;
};

struct ice_pf {
	struct ice_hw hw;
	DECLARE_BITMAP(flags, ICE_PF_FLAGS_NBITS);
	u16 num_lan_msix;
};

struct ice_tc_info {
	u16 qoffset;
	u16 qcount_tx;
	u16 qcount_rx;
	u8 netdev_tc;
};

struct ice_tc_cfg {
	u8 numtc;
	u16 ena_tc;
	struct ice_tc_info tc_info[ICE_MAX_TRAFFIC_CLASS];
};

/* What ice_vsi_init and its helpers touch of struct ice_vsi. */
struct ice_vsi {
	struct ice_pf *back;
	struct ice_port_info *port_info;
	struct ice_vsw *vsw;
	struct ice_vf *vf;
	enum ice_vsi_type type;
	u16 idx;
	u16 vsi_num;
	u16 num_gfltr;
	u16 num_bfltr;
	u16 alloc_txq;
	u16 num_txq;
	u16 alloc_rxq;
	u16 num_rxq;
	u16 next_base_q;
	u16 *rxq_map;
	struct ice_tc_cfg tc_cfg;
	struct ice_aqc_vsi_props info;
};

struct device *ice_hw_to_dev(struct ice_hw *hw);

static inline struct device *ice_pf_to_dev(struct ice_pf *pf)
{
	return ice_hw_to_dev(&pf->hw);
}

/* only reached for channel VSIs and DCB, which the harness does not build */
struct ice_vsi *ice_get_main_vsi(struct ice_pf *pf);
bool ice_vsi_is_vlan_pruning_ena(struct ice_vsi *vsi);
void ice_vsi_set_dcb_tc_cfg(struct ice_vsi *vsi);

/* ice_vsi_init's admin-queue calls: record the context, answer success */
static struct ice_vsi_ctx vd_lib_seen;
static int vd_lib_called;

static int vd_lib_record(struct ice_vsi_ctx *ctx, int which)
{
	vd_lib_seen = *ctx;
	vd_lib_called = which;
	return 0;
}

/* ice_add_vsi records 1, ice_update_vsi 2 (hw, VSI handle and command
 * details unused) */
#define ice_add_vsi(hw, vsi_handle, ctx, cd) vd_lib_record((ctx), 1)
#define ice_update_vsi(hw, vsi_handle, ctx, cd) vd_lib_record((ctx), 2)
#include "vd_ice_lib_vsi_ctx.c"
#undef ice_add_vsi
#undef ice_update_vsi

#include <stdio.h>

static void vd_lib_unreachable(const char *f)
{
	fprintf(stderr, "vendor-diff: the vendor's ice_lib.c cut reached %s, which the harness does not provide\n", f);
	abort();
}

struct ice_vsi *ice_get_main_vsi(struct ice_pf *pf)
{
	(void)pf;
	vd_lib_unreachable("ice_get_main_vsi");
	return NULL;
}

bool ice_vsi_is_vlan_pruning_ena(struct ice_vsi *vsi)
{
	(void)vsi;
	vd_lib_unreachable("ice_vsi_is_vlan_pruning_ena");
	return false;
}

void ice_vsi_set_dcb_tc_cfg(struct ice_vsi *vsi)
{
	(void)vsi;
	vd_lib_unreachable("ice_vsi_set_dcb_tc_cfg");
}

/* One VSI context as ice_vsi_setup builds it: ice_vsi_set_tc_cfg, then
 * ice_vsi_init (add when init_vsi, else update). */
struct vd_lib_in {
	u8 vsi_type; /* enum ice_vsi_type: ICE_VSI_PF or ICE_VSI_CTRL */
	u8 init_vsi;
	u8 rss_ena;
	u8 fd_ena;
	u8 veb;
	u8 sw_id;
	u16 rxq_base;
	u16 alloc_rxq;
	u16 alloc_txq;
	u16 num_gfltr;
	u16 num_bfltr;
};

struct vd_lib_out {
	int ret;
	int called; /* 1 ice_add_vsi, 2 ice_update_vsi, 0 neither */
	u16 flags; /* the descriptor's VSI type */
	u8 alloc_from_pool;
	u8 pad;
	u16 num_rxq;
	u16 num_txq;
	u8 props[128];
};

_Static_assert(sizeof(struct ice_aqc_vsi_props) == 128, "ice_aqc_vsi_props is 128 bytes");

int vd_lib_vsi_init(const struct vd_lib_in *in, struct vd_lib_out *out)
{
	struct ice_pf *pf = vd_ice_zalloc(sizeof(*pf));
	struct ice_port_info pi = { 0 };
	struct ice_vsw vsw = { 0 };
	struct ice_vsi vsi = { 0 };
	u16 rxq_map[1];

	if (in->rss_ena)
		set_bit(ICE_FLAG_RSS_ENA, pf->flags);
	if (in->fd_ena)
		set_bit(ICE_FLAG_FD_ENA, pf->flags);
	pf->hw.dvm_ena = 0; /* single VLAN mode: the driver has no DVM */
	pi.sw_id = in->sw_id;
	vsw.bridge_mode = in->veb ? BRIDGE_MODE_VEB : BRIDGE_MODE_VEPA;
	rxq_map[0] = in->rxq_base;
	vsi.back = pf;
	vsi.port_info = &pi;
	vsi.vsw = &vsw;
	vsi.type = (enum ice_vsi_type)in->vsi_type;
	vsi.num_gfltr = in->num_gfltr;
	vsi.num_bfltr = in->num_bfltr;
	vsi.alloc_rxq = in->alloc_rxq;
	vsi.alloc_txq = in->alloc_txq;
	vsi.rxq_map = rxq_map;
	memset(&vd_lib_seen, 0, sizeof(vd_lib_seen));
	vd_lib_called = 0;
	ice_vsi_set_tc_cfg(&vsi);
	out->ret = ice_vsi_init(&vsi, in->init_vsi != 0);
	out->called = vd_lib_called;
	out->flags = vd_lib_seen.flags;
	out->alloc_from_pool = vd_lib_seen.alloc_from_pool;
	out->num_rxq = vsi.num_rxq;
	out->num_txq = vsi.num_txq;
	memcpy(out->props, &vd_lib_seen.info, sizeof(out->props));
	vd_ice_free(pf);
	return out->ret;
}
