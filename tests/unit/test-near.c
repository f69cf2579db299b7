/* Unit tests of the near rule (branch N, src/near.c, adaptive
 * mode): clustered access grows its window, random access never reads a
 * page it was not asked for, a mix of both converges, and kernel mode
 * never takes it.
 *
 * The simulated cache reports near hits as the filter's page cache does
 * (rc_pc_take_near_hits): the first client read of a page that an N
 * window's async part brought in counts one if it comes within
 * RC_PC_NEAR_HORIZON misses (G or N decisions) of the window, handed to
 * the engine at its next decision (struct ra_inputs).  It reports no cached history
 * (the cache op history returns 0), so that context readahead (F) never
 * takes the misses these tests make: they look at N alone.  Pages of
 * 4 KiB, ra_max 2048 pages (8 MiB), io_max 256, adapt_min 32, an export
 * of 2^18 pages (1 GiB); no clock, so each stream's cap is its limit.
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>
#include <check.h>

#include "racache/pagecache.h"
#include "racache/readahead.h"

#define PAGES (1u << 18)

struct sim {
  unsigned char cached[PAGES];
  unsigned char marker[PAGES];
  unsigned near[PAGES];         /* async page of an N window, not used:
                                 * the step it was read at, + 1 */
  unsigned step;                /* G and N decisions so far */
  unsigned char asked[PAGES];   /* a client read it */
  struct ra_state ra;
  struct ra_params p;
  struct ra_inputs in;
  enum ra_branch cur;           /* branch of the window being submitted */
  uint64_t inserted;            /* pages read from the backend */
  uint64_t inserted_unasked;    /* ... that no client had asked for then */
  unsigned windows[RA_NR_BRANCHES];
  ra_pgoff largest;             /* largest window of N, or of B
                                 * going on from one */
  ra_pgoff last_near;           /* latest N window */
  ra_pgoff largest_near;        /* largest N window */
  unsigned misses;              /* client reads that missed */
};

static bool
sim_cached (void *opaque, ra_pgoff i)
{
  struct sim *s = opaque;
  return i < PAGES && s->cached[i];
}

static ra_pgoff
sim_no_history (void *opaque, ra_pgoff index, ra_pgoff max)
{
  (void) opaque; (void) index; (void) max;
  return 0;
}

static const struct ra_cache_ops sim_ops = {
  .cached = sim_cached, .history = sim_no_history,
};

static bool
sim_insert (void *opaque, ra_pgoff i, bool marker, bool async)
{
  struct sim *s = opaque;

  ck_assert_uint_lt (i, PAGES);
  if (s->cached[i])
    return false;
  s->cached[i] = 1;
  s->marker[i] = marker;
  s->near[i] = async && s->cur == RA_N_NEAR ? s->step + 1 : 0;
  s->inserted++;
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
  s->in = (struct ra_inputs) { .lat_ns = -1 };
  return s;
}

static void
sim_trigger (struct sim *s, ra_pgoff index, bool marker, ra_pgoff req,
             ra_pgoff first, ra_pgoff last)
{
  const struct ra_control ctl = {
    .ra = &s->ra, .p = &s->p, .cache = &sim_ops, .opaque = s,
    .index = index, .marker = marker, .req = req, .in = &s->in,
  };
  struct ra_window w;
  struct ra_submit_result res;
  ra_pgoff i;

  ra_ondemand_at (&ctl, &w);
  s->in.near_hits = 0;          /* handed over once */
  if (w.branch == RA_G_RANDOM || w.branch == RA_N_NEAR)
    s->step++;
  if (w.size == 0)
    return;
  s->windows[w.branch]++;
  if (w.branch == RA_N_NEAR) {
    s->last_near = w.behind + w.size;
    if (s->last_near > s->largest_near)
      s->largest_near = s->last_near;
  }
  if ((w.branch == RA_N_NEAR || w.branch == RA_B_SEQUENTIAL) &&
      w.size > s->largest)
    s->largest = w.size;
  s->cur = w.branch;
  ra_submit (&w, s->p.io_max, &sim_submit_ops, s, &res);
  for (i = w.start; i < w.start + w.size; i++)
    if (!s->asked[i] && !(i >= first && i < last))
      s->inserted_unasked++;
  if (w.behind > 0) {
    /* The near rule's pages before the window, as src/trigger.c reads
     * them: async, no marker.
     */
    const struct ra_window b = {
      .branch = w.branch, .start = w.start - w.behind, .size = w.behind,
      .async_size = w.behind, .marker = RA_NO_MARKER,
    };

    ra_submit (&b, s->p.io_max, &sim_submit_ops, s, &res);
    for (i = b.start; i < w.start; i++)
      if (!s->asked[i])
        s->inserted_unasked++;
  }
}

