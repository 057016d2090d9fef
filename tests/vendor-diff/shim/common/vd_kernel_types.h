/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff: the kernel stand-ins both shim sets share, the irdma
 * one (shim/include/irdma_shim_kernel.h) and the ice one
 * (shim/ice/include/ice_shim_kernel.h): the fixed-width types, the
 * little-endian annotated types (the host is little-endian, checked here,
 * so cpu_to_le* / le*_to_cpu are identities) and the attribute and
 * branch-hint macros. Written from the documented meaning of each kernel
 * facility, not from kernel sources.
 */
#ifndef VD_KERNEL_TYPES_H
#define VD_KERNEL_TYPES_H

#include <stdint.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the vendor-diff shims assume a little-endian host"
#endif

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int8_t s8;
typedef int16_t s16;
typedef int32_t s32;
typedef int64_t s64;
typedef uint16_t __le16;
typedef uint32_t __le32;
typedef uint64_t __le64;
typedef uint16_t __be16;
typedef uint32_t __be32;
typedef uint64_t dma_addr_t;

#define cpu_to_le16(x) ((u16)(x))
#define cpu_to_le32(x) ((u32)(x))
#define cpu_to_le64(x) ((u64)(x))
#define le16_to_cpu(x) ((u16)(x))
#define le32_to_cpu(x) ((u32)(x))
#define le64_to_cpu(x) ((u64)(x))

#define __iomem
#define __packed __attribute__((__packed__))
#define __aligned(x) __attribute__((__aligned__(x)))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#endif
