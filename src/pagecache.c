/* ra-cache: the page cache (see include/racache/pagecache.h).
 *
 * One concern: the pages themselves.  Here are the sharded page table,
 * the LRU lists, the arena of page data and its free slots, eviction
 * and the bound on pages read once (the inactive reserve), and what
 * windows, backend reads, clients and writes do to pages: insert,
 * complete, abandon, invalidate, copy out (rc_pc_access,
 * rc_pc_copy_run), peek and count.  The pages the cache gives back
 * before eviction would take them (drop-behind, read around) and the
 * refault history that remembers them are src/pagecache-giveback.c;
 * what the two files share is src/pagecache-internal.h.  No lock is
 * held while a caller's callback (before_wait) runs.
 */

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pagecache-internal.h"
#include "racache/util.h"

/* Shards at most: a power of two (shard_of masks with nshards - 1). */
#define MAX_SHARDS 64

/* Page data lives in one arena of capacity pages, reserved (not
 * touched) when the cache is made, in huge pages where the kernel has
 * them (rc_huge_alloc): first touch of fresh memory is the largest cost
 * of a short job, and a huge page takes one page fault for 2 MiB where
 * 4 KiB pages take 512 (src/hugemem.c).  A free slot is taken lowest
 * address first (page_alloc): memory that was touched before is reused
 * before fresh memory, and consecutive pages of a window get
 * consecutive slots wherever the free slots lie in runs, so a backend
 * read can go straight into them (rc_pc_run_data).
 */

/* Drop-behind has two parts.  A client read gives back, for reuse, the
 * pages a client read once that lie RC_PC_BEHIND_BYTES behind it
 * (rc_pc_drop_behind in src/pagecache-giveback.c: the pages behind a
 * stream, in the order it read them).  And whatever leaves pages read
 * once in the cache (a stream that stopped, unaligned reads) is bounded
 * here (drop_behind): with more than this many bytes of them cached
 * (half the cache at most, and more than a stream keeps behind it), the
 * oldest of a shard's go when a page of that shard is read once.
 */
#define INACTIVE_RESERVE_BYTES (UINT64_C (8) << 20)

static void
lru_init (struct lru *l)
{
  l->head.lprev = l->head.lnext = &l->head;
}

static void
lru_unlink (struct page *p)
{
  p->lprev->lnext = p->lnext;
  p->lnext->lprev = p->lprev;
  p->lprev = p->lnext = NULL;
}

/* Most recently used at the head. */
static void
lru_push (struct lru *l, struct page *p)
{
  p->lnext = l->head.lnext;
  p->lprev = &l->head;
  l->head.lnext->lprev = p;
  l->head.lnext = p;
}

static struct page *
lru_oldest (struct lru *l)
{
  return l->head.lprev == &l->head ? NULL : l->head.lprev;
}

static struct lru *
list_of (struct shard *s, enum page_list l)
{
  return l == L_UNUSED ? &s->unused : l == L_INACTIVE ? &s->inactive
    : &s->active;
}

/* Put up to date page p at the head of list l, as the newest. */
static void
list_put (struct rc_pagecache *pc, struct shard *s, struct page *p,
          enum page_list l)
{
  if (p->list == L_INACTIVE)
    atomic_fetch_sub_explicit (&pc->n_inactive, 1, memory_order_relaxed);
  if (p->list != L_NONE)
    lru_unlink (p);
  p->list = l;
  if (l == L_INACTIVE)
    atomic_fetch_add_explicit (&pc->n_inactive, 1, memory_order_relaxed);
  p->stamp = ++s->tick;
  lru_push (list_of (s, l), p);
}

/* The group_pages slot of page index's group. */
static inline _Atomic uint32_t *
group_slot (struct rc_pagecache *pc, ra_pgoff index)
{
  return &pc->group_pages[((index >> GROUP_SHIFT) *
                           UINT64_C (0x9E3779B97F4A7C15)) >> pc->group_shift];
}

/* The group_pages slots: one per group the cache can hold, twice over
 * (a power of two, at least 256, at most 2^20: beyond, groups share
 * slots and walk more); sets pc->group_shift.
 */
