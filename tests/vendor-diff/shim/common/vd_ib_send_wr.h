/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff: the kernel's struct ib_send_wr and struct ib_rdma_wr
 * (Linux 6.1 include/rdma/ib_verbs.h: the WR id shares its place with the
 * completion entry, the immediate data with the key to invalidate), for
 * both the rw shims (rw/include/rw_shim_kernel.h) and the verbs-level bench
 * (bench_verbs.c). Include it after u32 / u64 / __be32, struct ib_sge and
 * enum ib_wr_opcode are declared.
 */
#ifndef VD_IB_SEND_WR_H
#define VD_IB_SEND_WR_H

struct ib_cqe;

struct ib_send_wr {
	struct ib_send_wr *next;
	union {
		u64 wr_id;
		struct ib_cqe *wr_cqe;
	};
	struct ib_sge *sg_list;
	int num_sge;
	enum ib_wr_opcode opcode;
	int send_flags;
	union {
		__be32 imm_data;
		u32 invalidate_rkey;
	} ex;
};

struct ib_rdma_wr {
	struct ib_send_wr wr;
	u64 remote_addr;
	u32 rkey;
};

#endif
