/* ra-cache: the read path of doc/readahead-rules.md, once, for every user.
 *
 * For a client read of pages [first, last), page by page:
 *  - a page that is not cached is a sync trigger: the engine decides a
 *    window (ondemand with marker = false) and the user submits it;
 *  - a page that carries the marker is an async trigger: the marker is
 *    cleared and the engine decides the next window (marker = true);
 *  - a page in flight is waited for; an up to date page is copied out.
 *
 * rc_read_path walks the pages and counts hits, misses and waits; what
 * "cached", "wait", "copy" and "submit" mean is the user's, through
 * struct rc_read_ops: the filter's src/cache.c (the shared page cache,
 * real threads and clock), ra-trace (a virtual clock and simulated
 * backend timing) and the unit tests' simulation
 * (tests/unit/test-readahead.c).  The same way, the steps every trigger
 * takes are here once: the decision (rc_read_decide: prev_pos and
 * req_count as the kernel has them, then ra_ondemand_at), the
 * congestion rule (rc_cong_decide in src/congestion.c, then
 * rc_drop_async_batches) and the engine parameters derived from a
 * configuration (rc_engine_params).
 */
#ifndef RACACHE_READPATH_H
#define RACACHE_READPATH_H

#include <stdbool.h>
#include <stdint.h>

#include "racache/config.h"
#include "racache/pagecache.h"
#include "racache/readahead.h"
#include "racache/stats.h"

/* One client read in progress. */
struct rc_read {
  uint64_t offset, count;       /* bytes */
  ra_pgoff first, last;         /* pages [first, last) */
  /* Pages [done_start, done_end) a trigger already delivered to the
   * client (read straight into its buffer): they count as hits, but for
   * the trigger's own page, which counted as a miss; as misses all if
   * done_missed (read around the cache: never cached).  done_end == 0:
   * none.
   */
  ra_pgoff done_start, done_end;
  bool done_missed;
  /* The byte after the bytes copied to the client so far, from offset
   * on: the kernel's iocb->ki_pos, which it stores in prev_pos after
   * each copied batch (rc_read_decide).
   */
  uint64_t copied_end;
  void *user;                   /* the user's, for its ops */
};

/* Set up rd for a read of count bytes at offset (page shift shift). */
void rc_read_init (struct rc_read *rd, uint64_t offset, uint64_t count,
                   unsigned shift);

struct rc_read_ops {
  /* Optional: copy whole pages index, index + 1, ... (at most n) that
   * are up to date and carry no marker; returns how many (hits).
   */
  unsigned (*copy_run) (void *opaque, struct rc_read *rd, ra_pgoff index,
                        unsigned n);
  /* The page's bytes [from, to) of the export (inside page index):
   * RC_ACCESS_ABSENT if the page is not cached; RC_ACCESS_MARKER if it
   * carried the marker, which the call cleared (nothing copied);
   * otherwise wait until the page is up to date (*waited; *waited_ahead
   * when it was in flight as part of an async part) and copy them:
   * RC_ACCESS_COPIED.
   */
  enum rc_access (*access) (void *opaque, struct rc_read *rd,
                            ra_pgoff index, uint64_t from, uint64_t to,
                            bool *waited, bool *waited_ahead);
  /* A trigger at page index (marker: async) of the read: decide a window
   * (normally with rc_read_decide), submit it, read its sync part.
   * Returns 0, or -1 with *err when the sync read of a page of
   * [index, rd->last) failed: a sync part may reach past the request,
   * and a failed read of a page beyond it is not this client's.
   */
  int (*trigger) (void *opaque, struct rc_read *rd, ra_pgoff index,
                  bool marker, int *err);
  /* Optional: the client waited for a page an async part had in flight
   * (adaptive mode's late feedback).
   */
  void (*late) (void *opaque, struct rc_read *rd, ra_pgoff index);
  /* The cache could not hold page index for this read after
   * RC_READ_MAX_TRIES sync triggers: read bytes [from, to) around it.
   * Returns 0, or -1 with *err.
   */
  int (*direct) (void *opaque, struct rc_read *rd, ra_pgoff index,
                 uint64_t from, uint64_t to, int *err);
};

/* prev_pos as Linux 5.18 has it: the kernel's filemap_read stores the
 * read position in prev_pos after each batch it copies, so a trigger
 * partway through a client read sees the pages copied before it as the
 * previous read.  1: rc_read_decide does the same; 0: prev_pos moves at
 * the end of a client read only.
 */
#ifndef RC_PREV_POS_PER_BATCH
#define RC_PREV_POS_PER_BATCH 0
#endif

/* The page where the stream's previous read ended (RA_NO_MARKER: none):
 * a read that goes on in it does not use it a second time
 * (rc_pc_page_read's again).
 */