static size_t
group_slots (struct rc_pagecache *pc)
{
  uint64_t groups = (pc->total_capacity >> GROUP_SHIFT) + 1, n = 256;
  unsigned bits = 8;

  while (n < 2 * groups && bits < 20) {
    n *= 2;
    bits++;
  }
  pc->group_shift = 64 - bits;
  return n;
}

/* The tables a cache needs whatever the job, all zero at first, in one
 * block (rc_huge_alloc: huge pages, where it is large enough): every
 * shard's hash buckets, the group_pages slots and the refault history.
 * Hashing touches them all over, so in 4 KiB pages even a short job
 * faults in most of them (bench/RESULTS.md, "Huge pages for the tables
 * and bounce buffers").  -1: out of memory.
 */
static int
tables_new (struct rc_pagecache *pc)
{
  size_t nb = 0, len, i;
  /* buckets, then group slots and the history, each 64-byte aligned */
  size_t groups_len =
    (group_slots (pc) * sizeof *pc->group_pages + 63) & ~(size_t) 63;
  char *t;

  for (i = 0; i < pc->nshards; i++)
    nb += pc->shards[i].bucket_mask + 1;
  len = nb * sizeof (struct page *) + groups_len + REFAULT_BITS / 8;
  t = pc->tables = rc_huge_alloc (len, &pc->tables_map);
  if (!t)
    return -1;
  pc->fixed_bytes += pc->tables_map ? pc->tables_map : len;
  for (i = 0; i < pc->nshards; i++) {
    pc->shards[i].buckets = (struct page **) t;
    t += (pc->shards[i].bucket_mask + 1) * sizeof (struct page *);
  }
  pc->group_pages = (_Atomic uint32_t *) t;
  t += groups_len;
  pc->refault = (_Atomic uint64_t *) t;
  return 0;
}

/* Reserve the arena (rc_huge_alloc: address space only, nothing
 * touched, in huge pages where the kernel has them) and mark every slot
 * free.
 */
static int
arena_new (struct rc_pagecache *pc)
{
  size_t len = (size_t) pc->total_capacity << pc->page_shift, i;

  if ((uint64_t) len >> pc->page_shift != pc->total_capacity)
    return -1;
  pc->free_words = (pc->total_capacity + 63) / 64;
  pc->free_slots = malloc (pc->free_words * sizeof *pc->free_slots);
  if (!pc->free_slots)
    return -1;
  pc->fixed_bytes += pc->free_words * sizeof *pc->free_slots;
  for (i = 0; i < pc->free_words; i++)
    pc->free_slots[i] = ~UINT64_C (0);
  if (pc->total_capacity % 64)
    pc->free_slots[pc->free_words - 1] =
      (UINT64_C (1) << (pc->total_capacity % 64)) - 1;
  pc->arena = rc_huge_alloc (len, &pc->arena_map);
  return pc->arena ? 0 : -1;
}

static struct rc_pagecache *
pc_new (uint64_t cache_size, uint32_t page_size, struct rc_stats *stats,
        bool with_data)
{
  struct rc_pagecache *pc;
  uint64_t total_pages;
  unsigned i;

  assert (page_size >= 512 && (page_size & (page_size - 1)) == 0);
  pc = calloc (1, sizeof *pc);
  if (!pc)
    return NULL;
  pc->page_size = page_size;
  pc->page_shift = __builtin_ctz (page_size);
  pc->stats = stats;
  total_pages = cache_size / page_size;
  if (total_pages == 0)
    total_pages = 1;
  /* Each shard must hold a useful number of pages. */
  pc->nshards = MAX_SHARDS;
  while (pc->nshards > 1 && total_pages / pc->nshards < 64)
    pc->nshards /= 2;
  pthread_mutex_init (&pc->mem_lock, NULL);
  pc->shards = calloc (pc->nshards, sizeof *pc->shards);
  if (!pc->shards) {
    pthread_mutex_destroy (&pc->mem_lock);
    free (pc);
    return NULL;
  }
  for (i = 0; i < pc->nshards; i++) {
    struct shard *s = &pc->shards[i];
    size_t nb = 16;

    s->capacity = total_pages / pc->nshards
      + (i < total_pages % pc->nshards);
    while (nb < s->capacity * 2)
      nb *= 2;
    s->bucket_mask = nb - 1;     /* the buckets: tables_new */
    lru_init (&s->unused);
    lru_init (&s->inactive);
    lru_init (&s->active);
    pthread_mutex_init (&s->lock, NULL);
    pthread_cond_init (&s->ready, NULL);
  }
  pc->fixed_bytes += sizeof *pc + pc->nshards * sizeof *pc->shards;
  pc->nr_pages = 0;
  pc->total_capacity = total_pages;
  if (tables_new (pc) == -1 || (with_data && arena_new (pc) == -1)) {
    rc_pc_free (pc);
    return NULL;
  }
  pc->inactive_reserve = INACTIVE_RESERVE_BYTES / page_size;
  if (pc->inactive_reserve > total_pages / 2)
    pc->inactive_reserve = total_pages / 2;
  rc_pc_giveback_init (pc, total_pages);
  return pc;
}

