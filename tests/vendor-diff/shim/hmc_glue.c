/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff HMC glue: the vendor's hmc.c (Debian linux-source-6.1
 * 6.1.192-3, drivers/infiniband/hw/irdma/hmc.c) compiled unmodified as part
 * of this translation unit -- #included, not copied, so its static
 * irdma_find_sd_index_limit / irdma_find_pd_index_limit are reachable --
 * and ctrl.c's FPM sizing (irdma_cfg_fpm_val, which runs
 * irdma_sc_init_iw_hmc -> irdma_sc_parse_fpm_query_buf, irdma_est_sd,
 * irdma_q1_cnt, cfg_fpm_value_gen_2, then irdma_sc_cfg_iw_fpm ->
 * irdma_sc_parse_fpm_commit_buf), reached through its non-static entry
 * point in ctrl_glue.c's translation unit.
 *
 * A fake device answers the two CQP ops irdma_cfg_fpm_val posts and polls
 * for with register reads (IRDMA_CQP_WAIT_POLL_REGS): the first CQPTAIL read
 * after a WQE was taken returns the old tail, the next one completes the
 * WQE. The QUERY_FPM_VAL buffer is the case's, written before the call; on
 * COMMIT_FPM_VAL completion the glue copies out the counts the vendor wrote
 * and lets the harness's callback write the device's answer (counts and
 * bases) over them, as the device does.
 *
 * hmc.c's CQP traffic goes through dev->cqp->process_cqp_sds, which the glue
 * points at a recorder: every UPDATE_PE_SDS the vendor asks for is kept,
 * entries byte for byte. Its backing pages come from dma_alloc_coherent
 * (the shim's, page-aligned, host address as bus address); the glue records
 * the address of every allocation so the harness can hand the same
 * addresses to the driver's encoder.
 */
#include "hmc.c"
#include "icrdma_hw.h"

/* ---- the fake device behind the CQP registers ------------------------- */

typedef void (*vd_commit_answer_fn)(const u64 *sent, u64 *answer, void *ctx);

#define VD_HMC_MAX_OPS 256

struct vd_hmc {
	struct irdma_sc_dev dev;
	struct irdma_hw hw;
	struct irdma_hmc_info hmc;
	struct irdma_hmc_obj_info obj[IRDMA_HMC_IW_MAX];
	struct irdma_sc_cqp cqp;
	struct irdma_cqp_quanta ring[4];
	u64 scratch[4];
	u64 host_ctx[8];
	__le64 query_buf[24] __aligned(64);
	__le64 commit_buf[24] __aligned(64);
	u64 commit_sent[24];
	vd_commit_answer_fn answer;
	void *answer_ctx;
	u32 last_head;
	u32 tail;
	u32 queried, committed;
	/* hmc.c ran: the SD table may hold backing pages */
	u32 created;
	/* recorded UPDATE_PE_SDS ops (hmc.c via process_cqp_sds) */
	u32 n_ops, n_entries;
	u32 op_cnt[VD_HMC_MAX_OPS];
	u64 ent_cmd[VD_HMC_MAX_OPS * IRDMA_MAX_SD_ENTRIES];
	u64 ent_data[VD_HMC_MAX_OPS * IRDMA_MAX_SD_ENTRIES];
};

static struct vd_hmc *vd_cur;

extern u32 (*vd_bar_read_hook)(const volatile void *addr);

static u32 vd_hmc_read(const volatile void *addr)
{
	struct vd_hmc *h = vd_cur;
	u32 head, idx;
	u64 hdr;

	if (!h || addr != (const volatile void *)h->dev.hw_regs[IRDMA_CQPTAIL])
		return 0;
	head = h->cqp.sq_ring.head;
	if (head != h->last_head) {
		/* the read before the doorbell: nothing done yet */
		h->last_head = head;
		return (u32)FIELD_PREP(IRDMA_CQPTAIL_WQTAIL, h->tail);
	}
	idx = (head + h->cqp.sq_size - 1) % h->cqp.sq_size;
	get_64bit_val(h->ring[idx].elem, 24, &hdr);
	switch (FIELD_GET(IRDMA_CQPSQ_OPCODE, hdr)) {
	case IRDMA_CQP_OP_QUERY_FPM_VAL:
		h->queried++;
		break;
	case IRDMA_CQP_OP_COMMIT_FPM_VAL:
		h->committed++;
		memcpy(h->commit_sent, h->commit_buf, sizeof(h->commit_sent));
		if (h->answer)
			h->answer(h->commit_sent, (u64 *)h->commit_buf, h->answer_ctx);
		break;
	default:
		break;
	}
	h->tail = head;
	return (u32)FIELD_PREP(IRDMA_CQPTAIL_WQTAIL, h->tail);
}

static int vd_record_sds(struct irdma_sc_dev *dev, struct irdma_update_sds_info *info)
{
	struct vd_hmc *h = vd_cur;
	u32 i;

	(void)dev;
	if (!h || h->n_ops >= VD_HMC_MAX_OPS)
		return -ENOMEM;
	h->op_cnt[h->n_ops++] = info->cnt;
	for (i = 0; i < info->cnt && i < IRDMA_MAX_SD_ENTRIES; i++) {
		h->ent_cmd[h->n_entries] = info->entry[i].cmd;
		h->ent_data[h->n_entries] = info->entry[i].data;
		h->n_entries++;
	}
	return 0;
}

/* shim/ctrl_glue.c: a GEN_2 PF device on the harness's BAR, HMC over obj */
void vd_gen2_dev_init(struct irdma_sc_dev *dev, struct irdma_hw *hw, struct irdma_hmc_info *hmc,
		      struct irdma_hmc_obj_info *obj);

/* A GEN_2 PF device (icrdma_init_hw) with a 4-slot CQP, HMC function 0,
 * the given protocol (irdma_q1_cnt, cfg_fpm_value_gen_2 read it). */
struct vd_hmc *vd_hmc_new(u8 protocol_used, u32 max_hw_ird, int *ret)
{
	struct irdma_cqp_init_info info;
	struct vd_hmc *h = calloc(1, sizeof(*h));

	if (!h) {
		*ret = -ENOMEM;
		return NULL;
	}
	vd_gen2_dev_init(&h->dev, &h->hw, &h->hmc, h->obj);
	/* 6.1's icrdma_init_hw says 127 (icrdma_hw.h: ICRDMA_MAX_IRD_SIZE);
	 * the harness may set another value (0 keeps 127) */
	if (max_hw_ird)
		h->dev.hw_attrs.max_hw_ird = max_hw_ird;
	/* irdma_sc_dev_init's default poll budget (ctrl.c); any non-zero count
	 * is enough for this device, which completes on the second read */
	h->dev.hw_attrs.max_done_count = IRDMA_DONE_COUNT;
	h->dev.fpm_query_buf = h->query_buf;
	h->dev.fpm_query_buf_pa = (u64)(uintptr_t)h->query_buf;
	h->dev.fpm_commit_buf = h->commit_buf;
	h->dev.fpm_commit_buf_pa = (u64)(uintptr_t)h->commit_buf;
	memset(&info, 0, sizeof(info));
	info.dev = &h->dev;
	info.sq = h->ring;
	info.sq_pa = (u64)(uintptr_t)h->ring;
	info.sq_size = 4;
	info.host_ctx = (__le64 *)h->host_ctx;
	info.host_ctx_pa = (u64)(uintptr_t)h->host_ctx;
	info.scratch_array = h->scratch;
	info.protocol_used = protocol_used;
	info.hmc_profile = IRDMA_HMC_PROFILE_DEFAULT;
	*ret = irdma_sc_cqp_init(&h->cqp, &info);
	if (*ret) {
		free(h);
		return NULL;
	}
	h->dev.cqp = &h->cqp;
	h->cqp.process_cqp_sds = vd_record_sds;
	return h;
}

/* Frees the SD table and every backing page hmc.c allocated. */
void vd_hmc_free(struct vd_hmc *h)
{
	u32 i, k, n;

	if (!h)
		return;
	/* only walked when hmc.c ran (then the table is small: the harness
	 * runs hmc.c on small committed layouts only); irdma_cfg_fpm_val's
	 * u32 size of a huge table may have wrapped */
	n = h->created && h->hmc.sd_table.sd_entry ?
		    h->hmc.sd_table.sd_cnt + h->hmc.first_sd_index + 1 : 0;
	for (i = 0; i < n; i++) {
		struct irdma_hmc_sd_entry *e = &h->hmc.sd_table.sd_entry[i];

		if (e->entry_type == IRDMA_SD_TYPE_DIRECT && e->u.bp.addr.va) {
			dma_free_coherent(NULL, e->u.bp.addr.size, e->u.bp.addr.va, e->u.bp.addr.pa);
		} else if (e->entry_type == IRDMA_SD_TYPE_PAGED) {
			struct irdma_hmc_pd_table *t = &e->u.pd_table;

			for (k = 0; t->pd_entry && k < IRDMA_HMC_PD_CNT_IN_SD; k++)
				if (t->pd_entry[k].valid && !t->pd_entry[k].rsrc_pg)
					dma_free_coherent(NULL, t->pd_entry[k].bp.addr.size,
							  t->pd_entry[k].bp.addr.va,
							  t->pd_entry[k].bp.addr.pa);
			if (t->pd_page_addr.va)
				dma_free_coherent(NULL, t->pd_page_addr.size, t->pd_page_addr.va,
						  t->pd_page_addr.pa);
			kfree(t->pd_entry_virt_mem.va);
		}
	}
	kfree(h->hmc.sd_table.sd_entry);
	if (vd_cur == h)
		vd_cur = NULL;
	free(h);
}

/* What irdma_cfg_fpm_val left behind. */
struct vd_fpm_out {
	u64 commit_sent[24];
	u64 base[IRDMA_HMC_IW_MAX];
	u64 size[IRDMA_HMC_IW_MAX];
	u32 max_cnt[IRDMA_HMC_IW_MAX];
	u32 cnt[IRDMA_HMC_IW_MAX];
	u32 sd_cnt;
	u32 first_sd_index;
	u32 max_sds;
	u32 xf_block_size, q1_block_size, rrf_block_size, ooiscf_block_size;
	u32 ht_multiplier, timer_bucket, max_ceqs, max_hw_ird;
	s32 ret;
	u32 queried, committed;
};

/*
 * Runs irdma_cfg_fpm_val(dev, qp_count) with the device's QUERY_FPM_VAL
 * buffer `query` and its COMMIT_FPM_VAL answer from `answer`.
 */
void vd_hmc_cfg_fpm(struct vd_hmc *h, const u64 *query, u32 qp_count,
		    vd_commit_answer_fn answer, void *ctx, struct vd_fpm_out *out)
{
	u32 i;

	memcpy(h->query_buf, query, sizeof(h->query_buf));
	h->answer = answer;
	h->answer_ctx = ctx;
	vd_cur = h;
	vd_bar_read_hook = vd_hmc_read;
	out->ret = irdma_cfg_fpm_val(&h->dev, qp_count);
	vd_bar_read_hook = NULL;
	memcpy(out->commit_sent, h->commit_sent, sizeof(out->commit_sent));
	for (i = 0; i < IRDMA_HMC_IW_MAX; i++) {
		out->base[i] = h->obj[i].base;
		out->size[i] = h->obj[i].size;
		out->max_cnt[i] = h->obj[i].max_cnt;
		out->cnt[i] = h->obj[i].cnt;
	}
	out->sd_cnt = h->hmc.sd_table.sd_cnt;
	out->first_sd_index = h->hmc.first_sd_index;
	out->max_sds = h->dev.hmc_fpm_misc.max_sds;
	out->xf_block_size = h->dev.hmc_fpm_misc.xf_block_size;
	out->q1_block_size = h->dev.hmc_fpm_misc.q1_block_size;
	out->rrf_block_size = h->dev.hmc_fpm_misc.rrf_block_size;
	out->ooiscf_block_size = h->dev.hmc_fpm_misc.ooiscf_block_size;
	out->ht_multiplier = h->dev.hmc_fpm_misc.ht_multiplier;
	out->timer_bucket = h->dev.hmc_fpm_misc.timer_bucket;
	out->max_ceqs = h->dev.hmc_fpm_misc.max_ceqs;
	out->max_hw_ird = h->dev.hw_attrs.max_hw_ird;
	out->queried = h->queried;
	out->committed = h->committed;
}

/* irdma_find_sd_index_limit / irdma_find_pd_index_limit (hmc.c, static). */
void vd_hmc_index_limits(struct vd_hmc *h, u32 type, u32 idx, u32 cnt, u32 *sd_idx,
			 u32 *sd_lmt, u32 *pd_idx, u32 *pd_lmt)
{
	irdma_find_sd_index_limit(&h->hmc, type, idx, cnt, sd_idx, sd_lmt);
	irdma_find_pd_index_limit(&h->hmc, type, idx, cnt, pd_idx, pd_lmt);
}

/* hw.c: iw_hmc_obj_types, the order bring-up creates and teardown deletes
 * the objects in (SRQ, the reserved type, is not in it). */
static const u32 vd_obj_order[] = {
	IRDMA_HMC_IW_QP, IRDMA_HMC_IW_CQ, IRDMA_HMC_IW_HTE, IRDMA_HMC_IW_ARP,
	IRDMA_HMC_IW_APBVT_ENTRY, IRDMA_HMC_IW_MR, IRDMA_HMC_IW_XF,
	IRDMA_HMC_IW_XFFL, IRDMA_HMC_IW_Q1, IRDMA_HMC_IW_Q1FL,
	IRDMA_HMC_IW_PBLE, IRDMA_HMC_IW_TIMER, IRDMA_HMC_IW_FSIMC,
	IRDMA_HMC_IW_FSIAV, IRDMA_HMC_IW_RRF, IRDMA_HMC_IW_RRFFL,
	IRDMA_HMC_IW_HDR, IRDMA_HMC_IW_MD, IRDMA_HMC_IW_OOISC,
	IRDMA_HMC_IW_OOISCFFL,
};

#define VD_N_OBJ (sizeof(vd_obj_order) / sizeof(vd_obj_order[0]))

/* The objects bring-up creates and teardown deletes: those of vd_obj_order
 * with a count, PBLE left out. The index of the first from i on (VD_N_OBJ:
 * none left). */
static u32 vd_obj_from(const struct vd_hmc *h, u32 i)
{
	while (i < VD_N_OBJ &&
	       (vd_obj_order[i] == IRDMA_HMC_IW_PBLE || !h->obj[vd_obj_order[i]].cnt))
		i++;
	return i;
}

/* Bring-up's object creation (hw.c: irdma_create_hmc_objs, its
 * iw_hmc_obj_types order, PBLE skipped, direct SDs as irdma_hmc_setup
 * chooses for a PF): irdma_sc_create_hmc_obj for every object with a
 * count, stopping at the first error. Returns that error (0: all created);
 * *failed_type is the object it failed on. */
int vd_hmc_create_all(struct vd_hmc *h, u32 *failed_type)
{
	struct irdma_hmc_create_obj_info info;
	u32 i;
	int ret = 0;

	vd_cur = h;
	h->created = 1;
	for (i = vd_obj_from(h, 0); i < VD_N_OBJ; i = vd_obj_from(h, i + 1)) {
		memset(&info, 0, sizeof(info));
		info.hmc_info = &h->hmc;
		info.privileged = true;
		info.entry_type = IRDMA_SD_TYPE_DIRECT;
		info.rsrc_type = vd_obj_order[i];
		info.count = h->obj[vd_obj_order[i]].cnt;
		ret = irdma_sc_create_hmc_obj(&h->dev, &info);
		if (ret) {
			*failed_type = vd_obj_order[i];
			break;
		}
	}
	return ret;
}

/* Teardown's object deletion (hw.c: irdma_del_hmc_objects, the same
 * order, irdma_sc_del_hmc_obj per object with a count, not before a reset).
 * PBLE is left out: this scenario never backs PBLE chunks, and deleting
 * the PBLE object would drop use counts of SDs it never took. Returns the
 * first error (every object is still tried, as hw.c does). */
int vd_hmc_delete_all(struct vd_hmc *h)
{
	struct irdma_hmc_del_obj_info info;
	u32 i;
	int ret, first = 0;

	vd_cur = h;
	for (i = vd_obj_from(h, 0); i < VD_N_OBJ; i = vd_obj_from(h, i + 1)) {
		memset(&info, 0, sizeof(info));
		info.hmc_info = &h->hmc;
		info.privileged = true;
		info.rsrc_type = vd_obj_order[i];
		info.count = h->obj[vd_obj_order[i]].cnt;
		ret = irdma_sc_del_hmc_obj(&h->dev, &info, false);
		if (ret && !first)
			first = ret;
	}
	return first;
}

/* The recorded UPDATE_PE_SDS ops: returns the op count; copies up to `cap`
 * entries (cmd, data) and each op's entry count (up to `ops_cap`). */
u32 vd_hmc_take_sds(struct vd_hmc *h, u32 *op_cnt, u32 ops_cap, u64 *cmd, u64 *data,
		    u32 cap, u32 *n_entries)
{
	u32 i, n = h->n_ops;

	for (i = 0; i < n && i < ops_cap; i++)
		op_cnt[i] = h->op_cnt[i];
	for (i = 0; i < h->n_entries && i < cap; i++) {
		cmd[i] = h->ent_cmd[i];
		data[i] = h->ent_data[i];
	}
	*n_entries = h->n_entries;
	h->n_ops = 0;
	h->n_entries = 0;
	return n;
}

/* The backing page PA of SD `sd` (0 when not backed): direct, the 2 MiB
 * buffer; paged, the PD page. *paged tells which. */
u64 vd_hmc_sd_pa(struct vd_hmc *h, u32 sd, u8 *paged, u8 *valid)
{
	struct irdma_hmc_sd_entry *e;

	*paged = 0;
	*valid = 0;
	if (!h->hmc.sd_table.sd_entry || sd > h->hmc.sd_table.sd_cnt + h->hmc.first_sd_index)
		return 0;
	e = &h->hmc.sd_table.sd_entry[sd];
	*valid = e->valid;
	if (e->entry_type == IRDMA_SD_TYPE_PAGED) {
		*paged = 1;
		return e->u.pd_table.pd_page_addr.pa;
	}
	return e->entry_type == IRDMA_SD_TYPE_DIRECT ? e->u.bp.addr.pa : 0;
}

/* ---- paged SDs and PD entries: a PBLE chunk's backing and teardown ------ */

/*
 * The hmc.c calls pble.c's add_pble_prm makes for one PBLE chunk (pble.c
 * itself is not compiled: it needs the whole irdma_pci_f). The chunk is SD
 * `sd_idx`, PD slots rel_pd .. rel_pd + pages; data page i is at bus
 * address data_pa + i * 4096 (the harness's, never dereferenced: hmc.c only
 * writes it into the PD entry). As add_pble_prm does:
 *  - an SD already valid (shared with an object created before) keeps its
 *    backing: nothing is added or programmed;
 *  - else the type is irdma_get_type's for a privileged function: direct
 *    when the chunk starts the SD and spans its 512 pages, else paged;
 *  - irdma_add_sd_table_entry(type) (add_sd_direct / add_bp_pages);
 *  - paged: irdma_add_pd_table_entry(pd_idx++, page i) for each page whose
 *    PD entry is not valid yet, with the page as rsrc_pg (add_bp_pages);
 *  - irdma_hmc_sd_one(set) with the PD page or the 2 MiB buffer, then the
 *    SD is marked valid.
 * *type_out: the SD's entry type (1 paged, 2 direct; 0 none); *added: 1
 * when this call backed and programmed the SD.
 */
int vd_hmc_back_chunk(struct vd_hmc *h, u32 sd_idx, u32 rel_pd, u32 pages, u64 data_pa,
		      u8 *type_out, u8 *added)
{
	struct irdma_hmc_sd_entry *sd_entry;
	struct irdma_dma_mem mem;
	enum irdma_sd_entry_type type;
	u32 i, pd_idx;
	u64 pa;
	int ret;

	vd_cur = h;
	h->created = 1;
	*type_out = 0;
	*added = 0;
	/* the glue's own guard: add_pble_prm indexes the table blindly */
	if (!h->hmc.sd_table.sd_entry || sd_idx >= h->hmc.sd_table.sd_cnt ||
	    rel_pd + pages > IRDMA_HMC_PD_CNT_IN_SD || !pages)
		return -ERANGE;
	sd_entry = &h->hmc.sd_table.sd_entry[sd_idx];
	if (sd_entry->valid) {
		*type_out = (u8)sd_entry->entry_type;
		return 0;
	}
	type = (!rel_pd && pages == IRDMA_HMC_PD_CNT_IN_SD) ? IRDMA_SD_TYPE_DIRECT :
							       IRDMA_SD_TYPE_PAGED;
	ret = irdma_add_sd_table_entry(&h->hw, &h->hmc, sd_idx, type, IRDMA_HMC_DIRECT_BP_SIZE);
	if (ret)
		return ret;
	*type_out = (u8)sd_entry->entry_type;
	if (sd_entry->entry_type == IRDMA_SD_TYPE_PAGED) {
		pd_idx = sd_idx * IRDMA_HMC_PD_CNT_IN_SD + rel_pd;
		for (i = 0; i < pages; i++) {
			mem.pa = data_pa + (u64)i * 4096;
			mem.size = 4096;
			mem.va = NULL;
			if (!sd_entry->u.pd_table.pd_entry[rel_pd + i].valid) {
				ret = irdma_add_pd_table_entry(&h->dev, &h->hmc, pd_idx++, &mem);
				if (ret)
					return ret;
			}
		}
		pa = sd_entry->u.pd_table.pd_page_addr.pa;
	} else {
		pa = sd_entry->u.bp.addr.pa;
	}
	ret = irdma_hmc_sd_one(&h->dev, h->hmc.hmc_fn_id, pa, sd_idx, sd_entry->entry_type, true);
	if (ret)
		return ret;
	sd_entry->valid = true;
	*added = 1;
	return 0;
}

/* The 512 PD entries of paged SD `sd` as hmc.c wrote them; 0 when the SD
 * is not paged or has no PD page. */
int vd_hmc_pd_page(struct vd_hmc *h, u32 sd, u64 *out)
{
	struct irdma_hmc_sd_entry *e;

	if (!h->hmc.sd_table.sd_entry || sd >= h->hmc.sd_table.sd_cnt)
		return 0;
	e = &h->hmc.sd_table.sd_entry[sd];
	if (e->entry_type != IRDMA_SD_TYPE_PAGED || !e->u.pd_table.pd_page_addr.va)
		return 0;
	memcpy(out, e->u.pd_table.pd_page_addr.va, 512 * sizeof(u64));
	return 1;
}

/* PFHMC_PDINV's address in this device's BAR (icrdma_init_hw's hw_regs). */
u64 vd_hmc_pdinv_addr(struct vd_hmc *h)
{
	return (u64)(uintptr_t)h->dev.hw_regs[IRDMA_PFHMC_PDINV];
}

/* Teardown of the PBLE object (hw.c: irdma_del_hmc_objects ->
 * irdma_sc_del_hmc_obj for IRDMA_HMC_IW_PBLE, not before a reset): every
 * valid PD of its range removed (irdma_remove_pd_bp: entry zeroed, PDINV),
 * then its SDs cleared in groups (irdma_hmc_sd_grp). Run after the other
 * objects were deleted, so an SD the PBLE object shares with one of them is
 * no longer valid and is skipped. irdma_remove_pd_bp kfree's the PD-entry
 * array of a paged SD whose last PD went without clearing the pointer; the
 * glue forgets it so vd_hmc_free does not touch freed memory. */
int vd_hmc_delete_pble(struct vd_hmc *h)
{
	struct irdma_hmc_del_obj_info info;
	u32 i, n;
	int ret;

	vd_cur = h;
	if (!h->obj[IRDMA_HMC_IW_PBLE].cnt)
		return 0;
	memset(&info, 0, sizeof(info));
	info.hmc_info = &h->hmc;
	info.privileged = true;
	info.rsrc_type = IRDMA_HMC_IW_PBLE;
	info.count = h->obj[IRDMA_HMC_IW_PBLE].cnt;
	ret = irdma_sc_del_hmc_obj(&h->dev, &info, false);
	n = h->hmc.sd_table.sd_entry ? h->hmc.sd_table.sd_cnt : 0;
	for (i = 0; i < n; i++) {
		struct irdma_hmc_sd_entry *e = &h->hmc.sd_table.sd_entry[i];

		if (e->entry_type == IRDMA_SD_TYPE_PAGED && !e->u.pd_table.use_cnt &&
		    e->u.pd_table.pd_entry) {
			e->u.pd_table.pd_entry = NULL;
			e->u.pd_table.pd_entry_virt_mem.va = NULL;
		}
	}
	return ret;
}

/* A PBLE object alone (the harness's PBLE-only cases): base, count and
 * size 8 as irdma_sc_parse_fpm_commit_buf would set them, first SD 0, and
 * an SD table of just the SDs it spans (irdma_find_sd_index_limit's
 * limit), allocated as irdma_cfg_fpm_val does (sd_cnt + first + 1
 * zeroed entries). No other object has a count. */
int vd_hmc_pble_only(struct vd_hmc *h, u64 base, u32 cnt)
{
	struct irdma_hmc_obj_info *o = &h->obj[IRDMA_HMC_IW_PBLE];
	u64 end;

	if (!cnt || h->hmc.sd_table.sd_entry)
		return -EINVAL;
	o->base = base;
	o->cnt = cnt;
	o->max_cnt = cnt;
	o->size = 8;
	end = base + (u64)cnt * 8;
	h->hmc.first_sd_index = 0;
	h->hmc.sd_table.sd_cnt = (u32)((end - 1) / IRDMA_HMC_DIRECT_BP_SIZE + 1);
	h->hmc.sd_table.sd_entry =
		kzalloc(sizeof(struct irdma_hmc_sd_entry) * (h->hmc.sd_table.sd_cnt + 1), GFP_KERNEL);
	if (!h->hmc.sd_table.sd_entry)
		return -ENOMEM;
	h->created = 1;
	return 0;
}
