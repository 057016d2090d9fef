/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff control-path glue: the vendor's ctrl.c (Debian
 * linux-source-6.1 6.1.192-3, drivers/infiniband/hw/irdma/ctrl.c) compiled
 * unmodified as part of this translation unit -- it is #included, not
 * copied, so the WQE builders it keeps `static` (irdma_sc_alloc_stag,
 * irdma_sc_dealloc_stag, ...) can be called directly -- and a flat C
 * interface over its CQP WQE builders for the Rust harness.
 *
 * Every builder is called with post_sq = false: it only writes its WQE into
 * the CQP SQ ring (host memory the glue owns) and never rings a doorbell.
 * After each call the glue retires the slot (tail = head) so the ring never
 * fills; the ring is small so the polarity flips often.
 *
 * The device is GEN_2 (icrdma_hw.c: icrdma_init_hw, also compiled
 * unmodified): its register table, field shifts and masks. Address-handle
 * WQEs come from uda.c (irdma_sc_access_ah), compiled unmodified too. The BAR base is
 * a fake address: register pointers are only recorded (vd_bar_write in
 * glue.c) and read as 0 (vd_bar_read), never dereferenced.
 */
#include "ctrl.c"

/* Register reads answer 0 unless an area installs a device model here
 * (hmc_glue.c does, around irdma_cfg_fpm_val). */
u32 (*vd_bar_read_hook)(const volatile void *addr);

u32 vd_bar_read(const volatile void *addr)
{
	return vd_bar_read_hook ? vd_bar_read_hook(addr) : 0;
}

/* Functions ctrl.c references from other vendor files (utils.c, hw.c,
 * ws.c, i40iw_hw.c) that no builder the harness calls reaches. They abort
 * so that a harness change that does reach one fails loudly. */
void i40iw_init_hw(struct irdma_sc_dev *dev) { (void)dev; abort(); }
int irdma_cqp_qp_suspend_resume(struct irdma_sc_qp *qp, u8 cmd) { (void)qp; (void)cmd; abort(); }
int irdma_cqp_sds_cmd(struct irdma_sc_dev *dev, struct irdma_update_sds_info *info) { (void)dev; (void)info; abort(); }
int irdma_cqp_stats_inst_cmd(struct irdma_sc_vsi *vsi, u8 cmd, struct irdma_stats_inst_info *s) { (void)vsi; (void)cmd; (void)s; abort(); }
void irdma_hw_stats_start_timer(struct irdma_sc_vsi *vsi) { (void)vsi; abort(); }
void irdma_hw_stats_stop_timer(struct irdma_sc_vsi *vsi) { (void)vsi; abort(); }
void irdma_modify_qp_to_err(struct irdma_sc_qp *qp) { (void)qp; abort(); }
void irdma_reinitialize_ieq(struct irdma_sc_vsi *vsi) { (void)vsi; abort(); }
void *irdma_remove_cqp_head(struct irdma_sc_dev *dev) { (void)dev; abort(); }
void irdma_term_modify_qp(struct irdma_sc_qp *qp, u8 n, u8 t, u8 l) { (void)qp; (void)n; (void)t; (void)l; abort(); }
void irdma_terminate_done(struct irdma_sc_qp *qp, int t) { (void)qp; (void)t; abort(); }
void irdma_terminate_start_timer(struct irdma_sc_qp *qp) { (void)qp; abort(); }
int irdma_ws_add(struct irdma_sc_vsi *vsi, u8 up) { (void)vsi; (void)up; abort(); }
void irdma_ws_remove(struct irdma_sc_vsi *vsi, u8 up) { (void)vsi; (void)up; abort(); }
void irdma_ws_reset(struct irdma_sc_vsi *vsi) { (void)vsi; abort(); }

/* ---- a CQP ------------------------------------------------------------ */

struct vd_cqp {
	struct irdma_sc_dev dev;
	struct irdma_hw hw;
	struct irdma_hmc_info hmc;
	struct irdma_hmc_obj_info hmc_obj[IRDMA_HMC_IW_MAX];
	struct irdma_sc_cqp cqp;
	struct irdma_sc_qp qp;
	struct irdma_cqp_quanta *ring;
	u64 *scratch;
	u64 host_ctx[8];
};

