/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff, rw area: flat entry points over the vendor's
 * drivers/infiniband/core/rw.c and mr_pool.c (Linux 6.1, Debian
 * linux-source-6.1 6.1.192-3), for src/rw.rs.
 *
 * rw.c and mr_pool.c are #included unmodified (one translation unit, so
 * rw.c's static force_mr module parameter can be set per session), with
 * shim/rw/include for the kernel (see rw_shim_kernel.h for what is
 * modelled and from where) and the vendor's own rdma/rw.h and
 * rdma/mr_pool.h. ib_sg_to_pages is the vendor's too: build.rs cuts it
 * verbatim out of core/verbs.c into vd_ib_sg_to_pages.c (OUT_DIR).
 *
 * The fakes: an ib_device with the attributes a session draws; an ib_pd
 * with its local_dma_lkey; an ib_qp whose rdma_mrs / sig_mrs lists are
 * mr_pool.c's; ops.map_mr_sg as irdma_map_mr_sg (hw/irdma/verbs.c) into
 * a page list of page_cnt = the max_num_sg the MR was allocated with
 * (irdma_alloc_mr); MR #i allocated gets lkey = rkey = (mr_base + i) << 8
 * | key0. DMA mapping: sg_dma_address = phys + the session's IOVA offset,
 * one mapping per entry (counted), failing with -ENOMEM on the table the
 * session arms. ib_post_send records the chain it is handed.
 */
#include "rw.c"
#include "mr_pool.c"
#include "vd_ib_sg_to_pages.c"

unsigned long vd_rw_warns;

#define VD_SLOTS 4
#define VD_MAX_MRS 64

struct vd_fake_mr {
	struct ib_mr ibmr;
	u32 index;
	u32 page_cnt;
	u32 npages;
	u64 *pbl;
	struct ib_sig_attrs sig;
};

struct vd_slot {
	struct rdma_rw_ctx ctx;
	bool live, sig;
	int dir;
	struct scatterlist *sg, *prot;
	u32 n, pn;
};

/* One flattened WR of a chain (src/rw.rs: VdRwWr). */
struct vd_rw_wr {
	u32 opcode;
	u32 send_flags;
	u32 cqe; /* 0 null, 1 the caller's cqe, 2 the chain WR's own, 3 other */
	u32 num_sge;
	u32 sge_start; /* into the SGE array */
	u32 rkey;
	u64 remote_addr;
	u32 invalidate_rkey;
	u32 is_chain;
	/* REG_MR / REG_MR_INTEGRITY */
	u32 reg_key;
	u32 reg_access;
	u32 mr_index;
	u32 mr_npages;
	u64 mr_iova;
	u64 mr_length;
};

struct vd_rw_dev {
	u32 iwarp;
	/* the six u32 limits, in src/rw.rs's order, copied into the ib_device */
	struct ib_device_attr attrs;
	u32 local_dma_lkey;
	u32 force_mr;
	u32 max_write_sge;
	u32 max_read_sge;
	u32 key0;
	u32 mr_base;
	u64 iova_off;
};

struct vd_rw_sess {
	struct ib_device dev;
	struct ib_pd pd;
	struct ib_qp qp;
	bool force_mr;
	u64 iova_off;
	u32 key0, mr_base;
	int maps_live;
	int fail_map_at; /* the Nth table mapping from now fails; 0 never */
	u32 nmrs;
	struct vd_fake_mr *mrs[VD_MAX_MRS];
	u32 allocs, allocs_max_sg, deregs;
	struct vd_slot slots[VD_SLOTS];
	struct ib_cqe caller_cqe, chain_cqe;
	struct ib_send_wr chain_wr;
	/* what ib_post_send was handed */
	const struct ib_send_wr *posted;
	int posts;
};

/* The session in use: ib_dma_* and ib_alloc_mr reach it through here
 * (the harness is single threaded). */
static struct vd_rw_sess *vd_cur;

int ib_dma_map_sgtable_attrs(struct ib_device *dev, struct sg_table *sgt,
			     enum dma_data_direction dir, unsigned long attrs)
{
	struct scatterlist *sg;
	unsigned int i;

