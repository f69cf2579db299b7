/* Unit tests of adaptive mode (src/readahead.c, "Adaptive mode"): the
 * backend model, the cap decided from a reader's pace and the backend's
 * timings, the limits (ra_max, self_max, share), the late and waste
 * feedback, branch C at another stream's marker, and kernel mode
 * ignoring all of it.
 *
 * Everything is deterministic: the tests hand the engine a clock and
 * backend timings (struct ra_inputs).  Unless a test says otherwise:
 * pages of 4 KiB, ra_max 2048 pages (8 MiB), io_max 256 (1 MiB),
 * adapt_min 32 (128 KiB), 12 reads in parallel, no self_max, no share.
 * fetch(W) = ceil(ceil(W / 256) / 12) * (lat + min(W, 256) * page_ns),
 * and the cap is the smallest power of two W >= 32 with
 * W >= 2 * rate * fetch(W).
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>
#include <check.h>

#include "racache/readahead.h"

#define PAGES (1u << 18)

struct sim {
  unsigned char cached[PAGES];
  unsigned char marker[PAGES];
  struct ra_state ra;
  struct ra_params p;
  struct ra_inputs in;
  bool use_inputs;
  ra_pgoff max_window;          /* largest window decided */
  ra_pgoff last_window;         /* size of the latest window */
  unsigned windows;
};

static bool
sim_cached (void *opaque, ra_pgoff i)
{
  struct sim *s = opaque;
  return i < PAGES && s->cached[i];
}

static const struct ra_cache_ops sim_ops = { .cached = sim_cached };

static bool
sim_insert (void *opaque, ra_pgoff i, bool marker, bool async)
{
  struct sim *s = opaque;

  (void) async;
  ck_assert_uint_lt (i, PAGES);
  if (s->cached[i])
    return false;
  s->cached[i] = 1;
  s->marker[i] = marker;
  return true;
}

static void
sim_batch (void *opaque, ra_pgoff start, ra_pgoff count, bool async)
{
  (void) opaque; (void) start; (void) count; (void) async;
}

static const struct ra_submit_ops sim_submit_ops = {
  .insert = sim_insert, .batch = sim_batch
};

static struct sim *
sim_new (unsigned mode)
{
  struct sim *s = calloc (1, sizeof *s);

  ck_assert_ptr_nonnull (s);
  ra_state_init (&s->ra);
  s->p = (struct ra_params) {
    .page_shift = 12, .ra_max = 2048, .io_max = 256,
    .export_size = (uint64_t) PAGES << 12,
    .mode = mode, .adapt_min = 32, .self_max = 0, .parallel = 12,
  };
  s->in = (struct ra_inputs) { .now_ns = 1, .lat_ns = -1 };
  s->use_inputs = true;
  return s;
}

static void
sim_trigger (struct sim *s, ra_pgoff index, bool marker, ra_pgoff req)
{
  const struct ra_control ctl = {
    .ra = &s->ra, .p = &s->p, .cache = &sim_ops, .opaque = s,
    .index = index, .marker = marker, .req = req,
    .in = s->use_inputs ? &s->in : NULL,
  };
  struct ra_window w;
  struct ra_submit_result res;

  ra_ondemand_at (&ctl, &w);
  if (w.size == 0)
    return;
  ra_submit (&w, s->p.io_max, &sim_submit_ops, s, &res);
  s->windows++;
  s->last_window = w.size;
  if (w.size > s->max_window)
    s->max_window = w.size;
  s->in.wasted = 0;             /* reported once */
}

/* A sequential reader of req-page requests from page `from` to `to`,
 * consuming rate pages per second of the clock (the reader never waits:
 * the sim's pages arrive at once).
 */
static void
sim_read (struct sim *s, ra_pgoff from, ra_pgoff to, ra_pgoff req,
          double rate)
{
  for (ra_pgoff i = from; i < to; i += req) {
    for (ra_pgoff j = i; j < i + req; j++) {
      s->in.now_ns = 1 + (uint64_t) ((double) j / rate * 1e9);
      if (!s->cached[j])
        sim_trigger (s, j, false, i + req - j);
      else if (s->marker[j]) {
        s->marker[j] = 0;
        sim_trigger (s, j, true, i + req - j);
      }
      ck_assert (s->cached[j]);
    }
    ra_update_prev_pos (&s->ra, (uint64_t) (i + req) << 12);
  }
}

