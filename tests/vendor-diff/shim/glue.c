/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff glue: a flat C interface over the vendor's uk.c (Debian
 * linux-source-6.1 6.1.192-3, drivers/infiniband/hw/irdma/uk.c, compiled
 * unmodified) for the Rust harness. The harness owns every ring buffer; the
 * glue owns the vendor's QP/CQ structs and the tracking arrays.
 *
 * GEN_2 attributes (E810, icrdma_hw.c: icrdma_init_hw and the data-path
 * spec §1.1): 13 fragments, 101 inline bytes, 8-quanta SQ chunk, 32768 quanta.
 */
#include "osdep.h"
#include "defs.h"
#include "user.h"
#include "irdma.h"
#include "vd_glue.h"

/* ---- the recording BAR ------------------------------------------------ */

#define VD_LOG_MAX 4096 /* hmc.rs: up to 6 PBLE chunks x 512 PDINV writes */
/* Per thread: the harness's unit tests drive vendor QPs from parallel test
 * threads, and one thread's doorbell must not land in another's log. */
static _Thread_local struct { u64 addr; u32 val; } vd_log[VD_LOG_MAX];
static _Thread_local u32 vd_log_len;

void vd_bar_write(volatile void *addr, u32 val)
{
	if (vd_log_len < VD_LOG_MAX) {
		vd_log[vd_log_len].addr = (u64)(uintptr_t)addr;
		vd_log[vd_log_len].val = val;
	}
	vd_log_len++;
}

/* Copies out and clears the write log; returns how many writes happened. */
u32 vd_bar_take(u64 *addrs, u32 *vals, u32 cap)
{
	u32 n = vd_log_len, i;

	for (i = 0; i < n && i < cap && i < VD_LOG_MAX; i++) {
		addrs[i] = vd_log[i].addr;
		vals[i] = vd_log[i].val;
	}
	vd_log_len = 0;
	return n;
}

/* ---- a QP ------------------------------------------------------------- */

/* The WQE index field of a CQE is 15 bits (defs.h IRDMA_CQ_WQEIDX): the
 * tracking arrays are that long so a garbage index stays inside them (the
 * vendor indexes them with it unchecked). */
#define VD_TRK_ENTRIES 32768

struct vd_qp {
	struct irdma_qp_uk qp;
	struct irdma_uk_attrs attrs;
	u32 db;			/* the WQEALLOC doorbell register */
	__le64 shadow[8];	/* QP doorbell shadow area */
	struct irdma_sq_uk_wr_trk_info trk[VD_TRK_ENTRIES];
	u64 rq_wrid[VD_TRK_ENTRIES];
};

static void vd_gen2_attrs(struct irdma_uk_attrs *a)
{
	memset(a, 0, sizeof(*a));
	a->hw_rev = IRDMA_GEN_2;
	a->max_hw_wq_frags = 13;
	a->max_hw_read_sges = 13;
	a->max_hw_inline = 101;
	a->max_hw_sq_chunk = 8;
	a->max_hw_wq_quanta = 32768;
	a->max_hw_rq_quanta = 32768;
	a->min_hw_cq_size = 8;
	a->max_hw_cq_size = 1048575;
	a->feature_flags = IRDMA_FEATURE_RTS_AE | IRDMA_FEATURE_CQ_RESIZE;
}

struct vd_qp *vd_qp_new(u64 *sq, u32 sq_quanta, u64 *rq, u32 rq_size, u8 rq_shift,
			u32 max_sq_frags, u32 max_rq_frags, u32 max_inline, u32 qp_id,
			u8 qp_type, int *ret)
{
	struct irdma_qp_uk_init_info info;
	struct vd_qp *q = calloc(1, sizeof(*q));

	if (!q) {
		*ret = -ENOMEM;
		return NULL;
	}
	vd_gen2_attrs(&q->attrs);
	memset(&info, 0, sizeof(info));
	info.sq = (struct irdma_qp_quanta *)sq;
	info.rq = (struct irdma_qp_quanta *)rq;
	info.uk_attrs = &q->attrs;
	info.wqe_alloc_db = &q->db;
	info.shadow_area = q->shadow;
	info.sq_wrtrk_array = q->trk;
	info.rq_wrid_array = q->rq_wrid;
	info.qp_id = qp_id;
	info.sq_size = sq_quanta;
	info.sq_shift = 0;
	info.rq_size = rq_size;
	info.rq_shift = rq_shift;
	info.max_sq_frag_cnt = max_sq_frags;
	info.max_rq_frag_cnt = max_rq_frags;
	info.max_inline_data = max_inline;
	info.type = qp_type;
	*ret = irdma_uk_qp_init(&q->qp, &info);
	if (*ret) {
		free(q);
		return NULL;
	}
	q->qp.back_qp = q;
	return q;
}

