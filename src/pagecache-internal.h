/* ra-cache: what the page cache's two files share (src/pagecache.c:
 * the pages, their table, lists, memory and eviction, and what clients
 * and backend reads do to them; src/pagecache-giveback.c: the pages
 * given back before eviction would take them, and the memory of having
 * given them back).  The public interface and the cache's rules are
 * include/racache/pagecache.h; nothing outside these two files sees
 * what is here.
 *
 * Locks: a shard's lock guards its table, lists and pages; mem_lock
 * (the arena, the free slots, the spare page structs) is taken inside a
 * shard lock and never the other way round; the counters and the
 * refault history are atomics, which need no lock of their own.
 */
#ifndef RACACHE_PAGECACHE_INTERNAL_H
#define RACACHE_PAGECACHE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "racache/pagecache.h"

/* Pages of one group share a shard: a window of consecutive pages then
 * takes few locks, and a sequential reader walks one shard at a time.
 */
#define GROUP_SHIFT 4

enum page_state { PAGE_INFLIGHT = 1, PAGE_UPTODATE = 2 };

enum page_flags {
  PF_MARKER = 1,   /* the marker: first page of a window's async part */
  PF_UNUSED = 2,   /* inserted by a window, no client copied from it yet */
  PF_AHEAD = 8,    /* inserted as part of a window's async part */
  PF_STALE = 4,    /* a write overlapped the read in flight */
  PF_KEEP = 16,    /* active once read: read at random (branch G), or
                    * read again after drop-behind gave it back */
  PF_NEAR = 32,    /* async part of a near window (branch N): its first
                    * use soon is a near hit (rc_pc_take_near_hits) */
  PF_REPLAY = 64,  /* read by the replay of a learned file (src/replay.c):
                    * counted used or wasted as replay_* */
};

/* The list an up to date page is on (in-flight pages are on none). */
enum page_list { L_NONE = 0, L_UNUSED, L_INACTIVE, L_ACTIVE };

struct page {
  ra_pgoff index;
  struct page *hnext;              /* hash chain */
  struct page *lprev, *lnext;      /* LRU list, when up to date */
  uint64_t stamp;                  /* shard tick when last put on a list */
  uint8_t state;
  uint8_t flags;
  uint8_t list;                    /* enum page_list */
  uint16_t owner;                  /* stream that read it ahead, 0 = none */
  uint16_t near_step;              /* PF_NEAR: the near step (low bits)
                                    * when it was inserted */
  char *data;
};

struct lru {
  struct page head;                /* circular list sentinel */
};

struct shard {
  pthread_mutex_t lock;
  pthread_cond_t ready;            /* a page left the in-flight state */
  struct page **buckets;
  size_t bucket_mask;
  /* Up to date pages, most recently used at the head of each list:
   * unused: inserted by a window, no client has read them yet;
   * inactive: read once by a client (a stream's pages behind it);
   * active: read again, read at random (branch G), or forced in by
   * NBD_CMD_CACHE: the data that earns its place in memory.
   */
  struct lru unused, inactive, active;
  size_t count, capacity;
  size_t inflight;
  uint64_t tick;                   /* counts list insertions: page age */
  unsigned waiters;
} __attribute__ ((aligned (64)));