/* ---- the backend model ------------------------------------------------ */

START_TEST (test_model_two_sizes)
{
  struct ra_model m;
  double lat, pg;
  int i;

  ra_model_init (&m);
  ck_assert (!ra_model_estimate (&m, &lat, &pg));
  ck_assert (lat == 0 && pg == 0);
  /* 20 ms + 10 us per page, reads of 256 and 32 pages. */
  for (i = 0; i < 40; i++) {
    ra_model_sample (&m, 256, 20000000 + 256 * 10000);
    ra_model_sample (&m, 32, 20000000 + 32 * 10000);
  }
  ck_assert (ra_model_estimate (&m, &lat, &pg));
  ck_assert_double_eq_tol (lat, 20e6, 1e3);
  ck_assert_double_eq_tol (pg, 10e3, 1);
}
END_TEST

START_TEST (test_model_one_size)
{
  struct ra_model m;
  double lat, pg;

  /* One size: the split cannot be told, all of it is latency. */
  ra_model_init (&m);
  ra_model_sample (&m, 256, 5000000);
  ra_model_sample (&m, 256, 7000000);
  ck_assert (ra_model_estimate (&m, &lat, &pg));
  ck_assert_double_gt (lat, 5e6);
  ck_assert_double_lt (lat, 7e6);
  ck_assert (pg == 0);
}
END_TEST

START_TEST (test_model_forgets)
{
  struct ra_model m;
  double lat, pg;
  int i;

  /* The backend moves from 1 ms to 20 ms: after 100 reads the old
   * timings weigh 0.95^100 = 0.6%.
   */
  ra_model_init (&m);
  for (i = 0; i < 100; i++)
    ra_model_sample (&m, 256, 1000000);
  for (i = 0; i < 100; i++)
    ra_model_sample (&m, 256, 20000000);
  ck_assert (ra_model_estimate (&m, &lat, &pg));
  ck_assert_double_gt (lat, 19.8e6);
}
END_TEST

/* ---- the cap from the reader's pace and the backend ------------------- */

/* A reader at 10000 pages/s (41 MB/s) of 16-page requests.  20 ms
 * latency: 2 * 10000 * 0.02 = 400 pages, the smallest power of two
 * >= 400 is 512 (fetch(512) is still one round of two reads).  5 ms:
 * 100 -> 128.  1 ms: 20 -> 32, the floor.
 */
static ra_pgoff
cap_for_latency (double lat_ns)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  ra_pgoff cap;

  s->in.lat_ns = lat_ns;
  s->in.page_ns = 0;
  sim_read (s, 0, 60000, 16, 10000);
  cap = s->ra.ad.cap;
  ck_assert_double_eq_tol (s->ra.ad.rate, 10000, 1);
  ck_assert_uint_eq (s->last_window, cap);
  ck_assert_uint_eq (s->ra.ad.late_events, 0);
  free (s);
  return cap;
}

START_TEST (test_cap_follows_latency)
{
  ck_assert_uint_eq (cap_for_latency (20e6), 512);
  ck_assert_uint_eq (cap_for_latency (5e6), 128);
  ck_assert_uint_eq (cap_for_latency (1e6), 32);
}
END_TEST

START_TEST (test_cap_counts_transfer_and_rounds)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);

  /* 1 ms + 40 us per page (100 MB/s per read), reader at 20000 pages/s.
   * W = 256: fetch = 1 round * (1 ms + 256 * 40 us) = 11.24 ms,
   * need 2 * 20000 * 0.01124 = 449.6 > 256.  W = 512: 2 reads, one
   * round, same 11.24 ms: 449.6 <= 512.  So 512.
   */
  s->in.lat_ns = 1e6;
  s->in.page_ns = 40e3;
  sim_read (s, 0, 80000, 16, 20000);
  ck_assert_uint_eq (s->ra.ad.cap, 512);
  /* With one read at a time the rounds count: W = 512 takes 2 rounds
   * (22.48 ms, need 899 > 512), W = 1024 4 rounds (44.96 ms, need 1798
   * > 1024), W = 2048 8 rounds (need 3597 > 2048): none fits, the cap
   * is the limit, ra_max.
   */
  s->p.parallel = 1;
  sim_read (s, 80000, 160000, 16, 20000);
  ck_assert_uint_eq (s->ra.ad.cap, 2048);
  free (s);
}
END_TEST

