/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff, LAN side: the project's own stand-in for the Linux
 * kernel headers the vendor's ice_controlq.c / ice_common.c / ice_sched.c
 * (and the ice headers they include) need in a host process. Written from
 * the documented meaning of each kernel facility, not from kernel sources.
 *
 * - readl / writel go to the harness's recording BAR and fake firmware
 *   (vd_ice_rd32 / vd_ice_wr32 in shim/ice/glue.c, which call into Rust);
 * - time is simulated: udelay / usleep_range / msleep advance a counter
 *   the harness reads (retries and timeouts are compared, not slept);
 * - DMA memory is host memory: the bus address is the host address;
 * - locks are no-ops (the harness is single-threaded).
 * Everything else only has to parse (types named in prototypes).
 */
#ifndef ICE_SHIM_KERNEL_H
#define ICE_SHIM_KERNEL_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <string.h>
#include <stdlib.h>
#include <errno.h>
#include <limits.h>
#include <ctype.h>

/* u8..s64, __le*, __be16/32, dma_addr_t, cpu_to_le*, likely, __packed... */
#include "../../common/vd_kernel_types.h"

typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
typedef int8_t __s8;
typedef int16_t __s16;
typedef int32_t __s32;
typedef int64_t __s64;
typedef uint64_t __be64;
typedef uint64_t resource_size_t;

#define cpu_to_be16(x) __builtin_bswap16(x)
#define cpu_to_be32(x) __builtin_bswap32(x)
#define be16_to_cpu(x) __builtin_bswap16(x)
#define be32_to_cpu(x) __builtin_bswap32(x)
#define le16_to_cpus(p) ((void)(p))
#define le32_to_cpus(p) ((void)(p))

#define __always_unused __attribute__((unused))
#define __maybe_unused __attribute__((unused))
#define __force
#define __user
#define fallthrough __attribute__((__fallthrough__))
#define KBUILD_MODNAME "ice"
#define EXPORT_SYMBOL(x)
#define EXPORT_SYMBOL_GPL(x)
#define static_assert(e, ...) _Static_assert(e, #e)
#define BUILD_BUG_ON(e) ((void)sizeof(char[1 - 2 * !!(e)]))
#define WARN_ON(e) (!!(e))
#define WARN_ON_ONCE(e) (!!(e))
#define WARN(c, ...) (!!(c))

#define BITS_PER_LONG 64
#define BITS_PER_BYTE 8
#define BITS_PER_TYPE(t) (sizeof(t) * BITS_PER_BYTE)
#define BIT(n) (1UL << (n))
#define BIT_ULL(n) (1ULL << (n))
#define GENMASK_ULL(h, l) ((~0ULL >> (63 - (h))) & (~0ULL << (l)))
#define GENMASK(h, l) ((unsigned long)GENMASK_ULL(h, l))
#define FIELD_PREP(mask, val) ((typeof(mask))((((u64)(val)) << __builtin_ctzll(mask)) & (u64)(mask)))
#define FIELD_GET(mask, reg) ((typeof(mask))((((u64)(reg)) & (u64)(mask)) >> __builtin_ctzll(mask)))
#define upper_32_bits(n) ((u32)(((u64)(n)) >> 32))
#define lower_32_bits(n) ((u32)((u64)(n) & 0xffffffffu))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define DIV_ROUND_UP(n, d) (((n) + (d) - 1) / (d))
#define ALIGN(x, a) (((x) + ((a) - 1)) & ~((typeof(x))(a) - 1))
#define round_up(x, y) ((((x) - 1) | ((y) - 1)) + 1)
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
#define min_t(t, a, b) ((t)(a) < (t)(b) ? (t)(a) : (t)(b))
#define max_t(t, a, b) ((t)(a) > (t)(b) ? (t)(a) : (t)(b))
#define clamp(v, lo, hi) min(max(v, lo), hi)
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define sizeof_field(t, m) sizeof(((t *)0)->m)
#define struct_size(p, member, n) (sizeof(*(p)) + sizeof((p)->member[0]) * (n))
#define flex_array_size(p, member, n) (sizeof((p)->member[0]) * (n))
#define IS_ENABLED(x) 0
#define __stringify(x) #x
#define swap(a, b) do { typeof(a) __t = (a); (a) = (b); (b) = __t; } while (0)