static inline ra_pgoff
rc_again_page (const struct ra_state *ra, unsigned shift)
{
  return ra->prev_pos > 0 ? (ra->prev_pos - 1) >> shift : RA_NO_MARKER;
}

/* Sync triggers for one page before it is read around the cache (a
 * write made it stale, or the cache is full of pages in flight).
 */
#define RC_READ_MAX_TRIES 3

/* Walk the read's pages (page shift shift) as the top of this file
 * says, counting page_hits, page_misses, page_waits, direct_reads and
 * (when the whole read succeeds) client_bytes in st.  Returns 0, or -1
 * with *err: a sync read of a page this read needs failed.  The caller
 * records prev_pos at the end (ra_update_prev_pos).
 */
int rc_read_path (const struct rc_read_ops *ops, void *opaque,
                  struct rc_stats *st, unsigned shift, struct rc_read *rd,
                  int *err);

/* The decision of a trigger at page index of a read ending at page
 * last: ra_ondemand_at, with req (req_count) = last - index.  rd is
 * the client read the trigger serves, or NULL (an early trigger); in
 * may be NULL (kernel mode, or nothing measured); near is the near
 * rule's shared state (ra_control's near), held by the caller, or NULL.
 * See RC_PREV_POS_PER_BATCH for prev_pos.
 */
void rc_read_decide (struct ra_state *ra, const struct ra_params *p,
                     const struct ra_cache_ops *cache, void *opaque,
                     const struct rc_read *rd, ra_pgoff index, bool marker,
                     ra_pgoff last, const struct ra_inputs *in,
                     struct ra_near *near, struct ra_window *w);

/* ---- drop-behind ------------------------------------------------------ */

/* Client reads of one stream tracked at once for drop-behind (nbdkit
 * runs 16 threads per connection by default); more are not tracked.
 */
#define RC_STREAM_READS 16

/* What a stream gives back behind it (rc_pc_drop_behind): not thread
 * safe, the caller serializes (the filter under the stream lock).
 */
struct rc_behind {
  ra_pgoff behind;              /* pages before it given back */
  /* The first page of each read in progress (RA_NO_MARKER: a free
   * slot): drop-behind stays below them all.
   */
  ra_pgoff reading[RC_STREAM_READS];
};

void rc_behind_init (struct rc_behind *bh);
/* A client read of the stream starts at page first: the slot that
 * tracks it, or -1.
 */
int rc_behind_start (struct rc_behind *bh, ra_pgoff first);
/* A client read of pages [first, end) finished (end: the first page not
 * wholly read) and its slot (or -1) is freed.  The stream gives back
 * [from, *to): b (rc_pc_behind_pages) behind the lowest page that a
 * read of it still in progress has not passed, from where it gave back
 * last.  Returns from.  See src/readpath.c.
 */
ra_pgoff rc_behind_end (struct rc_behind *bh, int slot, ra_pgoff first,
                        ra_pgoff end, ra_pgoff b, ra_pgoff *to);

/* ---- congestion ------------------------------------------------------- */

/* The congestion decision, whether a window keeps its async part
 * (RC_CONG_KEEP) and whether an early async trigger is taken
 * (RC_CONG_EARLY), is rc_cong_decide in racache/congestion.h: the filter
 * (src/cache.c, src/jobq.c) and ra-trace (src/trace-sim.c) both ask
 * it.  rc_drop_async_batches below is what a "no" does.
 */

/* A backend read of a submitted window, before it is issued. */
struct rc_batch {
  ra_pgoff start, count;
  bool async;
};

/* The async part of window w (batches b[0 .. *n)) is not read: remove
 * the async batches past the client's request (start >= last) from
 * b, abandon their pages (abandon returns how many it removed from the
 * cache) and shrink the stream state by them (ra_drop_async, ra may be
 * NULL).  Only speculation is dropped: the kernel's INITIAL and pull-in
 * steps can label pages of the request itself async, and those are
 * read anyway.  Returns the pages dropped.
 */
ra_pgoff rc_drop_async_batches (struct ra_state *ra,
                                const struct ra_window *w, ra_pgoff last,
                                struct rc_batch *b, unsigned *n,
                                ra_pgoff (*abandon) (void *opaque,
                                                     ra_pgoff start,
                                                     ra_pgoff count),
                                void *opaque);

/* ---- parameters --------------------------------------------------------- */

/* The engine parameters of a (checked) configuration with nworkers
 * background workers (backend reads at once); export_size 0.
 */
void rc_engine_params (const struct rc_config *cfg, unsigned nworkers,
                       struct ra_params *p);

/* Set the largest backend read (pages, at least 1) and what follows
 * from it (adaptive mode's self_max).
 */
void rc_engine_params_io_max (const struct rc_config *cfg,
                              struct ra_params *p, ra_pgoff io_max);

#endif /* RACACHE_READPATH_H */