START_TEST (test_cap_unknown_is_limit)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);

  /* No backend timings: the cap is the limit, ra_max = 2048; with no
   * inputs at all, the same.  The ramp still starts small: 16-page
   * requests from page 0 start at init_size(16, 2048) = 64 pages.
   */
  sim_read (s, 0, 16, 16, 10000);
  ck_assert_uint_eq (s->ra.ad.cap, 2048);
  ck_assert_uint_le (s->max_window, 4 * 64);
  sim_read (s, 16, 40000, 16, 10000);
  ck_assert_uint_eq (s->max_window, 2048);
  free (s);

  s = sim_new (RA_MODE_ADAPTIVE);
  s->use_inputs = false;
  sim_read (s, 0, 40000, 16, 10000);
  ck_assert_uint_eq (s->ra.ad.cap, 2048);
  ck_assert_uint_eq (s->max_window, 2048);
  free (s);
}
END_TEST

/* A fast reader on a slow backend (it wants more than ra_max) with a
 * congestion bound (self_max) of 1024 pages.
 */
static struct sim *
sim_bounded (void)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);

  s->in.lat_ns = 20e6;
  s->p.self_max = 1024;
  return s;
}

START_TEST (test_limits)
{
  struct sim *s = sim_bounded ();

  /* self_max (the congestion bound) and the share bound it in turn. */
  sim_read (s, 0, 40000, 16, 200000);
  ck_assert_uint_eq (s->ra.ad.cap, 1024);
  ck_assert_uint_eq (s->max_window, 1024);
  s->in.share = 100;
  sim_read (s, 40000, 60000, 16, 200000);
  ck_assert_uint_eq (s->ra.ad.cap, 100);
  ck_assert_uint_eq (s->last_window, 100);
  /* Never below adapt_min, whatever the share. */
  s->in.share = 3;
  sim_read (s, 60000, 61000, 16, 200000);
  ck_assert_uint_eq (s->ra.ad.cap, 32);
  /* Unless ra_max is smaller. */
  s->p.ra_max = 16;
  sim_read (s, 61000, 62000, 16, 200000);
  ck_assert_uint_eq (s->ra.ad.cap, 16);
  free (s);

  /* The yield bound (other clients wait for random reads) bounds it
   * while it is given, never below adapt_min, and the cap grows back
   * once it is gone.
   */
  s = sim_bounded ();
  s->in.yield_max = 256;
  sim_read (s, 0, 40000, 16, 200000);
  ck_assert_uint_eq (s->ra.ad.cap, 256);
  ck_assert_uint_eq (s->max_window, 256);
  s->in.yield_max = 8;
  sim_read (s, 40000, 41000, 16, 200000);
  ck_assert_uint_eq (s->ra.ad.cap, 32);
  s->in.yield_max = 0;
  sim_read (s, 41000, 80000, 16, 200000);
  ck_assert_uint_eq (s->ra.ad.cap, 1024);
  ck_assert_uint_eq (s->last_window, 1024);
  free (s);
}
END_TEST

/* ---- feedback ---------------------------------------------------------- */