/* A GEN_2 PF device (icrdma_init_hw) on the harness's BAR, its HMC info
 * over obj (IRDMA_HMC_IW_MAX entries); shim/hmc_glue.c's device too. */
void vd_gen2_dev_init(struct irdma_sc_dev *dev, struct irdma_hw *hw, struct irdma_hmc_info *hmc,
		      struct irdma_hmc_obj_info *obj)
{
	hw->hw_addr = (u8 *)(uintptr_t)0x40000000ULL;
	dev->hw = hw;
	hmc->hmc_obj = obj;
	dev->hmc_info = hmc;
	dev->hw_attrs.uk_attrs.hw_rev = IRDMA_GEN_2;
	icrdma_init_hw(dev);
}

/* A CQP of sq_size WQEs (a power of two, 4..2048, irdma_sc_cqp_init). */
struct vd_cqp *vd_cqp_new(u32 sq_size, int *ret)
{
	struct irdma_cqp_init_info info;
	struct vd_cqp *c = calloc(1, sizeof(*c));

	if (!c) {
		*ret = -ENOMEM;
		return NULL;
	}
	c->ring = calloc(sq_size ? sq_size : 1, sizeof(*c->ring));
	c->scratch = calloc(sq_size ? sq_size : 1, sizeof(u64));
	vd_gen2_dev_init(&c->dev, &c->hw, &c->hmc, c->hmc_obj);
	/* the EQ size limits irdma_sc_dev_init sets (ctrl.c) */
	c->dev.hw_attrs.min_hw_aeq_size = IRDMA_MIN_AEQ_ENTRIES;
	c->dev.hw_attrs.max_hw_aeq_size = IRDMA_MAX_AEQ_ENTRIES;
	c->dev.hw_attrs.min_hw_ceq_size = IRDMA_MIN_CEQ_ENTRIES;
	c->dev.hw_attrs.max_hw_ceq_size = IRDMA_MAX_CEQ_ENTRIES;
	memset(&info, 0, sizeof(info));
	info.dev = &c->dev;
	info.sq = c->ring;
	info.sq_pa = (u64)(uintptr_t)c->ring;
	info.sq_size = sq_size;
	info.host_ctx = (__le64 *)c->host_ctx;
	info.host_ctx_pa = (u64)(uintptr_t)c->host_ctx;
	info.scratch_array = c->scratch;
	*ret = irdma_sc_cqp_init(&c->cqp, &info);
	if (*ret) {
		free(c->ring);
		free(c->scratch);
		free(c);
		return NULL;
	}
	c->qp.dev = &c->dev;
	return c;
}

void vd_cqp_free(struct vd_cqp *c)
{
	free(c->ring);
	free(c->scratch);
	free(c);
}

/* The committed HMC counts the builders check ids against. */
void vd_cqp_set_counts(struct vd_cqp *c, u32 qp, u32 cq, u32 pble)
{
	c->hmc.hmc_obj[IRDMA_HMC_IW_QP].max_cnt = qp;
	c->hmc.hmc_obj[IRDMA_HMC_IW_CQ].max_cnt = cq;
	c->hmc.hmc_obj[IRDMA_HMC_IW_PBLE].max_cnt = pble;
	c->hmc.hmc_obj[IRDMA_HMC_IW_PBLE].cnt = pble;
}

/* The slot the next WQE takes. */
u32 vd_cqp_head(struct vd_cqp *c)
{
	return c->cqp.sq_ring.head;
}

/* What a builder does with post_sq = true after its WQE (ctrl.c
 * irdma_sc_cqp_post_sq): the CQPDB doorbell write of the new head, into
 * the recording BAR (src/regen/cqp.rs reg_writes). */
void vd_cqp_post_sq(struct vd_cqp *c)
{
	irdma_sc_cqp_post_sq(&c->cqp);
}

/* The fake BAR base register pointers are made from. */
u64 vd_cqp_bar(struct vd_cqp *c)
{
	return (u64)(uintptr_t)c->hw.hw_addr;
}

/* Copies out slot idx and retires every WQE written so far. */
void vd_cqp_take(struct vd_cqp *c, u32 idx, u64 *out)
{
	memcpy(out, c->ring[idx % c->cqp.sq_size].elem, 64);
	c->cqp.sq_ring.tail = c->cqp.sq_ring.head;
}

/* ---- QP commands (ctrl.c: irdma_sc_qp_create / _modify / _destroy) ---- */

