/* Unit tests of the readahead engine (src/readahead.c) against
 * doc/readahead-rules.md.  Each test names the branch (or the
 * correction N of that document) it covers.
 *
 * The expected numbers are worked out by hand from the rules, and the
 * arithmetic is written next to them.  Unless a test says otherwise:
 * pages of 4 KiB, ra_max = io_max = 32 pages, a fresh stream state and
 * an empty cache.  Reminders, for max = 32:
 *   init_size(req): r = req rounded up to a power of two;
 *                   4r if r <= 1, 2r if r <= 8, else 32.
 *   next_size(cur): 4cur if cur < 2, 2cur if cur <= 16, else 32.
 * Windows are written (start, size, async_size, marker).
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>
#include <check.h>

#include "racache/congestion.h"
#include "racache/readahead.h"
#include "racache/readpath.h"
#include "racache/trigger.h"

/* ---- a simulated page cache and the read path ------------------------ */

#define SIM_PAGES 8192
#define SIM_MAX_BATCHES 64
#define SIM_LOG 256
/* The fixed congestion threshold of the simulated backend: with this
 * many reads in flight, a window's async part is dropped.
 */
#define SIM_CONG_THRESHOLD 4

/* A window the read path decided, with what triggered it. */
struct sim_win {
  struct ra_window w;
  ra_pgoff index;               /* trigger page */
  bool marker;                  /* async trigger */
};

struct sim {
  bool cached[SIM_PAGES];       /* present (the sim has no "in flight") */
  bool marker[SIM_PAGES];
  bool async_label[SIM_PAGES];  /* the label submit inserted the page with */
  struct ra_state ra;
  struct ra_params p;
  /* The congestion decision (rc_cong_decide, fixed threshold
   * SIM_CONG_THRESHOLD) and the backend reads the test says are in
   * flight (the sim's own reads complete at once).  After each submit
   * that the decision does not let keep its async part, drop it as
   * src/cache.c does (the async batches past the client request are
   * removed from the cache and ra_drop_async shrinks the state).
   */
  struct rc_cong cong;
  unsigned inflight;
  /* Reading around the cache (src/trigger.c's read_around): allowed
   * when around (off unless a test says), counted in arounds; depth: the
   * stream's reads in flight lately, as the filter counts them.
   */
  bool around;
  unsigned arounds, depth;
  uint64_t depth_bytes;         /* ... and their bytes */
  /* What the last WINDOW question asked (windows: how many were asked). */
  struct rc_cong_load window;
  unsigned windows;
  /* The last submit. */
  struct rc_batch b[SIM_MAX_BATCHES];
  unsigned nb;
  struct ra_submit_result res;
  ra_pgoff dropped;
  /* Every window decided, in order. */
  struct sim_win log[SIM_LOG];
  int nlog;
  /* The client read in progress (sim_read): the shared read path's
   * counters, and where its windows go.
   */
  struct rc_stats st;
  struct rc_read *rd;
  struct ra_window *out;
  int nout, max_out;
};

static bool
sim_cached (void *opaque, ra_pgoff i)
{
  struct sim *s = opaque;
  return i < SIM_PAGES && s->cached[i];
}

static const struct ra_cache_ops sim_ops = { .cached = sim_cached };

static bool
sim_insert (void *opaque, ra_pgoff i, bool marker, enum rc_insert_kind kind,
            unsigned owner)
{
  struct sim *s = opaque;
  bool async = kind == RC_INSERT_AHEAD || kind == RC_INSERT_NEAR;

  (void) owner;
  ck_assert_uint_lt (i, SIM_PAGES);
  ck_assert_uint_lt (i, ra_nr_pages (&s->p)); /* never past the export */
  if (s->cached[i])
    return false;
  s->cached[i] = true;
  s->marker[i] = marker;
  s->async_label[i] = async;
  return true;
}


static struct sim *
sim_new (unsigned shift, ra_pgoff ra_max, ra_pgoff io_max,
         uint64_t export_size)
{
  struct sim *s = calloc (1, sizeof *s);

  ck_assert_ptr_nonnull (s);
  ra_state_init (&s->ra);
  rc_cong_init (&s->cong, SIM_CONG_THRESHOLD, false, false);
  s->p.page_shift = shift;
  s->p.ra_max = ra_max;
  s->p.io_max = io_max;
  s->p.export_size = export_size;
  return s;
}

/* The usual sim: 4 KiB pages, ra_max = io_max = 32, SIM_PAGES pages. */
static struct sim *
sim_std (void)
{
  return sim_new (12, 32, 32, (uint64_t) SIM_PAGES << 12);
}

static void
sim_cache_range (struct sim *s, ra_pgoff from, ra_pgoff to)
{
  for (ra_pgoff i = from; i < to; i++)
    s->cached[i] = true;
}

static void
sim_evict (struct sim *s, ra_pgoff i)
{
  s->cached[i] = false;
  s->marker[i] = false;
}

static ra_pgoff
sim_count_cached (const struct sim *s)
{
  ra_pgoff n = 0;
  for (ra_pgoff i = 0; i < SIM_PAGES; i++)
    n += s->cached[i];
  return n;
}

static ra_pgoff
sim_count_markers (const struct sim *s)
{
  ra_pgoff n = 0;
  for (ra_pgoff i = 0; i < SIM_PAGES; i++)
    n += s->marker[i];
  return n;
}

/* ra_submit's own callbacks, for the tests of ra_submit and ra_forced. */
static bool
sim_submit_insert (void *opaque, ra_pgoff i, bool marker, bool async)
{
  return sim_insert (opaque, i, marker,
                     async ? RC_INSERT_AHEAD : RC_INSERT_SYNC, 0);
}

static void
sim_submit_batch (void *opaque, ra_pgoff start, ra_pgoff count, bool async)
{
  struct sim *s = opaque;

  ck_assert_uint_lt (s->nb, SIM_MAX_BATCHES);
  s->b[s->nb].start = start;
  s->b[s->nb].count = count;
  s->b[s->nb].async = async;
  s->nb++;
}

static const struct ra_submit_ops sim_submit_ops = {
  .insert = sim_submit_insert, .batch = sim_submit_batch
};

static ra_pgoff
sim_abandon (void *opaque, ra_pgoff start, ra_pgoff count)
{
  for (ra_pgoff k = 0; k < count; k++)
    sim_evict (opaque, start + k);
  return count;
}

static bool
sim_take_marker (void *opaque, ra_pgoff i)
{
  struct sim *s = opaque;
  bool had = i < SIM_PAGES && s->marker[i];

  if (had)
    s->marker[i] = false;
  return had;
}

static const struct rc_trigger_cache_ops sim_cache_ops = {
  .query = &sim_ops, .insert = sim_insert, .abandon = sim_abandon,
  .take_marker = sim_take_marker,
};

/* The congestion decision (fixed threshold SIM_CONG_THRESHOLD) over the
 * reads the test says are in flight.
 */
static enum rc_cong_answer
sim_congestion (void *opaque, enum rc_cong_question q,
                const struct rc_cong_load *asked)
{
  struct sim *s = opaque;
  struct rc_cong_load load = { .executing = s->inflight };

  if (q == RC_CONG_WINDOW) {
    s->window = *asked;
    s->windows++;
  }
  return q == RC_CONG_KEEP ? rc_cong_decide (&s->cong, q, &load)
    : RC_CONG_GO;
}

/* The sim's reads complete at once (pages are up to date when
 * inserted): issuing only records the batches.
 */
static int
sim_issue (void *opaque, struct rc_trigger *t, int *err)
{
  struct sim *s = opaque;

  (void) err;
  ck_assert_uint_le (t->n, SIM_MAX_BATCHES);
  memcpy (s->b, t->b, t->n * sizeof *t->b);
  s->nb = t->n;
  return 0;
}

static bool
sim_around_ok (void *opaque, const struct rc_trigger *t)
{
  (void) t;
  return ((struct sim *) opaque)->around;
}

/* The request read around the cache: delivered, no page made. */
static int
sim_around (void *opaque, struct rc_trigger *t, int *err)
{
  struct sim *s = opaque;

  (void) err;
  s->arounds++;
  t->rd->done_start = t->rd->first;
  t->rd->done_end = t->rd->last;
  t->rd->done_missed = true;
  return 0;
}

static const struct rc_trigger_ops sim_trigger_ops = {
  .congestion = sim_congestion, .issue = sim_issue,
  .around_ok = sim_around_ok, .around = sim_around,
};

/* One trigger: the core's (src/trigger.c: rc_read_decide, submit, and
 * when the congestion decision says so the drop step), for a client
 * request ending at page last = index + req.
 */
static void
sim_trigger (struct sim *s, ra_pgoff index, bool marker, ra_pgoff req,
             struct ra_window *w)
{
  struct rc_trigger_env env;
  struct rc_trigger t;
  int err;

  rc_trigger_env_init (&env, &sim_trigger_ops, s, &sim_cache_ops, s,
                       &s->p, &s->st);
  rc_trigger_init (&t, &s->ra, 1, index, marker, index + req, s->rd,
                   s->depth, s->depth_bytes);
  s->nb = 0;
  rc_trigger (&env, &t, NULL, &err);
  *w = t.w;
  s->res = t.res;
  s->dropped = t.dropped;
  rc_trigger_free (&t);
  rc_trigger_env_destroy (&env);
  ck_assert_int_lt (s->nlog, SIM_LOG);
  s->log[s->nlog].w = *w;
  s->log[s->nlog].index = index;
  s->log[s->nlog].marker = marker;
  s->nlog++;
}

/* The shared read path's ops (src/readpath.c) over the simulation:
 * pages are up to date as soon as they are inserted.
 */
static enum rc_access
sim_access (void *opaque, struct rc_read *rd, ra_pgoff i, uint64_t from,
            uint64_t to, bool *waited, bool *waited_ahead)
{
  struct sim *s = opaque;

  (void) rd; (void) from; (void) to;
  *waited = *waited_ahead = false;
  if (!s->cached[i])
    return RC_ACCESS_ABSENT;
  if (s->marker[i]) {
    s->marker[i] = false;
    return RC_ACCESS_MARKER;
  }
  return RC_ACCESS_COPIED;
}