START_TEST (test_waste_shrinks_then_recovers)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);

  /* The 20 ms cap of test_cap_follows_latency, 512 pages. */
  s->in.lat_ns = 20e6;
  sim_read (s, 0, 60000, 16, 10000);
  ck_assert_uint_eq (s->ra.ad.cap, 512);
  /* Read-ahead pages evicted unused: the next decision halves. */
  s->in.wasted = 7;
  sim_read (s, 60000, 60512, 16, 10000);
  ck_assert_uint_eq (s->ra.ad.shrink, 1);
  ck_assert_uint_eq (s->ra.ad.waste_events, 1);
  ck_assert_uint_eq (s->ra.ad.cap, 256);
  /* Twice more: a quarter, an eighth. */
  /* Random reads far away (branch G: the state is untouched) still
   * take the report.
   */
  s->in.wasted = 1;
  sim_trigger (s, 200000, false, 16);
  s->in.wasted = 1;
  sim_trigger (s, 200100, false, 16);
  ck_assert_uint_eq (s->ra.ad.cap, 64);
  /* Eight windows without events undo one step each. */
  sim_read (s, 60512, 100000, 16, 10000);
  ck_assert_uint_eq (s->ra.ad.shrink, 0);
  ck_assert_uint_eq (s->ra.ad.cap, 512);
  free (s);
}
END_TEST

START_TEST (test_late_pulls_marker_and_boosts)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  ra_pgoff m, cap;

  s->in.lat_ns = 5e6;
  sim_read (s, 0, 60000, 16, 10000);
  cap = s->ra.ad.cap;
  ck_assert_uint_eq (cap, 128);
  /* The state's window is wholly async: its marker is its start.  A
   * client waiting for a page of the window before it (in flight) is
   * late: ra_late names the marker, ahead of the page.
   */
  ck_assert_uint_eq (s->ra.async_size, s->ra.size);
  m = ra_late (&s->ra, &s->p, s->ra.start - 5);
  ck_assert_uint_eq (m, s->ra.start);
  ck_assert_uint_eq (s->ra.ad.boost, 1);
  ck_assert_uint_eq (s->ra.ad.late_events, 1);
  /* Counted once per window. */
  ra_late (&s->ra, &s->p, s->ra.start - 4);
  ck_assert_uint_eq (s->ra.ad.boost, 1);
  ck_assert_uint_eq (s->ra.ad.late_events, 1);
  /* The caller takes the marker and triggers there: branch B, the next
   * window, twice the model size.
   */
  ck_assert (s->marker[m]);
  s->marker[m] = 0;
  s->in.now_ns = 1 + (uint64_t) ((double) m / 10000 * 1e9); /* same pace */
  sim_trigger (s, m, true, 1);
  ck_assert_uint_eq (s->ra.ad.cap, 2 * cap);
  ck_assert_uint_eq (s->ra.start, m + cap);
  /* The reader still waits before the marker taken early: the new
   * window counts late (boost 2), but no marker is pulled again, or the
   * stream would run a window further ahead at every wait.
   */
  ck_assert_uint_eq (ra_late (&s->ra, &s->p, m - 3), RA_NO_MARKER);
  ck_assert_uint_eq (s->ra.ad.late_events, 2);
  ck_assert_uint_eq (s->ra.ad.boost, 2);
  /* Same window again: not counted. */
  ck_assert_uint_eq (ra_late (&s->ra, &s->p, s->ra.start), RA_NO_MARKER);
  ck_assert_uint_eq (s->ra.ad.late_events, 2);
  /* A late event after waste undoes a waste step before growing. */
  s->ra.ad.shrink = 2;
  s->ra.start += 1;             /* as if a new window */
  ra_late (&s->ra, &s->p, s->ra.start - 1);
  ck_assert_uint_eq (s->ra.ad.shrink, 1);
  ck_assert_uint_eq (s->ra.ad.boost, 2);
  free (s);
}
END_TEST

/* ---- a marker another stream's window set ---------------------------- */

/* Pages [100, 612) cached, as another stream's read-ahead, the marker on
 * page 100; a stream with state size own reads 4 pages at page 100
 * (foreign: whether the marker is another stream's).  Returns the
 * window's size.
 */
static ra_pgoff
foreign_window (unsigned mode, bool foreign, ra_pgoff own)
{
  struct sim *s = sim_new (mode);
  ra_pgoff i, size;

  for (i = 100; i < 612; i++)
    s->cached[i] = 1;
  s->ra.start = 5000;           /* its own window is elsewhere */
  s->ra.size = own;
  s->in.foreign_marker = foreign;
  sim_trigger (s, 100, true, 4);
  ck_assert_uint_eq (s->windows, 1);
  ck_assert_uint_eq (s->ra.start, 612);         /* at the hole: branch C */
  size = s->last_window;
  free (s);
  return size;
}