struct vd_qp_cmd {
	u64 ctx_pa, shadow_pa;
	u32 qp_id;
	u16 new_mss;
	u8 qp_type, virtual_map, next_state, termlen;
	u8 ord_valid, tcp_ctx_valid, cached_var_valid, cq_num_valid;
	u8 arp_cache_idx_valid, mac_valid, mss_change, remove_hash_idx;
	u8 reset_tcp_conn, dont_send_fin, dont_send_term, force_lpb;
	u8 ignore_mw_bnd, pad[7];
};

static void vd_qp_fill(struct vd_cqp *c, const struct vd_qp_cmd *k)
{
	c->qp.qp_uk.qp_id = k->qp_id;
	c->qp.qp_uk.qp_type = k->qp_type;
	c->qp.virtual_map = k->virtual_map;
	c->qp.hw_host_ctx_pa = k->ctx_pa;
	c->qp.shadow_area_pa = k->shadow_pa;
}

int vd_qp_create_cmd(struct vd_cqp *c, const struct vd_qp_cmd *k)
{
	struct irdma_create_qp_info i;

	memset(&i, 0, sizeof(i));
	vd_qp_fill(c, k);
	i.ord_valid = k->ord_valid;
	i.tcp_ctx_valid = k->tcp_ctx_valid;
	i.cq_num_valid = k->cq_num_valid;
	i.arp_cache_idx_valid = k->arp_cache_idx_valid;
	i.mac_valid = k->mac_valid;
	i.force_lpb = k->force_lpb;
	i.next_iwarp_state = k->next_state;
	return irdma_sc_qp_create(&c->qp, &i, 0, false);
}

int vd_qp_modify_cmd(struct vd_cqp *c, const struct vd_qp_cmd *k)
{
	struct irdma_modify_qp_info i;

	memset(&i, 0, sizeof(i));
	vd_qp_fill(c, k);
	i.new_mss = k->new_mss;
	i.next_iwarp_state = k->next_state;
	i.termlen = k->termlen;
	i.ord_valid = k->ord_valid;
	i.tcp_ctx_valid = k->tcp_ctx_valid;
	i.cq_num_valid = k->cq_num_valid;
	i.arp_cache_idx_valid = k->arp_cache_idx_valid;
	i.reset_tcp_conn = k->reset_tcp_conn;
	i.remove_hash_idx = k->remove_hash_idx;
	i.dont_send_term = k->dont_send_term;
	i.dont_send_fin = k->dont_send_fin;
	i.cached_var_valid = k->cached_var_valid;
	i.mss_change = k->mss_change;
	i.force_lpb = k->force_lpb;
	i.mac_valid = k->mac_valid;
	return irdma_sc_qp_modify(&c->qp, &i, 0, false);
}

int vd_qp_destroy_cmd(struct vd_cqp *c, const struct vd_qp_cmd *k)
{
	vd_qp_fill(c, k);
	return irdma_sc_qp_destroy(&c->qp, 0, k->remove_hash_idx, k->ignore_mw_bnd, false);
}

/* ---- STags (ctrl.c: irdma_sc_alloc_stag / irdma_sc_dealloc_stag) ------ */

struct vd_stag_cmd {
	u64 total_len, first_pm_pbl_idx;
	u32 chunk_size, stag_idx, page_size, pd_id;
	u16 access_rights;
	u8 remote_access, use_hmc_fcn_index, all_memory, hmc_fcn_index, mr, pad;
};

int vd_alloc_stag_cmd(struct vd_cqp *c, const struct vd_stag_cmd *k)
{
	struct irdma_allocate_stag_info i;

	memset(&i, 0, sizeof(i));
	i.total_len = k->total_len;
	i.first_pm_pbl_idx = k->first_pm_pbl_idx;
	i.chunk_size = k->chunk_size;
	i.stag_idx = k->stag_idx;
	i.page_size = k->page_size;
	i.pd_id = k->pd_id;
	i.access_rights = k->access_rights;
	i.remote_access = k->remote_access;
	i.use_hmc_fcn_index = k->use_hmc_fcn_index;
	i.all_memory = k->all_memory;
	i.hmc_fcn_index = k->hmc_fcn_index;
	return irdma_sc_alloc_stag(&c->dev, &i, 0, false);
}

