/* Unit tests of the readahead engine (src/readahead.c) against
 * readahead-spec.md.  Each test names the branch it covers.
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>
#include <check.h>

#include "racache/readahead.h"

/* A simulated page cache: a bitmap of cached pages and markers. */
#define SIM_PAGES 4096
struct sim {
  bool cached[SIM_PAGES];
  bool marker[SIM_PAGES];
  struct ra_state ra;
  struct ra_params p;
};

static bool
sim_cached (void *opaque, ra_pgoff i)
{
  struct sim *s = opaque;
  return i < SIM_PAGES && s->cached[i];
}

static const struct ra_cache_ops sim_ops = { .cached = sim_cached };

static bool
sim_insert (void *opaque, ra_pgoff i, bool marker, bool async)
{
  struct sim *s = opaque;
  if (s->cached[i]) return false;
  s->cached[i] = true;
  s->marker[i] = marker;
  return true;
}

static void
sim_batch (void *opaque, ra_pgoff start, ra_pgoff count, bool async)
{
}

static const struct ra_submit_ops sim_submit_ops = {
  .insert = sim_insert, .batch = sim_batch
};

static void
sim_init (struct sim *s, unsigned shift, ra_pgoff ra_max, ra_pgoff io_max,
          uint64_t export_size)
{
  memset (s, 0, sizeof *s);
  ra_state_init (&s->ra);
  s->p.page_shift = shift;
  s->p.ra_max = ra_max;
  s->p.io_max = io_max;
  s->p.export_size = export_size;
}

/* The read path of the spec, for one client read; records the windows. */
static int
sim_read (struct sim *s, uint64_t offset, uint64_t count,
          struct ra_window *out, int max_out)
{
  ra_pgoff index = offset >> s->p.page_shift;
  ra_pgoff last = (offset + count + (1u << s->p.page_shift) - 1) >> s->p.page_shift;
  int n = 0;

  for (ra_pgoff i = index; i < last; i++) {
    struct ra_window w;
    struct ra_submit_result r;
    if (!s->cached[i]) {
      ra_ondemand (&s->ra, &s->p, &sim_ops, s, i, false, last - i, &w);
      ra_submit (&w, s->p.io_max, &sim_submit_ops, s, &r);
      if (n < max_out) out[n] = w;
      n++;
      ck_assert (s->cached[i]);
    }
    if (s->marker[i]) {
      s->marker[i] = false;
      ra_ondemand (&s->ra, &s->p, &sim_ops, s, i, true, last - i, &w);
      ra_submit (&w, s->p.io_max, &sim_submit_ops, s, &r);
      if (n < max_out) out[n] = w;
      n++;
    }
  }
  ra_update_prev_pos (&s->ra, offset + count);
  return n;
}

/* Spec worked example: branches A then B. */
START_TEST (test_worked_example)
{
  static struct sim s;
  struct ra_window w[4];
  static const struct { int read; enum ra_branch b; ra_pgoff start, size, async, marker; } want[] = {
    { 0, RA_A_INITIAL, 0, 8, 4, 4 },
    { 1, RA_B_SEQUENTIAL, 8, 16, 16, 8 },
    { 2, RA_B_SEQUENTIAL, 24, 32, 32, 24 },
    { 6, RA_B_SEQUENTIAL, 56, 32, 32, 56 },
    { 14, RA_B_SEQUENTIAL, 88, 32, 32, 88 },
  };
  size_t k = 0;

  sim_init (&s, 12, 32, 32, UINT64_C(1) << 30);
  for (int r = 0; r < 22; r++) {
    int n = sim_read (&s, (uint64_t) r * 16384, 16384, w, 4);
    if (k < sizeof want / sizeof want[0] && r == want[k].read) {
      ck_assert_int_eq (n, 1);
      ck_assert_int_eq (w[0].branch, want[k].b);
      ck_assert_uint_eq (w[0].start, want[k].start);
      ck_assert_uint_eq (w[0].size, want[k].size);
      ck_assert_uint_eq (w[0].async_size, want[k].async);
      ck_assert_uint_eq (w[0].marker, want[k].marker);
      k++;
    }
    else
      ck_assert_int_eq (n, 0);
  }
  ck_assert_uint_eq (k, 5);
}
END_TEST

static Suite *
readahead_suite (void)
{
  Suite *s = suite_create ("readahead");
  TCase *tc = tcase_create ("spec");
  tcase_add_test (tc, test_worked_example);
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
