/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * irdma vendor-diff: the project's stand-ins for the extra kernel facilities
 * the vendor's ctrl.c (and type.h / hmc.h / ws.h it includes) needs, written
 * from each facility's documented meaning, not from kernel sources:
 *
 * - an intrusive doubly linked list (struct list_head and the few operations
 *   ctrl.c uses);
 * - atomics, mutexes and timers as plain single-threaded stand-ins (the
 *   harness never runs two vendor calls at once and never arms a timer);
 * - readl from the recording BAR (vd_bar_read in glue.c), udelay as a no-op;
 * - debug printing (ibdev_dbg, print_hex_dump_debug) compiled out;
 * - DMA-coherent allocation as zeroed, page-aligned anonymous memory whose
 *   "bus address" is its host address.
 */
#ifndef IRDMA_SHIM_CTRL_H
#define IRDMA_SHIM_CTRL_H

#include <sys/mman.h>

#define fallthrough __attribute__((__fallthrough__))

struct list_head {
	struct list_head *next, *prev;
};

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define list_entry(ptr, type, member) container_of(ptr, type, member)
#define list_first_entry(head, type, member) list_entry((head)->next, type, member)

static inline void INIT_LIST_HEAD(struct list_head *h)
{
	h->next = h;
	h->prev = h;
}

static inline int list_empty(const struct list_head *h)
{
	return h->next == h;
}

static inline void list_add_tail(struct list_head *n, struct list_head *h)
{
	n->prev = h->prev;
	n->next = h;
	h->prev->next = n;
	h->prev = n;
}

static inline void list_add(struct list_head *n, struct list_head *h)
{
	n->next = h->next;
	n->prev = h;
	h->next->prev = n;
	h->next = n;
}

static inline void list_del(struct list_head *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->next = e;
	e->prev = e;
}

typedef struct { int counter; } atomic_t;
typedef struct { s64 counter; } atomic64_t;
#define atomic_read(a) ((a)->counter)
#define atomic_set(a, v) ((a)->counter = (v))
#define atomic_inc(a) ((a)->counter++)
#define atomic_dec(a) ((a)->counter--)
#define atomic64_read(a) ((a)->counter)
#define atomic64_set(a, v) ((a)->counter = (v))

struct mutex { int unused; };
#define mutex_init(m) ((void)(m))
#define mutex_lock(m) ((void)(m))
#define mutex_unlock(m) ((void)(m))

struct timer_list { int unused; };

/* include/linux/net/intel/iidc.h: the DSCP-to-UP table has 64 entries. */
#define IIDC_MAX_DSCP_MAPPING 64

/* The recording BAR's read side (glue.c answers what the harness set). */
u32 vd_bar_read(const volatile void *addr);
#define readl(addr) vd_bar_read((addr))
#define udelay(n) ((void)(n))
#define ndelay(n) ((void)(n))

#define DUMP_PREFIX_OFFSET 1
#define print_hex_dump_debug(...) ((void)0)
#define ibdev_dbg(...) ((void)0)
#define pr_err(...) ((void)0)
#define pr_info(...) ((void)0)
#define pr_warn(...) ((void)0)

/* Coherent DMA: zeroed, page-aligned anonymous memory (as the kernel's
 * dma_alloc_coherent gives whole pages), bus address = host address. Pages
 * are mapped, not touched: hmc.c takes 2 MiB per direct SD. */
struct device;
static inline void *dma_alloc_coherent(struct device *d, size_t size,
				       dma_addr_t *pa, int flags)
{
	void *p = mmap(NULL, size ? (size + 4095) & ~(size_t)4095 : 4096,
		       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)d;
	(void)flags;
	if (p == MAP_FAILED)
		p = NULL;
	*pa = (dma_addr_t)(uintptr_t)p;
	return p;
}

static inline void dma_free_coherent(struct device *d, size_t size, void *va,
				     dma_addr_t pa)
{
	(void)d;
	(void)pa;
	if (va)
		munmap(va, size ? (size + 4095) & ~(size_t)4095 : 4096);
}

static inline void ether_addr_copy(u8 *dst, const u8 *src)
{
	memcpy(dst, src, ETH_ALEN);
}

/* A MAC as a 48-bit number, first byte most significant (network order). */
static inline u64 ether_addr_to_u64(const u8 *a)
{
	u64 v = 0;
	int i;

	for (i = 0; i < ETH_ALEN; i++)
		v = (v << 8) | a[i];
	return v;
}

#define ntohs(x) __builtin_bswap16((u16)(x))
#define ntohl(x) __builtin_bswap32((u32)(x))
#define htons(x) __builtin_bswap16((u16)(x))
#define htonl(x) __builtin_bswap32((u32)(x))

/* Round up to a multiple of a power of two / to the next power of two. */
#define ALIGN(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define round_up(x, a) ALIGN(x, a)
static inline unsigned long roundup_pow_of_two(unsigned long n)
{
	unsigned long p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

#define atomic64_inc(a) ((a)->counter++)
#define mdelay(n) ((void)(n))

#define SZ_4K 0x1000ULL
#define SZ_2M 0x200000ULL
#define SZ_1G 0x40000000ULL

#endif