int vd_dealloc_stag_cmd(struct vd_cqp *c, const struct vd_stag_cmd *k)
{
	struct irdma_dealloc_stag_info i;

	memset(&i, 0, sizeof(i));
	i.stag_idx = k->stag_idx;
	i.pd_id = k->pd_id;
	i.mr = k->mr;
	return irdma_sc_dealloc_stag(&c->dev, &i, 0, false);
}

/* ---- CQs (ctrl.c: irdma_sc_cq_create / irdma_sc_cq_destroy) ----------- */

struct vd_cq_cmd {
	u64 cq_pa, shadow_pa;
	u32 cq_id, cq_size, ceq_id, shadow_read_threshold, first_pm_pbl_idx, max_ceqs;
	u16 vsi_idx;
	u8 pbl_chunk_size, tph_val, ceqe_mask, virtual_map, check_overflow, ceq_id_valid;
	u8 tph_en, avoid_mem_cflct, pad[4];
};

static struct irdma_sc_vsi vd_vsi;

static void vd_cq_fill(struct vd_cqp *c, struct irdma_sc_cq *cq, const struct vd_cq_cmd *k)
{
	memset(cq, 0, sizeof(*cq));
	c->dev.hmc_fpm_misc.max_ceqs = k->max_ceqs;
	vd_vsi.vsi_idx = k->vsi_idx;
	cq->dev = &c->dev;
	cq->vsi = &vd_vsi;
	cq->cq_uk.cq_id = k->cq_id;
	cq->cq_uk.cq_size = k->cq_size;
	cq->cq_uk.avoid_mem_cflct = k->avoid_mem_cflct;
	cq->cq_pa = k->cq_pa;
	cq->shadow_area_pa = k->shadow_pa;
	cq->ceq_id = k->ceq_id;
	cq->shadow_read_threshold = k->shadow_read_threshold;
	cq->pbl_chunk_size = k->pbl_chunk_size;
	cq->tph_val = k->tph_val;
	cq->first_pm_pbl_idx = k->first_pm_pbl_idx;
	cq->ceqe_mask = k->ceqe_mask;
	cq->virtual_map = k->virtual_map;
	cq->ceq_id_valid = k->ceq_id_valid;
	cq->tph_en = k->tph_en;
}

static struct irdma_sc_cq vd_cq;

/* The CQ context the vendor writes (@8): its struct's address >> 1. */
u64 vd_cq_ctx(void)
{
	return (u64)(uintptr_t)&vd_cq >> 1;
}

int vd_cq_create_cmd(struct vd_cqp *c, const struct vd_cq_cmd *k)
{
	vd_cq_fill(c, &vd_cq, k);
	return irdma_sc_cq_create(&vd_cq, 0, k->check_overflow, false);
}

int vd_cq_destroy_cmd(struct vd_cqp *c, const struct vd_cq_cmd *k)
{
	vd_cq_fill(c, &vd_cq, k);
	return irdma_sc_cq_destroy(&vd_cq, 0, false);
}

/* ---- REG_MR (ctrl.c: irdma_sc_mr_reg_non_shared) ---------------------- */

struct vd_mr_cmd {
	u64 reg_addr_pa, va, total_len;
	u32 page_size, chunk_size, first_pm_pbl_index, stag_idx, pd_id;
	u16 access_rights;
	u8 va_based, stag_key, use_hmc_fcn_index, hmc_fcn_index, all_memory, pad[5];
};

int vd_mr_reg_cmd(struct vd_cqp *c, const struct vd_mr_cmd *k)
{
	struct irdma_reg_ns_stag_info i;

	memset(&i, 0, sizeof(i));
	i.reg_addr_pa = k->reg_addr_pa;
	i.va = k->va;
	i.total_len = k->total_len;
	i.page_size = k->page_size;
	i.chunk_size = k->chunk_size;
	i.first_pm_pbl_index = k->first_pm_pbl_index;
	i.addr_type = k->va_based ? IRDMA_ADDR_TYPE_VA_BASED : IRDMA_ADDR_TYPE_ZERO_BASED;
	i.stag_idx = k->stag_idx;
	i.access_rights = k->access_rights;
	i.pd_id = k->pd_id;
	i.stag_key = k->stag_key;
	i.use_hmc_fcn_index = k->use_hmc_fcn_index;
	i.hmc_fcn_index = k->hmc_fcn_index;
	i.all_memory = k->all_memory;
	return irdma_sc_mr_reg_non_shared(&c->dev, &i, 0, false);
}

