/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff, LAN switch side: flat entry points over the vendor's
 * Linux 6.1 ice_switch.c and ice_fltr.c (drivers/net/ethernet/intel/ice),
 * for src/lan_switch.rs. Both are #included unmodified, in this one
 * translation unit, so their static functions are reachable.
 *
 * Both files include ice.h (ice_switch.c through ice_lib.h), which pulls in
 * the whole netdev driver: 49 kernel headers and struct ice_pf. What the
 * two files actually use of it is small, so its include guards (_ICE_H_,
 * _ICE_LIB_H_) are defined here first and what is used is supplied below,
 * written from the documented meaning of each item:
 *  - ice_switch.c: only the ice_switch.h / ice_common.h types (it touches
 *    no struct ice_pf or struct ice_vsi) and a few kernel helpers;
 *  - ice_fltr.c: struct ice_vsi's back, idx and vsi_num, struct ice_pf's
 *    embedded hw, and ice_pf_to_dev.
 * ice_lib.c is NOT compiled whole: it touches hundreds of fields of struct
 * ice_vsi / struct ice_pf (rings, q_vectors, netdev, XDP, DCB, devlink,
 * RSS, VLAN ops) in functions that must all compile even when unreached;
 * that would be a shadow ice.h, not a shim. The functions that build the
 * VSI context (ice_vsi_init and its helpers) are cut out of it verbatim at
 * build time and compiled in their own unit (lib_glue.c, build_ice_lib.rs).
 */
#include "ice_shim_kernel.h"

#define _ICE_H_
#define _ICE_LIB_H_
#define VLAN_HLEN 4 /* the 802.1Q tag's length */
#define PPP_IPV6 0x0057 /* PPP protocol number of IPv6 (RFC 5072) */

static inline unsigned int ilog2(unsigned long v)
{
	return v ? 63 - __builtin_clzl(v) : 0;
}

static inline bool ether_addr_equal(const u8 *a, const u8 *b)
{
	return !memcmp(a, b, 6);
}

static inline void eth_broadcast_addr(u8 *a)
{
	memset(a, 0xff, 6);
}

static inline u16 htons(u16 v)
{
	return __builtin_bswap16(v);
}

#define array_size(a, b) ((size_t)(a) * (size_t)(b))
#define ERR_PTR(e) ((void *)(long)(e))
#define PTR_ERR(p) ((long)(p))
#define IS_ERR(p) ((unsigned long)(p) >= (unsigned long)-4095)

#define VD_BITMAP_OP(name, expr)                                                   \
	static inline void name(unsigned long *d, const unsigned long *a,         \
				const unsigned long *b, unsigned int n)           \
	{                                                                          \
		for (unsigned int i = 0; i < BITS_TO_LONGS(n); i++)                \
			d[i] = expr;                                               \
	}
VD_BITMAP_OP(bitmap_or, a[i] | b[i])
VD_BITMAP_OP(bitmap_xor, a[i] ^ b[i])
static inline bool bitmap_and(unsigned long *d, const unsigned long *a, const unsigned long *b,
			      unsigned int n)
{
	unsigned long any = 0;

	for (unsigned int i = 0; i < BITS_TO_LONGS(n); i++)
		any |= d[i] = a[i] & b[i];
	return any != 0;
}

static inline void bitmap_fill(unsigned long *d, unsigned int n)
{
	memset(d, 0xff, BITS_TO_LONGS(n) * sizeof(long));
}

static inline unsigned int bitmap_weight(const unsigned long *a, unsigned int n)
{
	unsigned int w = 0;

	for (unsigned int i = 0; i < n; i++)
		w += test_bit(i, a);
	return w;
}

#include "ice_switch.h"

/* What ice_fltr.c uses of ice.h: a PF holding its hw, a VSI with its
 * handle (idx) and hardware number. */
struct ice_pf {
	struct ice_hw hw;
};

struct ice_vsi {
	struct ice_pf *back;
	u16 idx;
	u16 vsi_num;
};

struct device *ice_hw_to_dev(struct ice_hw *hw);

static inline struct device *ice_pf_to_dev(struct ice_pf *pf)
{
	return ice_hw_to_dev(&pf->hw);
}

#include "ice_switch.c"
#include "ice_fltr.c"
#include <stdio.h>

/* ice_vlan_mode.c: double VLAN mode is what hw->dvm_ena says */
bool ice_is_dvm_ena(struct ice_hw *hw)
{
	return hw->dvm_ena;
}

static void vd_sw_unreachable(const char *f)
{
	fprintf(stderr, "vendor-diff: the vendor's ice_switch.c reached %s, which the harness does not provide\n", f);
	abort();
}