struct rc_pagecache *
rc_pc_new (uint64_t cache_size, uint32_t page_size, struct rc_stats *stats)
{
  return pc_new (cache_size, page_size, stats, true);
}

struct rc_pagecache *
rc_pc_new_nodata (uint64_t cache_size, uint32_t page_size,
                  struct rc_stats *stats)
{
  return pc_new (cache_size, page_size, stats, false);
}

void
rc_pc_free (struct rc_pagecache *pc)
{
  unsigned i;
  size_t b;

  if (!pc)
    return;
  for (i = 0; i < pc->nshards; i++) {
    struct shard *s = &pc->shards[i];

    for (b = 0; s->buckets && b <= s->bucket_mask; b++) {
      struct page *p = s->buckets[b];
      while (p) {
        struct page *n = p->hnext;
        free (p);
        p = n;
      }
    }
    pthread_mutex_destroy (&s->lock);
    pthread_cond_destroy (&s->ready);
  }
  while (pc->spare) {
    struct page *n = pc->spare->hnext;
    free (pc->spare);
    pc->spare = n;
  }
  if (pc->arena)
    rc_huge_free (pc->arena, pc->arena_map);
  free (pc->free_slots);
  pthread_mutex_destroy (&pc->mem_lock);
  rc_huge_free (pc->tables, pc->tables_map);
  free (pc->shards);
  free (pc);
}

void
rc_pc_set_nr_pages (struct rc_pagecache *pc, ra_pgoff nr_pages)
{
  pc->nr_pages = nr_pages;
}

uint32_t
rc_pc_page_size (const struct rc_pagecache *pc)
{
  return pc->page_size;
}

/* Take the marker off p (which carries it).  Called with its shard's
 * lock held.
 */
static void
clear_marker (struct rc_pagecache *pc, struct page *p)
{
  p->flags &= ~PF_MARKER;
  atomic_fetch_sub_explicit (&pc->markers, 1, memory_order_relaxed);
}

/* Give slot back.  Called with mem_lock held. */
static void
slot_free (struct rc_pagecache *pc, size_t slot)
{
  pc->free_slots[slot >> 6] |= UINT64_C (1) << (slot & 63);
  if ((slot >> 6) < pc->free_hint)
    pc->free_hint = slot >> 6;
}

/* Remove p from the shard and free it.  Called with s->lock held. */
void
rc_pc_remove_page (struct rc_pagecache *pc, struct shard *s,
                   struct page *p)
{
  struct page **pp = &s->buckets[bucket_of (s, p->index)];

  while (*pp != p)
    pp = &(*pp)->hnext;
  *pp = p->hnext;
  if (p->list == L_INACTIVE)
    atomic_fetch_sub_explicit (&pc->n_inactive, 1, memory_order_relaxed);
  if (p->list != L_NONE)
    lru_unlink (p);
  p->list = L_NONE;
  if (p->flags & PF_MARKER)
    clear_marker (pc, p);
  if (p->state == PAGE_INFLIGHT)
    s->inflight--;
  s->count--;
  atomic_fetch_sub_explicit (group_slot (pc, p->index), 1,
                             memory_order_relaxed);
  STAT_SUB (pc->stats, cache_bytes, pc->page_size);
  ACQUIRE_LOCK (&pc->mem_lock);
  if (pc->arena)
    slot_free (pc, (size_t) (p->data - pc->arena) >> pc->page_shift);
  p->hnext = pc->spare;
  pc->spare = p;
  RELEASE_LOCK (&pc->mem_lock);
}