static int
sim_read_trigger (void *opaque, struct rc_read *rd, ra_pgoff i, bool marker,
                  int *err)
{
  struct sim *s = opaque;
  struct ra_window w;

  (void) err;
  sim_trigger (s, i, marker, rd->last - i, &w);
  if (s->nout < s->max_out)
    s->out[s->nout] = w;
  s->nout++;
  /* Correction 3: a sync trigger always reads the page it needs (into
   * the cache, unless it read the request around it).
   */
  if (!marker && !rd->done_missed)
    ck_assert (s->cached[i]);
  return 0;
}

static int
sim_direct (void *opaque, struct rc_read *rd, ra_pgoff i, uint64_t from,
            uint64_t to, int *err)
{
  (void) opaque; (void) rd; (void) from; (void) to; (void) err;
  ck_abort_msg ("page %llu read around the cache", (unsigned long long) i);
  return -1;
}

static const struct rc_read_ops sim_read_ops = {
  .access = sim_access,
  .trigger = sim_read_trigger,
  .direct = sim_direct,
};

/* The read path of doc/readahead-rules.md (rc_read_path), for one client read;
 * records the windows.
 */
static int
sim_read (struct sim *s, uint64_t offset, uint64_t count,
          struct ra_window *out, int max_out)
{
  struct rc_read rd;
  int err = 0;

  rc_read_init (&rd, offset, count, s->p.page_shift);
  ck_assert_uint_le (rd.last, SIM_PAGES);
  s->rd = &rd;
  s->out = out;
  s->nout = 0;
  s->max_out = max_out;
  ck_assert_int_eq (rc_read_path (&sim_read_ops, s, &s->st, s->p.page_shift,
                                  &rd, &err), 0);
  s->rd = NULL;
  ra_update_prev_pos (&s->ra, offset + count);
  return s->nout;
}

/* Read pages [index, index + n): a page-aligned client read. */
static int
sim_read_pages (struct sim *s, ra_pgoff index, ra_pgoff n,
                struct ra_window *out, int max_out)
{
  return sim_read (s, index << s->p.page_shift, n << s->p.page_shift,
                   out, max_out);
}

/* NBD_CMD_CACHE as src/cache.c's rc_fill: forced chunks, submitted. */
static int
sim_fill (struct sim *s, ra_pgoff index, ra_pgoff last,
          struct ra_window *out, int max_out)
{
  struct ra_window w;
  int n = 0;

  while (ra_forced (&s->p, index, last, &w)) {
    s->nb = 0;
    ra_submit (&w, s->p.io_max, &sim_submit_ops, s, &s->res);
    if (n < max_out) out[n] = w;
    n++;
    index = w.start + w.size;
  }
  return n;
}

/* Check a window; the branch is compared by name for a readable failure. */
#define ck_win(w, b, st, sz, as, mk)                                    \
  do {                                                                  \
    ck_assert_str_eq (ra_branch_name ((w).branch), ra_branch_name (b)); \
    ck_assert_uint_eq ((w).start, (st));                                \
    ck_assert_uint_eq ((w).size, (sz));                                 \
    ck_assert_uint_eq ((w).async_size, (as));                           \
    ck_assert_uint_eq ((w).marker, (mk));                               \
  } while (0)

#define ck_state(s, st, sz, as)                                         \
  do {                                                                  \
    ck_assert_uint_eq ((s)->ra.start, (st));                            \
    ck_assert_uint_eq ((s)->ra.size, (sz));                             \
    ck_assert_uint_eq ((s)->ra.async_size, (as));                       \
  } while (0)

#define ck_batch(s, k, st, n, as)                                       \
  do {                                                                  \
    ck_assert_uint_eq ((s)->b[k].start, (st));                          \
    ck_assert_uint_eq ((s)->b[k].count, (n));                           \
    ck_assert_int_eq ((s)->b[k].async, (as));                           \
  } while (0)

#define NOM RA_NO_MARKER

/* ---- 1 and 14: the worked example ----------------------------------- */

/* Spec worked example: branches A then B.  ra_max 32 pages, reads of 4
 * pages from offset 0:
 *  read 0:  miss at 0 -> A: init_size(4) = 8 (r = 4 <= 8), async 8-4 = 4,
 *           marker 0+8-4 = 4;
 *  read 1:  marker 4 = 0+8-4 -> B: start 8, next_size(8) = 16, async 16
 *           (request 4..7 is all before 8), marker 8;
 *  read 2:  marker 8 -> B: start 24, next_size(16) = 32, marker 24;
 *  read 6:  marker 24 -> B: start 56, next_size(32) = 32, marker 56;
 *  read 14: marker 56 -> B: start 88, 32, marker 88.
 * Every other read is a cache hit without a marker.  Looped over page
 * sizes of 512 B, 4 KiB and 64 KiB (test 14): counts are in pages, so
 * the table does not change.
 */
static const unsigned we_shifts[] = { 12, 9, 16 };

START_TEST (test_worked_example)
{
  unsigned shift = we_shifts[_i];
  struct sim *s = sim_new (shift, 32, 32, (uint64_t) SIM_PAGES << shift);
  struct ra_window w[4];
  static const struct { int read; enum ra_branch b; ra_pgoff start, size, async, marker; } want[] = {
    { 0, RA_A_INITIAL, 0, 8, 4, 4 },
    { 1, RA_B_SEQUENTIAL, 8, 16, 16, 8 },
    { 2, RA_B_SEQUENTIAL, 24, 32, 32, 24 },
    { 6, RA_B_SEQUENTIAL, 56, 32, 32, 56 },
    { 14, RA_B_SEQUENTIAL, 88, 32, 32, 88 },
  };
  size_t k = 0;

  for (int r = 0; r < 22; r++) {
    int n = sim_read (s, (uint64_t) r * (4u << shift), 4u << shift, w, 4);
    if (k < sizeof want / sizeof want[0] && r == want[k].read) {
      ck_assert_int_eq (n, 1);
      ck_win (w[0], want[k].b, want[k].start, want[k].size, want[k].async,
              want[k].marker);
      k++;
    }
    else
      ck_assert_int_eq (n, 0);
  }
  ck_assert_uint_eq (k, 5);
  /* The state records the last window, prev_pos the byte after read 21. */
  ck_state (s, 88, 32, 32);
  ck_assert_uint_eq (s->ra.prev_pos, (uint64_t) 88 << shift);
  free (s);
}
END_TEST

/* ---- 2: G then E ------------------------------------------------------ */

/* Fresh state, read 4 pages at page 100: not 0 (A), the state is empty
 * (B: 100 != 0), no marker (C), 4 <= 32 (D), no prev_pos yet (E), nothing
 * cached before 100 (F: h = 0 <= 4) -> G: (100, 4, 0, none), state
 * unchanged.  prev_pos = 104 * 4096.  The next read, at page 104, misses:
 * 104 is prev_pos's page -> E: INITIAL init_size(4) = 8, async 4,
 * marker 108.
 */
START_TEST (test_G_then_E)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 100, 4, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 100, 4, 0, NOM);
  ck_state (s, 0, 0, 0);
  ck_assert_uint_eq (sim_count_cached (s), 4);
  ck_assert_uint_eq (sim_count_markers (s), 0);
  ck_assert_uint_eq (s->ra.prev_pos, 104 * 4096);

  ck_assert_int_eq (sim_read_pages (s, 104, 4, w, 4), 1);
  ck_win (w[0], RA_E_SEQ_MISS, 104, 8, 4, 108);
  ck_state (s, 104, 8, 4);
  /* 104..107 sync, 108..111 async: two batches. */
  ck_assert_int_eq (s->nb, 2);
  ck_batch (s, 0, 104, 4, false);
  ck_batch (s, 1, 108, 4, true);
  free (s);
}
END_TEST

/* A miss partway through a client read (the trace 409600 4096, 204800
 * 4096, 409600 12288 at ra-max 128K): reads of page 100 and page 50 are
 * G (no history, no state): [100] and [50], prev_pos = 51 * 4096.  The
 * read of pages 100..102 hits 100 and misses at 101 with req = 2.
 * Linux 5.18 stores prev_pos after each copied batch (filemap_read), so
 * there prev_pos is 101 * 4096 at the miss: E, INITIAL init_size(2) =
 * 4 (r = 2 <= 8 -> 2r), async 4 - 2 = 2, marker 103.  ra-cache moves
 * prev_pos at the end of a client read (RC_PREV_POS_PER_BATCH 0,
 * include/racache/readpath.h): prev_pos's page is 51, so not E; F:
 * history(101) = 1 (page 100), not > req 2; G: exactly [101, 103).
 */
START_TEST (test_miss_partway_prev_pos)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read (s, 409600, 4096, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 100, 1, 0, NOM);
  ck_assert_int_eq (sim_read (s, 204800, 4096, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 50, 1, 0, NOM);
  ck_assert_int_eq (sim_read (s, 409600, 12288, w, 4), 1);
#if RC_PREV_POS_PER_BATCH
  ck_win (w[0], RA_E_SEQ_MISS, 101, 4, 2, 103);
  ck_state (s, 101, 4, 2);
#else
  ck_win (w[0], RA_G_RANDOM, 101, 2, 0, NOM);
  ck_state (s, 0, 0, 0);
#endif
  ck_assert_uint_eq (s->ra.prev_pos, 409600 + 12288);
  free (s);
}
END_TEST

/* ---- 3: req == ra_max at page 0 --------------------------------------- */

/* Read 32 pages at 0: A: init_size(32): r = 32 > 8 -> 32; async: 32 > 32
 * is false -> async = size = 32.  SUBMIT: index == start and size ==
 * async: add = next_size(32) = 32; 32 + 32 > 32 -> size 32, async 16:
 * (0, 32, 16, 16).  The same read then reaches the marker at 16 with
 * req = 32 - 16 = 16: B (16 == 0+32-16): start 32, next_size(32) = 32,
 * request 16..31 is before 32 -> async 32: (32, 32, 32, 32).
 */
START_TEST (test_A_req_eq_max)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 32, w, 4), 2);
  ck_win (w[0], RA_A_INITIAL, 0, 32, 16, 16);
  ck_win (w[1], RA_B_SEQUENTIAL, 32, 32, 32, 32);
  ck_assert_uint_eq (s->log[1].index, 16);
  ck_assert (s->log[1].marker);
  ck_state (s, 32, 32, 32);
  free (s);
}
END_TEST

/* ---- 4: oversize reads ------------------------------------------------ */

