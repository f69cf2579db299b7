/* ra-cache: learn and replay (ra-cache-learn=FILE): the cache's side of
 * the learned file (include/racache/learn.h).
 *
 * Every client read is recorded (rc_learn_record).  The sequence loaded
 * at start is replayed as a stream of its own, with windows and a
 * marker as a sequential stream has them, but along positions in the
 * sequence instead of pages of the export:
 *   - the first window (RC_REPLAY_FIRST_BYTES of the sequence) is read
 *     at the first client read;
 *   - a window's first position is the replay marker: when a client
 *     read reaches it (reads a page at or after it among those the
 *     replay has read) and the clients have used at least
 *     1/RC_REPLAY_USED_DIV of what the windows before it read, the next
 *     window is read, RC_REPLAY_GROWTH times
 *     larger, up to an eighth of the cache: the replay stays one to
 *     two windows ahead of the clients, at most a quarter of the cache,
 *     and waits for them when it is there (with a quarter, a learned
 *     file larger than a small cache saw a fifth of its pages evicted
 *     unused: the clients' own random reads are kept as active pages);
 *   - a window's pages are read in page order, runs closer than
 *     RC_REPLAY_GAP_BYTES read as one (the gap too), in backend reads of
 *     at most ra-io-max, by the background workers as async parts are:
 *     a client that needs a page of a queued read promotes it, and the
 *     workers start them only as the congestion rule lets async reads
 *     start;
 *   - a window is not read while the congestion rule would drop an
 *     async part (RC_CONG_KEEP) or no background connection is open: a
 *     later client read asks again.
 * Its pages are inserted as RC_INSERT_REPLAY (unused until a client
 * reads them, then counted in replay_used_pages; evicted unused, in
 * replay_wasted_pages).  The replay only ever reads from the backend,
 * and writes invalidate its pages as any others: it is never stale.
 * Clients that read something else than the sequence never reach the
 * marker, or reach it by chance (a random reader over the whole export
 * once in a while reads a page of a window scattered over it) but do
 * not use the windows before it: the replay then stops after its first
 * window or two.
 *
 * Lock order: the replay's lock is taken (try-locked) by a client read
 * holding no other lock; inside it the cache's shard locks and the
 * queue's lock.
 */

#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache-internal.h"
#include "racache/learn.h"
#include "racache/util.h"

#define RC_REPLAY_FIRST_BYTES (UINT64_C (256) << 10)
#define RC_REPLAY_USED_DIV 4
#define RC_REPLAY_GROWTH 4
#define RC_REPLAY_GAP_BYTES (UINT64_C (16) << 10)

struct rc_replay {
  struct rc_learn *learn;
  pthread_mutex_t lock;         /* reading a window */
  /* Positions [0, issued) were read (or queued); the clients have read
   * up to position reached - 1 among them; the next window is read when
   * reached > marker.
   */
  _Atomic uint64_t issued, reached, marker;
  _Atomic bool started;
  /* Under lock: the last window's size; pages the windows inserted,
   * all of them and all but the last one's.
   */
  uint64_t window, inserted, inserted_before;
};

/* The pages [start, start + count) of a window's run, inserted and
 * queued in backend reads of at most io pages.  Returns the pages
 * inserted.
 */
static uint64_t
replay_run (struct rc_cache *c, ra_pgoff start, ra_pgoff count, ra_pgoff io)
{
  ra_pgoff i, from = start, n = 0;
  uint64_t inserted = 0;

  for (i = start; i < start + count; i++) {
    if (n == io) {
      rc_queue_job (c, from, n, true, NULL, 0);
      inserted += n;
      n = 0;
    }
    if (rc_pc_insert (c->pc, i, false, RC_INSERT_REPLAY, 0)) {
      if (n++ == 0)
        from = i;
    }
    else if (n > 0) {           /* cached already, or no room */
      rc_queue_job (c, from, n, true, NULL, 0);
      inserted += n;
      n = 0;
    }
  }
  if (n > 0) {
    rc_queue_job (c, from, n, true, NULL, 0);
    inserted += n;
  }
  return inserted;
}

/* Read the next window, if the congestion rule and the workers let it.
 * Called with r->lock held.
 */