/* A client read of pages [first, first + n). */
static void
sim_read (struct sim *s, ra_pgoff first, ra_pgoff n)
{
  ra_pgoff j, last = first + n;
  bool missed = false;

  for (j = first; j < last; j++) {
    if (!s->cached[j]) {
      missed = true;
      sim_trigger (s, j, false, last - j, first, last);
    }
    else if (s->marker[j]) {
      s->marker[j] = 0;
      sim_trigger (s, j, true, last - j, first, last);
    }
    ck_assert (s->cached[j]);
    if (s->near[j]) {
      if (s->step - (s->near[j] - 1) <= RC_PC_NEAR_HORIZON)
        s->in.near_hits++;
      s->near[j] = 0;
    }
    s->asked[j] = 1;
  }
  if (missed)
    s->misses++;
  ra_update_prev_pos (&s->ra, (uint64_t) last << 12);
}

/* A deterministic pseudo-random page (an LCG). */
static ra_pgoff
rnd (uint64_t *x)
{
  *x = *x * 6364136223846793005u + 1442695040888963407u;
  return (*x >> 33) % PAGES;
}

/* Clustered: reads of one page in increasing order, from `from`, one
 * in 3 pages on average (gaps of 0 to 4 pages).  Where a miss falls just
 * after a window, branch B goes on from it as a sequential stream.
 */
static void
clustered (struct sim *s, ra_pgoff from, unsigned reads)
{
  unsigned k;

  for (k = 0; k < reads; k++)
    sim_read (s, from + 3 * (ra_pgoff) k + (k * 7) % 3, 1);
}

START_TEST (test_clustered_grows)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  unsigned early;

  /* The first two misses are exact (no window until two misses in a
   * row fell in a region of a recent one), then the windows grow while
   * their pages are used (up to 1 MiB); a reader that reaches a
   * window's marker goes on with B, up to ra_max.
   */
  clustered (s, 100000, 2);
  ck_assert_uint_eq (s->windows[RA_N_NEAR], 0);
  ck_assert_uint_eq (s->inserted, 2);
  clustered (s, 100010, 3000);
  ck_assert_uint_ge (s->windows[RA_N_NEAR], 3);
  ck_assert_uint_ge (s->largest_near, 128);
  ck_assert_uint_gt (s->largest, 256);
  /* Once grown, a window serves hundreds of reads: few misses in all. */
  early = s->misses;
  clustered (s, 100010 + 9010, 3000);
  ck_assert_uint_le (s->misses - early, 12);
  free (s);
}
END_TEST

START_TEST (test_random_reads_only_what_is_asked)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  uint64_t x = 17;
  unsigned k;

  /* 20000 random reads of 1 to 4 pages over 1 GiB: a trial window
   * needs two misses in a row in the 1 MiB regions of the 8 misses
   * before (1 in 1024 misses), and one not used soon makes the next
   * wait for twice as many: a trial or two, no more.
   */
  for (k = 0; k < 20000; k++) {
    ra_pgoff i = rnd (&x), n = 1 + k % 4;

    if (i + n > PAGES)
      i = PAGES - n;
    sim_read (s, i, n);
  }
  ck_assert_uint_le (s->windows[RA_N_NEAR], 2);
  ck_assert_uint_le (s->inserted_unasked, 2 * 64);
  ck_assert_uint_gt (s->windows[RA_G_RANDOM], 19000);
  free (s);
}
END_TEST