/* io_max 128 > ra_max 32, read 64 pages at 0: 64 > 32 and 128 > 32 ->
 * max = min(64, 128) = 64 (9491ae4aade6).  A: init_size(64, 64) = 64
 * (r = 64 > 64/4), async = 64 (64 > 64 false); SUBMIT merge: add =
 * next_size(64, 64) = 64, 128 > 64 -> (0, 64, 32, 32).  Without the raise
 * it would be 32 pages.  Then the marker at 32, req = 64 - 32 = 32: not
 * > 32, max = 32; B: start 64, next_size(64, 32) = 32, async 32:
 * (64, 32, 32, 64).
 */
START_TEST (test_oversize_io_max_above_A)
{
  struct sim *s = sim_new (12, 32, 128, (uint64_t) SIM_PAGES << 12);
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 64, w, 4), 2);
  ck_win (w[0], RA_A_INITIAL, 0, 64, 32, 32);
  ck_win (w[1], RA_B_SEQUENTIAL, 64, 32, 32, 64);
  free (s);
}
END_TEST

/* io_max 128 > ra_max 32 away from page 0.
 * Read 64 pages at 200 (fresh): max = 64, so 64 > 64 is not oversize
 * (D), no prev_pos (E), no history (F) -> G: exactly (200, 64, 0, none).
 * The adjacent read of 64 pages at 264 is E: INITIAL init_size(64, 64) =
 * 64, async 64, merge: 128 > 64 -> (264, 64, 32, 296); then the marker at
 * 296, req = 328 - 296 = 32, max 32: B: start 328, next_size(64, 32) =
 * 32, async 32: (328, 32, 32, 328).
 * Read 200 pages at 1000 (fresh sim): max = min(200, 128) = 128; 200 >
 * 128 -> D: init_size(200, 128) = 128, async 128 (not > 200), merge:
 * add = next_size(128, 128) = 128, 256 > 128 -> (1000, 128, 64, 1064).
 * Marker 1064, req = 1200 - 1064 = 136 > 32 -> max = min(136, 128) =
 * 128; B (1064 == 1000+128-64): start 1128, next_size(128, 128) = 128;
 * correction 1: the request reaches 1200, so 1200 - 1128 = 72 pages are
 * sync, async 128 - 72 = 56, marker 1128 + 72 = 1200: (1128, 128, 56,
 * 1200).
 */
START_TEST (test_oversize_io_max_above_G_E_D)
{
  struct sim *s = sim_new (12, 32, 128, (uint64_t) SIM_PAGES << 12);
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 200, 64, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 200, 64, 0, NOM);
  ck_state (s, 0, 0, 0);
  ck_assert_int_eq (sim_read_pages (s, 264, 64, w, 4), 2);
  ck_win (w[0], RA_E_SEQ_MISS, 264, 64, 32, 296);
  ck_win (w[1], RA_B_SEQUENTIAL, 328, 32, 32, 328);
  free (s);

  s = sim_new (12, 32, 128, (uint64_t) SIM_PAGES << 12);
  ck_assert_int_eq (sim_read_pages (s, 1000, 200, w, 4), 2);
  ck_win (w[0], RA_D_OVERSIZE, 1000, 128, 64, 1064);
  ck_win (w[1], RA_B_SEQUENTIAL, 1128, 128, 56, 1200);
  /* Each part fits one io_max batch. */
  ck_assert_int_eq (s->nb, 2);
  ck_batch (s, 0, 1128, 72, false);
  ck_batch (s, 1, 1200, 56, true);
  free (s);
}
END_TEST

/* io_max 16 < ra_max 32: no raise, max = 32.  Read 40 pages at 100
 * (fresh): 40 > 32 -> D: init_size(40): r = 64 -> 32; async 32 (32 > 40
 * false); merge: add = next_size(32) = 32, 64 > 32 -> (100, 32, 16, 116).
 * Batches of at most 16: sync 100..115, async 116..131.  The marker at
 * 116, req = 140 - 116 = 24 <= 32: B: start 132, next_size(32) = 32;
 * correction 1: 140 - 132 = 8 requested pages are sync, async 24,
 * marker 140: (132, 32, 24, 140); batches sync 132..139, async 140..155
 * (16) and 156..163 (8).
 */
START_TEST (test_oversize_io_max_below_D)
{
  struct sim *s = sim_new (12, 32, 16, (uint64_t) SIM_PAGES << 12);
  struct ra_window w[4];
  struct ra_window d;

  /* The D window alone, as ondemand decides it. */
  ra_ondemand (&s->ra, &s->p, &sim_ops, s, 100, false, 40, &d);
  ck_win (d, RA_D_OVERSIZE, 100, 32, 16, 116);
  ra_state_init (&s->ra);

  ck_assert_int_eq (sim_read_pages (s, 100, 40, w, 4), 2);
  ck_win (w[0], RA_D_OVERSIZE, 100, 32, 16, 116);
  ck_win (w[1], RA_B_SEQUENTIAL, 132, 32, 24, 140);
  ck_assert_int_eq (s->nb, 3);
  ck_batch (s, 0, 132, 8, false);
  ck_batch (s, 1, 140, 16, true);
  ck_batch (s, 2, 156, 8, true);
  free (s);
}
END_TEST

/* ---- 5: two interleaved streams on one state: C ----------------------- */

/* X reads 4 pages at a time from 0, Y from 1000, alternately (X0 Y0 X1
 * Y1 ...; read k of X is 4k..4k+3, of Y 1000+4k..):
 *  X0 A (0,8,4,4)           state (0,8,4)
 *  Y0 G (1000,4,0,-)        h = 0
 *  X1 marker 4 -> B (8,16,16,8)
 *  Y1 G (1004,4,0,-)        E? prev_pos page 8, no; h = 4 <= 4
 *  Y2 F (1008,12,1,1019)    h = 8 > 4, min(8+4, 32) = 12
 *  X2 came before Y2: marker 8 -> B (24,32,32,24)
 *  Y4 marker 1019 = 1008+12-1 -> B (1020, next_size(12) = 24, 24, 1020)
 *  Y5 marker 1020 -> B (1044, next_size(24) = 32, 32, 1044)
 *  X6 marker 24, state (1044,32,32) does not explain it -> C: first hole
 *     after 24 is 56 (24..55 cached), 56-24 = 32 <= 32; next_size(32 + 4)
 *     = 32, request before 56 -> (56,32,32,56)
 *  Y11 marker 1044 -> C: hole 1076, (1076,32,32,1076)
 *  then X every 8 reads from X14, Y every 8 from Y19: C, full size.
 */
START_TEST (test_interleaved_C)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];
  static const struct { int k; char who; enum ra_branch b; ra_pgoff start, size, async, marker; } want[] = {
    { 0, 'X', RA_A_INITIAL, 0, 8, 4, 4 },
    { 0, 'Y', RA_G_RANDOM, 1000, 4, 0, NOM },
    { 1, 'X', RA_B_SEQUENTIAL, 8, 16, 16, 8 },
    { 1, 'Y', RA_G_RANDOM, 1004, 4, 0, NOM },
    { 2, 'X', RA_B_SEQUENTIAL, 24, 32, 32, 24 },
    { 2, 'Y', RA_F_CONTEXT, 1008, 12, 1, 1019 },
    { 4, 'Y', RA_B_SEQUENTIAL, 1020, 24, 24, 1020 },
    { 5, 'Y', RA_B_SEQUENTIAL, 1044, 32, 32, 1044 },
    { 6, 'X', RA_C_INTERLEAVED, 56, 32, 32, 56 },
    { 11, 'Y', RA_C_INTERLEAVED, 1076, 32, 32, 1076 },
  };
  size_t e = 0;
  ra_pgoff next_x = 88, next_y = 1108; /* where the next C windows start */
  int c_x = 0, c_y = 0;

  for (int k = 0; k < 60; k++) {
    for (int who = 0; who < 2; who++) {
      char name = who ? 'Y' : 'X';
      ra_pgoff base = who ? 1000 : 0;
      int n = sim_read_pages (s, base + 4 * k, 4, w, 4);

      if (e < sizeof want / sizeof want[0] &&
          want[e].k == k && want[e].who == name) {
        ck_assert_int_eq (n, 1);
        ck_win (w[0], want[e].b, want[e].start, want[e].size,
                want[e].async, want[e].marker);
        e++;
      }
      else if (k > 11 && n > 0) {
        /* Steady state: the marker at the start of the stream's last
         * window, the hole 32 pages on: a full-size C window.
         */
        ra_pgoff *next = who ? &next_y : &next_x;

        ck_assert_int_eq (n, 1);
        ck_assert_uint_eq (s->log[s->nlog - 1].index, *next - 32);
        ck_assert (s->log[s->nlog - 1].marker);
        ck_win (w[0], RA_C_INTERLEAVED, *next, 32, 32, *next);
        *next += 32;
        if (who) c_y++; else c_x++;
      }
      else
        ck_assert_int_eq (n, 0);
    }
  }
  ck_assert_uint_eq (e, sizeof want / sizeof want[0]);
  /* X: C at X14 X22 ... X54 (6); Y: C at Y19 Y27 ... Y59 (6). */
  ck_assert_int_eq (c_x, 6);
  ck_assert_int_eq (c_y, 6);
  /* After warm-up (the first 6 windows, up to Y's F) no random reads,
   * and no sync misses at all: every window comes from a marker.
   */
  for (int i = 6; i < s->nlog; i++) {
    ck_assert_int_ne (s->log[i].w.branch, RA_G_RANDOM);
    ck_assert (s->log[i].marker);
  }
  free (s);
}
END_TEST

/* ---- 6: context readahead F ------------------------------------------- */

/* Pages 100..109 cached, fresh state, read 4 pages at 110: h = 10 > 4,
 * 110 - 10 != 0 so not doubled: size min(10 + 4, 32) = 14, async 1,
 * marker 110 + 14 - 1 = 123.  Reading on, the read of 122..125 finds
 * the marker at 123 (req 126 - 123 = 3): B (123 == 110+14-1): start 124,
 * next_size(14) = 28; correction 1: 126 - 124 = 2 sync, async 26,
 * marker 126.
 */
START_TEST (test_F_context)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  sim_cache_range (s, 100, 110);
  ck_assert_int_eq (sim_read_pages (s, 110, 4, w, 4), 1);
  ck_win (w[0], RA_F_CONTEXT, 110, 14, 1, 123);
  ck_state (s, 110, 14, 1);
  ck_assert_int_eq (sim_read_pages (s, 114, 4, w, 4), 0);
  ck_assert_int_eq (sim_read_pages (s, 118, 4, w, 4), 0);
  ck_assert_int_eq (sim_read_pages (s, 122, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 124, 28, 26, 126);
  free (s);
}
END_TEST