static void
replay_window (struct rc_cache *c, struct rc_replay *r)
{
  struct rc_cong_load asked = { .executing = 0 };
  uint64_t total = rc_learn_sequence_pages (r->learn);
  uint64_t from = atomic_load (&r->issued), n, cap, inserted = 0;
  unsigned shift = c->params.page_shift;
  struct rc_learn_extent *runs;
  size_t m, k;

  if (from >= total || !rc_workers_ready (c) ||
      rc_congestion (c, RC_CONG_KEEP, &asked) != RC_CONG_GO ||
      STAT_GET (&c->stats, replay_used_pages) * RC_REPLAY_USED_DIV
      < r->inserted_before)
    return;
  cap = rc_pc_capacity (c->pc) / 8;
  if (r->window == 0)
    n = RC_REPLAY_FIRST_BYTES >> shift;
  else
    n = r->window * RC_REPLAY_GROWTH;
  if (n > cap)
    n = cap;
  if (n == 0)
    n = 1;
  if (n > total - from)
    n = total - from;
  runs = malloc (n * sizeof *runs);
  if (!runs)
    return;                     /* a later read tries again */
  m = rc_learn_window (r->learn, from, n, RC_REPLAY_GAP_BYTES >> shift,
                       runs, n);
  for (k = 0; k < m; k++)
    inserted += replay_run (c, runs[k].start, runs[k].count,
                            c->params.io_max);
  free (runs);
  STAT_ADD (&c->stats, replay_pages, inserted);
  r->inserted_before = r->inserted;
  r->inserted += inserted;
  r->window = n;
  atomic_store (&r->marker, from);
  atomic_store (&r->issued, from + n);
  atomic_store (&r->started, true);
}

void
rc_replay_read (struct rc_cache *c, ra_pgoff first, ra_pgoff last)
{
  struct rc_replay *r = atomic_load_explicit (&c->replay,
                                              memory_order_acquire);
  uint64_t issued, reached, cur;

  if (!r)
    return;
  rc_learn_record (r->learn, first, last);
  if (rc_learn_sequence_pages (r->learn) == 0)
    return;
  issued = atomic_load (&r->issued);
  reached = rc_learn_reached (r->learn, first, last, issued);
  cur = atomic_load (&r->reached);
  while (reached > cur &&
         !atomic_compare_exchange_weak (&r->reached, &cur, reached))
    ;
  if (issued >= rc_learn_sequence_pages (r->learn))
    return;                     /* all of it read */
  if (atomic_load (&r->started) &&
      atomic_load (&r->reached) <= atomic_load (&r->marker))
    return;
  if (pthread_mutex_trylock (&r->lock) != 0)
    return;                     /* another client reads the window */
  if (!atomic_load (&r->started) ||
      atomic_load (&r->reached) > atomic_load (&r->marker))
    replay_window (c, r);
  RELEASE_LOCK (&r->lock);
}

int
rc_cache_learn_start (struct rc_cache *c, const char *export_name)
{
  struct rc_replay *r;
  char why[256], msg[512];
  LOCK_FOR_SCOPE (&c->size_lock);

  if (!c->cfg.learn_file || !c->size_set || c->replay)
    return 0;
  r = calloc (1, sizeof *r);
  if (!r)
    return -1;
  r->learn = rc_learn_new (c->cfg.learn_file, c->params.export_size,
                           export_name, c->params.page_shift,
                           why, sizeof why);
  if (!r->learn) {
    free (r);
    return -1;
  }
  pthread_mutex_init (&r->lock, NULL);
  if (why[0] && c->be.log) {
    snprintf (msg, sizeof msg, "ra-cache-learn: %s: ignored: %s; it will "
              "be rewritten", c->cfg.learn_file, why);
    c->be.log (c->be.opaque, true, msg);
  }
  atomic_store_explicit (&c->replay, r, memory_order_release);
  return 0;
}

int
rc_cache_learn_save (struct rc_cache *c)
{
  struct rc_replay *r = atomic_load_explicit (&c->replay,
                                              memory_order_acquire);

  return r ? rc_learn_save (r->learn) : 0;
}

void
rc_replay_free (struct rc_cache *c)
{
  struct rc_replay *r = c->replay;

  if (!r)
    return;
  rc_learn_free (r->learn);
  pthread_mutex_destroy (&r->lock);
  free (r);
  c->replay = NULL;
}

uint64_t
rc_cache_learn_sequence_pages (struct rc_cache *c)
{
  struct rc_replay *r = atomic_load (&c->replay);

  return r ? rc_learn_sequence_pages (r->learn) : 0;
}

uint64_t
rc_cache_learn_recorded_pages (struct rc_cache *c)
{
  struct rc_replay *r = atomic_load (&c->replay);

  return r ? rc_learn_recorded_pages (r->learn) : 0;
}

uint64_t
rc_cache_replay_reached_pages (struct rc_cache *c)
{
  struct rc_replay *r = atomic_load (&c->replay);

  return r ? atomic_load (&r->reached) : 0;
}