#define VD_SW_UNREACHABLE(ret, name, ...) \
	ret name(__VA_ARGS__) { vd_sw_unreachable(#name); __builtin_unreachable(); }

/* ice_flex_pipe.c / ice_ddp.c / ice_common.c helpers of the advanced
 * (recipe) rules, which the driver does not build */
VD_SW_UNREACHABLE(int, ice_acquire_change_lock, struct ice_hw *hw, enum ice_aq_res_access_type access)
VD_SW_UNREACHABLE(void, ice_release_change_lock, struct ice_hw *hw)
VD_SW_UNREACHABLE(int, ice_find_prot_off, struct ice_hw *hw, enum ice_block blk, u8 prof, u16 fv_idx, u8 *prot, u16 *off)
VD_SW_UNREACHABLE(bool, ice_get_open_tunnel_port, struct ice_hw *hw, u16 *port, enum ice_tunnel_type type)
VD_SW_UNREACHABLE(void, ice_get_sw_fv_bitmap, struct ice_hw *hw, enum ice_prof_type req_profs, unsigned long *bm)
VD_SW_UNREACHABLE(int, ice_get_sw_fv_list, struct ice_hw *hw, struct ice_prot_lkup_ext *lkups, unsigned long *bm, struct list_head *fv_list)
VD_SW_UNREACHABLE(void, ice_init_prof_result_bm, struct ice_hw *hw)

/* ---- set-up ---- */

/* ice_init_hw → ice_init_fltr_mgmt_struct (static in ice_common.c, the
 * other translation unit): the switch bookkeeping and default recipes;
 * the switch mode as ice_get_initial_sw_cfg would leave it. */
int vd_sw_init(struct ice_hw *hw, u8 veb)
{
	struct ice_switch_info *sw = vd_ice_zalloc(sizeof(*sw));

	hw->switch_info = sw;
	INIT_LIST_HEAD(&sw->vsi_list_map_head);
	hw->evb_veb = veb;
	return ice_init_def_sw_recp(hw);
}

/* A VSI context under `handle` with hardware number vsi_num, as ice_add_vsi
 * leaves it (ice_save_vsi_ctx). */
void vd_sw_set_vsi(struct ice_hw *hw, u16 handle, u16 vsi_num)
{
	struct ice_vsi_ctx *c = vd_ice_zalloc(sizeof(*c));

	c->vsi_num = vsi_num;
	ice_save_vsi_ctx(hw, handle, c);
}

/* Frees what the switch and the VSI contexts hold (ice_deinit_hw's
 * ice_cleanup_fltr_mgmt_struct, without its static helper). */
void vd_sw_free(struct ice_hw *hw)
{
	struct ice_switch_info *sw = hw->switch_info;

	ice_clear_all_vsi_ctx(hw);
	for (u16 h = 0; h < ICE_MAX_VSI; h++) {
		vd_ice_free(hw->vsi_ctx[h]);
		hw->vsi_ctx[h] = NULL;
	}
	if (!sw)
		return;
	ice_rm_all_sw_replay_rule_info(hw);
	{
		struct ice_vsi_list_map_info *v, *t;

		list_for_each_entry_safe(v, t, &sw->vsi_list_map_head, list_entry) {
			list_del(&v->list_entry);
			vd_ice_free(v);
		}
	}
	for (int i = 0; i < ICE_MAX_NUM_RECIPES; i++) {
		struct ice_sw_recipe *r = &sw->recp_list[i];
		struct ice_fltr_mgmt_list_entry *e, *t;

		list_for_each_entry_safe(e, t, &r->filt_rules, list_entry) {
			list_del(&e->list_entry);
			vd_ice_free(e);
		}
	}
	vd_ice_free(sw->recp_list);
	vd_ice_free(sw);
	hw->switch_info = NULL;
}

/* ---- VSIs ---- */

struct vd_vsi_out {
	u16 vsi_num, allocd, unallocated, pad;
};

/* A VSI command's result r, with what the firmware answered in c: its
 * context back into info (when given) and the VSI counts into o. */
static int vd_sw_vsi_done(int r, const struct ice_vsi_ctx *c, u8 *info, struct vd_vsi_out *o)
{
	if (info)
		memcpy(info, &c->info, sizeof(c->info));
	o->vsi_num = c->vsi_num;
	o->allocd = c->vsis_allocd;
	o->unallocated = c->vsis_unallocated;
	return r;
}

/* ice_add_vsi (ice_aq_add_vsi + the saved context); info: 128 bytes in,
 * the firmware's copy out */
int vd_sw_add_vsi(struct ice_hw *hw, u16 handle, u8 *info, u16 flags, u8 from_pool, u16 vsi_num,
		  struct vd_vsi_out *o)
{
	struct ice_vsi_ctx c;

	memset(&c, 0, sizeof(c));
	memcpy(&c.info, info, sizeof(c.info));
	c.flags = flags;
	c.alloc_from_pool = from_pool;
	c.vsi_num = vsi_num;
	return vd_sw_vsi_done(ice_add_vsi(hw, handle, &c, NULL), &c, info, o);
}

int vd_sw_update_vsi(struct ice_hw *hw, u16 handle, u8 *info, struct vd_vsi_out *o)
{
	struct ice_vsi_ctx c;

	memset(&c, 0, sizeof(c));
	memcpy(&c.info, info, sizeof(c.info));
	return vd_sw_vsi_done(ice_update_vsi(hw, handle, &c, NULL), &c, info, o);
}

int vd_sw_free_vsi(struct ice_hw *hw, u16 handle, u8 keep, struct vd_vsi_out *o)
{
	struct ice_vsi_ctx c;

	memset(&c, 0, sizeof(c));
	return vd_sw_vsi_done(ice_free_vsi(hw, handle, &c, keep, NULL), &c, NULL, o);
}

/* ---- MAC filters (ice_fltr.c) ---- */

static struct ice_vsi vd_sw_vsi(struct ice_hw *hw, u16 handle)
{
	struct ice_vsi v;

	/* hw is the first member of struct ice_pf above */
	v.back = (struct ice_pf *)hw;
	v.idx = handle;
	v.vsi_num = ice_get_hw_vsi_num(hw, handle);
	return v;
}

int vd_sw_add_mac_bcast(struct ice_hw *hw, u16 handle, const u8 *mac)
{
	struct ice_vsi v = vd_sw_vsi(hw, handle);

	return ice_fltr_add_mac_and_broadcast(&v, mac, ICE_FWD_TO_VSI);
}

int vd_sw_remove_mac(struct ice_hw *hw, u16 handle, const u8 *mac)
{
	struct ice_vsi v = vd_sw_vsi(hw, handle);

	return ice_fltr_remove_mac(&v, mac, ICE_FWD_TO_VSI);
}

/* The recorded MAC rules (recipe MAC), in list order: mac, rule id,
 * forward action, target id (VSI number or list id), vsi_count; n at most
 * max. Returns how many. */
struct vd_mac_rule {
	u8 mac[6];
	u16 rule_id, fwd_id, vsi_count;
	u8 list, pad;
};

int vd_sw_mac_rules(struct ice_hw *hw, struct vd_mac_rule *o, int max)
{
	struct ice_sw_recipe *r = &hw->switch_info->recp_list[ICE_SW_LKUP_MAC];
	struct ice_fltr_mgmt_list_entry *e;
	int n = 0;

	list_for_each_entry(e, &r->filt_rules, list_entry) {
		if (n >= max)
			break;
		memcpy(o[n].mac, e->fltr_info.l_data.mac.mac_addr, 6);
		o[n].rule_id = e->fltr_info.fltr_rule_id;
		o[n].list = e->fltr_info.fltr_act == ICE_FWD_TO_VSI_LIST;
		o[n].fwd_id = o[n].list ? e->fltr_info.fwd_id.vsi_list_id : e->fltr_info.fwd_id.hw_vsi_id;
		o[n].vsi_count = e->vsi_count;
		n++;
	}
	return n;
}

/* ---- the scheduler tree build (ice_sched.c / ice_common.c, compiled in
 * shim/ice/glue.c's translation unit; their exported functions called
 * here) ---- */
#include "ice_sched.h"

/* hw's port, allocated on first use (shim/ice/glue.c) */
struct ice_port_info *vd_pi(struct ice_hw *hw);

/* ice_init_hw's order: ice_sched_query_res_alloc (vd_ice_query_sched_res)
 * first, then this */
int vd_sched_init_port(struct ice_hw *hw, u8 lport)
{
	struct ice_port_info *pi = vd_pi(hw);

	pi->lport = lport;
	return ice_sched_init_port(pi);
}

int vd_cfg_vsi_rdma(struct ice_hw *hw, u16 handle, u16 tc_bitmap, u16 *max_rdmaqs)
{
	return ice_cfg_vsi_rdma(vd_pi(hw), handle, tc_bitmap, max_rdmaqs);
}

int vd_ena_rdma_qset(struct ice_hw *hw, u16 handle, u8 tc, u16 *qsets, u16 n, u32 *teids)
{
	return ice_ena_vsi_rdma_qset(vd_pi(hw), handle, tc, qsets, n, teids);
}

struct vd_node {
	u32 teid, parent;
	u8 layer, tc, owner, pad;
	u8 data[16];
};

static void vd_walk(struct ice_sched_node *n, struct vd_node *o, int max, int *k)
{
	if (!n)
		return;
	if (*k < max) {
		o[*k].teid = n->info.node_teid;
		o[*k].parent = n->info.parent_teid;
		o[*k].layer = n->tx_sched_layer;
		o[*k].tc = n->tc_num;
		o[*k].owner = n->owner;
		memcpy(o[*k].data, &n->info.data, 16);
	}
	(*k)++;
	for (u16 i = 0; i < n->num_children; i++)
		vd_walk(n->children[i], o, max, k);
}

/* The port's tree, depth first from the root, children in array order;
 * returns the node count (may exceed max: only max written). */
int vd_sched_tree(struct ice_hw *hw, struct vd_node *o, int max)
{
	int k = 0;

	if (hw->port_info)
		vd_walk(hw->port_info->root, o, max, &k);
	return k;
}

/* Releases the port's tree (ice_sched_clear_port). */
void vd_sched_free(struct ice_hw *hw)
{
	if (hw->port_info && hw->port_info->root)
		ice_sched_clear_port(hw->port_info);
}
