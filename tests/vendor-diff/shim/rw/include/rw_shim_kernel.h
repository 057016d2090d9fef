/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff, rw area: the kernel as far as Linux 6.1's
 * drivers/infiniband/core/rw.c and mr_pool.c use it, written for
 * linux-source-6.1 6.1.192-3 (tests/vendor-diff/VENDOR_VERSION; build.rs
 * refuses another). Every linux/ header and rdma/ib_verbs.h / rdma_cm.h of
 * this directory includes this one file; the vendor's own rdma/rw.h and
 * rdma/mr_pool.h are used as they are.
 *
 * Only what those two files touch is declared; structures keep the
 * members they read or write (layouts need not match the kernel's: both
 * files are compiled against these). The facts encoded, each from the
 * 6.1 sources:
 *  - enum ib_wr_opcode values: include/rdma/ib_verbs.h (IB_WR_RDMA_WRITE
 *    0, IB_WR_RDMA_READ 4, IB_WR_LOCAL_INV 7, IB_WR_RDMA_READ_WITH_INV 11
 *    through include/uapi/rdma/ib_user_verbs.h; IB_WR_REG_MR 0x20,
 *    IB_WR_REG_MR_INTEGRITY 0x21), IB_SEND_SIGNALED 1 << 1,
 *    IB_ACCESS_LOCAL_WRITE 1, IB_ACCESS_REMOTE_WRITE 2,
 *    IB_QP_CREATE_INTEGRITY_EN 1 << 6;
 *  - rdma_cap_read_inv() is rdma_protocol_iwarp() (ib_verbs.h: "iWarp
 *    drivers must support READ W/ INVALIDATE");
 *  - ib_inc_rkey() increments the low key byte only, and
 *    ib_update_fast_reg_key() replaces the low byte of lkey and rkey
 *    (ib_verbs.h);
 *  - ib_map_mr_sg() sets mr->page_size and calls ops.map_mr_sg
 *    (core/verbs.c); the device side here is irdma's irdma_map_mr_sg /
 *    irdma_set_page (hw/irdma/verbs.c: npages reset, then
 *    ib_sg_to_pages, a page refused with -ENOMEM once npages reaches the
 *    page_cnt the MR was allocated with). ib_sg_to_pages itself is the
 *    vendor's, cut verbatim out of core/verbs.c by build.rs.
 *
 * Where the kernel is not modelled: DMA mapping is the identity plus a
 * fixed offset per run (no IOMMU merging of entries: nents = orig_nents),
 * locks are no-ops (one thread), and k*alloc is calloc (never fails).
 */
#ifndef RW_SHIM_KERNEL_H
#define RW_SHIM_KERNEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef u32 __be32;
typedef u64 dma_addr_t;
typedef unsigned int gfp_t;

#define GFP_KERNEL 0u
#define EIO 5
#define ENOMEM 12
#define EAGAIN 11
#define EINVAL 22
#define EOPNOTSUPP 95
#define SZ_4K 4096u
#define PAGE_SIZE 4096ul

#define unlikely(x) __builtin_expect(!!(x), 0)
#define likely(x) __builtin_expect(!!(x), 1)
#define min(a, b) ((a) < (b) ? (a) : (b))
#define min_t(t, a, b) ((t)(a) < (t)(b) ? (t)(a) : (t)(b))
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))
#define check_mul_overflow(a, b, d) __builtin_mul_overflow(a, b, d)
#define container_of(p, t, m) ((t *)((char *)(p) - offsetof(t, m)))
#define EXPORT_SYMBOL(s)
#define module_param_named(n, v, t, p)
#define MODULE_PARM_DESC(n, d)
#define BUG() abort()

/* WARN*: counted (src/rw.rs reads the count), never fatal */
extern unsigned long vd_rw_warns;
#define WARN_ON_ONCE(c) ({ int __w = !!(c); if (__w) vd_rw_warns++; __w; })
#define pr_err(...) ((void)0)

static inline void *kcalloc(size_t n, size_t s, gfp_t f) { (void)f; return calloc(n ? n : 1, s ? s : 1); }
static inline void *kzalloc(size_t s, gfp_t f) { (void)f; return calloc(1, s ? s : 1); }
static inline void kfree(const void *p) { free((void *)p); }