START_TEST (test_foreign_marker_sized_from_own_state)
{
  /* Its own marker (or kernel mode): the hole's distance is the stream's
   * history, next_size (512 + 4) = 1032 pages.
   */
  ck_assert_uint_eq (foreign_window (RA_MODE_ADAPTIVE, false, 0), 1032);
  ck_assert_uint_eq (foreign_window (RA_MODE_KERNEL, true, 0), 1032);
  /* Another stream's marker: sized from this stream's own state as
   * branch B would, next_size (64) = 256; with no window yet, the
   * initial size of a 4-page request, 16.
   */
  ck_assert_uint_eq (foreign_window (RA_MODE_ADAPTIVE, true, 64), 256);
  ck_assert_uint_eq (foreign_window (RA_MODE_ADAPTIVE, true, 0), 16);
}
END_TEST

/* ---- kernel mode is doc/readahead-rules.md exactly -------------------- */

START_TEST (test_kernel_mode_ignores_inputs)
{
  struct sim *k = sim_new (RA_MODE_KERNEL), *ki = sim_new (RA_MODE_KERNEL);
  ra_pgoff i;

  /* The same reads with and without inputs that would shrink an
   * adaptive stream: identical caches, markers and states; ra_late does
   * nothing.
   */
  ki->in.lat_ns = 1e3;
  ki->in.share = 40;
  ki->in.wasted = 100;
  k->use_inputs = false;
  sim_read (k, 0, 30000, 16, 10000);
  for (i = 0; i < 30000; i += 16) {
    ki->in.wasted = 100;
    sim_read (ki, i, i + 16, 16, 10000);
  }
  ck_assert (memcmp (k->cached, ki->cached, sizeof k->cached) == 0);
  ck_assert (memcmp (k->marker, ki->marker, sizeof k->marker) == 0);
  ck_assert_uint_eq (k->ra.start, ki->ra.start);
  ck_assert_uint_eq (k->ra.size, ki->ra.size);
  ck_assert_uint_eq (k->ra.async_size, ki->ra.async_size);
  ck_assert_uint_eq (ki->max_window, 2048);
  ck_assert_uint_eq (ki->ra.ad.cap, 0);
  ck_assert_uint_eq (ra_late (&ki->ra, &ki->p, ki->ra.start - 1),
                     RA_NO_MARKER);
  ck_assert_uint_eq (ki->ra.ad.late_events, 0);
  free (k);
  free (ki);
}
END_TEST

static Suite *
adaptive_suite (void)
{
  Suite *s = suite_create ("adaptive");
  TCase *tc;

  tc = tcase_create ("model");
  tcase_add_test (tc, test_model_two_sizes);
  tcase_add_test (tc, test_model_one_size);
  tcase_add_test (tc, test_model_forgets);
  suite_add_tcase (s, tc);

  tc = tcase_create ("cap");
  tcase_add_test (tc, test_cap_follows_latency);
  tcase_add_test (tc, test_cap_counts_transfer_and_rounds);
  tcase_add_test (tc, test_cap_unknown_is_limit);
  tcase_add_test (tc, test_limits);
  suite_add_tcase (s, tc);

  tc = tcase_create ("feedback");
  tcase_add_test (tc, test_waste_shrinks_then_recovers);
  tcase_add_test (tc, test_late_pulls_marker_and_boosts);
  tcase_add_test (tc, test_foreign_marker_sized_from_own_state);
  suite_add_tcase (s, tc);

  tc = tcase_create ("kernel");
  tcase_add_test (tc, test_kernel_mode_ignores_inputs);
  suite_add_tcase (s, tc);
  return s;
}

int
main (void)
{
  SRunner *sr = srunner_create (adaptive_suite ());
  int failed;
  srunner_run_all (sr, CK_NORMAL);
  failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
