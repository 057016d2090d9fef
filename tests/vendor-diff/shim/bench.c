/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor bench (issue #33): the vendor's uk-level data path, the
 * kernel's drivers/infiniband/hw/irdma/uk.c (Debian linux-source-6.1,
 * tests/vendor-diff/VENDOR_VERSION, compiled unmodified), run the way
 * benches/uk.rs runs the driver's, for `cargo xtask bench`.
 *
 *   vendor_bench CASE N   run CASE N times (xtask runs N and 2N under
 *                         callgrind; the figure is the difference / N)
 *   vendor_bench check    run every case a few thousand times with checks:
 *                         the doorbell rung as the case says, every CQE
 *                         returned with its WR id, the empty poll empty
 *
 * Built by xtask (not cargo) as one gcc -O2 -fno-strict-aliasing program
 * from uk.c, the differential harness's own glue.c and shim headers, and
 * this file, with VD_ONE_STORE_DOORBELL: the vendor's writel is then one
 * volatile store into host memory (irdma_shim_kernel.h), the same doorbell
 * as the driver's bench BAR (benches/common NopBar).
 *
 * What each case counts (the driver's twin in benches/common/mod.rs):
 *
 * - post_write: irdma_uk_rdma_write(post_sq = true) of one signaled 1-SGE
 *   RDMA WRITE from an irdma_post_sq_info built once before the loop (the
 *   uk input; the kernel's verbs irdma_post_send builds it from the
 *   ib_send_wr, not counted here), which ends in irdma_uk_qp_post_wr (mb,
 *   shadow-area read, one-store doorbell); then the harness retires it
 *   (SQ tail = head, and the shadow area's hardware tail = head, so the
 *   next doorbell is rung as a caught-up device would have it: 3
 *   instructions). No lock: uk.c takes none (the kernel's verbs layer
 *   does, spin_lock_irqsave around the post). Driver twin: post_write_op
 *   (QpUk::post_send from a SendWr, its conversion included, then
 *   consume_all).
 * - post_write_batch32: 32 irdma_uk_rdma_write(post_sq = false) and one
 *   irdma_uk_qp_post_wr, as the kernel's irdma_post_send does for a chain,
 *   then the retirement; per WR.
 * - poll_cqe - poll_cqe_base: irdma_uk_cq_poll_cmpl returning one SQ CQE
 *   into an irdma_cq_poll_info (SQ retirement from the tracking array, CQ
 *   head move and shadow-area head store included; no conversion to an
 *   ib_wc, which the kernel's irdma_process_cqe does at the verbs level).
 *   poll_cqe = post (post_sq = false) + "device" writes the CQE + poll;
 *   poll_cqe_base = the same without the poll (retire by hand, clear the
 *   CQE). Driver twin: poll_cqe_op - poll_cqe_base_op (poll_cq, its
 *   WorkCompletion conversion included).
 * - poll_empty: irdma_uk_cq_poll_cmpl on an empty CQ (-ENOENT). Driver
 *   twin: poll_empty_op.
 */
#include "osdep.h"
#include "defs.h"
#include "user.h"
#include "irdma.h"

#include <stdio.h>

#include "vd_glue.h"

/* The driver bench's sizes and values (benches/common/mod.rs). */
#define SQ_QUANTA 4096
#define CQ_SLOTS 4096
#define QP_ID 0x2a

struct bench {
	struct irdma_qp_uk *qp;
	struct irdma_cq_uk *cq;
	volatile u32 *db;
	u64 *cqm;
	u64 hw;		/* CQEs the "device" wrote */
	struct irdma_post_sq_info wr;
	struct irdma_cq_poll_info info;
	struct ib_sge sge;
};

static void *ring(size_t bytes)
{
	void *p = aligned_alloc(4096, bytes);

	if (!p) {
		fprintf(stderr, "vendor_bench: out of memory\n");
		exit(2);
	}
	memset(p, 0, bytes);
	return p;
}

static void setup(struct bench *b)
{
	struct vd_qp *q;
	struct vd_cq *c;
	int ret;

	memset(b, 0, sizeof(*b));
	q = vd_qp_new(ring(SQ_QUANTA * 32), SQ_QUANTA, ring(64 * 32), 64, 0, 13, 13, 101,
		      QP_ID, IRDMA_QP_TYPE_ROCE_RC, &ret);
	b->cqm = ring(CQ_SLOTS * 32);
	c = vd_cq_new(b->cqm, CQ_SLOTS, 7);
	if (!q || !c) {
		fprintf(stderr, "vendor_bench: QP/CQ init failed (%d)\n", ret);
		exit(2);
	}
	b->qp = vd_qp_uk(q);
	b->cq = vd_cq_uk(c);
	b->db = (volatile u32 *)(uintptr_t)vd_qp_db_addr(q);
	/* benches/common SGE and write_wr: a signaled 1-SGE RDMA WRITE */
	b->sge.addr = 0x7f001000;
	b->sge.length = 4096;
	b->sge.lkey = 0x1234;
	b->wr.wr_id = 1;
	b->wr.op_type = IRDMA_OP_TYPE_RDMA_WRITE;
	b->wr.signaled = true;
	b->wr.op.rdma_write.lo_sg_list = &b->sge;
	b->wr.op.rdma_write.num_lo_sges = 1;
	b->wr.op.rdma_write.rem_addr.addr = 0x90000000;
	b->wr.op.rdma_write.rem_addr.lkey = 0x55;
}

/* The device consumed every WQE: SQ tail = head, and its tail in the
 * doorbell shadow area (defs.h IRDMA_QP_DBSA_HW_SQ_TAIL) caught up, so
 * irdma_uk_qp_post_wr rings the doorbell for the next post. */
static inline void consume_all(struct bench *b)
{
	u32 head = b->qp->sq_ring.head;

	b->qp->sq_ring.tail = head;
	b->qp->shadow_area[0] = FIELD_PREP(IRDMA_QP_DBSA_HW_SQ_TAIL, head);
}

/* The "device" writes a successful SQ CQE for WQE `idx` (defs.h field
 * masks: comp_ctx in qword 1, QP id in qword 2, valid / SQ / WQE index in
 * qword 3), with the valid bit of the pass it is on. Returns its slot. */
static inline u64 *device_sq_cqe(struct bench *b, u32 idx)
{
	u64 *cqe = b->cqm + (b->hw % CQ_SLOTS) * 4;
	u64 valid = (b->hw / CQ_SLOTS) % 2 == 0;

	cqe[1] = (u64)(uintptr_t)b->qp;
	cqe[2] = FIELD_PREP(IRDMACQ_QPID, QP_ID);
	cqe[3] = FIELD_PREP(IRDMA_CQ_VALID, valid) | IRDMA_CQ_SQ |
		 FIELD_PREP(IRDMA_CQ_WQEIDX, idx);
	b->hw++;
	return cqe;
}

static inline int post_write(struct bench *b)
{
	int ret = irdma_uk_rdma_write(b->qp, &b->wr, true);

	consume_all(b);
	return ret;
}

static inline int post_write_batch32(struct bench *b)
{
	int ret = 0, i;

	for (i = 0; i < 32; i++)
		ret |= irdma_uk_rdma_write(b->qp, &b->wr, false);
	irdma_uk_qp_post_wr(b->qp);
	consume_all(b);
	return ret;
}

/* Post one WQE (no doorbell), the device writes its CQE. */
static inline u64 *post_with_cqe(struct bench *b)
{
	u32 idx = b->qp->sq_ring.head;

	if (irdma_uk_rdma_write(b->qp, &b->wr, false))
		return NULL;
	return device_sq_cqe(b, idx);
}

static inline int poll_cqe(struct bench *b)
{
	if (!post_with_cqe(b))
		return -1;
	return irdma_uk_cq_poll_cmpl(b->cq, &b->info);
}

static inline int poll_cqe_base(struct bench *b)
{
	u64 *cqe = post_with_cqe(b);

	if (!cqe)
		return -1;
	b->qp->sq_ring.tail = b->qp->sq_ring.head;
	cqe[3] = 0;
	return 0;
}

static inline int poll_empty(struct bench *b)
{
	return irdma_uk_cq_poll_cmpl(b->cq, &b->info) == -ENOENT ? 0 : -1;
}

static int fail(const char *what, u64 i)
{
	fprintf(stderr, "vendor_bench check: %s (iteration %llu)\n", what,
		(unsigned long long)i);
	return 1;
}

/* Every case past a ring wrap, with the checks the measured loop leaves out. */
static int check(void)
{
	struct bench b;
	u64 i;

	setup(&b);
	for (i = 0; i < 3 * SQ_QUANTA; i++) {
		*b.db = 0;
		if (post_write(&b))
			return fail("post_write failed", i);
		if (*b.db != QP_ID)
			return fail("post_write did not ring the doorbell", i);
	}
	setup(&b);
	for (i = 0; i < 3 * SQ_QUANTA / 32; i++) {
		*b.db = 0;
		if (post_write_batch32(&b))
			return fail("post_write_batch32 failed", i);
		if (*b.db != QP_ID)
			return fail("post_write_batch32 did not ring the doorbell", i);
	}
	setup(&b);
	for (i = 0; i < 3 * CQ_SLOTS; i++) {
		b.wr.wr_id = i;
		memset(&b.info, 0xa5, sizeof(b.info));
		if (poll_cqe(&b))
			return fail("poll_cqe returned no completion", i);
		if (b.info.wr_id != i || b.info.q_type != IRDMA_CQE_QTYPE_SQ ||
		    b.info.comp_status != IRDMA_COMPL_STATUS_SUCCESS ||
		    b.info.qp_id != QP_ID || b.info.bytes_xfered != 4096)
			return fail("poll_cqe returned the wrong completion", i);
		if (poll_empty(&b))
			return fail("a CQ drained by poll_cqe is not empty", i);
	}
	setup(&b);
	for (i = 0; i < 3 * CQ_SLOTS; i++) {
		if (poll_cqe_base(&b))
			return fail("poll_cqe_base failed", i);
		if (poll_empty(&b))
			return fail("poll_cqe_base left a CQE behind", i);
	}
	printf("vendor_bench check: ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";
	u64 n = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000, i;
	struct bench b;
	int bad = 0;

	if (!strcmp(c, "check"))
		return check();
	setup(&b);
	if (!strcmp(c, "post_write")) {
		for (i = 0; i < n; i++)
			bad |= post_write(&b);
	} else if (!strcmp(c, "post_write_batch32")) {
		for (i = 0; i < n / 32; i++)
			bad |= post_write_batch32(&b);
	} else if (!strcmp(c, "poll_cqe")) {
		for (i = 0; i < n; i++)
			bad |= poll_cqe(&b);
	} else if (!strcmp(c, "poll_cqe_base")) {
		for (i = 0; i < n; i++)
			bad |= poll_cqe_base(&b);
	} else if (!strcmp(c, "poll_empty")) {
		for (i = 0; i < n; i++)
			bad |= poll_empty(&b);
	} else {
		fprintf(stderr, "usage: vendor_bench check | CASE N (CASE: post_write, "
				"post_write_batch32, poll_cqe, poll_cqe_base, poll_empty)\n");
		return 2;
	}
	if (bad) {
		fprintf(stderr, "vendor_bench: %s: a vendor call failed\n", c);
		return 1;
	}
	return 0;
}