/* ---- the RoCE QP host context (ctrl.c: irdma_sc_qp_setctx_roce) ------- */

struct vd_qpc {
	u64 sq_pa, rq_pa, qp_compl_ctx;
	u32 push_idx, send_cq_num, rcv_cq_num, rem_endpoint_idx, qkey, dest_qp, pd_id;
	u32 dest_ip_addr[4], local_ipaddr[4];
	u32 snd_mss, flow_label, psn_nxt, lsn, epsn, psn_max, psn_una, cwnd;
	u16 qs_handle, p_key, err_rq_idx, ord_size, ird_size, t_high, t_low;
	u16 src_port, dst_port, vlan_tag, arp_idx;
	u8 rq_wqe_size, hw_sq_size, hw_rq_size, sq_tph_val, rq_tph_val, stats_idx;
	u8 roce_tver, ack_credits, err_rq_idx_valid, rtomin, ttl, tos;
	u8 rexmit_thresh, rnr_nak_thresh, mac_addr[6];
	u8 sq_tph_en, rq_tph_en, rcv_tph_en, xmit_tph_en, stats_idx_valid;
	u8 is_qp1, udprivcq_en, dcqcn_en, rcv_no_icrc, wr_rdresp_en, fast_reg_en;
	u8 priv_mode_en, rd_en, timely_en, dctcp_en, fw_cc_enable, ipv4, insert_vlan_tag;
	u8 pad[3];
};

/* Fills the 256-byte context at out (zeroed first: the vendor writes only
 * the words it has fields in). */
/* The context written over `out` pre-filled with `fill`: two runs with
 * complementary fills tell which bytes the vendor wrote (src/regen/qpc.rs). */
void vd_qp_setctx_roce_fill(struct vd_cqp *c, const struct vd_qpc *k, u64 *out, u8 fill)
{
	struct irdma_qp_host_ctx_info info;
	struct irdma_roce_offload_info roce;
	struct irdma_udp_offload_info udp;
	struct irdma_sc_qp *qp = &c->qp;

	memset(&info, 0, sizeof(info));
	memset(&roce, 0, sizeof(roce));
	memset(&udp, 0, sizeof(udp));
	memset(out, fill, IRDMA_QP_CTX_SIZE);
	qp->dev = &c->dev;
	qp->qp_uk.rq_wqe_size = k->rq_wqe_size;
	qp->push_idx = k->push_idx;
	qp->sq_pa = k->sq_pa;
	qp->rq_pa = k->rq_pa;
	qp->hw_sq_size = k->hw_sq_size;
	qp->hw_rq_size = k->hw_rq_size;
	qp->sq_tph_val = k->sq_tph_val;
	qp->rq_tph_val = k->rq_tph_val;
	qp->qs_handle = k->qs_handle;
	qp->sq_tph_en = k->sq_tph_en;
	qp->rq_tph_en = k->rq_tph_en;
	qp->rcv_tph_en = k->rcv_tph_en;
	qp->xmit_tph_en = k->xmit_tph_en;
	info.qp_compl_ctx = k->qp_compl_ctx;
	info.udp_info = &udp;
	info.roce_info = &roce;
	info.send_cq_num = k->send_cq_num;
	info.rcv_cq_num = k->rcv_cq_num;
	info.rem_endpoint_idx = k->rem_endpoint_idx;
	info.stats_idx = k->stats_idx;
	info.stats_idx_valid = k->stats_idx_valid;
	roce.p_key = k->p_key;
	roce.err_rq_idx = k->err_rq_idx;
	roce.qkey = k->qkey;
	roce.dest_qp = k->dest_qp;
	roce.roce_tver = k->roce_tver;
	roce.ack_credits = k->ack_credits;
	roce.err_rq_idx_valid = k->err_rq_idx_valid;
	roce.pd_id = k->pd_id;
	roce.ord_size = k->ord_size;
	roce.ird_size = k->ird_size;
	roce.is_qp1 = k->is_qp1;
	roce.udprivcq_en = k->udprivcq_en;
	roce.dcqcn_en = k->dcqcn_en;
	roce.rcv_no_icrc = k->rcv_no_icrc;
	roce.wr_rdresp_en = k->wr_rdresp_en;
	roce.fast_reg_en = k->fast_reg_en;
	roce.priv_mode_en = k->priv_mode_en;
	roce.rd_en = k->rd_en;
	roce.timely_en = k->timely_en;
	roce.dctcp_en = k->dctcp_en;
	roce.fw_cc_enable = k->fw_cc_enable;
	roce.t_high = k->t_high;
	roce.t_low = k->t_low;
	memcpy(roce.mac_addr, k->mac_addr, 6);
	roce.rtomin = k->rtomin;
	udp.ipv4 = k->ipv4;
	udp.insert_vlan_tag = k->insert_vlan_tag;
	udp.ttl = k->ttl;
	udp.tos = k->tos;
	udp.src_port = k->src_port;
	udp.dst_port = k->dst_port;
	memcpy(udp.dest_ip_addr, k->dest_ip_addr, sizeof(udp.dest_ip_addr));
	memcpy(udp.local_ipaddr, k->local_ipaddr, sizeof(udp.local_ipaddr));
	udp.snd_mss = k->snd_mss;
	udp.vlan_tag = k->vlan_tag;
	udp.arp_idx = k->arp_idx;
	udp.flow_label = k->flow_label;
	udp.psn_nxt = k->psn_nxt;
	udp.lsn = k->lsn;
	udp.epsn = k->epsn;
	udp.psn_max = k->psn_max;
	udp.psn_una = k->psn_una;
	udp.cwnd = k->cwnd;
	udp.rexmit_thresh = k->rexmit_thresh;
	udp.rnr_nak_thresh = k->rnr_nak_thresh;
	irdma_sc_qp_setctx_roce(qp, (__le64 *)out, &info);
}