/* Drop-behind: with more pages read once cached than the reserve, give
 * the oldest of this shard's back for reuse.  Called with s->lock held,
 * after a page moved to the inactive list.
 */
static void
drop_behind (struct rc_pagecache *pc, struct shard *s)
{
  struct page *p;

  if (atomic_load_explicit (&pc->n_inactive, memory_order_relaxed)
      <= pc->inactive_reserve)
    return;
  p = lru_oldest (&s->inactive);
  if (p) {
    rc_pc_refault_mark (pc, p->index);
    rc_pc_remove_page (pc, s, p);
    STAT_ADD (pc->stats, evictions, 1);
  }
}

/* Make room for one page in a full shard.  Called with s->lock held.
 *
 * Pages a client has read once (a stream's pages behind it) go first:
 * a sequential reader rarely comes back to them.  Then pages read ahead
 * and never used, or active pages, oldest first; but a plain "unused
 * before active" rule would evict the window a streaming reader is
 * about to consume as soon as the cache is full of active pages.  So
 * unused pages age twice as fast as active ones: the oldest unused page
 * is evicted if it has waited at least half as long as the oldest
 * active page; speculation that is not consumed in that time is what
 * the cache gives up, and counts as wasted.
 */
static bool
evict_one (struct rc_pagecache *pc, struct shard *s)
{
  struct page *unused = lru_oldest (&s->unused);
  struct page *active = lru_oldest (&s->active);
  struct page *victim = lru_oldest (&s->inactive);

  if (victim)
    ;
  else if (unused &&
           (!active ||
            2 * (s->tick - unused->stamp) >= s->tick - active->stamp)) {
    victim = unused;
    if (unused->flags & PF_REPLAY)
      STAT_ADD (pc->stats, replay_wasted_pages, 1);
    if (unused->flags & PF_AHEAD) {
      STAT_ADD (pc->stats, ahead_wasted_pages, 1);
      if (unused->owner)
        atomic_fetch_add_explicit (&pc->wasted[unused->owner], 1,
                                   memory_order_relaxed);
    }
  }
  else
    victim = active;
  if (!victim)
    return false;               /* everything is in flight */
  rc_pc_remove_page (pc, s, victim);
  STAT_ADD (pc->stats, evictions, 1);
  return true;
}

/* A page struct with data for a new page: the free slot of the lowest
 * address.  The caller has made room in its shard (count < capacity),
 * so a slot is free: the arena has as many as all shards together.
 * Called with a shard lock held (mem_lock nests inside it).
 */
static struct page *
page_alloc (struct rc_pagecache *pc)
{
  struct page *p = NULL;
  size_t w, slot;

  ACQUIRE_LOCK (&pc->mem_lock);
  if (!pc->arena) {                /* no data: a page struct only */
    if ((p = pc->spare) != NULL)
      pc->spare = p->hnext;
    else if ((p = malloc (sizeof *p)) != NULL)
      pc->page_structs++;
    if (p)
      p->data = NULL;
    goto out;
  }
  for (w = pc->free_hint; w < pc->free_words && pc->free_slots[w] == 0; w++)
    ;
  pc->free_hint = w;
  if (w == pc->free_words)
    goto out;                   /* cannot happen, see above */
  if ((p = pc->spare) != NULL)
    pc->spare = p->hnext;
  else if ((p = malloc (sizeof *p)) == NULL)
    goto out;
  else
    pc->page_structs++;
  slot = (w << 6) + __builtin_ctzll (pc->free_slots[w]);
  pc->free_slots[w] &= pc->free_slots[w] - 1;
  if (slot + 1 > pc->data_pages)
    pc->data_pages = slot + 1;
  p->data = pc->arena + (slot << pc->page_shift);
 out:
  RELEASE_LOCK (&pc->mem_lock);
  return p;
}

bool
rc_pc_insert (struct rc_pagecache *pc, ra_pgoff index, bool marker,
              enum rc_insert_kind kind, unsigned owner)
{
  struct shard *s;
  struct page *p;
  bool ok = false;