START_TEST (test_mix_converges)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  uint64_t x = 5, unasked, inserted;
  unsigned k, round, near;

  for (round = 0; round < 3; round++) {
    /* Clustered: the near windows grow, and B goes on from them (the
     * largest window of N or B: at least 1 MiB).
     */
    s->largest = 0;
    clustered (s, 20000 + round * 60000, 3000);
    ck_assert_uint_ge (s->largest, 256);
    /* Then random: windows go on while what was used soon outweighs a
     * 32nd of what was read, then halve at each miss, down to nothing:
     * the pages read beyond the requests are a few windows' worth, and
     * after that every read is exact.
     */
    unasked = s->inserted_unasked;
    for (k = 0; k < 2000; k++)
      sim_read (s, rnd (&x), 1);
    ck_assert_uint_le (s->inserted_unasked - unasked, 2 * s->p.ra_max + 64);
    unasked = s->inserted_unasked;
    inserted = s->inserted;
    near = s->windows[RA_N_NEAR];
    for (k = 0; k < 2000; k++)
      sim_read (s, rnd (&x), 1);
    /* (A random read that lands on a marker the clustered reads left
     * in the cache may start a window of branch C: not the near rule.)
     */
    ck_assert_uint_eq (s->windows[RA_N_NEAR], near);
    ck_assert_uint_le (s->inserted_unasked - unasked, s->p.ra_max);
    ck_assert_uint_le (s->inserted - inserted, 2000 + s->p.ra_max);
  }
  free (s);
}
END_TEST

START_TEST (test_sparse_converges)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  uint64_t unasked = 0;
  unsigned k;

  /* Grown windows, then reads one in 50 pages: the windows get too
   * few hits to keep their size; then a trial window now and then, ever
   * more rarely while none is used enough: in the last 1000 reads,
   * fewer than 10% more pages read than asked for.
   */
  clustered (s, 10000, 3000);
  ck_assert_uint_gt (s->largest, 256);
  for (k = 0; k < 3000; k++) {
    if (k == 2000)
      unasked = s->inserted_unasked;
    sim_read (s, 30000 + (ra_pgoff) k * 50, 1);
  }
  ck_assert_uint_le (s->inserted_unasked - unasked, 1000 / 10);
  free (s);
}
END_TEST

static bool
nothing_cached (void *opaque, ra_pgoff i)
{
  (void) opaque; (void) i;
  return false;
}

static const struct ra_cache_ops none_ops = { .cached = nothing_cached };

/* One decision at a sync miss of one page at index, given near hits;
 * nothing is cached.  Returns the window's size (1: exact) and checks
 * its branch.
 */
static ra_pgoff
decide_in (struct ra_state *ra, struct ra_near *near,
           const struct ra_params *p, ra_pgoff index, struct ra_inputs in,
           enum ra_branch expect)
{
  const struct ra_control ctl = {
    .ra = ra, .p = p, .cache = &none_ops, .opaque = NULL,
    .index = index, .marker = false, .req = 1, .in = &in, .near = near,
  };
  struct ra_window w;

  ra_ondemand_at (&ctl, &w);
  if (expect != RA_NR_BRANCHES)
    ck_assert_int_eq (w.branch, expect);
  ck_assert_uint_eq (w.start, index);
  if (w.branch == RA_N_NEAR) {
    /* The request, and a block around it within its region (256
     * pages here), aligned on its size when that is a power of two.
     */
    ra_pgoff from = w.start - w.behind, n = w.behind + w.size;

    ck_assert_uint_eq (w.async_size, w.size - 1);
    if (w.async_size > 0)
      ck_assert_uint_eq (w.marker, index + 1);
    ck_assert_uint_eq (from / 256, index / 256);
    ck_assert_uint_le (from % 256 + n, 256);
    if ((n & (n - 1)) == 0)
      ck_assert_uint_eq (from % n, 0);
  }
  else
    ck_assert_uint_eq (w.behind, 0);
  ra_update_prev_pos (ra, (index + 1) << 12);
  return w.behind + w.size;
}

static ra_pgoff
decide_shared (struct ra_state *ra, struct ra_near *near,
               const struct ra_params *p, ra_pgoff index, ra_pgoff hits,
               enum ra_branch expect)
{
  const struct ra_inputs in = { .lat_ns = -1, .near_hits = hits };

  return decide_in (ra, near, p, index, in, expect);
}

static ra_pgoff
decide (struct ra_state *ra, const struct ra_params *p, ra_pgoff index,
        ra_pgoff hits, enum ra_branch expect)
{
  return decide_shared (ra, NULL, p, index, hits, expect);
}