void vd_qp_setctx_roce(struct vd_cqp *c, const struct vd_qpc *k, u64 *out)
{
	vd_qp_setctx_roce_fill(c, k, out, 0);
}

/* ---- CEQ / AEQ (ctrl.c: irdma_sc_ceq_init + irdma_sc_ceq_create /
 * irdma_sc_ceq_destroy, irdma_sc_aeq_init + irdma_sc_aeq_create /
 * irdma_sc_aeq_destroy): init's checks, then the builder on what init kept */

struct vd_eq_cmd {
	u64 pa;
	u32 elem_cnt, ceq_id, first_pm_pbl_idx, max_ceqs;
	u16 vsi_idx;
	u8 virtual_map, tph_en, itr_no_expire, pbl_chunk_size, tph_val, pad;
};

static struct irdma_sc_ceq vd_ceq;
static struct irdma_sc_aeq vd_aeq;

/* op: 0 create CEQ, 1 destroy CEQ, 2 create AEQ, 3 destroy AEQ */
int vd_eq_cmd(struct vd_cqp *c, const struct vd_eq_cmd *k, u32 op)
{
	int ret;

	c->dev.hmc_fpm_misc.max_ceqs = k->max_ceqs;
	vd_vsi.vsi_idx = k->vsi_idx;
	if (op < 2) {
		struct irdma_ceq_init_info i;

		memset(&i, 0, sizeof(i));
		memset(&vd_ceq, 0, sizeof(vd_ceq));
		i.ceqe_pa = k->pa;
		i.dev = &c->dev;
		i.elem_cnt = k->elem_cnt;
		i.ceq_id = k->ceq_id;
		i.virtual_map = k->virtual_map;
		i.tph_en = k->tph_en;
		i.itr_no_expire = k->itr_no_expire;
		i.pbl_chunk_size = k->pbl_chunk_size;
		i.tph_val = k->tph_val;
		i.first_pm_pbl_idx = k->first_pm_pbl_idx;
		i.vsi = &vd_vsi;
		ret = irdma_sc_ceq_init(&vd_ceq, &i);
		if (ret)
			return ret;
		/* the harness's CEQ is not one the CQ builders should see */
		c->dev.ceq[k->ceq_id] = NULL;
		return op == 0 ? irdma_sc_ceq_create(&vd_ceq, 0, false)
			       : irdma_sc_ceq_destroy(&vd_ceq, 0, false);
	} else {
		struct irdma_aeq_init_info i;

		memset(&i, 0, sizeof(i));
		memset(&vd_aeq, 0, sizeof(vd_aeq));
		i.aeq_elem_pa = k->pa;
		i.dev = &c->dev;
		i.elem_cnt = k->elem_cnt;
		i.virtual_map = k->virtual_map;
		i.pbl_chunk_size = k->pbl_chunk_size;
		i.first_pm_pbl_idx = k->first_pm_pbl_idx;
		ret = irdma_sc_aeq_init(&vd_aeq, &i);
		if (ret)
			return ret;
		return op == 2 ? irdma_sc_aeq_create(&vd_aeq, 0, false)
			       : irdma_sc_aeq_destroy(&vd_aeq, 0, false);
	}
}