/* ---- lists (include/linux/list.h semantics) ---- */
struct list_head {
	struct list_head *next, *prev;
};
static inline void INIT_LIST_HEAD(struct list_head *l) { l->next = l; l->prev = l; }
static inline int list_empty(const struct list_head *h) { return h->next == h; }
static inline void __list_add(struct list_head *n, struct list_head *p, struct list_head *nx)
{
	nx->prev = n; n->next = nx; n->prev = p; p->next = n;
}
static inline void list_add(struct list_head *n, struct list_head *h) { __list_add(n, h, h->next); }
static inline void list_add_tail(struct list_head *n, struct list_head *h) { __list_add(n, h->prev, h); }
static inline void list_del(struct list_head *e)
{
	e->next->prev = e->prev; e->prev->next = e->next; e->next = e->prev = NULL;
}
#define list_first_entry(h, t, m) container_of((h)->next, t, m)
#define list_first_entry_or_null(h, t, m) (list_empty(h) ? NULL : list_first_entry(h, t, m))

typedef int spinlock_t;
#define spin_lock_irqsave(l, f) ((void)(l), (f) = 0)
#define spin_unlock_irqrestore(l, f) ((void)(l), (void)(f))

/* ---- scatterlists and DMA ---- */
enum dma_data_direction {
	DMA_BIDIRECTIONAL = 0,
	DMA_TO_DEVICE = 1,
	DMA_FROM_DEVICE = 2,
	DMA_NONE = 3,
};

struct scatterlist {
	u64 phys; /* page_to_phys(sg_page(sg)) + offset */
	unsigned int length;
	bool end; /* sg_mark_end */
	dma_addr_t dma_address;
	unsigned int dma_length;
};
struct sg_table {
	struct scatterlist *sgl;
	unsigned int nents;
	unsigned int orig_nents;
};
#define sg_dma_address(sg) ((sg)->dma_address)
#define sg_dma_len(sg) ((sg)->dma_length)
static inline struct scatterlist *sg_next(struct scatterlist *sg)
{
	return sg->end ? NULL : sg + 1;
}
#define for_each_sg(sglist, sg, nr, __i) \
	for (__i = 0, sg = (sglist); __i < (nr); __i++, sg = sg_next(sg))

struct ib_device;
int ib_dma_map_sgtable_attrs(struct ib_device *dev, struct sg_table *sgt,
			     enum dma_data_direction dir, unsigned long attrs);
void ib_dma_unmap_sgtable_attrs(struct ib_device *dev, struct sg_table *sgt,
				enum dma_data_direction dir, unsigned long attrs);
void ib_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
		     enum dma_data_direction dir);

/* ---- verbs ---- */
enum ib_wr_opcode {
	IB_WR_RDMA_WRITE = 0,
	IB_WR_RDMA_WRITE_WITH_IMM = 1,
	IB_WR_SEND = 2,
	IB_WR_SEND_WITH_IMM = 3,
	IB_WR_RDMA_READ = 4,
	IB_WR_LOCAL_INV = 7,
	IB_WR_RDMA_READ_WITH_INV = 11,
	IB_WR_REG_MR = 0x20,
	IB_WR_REG_MR_INTEGRITY = 0x21,
};
enum ib_send_flags { IB_SEND_FENCE = 1, IB_SEND_SIGNALED = 1 << 1 };
enum ib_access_flags { IB_ACCESS_LOCAL_WRITE = 1, IB_ACCESS_REMOTE_WRITE = 2 };
enum ib_mr_type { IB_MR_TYPE_MEM_REG = 0, IB_MR_TYPE_SG_GAPS = 1, IB_MR_TYPE_INTEGRITY = 3 };
enum { IB_QP_CREATE_INTEGRITY_EN = 1 << 6 };
enum ib_signature_type { IB_SIG_TYPE_NONE = 0, IB_SIG_TYPE_T10_DIF = 1 };