void vd_qp_free(struct vd_qp *q)
{
	free(q);
}

/* The vendor's own QP and CQ structs, for the instruction-count bench
 * (shim/bench.c), which calls uk.c directly. */
struct irdma_qp_uk *vd_qp_uk(struct vd_qp *q)
{
	return &q->qp;
}

u64 vd_qp_db_addr(struct vd_qp *q)
{
	return (u64)(uintptr_t)&q->db;
}

/* The completion context CQEs of this QP carry (uk.c reads it as the QP). */
u64 vd_qp_ctx(struct vd_qp *q)
{
	return (u64)(uintptr_t)&q->qp;
}

/* The device's view in the doorbell shadow area: its SQ tail. */
void vd_qp_set_hw_tail(struct vd_qp *q, u32 hw_tail)
{
	q->shadow[0] = FIELD_PREP(IRDMA_QP_DBSA_HW_SQ_TAIL, hw_tail);
}

u32 vd_qp_initial_head(struct vd_qp *q)
{
	return q->qp.initial_ring.head;
}

struct vd_qp_state {
	u32 sq_head, sq_tail, sq_size, rq_head, rq_tail, rq_size;
	u8 swqe_polarity, rwqe_polarity, destroy_pending, pad;
};

void vd_qp_state(struct vd_qp *q, struct vd_qp_state *s)
{
	s->sq_head = q->qp.sq_ring.head;
	s->sq_tail = q->qp.sq_ring.tail;
	s->sq_size = q->qp.sq_ring.size;
	s->rq_head = q->qp.rq_ring.head;
	s->rq_tail = q->qp.rq_ring.tail;
	s->rq_size = q->qp.rq_ring.size;
	s->swqe_polarity = q->qp.swqe_polarity;
	s->rwqe_polarity = q->qp.rwqe_polarity;
	s->destroy_pending = q->qp.destroy_pending;
}

void vd_qp_set_destroy_pending(struct vd_qp *q, u8 on)
{
	q->qp.destroy_pending = on ? 1 : 0;
}

/* Moves the SQ and RQ tails to their heads: the device consumed everything
 * (the harness's way of reaching ring positions, not a vendor call). */
void vd_qp_consume_all(struct vd_qp *q)
{
	q->qp.sq_ring.tail = q->qp.sq_ring.head;
	q->qp.rq_ring.tail = q->qp.rq_ring.head;
}

/* irdma_uk_qp_post_wr: the doorbell after posts made with post_sq false. */
void vd_qp_post_wr(struct vd_qp *q)
{
	irdma_uk_qp_post_wr(&q->qp);
}

/* irdma_get_wqe_shift with the GEN_2 attributes. */
void vd_get_wqe_shift(u32 sge, u32 inline_data, u8 *shift)
{
	struct irdma_uk_attrs a;

	vd_gen2_attrs(&a);
	irdma_get_wqe_shift(&a, sge, inline_data, shift);
}

/* The push-mode flags (user.h struct irdma_qp_uk push_mode, push_dropped):
 * set between events by a script, read back after a poll. */
void vd_qp_set_push(struct vd_qp *q, u8 mode, u8 dropped)
{
	q->qp.push_mode = mode != 0;
	q->qp.push_dropped = dropped != 0;
}

u8 vd_qp_push(struct vd_qp *q)
{
	return (u8)(q->qp.push_mode ? 1 : 0) | (u8)(q->qp.push_dropped ? 2 : 0);
}

void vd_qp_trk(struct vd_qp *q, u32 idx, u64 *wrid, u32 *wr_len, u16 *quanta)
{
	idx %= VD_TRK_ENTRIES;
	*wrid = q->trk[idx].wrid;
	*wr_len = q->trk[idx].wr_len;
	*quanta = q->trk[idx].quanta;
}

u64 vd_qp_rq_wrid(struct vd_qp *q, u32 idx)
{
	return q->rq_wrid[idx % VD_TRK_ENTRIES];
}

/* One SQ post, the fields of irdma_post_sq_info flattened. */
enum vd_api {
	VD_RDMA_WRITE = 0,
	VD_INLINE_RDMA_WRITE = 1,
	VD_RDMA_READ = 2,
	VD_SEND = 3,
	VD_INLINE_SEND = 4,
	VD_LOCAL_INV = 5,
	VD_NOP = 6,
};