/* bitmaps */
#define BITS_TO_LONGS(n) DIV_ROUND_UP(n, BITS_PER_LONG)
#define DECLARE_BITMAP(name, bits) unsigned long name[BITS_TO_LONGS(bits)]
static inline bool test_bit(long nr, const unsigned long *a)
{ return (a[nr / BITS_PER_LONG] >> (nr % BITS_PER_LONG)) & 1; }
static inline void set_bit(long nr, unsigned long *a)
{ a[nr / BITS_PER_LONG] |= 1UL << (nr % BITS_PER_LONG); }
static inline void clear_bit(long nr, unsigned long *a)
{ a[nr / BITS_PER_LONG] &= ~(1UL << (nr % BITS_PER_LONG)); }
#define __set_bit set_bit
#define __clear_bit clear_bit
static inline bool test_and_set_bit(long nr, unsigned long *a)
{ bool o = test_bit(nr, a); set_bit(nr, a); return o; }
static inline bool test_and_clear_bit(long nr, unsigned long *a)
{ bool o = test_bit(nr, a); clear_bit(nr, a); return o; }
static inline void bitmap_zero(unsigned long *a, unsigned int n)
{ memset(a, 0, BITS_TO_LONGS(n) * sizeof(long)); }
static inline unsigned long find_next_bit(const unsigned long *a, unsigned long size, unsigned long off)
{ for (; off < size; off++) if (test_bit(off, a)) return off; return size; }
#define find_first_bit(a, size) find_next_bit(a, size, 0)
#define for_each_set_bit(bit, addr, size) \
	for ((bit) = find_first_bit((addr), (size)); (bit) < (size); \
	     (bit) = find_next_bit((addr), (size), (bit) + 1))
static inline int hweight32(unsigned int w)
{ int n = 0; for (; w; w &= w - 1) n++; return n; }
static inline int hweight8(unsigned int w) { return hweight32(w & 0xff); }
static inline int hweight64(u64 w)
{ int n = 0; for (; w; w &= w - 1) n++; return n; }
static inline int hweight_long(unsigned long w) { return hweight64(w); }
static inline void bitmap_copy(unsigned long *d, const unsigned long *s, unsigned int n)
{ memcpy(d, s, BITS_TO_LONGS(n) * sizeof(long)); }
static inline bool bitmap_empty(const unsigned long *a, unsigned int n)
{ return find_first_bit(a, n) >= n; }
static inline bool bitmap_equal(const unsigned long *a, const unsigned long *b, unsigned int n)
{ for (unsigned int i = 0; i < n; i++) if (test_bit(i, a) != test_bit(i, b)) return false; return true; }
static inline long div64_long(long a, long b) { return a / b; }
static inline int fls(unsigned int x) { return x ? 32 - __builtin_clz(x) : 0; }
static inline unsigned long __ffs(unsigned long x) { return __builtin_ctzl(x); }

