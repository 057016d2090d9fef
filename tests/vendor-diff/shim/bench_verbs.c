/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor bench, verbs level (issue #33): the kernel's verbs-level data
 * path -- drivers/infiniband/hw/irdma/verbs.c irdma_post_send and
 * irdma_poll_cq (with __irdma_poll_cq, irdma_poll_one, irdma_process_cqe,
 * irdma_flush_err_to_ib_wc_status, irdma_process_resize_list), verbs.h
 * set_ib_wc_op_sq / set_ib_wc_op_rq and utils.c irdma_generated_cmpls, of
 * Debian linux-source-6.1 (tests/vendor-diff/VENDOR_VERSION) -- over the
 * vendor's uk.c, run the way benches/uk.rs runs the driver's verbs cases.
 *
 * verbs.c cannot be compiled whole here: it includes main.h, which pulls in
 * ib_core, netdev, iw_cm and rdma_cm headers. So xtask copies the text of
 * exactly those functions out of the fetched tree at bench time (never
 * committed; `vendor_verbs.inc` in target/vendor-bench) and this file
 * supplies what they name: the structures (irdma_qp, irdma_cq, ib_send_wr,
 * ib_wc, ...) reduced to the members the functions use, with the kernel's
 * member names and types, and the kernel facilities they call. The copied
 * functions are compiled unmodified; member offsets differ from the
 * kernel's, instruction counts do not depend on them.
 *
 *   vendor_verbs_bench CASE N   run CASE N times
 *   vendor_verbs_bench check    every case with checks
 *
 * As in the driver's verbs cases, callgrind counts only inside the call
 * (`counted_post_verbs` / `counted_poll_verbs`, xtask's toggles); the
 * harness's own work between calls (the retirement, the "device" CQE) is
 * not counted. What each case counts (the driver's twin in benches/uk.rs):
 *
 * - verbs_post_write: irdma_post_send of one signaled 1-SGE RDMA WRITE
 *   ib_rdma_wr: the QP lock, the irdma_post_sq_info cleared and filled
 *   from the ib_send_wr (opcode switch), irdma_uk_rdma_write(post_sq =
 *   false), irdma_uk_qp_post_wr (mb, shadow-area read, one-store doorbell,
 *   VD_ONE_STORE_DOORBELL), the unlock. Driver twin: verbs_post_write
 *   (Qp::post_send on the device model; its doorbell's processing by the
 *   model not counted).
 * - verbs_post_write_batch32: the same with a chain of 32 ib_send_wrs
 *   linked by `next`, one doorbell; per WR.
 * - verbs_poll_cqe: irdma_poll_cq returning one SQ completion as an ib_wc
 *   (lock, resize-list walk, uk poll, irdma_process_cqe, the resize-list
 *   retirement). Driver twin: verbs_poll_cqe (Cq::poll, one completion).
 * - verbs_poll_empty: irdma_poll_cq on an empty CQ (lock, uk poll -ENOENT,
 *   irdma_generated_cmpls on the empty software-completion list). Driver
 *   twin: verbs_poll_empty.
 *
 * The lock: spin_lock_irqsave / spin_unlock_irqrestore are an uncontended
 * atomic exchange (acquire) and a release store -- what the kernel's
 * queued spinlock does when free -- without the interrupt-flag save and
 * restore (pushf/cli, popf), which user space cannot do: the vendor's
 * figures are a little low there. The driver's Qp::post_send takes no lock
 * (the caller's &mut); its Cq::poll takes the polled QP's table-slot lock
 * (one compare-exchange).
 */
#include "osdep.h"
#include "defs.h"
#include "user.h"
#include "irdma.h"

#include <stdio.h>

/* ---- the lock, as described above ------------------------------------ */
#undef spin_lock_irqsave
#undef spin_unlock_irqrestore
static inline void vd_lock(spinlock_t *l)
{
	while (__atomic_exchange_n(&l->unused, 1, __ATOMIC_ACQUIRE))
		;
}
static inline void vd_unlock(spinlock_t *l)
{
	__atomic_store_n(&l->unused, 0, __ATOMIC_RELEASE);
}
#define spin_lock_irqsave(l, f) ((void)(f), vd_lock(l))
#define spin_unlock_irqrestore(l, f) ((void)(f), vd_unlock(l))

/* ---- ib_core types: the members the copied functions use ------------- */
enum ib_wr_opcode {
	IB_WR_RDMA_WRITE,
	IB_WR_RDMA_WRITE_WITH_IMM,
	IB_WR_SEND,
	IB_WR_SEND_WITH_IMM,
	IB_WR_RDMA_READ,
	IB_WR_ATOMIC_CMP_AND_SWP,
	IB_WR_ATOMIC_FETCH_AND_ADD,
	IB_WR_BIND_MW,
	IB_WR_LSO,
	IB_WR_SEND_WITH_INV,
	IB_WR_RDMA_READ_WITH_INV,
	IB_WR_LOCAL_INV,
	IB_WR_REG_MR,
};

enum ib_send_flags {
	IB_SEND_FENCE = 1,
	IB_SEND_SIGNALED = 2,
	IB_SEND_SOLICITED = 4,
	IB_SEND_INLINE = 8,
};

enum ib_qp_type { IB_QPT_SMI, IB_QPT_GSI, IB_QPT_RC, IB_QPT_UC, IB_QPT_UD };

enum ib_wc_status {
	IB_WC_SUCCESS,
	IB_WC_LOC_LEN_ERR,
	IB_WC_LOC_QP_OP_ERR,
	IB_WC_LOC_EEC_OP_ERR,
	IB_WC_LOC_PROT_ERR,
	IB_WC_WR_FLUSH_ERR,
	IB_WC_MW_BIND_ERR,
	IB_WC_BAD_RESP_ERR,
	IB_WC_LOC_ACCESS_ERR,
	IB_WC_REM_INV_REQ_ERR,
	IB_WC_REM_ACCESS_ERR,
	IB_WC_REM_OP_ERR,
	IB_WC_RETRY_EXC_ERR,
	IB_WC_RNR_RETRY_EXC_ERR,
	IB_WC_LOC_RDD_VIOL_ERR,
	IB_WC_REM_INV_RD_REQ_ERR,
	IB_WC_REM_ABORT_ERR,
	IB_WC_INV_EECN_ERR,
	IB_WC_INV_EEC_STATE_ERR,
	IB_WC_FATAL_ERR,
	IB_WC_RESP_TIMEOUT_ERR,
	IB_WC_GENERAL_ERR,
};

enum ib_wc_opcode {
	IB_WC_SEND,
	IB_WC_RDMA_WRITE,
	IB_WC_RDMA_READ,
	IB_WC_COMP_SWAP,
	IB_WC_FETCH_ADD,
	IB_WC_BIND_MW,
	IB_WC_LOCAL_INV,
	IB_WC_LSO,
	IB_WC_REG_MR,
	IB_WC_MASKED_COMP_SWAP,
	IB_WC_MASKED_FETCH_ADD,
	IB_WC_RECV = 1 << 7,
	IB_WC_RECV_RDMA_WITH_IMM,
};

enum ib_wc_flags {
	IB_WC_GRH = 1,
	IB_WC_WITH_IMM = 1 << 1,
	IB_WC_WITH_INVALIDATE = 1 << 2,
	IB_WC_IP_CSUM_OK = 1 << 3,
	IB_WC_WITH_SMAC = 1 << 4,
	IB_WC_WITH_VLAN = 1 << 5,
	IB_WC_WITH_NETWORK_HDR_TYPE = 1 << 6,
};

enum rdma_network_type { RDMA_NETWORK_IB, RDMA_NETWORK_ROCE_V1, RDMA_NETWORK_IPV4, RDMA_NETWORK_IPV6 };

#define IB_OPCODE_RDMA_WRITE_LAST_WITH_IMMEDIATE 0x09
#define IB_OPCODE_RDMA_WRITE_ONLY_WITH_IMMEDIATE 0x0b
#define VLAN_VID_MASK 0x0fff
#define VLAN_PRIO_SHIFT 13

struct ib_device { int unused; };
struct ib_qp { enum ib_qp_type qp_type; };
struct ib_cq { struct ib_device *device; };
struct ib_ah { int unused; };
struct ib_mr { u64 iova; u64 length; u32 page_size; };

#include "common/vd_ib_send_wr.h"

struct ib_ud_wr {
	struct ib_send_wr wr;
	struct ib_ah *ah;
	u32 remote_qpn;
	u32 remote_qkey;
};

struct ib_reg_wr {
	struct ib_send_wr wr;
	struct ib_mr *mr;
	u32 key;
	int access;
};

static inline const struct ib_rdma_wr *rdma_wr(const struct ib_send_wr *wr)
{
	return container_of(wr, struct ib_rdma_wr, wr);
}
static inline const struct ib_ud_wr *ud_wr(const struct ib_send_wr *wr)
{
	return container_of(wr, struct ib_ud_wr, wr);
}
static inline const struct ib_reg_wr *reg_wr(const struct ib_send_wr *wr)
{
	return container_of(wr, struct ib_reg_wr, wr);
}

struct ib_wc {
	u64 wr_id;
	enum ib_wc_status status;
	enum ib_wc_opcode opcode;
	u32 vendor_err;
	u32 byte_len;
	struct ib_qp *qp;
	union {
		__be32 imm_data;
		u32 invalidate_rkey;
	} ex;
	u32 src_qp;
	u32 slid;
	int wc_flags;
	u16 pkey_index;
	u8 sl;
	u8 dlid_path_bits;
	u32 port_num;
	u8 smac[ETH_ALEN];
	u16 vlan_id;
	u8 network_hdr_type;
};

/* ---- irdma's verbs-level objects: the members the functions use ------- */
struct irdma_sc_qp { struct irdma_qp_uk qp_uk; };	/* qp_uk first, as type.h */
struct irdma_sc_cq { struct irdma_cq_uk cq_uk; };
struct irdma_sc_dev { struct irdma_hw_attrs hw_attrs; };	/* irdma.h's */
struct irdma_pci_f { struct irdma_sc_dev sc_dev; };
struct workqueue_struct { int unused; };
struct delayed_work { int unused; };
struct work_struct { int unused; };
struct irdma_device {
	struct ib_device ibdev;
	struct irdma_pci_f *rf;
	struct workqueue_struct *cleanup_wq;
};

struct irdma_qp {
	struct ib_qp ibqp;
	struct irdma_sc_qp sc_qp;
	struct irdma_device *iwdev;
	spinlock_t lock;
	u8 sig_all;
	u8 flush_issued;
	u8 hw_iwarp_state;
	struct delayed_work dwork_flush;
};

struct irdma_cq {
	struct ib_cq ibcq;
	struct irdma_sc_cq sc_cq;
	spinlock_t lock;
	struct list_head resize_list;
	struct irdma_cq_poll_info cur_cqe;
	struct list_head cmpl_generated;
};

struct irdma_cq_buf {
	struct irdma_cq_uk cq_uk;
	struct list_head list;
	struct work_struct work;
};

struct irdma_cmpl_gen {
	struct list_head list;
	struct irdma_cq_poll_info cpi;
};

struct irdma_sc_ah_info { u32 ah_idx; };
struct irdma_sc_ah { struct { u32 ah_idx; } ah_info; };
struct irdma_ah { struct ib_ah ibah; struct irdma_sc_ah sc_ah; };

struct irdma_pble_level1 { u64 *addr; u32 idx; };
struct irdma_pble_alloc { struct irdma_pble_level1 level1; };
struct irdma_pbl { struct irdma_pble_alloc pble_alloc; };
struct irdma_mr { struct ib_mr ibmr; struct irdma_pbl iwpbl; u32 npages; };

struct irdma_fast_reg_stag_info {
	u64 wr_id;
	u64 reg_addr_pa;
	u64 fbo;
	void *va;
	u64 total_len;
	u32 page_size;
	u32 chunk_size;
	u32 first_pm_pbl_index;
	enum irdma_addressing_type addr_type;
	u32 stag_idx;
	u16 pd_id;
	u8 stag_key;
	u8 access_rights;
	bool local_fence:1;
	bool read_fence:1;
	bool signaled:1;
	bool push_wqe:1;
	bool use_hmc_fcn_index:1;
	u8 hmc_fcn_index;
	bool use_pf_rid:1;
	bool defer_flag:1;
};

#define IRDMA_MIN_PAGES_PER_FMR 1
#define IRDMA_FLUSH_DELAY_MS 20

#define to_iwqp(q) container_of((q), struct irdma_qp, ibqp)
#define to_iwcq(c) container_of((c), struct irdma_cq, ibcq)
#define to_iwah(a) container_of((a), struct irdma_ah, ibah)
#define to_iwmr(m) container_of((m), struct irdma_mr, ibmr)
#define to_iwdev(d) container_of((d), struct irdma_device, ibdev)

#define list_for_each_safe(pos, n, head) \
	for (pos = (head)->next, n = pos->next; pos != (head); pos = n, n = pos->next)
#define list_first_entry_or_null(head, type, member) \
	(list_empty(head) ? NULL : list_entry((head)->next, type, member))

static inline unsigned long msecs_to_jiffies(unsigned int ms) { return ms; }
/* The cases never flush, never register, never resize: these abort so a
 * harness change that reaches one fails loudly. */
static inline bool mod_delayed_work(struct workqueue_struct *wq, struct delayed_work *w,
				    unsigned long d)
{
	(void)wq; (void)w; (void)d;
	abort();
}
static inline bool queue_work(struct workqueue_struct *wq, struct work_struct *w)
{
	(void)wq; (void)w;
	abort();
}
static inline u8 irdma_get_mr_access(int access) { (void)access; abort(); }
static inline int irdma_sc_mr_fast_register(struct irdma_sc_qp *qp,
					    struct irdma_fast_reg_stag_info *info, bool post_sq)
{
	(void)qp; (void)info; (void)post_sq;
	abort();
}

/* The vendor's functions, copied from the fetched tree by xtask. */
#include "vendor_verbs.inc"

/* ---- the harness ------------------------------------------------------ */
#include "vd_glue.h"

#define SQ_QUANTA 4096
#define CQ_SLOTS 4096
#define QP_ID 0x2a

struct vbench {
	struct irdma_qp *qp;
	struct irdma_cq *cq;
	u64 *cqm;
	u64 hw;
	struct ib_sge sge;
	struct ib_rdma_wr wr[32];
	struct ib_wc wc;
};

static void *ring(size_t bytes)
{
	void *p = aligned_alloc(4096, bytes);

	if (!p)
		abort();
	memset(p, 0, bytes);
	return p;
}

static struct irdma_device vd_dev;
static struct irdma_pci_f vd_rf;

static void vsetup(struct vbench *b)
{
	int ret = 0;
	struct vd_qp *q = vd_qp_new(ring(SQ_QUANTA * 32), SQ_QUANTA, ring(64 * 32), 64, 0,
				    13, 1, 101, QP_ID, IRDMA_QP_TYPE_ROCE_RC, &ret);
	struct vd_cq *c = vd_cq_new(b->cqm = ring(CQ_SLOTS * 32), CQ_SLOTS, 7);

	if (!q || !c)
		abort();
	vd_rf.sc_dev.hw_attrs.uk_attrs.max_hw_read_sges = 13;
	vd_dev.rf = &vd_rf;
	b->qp = calloc(1, sizeof(*b->qp));
	b->cq = calloc(1, sizeof(*b->cq));
	if (!b->qp || !b->cq)
		abort();
	/* the uk QP and CQ the glue set up, moved into the verbs objects (no
	 * pointer into themselves: ring, tracking and shadow are the glue's) */
	b->qp->sc_qp.qp_uk = *vd_qp_uk(q);
	b->qp->sc_qp.qp_uk.back_qp = b->qp;
	b->qp->ibqp.qp_type = IB_QPT_RC;
	b->qp->iwdev = &vd_dev;
	b->qp->hw_iwarp_state = IRDMA_QP_STATE_RTS;
	b->cq->sc_cq.cq_uk = *vd_cq_uk(c);
	b->cq->ibcq.device = &vd_dev.ibdev;
	INIT_LIST_HEAD(&b->cq->resize_list);
	INIT_LIST_HEAD(&b->cq->cmpl_generated);
	b->sge.addr = 0x7f001000;
	b->sge.length = 4096;
	b->sge.lkey = 0x1234;
	for (int i = 0; i < 32; i++) {
		struct ib_rdma_wr *w = &b->wr[i];

		memset(w, 0, sizeof(*w));
		w->wr.next = i < 31 ? &b->wr[i + 1].wr : NULL;
		w->wr.wr_id = 1;
		w->wr.sg_list = &b->sge;
		w->wr.num_sge = 1;
		w->wr.opcode = IB_WR_RDMA_WRITE;
		w->wr.send_flags = IB_SEND_SIGNALED;
		w->remote_addr = 0x90000000;
		w->rkey = 0x55;
	}
}

static inline struct irdma_qp_uk *uk(struct vbench *b)
{
	return &b->qp->sc_qp.qp_uk;
}

/* Retire what was posted, as bench.c's consume_all does: SQ tail = head
 * and the device's tail in the doorbell shadow area caught up, so the next
 * irdma_uk_qp_post_wr rings. */
static inline void retire(struct vbench *b)
{
	u32 head = uk(b)->sq_ring.head;

	uk(b)->sq_ring.tail = head;
	uk(b)->shadow_area[0] = FIELD_PREP(IRDMA_QP_DBSA_HW_SQ_TAIL, head);
}

static __attribute__((noinline)) int counted_post_verbs(struct ib_qp *qp,
							 const struct ib_send_wr *wr)
{
	const struct ib_send_wr *bad;

	return irdma_post_send(qp, wr, &bad);
}

static __attribute__((noinline)) int counted_poll_verbs(struct ib_cq *cq, struct ib_wc *wc)
{
	return irdma_poll_cq(cq, 1, wc);
}

/* The "device": one SQ CQE for the WQE at `idx`, as bench.c's
 * device_sq_cqe writes it (the completion context is the uk QP). */
static inline void sq_cqe(struct vbench *b, u32 idx)
{
	u64 *cqe = b->cqm + (b->hw % CQ_SLOTS) * 4;
	u64 valid = (b->hw / CQ_SLOTS) % 2 == 0;

	cqe[1] = (u64)(uintptr_t)uk(b);
	cqe[2] = FIELD_PREP(IRDMACQ_QPID, QP_ID);
	cqe[3] = FIELD_PREP(IRDMA_CQ_VALID, valid) | IRDMA_CQ_SQ |
		 FIELD_PREP(IRDMA_CQ_WQEIDX, idx);
	b->hw++;
}

/* Post one WQE at the uk level (no doorbell), as bench.c's post_with_cqe. */
static inline u32 post_one_uk(struct vbench *b)
{
	u32 idx = uk(b)->sq_ring.head;
	struct irdma_post_sq_info info = {0};

	info.wr_id = 1;
	info.signaled = true;
	info.op_type = IRDMA_OP_TYPE_RDMA_WRITE;
	info.op.rdma_write.num_lo_sges = 1;
	info.op.rdma_write.lo_sg_list = &b->sge;
	info.op.rdma_write.rem_addr.addr = 0x90000000;
	info.op.rdma_write.rem_addr.lkey = 0x55;
	if (irdma_uk_rdma_write(uk(b), &info, false))
		abort();
	return idx % SQ_QUANTA;
}

static int run(const char *c, long n, int check)
{
	struct vbench b;
	int bad = 0;

	memset(&b, 0, sizeof(b));
	vsetup(&b);
	if (!strcmp(c, "verbs_post_write") || !strcmp(c, "verbs_post_write_batch32")) {
		int batch = !strcmp(c, "verbs_post_write_batch32");
		const struct ib_send_wr *first = batch ? &b.wr[0].wr : &b.wr[31].wr;
		long calls = batch ? n / 32 : n;

		for (long i = 0; i < calls; i++) {
			u32 before = uk(&b)->sq_ring.head;

			if (check)
				*uk(&b)->wqe_alloc_db = 0;
			bad |= counted_post_verbs(&b.qp->ibqp, first) != 0;
			/* every WR posted (the head wraps), the doorbell rung */
			if (check && ((uk(&b)->sq_ring.head - before) % SQ_QUANTA != (batch ? 32u : 1u) ||
				      *uk(&b)->wqe_alloc_db != QP_ID))
				bad = 1;
			retire(&b);
		}
	} else if (!strcmp(c, "verbs_poll_cqe")) {
		for (long i = 0; i < n; i++) {
			int got;

			sq_cqe(&b, post_one_uk(&b));
			got = counted_poll_verbs(&b.cq->ibcq, &b.wc);
			if (check && (got != 1 || b.wc.wr_id != 1 || b.wc.status != IB_WC_SUCCESS ||
				      b.wc.opcode != IB_WC_RDMA_WRITE || b.wc.qp != &b.qp->ibqp ||
				      uk(&b)->sq_ring.tail != uk(&b)->sq_ring.head))
				bad = 1;
		}
	} else if (!strcmp(c, "verbs_poll_empty")) {
		for (long i = 0; i < n; i++)
			bad |= counted_poll_verbs(&b.cq->ibcq, &b.wc) != 0;
	} else {
		fprintf(stderr, "unknown case %s (verbs_post_write, verbs_post_write_batch32, "
				"verbs_poll_cqe, verbs_poll_empty)\n", c);
		return 2;
	}
	return bad;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "check")) {
		const char *cases[] = { "verbs_post_write", "verbs_post_write_batch32",
					"verbs_poll_cqe", "verbs_poll_empty" };
		int bad = 0;

		for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			int r = run(cases[i], 3 * SQ_QUANTA + 64, 1);

			if (r)
				fprintf(stderr, "check failed: %s\n", cases[i]);
			bad |= r;
		}
		return bad;
	}
	if (argc != 3) {
		fprintf(stderr, "usage: vendor_verbs_bench CASE N | check\n");
		return 2;
	}
	return run(argv[1], atol(argv[2]), 0) ? 1 : 0;
}