struct vd_sq_post {
	u64 wr_id;
	u64 remote_addr;
	struct ib_sge *sges;
	u32 num_sges;
	u32 api;
	u32 op_type;
	u32 rkey;
	u32 imm_data;
	u32 stag_to_inv;
	u32 qkey;
	u32 dest_qp;
	u32 ah_id;
	u32 target_stag;
	u8 signaled, read_fence, local_fence, imm_data_valid;
	u8 report_rtt, udp_hdr, l4len, read_inv_stag;
	u8 post_sq, pad[7];
};

int vd_sq_post(struct vd_qp *q, const struct vd_sq_post *p, u32 *wqe_idx_out)
{
	struct irdma_post_sq_info info;
	bool post_sq = p->post_sq != 0;
	u32 before = q->qp.sq_ring.head;
	int ret;

	memset(&info, 0, sizeof(info));
	info.wr_id = p->wr_id;
	info.op_type = (u8)p->op_type;
	info.l4len = p->l4len;
	info.signaled = p->signaled;
	info.read_fence = p->read_fence;
	info.local_fence = p->local_fence;
	info.imm_data_valid = p->imm_data_valid;
	info.report_rtt = p->report_rtt;
	info.udp_hdr = p->udp_hdr;
	info.imm_data = p->imm_data;
	info.stag_to_inv = p->stag_to_inv;
	switch (p->api) {
	case VD_RDMA_WRITE:
	case VD_INLINE_RDMA_WRITE:
		info.op.rdma_write.lo_sg_list = p->sges;
		info.op.rdma_write.num_lo_sges = p->num_sges;
		info.op.rdma_write.rem_addr.addr = p->remote_addr;
		info.op.rdma_write.rem_addr.lkey = p->rkey;
		ret = p->api == VD_RDMA_WRITE ?
			irdma_uk_rdma_write(&q->qp, &info, post_sq) :
			irdma_uk_inline_rdma_write(&q->qp, &info, post_sq);
		break;
	case VD_RDMA_READ:
		info.op.rdma_read.lo_sg_list = p->sges;
		info.op.rdma_read.num_lo_sges = p->num_sges;
		info.op.rdma_read.rem_addr.addr = p->remote_addr;
		info.op.rdma_read.rem_addr.lkey = p->rkey;
		ret = irdma_uk_rdma_read(&q->qp, &info, p->read_inv_stag, post_sq);
		break;
	case VD_SEND:
	case VD_INLINE_SEND:
		info.op.send.sg_list = p->sges;
		info.op.send.num_sges = p->num_sges;
		info.op.send.qkey = p->qkey;
		info.op.send.dest_qp = p->dest_qp;
		info.op.send.ah_id = p->ah_id;
		ret = p->api == VD_SEND ? irdma_uk_send(&q->qp, &info, post_sq) :
			irdma_uk_inline_send(&q->qp, &info, post_sq);
		break;
	case VD_LOCAL_INV:
		info.op.inv_local_stag.target_stag = p->target_stag;
		ret = irdma_uk_stag_local_invalidate(&q->qp, &info, post_sq);
		break;
	case VD_NOP:
		ret = irdma_nop(&q->qp, p->wr_id, p->signaled, post_sq);
		break;
	default:
		return -EINVAL;
	}
	/* The WQE's first quantum: NOP pads track 1 quantum each and come
	 * first; the WQE is the tracked start that ends at the new head. */
	if (!ret) {
		u32 size = q->qp.sq_ring.size;
		u32 head = q->qp.sq_ring.head;
		u32 idx = before, steps;

		*wqe_idx_out = 0xffffffff;
		for (steps = 0; steps < 16 && idx != head; steps++) {
			u32 n = q->trk[idx].quanta ? q->trk[idx].quanta : 1;

			if ((idx + n) % size == head) {
				*wqe_idx_out = idx;
				break;
			}
			idx = (idx + n) % size;
		}
	}
	return ret;
}

int vd_rq_post(struct vd_qp *q, u64 wr_id, struct ib_sge *sges, u32 num_sges,
	       u32 *wqe_idx_out)
{
	struct irdma_post_rq_info info;
	u32 head = q->qp.rq_ring.head;
	int ret;

	memset(&info, 0, sizeof(info));
	info.wr_id = wr_id;
	info.sg_list = sges;
	info.num_sges = num_sges;
	ret = irdma_uk_post_receive(&q->qp, &info);
	if (!ret)
		*wqe_idx_out = head;
	return ret;
}