/* lists */
struct list_head { struct list_head *next, *prev; };
struct hlist_node { struct hlist_node *next, **pprev; };
struct hlist_head { struct hlist_node *first; };
#define LIST_HEAD(name) struct list_head name = { &(name), &(name) }
static inline void INIT_LIST_HEAD(struct list_head *l) { l->next = l; l->prev = l; }
static inline void __list_add(struct list_head *n, struct list_head *p, struct list_head *x)
{ x->prev = n; n->next = x; n->prev = p; p->next = n; }
static inline void list_add(struct list_head *n, struct list_head *h) { __list_add(n, h, h->next); }
static inline void list_add_tail(struct list_head *n, struct list_head *h) { __list_add(n, h->prev, h); }
static inline void list_del(struct list_head *e)
{ e->next->prev = e->prev; e->prev->next = e->next; e->next = e->prev = NULL; }
static inline int list_empty(const struct list_head *h) { return h->next == h; }
static inline void list_replace_init(struct list_head *o, struct list_head *n)
{ n->next = o->next; n->next->prev = n; n->prev = o->prev; n->prev->next = n; INIT_LIST_HEAD(o); }
#define list_entry(ptr, type, member) container_of(ptr, type, member)
#define list_first_entry(ptr, type, member) list_entry((ptr)->next, type, member)
#define list_first_entry_or_null(ptr, type, member) \
	(list_empty(ptr) ? NULL : list_first_entry(ptr, type, member))
#define list_next_entry(pos, member) list_entry((pos)->member.next, typeof(*(pos)), member)
#define list_for_each_entry(pos, head, member) \
	for (pos = list_first_entry(head, typeof(*pos), member); &pos->member != (head); \
	     pos = list_next_entry(pos, member))
#define list_for_each_entry_safe(pos, n, head, member) \
	for (pos = list_first_entry(head, typeof(*pos), member), n = list_next_entry(pos, member); \
	     &pos->member != (head); pos = n, n = list_next_entry(n, member))

/* locks: single-threaded harness */
struct mutex { int unused; };
#define DEFINE_MUTEX(m) struct mutex m = { 0 }
typedef struct { int unused; } spinlock_t;
#define mutex_init(m) ((void)(m))
#define mutex_destroy(m) ((void)(m))
#define mutex_lock(m) ((void)(m))
#define mutex_unlock(m) ((void)(m))
#define mutex_is_locked(m) 0
#define lockdep_assert_held(m) ((void)(m))
#define spin_lock_init(l) ((void)(l))
#define spin_lock(l) ((void)(l))
#define spin_unlock(l) ((void)(l))
#define synchronize_rcu() ((void)0)
#define rcu_read_lock() ((void)0)
#define rcu_read_unlock() ((void)0)

/* memory: zeroed heap; DMA memory is host memory (bus address = host address) */
typedef unsigned int gfp_t;
#define GFP_KERNEL 0
#define GFP_ATOMIC 0
struct device { int unused; };
void *vd_ice_zalloc(size_t n);
void vd_ice_free(const void *p);
void *vd_ice_dma_alloc(size_t n, dma_addr_t *pa);
void vd_ice_dma_free(void *va);
#define kzalloc(size, flags) vd_ice_zalloc(size)
#define kmalloc(size, flags) vd_ice_zalloc(size)
#define kcalloc(n, size, flags) vd_ice_zalloc((size_t)(n) * (size))
#define kmemdup(p, size, flags) memcpy(vd_ice_zalloc(size), (p), (size))
#define kfree(p) vd_ice_free(p)
#define devm_kzalloc(dev, size, flags) vd_ice_zalloc(size)
#define devm_kcalloc(dev, n, size, flags) vd_ice_zalloc((size_t)(n) * (size))
#define devm_kmalloc(dev, size, flags) vd_ice_zalloc(size)
#define devm_kmemdup(dev, p, size, flags) memcpy(vd_ice_zalloc(size), (p), (size))
#define devm_kfree(dev, p) vd_ice_free(p)
#define dmam_alloc_coherent(dev, size, pa, flags) vd_ice_dma_alloc((size), (pa))
#define dmam_free_coherent(dev, size, va, pa) vd_ice_dma_free(va)
#define dma_alloc_coherent(dev, size, pa, flags) vd_ice_dma_alloc((size), (pa))
#define dma_free_coherent(dev, size, va, pa) vd_ice_dma_free(va)