  if (index >= pc->nr_pages)
    return false;
  s = shard_of (pc, index);
  ACQUIRE_LOCK (&s->lock);
  if (lookup (s, index))
    goto out;
  if (s->count >= s->capacity && !evict_one (pc, s))
    goto out;
  p = page_alloc (pc);
  if (!p)
    goto out;
  p->index = index;
  p->state = PAGE_INFLIGHT;
  p->flags = (marker ? PF_MARKER : 0)
    | (kind == RC_INSERT_FORCED ? 0 : PF_UNUSED)
    | (kind == RC_INSERT_AHEAD || kind == RC_INSERT_NEAR ? PF_AHEAD : 0)
    | (kind == RC_INSERT_NEAR ? PF_NEAR : 0)
    | (kind == RC_INSERT_REPLAY ? PF_REPLAY : 0)
    | (kind == RC_INSERT_RANDOM ||
       (kind != RC_INSERT_FORCED && rc_pc_refault_test (pc, index))
       ? PF_KEEP : 0);
  p->list = L_NONE;
  p->owner = (uint16_t) (owner % RC_PC_OWNERS);
  p->near_step = (uint16_t) atomic_load_explicit (&pc->near_step,
                                                  memory_order_relaxed);
  if (marker)
    atomic_fetch_add_explicit (&pc->markers, 1, memory_order_relaxed);
  p->lprev = p->lnext = NULL;
  p->hnext = s->buckets[bucket_of (s, index)];
  s->buckets[bucket_of (s, index)] = p;
  s->count++;
  atomic_fetch_add_explicit (group_slot (pc, index), 1,
                             memory_order_relaxed);
  s->inflight++;
  STAT_ADD (pc->stats, cache_bytes, pc->page_size);
  ok = true;
 out:
  RELEASE_LOCK (&s->lock);
  return ok;
}

void
rc_pc_walk (struct rc_pagecache *pc, ra_pgoff start, ra_pgoff count,
            void (*fn) (struct rc_pagecache *, struct shard *, ra_pgoff,
                        void *),
            void *arg, bool cached_only)
{
  ra_pgoff i = start, end = start + count;

  while (i < end) {
    struct shard *s = shard_of (pc, i);
    ra_pgoff group_end = ((i >> GROUP_SHIFT) + 1) << GROUP_SHIFT;
    bool wake;

    if (group_end > end)
      group_end = end;
    if (cached_only &&
        atomic_load_explicit (group_slot (pc, i), memory_order_relaxed)
        == 0) {
      i = group_end;
      continue;
    }
    ACQUIRE_LOCK (&s->lock);
    for (; i < group_end; i++)
      fn (pc, s, i, arg);
    wake = s->waiters > 0;
    RELEASE_LOCK (&s->lock);
    if (wake)
      pthread_cond_broadcast (&s->ready);
  }
}

struct complete_arg {
  ra_pgoff start;
  const char *buf;
  size_t len;
  int err;
  bool used;                    /* a client has read them already */
};

static void
complete_one (struct rc_pagecache *pc, struct shard *s, ra_pgoff i,
              void *argv)
{
  struct complete_arg *a = argv;
  struct page *p = lookup (s, i);
  size_t off = (size_t) (i - a->start) << pc->page_shift;

  if (!p || p->state != PAGE_INFLIGHT)
    return;                     /* cannot happen: in-flight pages stay */
  if (a->err || (p->flags & PF_STALE)) {
    rc_pc_remove_page (pc, s, p);
    return;
  }
  if (!pc->arena)
    ;                           /* no data */
  else if (off < a->len) {
    size_t n = a->len - off < pc->page_size ? a->len - off : pc->page_size;
    /* The read may have gone straight into the page (rc_pc_run_data). */
    if (a->buf + off != p->data)
      memcpy (p->data, a->buf + off, n);
    if (n < pc->page_size)
      memset (p->data + n, 0, pc->page_size - n);
  }
  else
    memset (p->data, 0, pc->page_size);
  p->state = PAGE_UPTODATE;
  s->inflight--;
  /* Forced pages (NBD_CMD_CACHE) are kept as active: the client said it
   * will read them.
   */
  if (a->used && (p->flags & PF_UNUSED)) {
    list_put (pc, s, p, (p->flags & PF_KEEP) ? L_ACTIVE : L_INACTIVE);
    p->flags &= ~(PF_UNUSED | PF_AHEAD | PF_KEEP | PF_NEAR | PF_REPLAY);
    drop_behind (pc, s);
  }
  else
    list_put (pc, s, p, (p->flags & PF_UNUSED) ? L_UNUSED : L_ACTIVE);
}