struct rc_pagecache {
  uint32_t page_size;
  unsigned page_shift;
  unsigned nshards;
  ra_pgoff nr_pages;
  uint64_t total_capacity;         /* pages, all shards */
  struct rc_stats *stats;
  struct shard *shards;
  uint64_t inactive_reserve;       /* pages (drop-behind) */
  uint64_t behind_pages;           /* RC_PC_BEHIND_BYTES in pages */
  /* Refault detection: a bit per (hashed) group of pages that
   * drop-behind gave back, in REFAULT_GENS generations of
   * REFAULT_GEN_BITS bits.  A page inserted again in a group of any is
   * data read again, which earns its place: it is kept as active once
   * read.  The current generation (refault_cur) takes the marks; once
   * refault_limit of its bits are set (a third of the cache's groups),
   * the oldest is cleared and becomes the current one, so that the
   * history covers between one and one and a third caches' worth of
   * groups given back: data read again that the cache could have held,
   * not a pass over more than it holds (src/pagecache-giveback.c).  In
   * the tables (below).
   */
  _Atomic uint64_t *refault;
  _Atomic uint64_t refault_set;
  _Atomic unsigned refault_cur;
  uint64_t refault_limit;
  _Atomic uint64_t n_inactive;     /* pages on the inactive lists */
  /* Pages cached per group, counted in a slot per (hashed) group:
   * groups that share a slot add up, so a zero says that no page of the
   * group is cached, read without the shard's lock.  Walks of ranges a
   * client read around the cache (drop-behind, the read-around test)
   * skip such groups (rc_pc_walk's cached_only) instead of looking up each
   * of their pages under the lock.  In the tables (below).
   */
  _Atomic uint32_t *group_pages;
  unsigned group_shift;            /* 64 - log2 of the slots */
  /* The block that holds every shard's buckets, the group_pages slots
   * and the refault history (src/pagecache.c, tables_new), and what
   * rc_huge_alloc mapped for it (0: calloc'd).
   */
  void *tables;
  size_t tables_map;
  /* Memory, shared by the shards (mem_lock, taken inside a shard lock):
   * the arena of page data, a bit per slot (set: free), the lowest word
   * that may have a free bit, the slots touched so far (the highest
   * slot ever taken, plus one), and the page structs kept for reuse.
   */
  pthread_mutex_t mem_lock;
  uint64_t fixed_bytes;            /* tables allocated once (constant) */
  uint64_t page_structs;           /* struct pages allocated (mem_lock) */
  char *arena;                     /* NULL: no data (rc_pc_new_nodata) */
  size_t arena_map;                /* rc_huge_alloc's maplen */
  uint64_t *free_slots;
  size_t free_words, free_hint;
  uint64_t data_pages;
  struct page *spare;
  _Atomic uint64_t markers;        /* pages carrying the marker now */
  /* Per stream (owner): its read-ahead pages evicted unused, not yet
   * taken by rc_pc_take_wasted.
   */
  _Atomic uint32_t wasted[RC_PC_OWNERS];
  /* Pages of near windows' async parts that a client used soon, not
   * yet taken by rc_pc_take_near_hits; the near steps so far.
   */
  _Atomic uint32_t near_hits;
  _Atomic uint32_t near_step;
};

static inline struct shard *
shard_of (struct rc_pagecache *pc, ra_pgoff index)
{
  uint64_t g = index >> GROUP_SHIFT;

  g *= UINT64_C (0x9E3779B97F4A7C15);   /* spread groups over shards */
  return &pc->shards[(g >> 32) & (pc->nshards - 1)];
}

static inline size_t
bucket_of (struct shard *s, ra_pgoff index)
{
  return (size_t) ((index * UINT64_C (0x9E3779B97F4A7C15)) >> 20)
    & s->bucket_mask;
}

/* Page index in its shard, or NULL.  Called with s->lock held. */
static inline struct page *
lookup (struct shard *s, ra_pgoff index)
{
  struct page *p;

  for (p = s->buckets[bucket_of (s, index)]; p; p = p->hnext)
    if (p->index == index)
      return p;
  return NULL;
}

/* ---- src/pagecache.c ------------------------------------------------- */

/* Walk pages [start, start + count), calling fn on each with its shard
 * locked; consecutive pages of one shard take the lock once, and the
 * shard's waiters are woken when it is released.  cached_only: skip the
 * groups that hold no page (group_pages), for fn that does nothing where
 * no page is cached.
 */
void rc_pc_walk (struct rc_pagecache *pc, ra_pgoff start, ra_pgoff count,
                 void (*fn) (struct rc_pagecache *, struct shard *, ra_pgoff,
                             void *),
                 void *arg, bool cached_only);

/* Remove p from shard s and free it (its memory slot and page struct
 * are kept for reuse).  Called with s->lock held.
 */
void rc_pc_remove_page (struct rc_pagecache *pc, struct shard *s,
                        struct page *p);

/* ---- src/pagecache-giveback.c ---------------------------------------- */

/* Bits of the refault history, all its generations (struct
 * rc_pagecache's refault, in the cache's tables), and of each.
 */
#define REFAULT_BITS (UINT64_C (1) << 20)
#define REFAULT_GENS 4
#define REFAULT_GEN_SHIFT 18
#define REFAULT_GEN_BITS (UINT64_C (1) << REFAULT_GEN_SHIFT)

/* Set up the refault history (its bits are in the cache's tables, all
 * zero) and the drop-behind distance of a cache of total_pages pages,
 * when it is made.
 */
void rc_pc_giveback_init (struct rc_pagecache *pc, uint64_t total_pages);

/* Remember page index's group as given back (drop-behind, read around). */
void rc_pc_refault_mark (struct rc_pagecache *pc, ra_pgoff index);

/* Was page index's group given back lately? */
bool rc_pc_refault_test (struct rc_pagecache *pc, ra_pgoff index);

#endif /* RACACHE_PAGECACHE_INTERNAL_H */
