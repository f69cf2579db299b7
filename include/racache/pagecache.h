/* ra-cache: the page cache.
 *
 * Pages of page_size bytes, keyed by page index, shared by every
 * connection.  A page is absent (not in the table), in flight (inserted,
 * its backend read not finished), or up to date.  A failed read removes
 * its pages again (failed pages go back to absent, and the reader that
 * asked for them gets the error), so a later access retries on demand.
 *
 * The table is split into shards, each with its own lock, hash table,
 * condition variable and LRU lists; consecutive groups of pages share a
 * shard so one window touches few locks.  No lock is ever held across a
 * backend read.  Memory: at most cache_size bytes of page data (each
 * shard holds at most its share), plus a small struct per page.
 *
 * Memory and eviction (src/pagecache.c, evict_one and page_alloc).  Up
 * to date pages are on one of three lists, as the kernel keeps an
 * inactive and an active list: unused (read by a window, not yet by a
 * client), inactive (read once by a client: a stream's pages behind
 * it), active (read again, or read at random, branch G, or forced by
 * NBD_CMD_CACHE).  Fresh memory is expensive to touch the first time,
 * so pages read once are given back for reuse behind the stream that
 * read them (drop-behind, rc_pc_drop_behind) and a small reserve of
 * them is kept for short-term re-reads: a streaming reader turns over a
 * small hot set, and the cache grows only for data that earns its
 * place.  Data read again after drop-behind gave it back (a refault,
 * remembered per group of pages, for about the last cache's worth of
 * groups given back) is kept as active the second time.  In a full
 * shard, inactive pages go first; then unused pages (counted as
 * wasted) or active ones, oldest first, with unused pages aging twice
 * as fast so that a streaming reader's next window is not evicted
 * before it is reached.  Pages in flight are on no list, so a page in
 * flight (and so any page someone waits for) is never evicted.
 */
#ifndef RACACHE_PAGECACHE_H
#define RACACHE_PAGECACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "racache/readahead.h"
#include "racache/stats.h"

struct rc_pagecache;

struct rc_pagecache *rc_pc_new (uint64_t cache_size, uint32_t page_size,
                                struct rc_stats *stats);
void rc_pc_free (struct rc_pagecache *pc);

/* The same cache without page data, for a simulation (ra-trace): no
 * memory is reserved for pages, nothing is copied (the dst and buf
 * arguments and fields below are not used and may be NULL),
 * rc_pc_run_data returns NULL; pages, lists, eviction and counters are
 * as above.
 */
struct rc_pagecache *rc_pc_new_nodata (uint64_t cache_size,
                                       uint32_t page_size,
                                       struct rc_stats *stats);

/* Pages in the export; pages at or past it are never cached. */
void rc_pc_set_nr_pages (struct rc_pagecache *pc, ra_pgoff nr_pages);

/* The engine's query interface (struct ra_cache_ops), opaque = pc. */
extern const struct ra_cache_ops rc_pc_query_ops;

/* How a page came to be inserted, for eviction and the ahead counters. */
enum rc_insert_kind {
  RC_INSERT_SYNC,    /* sync part of a window: evicted first until used */
  RC_INSERT_AHEAD,   /* async part: read ahead; counted used or wasted */
  RC_INSERT_FORCED,  /* NBD_CMD_CACHE: the client said it will need it */
  RC_INSERT_RANDOM,  /* a random read (branch G): kept as active once read */
  RC_INSERT_NEAR,    /* async part of a near window (branch N): as
                      * RC_INSERT_AHEAD, and its first use counts as a
                      * near hit (rc_pc_take_near_hits) if it comes
                      * soon: within RC_PC_NEAR_HORIZON near steps */
  RC_INSERT_REPLAY,  /* read by the replay of a learned file: as an
                      * async part's page, counted as replay_used_pages
                      * or replay_wasted_pages, never as a stream's */
  /* (Any page but a forced one is kept so, too, if drop-behind gave its
   * group back lately: it is being read again.) */
};

/* Streams that own read-ahead pages, for the waste feedback of adaptive
 * mode: owner numbers are taken modulo this; 0 is no owner.
 */
#define RC_PC_OWNERS 1024

/* The owner number of the n-th stream (n from 0): 1 .. RC_PC_OWNERS - 1,
 * reused after that many streams (a reused number may hand a new stream
 * an old one's waste once).
 */