void
rc_pc_complete (struct rc_pagecache *pc, ra_pgoff start, ra_pgoff count,
                const char *buf, size_t len, int err)
{
  struct complete_arg a = { .start = start, .buf = buf, .len = len,
                            .err = err };

  rc_pc_walk (pc, start, count, complete_one, &a, false);
}

void
rc_pc_complete_used (struct rc_pagecache *pc, ra_pgoff start,
                     ra_pgoff count, const char *buf, size_t len)
{
  struct complete_arg a = { .start = start, .buf = buf, .len = len,
                            .used = true };

  rc_pc_walk (pc, start, count, complete_one, &a, false);
}

struct run_arg {
  ra_pgoff start;
  char *data;                   /* page start's, NULL once not a run */
};

static void
run_one (struct rc_pagecache *pc, struct shard *s, ra_pgoff i, void *argv)
{
  struct run_arg *a = argv;
  struct page *p = lookup (s, i);

  if (!a->data)
    return;
  if (!p || p->state != PAGE_INFLIGHT)
    a->data = NULL;             /* cannot happen: in-flight pages stay */
  else if (i == a->start)
    a->data = p->data;
  else if (p->data != a->data + ((size_t) (i - a->start) << pc->page_shift))
    a->data = NULL;
}

char *
rc_pc_run_data (struct rc_pagecache *pc, ra_pgoff start, ra_pgoff count)
{
  struct run_arg a = { .start = start, .data = (char *) 1 };

  if (!pc->arena)
    return NULL;
  rc_pc_walk (pc, start, count, run_one, &a, false);
  return a.data;
}

static void
abandon_one (struct rc_pagecache *pc, struct shard *s, ra_pgoff i,
             void *argv)
{
  ra_pgoff *removed = argv;
  struct page *p = lookup (s, i);

  if (p && p->state == PAGE_INFLIGHT) {
    rc_pc_remove_page (pc, s, p);
    (*removed)++;
  }
}

ra_pgoff
rc_pc_abandon (struct rc_pagecache *pc, ra_pgoff start, ra_pgoff count)
{
  ra_pgoff removed = 0;

  rc_pc_walk (pc, start, count, abandon_one, &removed, false);
  return removed;
}

static void
invalidate_one (struct rc_pagecache *pc, struct shard *s, ra_pgoff i,
                void *argv)
{
  struct page *p = lookup (s, i);

  if (!p)
    return;
  STAT_ADD (pc->stats, invalidated_pages, 1);
  if (p->state == PAGE_INFLIGHT)
    p->flags |= PF_STALE;
  else
    rc_pc_remove_page (pc, s, p);
}

void
rc_pc_invalidate (struct rc_pagecache *pc, uint64_t offset, uint64_t count)
{
  ra_pgoff first, last;

  if (count == 0)
    return;
  first = offset >> pc->page_shift;
  last = (offset + count - 1) >> pc->page_shift;
  if (last >= pc->nr_pages && pc->nr_pages > 0)
    last = pc->nr_pages - 1;
  if (first > last)
    return;
  /* A range larger than the cache (a whole-disk trim): walking the
   * cached pages is cheaper than looking up every page of the range.
   */
  if (last - first + 1 > pc->total_capacity) {
    unsigned i;
    size_t b;

    for (i = 0; i < pc->nshards; i++) {
      struct shard *s = &pc->shards[i];

      ACQUIRE_LOCK (&s->lock);
      for (b = 0; b <= s->bucket_mask; b++) {
        struct page *p = s->buckets[b], *next;

        for (; p; p = next) {
          next = p->hnext;
          if (p->index >= first && p->index <= last)
            invalidate_one (pc, s, p->index, NULL);
        }
      }
      RELEASE_LOCK (&s->lock);
    }
    return;
  }
  rc_pc_walk (pc, first, last - first + 1, invalidate_one, NULL, false);
}