/* ---- address handles (uda.c: irdma_sc_access_ah, compiled unmodified);
 * it always rings the CQP doorbell, which lands in the recording BAR ---- */

struct vd_ah_cmd {
	u32 pd_idx, dst_arpindex, dest_ip_addr[4], src_ip_addr[4], flow_label, ah_idx;
	u16 vlan_tag;
	u8 insert_vlan_tag, tc_tos, hop_ttl, mac_addr[6], ipv4_valid, do_lpbk, pad[6];
};

/* op: 0 create, 1 modify, 2 destroy (defs.h IRDMA_CQP_OP_*_ADDR_HANDLE) */
int vd_ah_cmd(struct vd_cqp *c, const struct vd_ah_cmd *k, u32 op)
{
	static const u32 ops[3] = { IRDMA_CQP_OP_CREATE_ADDR_HANDLE,
				    IRDMA_CQP_OP_MODIFY_ADDR_HANDLE,
				    IRDMA_CQP_OP_DESTROY_ADDR_HANDLE };
	struct irdma_ah_info i;

	memset(&i, 0, sizeof(i));
	i.pd_idx = k->pd_idx;
	i.dst_arpindex = k->dst_arpindex;
	memcpy(i.dest_ip_addr, k->dest_ip_addr, sizeof(i.dest_ip_addr));
	memcpy(i.src_ip_addr, k->src_ip_addr, sizeof(i.src_ip_addr));
	i.flow_label = k->flow_label;
	i.ah_idx = k->ah_idx;
	i.vlan_tag = k->vlan_tag;
	i.insert_vlan_tag = k->insert_vlan_tag;
	i.tc_tos = k->tc_tos;
	i.hop_ttl = k->hop_ttl;
	memcpy(i.mac_addr, k->mac_addr, 6);
	i.ipv4_valid = k->ipv4_valid;
	i.do_lpbk = k->do_lpbk;
	return irdma_sc_access_ah(&c->cqp, &i, ops[op % 3], 0);
}

/* ---- WS nodes (ctrl.c: irdma_sc_manage_ws_node, which always rings the
 * doorbell) and the FPM commands (irdma_sc_query_fpm_val /
 * irdma_sc_commit_fpm_val with post_sq = false) ---------------------------- */

struct vd_misc_cmd {
	u64 pa;
	u16 id, vsi, parent_id;
	u8 type_leaf, enable, prio_type, tc, weight, hmc_fn_id;
};

/* op: 0-2 WS node add/modify/delete, 3 query FPM, 4 commit FPM */
int vd_misc_cmd(struct vd_cqp *c, const struct vd_misc_cmd *k, u32 op)
{
	struct irdma_ws_node_info i;
	struct irdma_dma_mem mem;

	memset(&mem, 0, sizeof(mem));
	mem.pa = k->pa;
	switch (op) {
	case 3:
		return irdma_sc_query_fpm_val(&c->cqp, 0, k->hmc_fn_id, &mem, false, 0);
	case 4:
		return irdma_sc_commit_fpm_val(&c->cqp, 0, k->hmc_fn_id, &mem, false, 0);
	default:
		memset(&i, 0, sizeof(i));
		i.id = k->id;
		i.vsi = k->vsi;
		i.parent_id = k->parent_id;
		i.type_leaf = k->type_leaf;
		i.enable = k->enable;
		i.prio_type = k->prio_type;
		i.tc = k->tc;
		i.weight = k->weight;
		return irdma_sc_manage_ws_node(&c->cqp, &i, (enum irdma_ws_node_op)op, 0);
	}
}

/* ---- AEQ element decode (ctrl.c: irdma_sc_get_next_aeqe) on an AEQ of
 * `size` 16-byte elements at `ring` (owned by the harness), its tail and
 * polarity set; the info struct zeroed first (src/regen/aeqe.rs) ---------- */