/* History reaching back to page 0 is doubled.
 * 0..9 cached, read 4 at 10: h = 10 reaches page 0 -> 20; min(20 + 4,
 * 32) = 24: (10, 24, 1, 33).  0..19 cached, read 4 at 20: h = 20 -> 40,
 * min(44, 32) = 32: (20, 32, 1, 51).  Not doubled, 20 + 4 would be 24.
 */
START_TEST (test_F_context_page0)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  sim_cache_range (s, 0, 10);
  ck_assert_int_eq (sim_read_pages (s, 10, 4, w, 4), 1);
  ck_win (w[0], RA_F_CONTEXT, 10, 24, 1, 33);
  free (s);

  s = sim_std ();
  sim_cache_range (s, 0, 20);
  ck_assert_int_eq (sim_read_pages (s, 20, 4, w, 4), 1);
  ck_win (w[0], RA_F_CONTEXT, 20, 32, 1, 51);
  free (s);
}
END_TEST

/* h <= req goes to G.
 * 96..99 cached, read 4 at 100: h = 4 <= 4 -> G (100, 4, 0, none).
 * 97..99 cached: h = 3 -> G.
 * The look-back is at most max - 1, as Linux 5.18 counts
 * (count_history_pages): ra_max 8, 0..19 cached, read 8 at 20: h = 7
 * (not 20, so it does not reach page 0 and is not doubled), 7 <= 8 -> G
 * (20, 8, 0, none).  Read 7 at 20: h = 7 <= 7 -> G (20, 7, 0, none)
 * (counting max pages, 8 > 7, it would be F).
 */