/* A client copied up to date page p out: move it to the list it now
 * belongs on.  Returns true if that is the inactive list (read once).
 * Called with s->lock held.
 */
static bool
read_once (struct rc_pagecache *pc, struct shard *s, struct page *p,
           bool again)
{
  enum page_list to;

  if (p->flags & PF_UNUSED) {
    if (p->flags & PF_AHEAD)
      STAT_ADD (pc->stats, ahead_used_pages, 1);
    if (p->flags & PF_REPLAY)
      STAT_ADD (pc->stats, replay_used_pages, 1);
    if ((p->flags & PF_NEAR) &&
        (uint16_t) (atomic_load_explicit (&pc->near_step,
                                          memory_order_relaxed)
                    - p->near_step) <= RC_PC_NEAR_HORIZON)
      atomic_fetch_add_explicit (&pc->near_hits, 1, memory_order_relaxed);
    to = (p->flags & PF_KEEP) ? L_ACTIVE : L_INACTIVE;
    p->flags &= ~(PF_UNUSED | PF_AHEAD | PF_KEEP | PF_NEAR | PF_REPLAY);
  }
  else if (p->list == L_INACTIVE && !again)
    to = L_ACTIVE;              /* read again: it earns its place */
  else
    to = p->list;
  list_put (pc, s, p, to);
  return to == L_INACTIVE;
}

unsigned
rc_pc_copy_run (struct rc_pagecache *pc, ra_pgoff index, unsigned n,
                void *dst, ra_pgoff again_index)
{
  struct shard *s = shard_of (pc, index);
  ra_pgoff group_end = ((index >> GROUP_SHIFT) + 1) << GROUP_SHIFT;
  unsigned k, inactive = 0;

  if (n > group_end - index)
    n = group_end - index;
  ACQUIRE_LOCK (&s->lock);
  for (k = 0; k < n; k++) {
    struct page *p = lookup (s, index + k);

    if (!p || p->state != PAGE_UPTODATE || (p->flags & PF_MARKER))
      break;
    if (pc->arena)
      memcpy ((char *) dst + ((size_t) k << pc->page_shift), p->data,
              pc->page_size);
    inactive += read_once (pc, s, p, index + k == again_index);
  }
  /* One page back per page read once, as rc_pc_access does: one for the
   * whole run let the pages read once grow past the reserve.
   */
  while (inactive-- > 0)
    drop_behind (pc, s);
  RELEASE_LOCK (&s->lock);
  return k;
}

enum rc_access
rc_pc_access (struct rc_pagecache *pc, struct rc_pc_page_read *pgr)
{
  struct shard *s = shard_of (pc, pgr->index);
  enum rc_access ret;
  struct page *p;

  pgr->waited = pgr->waited_ahead = false;
  ACQUIRE_LOCK (&s->lock);
  for (;;) {
    p = lookup (s, pgr->index);
    if (!p) {
      ret = RC_ACCESS_ABSENT;
      break;
    }
    if (p->flags & PF_MARKER) {
      clear_marker (pc, p);
      ret = RC_ACCESS_MARKER;
      break;
    }
    if (p->state == PAGE_UPTODATE) {
      if (pc->arena)
        memcpy (pgr->dst, p->data + pgr->off, pgr->len);
      if (read_once (pc, s, p, pgr->again))
        drop_behind (pc, s);
      ret = RC_ACCESS_COPIED;
      break;
    }
    /* In flight: sleep until its read completes (or fails, or a write
     * makes it stale), then look again: it may be gone.
     */
    if (!pgr->waited && (p->flags & PF_AHEAD))
      pgr->waited_ahead = true;
    if (!pgr->waited && pgr->before_wait) {
      pgr->waited = true;
      RELEASE_LOCK (&s->lock);
      pgr->before_wait (pgr->arg, pgr->index);
      ACQUIRE_LOCK (&s->lock);
      continue;
    }
    pgr->waited = true;
    s->waiters++;
    pthread_cond_wait (&s->ready, &s->lock);
    s->waiters--;
  }
  RELEASE_LOCK (&s->lock);
  return ret;
}