struct vd_aeqe_out {
	u64 compl_ctx;
	u32 qp_cq_id, tail_after;
	u16 ae_id, wqe_idx;
	u8 tcp_state, iwarp_state, qp, cq, sq, rq, in_rdrsp_wr, out_rdrsp;
	u8 aeqe_overflow, q2_data_written, ae_src, polarity_after;
};

int vd_get_next_aeqe(u64 *ring, u32 size, u32 tail, u8 pol, struct vd_aeqe_out *o)
{
	struct irdma_sc_aeq aeq;
	struct irdma_aeqe_info info;
	int ret;

	memset(&aeq, 0, sizeof(aeq));
	memset(&info, 0, sizeof(info));
	aeq.aeqe_base = (struct irdma_sc_aeqe *)ring;
	aeq.elem_cnt = size;
	IRDMA_RING_INIT(aeq.aeq_ring, size);
	aeq.aeq_ring.tail = tail % size;
	aeq.polarity = pol;
	ret = irdma_sc_get_next_aeqe(&aeq, &info);
	o->compl_ctx = info.compl_ctx;
	o->qp_cq_id = info.qp_cq_id;
	o->ae_id = info.ae_id;
	o->wqe_idx = info.wqe_idx;
	o->tcp_state = info.tcp_state;
	o->iwarp_state = info.iwarp_state;
	o->qp = info.qp;
	o->cq = info.cq;
	o->sq = info.sq;
	o->rq = info.rq;
	o->in_rdrsp_wr = info.in_rdrsp_wr;
	o->out_rdrsp = info.out_rdrsp;
	o->aeqe_overflow = info.aeqe_overflow;
	o->q2_data_written = info.q2_data_written;
	o->ae_src = info.ae_src;
	o->tail_after = aeq.aeq_ring.tail;
	o->polarity_after = aeq.polarity;
	return ret;
}

/* ---- CCQ CQE decode (ctrl.c: irdma_sc_ccq_get_cqe_info) on a CCQ of
 * `size` CQEs at `ring` (owned by the harness), head and polarity set; the
 * CQE's qword 1 must be vd_cqp_obj(c) and its WQE index below the CQP's SQ
 * size (the vendor dereferences both); slot `idx` of the CQP SQ gets
 * `word24` and its scratch `scratch` first (src/regen/ccq.rs) ----------- */

struct vd_ccq_out {
	u64 scratch, cqp, shadow0;
	u32 op_ret_val, head_after;
	u16 maj_err_code, min_err_code;
	u8 error, op_code, polarity_after, pad;
};

u64 vd_cqp_obj(struct vd_cqp *c)
{
	return (u64)(uintptr_t)&c->cqp;
}

int vd_ccq_get_cqe_info(struct vd_cqp *c, u64 *ring, u32 size, u32 head, u8 pol,
			u32 idx, u64 word24, u64 scratch, struct vd_ccq_out *o)
{
	struct irdma_sc_cq ccq;
	struct irdma_ccq_cqe_info info;
	__le64 shadow[8];
	int ret;

	memset(&ccq, 0, sizeof(ccq));
	memset(&info, 0, sizeof(info));
	memset(shadow, 0, sizeof(shadow));
	c->ring[idx % c->cqp.sq_size].elem[3] = word24;
	c->scratch[idx % c->cqp.sq_size] = scratch;
	ccq.cq_uk.cq_base = (struct irdma_cqe *)ring;
	IRDMA_RING_INIT(ccq.cq_uk.cq_ring, size);
	ccq.cq_uk.cq_ring.head = head % size;
	ccq.cq_uk.cq_ring.tail = head % size;
	ccq.cq_uk.polarity = pol;
	ccq.cq_uk.shadow_area = shadow;
	ret = irdma_sc_ccq_get_cqe_info(&ccq, &info);
	o->scratch = info.scratch;
	o->cqp = (u64)(uintptr_t)info.cqp;
	o->op_ret_val = info.op_ret_val;
	o->maj_err_code = info.maj_err_code;
	o->min_err_code = info.min_err_code;
	o->error = info.error;
	o->op_code = info.op_code;
	o->head_after = ccq.cq_uk.cq_ring.head;
	o->polarity_after = ccq.cq_uk.polarity;
	o->shadow0 = shadow[0];
	return ret;
}
