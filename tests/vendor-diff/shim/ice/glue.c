/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff, LAN side: flat entry points over the vendor's admin
 * queue (Linux 6.1 drivers/net/ethernet/intel/ice), for src/lan.rs.
 *
 * ice_controlq.c, ice_common.c and ice_sched.c are #included (unmodified,
 * one translation unit) so that their static functions are reachable:
 * ice_init_ctrlq / ice_init_check_adminq / ice_shutdown_ctrlq (the ones
 * the driver's AdminQueue::start / init_check / shutdown mirror),
 * ice_aq_clear_pxe_mode and ice_aq_manage_mac_read.
 *
 * Register access (readl / writel) goes to the Rust side's fake firmware
 * (vd_ice_rd32 / vd_ice_wr32, defined in src/lan.rs). DMA memory is
 * host memory: the bus address is the host address.
 *
 * The few functions ice_common.c / ice_sched.c call from ice files that are
 * not compiled here (ice_switch.c, ice_nvm.c, ice_flex_pipe.c, ice_flow.c,
 * ice_fdir.c, ice_lib.c, ice_main.c) are defined at the end: the VSI-handle
 * look-ups by their documented meaning, every other one aborting (the
 * harness never reaches them; an abort says which was reached).
 */
#include "ice_controlq.c"
#include "ice_common.c"
#include "ice_sched.c"
#include <stdio.h>

u64 vd_ice_usecs;

void *vd_ice_zalloc(size_t n)
{
	return calloc(1, n ? n : 1);
}

void vd_ice_free(const void *p)
{
	free((void *)p);
}

/* vd_ice_dma_alloc / vd_ice_dma_free are in src/lan.rs: the firmware
 * there touches only memory it knows was allocated. */

static struct device vd_dev;

struct device *ice_hw_to_dev(struct ice_hw *hw)
{
	(void)hw;
	return &vd_dev;
}

/* ---- the admin queue ---- */

struct ice_hw *vd_ice_hw_new(u16 sq_entries, u16 rq_entries, u16 sq_buf, u16 rq_buf)
{
	struct ice_hw *hw = vd_ice_zalloc(sizeof(*hw));

	hw->hw_addr = NULL;
	hw->mac_type = ICE_MAC_E810;
	hw->adminq.num_sq_entries = sq_entries;
	hw->adminq.num_rq_entries = rq_entries;
	hw->adminq.sq_buf_size = sq_buf;
	hw->adminq.rq_buf_size = rq_buf;
	mutex_init(&hw->adminq.sq_lock);
	mutex_init(&hw->adminq.rq_lock);
	return hw;
}

/* Frees one control queue's rings still allocated. */
static void vd_ice_cq_free(struct ice_hw *hw, struct ice_ctl_q_info *cq)
{
	if (cq->sq.count) {
		ICE_FREE_CQ_BUFS(hw, cq, sq);
		ice_free_cq_ring(hw, &cq->sq);
	}
	if (cq->rq.count) {
		ICE_FREE_CQ_BUFS(hw, cq, rq);
		ice_free_cq_ring(hw, &cq->rq);
	}
}

/* Frees the rings still allocated, without register writes (the harness's
 * firmware is gone by then). */
void vd_ice_hw_free(struct ice_hw *hw)
{
	vd_ice_cq_free(hw, &hw->adminq);
	vd_ice_cq_free(hw, &hw->mailboxq);
	vd_ice_free(hw->port_info);
	vd_ice_free(hw->layer_info);
	vd_ice_free(hw);
}

int vd_ice_init(struct ice_hw *hw)
{
	return ice_init_ctrlq(hw, ICE_CTL_Q_ADMIN);
}

/* The version fields are set to a sentinel first (all ones), so the
 * harness can tell whether this call's Get Version filled them. */
int vd_ice_init_check(struct ice_hw *hw)
{
	hw->fw_build = 0xffffffff;
	hw->api_branch = hw->api_maj_ver = hw->api_min_ver = hw->api_patch = 0xff;
	return ice_init_check_adminq(hw);
}

/* ice_init_all_ctrlq also sets up the PF-VF mailbox queue (ice_main.c →
 * ice_set_ctrlq_len gives it 64 / 1023 entries; 4 entries of 512 bytes
 * here, to stay small); its PF_MBX_* register writes are left out of the
 * comparison (the driver runs no mailbox queue). The version fields get
 * the sentinel of vd_ice_init_check first. */
int vd_ice_init_all(struct ice_hw *hw)
{
	hw->mailboxq.num_sq_entries = 4;
	hw->mailboxq.num_rq_entries = 4;
	hw->mailboxq.sq_buf_size = 512;
	hw->mailboxq.rq_buf_size = 512;
	hw->fw_build = 0xffffffff;
	hw->api_branch = hw->api_maj_ver = hw->api_min_ver = hw->api_patch = 0xff;
	return ice_init_all_ctrlq(hw);
}

void vd_ice_shutdown(struct ice_hw *hw)
{
	ice_shutdown_ctrlq(hw, ICE_CTL_Q_ADMIN);
}

void vd_ice_set_reset_ongoing(struct ice_hw *hw, u8 on)
{
	hw->reset_ongoing = on;
}

int vd_ice_send(struct ice_hw *hw, u8 *desc, u8 *buf, u16 buf_size)
{
	return ice_aq_send_cmd(hw, (struct ice_aq_desc *)desc, buf, buf_size, NULL);
}

int vd_ice_event(struct ice_hw *hw, u8 *desc, u8 *buf, u16 buf_len, u16 *msg_len, u16 *pending)
{
	struct ice_rq_event_info e;
	int r;

	memset(&e, 0, sizeof(e));
	e.buf_len = buf_len;
	e.msg_buf = buf;
	r = ice_clean_rq_elem(hw, &hw->adminq, &e, pending);
	memcpy(desc, &e.desc, 32);
	*msg_len = e.msg_len;
	return r;
}

struct vd_ice_state {
	u64 sq_ring_pa, rq_ring_pa;
	u16 sq_count, rq_count, sq_ntu, sq_ntc, rq_ntu, rq_ntc;
	u8 sq_last_status, api_maj, api_min, api_patch, api_branch;
	u8 fw_maj, fw_min, fw_patch, fw_branch, pad[3];
	u32 fw_build;
};

void vd_ice_state(struct ice_hw *hw, struct vd_ice_state *s)
{
	struct ice_ctl_q_info *cq = &hw->adminq;

	memset(s, 0, sizeof(*s));
	s->sq_ring_pa = cq->sq.count ? cq->sq.desc_buf.pa : 0;
	s->rq_ring_pa = cq->rq.count ? cq->rq.desc_buf.pa : 0;
	s->sq_count = cq->sq.count;
	s->rq_count = cq->rq.count;
	s->sq_ntu = cq->sq.next_to_use;
	s->sq_ntc = cq->sq.next_to_clean;
	s->rq_ntu = cq->rq.next_to_use;
	s->rq_ntc = cq->rq.next_to_clean;
	s->sq_last_status = (u8)cq->sq_last_status;
	s->api_maj = hw->api_maj_ver;
	s->api_min = hw->api_min_ver;
	s->api_patch = hw->api_patch;
	s->api_branch = hw->api_branch;
	s->fw_maj = hw->fw_maj_ver;
	s->fw_min = hw->fw_min_ver;
	s->fw_patch = hw->fw_patch;
	s->fw_branch = hw->fw_branch;
	s->fw_build = hw->fw_build;
}

/* Bus address of ATQ slot buffer i (0 when none). */
u64 vd_ice_sq_buf_pa(struct ice_hw *hw, u16 i)
{
	struct ice_ctl_q_info *cq = &hw->adminq;

	if (!cq->sq.count || i >= cq->num_sq_entries || !cq->sq.r.sq_bi)
		return 0;
	return cq->sq.r.sq_bi[i].pa;
}

u64 vd_ice_now_usecs(void)
{
	return vd_ice_usecs;
}

/* ---- the typed commands of the LAN bring-up ---- */

/* hw's port (allocated on first use); shim/ice/switch_glue.c uses it too */
struct ice_port_info *vd_pi(struct ice_hw *hw)
{
	if (!hw->port_info) {
		hw->port_info = vd_ice_zalloc(sizeof(*hw->port_info));
		hw->port_info->hw = hw;
	}
	return hw->port_info;
}

void vd_ice_set_lport(struct ice_hw *hw, u8 lport)
{
	vd_pi(hw)->lport = lport;
}

int vd_ice_clear_pf_cfg(struct ice_hw *hw)
{
	return ice_clear_pf_cfg(hw);
}

int vd_ice_clear_pxe(struct ice_hw *hw)
{
	return ice_aq_clear_pxe_mode(hw);
}

int vd_ice_get_fw_ver(struct ice_hw *hw)
{
	hw->fw_build = 0xffffffff;
	hw->api_branch = hw->api_maj_ver = hw->api_min_ver = hw->api_patch = 0xff;
	return ice_aq_get_fw_ver(hw, NULL);
}

int vd_ice_set_event_mask(struct ice_hw *hw, u8 lport, u16 mask)
{
	return ice_aq_set_event_mask(hw, lport, mask, NULL);
}

int vd_ice_restart_an(struct ice_hw *hw, u8 ena_link)
{
	return ice_aq_set_link_restart_an(vd_pi(hw), ena_link, NULL);
}

int vd_ice_set_mac_cfg(struct ice_hw *hw, u16 max_frame)
{
	return ice_aq_set_mac_cfg(hw, max_frame, NULL);
}

/* ice_aq_manage_mac_read walks num_addr entries whatever buf_size was: the
 * buffer here is large enough for 255 of them, so that walk stays inside
 * memory of the harness. mac gets pi->mac.lan_addr (zeroed first). */
int vd_ice_mac_read(struct ice_hw *hw, u16 buf_size, u8 *mac)
{
	struct ice_port_info *pi = vd_pi(hw);
	u8 *buf = vd_ice_zalloc(4096 + 256 * 8);
	int r;

	/* 0xee: an address the call left alone is told from one it read as
	 * zero (the published vectors' pre-fill) */
	memset(pi->mac.lan_addr, 0xee, ETH_ALEN);
	r = ice_aq_manage_mac_read(hw, buf, buf_size, NULL);
	memcpy(mac, pi->mac.lan_addr, ETH_ALEN);
	vd_ice_free(buf);
	return r;
}

struct vd_link {
	u64 phy_type_low, phy_type_high;
	u16 max_frame_size, link_speed;
	u8 topo_media_conflict, link_cfg_err, lse_ena, link_info;
	u8 an_info, ext_info, fec_info, pacing;
	u8 fc_mode, pad[7];
};

int vd_ice_link_info(struct ice_hw *hw, u8 ena_lse, struct vd_link *o)
{
	struct ice_port_info *pi = vd_pi(hw);
	struct ice_link_status *li = &pi->phy.link_info;
	int r;

	memset(li, 0, sizeof(*li));
	pi->fc.current_mode = ICE_FC_NONE;
	r = ice_aq_get_link_info(pi, ena_lse, NULL, NULL);
	memset(o, 0, sizeof(*o));
	o->phy_type_low = li->phy_type_low;
	o->phy_type_high = li->phy_type_high;
	o->max_frame_size = li->max_frame_size;
	o->link_speed = li->link_speed;
	o->topo_media_conflict = li->topo_media_conflict;
	o->link_cfg_err = li->link_cfg_err;
	o->lse_ena = li->lse_ena;
	o->link_info = li->link_info;
	o->an_info = li->an_info;
	o->ext_info = li->ext_info;
	o->fec_info = li->fec_info;
	o->pacing = li->pacing;
	o->fc_mode = (u8)pi->fc.current_mode;
	return r;
}

struct vd_sched {
	u16 max_children[ICE_AQC_TOPO_MAX_LEVEL_NUM];
	u8 layers, phys_layers, flattened, max_cgds;
};

/* A fresh query each time: ice_sched_query_res_alloc sends nothing once
 * hw->layer_info is set. */
int vd_ice_query_sched_res(struct ice_hw *hw, struct vd_sched *o)
{
	int r;

	vd_ice_free(hw->layer_info);
	hw->layer_info = NULL;
	memset(hw->max_children, 0, sizeof(hw->max_children));
	hw->num_tx_sched_layers = 0;
	r = ice_sched_query_res_alloc(hw);
	memcpy(o->max_children, hw->max_children, sizeof(o->max_children));
	o->layers = hw->num_tx_sched_layers;
	o->phys_layers = hw->num_tx_sched_phys_layers;
	o->flattened = hw->flattened_layers;
	o->max_cgds = hw->max_cgds;
	return r;
}

/* ice_aq_get_dflt_topo with the 4 KiB buffer ice_sched_init_port uses */
int vd_ice_get_dflt_topo(struct ice_hw *hw, u8 lport, u8 *buf, u8 *num_branches)
{
	*num_branches = 0;
	return ice_aq_get_dflt_topo(hw, lport, (struct ice_aqc_get_topo_elem *)buf,
				    ICE_AQ_MAX_BUF_LEN, num_branches, NULL);
}

/* ice_sched_query_elem: elem gets the 24-byte element (parent TEID, TEID,
 * 16 bytes of data) */
int vd_ice_query_elem(struct ice_hw *hw, u32 teid, u8 *elem)
{
	return ice_sched_query_elem(hw, teid, (struct ice_aqc_txsched_elem_data *)elem);
}

/* Capabilities: the fields both sides keep, flattened in the order of
 * CAP_NAMES in src/lan.rs. */
static void vd_common_caps(const struct ice_hw_common_caps *c, u32 *v)
{
	v[0] = c->valid_functions;
	v[1] = c->active_tc_bitmap;
	v[2] = c->maxtc;
	v[3] = c->num_rxq;
	v[4] = c->rxq_first_id;
	v[5] = c->num_txq;
	v[6] = c->txq_first_id;
	v[7] = c->num_msix_vectors;
	v[8] = c->msix_vector_first_id;
	v[9] = c->max_mtu;
	v[10] = c->sr_iov_1_1;
	v[11] = c->rss_table_size;
	v[12] = c->rss_table_entry_width;
	v[13] = c->dcb;
	v[14] = c->rdma;
}

/* Into hw->dev_caps, as ice_get_caps does: ice_recalc_port_limited_caps
 * reads the number of functions from there. */
int vd_ice_dev_caps(struct ice_hw *hw, u8 pf_id, u32 *v)
{
	struct ice_hw_dev_caps *dc = &hw->dev_caps;
	int r;

	memset(dc, 0, sizeof(*dc));
	hw->pf_id = pf_id;
	r = ice_discover_dev_caps(hw, dc);
	vd_common_caps(&dc->common_cap, v);
	v[15] = dc->num_vfs_exposed;
	v[16] = dc->num_vsi_allocd_to_host;
	v[17] = dc->num_flow_director_fltr;
	v[18] = dc->num_funcs;
	v[19] = 0;
	return r;
}

/* The function caps depend on what the device caps found (valid
 * functions, number of functions): given here. */
int vd_ice_func_caps(struct ice_hw *hw, u32 valid_functions, u32 num_funcs, u32 *v)
{
	struct ice_hw_func_caps fc;
	int r;

	memset(&fc, 0, sizeof(fc));
	hw->dev_caps.common_cap.valid_functions = valid_functions;
	hw->dev_caps.num_funcs = num_funcs;
	r = ice_discover_func_caps(hw, &fc);
	vd_common_caps(&fc.common_cap, v);
	v[15] = fc.num_allocd_vfs;
	v[16] = fc.vf_base_id;
	v[17] = fc.guar_num_vsi;
	v[18] = fc.fd_fltr_guar;
	v[19] = fc.fd_fltr_best_effort;
	return r;
}

/* ---- functions of ice files not compiled here ---- */

static void vd_unreachable(const char *f)
{
	fprintf(stderr, "vendor-diff: the vendor's ice code reached %s, which the harness does not provide\n", f);
	abort();
}

#define VD_UNREACHABLE(ret, name, ...) \
	ret name(__VA_ARGS__) { vd_unreachable(#name); __builtin_unreachable(); }

/* ice_switch.c (ice_is_vsi_valid, ice_get_vsi_ctx, ice_get_hw_vsi_num,
 * ice_clear_all_vsi_ctx, ice_get_initial_sw_cfg, ice_init_def_sw_recp,
 * ice_replay_vsi_all_fltr, ice_rm_all_sw_replay_rule_info) is compiled in
 * shim/ice/switch_glue.c. */
VD_UNREACHABLE(int, ice_alloc_fd_res_cntr, struct ice_hw *hw, u16 *cntr_id)
VD_UNREACHABLE(int, ice_free_fd_res_cntr, struct ice_hw *hw, u16 cntr_id)
VD_UNREACHABLE(void, ice_free_hw_tbls, struct ice_hw *hw)
VD_UNREACHABLE(void, ice_free_seg, struct ice_hw *hw)
VD_UNREACHABLE(int, ice_get_pfa_module_tlv, struct ice_hw *hw, u16 *module_tlv, u16 *module_tlv_len, u16 module_type)
VD_UNREACHABLE(int, ice_init_hw_tbls, struct ice_hw *hw)
VD_UNREACHABLE(int, ice_init_nvm, struct ice_hw *hw)
VD_UNREACHABLE(int, ice_read_sr_word, struct ice_hw *hw, u16 offset, u16 *data)
VD_UNREACHABLE(int, ice_replay_rss_cfg, struct ice_hw *hw, u16 vsi_handle)
