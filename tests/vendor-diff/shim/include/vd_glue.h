/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff: what shim/glue.c exports to the other C programs built
 * with it (the bench programs shim/bench.c and shim/bench_verbs.c, built by
 * `cargo xtask bench`): a vendor QP and CQ over caller-owned rings, and
 * their uk handles. glue.c includes it too, so the compiler holds these
 * declarations to the definitions. Include after the vendor's irdma.h.
 */
#ifndef VD_GLUE_H
#define VD_GLUE_H

struct vd_qp;
struct vd_cq;
struct vd_qp *vd_qp_new(u64 *sq, u32 sq_quanta, u64 *rq, u32 rq_size, u8 rq_shift,
			u32 max_sq_frags, u32 max_rq_frags, u32 max_inline, u32 qp_id,
			u8 qp_type, int *ret);
struct vd_cq *vd_cq_new(u64 *ring, u32 size, u32 cq_id);
struct irdma_qp_uk *vd_qp_uk(struct vd_qp *q);
struct irdma_cq_uk *vd_cq_uk(struct vd_cq *c);
u64 vd_qp_db_addr(struct vd_qp *q);

#endif
