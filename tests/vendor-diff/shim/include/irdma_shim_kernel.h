/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff: the project's own stand-in for the few Linux kernel
 * headers the vendor's irdma uk.c (and the headers it includes: osdep.h,
 * defs.h, user.h, irdma.h) needs to compile in a host process. Written from
 * the documented meaning of each kernel facility, not from kernel sources:
 *
 * - fixed-width types and the little-endian annotated types (the host is
 *   x86_64, so cpu_to_le* / le*_to_cpu are identities), shared with the
 *   ice shims in shim/common/vd_kernel_types.h;
 * - BIT / GENMASK / FIELD_PREP / FIELD_GET on 64-bit values;
 * - barriers (mb / wmb / rmb and the dma_ forms) as compiler+CPU fences;
 * - writel: recorded by the harness's BAR (vd_bar_write in glue.c);
 * - struct ib_sge with the kernel's layout (u64 addr, u32 length, u32 lkey).
 *
 * Everything else the vendor headers merely declare (prototypes taking
 * pointers to structs that uk.c never dereferences) needs only a forward
 * declaration.
 */
#ifndef IRDMA_SHIM_KERNEL_H
#define IRDMA_SHIM_KERNEL_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <string.h>
#include <stdlib.h>
#include <errno.h>

#include "../common/vd_kernel_types.h"

#define BIT(n) (1ULL << (n))
#define BIT_ULL(n) (1ULL << (n))
/* bits h..l set (h >= l), as a 64-bit value */
#define GENMASK_ULL(h, l) ((~0ULL >> (63 - (h))) & (~0ULL << (l)))
#define GENMASK(h, l) GENMASK_ULL(h, l)
#define FIELD_PREP(mask, val) ((((u64)(val)) << __builtin_ctzll(mask)) & (u64)(mask))
#define FIELD_GET(mask, reg) ((((u64)(reg)) & (u64)(mask)) >> __builtin_ctzll(mask))

#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))

/* Barriers: a sequentially consistent fence orders both the compiler and
 * the CPU, which is at least what every kernel barrier promises. */
#define mb() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define wmb() mb()
#define rmb() mb()
#define dma_wmb() mb()
#define dma_rmb() mb()

/* MMIO: every 32-bit register write goes to the harness's recording BAR.
 * The instruction-count bench (shim/bench.c, built by `cargo xtask bench`
 * with VD_ONE_STORE_DOORBELL) makes it one volatile store instead, as the
 * driver's bench BAR does, so both sides' doorbells cost the same. */
void vd_bar_write(volatile void *addr, u32 val);
#ifdef VD_ONE_STORE_DOORBELL
#define writel(val, addr) (*(volatile u32 *)(addr) = (u32)(val))
#else
#define writel(val, addr) vd_bar_write((addr), (u32)(val))
#endif

/* Allocation (for the control-path files later): zeroed heap memory. */
#define GFP_KERNEL 0
#define GFP_ATOMIC 0
#define kzalloc(size, flags) calloc(1, (size))
#define kcalloc(n, size, flags) calloc((n), (size))
#define kfree(p) free(p)

/* Locks are not needed: the harness is single-threaded. */
typedef struct { int unused; } spinlock_t;
#define spin_lock_init(l) ((void)(l))
#define spin_lock_irqsave(l, f) ((void)(l), (void)(f))
#define spin_unlock_irqrestore(l, f) ((void)(l), (void)(f))

struct ib_sge {
	u64 addr;
	u32 length;
	u32 lkey;
};

#define ETH_ALEN 6

/* Types the vendor headers only name in prototypes. */
struct ib_device;
struct shash_desc;

#include "irdma_shim_ctrl.h"

#endif