	(void)dev; (void)dir; (void)attrs;
	if (vd_cur->fail_map_at && --vd_cur->fail_map_at == 0)
		return -ENOMEM;
	for_each_sg(sgt->sgl, sg, sgt->orig_nents, i) {
		sg->dma_address = sg->phys + vd_cur->iova_off;
		sg->dma_length = sg->length;
	}
	sgt->nents = sgt->orig_nents;
	vd_cur->maps_live += sgt->orig_nents;
	return 0;
}

void ib_dma_unmap_sgtable_attrs(struct ib_device *dev, struct sg_table *sgt,
				enum dma_data_direction dir, unsigned long attrs)
{
	(void)dev; (void)dir; (void)attrs;
	vd_cur->maps_live -= sgt->orig_nents;
}

void ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
		     enum dma_data_direction dir)
{
	(void)dev; (void)sg; (void)dir;
	vd_cur->maps_live -= nents;
}

static int vd_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct vd_fake_mr *m = container_of(ibmr, struct vd_fake_mr, ibmr);

	if (unlikely(m->npages == m->page_cnt))
		return -ENOMEM;
	m->pbl[m->npages++] = addr;
	return 0;
}

static int vd_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
			unsigned int *sg_offset)
{
	struct vd_fake_mr *m = container_of(ibmr, struct vd_fake_mr, ibmr);

	m->npages = 0;
	return ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, vd_set_page);
}

static struct ib_mr *vd_new_mr(struct ib_pd *pd, enum ib_mr_type type, u32 max_num_sg)
{
	struct vd_rw_sess *s = vd_cur;
	struct vd_fake_mr *m;

	if (s->nmrs == VD_MAX_MRS)
		return ERR_PTR(-ENOMEM);
	m = calloc(1, sizeof(*m));
	m->pbl = calloc(max_num_sg ? max_num_sg : 1, sizeof(u64));
	m->index = s->nmrs;
	m->page_cnt = max_num_sg;
	m->ibmr.device = pd->device;
	m->ibmr.pd = pd;
	m->ibmr.type = type;
	m->ibmr.lkey = m->ibmr.rkey = ((s->mr_base + s->nmrs) << 8) | (s->key0 & 0xff);
	m->ibmr.sig_attrs = &m->sig;
	s->mrs[s->nmrs++] = m;
	s->allocs++;
	s->allocs_max_sg = max_num_sg;
	return &m->ibmr;
}

struct ib_mr *ib_alloc_mr(struct ib_pd *pd, enum ib_mr_type mr_type, u32 max_num_sg)
{
	return vd_new_mr(pd, mr_type, max_num_sg);
}

struct ib_mr *ib_alloc_mr_integrity(struct ib_pd *pd, u32 max_num_data_sg,
				    u32 max_num_meta_sg)
{
	(void)max_num_meta_sg;
	/* E810 has no alloc_mr_integrity op (verbs.c: -EOPNOTSUPP) */
	(void)pd; (void)max_num_data_sg;
	return ERR_PTR(-EOPNOTSUPP);
}

int ib_map_mr_sg_pi(struct ib_mr *mr, struct scatterlist *data_sg, int data_sg_nents,
		    unsigned int *data_sg_offset, struct scatterlist *meta_sg,
		    int meta_sg_nents, unsigned int *meta_sg_offset, unsigned int page_size)
{
	(void)mr; (void)data_sg; (void)data_sg_nents; (void)data_sg_offset;
	(void)meta_sg; (void)meta_sg_nents; (void)meta_sg_offset; (void)page_size;
	return -EOPNOTSUPP;
}

int ib_dereg_mr(struct ib_mr *mr)
{
	(void)mr;
	vd_cur->deregs++;
	return 0;
}

int ib_post_send(struct ib_qp *qp, const struct ib_send_wr *send_wr,
		 const struct ib_send_wr **bad_send_wr)
{
	(void)qp; (void)bad_send_wr;
	vd_cur->posted = send_wr;
	vd_cur->posts++;
	return 0;
}

/* ---- the API src/rw.rs calls ---- */

struct vd_rw_sess *vd_rw_new(const struct vd_rw_dev *d)
{
	struct vd_rw_sess *s = calloc(1, sizeof(*s));