static inline unsigned
rc_pc_owner_of (uint64_t n)
{
  return (unsigned) (n % (RC_PC_OWNERS - 1)) + 1;
}

/* Insert page index in flight if it is absent.  marker: the page gets
 * the marker.  owner: the stream that reads it (0 = none); if the page
 * was read ahead and is evicted unused, it counts as wasted for that
 * owner (rc_pc_take_wasted).  Returns false if the page was present, or
 * the shard is full of pages in flight, or memory ran out.
 */
bool rc_pc_insert (struct rc_pagecache *pc, ra_pgoff index, bool marker,
                   enum rc_insert_kind kind, unsigned owner);

/* The owner of the window that inserted page index (as rc_pc_insert
 * took it, modulo RC_PC_OWNERS), or 0: none, or the page is absent.
 */
unsigned rc_pc_page_owner (struct rc_pagecache *pc, ra_pgoff index);

/* Read-ahead pages of owner evicted unused since the last call. */
uint32_t rc_pc_take_wasted (struct rc_pagecache *pc, unsigned owner);

/* Pages of near windows' async parts (RC_INSERT_NEAR) that a client
 * read for the first time since the last call, at most
 * RC_PC_NEAR_HORIZON near steps after they were inserted: the hits that
 * size the next near window (branch N, adaptive mode).  A page used
 * later than that is no sign that the misses around it are worth
 * reading ahead: a random reader over a small export in a large cache
 * uses, in the end, much of what was read.
 */
#define RC_PC_NEAR_HORIZON 128
uint32_t rc_pc_take_near_hits (struct rc_pagecache *pc);

/* One more miss that no stream explains (a window of branch G or N):
 * the clock of RC_PC_NEAR_HORIZON.
 */
void rc_pc_near_step (struct rc_pagecache *pc);

/* Clear the marker of page index if it carries one; true if it did. */
bool rc_pc_take_marker (struct rc_pagecache *pc, ra_pgoff index);

/* Pages carrying the marker now: about one per active sequential
 * stream (the fair share of adaptive mode divides the cache by it).
 */
uint64_t rc_pc_markers (struct rc_pagecache *pc);

/* Pages the cache holds at most. */
uint64_t rc_pc_capacity (const struct rc_pagecache *pc);

/* A backend read of pages [start, start + count) finished.  On success
 * buf holds len bytes (the tail of a partial last page is zero-filled).
 * Pages become up to date, except pages a write made stale meanwhile,
 * which are removed; on error (err != 0) all are removed.  Waiters wake.
 */
void rc_pc_complete (struct rc_pagecache *pc, ra_pgoff start, ra_pgoff count,
                     const char *buf, size_t len, int err);

/* If the data of the in-flight pages [start, start + count) lie one
 * after the other in memory, the first page's data: a backend read of
 * the pages can go straight there (then rc_pc_complete with that as
 * buf copies nothing).  NULL otherwise.  The pages stay in flight, and
 * their memory untouched by the cache, until rc_pc_complete.
 */
char *rc_pc_run_data (struct rc_pagecache *pc, ra_pgoff start,
                      ra_pgoff count);

/* The same, for a successful read that went straight into a client's
 * buffer: the pages count as read once by that client.
 */
void rc_pc_complete_used (struct rc_pagecache *pc, ra_pgoff start,
                          ra_pgoff count, const char *buf, size_t len);

/* Drop-behind: give back, for reuse, the pages among [from, to) that a
 * client has read once (and not again).  A stream calls it for the
 * pages rc_pc_behind_pages () behind it, in the order it read them.
 * Their memory slots are reused lowest address first, so the stream's
 * next windows get them in runs (rc_pc_run_data).
 */
#define RC_PC_BEHIND_BYTES (UINT64_C (1) << 20)
void rc_pc_drop_behind (struct rc_pagecache *pc, ra_pgoff from, ra_pgoff to);
/* RC_PC_BEHIND_BYTES in pages (a quarter of the cache at most). */
ra_pgoff rc_pc_behind_pages (const struct rc_pagecache *pc);

/* Read around the cache (a client whose own reads keep the backend busy
 * reads its request straight into its buffer, src/cache.c): may
 * [start, start + count) be read so?  Yes if none of its pages is cached
 * or in flight and drop-behind or an earlier read around did not give
 * back any whole group of it lately (data read again is kept, as after
 * drop-behind).  rc_pc_read_around_done remembers the range's whole
 * groups as given back.
 */