struct ib_cqe {
	void *done;
};
struct ib_sge {
	u64 addr;
	u32 length;
	u32 lkey;
};
#include "../../common/vd_ib_send_wr.h"
struct ib_sig_domain {
	enum ib_signature_type sig_type;
};
struct ib_sig_attrs {
	u8 check_mask;
	struct ib_sig_domain mem;
	struct ib_sig_domain wire;
	int meta_length;
};
struct ib_mr {
	struct ib_device *device;
	struct ib_pd *pd;
	u32 lkey;
	u32 rkey;
	u64 iova;
	u64 length;
	unsigned int page_size;
	enum ib_mr_type type;
	bool need_inval;
	struct list_head qp_entry;
	struct ib_sig_attrs *sig_attrs;
};
struct ib_reg_wr {
	struct ib_send_wr wr;
	struct ib_mr *mr;
	u32 key;
	int access;
};
struct ib_device_attr {
	u32 max_sge_rd;
	u32 max_sgl_rd;
	u32 max_send_sge;
	u32 max_qp_wr;
	u32 max_fast_reg_page_list_len;
	u32 max_pi_fast_reg_page_list_len;
};
struct ib_device_ops {
	int (*map_mr_sg)(struct ib_mr *mr, struct scatterlist *sg, int sg_nents,
			 unsigned int *sg_offset);
};
struct ib_device {
	struct ib_device_attr attrs;
	struct ib_device_ops ops;
	bool iwarp; /* the port's RDMA_CORE_CAP_PROT_IWARP */
};
struct ib_pd {
	struct ib_device *device;
	u32 local_dma_lkey;
};
struct ib_qp_cap {
	u32 max_send_wr;
	u32 max_rdma_ctxs;
};
struct ib_qp_init_attr {
	struct ib_qp_cap cap;
	u32 create_flags;
	u32 port_num;
};
struct ib_qp {
	struct ib_device *device;
	struct ib_pd *pd;
	spinlock_t mr_lock;
	int mrs_used;
	struct list_head rdma_mrs;
	struct list_head sig_mrs;
	u32 max_write_sge;
	u32 max_read_sge;
	bool integrity_en;
};

static inline bool rdma_protocol_iwarp(const struct ib_device *device, u32 port_num)
{
	(void)port_num;
	return device->iwarp;
}
static inline bool rdma_cap_read_inv(struct ib_device *dev, u32 port_num)
{
	return rdma_protocol_iwarp(dev, port_num);
}
static inline u32 ib_inc_rkey(u32 rkey)
{
	return ((rkey + 1) & 0xffu) | (rkey & ~0xffu);
}
static inline void ib_update_fast_reg_key(struct ib_mr *mr, u8 newkey)
{
	mr->lkey = (mr->lkey & 0xffffff00u) | newkey;
	mr->rkey = (mr->rkey & 0xffffff00u) | newkey;
}

static inline int ib_map_mr_sg(struct ib_mr *mr, struct scatterlist *sg, int sg_nents,
			       unsigned int *sg_offset, unsigned int page_size)
{
	if (unlikely(!mr->device->ops.map_mr_sg))
		return -EOPNOTSUPP;
	mr->page_size = page_size;
	return mr->device->ops.map_mr_sg(mr, sg, sg_nents, sg_offset);
}
int ib_map_mr_sg_pi(struct ib_mr *mr, struct scatterlist *data_sg, int data_sg_nents,
		    unsigned int *data_sg_offset, struct scatterlist *meta_sg,
		    int meta_sg_nents, unsigned int *meta_sg_offset, unsigned int page_size);
int ib_sg_to_pages(struct ib_mr *mr, struct scatterlist *sgl, int sg_nents,
		   unsigned int *sg_offset_p, int (*set_page)(struct ib_mr *, u64));
struct ib_mr *ib_alloc_mr(struct ib_pd *pd, enum ib_mr_type mr_type, u32 max_num_sg);
struct ib_mr *ib_alloc_mr_integrity(struct ib_pd *pd, u32 max_num_data_sg,
				    u32 max_num_meta_sg);
int ib_dereg_mr(struct ib_mr *mr);
int ib_post_send(struct ib_qp *qp, const struct ib_send_wr *send_wr,
		 const struct ib_send_wr **bad_send_wr);

#define MAX_ERRNO 4095
#define IS_ERR(p) ((unsigned long)(void *)(p) >= (unsigned long)-MAX_ERRNO)
#define PTR_ERR(p) ((long)(p))
#define ERR_PTR(e) ((void *)(long)(e))

#endif