	s->dev.attrs = d->attrs;
	s->dev.ops.map_mr_sg = vd_map_mr_sg;
	s->dev.iwarp = d->iwarp;
	s->pd.device = &s->dev;
	s->pd.local_dma_lkey = d->local_dma_lkey;
	s->qp.device = &s->dev;
	s->qp.pd = &s->pd;
	s->qp.max_write_sge = d->max_write_sge;
	s->qp.max_read_sge = d->max_read_sge;
	INIT_LIST_HEAD(&s->qp.rdma_mrs);
	INIT_LIST_HEAD(&s->qp.sig_mrs);
	s->force_mr = d->force_mr;
	s->iova_off = d->iova_off;
	s->key0 = d->key0;
	s->mr_base = d->mr_base;
	s->chain_wr.opcode = IB_WR_SEND;
	s->chain_wr.wr_cqe = &s->chain_cqe;
	s->chain_wr.send_flags = IB_SEND_SIGNALED;
	return s;
}

static void vd_enter(struct vd_rw_sess *s)
{
	vd_cur = s;
	rdma_rw_force_mr = s->force_mr;
}

/* rdma_rw_init_mrs; returns its result, *allocs / *max_sg what it allocated */
int vd_rw_init_mrs(struct vd_rw_sess *s, u32 max_rdma_ctxs, u32 create_flags, u32 *allocs,
		   u32 *max_sg)
{
	struct ib_qp_init_attr a = { .cap = { .max_rdma_ctxs = max_rdma_ctxs },
				     .create_flags = create_flags, .port_num = 1 };
	int r;

	vd_enter(s);
	s->allocs = 0;
	r = rdma_rw_init_mrs(&s->qp, &a);
	*allocs = s->allocs;
	*max_sg = s->allocs_max_sg;
	return r;
}

/* rdma_rw_cleanup_mrs; returns the MRs deregistered */
u32 vd_rw_cleanup(struct vd_rw_sess *s)
{
	vd_enter(s);
	s->deregs = 0;
	rdma_rw_cleanup_mrs(&s->qp);
	return s->deregs;
}

void vd_rw_free(struct vd_rw_sess *s)
{
	u32 i;

	for (i = 0; i < VD_SLOTS; i++) {
		free(s->slots[i].sg);
		free(s->slots[i].prot);
	}
	for (i = 0; i < s->nmrs; i++) {
		free(s->mrs[i]->pbl);
		free(s->mrs[i]);
	}
	free(s);
}

/* One scatter-list entry as src/rw.rs gives it. */
struct vd_rw_sge {
	u64 phys;
	u32 length;
	u32 pad;
};

static struct scatterlist *vd_sgl(const struct vd_rw_sge *e, u32 n)
{
	struct scatterlist *sg = calloc(n ? n : 1, sizeof(*sg));
	u32 i;

	for (i = 0; i < n; i++) {
		sg[i].phys = e[i].phys;
		sg[i].length = e[i].length;
		/* stale values a previous mapping might have left */
		sg[i].dma_address = 0xdead0000ull;
		sg[i].dma_length = 0;
	}
	if (n)
		sg[n - 1].end = true;
	return sg;
}

int vd_rw_ctx_init(struct vd_rw_sess *s, u32 slot, const struct vd_rw_sge *e, u32 n,
		   u32 sg_offset, u64 remote_addr, u32 rkey, int dir, int fail_map_at)
{
	struct vd_slot *sl = &s->slots[slot];
	int r;

	vd_enter(s);
	free(sl->sg);
	sl->sg = vd_sgl(e, n);
	sl->n = n;
	sl->dir = dir;
	sl->sig = false;
	memset(&sl->ctx, 0, sizeof(sl->ctx));
	s->fail_map_at = fail_map_at;
	r = rdma_rw_ctx_init(&sl->ctx, &s->qp, 1, sl->sg, n, sg_offset, remote_addr, rkey,
			     (enum dma_data_direction)dir);
	s->fail_map_at = 0;
	sl->live = r >= 0;
	return r;
}