START_TEST (test_hits_size_the_window)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  struct ra_state *ra = &s->ra;
  ra_pgoff i, unasked = 0, size;

  /* Regions of 1 MiB (256 pages).  A miss in a new region, then one in
   * a recent region: exact; the second in a row: a trial of 256K, the
   * aligned block of 64 pages around it (decide returns the pages
   * read).
   */
  ck_assert_uint_eq (decide (ra, &s->p, 1000, 0, RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide (ra, &s->p, 1010, 0, RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide (ra, &s->p, 1020, 0, RA_N_NEAR), 64);
  /* All of it used soon: an eighth or more, so it doubles, wherever the
   * next miss falls: the hits are what count.
   */
  ck_assert_uint_eq (decide (ra, &s->p, 1100, 64, RA_N_NEAR), 128);
  ck_assert_uint_eq (decide (ra, &s->p, 1300, 128, RA_N_NEAR), 256);
  /* At most 1 MiB beyond the request. */
  ck_assert_uint_eq (decide (ra, &s->p, 1600, 0, RA_N_NEAR), 256);
  ck_assert_uint_eq (decide (ra, &s->p, 100000, 0, RA_N_NEAR), 256);
  /* No more hits: the windows go on while what was used outweighs a
   * 32nd of what was read (the windows of the last 8 misses count as
   * read already), then halve once 8 misses have passed without their
   * use, down to nothing: a few windows' worth in all.
   */
  for (i = 0; i < 40; i++) {
    size = decide (ra, &s->p, 200000 + i * 1000, 0, RA_NR_BRANCHES);
    unasked += size - 1;
  }
  ck_assert_uint_eq (ra->near.ahead, 0);
  ck_assert_uint_le (unasked, 8 * 256);
  ck_assert_uint_eq (ra->near.fails, 1);
  /* A trial now waits for 2 << fails = 4 misses in a row in recent
   * regions.
   */
  ck_assert_uint_eq (decide (ra, &s->p, 250000, 0, RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide (ra, &s->p, 250010, 0, RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide (ra, &s->p, 250020, 0, RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide (ra, &s->p, 250030, 0, RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide (ra, &s->p, 250040, 0, RA_N_NEAR), 64);
  /* Kernel mode: never. */
  s->p.mode = RA_MODE_KERNEL;
  ra_state_init (ra);
  ck_assert_uint_eq (decide (ra, &s->p, 1000, 0, RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide (ra, &s->p, 1010, 0, RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide (ra, &s->p, 1020, 64, RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide (ra, &s->p, 1030, 64, RA_G_RANDOM), 1);
  free (s);
}
END_TEST

/* The filter's streams share one near state (ra_control's near): misses
 * that a file system spreads over three connections are one sequence.
 */
START_TEST (test_streams_share_the_rule)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  struct ra_state ra[3];
  struct ra_near near = { 0 };
  unsigned k;

  for (k = 0; k < 3; k++)
    ra_state_init (&ra[k]);
  ck_assert_uint_eq (decide_shared (&ra[0], &near, &s->p, 1000, 0,
                                    RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide_shared (&ra[1], &near, &s->p, 1010, 0,
                                    RA_G_RANDOM), 1);
  ck_assert_uint_eq (decide_shared (&ra[2], &near, &s->p, 1020, 0,
                                    RA_N_NEAR), 64);
  ck_assert_uint_eq (decide_shared (&ra[0], &near, &s->p, 1200, 64,
                                    RA_N_NEAR), 128);
  /* The streams' own states were not used for it. */
  for (k = 0; k < 3; k++)
    ck_assert_uint_eq (ra[k].near.ahead, 0);
  free (s);
}
END_TEST

/* A region read out of order (an inode table in hash order): at its
 * fifth miss while it stays among the recent regions, one of them
 * before the one before, its whole 1 MiB block, once; a reader striding
 * forward through a region never gets that.
 */
START_TEST (test_dense_region)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  struct ra_state *ra = &s->ra;
  static const ra_pgoff back_and_forth[] = { 1100, 1050, 1210, 1030 };
  unsigned k;

  for (k = 0; k < 4; k++)
    ck_assert_uint_le (decide (ra, &s->p, back_and_forth[k], 0,
                               RA_NR_BRANCHES), 64);
  ck_assert_uint_eq (decide (ra, &s->p, 1150, 0, RA_N_NEAR), 256);
  /* Once: the next miss in it is read as the rule says otherwise. */
  ck_assert_uint_le (decide (ra, &s->p, 1040, 0, RA_NR_BRANCHES), 64);

  /* Forward only, five misses and more in one region: no block. */
  ra_state_init (ra);
  for (k = 0; k < 8; k++)
    ck_assert_uint_le (decide (ra, &s->p, 4096 + 30 * k, 0, RA_NR_BRANCHES),
                       64);
  free (s);
}
END_TEST

/* An area read out of order across region boundaries (a find over a
 * tree whose directories' blocks lie among their files): the fifth miss
 * in a region and its neighbours reads the region's block, and a
 * neighbour's next miss its own; that block is bounded by ra_max and
 * the congestion bound, not by the stream's share of the cache, and a
 * block cut by them stays within its region.
 */
START_TEST (test_dense_area)
{
  struct sim *s = sim_new (RA_MODE_ADAPTIVE);
  struct ra_state *ra = &s->ra;
  /* Regions 20 and 21 (pages 5120-5631), two or three misses each. */
  static const ra_pgoff spread[] = { 5200, 5500, 5150, 5400 };
  struct ra_inputs in = { .lat_ns = -1, .share = 48 };
  unsigned k;

  for (k = 0; k < 4; k++)
    ck_assert_uint_le (decide_in (ra, NULL, &s->p, spread[k], in,
                                  RA_NR_BRANCHES), 64);
  /* The fifth in regions 20-22: region 21's block, whole, though the
   * share would cap a window at 48 pages.
   */
  ck_assert_uint_eq (decide_in (ra, NULL, &s->p, 5450, in, RA_N_NEAR), 256);
  /* Region 20's next miss: its block. */
  ck_assert_uint_eq (decide_in (ra, NULL, &s->p, 5170, in, RA_N_NEAR), 256);

  /* ra_max of 200 pages cuts the block: the region's last 200 pages
   * for a miss at its end, its first 200 for one at its start; never
   * across the region's end (decide_in checks).
   */
  ra_state_init (ra);
  s->p.ra_max = 200;
  for (k = 0; k < 4; k++)
    decide_in (ra, NULL, &s->p, 10240 + spread[k] - 5120, in,
               RA_NR_BRANCHES);
  ck_assert_uint_eq (decide_in (ra, NULL, &s->p, 10240 + 500, in,
                                RA_N_NEAR), 200);
  ck_assert_uint_eq (decide_in (ra, NULL, &s->p, 10240 + 20, in,
                                RA_N_NEAR), 200);
  free (s);
}
END_TEST

START_TEST (test_kernel_mode_never_near)
{
  struct sim *s = sim_new (RA_MODE_KERNEL);

  /* G, and E where a read follows the one before (and B after it),
   * never N, though its near hits were handed over.
   */
  clustered (s, 100000, 3000);
  ck_assert_uint_eq (s->windows[RA_N_NEAR], 0);
  ck_assert_uint_gt (s->windows[RA_G_RANDOM], 100);
  ck_assert_uint_gt (s->windows[RA_E_SEQ_MISS], 0);
  free (s);
}
END_TEST

static Suite *
near_suite (void)
{
  Suite *s = suite_create ("near");
  TCase *tc = tcase_create ("near");

  tcase_add_test (tc, test_clustered_grows);
  tcase_add_test (tc, test_random_reads_only_what_is_asked);
  tcase_add_test (tc, test_mix_converges);
  tcase_add_test (tc, test_sparse_converges);
  tcase_add_test (tc, test_hits_size_the_window);
  tcase_add_test (tc, test_streams_share_the_rule);
  tcase_add_test (tc, test_dense_region);
  tcase_add_test (tc, test_dense_area);
  tcase_add_test (tc, test_kernel_mode_never_near);
  suite_add_tcase (s, tc);
  return s;
}

int
main (void)
{
  SRunner *sr = srunner_create (near_suite ());
  int failed;

  srunner_run_all (sr, CK_NORMAL);
  failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