/* The engine's queries. */
static bool
q_cached (void *opaque, ra_pgoff index)
{
  struct rc_pagecache *pc = opaque;
  struct shard *s;
  bool r;

  if (index >= pc->nr_pages)
    return false;
  s = shard_of (pc, index);
  ACQUIRE_LOCK (&s->lock);
  r = lookup (s, index) != NULL;
  RELEASE_LOCK (&s->lock);
  return r;
}

const struct ra_cache_ops rc_pc_query_ops = { .cached = q_cached };

bool
rc_pc_groups_consistent (struct rc_pagecache *pc)
{
  size_t n = (size_t) 1 << (64 - pc->group_shift), i, b;
  uint32_t *want;
  bool ok = true;

  want = calloc (n, sizeof *want);
  if (!want)
    abort ();                   /* for tests only: see the header */
  for (i = 0; i < pc->nshards; i++) {
    struct shard *s = &pc->shards[i];
    struct page *p;

    ACQUIRE_LOCK (&s->lock);
    for (b = 0; b <= s->bucket_mask; b++)
      for (p = s->buckets[b]; p; p = p->hnext)
        want[group_slot (pc, p->index) - pc->group_pages]++;
    RELEASE_LOCK (&s->lock);
  }
  for (i = 0; i < n; i++)
    if (atomic_load (&pc->group_pages[i]) != want[i])
      ok = false;
  free (want);
  return ok;
}

void
rc_pc_counts (struct rc_pagecache *pc, struct rc_pc_counts *out)
{
  unsigned i;
  size_t b;

  memset (out, 0, sizeof *out);
  for (i = 0; i < pc->nshards; i++) {
    struct shard *s = &pc->shards[i];

    ACQUIRE_LOCK (&s->lock);
    out->pages += s->count;
    out->inflight += s->inflight;
    out->capacity += s->capacity;
    for (b = 0; b <= s->bucket_mask; b++) {
      struct page *p;
      for (p = s->buckets[b]; p; p = p->hnext) {
        if (p->state == PAGE_UPTODATE)
          out->uptodate++;
        if (p->flags & PF_UNUSED)
          out->unused++;
        if ((p->flags & PF_UNUSED) && (p->flags & PF_AHEAD))
          out->unused_ahead++;
      }
    }
    RELEASE_LOCK (&s->lock);
  }
  ACQUIRE_LOCK (&pc->mem_lock);
  out->memory = pc->data_pages;
  out->other_bytes = pc->fixed_bytes + pc->page_structs * sizeof (struct page);
  RELEASE_LOCK (&pc->mem_lock);
}

bool
rc_pc_take_marker (struct rc_pagecache *pc, ra_pgoff index)
{
  struct shard *s = shard_of (pc, index);
  struct page *p;
  bool r = false;

  ACQUIRE_LOCK (&s->lock);
  p = lookup (s, index);
  if (p && (p->flags & PF_MARKER)) {
    clear_marker (pc, p);
    r = true;
  }
  RELEASE_LOCK (&s->lock);
  return r;
}

unsigned
rc_pc_page_owner (struct rc_pagecache *pc, ra_pgoff index)
{
  struct shard *s = shard_of (pc, index);
  struct page *p;
  unsigned owner;

  ACQUIRE_LOCK (&s->lock);
  p = lookup (s, index);
  owner = p ? p->owner : 0;
  RELEASE_LOCK (&s->lock);
  return owner;
}

uint64_t
rc_pc_markers (struct rc_pagecache *pc)
{
  return atomic_load_explicit (&pc->markers, memory_order_relaxed);
}

uint64_t
rc_pc_capacity (const struct rc_pagecache *pc)
{
  return pc->total_capacity;
}

uint32_t
rc_pc_take_wasted (struct rc_pagecache *pc, unsigned owner)
{
  return atomic_exchange_explicit (&pc->wasted[owner % RC_PC_OWNERS], 0,
                                   memory_order_relaxed);
}

uint32_t
rc_pc_take_near_hits (struct rc_pagecache *pc)
{
  return atomic_exchange_explicit (&pc->near_hits, 0, memory_order_relaxed);
}

void
rc_pc_near_step (struct rc_pagecache *pc)
{
  atomic_fetch_add_explicit (&pc->near_step, 1, memory_order_relaxed);
}