bool rc_pc_read_around_ok (struct rc_pagecache *pc, ra_pgoff start,
                           ra_pgoff count);
void rc_pc_read_around_done (struct rc_pagecache *pc, ra_pgoff start,
                             ra_pgoff count);

/* Remove in-flight pages whose read will not be issued (the async part
 * skipped for congestion).  Returns how many were removed.
 */
ra_pgoff rc_pc_abandon (struct rc_pagecache *pc, ra_pgoff start,
                        ra_pgoff count);

enum rc_access {
  RC_ACCESS_COPIED,  /* page up to date: bytes copied out */
  RC_ACCESS_ABSENT,  /* page not cached: sync trigger */
  RC_ACCESS_MARKER,  /* page carried the marker, now cleared: async trigger */
};

/* A client's read of bytes of one page, and what became of it: what
 * rc_pc_access takes (as the kernel's readahead_control carries one
 * readahead through its calls).  The caller fills in the fields down to
 * arg; the call sets waited and waited_ahead.
 */
struct rc_pc_page_read {
  ra_pgoff index;               /* the page */
  /* Where the bytes go (not used by a cache without data, which copies
   * nothing: may be NULL there).
   */
  void *dst;
  uint32_t off, len;            /* the page's bytes [off, off + len) */
  /* The read continues on the page where the same stream's previous
   * read ended, which is not a second use of the page (a page read a
   * second time moves from the inactive to the active list).
   */
  bool again;
  /* Optional: if the page is in flight, called once as
   * before_wait (arg, index) with no lock held (so the caller can hurry
   * the read along; ra-trace moves its virtual clock to the read's
   * completion) before the call sleeps until the page is ready.
   */
  void (*before_wait) (void *arg, ra_pgoff index);
  void *arg;
  bool waited;                  /* set: the page was in flight: waited for */
  /* Set: the page it slept for was in flight as part of an async part
   * (the read ahead was late).
   */
  bool waited_ahead;
};

/* A client reads pgr->len bytes at byte pgr->off of page pgr->index
 * into pgr->dst (struct rc_pc_page_read above).  If the page carries
 * the marker, clear it and return RC_ACCESS_MARKER without copying (the
 * caller triggers the next window, then calls again).  If the page is
 * in flight, call pgr->before_wait, then sleep until the page is ready.
 */
enum rc_access rc_pc_access (struct rc_pagecache *pc,
                             struct rc_pc_page_read *pgr);

/* The fast path of many hits: copy whole pages index, index + 1, ... (at
 * most n, within one group of pages, so under one shard lock) into dst
 * while they are up to date and carry no marker; the page again_index
 * is read on, not again (see struct rc_pc_page_read's again).  Returns
 * how many pages were copied; the caller takes the page that stopped it
 * (absent, in flight, marker) through rc_pc_access.
 */
unsigned rc_pc_copy_run (struct rc_pagecache *pc, ra_pgoff index, unsigned n,
                         void *dst, ra_pgoff again_index);

/* A write, trim or zero to bytes [offset, offset + count) reached the
 * backend (or failed there).  Cached pages it touches are dropped; pages
 * in flight are marked stale so their read does not install old data.
 */
void rc_pc_invalidate (struct rc_pagecache *pc, uint64_t offset,
                       uint64_t count);

/* Counts for tests and stats. */
struct rc_pc_counts {
  uint64_t pages, inflight, uptodate, unused, capacity;
  uint64_t unused_ahead;  /* unused pages read ahead (async parts) */
  uint64_t memory;   /* pages of memory the cache has touched (kept) */
  uint64_t other_bytes; /* memory beyond page data: page structs, hash
                         * buckets, bitmaps */
};
void rc_pc_counts (struct rc_pagecache *pc, struct rc_pc_counts *out);

/* For tests, on a cache where nothing runs: does the count of pages
 * kept per group (what lets walks over ranges read around the cache
 * skip the groups that hold nothing) match the pages cached?  Aborts
 * when it cannot allocate its own table.
 */
bool rc_pc_groups_consistent (struct rc_pagecache *pc);

uint32_t rc_pc_page_size (const struct rc_pagecache *pc);

#endif /* RACACHE_PAGECACHE_H */