START_TEST (test_F_short_history_G)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  sim_cache_range (s, 96, 100);
  ck_assert_int_eq (sim_read_pages (s, 100, 4, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 100, 4, 0, NOM);
  ck_state (s, 0, 0, 0);
  free (s);

  s = sim_std ();
  sim_cache_range (s, 97, 100);
  ck_assert_int_eq (sim_read_pages (s, 100, 4, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 100, 4, 0, NOM);
  free (s);

  s = sim_new (12, 8, 8, (uint64_t) SIM_PAGES << 12);
  sim_cache_range (s, 0, 20);
  ck_assert_int_eq (sim_read_pages (s, 20, 8, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 20, 8, 0, NOM);
  free (s);

  s = sim_new (12, 8, 8, (uint64_t) SIM_PAGES << 12);
  sim_cache_range (s, 0, 20);
  ck_assert_int_eq (sim_read_pages (s, 20, 7, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 20, 7, 0, NOM);
  free (s);
}
END_TEST

/* ---- 7: random reads G ------------------------------------------------ */

/* Scattered reads, none adjacent to the previous one, none with cached
 * history before it:
 *  500*4096+100, 5000 bytes: ends at 2053100, page 501 (2052096..) ->
 *      pages 500..501: G (500, 2, 0);
 *  1200*4096, 4096: G (1200, 1, 0);
 *  37*4096+4095, 2 bytes: pages 37..38: G (37, 2, 0);
 *  3000*4096, 10 pages with 3003 already cached: G (3000, 10, 0), two
 *      batches (3000..3002, 3004..3009).
 * The state stays empty, the cache holds exactly the 15 pages, no marker.
 */
START_TEST (test_G_random)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read (s, 500 * 4096 + 100, 5000, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 500, 2, 0, NOM);
  ck_assert_int_eq (sim_read (s, 1200 * 4096, 4096, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 1200, 1, 0, NOM);
  ck_assert_int_eq (sim_read (s, 37 * 4096 + 4095, 2, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 37, 2, 0, NOM);
  s->cached[3003] = true;
  ck_assert_int_eq (sim_read_pages (s, 3000, 10, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 3000, 10, 0, NOM);
  ck_assert_int_eq (s->nb, 2);
  ck_batch (s, 0, 3000, 3, false);
  ck_batch (s, 1, 3004, 6, false);
  ck_assert_uint_eq (s->res.sync_pages, 9);
  ck_assert_uint_eq (s->res.async_pages, 0);

  ck_state (s, 0, 0, 0);
  ck_assert_uint_eq (sim_count_cached (s), 15);
  ck_assert_uint_eq (sim_count_markers (s), 0);
  free (s);
}
END_TEST

/* A random read does not disturb an established stream: after A
 * (0, 8, 4, 4), a read at 2000 is G and the state is still (0, 8, 4);
 * the stream then goes on through B as in the worked example.
 */
START_TEST (test_G_keeps_state)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  ck_win (w[0], RA_A_INITIAL, 0, 8, 4, 4);
  ck_assert_int_eq (sim_read_pages (s, 2000, 3, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 2000, 3, 0, NOM);
  ck_state (s, 0, 8, 4);
  ck_assert_int_eq (sim_read_pages (s, 4, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 8, 16, 16, 8);
  free (s);
}
END_TEST

/* ---- 8: correction 1, req_count follows the pages it names ------------ */

/* C with a request that goes past the hole.  Pages 200..209 cached (an
 * interleaved stream's readahead, marker on 200), the state elsewhere.
 * Read 16 pages at 200: marker -> C: hole s = 210, s - 200 = 10 <= 32;
 * size next_size(10 + 16 = 26) = 32 (26 > 16); the request 200..215
 * reaches 6 pages past s: 210..215 sync, async 32 - 6 = 26, marker 216:
 * (210, 32, 26, 216).  (5.18: async 32, marker 210.)
 */
START_TEST (test_C_req_count)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  sim_cache_range (s, 200, 210);
  s->marker[200] = true;
  ck_assert_int_eq (sim_read_pages (s, 200, 16, w, 4), 1);
  ck_win (w[0], RA_C_INTERLEAVED, 210, 32, 26, 216);
  ck_state (s, 210, 32, 26);
  ck_assert_uint_eq (s->res.sync_pages, 6);
  ck_assert_uint_eq (s->res.async_pages, 26);
  ck_assert_int_eq (s->nb, 2);
  ck_batch (s, 0, 210, 6, false);
  ck_batch (s, 1, 216, 26, true);
  for (ra_pgoff i = 210; i < 242; i++)
    ck_assert_int_eq (s->async_label[i], i >= 216);
  free (s);
}
END_TEST

/* C with the request wholly before the hole: all async.  400..409
 * cached, marker 400, read 1 page at 400: s = 410, size next_size(10 + 1
 * = 11) = 22 (160334a0cfa8: the request counts), nothing of the request
 * past 410: (410, 22, 22, 410).
 * C with more requested past the hole than the window: 200..201 cached,
 * marker 200, req 40 (io_max = ra_max: no raise): s = 202, next_size(2 +
 * 40) = 32; 240 - 202 = 38 >= 32 pages wanted.  The wanted pages would
 * fill the window and leave no marker, so the ramped 32 pages stay as
 * an async part after them: sync 38, size 38 + 32 = 70, marker 240:
 * (202, 70, 32, 240).
 */
START_TEST (test_C_req_count_edges)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  sim_cache_range (s, 400, 410);
  s->marker[400] = true;
  ck_assert_int_eq (sim_read_pages (s, 400, 1, w, 4), 1);
  ck_win (w[0], RA_C_INTERLEAVED, 410, 22, 22, 410);
  free (s);

  s = sim_std ();
  sim_cache_range (s, 200, 202);
  s->marker[200] = false;       /* the read path cleared it */
  sim_trigger (s, 200, true, 40, &w[0]);
  ck_win (w[0], RA_C_INTERLEAVED, 202, 70, 32, 240);
  ck_state (s, 202, 70, 32);
  ck_assert_uint_eq (s->res.sync_pages, 38);
  ck_assert_uint_eq (s->res.async_pages, 32);
  free (s);
}
END_TEST

/* B on an async trigger with a large request.  After A (0, 8, 4, 4),
 * read 16 pages at 4: marker 4 (req 16) -> B: start 8, next_size(8) =
 * 16; the request 4..19 reaches 12 pages past 8: 8..19 sync, async 4,
 * marker 20: (8, 16, 4, 20).  (5.18: async 16, marker 8.)  The read
 * ends at 19: no further trigger.
 */
START_TEST (test_B_req_count)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  ck_assert_int_eq (sim_read_pages (s, 4, 16, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 8, 16, 4, 20);
  ck_state (s, 8, 16, 4);
  ck_assert_uint_eq (s->res.sync_pages, 12);
  ck_assert_uint_eq (s->res.async_pages, 4);
  /* The next read reaches the marker at 20: B (20 == 8+16-4), start 24,
   * next_size(16) = 32, request 20..23 before 24: (24, 32, 32, 24).
   */
  ck_assert_int_eq (sim_read_pages (s, 20, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 24, 32, 32, 24);
  free (s);
}
END_TEST

/* Reads larger than the window keep being read ahead of (B with wanted
 * >= size).  ra_max = io_max = 32: a 64 page read at 0 is oversize (req
 * 64 > max 32, io_max not above max: no raise): A: init_size(64, 32) =
 * 32, size 32 not > req: async 32; merge: add 32, 64 > 32 -> (0, 32, 16,
 * marker 16).  The read goes on at 16: marker -> B: start 32, next_size(32)
 * = 32, the request 16..63 wants 32 pages past 32: they fill the window,
 * so the 32 ramped pages stay async after them: (32, 64, 32, marker 64).
 * The next 64 page read at 64 hits that marker: B, start 96, wanted
 * 128 - 96 = 32 again: (96, 64, 32, 128): every read finds its marker.
 */
START_TEST (test_B_large_reads_keep_marker)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 64, w, 4), 2);
  ck_win (w[0], RA_A_INITIAL, 0, 32, 16, 16);
  ck_win (w[1], RA_B_SEQUENTIAL, 32, 64, 32, 64);
  ck_assert_int_eq (sim_read_pages (s, 64, 64, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 96, 64, 32, 128);
  ck_assert_int_eq (sim_read_pages (s, 128, 64, w, 4), 1);
  ck_assert_int_eq (w[0].branch, RA_B_SEQUENTIAL);
  ck_assert_uint_ne (w[0].marker, NOM);
  free (s);
}
END_TEST

/* B on an async trigger at start + size (the page after the window, its
 * marker set by some other window): the window starts at the accessed
 * page itself, so it moves past nothing and correction 1 does not apply:
 * B gives async = size and SUBMIT pulls the next window in, as in Linux.
 * State (8, 16, 4) (marker page 20), marker on 24, 8..24 cached, read 4
 * at 24: B (24 == 8+16): start 24, next_size(16) = 32, async 32; merge:
 * add = next_size(32) = 32, 64 > 32 -> size 32, async 16: (24, 32, 16,
 * 40).
 */
START_TEST (test_B_marker_at_window_end)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  s->ra.start = 8;
  s->ra.size = 16;
  s->ra.async_size = 4;
  sim_cache_range (s, 8, 25);
  s->marker[24] = true;
  ck_assert_int_eq (sim_read_pages (s, 24, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 24, 32, 16, 40);
  ck_state (s, 24, 32, 16);
  free (s);
}
END_TEST

/* ---- 9: correction 2, no hole no readahead ---------------------------- */

/* 300..340 cached, marker 300, read 4 at 300: C looks for a hole in
 * [301, 332]: none -> RA_NONE, size 0, nothing inserted, state unchanged
 * (5.18 would read from 333).
 * With the hole exactly at index + max: 300..331 cached: s = 332, 332 -
 * 300 = 32 <= 32 -> C: next_size(32 + 4) = 32, all async: (332, 32, 32,
 * 332).
 */
START_TEST (test_C_no_hole)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  sim_cache_range (s, 300, 341);
  s->marker[300] = true;
  ck_assert_int_eq (sim_read_pages (s, 300, 4, w, 4), 1);
  ck_assert_int_eq (w[0].branch, RA_NONE);
  ck_assert_uint_eq (w[0].size, 0);
  ck_assert_uint_eq (w[0].marker, NOM);
  ck_assert_uint_eq (s->res.sync_pages + s->res.async_pages, 0);
  ck_assert_int_eq (s->nb, 0);
  ck_state (s, 0, 0, 0);
  ck_assert_uint_eq (sim_count_cached (s), 41);
  free (s);

  s = sim_std ();
  sim_cache_range (s, 300, 332);
  s->marker[300] = true;
  ck_assert_int_eq (sim_read_pages (s, 300, 4, w, 4), 1);
  ck_win (w[0], RA_C_INTERLEAVED, 332, 32, 32, 332);
  free (s);
}
END_TEST

/* ---- 10: congestion cleanup ------------------------------------------- */

/* ra_drop_async itself.  After A (0, 8, 4): dropping 4 -> (0, 4, 0);
 * dropping 3 -> (0, 5, 1); dropping 10 is clamped to async_size 4 ->
 * (0, 4, 0).  Windows that did not set the state change nothing: G,
 * forced, off, none, and a window whose start is no longer the state's.
 */
START_TEST (test_drop_async)
{
  struct sim *s = sim_std ();
  struct ra_window a, g, f;

  ra_ondemand (&s->ra, &s->p, &sim_ops, s, 0, false, 4, &a);
  ck_win (a, RA_A_INITIAL, 0, 8, 4, 4);
  ra_drop_async (&s->ra, &a, 4);
  ck_state (s, 0, 4, 0);

  s->ra.size = 8; s->ra.async_size = 4;
  ra_drop_async (&s->ra, &a, 3);
  ck_state (s, 0, 5, 1);

  s->ra.size = 8; s->ra.async_size = 4;
  ra_drop_async (&s->ra, &a, 10);
  ck_state (s, 0, 4, 0);

  s->ra.size = 8; s->ra.async_size = 4;
  ra_ondemand (&s->ra, &s->p, &sim_ops, s, 500, false, 4, &g);
  ck_assert_int_eq (g.branch, RA_G_RANDOM);
  g.start = 0;                  /* even if it started where the state does */
  ra_drop_async (&s->ra, &g, 2);
  ck_state (s, 0, 8, 4);
  ck_assert (ra_forced (&s->p, 0, 8, &f));
  ra_drop_async (&s->ra, &f, 2);
  ck_state (s, 0, 8, 4);
  f.branch = RA_OFF;
  ra_drop_async (&s->ra, &f, 2);
  f.branch = RA_NONE;
  ra_drop_async (&s->ra, &f, 2);
  ck_state (s, 0, 8, 4);

  a.start = 8;                  /* the state has moved on */
  ra_drop_async (&s->ra, &a, 2);
  ck_state (s, 0, 8, 4);
  free (s);
}
END_TEST

/* A congested backend all along, 4-page reads from 0.  Each window's
 * async part is dropped, the stream continues through B on the miss at
 * start + size, the needed page is read each time:
 *  read 0:  A (0, 8, 4, 4); pages 4..7 dropped -> state (0, 4, 0).
 *  read 1:  miss at 4 = 0+4: B: start 4, next_size(4) = 8, async 8;
 *           merge: add = next_size(8) = 16, 8 + 16 <= 32 -> (4, 24, 16,
 *           12); 12..27 dropped -> (4, 8, 0).
 *  read 2:  8..11 cached.
 *  read 3:  miss at 12 = 4+8: B: next_size(8) = 16; merge: add = 32,
 *           48 > 32 -> (12, 32, 16, 28); 28..43 dropped -> (12, 16, 0).
 *  read 7:  miss at 28 = 12+16: B: next_size(16) = 32; merge: add 32 ->
 *           (28, 32, 16, 44); dropped -> (28, 16, 0).
 *  read 11: (44, 32, 16, 60) -> (44, 16, 0), and so on every 4 reads.
 */
START_TEST (test_drop_continues_B)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  s->inflight = SIM_CONG_THRESHOLD;   /* congested */
  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  ck_win (w[0], RA_A_INITIAL, 0, 8, 4, 4);
  ck_assert_uint_eq (s->dropped, 4);
  ck_state (s, 0, 4, 0);
  ck_assert (!s->cached[4]);
  ck_assert_uint_eq (sim_count_markers (s), 0);

  ck_assert_int_eq (sim_read_pages (s, 4, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 4, 24, 16, 12);
  ck_assert (!s->log[s->nlog - 1].marker);
  ck_assert_uint_eq (s->dropped, 16);
  ck_state (s, 4, 8, 0);

  ck_assert_int_eq (sim_read_pages (s, 8, 4, w, 4), 0);

  ck_assert_int_eq (sim_read_pages (s, 12, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 12, 32, 16, 28);
  ck_state (s, 12, 16, 0);

  for (int r = 4; r < 40; r++) {
    int n = sim_read_pages (s, 4 * r, 4, w, 4);

    if (r >= 7 && (r - 7) % 4 == 0) {
      ra_pgoff st = 28 + 16 * ((r - 7) / 4);

      ck_assert_int_eq (n, 1);
      ck_win (w[0], RA_B_SEQUENTIAL, st, 32, 16, st + 16);
      ck_assert_uint_eq (s->dropped, 16);
      ck_state (s, st, 16, 0);
    }
    else
      ck_assert_int_eq (n, 0);
  }
  free (s);
}
END_TEST

/* The same congested reads from a client with several reads in flight
 * (depth 2), where the request can be read around the cache.  Read 0:
 * A (0, 8, 4, 4), its sync part the request: read around, no page made,
 * state (0, 4, 0).  Read 1: B (4, 24, 16, 12) pulls in a sync part of 8
 * pages for a request of 4; the client's other reads ask for the rest
 * themselves, so it too is read around and the state cut to the request,
 * (4, 4, 0) (ra_keep_only); read 2 then continues through B at 8.  At
 * depth 1 the sync part past the request is read into the cache, as in
 * test_drop_continues_B.
 */
START_TEST (test_drop_deep_reads_around)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  s->inflight = SIM_CONG_THRESHOLD;   /* congested */
  s->around = true;
  s->depth = 2;
  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  ck_win (w[0], RA_A_INITIAL, 0, 8, 4, 4);
  ck_assert_uint_eq (s->arounds, 1);
  ck_state (s, 0, 4, 0);
  ck_assert_int_eq (sim_read_pages (s, 4, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 4, 24, 16, 12);
  ck_assert_uint_eq (s->arounds, 2);
  ck_state (s, 4, 4, 0);
  for (ra_pgoff i = 0; i < 32; i++)
    ck_assert_msg (!s->cached[i], "page %u made", (unsigned) i);
  ck_assert_int_eq (sim_read_pages (s, 8, 4, w, 4), 1);
  ck_assert_int_eq (w[0].branch, RA_B_SEQUENTIAL);
  ck_assert_uint_eq (w[0].start, 8);
  ck_assert_uint_eq (s->arounds, 3);
  free (s);

  s = sim_std ();
  s->inflight = SIM_CONG_THRESHOLD;
  s->around = true;
  s->depth = 1;
  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  ck_assert_int_eq (sim_read_pages (s, 4, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 4, 24, 16, 12);
  ck_assert_uint_eq (s->arounds, 1);          /* read 0 only */
  ck_state (s, 4, 8, 0);
  ck_assert (s->cached[4] && s->cached[11] && !s->cached[12]);
  free (s);
}
END_TEST

/* A wholly async window dropped to nothing.  Worked example, congested
 * from read 1 only: read 0 A (0, 8, 4, 4) read whole; read 1: marker 4
 * -> B (8, 16, 16, 8), all 16 pages dropped -> state (8, 0, 0).  Read 2
 * misses at 8 = 8+0-0 -> B, sync: next_size(0) = 0, so restart at
 * init_size(4) = 8, async 8 - 4 = 4, no merge: (8, 8, 4, 12); page 8 is
 * read (correction 3).  Not congested any more, the stream then goes on
 * through B: marker 12 -> (16, next_size(8) = 16, 16, 16).
 */
START_TEST (test_drop_all_async_restart_B)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  s->inflight = SIM_CONG_THRESHOLD;   /* congested */
  ck_assert_int_eq (sim_read_pages (s, 4, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 8, 16, 16, 8);
  ck_assert_uint_eq (s->dropped, 16);
  ck_state (s, 8, 0, 0);
  ck_assert (!s->cached[8]);
  ck_assert_uint_eq (sim_count_markers (s), 0);

  s->inflight = 0;
  ck_assert_int_eq (sim_read_pages (s, 8, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 8, 8, 4, 12);
  ck_assert (!s->log[s->nlog - 1].marker);
  ck_assert (s->cached[8]);
  ck_state (s, 8, 8, 4);
  ck_assert_int_eq (sim_read_pages (s, 12, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 16, 16, 16, 16);
  free (s);
}
END_TEST

/* The first burst (src/trigger.c, first_burst): before any read of the
 * stream completed (the triggers below, without a read path, never
 * complete one), a deep client's reads reach the markers one after the
 * other.  Sync trigger at 0 (req 4): A (0, 8, 4, 4); marker 4: B (8,
 * 16, 16, 8); marker 8: B (24, 32, 32, 24), the third window with an
 * async part.  With io_max (32 pages, 128K) of the client's reads in
 * flight it reads nothing: no batch, no page, no marker, its 32 pages
 * counted as async_burst_pages; the state keeps it, so the client's
 * read that misses at 24 goes on through B (sync: start 24,
 * next_size(32) = 32, wholly async, merged at max as the kernel merges:
 * size 32, async 16, marker 40).  A client with less in flight, or one
 * of whose reads completed, gets the window read, as kernel mode does.
 * (Adaptive mode with adapt_min = ra_max: every window as in kernel
 * mode.)
 */
static struct sim *
burst_sim (enum ra_mode mode, uint64_t depth_bytes, bool completed)
{
  struct sim *s = sim_std ();
  struct ra_window w;

  s->p.mode = mode;
  s->p.adapt_min = 32;          /* the cap stays ra_max (32) */
  s->depth = 8;
  s->depth_bytes = depth_bytes;
  sim_trigger (s, 0, false, 4, &w);
  ck_win (w, RA_A_INITIAL, 0, 8, 4, 4);
  sim_trigger (s, 4, true, 4, &w);
  ck_win (w, RA_B_SEQUENTIAL, 8, 16, 16, 8);
  ck_assert_uint_eq (s->res.async_pages, 16);
  if (completed)
    ra_update_prev_pos (&s->ra, 4 << 12);
  sim_trigger (s, 8, true, 4, &w);
  ck_win (w, RA_B_SEQUENTIAL, 24, 32, 32, 24);
  ck_state (s, 24, 32, 32);
  return s;
}

START_TEST (test_first_burst)
{
  struct sim *s = burst_sim (RA_MODE_ADAPTIVE, 32 << 12, false);
  struct ra_window w;

  ck_assert_uint_eq (s->nb, 0);
  ck_assert_uint_eq (s->res.async_pages, 0);
  ck_assert (!s->cached[24] && !s->marker[24]);
  ck_assert_uint_eq (atomic_load (&s->st.async_burst_pages), 32);
  ck_assert_uint_eq (atomic_load (&s->st.async_skipped), 0);
  sim_trigger (s, 24, false, 4, &w);
  ck_win (w, RA_B_SEQUENTIAL, 24, 32, 16, 40);
  ck_assert (s->cached[24] && s->marker[40]);
  ck_assert_uint_eq (atomic_load (&s->st.async_burst_pages), 32);
  free (s);

  /* Less than io_max in flight (64K depth 16 at its third trigger):
   * the window's head start is needed.
   */
  s = burst_sim (RA_MODE_ADAPTIVE, (32 << 12) - 1, false);
  ck_assert_uint_eq (s->res.async_pages, 32);
  ck_assert (s->cached[24] && s->marker[24]);
  ck_assert_uint_eq (atomic_load (&s->st.async_burst_pages), 0);
  free (s);

  /* A read completed: no burst any more. */
  s = burst_sim (RA_MODE_ADAPTIVE, 32 << 12, true);
  ck_assert_uint_eq (s->res.async_pages, 32);
  ck_assert_uint_eq (atomic_load (&s->st.async_burst_pages), 0);
  free (s);

  /* Kernel mode: the kernel's rules exactly. */
  s = burst_sim (RA_MODE_KERNEL, 32 << 12, false);
  ck_assert_uint_eq (s->res.async_pages, 32);
  ck_assert_uint_eq (atomic_load (&s->st.async_burst_pages), 0);
  free (s);
}
END_TEST

/* ---- 11, 12, 13: the end of the export -------------------------------- */

/* Export of 40 pages, 4-page reads from 0: A (0, 8, 4, 4), B (8, 16, 16,
 * 8), then B start 24, next_size(16) = 32, async 32: pages 24..55
 * clamped to 24..39: (24, 16, 16, 24), while the state keeps (24, 32,
 * 32).  The marker at 24 (read 6) -> B: start 56, past the end: size 0,
 * no marker; the state is (56, 32, 32).  Reads 7..9 are hits.
 */
START_TEST (test_end_clamp)
{
  struct sim *s = sim_new (12, 32, 32, 40 * 4096);
  struct ra_window w[4];
  int total = 0;

  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  ck_assert_int_eq (sim_read_pages (s, 4, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 8, 16, 16, 8);
  ck_assert_int_eq (sim_read_pages (s, 8, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 24, 16, 16, 24);
  ck_state (s, 24, 32, 32);
  for (int r = 3; r < 6; r++)
    ck_assert_int_eq (sim_read_pages (s, 4 * r, 4, w, 4), 0);
  ck_assert_int_eq (sim_read_pages (s, 24, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 56, 0, 0, NOM);
  ck_state (s, 56, 32, 32);
  for (int r = 7; r < 10; r++)
    total += sim_read_pages (s, 4 * r, 4, w, 4);
  ck_assert_int_eq (total, 0);
  ck_assert_uint_eq (sim_count_cached (s), 40);
  free (s);
}
END_TEST

/* Clamping the async part and the marker.  Export of 6 pages:
 * read 4 at 0: A (0, 8, 4) -> pages 0..5: size 6, async part 4..5:
 *   async 2, marker 4;
 * read 6 at 0 (fresh): A: init_size(6): r = 8 <= 8 -> 16, async 16 - 6
 *   = 10: the async part 6..15 is all past the end: (0, 6, 0, none),
 *   the state keeps (0, 16, 10).
 */
START_TEST (test_end_clamp_marker)
{
  struct sim *s = sim_new (12, 32, 32, 6 * 4096);
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  ck_win (w[0], RA_A_INITIAL, 0, 6, 2, 4);
  ck_state (s, 0, 8, 4);
  free (s);

  s = sim_new (12, 32, 32, 6 * 4096);
  ck_assert_int_eq (sim_read_pages (s, 0, 6, w, 4), 1);
  ck_win (w[0], RA_A_INITIAL, 0, 6, 0, NOM);
  ck_state (s, 0, 16, 10);
  ck_assert_uint_eq (sim_count_markers (s), 0);
  free (s);
}
END_TEST

/* An export smaller than one window.
 * 3 pages, 1-page reads: read 0: A: init_size(1) = 4 (r = 1 <= 1), async
 *   3, marker 1 -> clamped (0, 3, 2, 1); read 1: marker 1 = 0+4-3 -> B:
 *   start 4, past the end: (4, 0, 0, none); read 2: hit.
 * 2 pages, one 2-page read: A: init_size(2) = 4, async 2, marker 2 = the
 *   end: (0, 2, 0, none).
 * 100 bytes (one partial page): A (0, 4, 3) -> (0, 1, 0, none).
 */
START_TEST (test_small_export)
{
  struct sim *s = sim_new (12, 32, 32, 3 * 4096);
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 1, w, 4), 1);
  ck_win (w[0], RA_A_INITIAL, 0, 3, 2, 1);
  ck_assert_int_eq (sim_read_pages (s, 1, 1, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 4, 0, 0, NOM);
  ck_assert_int_eq (sim_read_pages (s, 2, 1, w, 4), 0);
  ck_assert_uint_eq (sim_count_cached (s), 3);
  free (s);

  s = sim_new (12, 32, 32, 2 * 4096);
  ck_assert_int_eq (sim_read_pages (s, 0, 2, w, 4), 1);
  ck_win (w[0], RA_A_INITIAL, 0, 2, 0, NOM);
  free (s);

  s = sim_new (12, 32, 32, 100);
  ck_assert_uint_eq (ra_nr_pages (&s->p), 1);
  ck_assert_int_eq (sim_read (s, 0, 100, w, 4), 1);
  ck_win (w[0], RA_A_INITIAL, 0, 1, 0, NOM);
  free (s);
}
END_TEST

/* The last page only partly inside the export: 10 pages + 100 bytes =
 * 41060 bytes -> ra_nr_pages = 11 (rounded up).
 * 1-page reads from 0: A (0, 4, 3, 1); marker 1 -> B: start 4,
 *   next_size(4) = 8, async 8: pages 4..11 clamped to 4..10: (4, 7, 7,
 *   4); marker 4 -> B: start 12, past the end: (12, 0, 0, none); the
 *   read of the last 100 bytes (page 10) is a hit: page 10 was read
 *   ahead (with 10 pages it would have been a miss).
 * Fresh: read of the last 100 bytes at 40960: page 10, G (10, 1, 0).
 * Fresh: 1060 bytes at 40000: pages 9..10, G (9, 2, 0).
 */
START_TEST (test_partial_last_page)
{
  const uint64_t size = 10 * 4096 + 100;
  struct sim *s = sim_new (12, 32, 32, size);
  struct ra_window w[4];

  ck_assert_uint_eq (ra_nr_pages (&s->p), 11);
  ck_assert_int_eq (sim_read_pages (s, 0, 1, w, 4), 1);
  ck_win (w[0], RA_A_INITIAL, 0, 4, 3, 1);
  ck_assert_int_eq (sim_read_pages (s, 1, 1, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 4, 7, 7, 4);
  ck_assert (s->cached[10]);
  ck_assert_int_eq (sim_read_pages (s, 2, 1, w, 4), 0);
  ck_assert_int_eq (sim_read_pages (s, 3, 1, w, 4), 0);
  ck_assert_int_eq (sim_read_pages (s, 4, 1, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 12, 0, 0, NOM);
  for (ra_pgoff i = 5; i < 10; i++)
    ck_assert_int_eq (sim_read_pages (s, i, 1, w, 4), 0);
  ck_assert_int_eq (sim_read (s, 40960, 100, w, 4), 0);
  ck_assert_uint_eq (sim_count_cached (s), 11);
  free (s);

  s = sim_new (12, 32, 32, size);
  ck_assert_int_eq (sim_read (s, 40960, 100, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 10, 1, 0, NOM);
  free (s);

  s = sim_new (12, 32, 32, size);
  ck_assert_int_eq (sim_read (s, 40000, 1060, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 9, 2, 0, NOM);
  free (s);
}
END_TEST

/* ---- 14: page sizes: E's prev_pos page arithmetic --------------------- */

/* 512-byte pages (shift 9).  Read 1000 bytes at 51210 (= 100*512 + 10):
 * ends at 52210, page 101 (51712..52223): pages 100..101, G (100, 2, 0).
 * prev_pos 52210 is in page 101.  Read 1000 bytes at 52210: pages 101
 * (hit) to 103 (ends at 53210 < 53248): miss at 102, req 2; 102 is
 * prev_pos's page + 1 -> E: init_size(2) = 4, async 2: (102, 4, 2, 104).
 * A read at 103 instead (fresh sim after the same first read): 103 is 2
 * pages past prev_pos's page: not E; page 102 not cached: G (103, 1, 0).
 */
START_TEST (test_E_prev_pos_512)
{
  struct sim *s = sim_new (9, 32, 32, (uint64_t) SIM_PAGES << 9);
  struct ra_window w[4];

  ck_assert_int_eq (sim_read (s, 51210, 1000, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 100, 2, 0, NOM);
  ck_assert_uint_eq (s->ra.prev_pos, 52210);
  ck_assert_int_eq (sim_read (s, 52210, 1000, w, 4), 1);
  ck_win (w[0], RA_E_SEQ_MISS, 102, 4, 2, 104);
  ck_assert_uint_eq (s->log[s->nlog - 1].index, 102);
  free (s);

  s = sim_new (9, 32, 32, (uint64_t) SIM_PAGES << 9);
  ck_assert_int_eq (sim_read (s, 51210, 1000, w, 4), 1);
  ck_assert_int_eq (sim_read (s, 103 * 512, 512, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 103, 1, 0, NOM);
  free (s);
}
END_TEST

/* 64 KiB pages (shift 16).  Read 70000 bytes at 5*65536 + 1000: ends at
 * 398680, page 6 (393216..458751): pages 5..6, G (5, 2, 0); prev_pos's
 * page is 6.  Read page 7: 7 == 6 + 1 -> E: init_size(1) = 4, async 3:
 * (7, 4, 3, 8).  Read page 8 instead: 8 - 6 = 2, not E, G (8, 1, 0).
 * E also covers index == prev_pos's page: 1 byte at 20*65536 + 5 -> G
 * (20, 1, 0), prev_pos in page 20; evict 20 and read it again: E:
 * (20, 4, 3, 21).
 */
START_TEST (test_E_prev_pos_64k)
{
  struct sim *s = sim_new (16, 32, 32, (uint64_t) SIM_PAGES << 16);
  struct ra_window w[4];

  ck_assert_int_eq (sim_read (s, 5 * 65536 + 1000, 70000, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 5, 2, 0, NOM);
  ck_assert_int_eq (sim_read (s, 7 * 65536, 65536, w, 4), 1);
  ck_win (w[0], RA_E_SEQ_MISS, 7, 4, 3, 8);
  free (s);

  s = sim_new (16, 32, 32, (uint64_t) SIM_PAGES << 16);
  ck_assert_int_eq (sim_read (s, 5 * 65536 + 1000, 70000, w, 4), 1);
  ck_assert_int_eq (sim_read (s, 8 * 65536, 65536, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 8, 1, 0, NOM);
  ck_state (s, 0, 0, 0);

  ck_assert_int_eq (sim_read (s, 20 * 65536 + 5, 1, w, 4), 1);
  ck_win (w[0], RA_G_RANDOM, 20, 1, 0, NOM);
  sim_evict (s, 20);
  ck_assert_int_eq (sim_read (s, 20 * 65536, 65536, w, 4), 1);
  ck_win (w[0], RA_E_SEQ_MISS, 20, 4, 3, 21);
  free (s);
}
END_TEST

/* ---- 15: helpers, submit, forced, off, correction 3 ------------------- */

/* init_size and next_size, by the formulas of doc/readahead-rules.md.
 * max 32 (max/32 = 1, max/4 = 8): req 1: r 1 <= 1 -> 4; 2: r 2 <= 8 ->
 *   4; 3: r 4 -> 8; 4 -> 8; 5: r 8 -> 16; 8 -> 16; 9: r 16 > 8 -> 32;
 *   16 -> 32; 32 -> 32; 33 -> 32.
 * max 128 (4, 32): 1 -> 4; 4: r 4 <= 4 -> 16; 5: r 8 <= 32 -> 16;
 *   16 -> 32; 32 -> 64; 33: r 64 > 32 -> 128.
 * next_size, max 32 (max/16 = 2, max/2 = 16): 0 -> 0; 1 -> 4; 2 -> 4
 *   (2 < 2 false, 2 <= 16); 8 -> 16; 12 -> 24; 16 -> 32; 17 -> 32
 *   (max); 32 -> 32.
 * max 128 (8, 64): 4 -> 16; 7 -> 28; 8 -> 16; 64 -> 128; 65 -> 128.
 * An odd max, 33 pages (132 KiB; max/32 = 1, max/4 = 8, max/16 = 2,
 *   max/2 = 16): init 8 -> 16, 9 -> 33; next 16 -> 32 (16 <= 16, 2*16,
 *   not max), 17 -> 33.
 */
START_TEST (test_size_tables)
{
  static const ra_pgoff init32[][2] = {
    { 1, 4 }, { 2, 4 }, { 3, 8 }, { 4, 8 }, { 5, 16 }, { 8, 16 },
    { 9, 32 }, { 16, 32 }, { 32, 32 }, { 33, 32 },
  };
  static const ra_pgoff init128[][2] = {
    { 1, 4 }, { 4, 16 }, { 5, 16 }, { 16, 32 }, { 32, 64 }, { 33, 128 },
  };
  static const ra_pgoff next32[][2] = {
    { 0, 0 }, { 1, 4 }, { 2, 4 }, { 8, 16 }, { 12, 24 }, { 16, 32 },
    { 17, 32 }, { 32, 32 },
  };
  static const ra_pgoff next128[][2] = {
    { 4, 16 }, { 7, 28 }, { 8, 16 }, { 64, 128 }, { 65, 128 },
  };
  size_t i;

  ck_assert_uint_eq (ra_init_size (8, 33), 16);
  ck_assert_uint_eq (ra_init_size (9, 33), 33);
  ck_assert_uint_eq (ra_next_size (16, 33), 32);
  ck_assert_uint_eq (ra_next_size (17, 33), 33);

  for (i = 0; i < sizeof init32 / sizeof init32[0]; i++)
    ck_assert_uint_eq (ra_init_size (init32[i][0], 32), init32[i][1]);
  for (i = 0; i < sizeof init128 / sizeof init128[0]; i++)
    ck_assert_uint_eq (ra_init_size (init128[i][0], 128), init128[i][1]);
  for (i = 0; i < sizeof next32 / sizeof next32[0]; i++)
    ck_assert_uint_eq (ra_next_size (next32[i][0], 32), next32[i][1]);
  for (i = 0; i < sizeof next128 / sizeof next128[0]; i++)
    ck_assert_uint_eq (ra_next_size (next128[i][0], 128), next128[i][1]);
}
END_TEST

START_TEST (test_branch_names)
{
  ck_assert_str_eq (ra_branch_name (RA_NONE), "none");
  ck_assert_str_eq (ra_branch_name (RA_A_INITIAL), "A");
  ck_assert_str_eq (ra_branch_name (RA_B_SEQUENTIAL), "B");
  ck_assert_str_eq (ra_branch_name (RA_C_INTERLEAVED), "C");
  ck_assert_str_eq (ra_branch_name (RA_D_OVERSIZE), "D");
  ck_assert_str_eq (ra_branch_name (RA_E_SEQ_MISS), "E");
  ck_assert_str_eq (ra_branch_name (RA_F_CONTEXT), "F");
  ck_assert_str_eq (ra_branch_name (RA_G_RANDOM), "G");
  ck_assert_str_eq (ra_branch_name (RA_FORCED), "forced");
  ck_assert_str_eq (ra_branch_name (RA_OFF), "off");
}
END_TEST

/* submit splits batches.  Window (10, 20, 8, 22): sync 10..21, async
 * 22..29; pages 14 and 25 already cached; io_max 5:
 *   sync 10..13 (4, ends at cached 14), 15..19 (5 = io_max), 20..21 (2,
 *   ends at the async part), async 22..24 (3, ends at cached 25),
 *   26..29 (4).  11 sync pages, 7 async, 5 batches; the marker only on
 *   22, each page labelled with its part.
 */
START_TEST (test_submit_batches)
{
  struct sim *s = sim_std ();
  struct ra_window w = {
    .branch = RA_B_SEQUENTIAL, .start = 10, .size = 20, .async_size = 8,
    .marker = 22,
  };

  s->cached[14] = s->cached[25] = true;
  ra_submit (&w, 5, &sim_submit_ops, s, &s->res);
  ck_assert_int_eq (s->nb, 5);
  ck_batch (s, 0, 10, 4, false);
  ck_batch (s, 1, 15, 5, false);
  ck_batch (s, 2, 20, 2, false);
  ck_batch (s, 3, 22, 3, true);
  ck_batch (s, 4, 26, 4, true);
  ck_assert_uint_eq (s->res.sync_pages, 11);
  ck_assert_uint_eq (s->res.async_pages, 7);
  ck_assert_uint_eq (s->res.batches, 5);
  for (ra_pgoff i = 10; i < 30; i++) {
    ck_assert (s->cached[i]);
    ck_assert_int_eq (s->marker[i], i == 22);
    if (i != 14 && i != 25)
      ck_assert_int_eq (s->async_label[i], i >= 22);
  }
  ck_assert_uint_eq (sim_count_cached (s), 20);

  /* The marker page already cached: it is skipped, and no marker is set
   * anywhere; io_max 1: one batch a page (sync 0, async 2..3).
   */
  s->nb = 0;
  w = (struct ra_window) { .branch = RA_A_INITIAL, .start = 100,
                           .size = 4, .async_size = 2, .marker = 102 };
  s->cached[102] = true;
  ra_submit (&w, 1, &sim_submit_ops, s, &s->res);
  ck_assert_int_eq (s->nb, 3);
  ck_batch (s, 0, 100, 1, false);
  ck_batch (s, 1, 101, 1, false);
  ck_batch (s, 2, 103, 1, true);
  ck_assert_uint_eq (sim_count_markers (s), 1);       /* 22 only */

  /* An empty window submits nothing. */
  s->nb = 0;
  w.size = w.async_size = 0;
  w.marker = NOM;
  ra_submit (&w, 32, &sim_submit_ops, s, &s->res);
  ck_assert_int_eq (s->nb, 0);
  ck_assert_uint_eq (s->res.batches, 0);
  free (s);
}
END_TEST

/* Forced readahead (NBD_CMD_CACHE).  2 MiB of 4 KiB pages = 512: pages
 * [0, 1200) -> (0, 512), (512, 512), (1024, 176), branch forced, no
 * async part, no marker.  The state (after A: (0, 8, 4), marker on 4)
 * and prev_pos are untouched, and no marker is added.  Clamped to the
 * export (1000 pages): [900, 1200) -> (900, 100); nothing at or past
 * 1000 or for an empty range.  64 KiB pages: 32-page chunks; 4 MiB pages
 * (more than 2 MiB): one page at a time.
 */
START_TEST (test_forced)
{
  struct sim *s = sim_new (12, 32, 32, 1200 * 4096);
  struct ra_window w[4], f;
  struct ra_params p;

  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  ck_assert_int_eq (sim_fill (s, 0, 1200, w, 4), 3);
  ck_win (w[0], RA_FORCED, 0, 512, 0, NOM);
  ck_win (w[1], RA_FORCED, 512, 512, 0, NOM);
  ck_win (w[2], RA_FORCED, 1024, 176, 0, NOM);
  ck_state (s, 0, 8, 4);
  ck_assert_uint_eq (s->ra.prev_pos, 4 * 4096);
  ck_assert_uint_eq (sim_count_markers (s), 1);
  ck_assert (s->marker[4]);
  ck_assert_uint_eq (sim_count_cached (s), 1200);
  /* The last chunk: all sync; io_max 32 -> 176 = 5 * 32 + 16: 6 batches. */
  ck_assert_int_eq (s->nb, 6);
  ck_assert_uint_eq (s->res.sync_pages, 176);
  ck_assert_uint_eq (s->res.async_pages, 0);
  free (s);

  p = (struct ra_params) { .page_shift = 12, .ra_max = 32, .io_max = 32,
                           .export_size = 1000 * 4096 };
  ck_assert (ra_forced (&p, 900, 1200, &f));
  ck_win (f, RA_FORCED, 900, 100, 0, NOM);
  ck_assert (!ra_forced (&p, 1000, 1200, &f));
  ck_assert (!ra_forced (&p, 5, 5, &f));
  ck_assert (!ra_forced (&p, 6, 5, &f));

  p.page_shift = 16;
  ck_assert (ra_forced (&p, 0, 100, &f));
  ck_win (f, RA_FORCED, 0, 32, 0, NOM);

  p.page_shift = 22;
  p.export_size = UINT64_C(1) << 40;
  ck_assert (ra_forced (&p, 3, 100, &f));
  ck_win (f, RA_FORCED, 3, 1, 0, NOM);
}
END_TEST

/* ra_max == 0: a sync trigger reads exactly the request, no marker
 * (off), the state is untouched, adjacent reads do not ramp up; an async
 * trigger does nothing (none, size 0).  Clamped to the export like any
 * window: 10 pages, request of 5 at 8 -> (8, 2, 0, none).
 */
START_TEST (test_ra_off)
{
  struct sim *s = sim_new (12, 0, 32, (uint64_t) SIM_PAGES << 12);
  struct ra_window w[4];
  struct ra_params p;
  struct ra_state ra;

  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  ck_win (w[0], RA_OFF, 0, 4, 0, NOM);
  ck_assert_int_eq (sim_read_pages (s, 4, 4, w, 4), 1);
  ck_win (w[0], RA_OFF, 4, 4, 0, NOM);
  ck_assert_int_eq (sim_read_pages (s, 100, 40, w, 4), 1);
  ck_win (w[0], RA_OFF, 100, 40, 0, NOM);
  ck_state (s, 0, 0, 0);
  ck_assert_uint_eq (sim_count_cached (s), 48);
  ck_assert_uint_eq (sim_count_markers (s), 0);

  sim_trigger (s, 2, true, 2, &w[0]);
  ck_assert_int_eq (w[0].branch, RA_NONE);
  ck_assert_uint_eq (w[0].size, 0);
  ck_assert_int_eq (s->nb, 0);
  ck_state (s, 0, 0, 0);
  free (s);

  p = (struct ra_params) { .page_shift = 12, .ra_max = 0, .io_max = 32,
                           .export_size = 10 * 4096 };
  ra_state_init (&ra);
  ra_ondemand (&ra, &p, &sim_ops, NULL, 8, false, 5, &w[0]);
  ck_win (w[0], RA_OFF, 8, 2, 0, NOM);
}
END_TEST

/* The WINDOW question carries the stream's record of the calm let-go
 * (src/trigger.c, decide_and_submit): whether it was let go, since when
 * it has been covered, and, while not let go, its rate.
 */
START_TEST (test_window_asks_let_go)
{
  struct sim *s = sim_std ();
  struct ra_window w;

  sim_trigger (s, 0, false, 4, &w);
  ck_assert_uint_eq (s->windows, 1);
  ck_assert (!s->window.let_go && !s->window.covered);
  ck_assert_uint_eq (s->window.covered_since_ns, 0);
  s->ra.covered_since_ns = 7;
  s->ra.cov.let_go = true;
  sim_trigger (s, 100, false, 4, &w);
  ck_assert_uint_eq (s->windows, 2);
  ck_assert (s->window.let_go);
  ck_assert_uint_eq (s->window.covered_since_ns, 7);
  free (s);
}
END_TEST

/* Correction 3: a sync miss at the marker page when it was evicted.
 * After A (0, 8, 4, 4) page 4 (the marker page) is evicted; the read of
 * 4..7 misses at 4 = 0+8-4 -> B, sync: the window starts at 4 (Linux
 * would start at 8 and leave page 4 unread): next_size(8) = 16, async
 * 16; merge: add = next_size(16) = 32, 48 > 32 -> (4, 32, 16, 20).
 * Pages 5..7 are still cached: batches 4 (sync), 8..19 (sync), 20..35
 * (async): 13 sync pages, 16 async.
 */
START_TEST (test_B_sync_evicted_marker)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  sim_evict (s, 4);
  ck_assert_int_eq (sim_read_pages (s, 4, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 4, 32, 16, 20);
  ck_assert (!s->log[s->nlog - 1].marker);
  ck_assert (s->cached[4]);
  ck_assert_int_eq (s->nb, 3);
  ck_batch (s, 0, 4, 1, false);
  ck_batch (s, 1, 8, 12, false);
  ck_batch (s, 2, 20, 16, true);
  ck_assert_uint_eq (s->res.sync_pages, 13);
  ck_assert_uint_eq (s->res.async_pages, 16);
  free (s);
}
END_TEST

/* A sync miss at start + size (a lost window, no eviction of a marker):
 * after A (0, 8, 4, 4), pages 4..7 evicted, and the read skips ahead to
 * 8..11: miss at 8 = 0+8 -> B: start 8 (= start + size, as Linux),
 * next_size(8) = 16, async 16, merge: add 32 -> (8, 32, 16, 24).
 */
START_TEST (test_B_sync_at_window_end)
{
  struct sim *s = sim_std ();
  struct ra_window w[4];

  ck_assert_int_eq (sim_read_pages (s, 0, 4, w, 4), 1);
  for (ra_pgoff i = 4; i < 8; i++)
    sim_evict (s, i);
  ck_assert_int_eq (sim_read_pages (s, 8, 4, w, 4), 1);
  ck_win (w[0], RA_B_SEQUENTIAL, 8, 32, 16, 24);
  ck_assert (s->cached[8]);
  free (s);
}
END_TEST

/* ---- the suite -------------------------------------------------------- */

static Suite *
readahead_suite (void)
{
  Suite *s = suite_create ("readahead");
  TCase *tc;

  tc = tcase_create ("spec");
  tcase_add_loop_test (tc, test_worked_example, 0,
                       sizeof we_shifts / sizeof we_shifts[0]);
  tcase_add_test (tc, test_G_then_E);
  tcase_add_test (tc, test_window_asks_let_go);
  tcase_add_test (tc, test_miss_partway_prev_pos);
  tcase_add_test (tc, test_interleaved_C);
  suite_add_tcase (s, tc);

  tc = tcase_create ("branches");
  tcase_add_test (tc, test_A_req_eq_max);
  tcase_add_test (tc, test_oversize_io_max_above_A);
  tcase_add_test (tc, test_oversize_io_max_above_G_E_D);
  tcase_add_test (tc, test_oversize_io_max_below_D);
  tcase_add_test (tc, test_F_context);
  tcase_add_test (tc, test_F_context_page0);
  tcase_add_test (tc, test_F_short_history_G);
  tcase_add_test (tc, test_G_random);
  tcase_add_test (tc, test_G_keeps_state);
  suite_add_tcase (s, tc);

  tc = tcase_create ("corrections");
  tcase_add_test (tc, test_C_req_count);
  tcase_add_test (tc, test_C_req_count_edges);
  tcase_add_test (tc, test_B_req_count);
  tcase_add_test (tc, test_B_large_reads_keep_marker);
  tcase_add_test (tc, test_B_marker_at_window_end);
  tcase_add_test (tc, test_C_no_hole);
  tcase_add_test (tc, test_B_sync_evicted_marker);
  tcase_add_test (tc, test_B_sync_at_window_end);
  suite_add_tcase (s, tc);

  tc = tcase_create ("congestion");
  tcase_add_test (tc, test_drop_async);
  tcase_add_test (tc, test_drop_continues_B);
  tcase_add_test (tc, test_drop_deep_reads_around);
  tcase_add_test (tc, test_drop_all_async_restart_B);
  tcase_add_test (tc, test_first_burst);
  suite_add_tcase (s, tc);

  tc = tcase_create ("export-end");
  tcase_add_test (tc, test_end_clamp);
  tcase_add_test (tc, test_end_clamp_marker);
  tcase_add_test (tc, test_small_export);
  tcase_add_test (tc, test_partial_last_page);
  suite_add_tcase (s, tc);

  tc = tcase_create ("page-sizes");
  tcase_add_test (tc, test_E_prev_pos_512);
  tcase_add_test (tc, test_E_prev_pos_64k);
  suite_add_tcase (s, tc);

  tc = tcase_create ("mechanics");
  tcase_add_test (tc, test_size_tables);
  tcase_add_test (tc, test_branch_names);
  tcase_add_test (tc, test_submit_batches);
  tcase_add_test (tc, test_forced);
  tcase_add_test (tc, test_ra_off);
  suite_add_tcase (s, tc);

  return s;
}

int
main (void)
{
  SRunner *sr = srunner_create (readahead_suite ());
  int failed;
  srunner_run_all (sr, CK_NORMAL);
  failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