int vd_rw_sig_init(struct vd_rw_sess *s, u32 slot, const struct vd_rw_sge *e, u32 n,
		   const struct vd_rw_sge *pe, u32 pn, u64 remote_addr, u32 rkey, int dir,
		   int fail_map_at)
{
	struct vd_slot *sl = &s->slots[slot];
	struct ib_sig_attrs attrs = { 0 };
	int r;

	vd_enter(s);
	free(sl->sg);
	free(sl->prot);
	sl->sg = vd_sgl(e, n);
	sl->prot = vd_sgl(pe, pn);
	sl->n = n;
	sl->pn = pn;
	sl->dir = dir;
	sl->sig = true;
	memset(&sl->ctx, 0, sizeof(sl->ctx));
	s->fail_map_at = fail_map_at;
	r = rdma_rw_ctx_signature_init(&sl->ctx, &s->qp, 1, sl->sg, n, pn ? sl->prot : NULL,
				       pn, &attrs, remote_addr, rkey,
				       (enum dma_data_direction)dir);
	s->fail_map_at = 0;
	sl->live = r >= 0;
	return r;
}

void vd_rw_ctx_info(struct vd_rw_sess *s, u32 slot, u32 *type, u32 *nr_ops)
{
	*type = s->slots[slot].ctx.type;
	*nr_ops = s->slots[slot].ctx.nr_ops;
}

static u32 vd_mr_index(struct vd_rw_sess *s, const struct ib_mr *mr)
{
	u32 i;

	for (i = 0; i < s->nmrs; i++)
		if (&s->mrs[i]->ibmr == mr)
			return i;
	return 0xffffffffu;
}

/* Flattens the chain from `w` (at most wcap WRs, scap SGEs); returns the
 * WR count, or -1 when the caps are too small (a loop, say). */
static int vd_flatten(struct vd_rw_sess *s, const struct ib_send_wr *w, struct vd_rw_wr *out,
		      u32 wcap, struct ib_sge *sges, u32 scap)
{
	u32 n = 0, ns = 0;
	int j;

	for (; w; w = w->next) {
		struct vd_rw_wr *o = &out[n];

		if (n == wcap)
			return -1;
		memset(o, 0, sizeof(*o));
		o->opcode = w->opcode;
		o->send_flags = w->send_flags;
		o->cqe = !w->wr_cqe ? 0 : w->wr_cqe == &s->caller_cqe ? 1 :
			 w->wr_cqe == &s->chain_cqe ? 2 : 3;
		o->is_chain = w == &s->chain_wr;
		o->num_sge = w->num_sge;
		o->sge_start = ns;
		for (j = 0; j < w->num_sge; j++) {
			if (ns == scap)
				return -1;
			sges[ns++] = w->sg_list[j];
		}
		switch (w->opcode) {
		case IB_WR_RDMA_WRITE:
		case IB_WR_RDMA_READ:
		case IB_WR_RDMA_READ_WITH_INV: {
			const struct ib_rdma_wr *r = container_of(w, struct ib_rdma_wr, wr);

			o->remote_addr = r->remote_addr;
			o->rkey = r->rkey;
			if (w->opcode == IB_WR_RDMA_READ_WITH_INV)
				o->invalidate_rkey = w->ex.invalidate_rkey;
			break;
		}
		case IB_WR_LOCAL_INV:
			o->invalidate_rkey = w->ex.invalidate_rkey;
			break;
		case IB_WR_REG_MR:
		case IB_WR_REG_MR_INTEGRITY: {
			const struct ib_reg_wr *r = container_of(w, struct ib_reg_wr, wr);
			u32 mi = vd_mr_index(s, r->mr);

			o->reg_key = r->key;
			o->reg_access = r->access;
			o->mr_index = mi;
			o->mr_iova = r->mr->iova;
			o->mr_length = r->mr->length;
			o->mr_npages = mi < s->nmrs ? s->mrs[mi]->npages : 0;
			break;
		}
		default:
			break;
		}
		n++;
	}
	return (int)n;
}

/* rdma_rw_ctx_wrs (post = 0) or rdma_rw_ctx_post (post = 1), with the
 * caller's cqe or (chain = 1) the session's chain WR; flattens the chain. */