/* MMIO: the recording BAR (hw_addr is NULL, so the address is the offset) */
u32 vd_ice_rd32(u64 off);
void vd_ice_wr32(u64 off, u32 val);
#define readl(addr) vd_ice_rd32((u64)(uintptr_t)(addr))
#define writel(val, addr) vd_ice_wr32((u64)(uintptr_t)(addr), (u32)(val))
#define readq(addr) ((u64)readl(addr) | ((u64)readl((u8 *)(addr) + 4) << 32))
#define writeq(val, addr) (writel((u32)(val), (addr)), writel((u32)((u64)(val) >> 32), (u8 *)(addr) + 4))

/* barriers */
#define mb() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define wmb() mb()
#define rmb() mb()
#define dma_wmb() mb()
#define dma_rmb() mb()

/* time: simulated, in microseconds */
extern u64 vd_ice_usecs;
#define HZ 1000
#define jiffies (vd_ice_usecs / 1000)
#define msecs_to_jiffies(m) ((u64)(m))
#define time_before(a, b) ((s64)((a) - (b)) < 0)
#define time_after(a, b) time_before(b, a)
#define udelay(us) ((void)(vd_ice_usecs += (us)))
#define ndelay(ns) ((void)(vd_ice_usecs += 1))
#define usleep_range(a, b) ((void)(vd_ice_usecs += (a)))
#define msleep(ms) ((void)(vd_ice_usecs += 1000ULL * (ms)))
#define mdelay(ms) msleep(ms)
#define might_sleep() ((void)0)
#define cond_resched() ((void)0)

/* logging: dropped (ice_debug is gated by hw->debug_mask, left 0) */
#define dev_info(dev, ...) ((void)(dev))
#define dev_warn(dev, ...) ((void)(dev))
#define dev_err(dev, ...) ((void)(dev))
#define dev_dbg(dev, ...) ((void)(dev))
#define pr_info(...) ((void)0)
#define pr_warn(...) ((void)0)
#define pr_err(...) ((void)0)
#define print_hex_dump_debug(...) ((void)0)
#define snprintf __builtin_snprintf
#define scnprintf __builtin_snprintf
#define strscpy(d, s, n) ((void)__builtin_strncpy((d), (s), (n)))

/* xarray: the scheduler's node-id index, a linear table here */
struct xarray { u32 next; };
struct xa_limit { u32 min, max; };
#define XA_FLAGS_ALLOC 0
#define XA_LIMIT(lo, hi) ((struct xa_limit){ (lo), (hi) })
static inline void xa_init_flags(struct xarray *x, int f) { (void)f; x->next = 0; }
static inline void xa_destroy(struct xarray *x) { (void)x; }
static inline void *xa_erase(struct xarray *x, unsigned long i) { (void)x; (void)i; return NULL; }
static inline int xa_alloc(struct xarray *x, u32 *id, void *e, struct xa_limit l, gfp_t g)
{ (void)e; (void)l; (void)g; *id = x->next++; return 0; }
/* UDP tunnel offload tables: only embedded in struct ice_hw */
struct net_device;
struct udp_tunnel_info;
struct udp_tunnel_nic_shared { int unused; };
struct udp_tunnel_nic_table_info { unsigned int n_entries, tunnel_types; };
struct udp_tunnel_nic_info { void *set_port, *unset_port, *sync_table; unsigned int flags;
	struct udp_tunnel_nic_shared *shared; struct udp_tunnel_nic_table_info tables[4]; };

#define ETH_ALEN 6
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define VLAN_N_VID 4096
#define PCI_VENDOR_ID_INTEL 0x8086
static inline void ether_addr_copy(u8 *d, const u8 *s) { memcpy(d, s, ETH_ALEN); }
static inline bool is_zero_ether_addr(const u8 *a) { return !(a[0] | a[1] | a[2] | a[3] | a[4] | a[5]); }
static inline bool is_unicast_ether_addr(const u8 *a) { return !(a[0] & 1); }
static inline bool is_multicast_ether_addr(const u8 *a) { return a[0] & 1; }
static inline bool is_broadcast_ether_addr(const u8 *a) { return (a[0] & a[1] & a[2] & a[3] & a[4] & a[5]) == 0xff; }

#endif