/* ---- a CQ ------------------------------------------------------------- */

struct vd_cq {
	struct irdma_cq_uk cq;
	u32 arm_db;
	__le64 shadow[8];
};

struct vd_cq *vd_cq_new(u64 *ring, u32 size, u32 cq_id)
{
	struct irdma_cq_uk_init_info info;
	struct vd_cq *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	memset(&info, 0, sizeof(info));
	info.cq_base = (struct irdma_cqe *)ring;
	info.cq_size = size;
	info.cq_id = cq_id;
	info.cqe_alloc_db = &c->arm_db;
	info.shadow_area = c->shadow;
	irdma_uk_cq_init(&c->cq, &info);
	return c;
}

void vd_cq_free(struct vd_cq *c)
{
	free(c);
}

struct irdma_cq_uk *vd_cq_uk(struct vd_cq *c)
{
	return &c->cq;
}

u64 vd_cq_shadow(struct vd_cq *c, u32 i)
{
	return c->shadow[i & 7];
}

u32 vd_cq_head(struct vd_cq *c)
{
	return c->cq.cq_ring.head;
}

/* Places the CQ at `head` with expected polarity `pol` (the harness's way
 * of reaching ring positions, as if `head` CQEs had been consumed). */
void vd_cq_set_position(struct vd_cq *c, u32 head, u8 pol)
{
	c->cq.cq_ring.head = head;
	c->cq.cq_ring.tail = head;
	c->cq.polarity = pol;
}

int vd_status_unknown(void)
{
	return IRDMA_COMPL_STATUS_UNKNOWN;
}

u8 vd_cq_polarity(struct vd_cq *c)
{
	return c->cq.polarity;
}

struct vd_poll {
	u64 wr_id;
	u64 qp_handle;
	u32 bytes_xfered, qp_id, ud_src_qpn, imm_data, inv_stag, comp_status;
	u16 major_err, minor_err;
	u8 op_type, q_type, stag_invalid_set, error, solicited_event, imm_valid;
	u8 push_dropped, ipv4, ud_vlan_valid, ud_smac_valid;
	u16 ud_vlan;
	u32 tcp_seq_num_rtt;
	u8 ud_smac[6];
	u8 pad[6];
};

int vd_cq_poll_fill(struct vd_cq *c, struct vd_poll *o, u8 fill);

int vd_cq_poll(struct vd_cq *c, struct vd_poll *o)
{
	return vd_cq_poll_fill(c, o, 0);
}

/* The poll with every byte of the info struct set to `fill` first: two
 * runs with complementary fills tell which fields the poll wrote
 * (src/regen/dpcq.rs). */
int vd_cq_poll_fill(struct vd_cq *c, struct vd_poll *o, u8 fill)
{
	struct irdma_cq_poll_info info;
	int ret;

	memset(&info, fill, sizeof(info));
	ret = irdma_uk_cq_poll_cmpl(&c->cq, &info);
	memset(o, 0, sizeof(*o));
	o->wr_id = info.wr_id;
	o->qp_handle = (u64)(uintptr_t)info.qp_handle;
	o->bytes_xfered = info.bytes_xfered;
	o->qp_id = info.qp_id;
	o->ud_src_qpn = info.ud_src_qpn;
	o->imm_data = info.imm_data;
	o->inv_stag = info.inv_stag;
	o->comp_status = info.comp_status;
	o->major_err = info.major_err;
	o->minor_err = info.minor_err;
	o->op_type = info.op_type;
	o->q_type = info.q_type;
	o->stag_invalid_set = info.stag_invalid_set;
	o->error = info.error;
	o->solicited_event = info.solicited_event;
	o->imm_valid = info.imm_valid;
	o->push_dropped = info.push_dropped;
	o->ipv4 = info.ipv4;
	o->ud_vlan_valid = info.ud_vlan_valid;
	o->ud_smac_valid = info.ud_smac_valid;
	o->ud_vlan = info.ud_vlan;
	o->tcp_seq_num_rtt = info.tcp_seq_num_rtt;
	memcpy(o->ud_smac, info.ud_smac, 6);
	return ret;
}

void vd_cq_request_notification(struct vd_cq *c, u8 solicited)
{
	irdma_uk_cq_request_notification(&c->cq, solicited ? IRDMA_CQ_COMPL_SOLICITED :
							     IRDMA_CQ_COMPL_EVENT);
}

u64 vd_cq_db_addr(struct vd_cq *c)
{
	return (u64)(uintptr_t)&c->arm_db;
}