int vd_rw_wrs(struct vd_rw_sess *s, u32 slot, int chain, int post, struct vd_rw_wr *out,
	      u32 wcap, struct ib_sge *sges, u32 scap)
{
	struct vd_slot *sl = &s->slots[slot];
	const struct ib_send_wr *first;

	vd_enter(s);
	/* the chain WR is the caller's: fresh for each call */
	s->chain_wr.next = NULL;
	s->chain_wr.send_flags = IB_SEND_SIGNALED;
	s->chain_wr.wr_cqe = &s->chain_cqe;
	if (post) {
		s->posted = NULL;
		if (rdma_rw_ctx_post(&sl->ctx, &s->qp, 1, chain ? NULL : &s->caller_cqe,
				     chain ? &s->chain_wr : NULL))
			return -2;
		first = s->posted;
	} else {
		first = rdma_rw_ctx_wrs(&sl->ctx, &s->qp, 1, chain ? NULL : &s->caller_cqe,
					chain ? &s->chain_wr : NULL);
	}
	return vd_flatten(s, first, out, wcap, sges, scap);
}

/* The page list MR #index holds. */
u32 vd_rw_mr_pages(struct vd_rw_sess *s, u32 index, u64 *out, u32 cap)
{
	u32 i, n;

	if (index >= s->nmrs)
		return 0;
	n = s->mrs[index]->npages;
	for (i = 0; i < n && i < cap; i++)
		out[i] = s->mrs[index]->pbl[i];
	return n;
}

void vd_rw_destroy(struct vd_rw_sess *s, u32 slot)
{
	struct vd_slot *sl = &s->slots[slot];

	vd_enter(s);
	if (sl->sig)
		rdma_rw_ctx_destroy_signature(&sl->ctx, &s->qp, 1, sl->sg, sl->n, sl->prot,
					      sl->pn, (enum dma_data_direction)sl->dir);
	else
		rdma_rw_ctx_destroy(&sl->ctx, &s->qp, 1, sl->sg, sl->n,
				    (enum dma_data_direction)sl->dir);
	sl->live = false;
}

/* Pool and mapping state: mrs_used, live mappings, the free list in the
 * order mr_pool.c takes from it (MR indexes), every MR's lkey and
 * need_inval. Returns the free-list length. */
u32 vd_rw_state(struct vd_rw_sess *s, int *mrs_used, int *maps_live, u32 *free_order,
		u32 *keys, u8 *need_inval, u32 cap, u32 *nmrs)
{
	struct list_head *p;
	u32 n = 0, i;

	*mrs_used = s->qp.mrs_used;
	*maps_live = s->maps_live;
	for (p = s->qp.rdma_mrs.next; p != &s->qp.rdma_mrs && n < cap; p = p->next) {
		struct ib_mr *mr = container_of(p, struct ib_mr, qp_entry);

		free_order[n++] = vd_mr_index(s, mr);
	}
	for (i = 0; i < s->nmrs && i < cap; i++) {
		keys[i] = s->mrs[i]->ibmr.lkey;
		need_inval[i] = s->mrs[i]->ibmr.need_inval;
	}
	*nmrs = s->nmrs;
	return n;
}

/* The sizing entry points. */
unsigned int vd_rw_mr_factor(struct vd_rw_sess *s, unsigned int maxpages)
{
	vd_enter(s);
	return rdma_rw_mr_factor(&s->dev, 1, maxpages);
}

unsigned int vd_rw_max_send_wr(struct vd_rw_sess *s, unsigned int ctxs, u32 flags)
{
	vd_enter(s);
	return rdma_rw_max_send_wr(&s->dev, 1, ctxs, flags);
}

u32 vd_rw_init_qp(struct vd_rw_sess *s, u32 max_send_wr, u32 ctxs, u32 flags)
{
	struct ib_qp_init_attr a = { .cap = { .max_send_wr = max_send_wr, .max_rdma_ctxs = ctxs },
				     .create_flags = flags, .port_num = 1 };

	vd_enter(s);
	rdma_rw_init_qp(&s->dev, &a);
	return a.cap.max_send_wr;
}

unsigned long vd_rw_take_warns(void)
{
	unsigned long w = vd_rw_warns;

	vd_rw_warns = 0;
	return w;
}
