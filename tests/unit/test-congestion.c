/* Unit tests of the congestion estimator and decision (src/congestion.c)
 * over a scripted fake backend.
 *
 * The fake backend is a discrete-event simulation, no threads and no
 * clock: NSLOTS servers take reads in the order they were issued (a read
 * waits for the first server free), each read costs its service time
 * (a fixed latency plus bytes / bandwidth), and optionally all reads
 * share one link after their latency (a read's bytes wait for the bytes
 * of the reads before it, as behind nbdkit's rate filter or a saturated
 * network).  The driver is what
 * src/jobq.c does: a client keeps DEPTH sync reads in flight, and
 * speculation starts async reads whenever rc_cong_decide (RC_CONG_ISSUE)
 * says GO.  Every completed read is a sample.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <check.h>

#include "racache/congestion.h"
#include "racache/readahead.h"
#include "racache/trigger.h"

#define MS 1000000ull
#define MAXR 512

struct fread_ {
  uint64_t issue, end, bytes;
  unsigned inflight;
  bool sync;
};

struct fake {
  unsigned nslots;
  uint64_t lat_ns;              /* fixed part of a read */
  double ns_per_byte;           /* transfer */
  bool shared;                  /* one link, first come first served */
  uint64_t slot_free[64];
  uint64_t link_free;
  struct fread_ r[MAXR];
  unsigned n;                   /* in flight */
  uint64_t now;
  /* What the driver saw. */
  unsigned sync_inflight, async_inflight, max_inflight;
  double sync_lat_sum;
  unsigned sync_done, async_done;
  double slots_sum;
  unsigned slots_n;
  unsigned holds;
};

static void
fake_init (struct fake *f, unsigned nslots, uint64_t lat_ns,
           double ns_per_byte, bool shared)
{
  memset (f, 0, sizeof *f);
  f->nslots = nslots;
  f->lat_ns = lat_ns;
  f->ns_per_byte = ns_per_byte;
  f->shared = shared;
}

static void
fake_issue (struct fake *f, uint64_t bytes, bool sync)
{
  unsigned i, best = 0;
  uint64_t start, svc;
  struct fread_ *r;

  ck_assert_uint_lt (f->n, MAXR);
  for (i = 1; i < f->nslots; i++)
    if (f->slot_free[i] < f->slot_free[best])
      best = i;
  start = f->slot_free[best] > f->now ? f->slot_free[best] : f->now;
  svc = f->lat_ns + (uint64_t) (bytes * f->ns_per_byte);
  if (f->shared) {              /* the bytes wait for the link */
    uint64_t at = start + f->lat_ns;

    if (f->link_free > at)
      at = f->link_free;
    f->link_free = at + (uint64_t) (bytes * f->ns_per_byte);
    svc = f->link_free - start;
  }
  f->slot_free[best] = start + svc;
  r = &f->r[f->n++];
  r->issue = f->now;
  r->end = start + svc;
  r->bytes = bytes;
  r->sync = sync;
  r->inflight = f->n;
  if (sync)
    f->sync_inflight++;
  else
    f->async_inflight++;
  if (f->n > f->max_inflight)
    f->max_inflight = f->n;
}

/* Run for `reads` completions: the client keeps depth sync reads of
 * sync_bytes in flight; speculation issues async reads of async_bytes
 * while the decision says GO (async_bytes 0: none).
 */
static void
fake_run (struct fake *f, struct rc_cong *e, unsigned reads,
          unsigned depth, uint64_t sync_bytes, uint64_t async_bytes)
{
  unsigned done;

  for (done = 0; done < reads; done++) {
    struct rc_cong_sample s;
    unsigned i, first = 0;

    while (f->sync_inflight < depth)
      fake_issue (f, sync_bytes, true);
    while (async_bytes > 0) {
      struct rc_cong_load l = {
        .executing = f->n, .queued = 1,
      };
      enum rc_cong_answer a = rc_cong_decide (e, RC_CONG_ISSUE, &l);

      if (a != RC_CONG_GO) {
        f->holds++;
        break;
      }
      fake_issue (f, async_bytes, false);
    }
    ck_assert_uint_gt (f->n, 0);
    for (i = 1; i < f->n; i++)
      if (f->r[i].end < f->r[first].end)
        first = i;
    f->now = f->r[first].end;
    s.start_ns = f->r[first].issue;
    s.end_ns = f->r[first].end;
    s.bytes = f->r[first].bytes;
    s.inflight = f->r[first].inflight;
    s.sync = f->r[first].sync;
    rc_cong_sample (e, &s);
    if (s.sync) {
      f->sync_inflight--;
      f->sync_done++;
      f->sync_lat_sum += s.end_ns - s.start_ns;
    }
    else {
      f->async_inflight--;
      f->async_done++;
    }
    f->r[first] = f->r[--f->n];
    if (done >= reads / 2) {
      struct rc_cong_estimate est;

      rc_cong_get (e, &est);
      f->slots_sum += est.slots;
      f->slots_n++;
    }
  }
}

static double
mean_slots (const struct fake *f)
{
  return f->slots_n ? f->slots_sum / f->slots_n : 0;
}

/* A backend of N slots with no other cost is found to have about N,
 * from the latency of a client's sync reads (depth 1) next to
 * speculation.
 */
START_TEST (test_slots_found)
{
  static const unsigned ns[] = { 1, 2, 4, 8, 16 };
  unsigned i;

  for (i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    struct fake f;
    struct rc_cong e;
    double m;

    rc_cong_init (&e, 32, true, false);
    fake_init (&f, ns[i], 3 * MS, 0, false);
    fake_run (&f, &e, 4000, 1, 4096, 1 << 20);
    m = mean_slots (&f);
    fprintf (stderr, "slots %u: estimate %.2f, most in flight %u\n",
             ns[i], m, f.max_inflight);
    /* Within 1.5 or a quarter: a level counts as queued when the sync
     * reads there are 1.25 times slower than alone, and one more async
     * read than the backend has slots delays only some of them.
     */
    ck_assert_msg (m >= ns[i] - (ns[i] / 4.0 > 1.5 ? ns[i] / 4.0 : 1.5) &&
                   m <= ns[i] + (ns[i] / 4.0 > 1.5 ? ns[i] / 4.0 : 1.5),
                   "backend of %u slots estimated %.2f", ns[i], m);
  }
}
END_TEST

/* A backend that slows down under load (every read in flight shares its
 * link) is found congested: the estimate falls to about one slot, and a
 * client's sync reads keep close to their latency alone.
 */
START_TEST (test_slows_under_load)
{
  struct fake f, alone;
  struct rc_cong e, e0;
  struct rc_cong_estimate est;
  double with, without;

  /* 1 ms plus 1 MiB at 1 GB/s, on 16 servers sharing one link: the
   * servers are not the limit, the link is.
   */
  rc_cong_init (&e0, 12, true, false);
  fake_init (&alone, 16, 1 * MS, 1.0, true);
  fake_run (&alone, &e0, 2000, 1, 4096, 0);
  without = alone.sync_lat_sum / alone.sync_done;

  rc_cong_init (&e, 12, true, false);
  fake_init (&f, 16, 1 * MS, 1.0, true);
  fake_run (&f, &e, 4000, 1, 4096, 1 << 20);
  with = f.sync_lat_sum / f.sync_done;
  rc_cong_get (&e, &est);
  fprintf (stderr, "shared link: estimate %.2f slots, queueing %.0f us, "
           "sync latency %.2f ms alone, %.2f ms beside speculation, "
           "%u holds, %u async reads\n", mean_slots (&f),
           est.queue_delay_ns / 1e3, without / 1e6, with / 1e6, f.holds,
           f.async_done);
  ck_assert_msg (mean_slots (&f) <= 3.0,
                 "a backend that slows under load estimated %.2f slots",
                 mean_slots (&f));
  ck_assert_uint_gt (f.holds, 0);
  ck_assert_msg (e.congested_seen, "no level queued");
  ck_assert_msg (with < without * 1.25, "sync latency %.2f ms beside "
                 "speculation, %.2f ms alone", with / 1e6, without / 1e6);
  /* The fixed rule alone lets 12 reads share the link: much worse. */
  {
    struct fake g;
    struct rc_cong fixed;
    double fixed_lat;

    rc_cong_init (&fixed, 12, false, true);
    fake_init (&g, 16, 1 * MS, 1.0, true);
    fake_run (&g, &fixed, 4000, 1, 4096, 1 << 20);
    fixed_lat = g.sync_lat_sum / g.sync_done;
    fprintf (stderr, "shared link, fixed threshold: sync latency %.2f ms\n",
             fixed_lat / 1e6);
    ck_assert_msg (with < fixed_lat,
                   "learned %.2f ms not below fixed %.2f ms", with / 1e6,
                   fixed_lat / 1e6);
  }
}
END_TEST

/* A fast backend (many servers, no sharing) is never congested: the
 * estimate grows to the limit and nothing queues.
 */
START_TEST (test_fast_never_congested)
{
  struct fake f;
  struct rc_cong e;
  struct rc_cong_estimate est;

  rc_cong_init (&e, 9, true, false);
  fake_init (&f, 64, 3 * MS, 0.001, false);
  fake_run (&f, &e, 4000, 1, 4096, 1 << 20);
  rc_cong_get (&e, &est);
  ck_assert (!e.congested_seen);
  fprintf (stderr, "fast: estimate %u (mean %.2f), queueing %lu ns\n",
           est.slots, mean_slots (&f), (unsigned long) est.queue_delay_ns);
  ck_assert_uint_eq (est.slots, 9);
  ck_assert_msg (mean_slots (&f) >= 8.5, "mean %.2f", mean_slots (&f));
  ck_assert_uint_lt (est.queue_delay_ns, 3 * MS / 100);
}
END_TEST

/* The decision: the rules that do not depend on the estimate. */
START_TEST (test_decide_rules)
{
  struct rc_cong k, ks, a;
  struct rc_cong_load l = { 0 };
  struct rc_cong_sample s = { 0 };
  unsigned i;

  /* Kernel mode, skip: exactly the old rule, a window keeps its async
   * part below the threshold, workers start async reads at any count.
   */
  rc_cong_init (&ks, 9, false, false);
  l.executing = 5; l.queued = 3;
  ck_assert_int_eq (rc_cong_decide (&ks, RC_CONG_KEEP, &l), RC_CONG_GO);
  l.queued = 4;
  ck_assert_int_eq (rc_cong_decide (&ks, RC_CONG_KEEP, &l), RC_CONG_HOLD_LIMIT);
  l.executing = 30;
  ck_assert_int_eq (rc_cong_decide (&ks, RC_CONG_ISSUE, &l), RC_CONG_GO);
  l.client_bytes = UINT64_C (1) << 40;  /* no BDP rule in kernel mode */
  l.executing = 0; l.queued = 0;
  ck_assert_int_eq (rc_cong_decide (&ks, RC_CONG_KEEP, &l), RC_CONG_GO);
  ck_assert_int_eq (rc_cong_decide (&ks, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.client_bytes = 0;
  /* Early triggers: not when their reads would reach the threshold. */
  l.executing = 2; l.queued = 0; l.new_reads = 7;
  ck_assert_int_eq (rc_cong_decide (&ks, RC_CONG_EARLY, &l), RC_CONG_HOLD_LIMIT);
  l.new_reads = 6;
  ck_assert_int_eq (rc_cong_decide (&ks, RC_CONG_EARLY, &l), RC_CONG_GO);

  /* Kernel mode, wait: keeps every async part, starts below the
   * threshold (the reads running may be clients' sync reads).
   */
  rc_cong_init (&k, 9, false, true);
  l.executing = 20; l.queued = 20;
  ck_assert_int_eq (rc_cong_decide (&k, RC_CONG_KEEP, &l), RC_CONG_GO);
  l.executing = 9;
  ck_assert_int_eq (rc_cong_decide (&k, RC_CONG_ISSUE, &l), RC_CONG_HOLD_LIMIT);
  l.executing = 8;
  ck_assert_int_eq (rc_cong_decide (&k, RC_CONG_ISSUE, &l), RC_CONG_GO);

  /* Learning: starts at the limit, keeping one slot for a sync read;
   * with nothing running an async read always may start.
   */
  rc_cong_init (&a, 9, true, false);
  l.executing = 0; l.queued = 0;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_ISSUE, &l), RC_CONG_GO);
  l.executing = 7;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_ISSUE, &l), RC_CONG_GO);
  l.executing = 8;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_ISSUE, &l), RC_CONG_HOLD_ESTIMATE);
  /* The BDP rule: a client whose own reads in flight cover the BDP and
   * ra-max keeps no async part.  1 MiB in 1.1 ms with 8 in flight: about
   * 7.6 GB/s x 1 ms (4 KiB reads alone) = about 8 MiB.  Before the BDP
   * is known, twice window_bytes alone.  Covered, but calm: no sync
   * read here queues (test_covered_calm has the difference).
   */
  l.client_bytes = 16 << 20;
  l.client_reads = 8;
  l.window_bytes = 8 << 20;
  l.executing = 0;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.client_bytes = 12 << 20;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l), RC_CONG_GO);
  /* No early window before the BDP is known, however few reads run
   * (the header, RC_CONG_EARLY); below the threshold once it is (after
   * the samples below).
   */
  l.executing = 0; l.queued = 0; l.new_reads = 1;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_EARLY, &l),
                    RC_CONG_HOLD_ESTIMATE);
  l.client_bytes = UINT64_C (64) << 20;
  for (i = 0; i < 16; i++) {
    s.start_ns = i * 10 * MS;
    s.end_ns = s.start_ns + (i % 2 ? 1 * MS : 1 * MS + MS / 10);
    s.bytes = i % 2 ? 4096 : 1 << 20;
    s.inflight = i % 2 ? 1 : 8;
    s.inflight_bytes = i % 2 ? 4096 : 8 << 20;
    rc_cong_sample (&a, &s);
  }
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_KEEP, &l), RC_CONG_GO);
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_EARLY, &l), RC_CONG_GO);
  l.new_reads = 9;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_EARLY, &l),
                    RC_CONG_HOLD_LIMIT);
  l.new_reads = 0;
  l.client_reads = 1;             /* one read at a time: never covered */
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.client_reads = 8;
  l.window_bytes = UINT64_C (128) << 20; /* not beyond the largest window */
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.window_bytes = 2 << 20;
  l.client_bytes = 6 << 20;     /* deep, but below the BDP */
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l), RC_CONG_GO);
  /* ... unless the clients' reads together cover it (a copy tool's
   * connections, each with a few reads in flight).
   */
  l.all_client_bytes = UINT64_C (12) << 20;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  /* Half the BDP is enough for them together (the BDP measured
   * includes speculation in flight), not less.
   */
  l.all_client_bytes = 5 << 20;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.all_client_bytes = 3 << 20;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.all_client_bytes = UINT64_C (12) << 20;
  /* But this one keeps too little: less than one and a half
   * window_bytes once the BDP is known.
   */
  l.client_bytes = (3 << 20) - 1;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.client_bytes = 3 << 20;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.client_bytes = 2 << 20;
  /* ... unless it was covered at its last trigger: half window_bytes is
   * enough to stay so (not less).
   */
  l.covered = true;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.client_bytes = 1 << 20;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.client_bytes = (1 << 20) - 1;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.covered = false;
  l.all_client_bytes = 0;
  /* The pipe is full: while the reads running carry twice the BDP, no
   * async read starts (on a link shared among the reads in flight it
   * would only slow the reads clients are about to need); with nothing
   * running, one always may.  Before the BDP is known, the slots alone.
   */
  {
    struct rc_cong_estimate est;
    struct rc_cong_load f = { .executing = 1 };
    struct rc_cong fresh;

    rc_cong_get (&a, &est);
    ck_assert_uint_gt (est.bdp_bytes, 0);
    f.executing_bytes = 2 * est.bdp_bytes - 1;
    ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_ISSUE, &f), RC_CONG_GO);
    f.executing_bytes = 2 * est.bdp_bytes;
    ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_ISSUE, &f), RC_CONG_HOLD_ESTIMATE);
    f.executing = 0;
    ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_ISSUE, &f), RC_CONG_GO);
    rc_cong_init (&fresh, 9, true, false);
    f.executing = 1;
    f.executing_bytes = UINT64_C (1) << 40;
    ck_assert_int_eq (rc_cong_decide (&fresh, RC_CONG_ISSUE, &f), RC_CONG_GO);
    /* Kernel mode measures nothing: the bytes do not count there. */
    ck_assert_int_eq (rc_cong_decide (&ks, RC_CONG_ISSUE, &f), RC_CONG_GO);
  }
  /* The threshold stays an upper bound in adaptive mode. */
  l.executing = 9;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_ISSUE, &l), RC_CONG_HOLD_ESTIMATE);
  l.executing = 30;
  ck_assert_int_eq (rc_cong_decide (&a, RC_CONG_ISSUE, &l), RC_CONG_HOLD_ESTIMATE);
  {
    struct rc_cong aw;            /* adaptive, ra-congestion=wait */

    rc_cong_init (&aw, 9, true, true);
    l.executing = 9;
    ck_assert_int_eq (rc_cong_decide (&aw, RC_CONG_ISSUE, &l), RC_CONG_HOLD_LIMIT);
  }
}
END_TEST

/* The delivery rate is the bytes delivered while a read ran, when the
 * caller counts them: a read issued behind 8 MiB in flight that
 * completes in 1 ms after 1 MiB was delivered is 1 GB/s, not 8.
 */
START_TEST (test_bdp_delivered)
{
  struct rc_cong a, b;
  struct rc_cong_sample s = { 0 };
  struct rc_cong_estimate ea, eb;
  unsigned i;

  rc_cong_init (&a, 9, true, false);
  rc_cong_init (&b, 9, true, false);
  for (i = 0; i < 16; i++) {
    s.start_ns = i * 10 * MS;
    s.end_ns = s.start_ns + MS;
    s.bytes = 256 << 10;
    s.inflight = 8;
    s.inflight_bytes = 8 << 20;
    s.delivered_bytes = 0;
    rc_cong_sample (&a, &s);
    s.delivered_bytes = 1 << 20;
    rc_cong_sample (&b, &s);
  }
  rc_cong_get (&a, &ea);
  rc_cong_get (&b, &eb);
  /* 8 MiB in 1 ms for 1 ms; 1 MiB in 1 ms for 1 ms. */
  ck_assert_uint_eq (ea.bdp_bytes, 8 << 20);
  ck_assert_uint_eq (eb.bdp_bytes, 1 << 20);
}
END_TEST

/* The trap of a client covered before the BDP is known (one that keeps
 * twice ra-io-max, or that stays covered down to half): its own 4 reads
 * of 256 KiB, 20 ms away, are all that is in flight, so the BDP measured
 * is its own depth.  While their latency is their base latency (nothing
 * queues) it stays covered for 8 base latencies of that calm while it is
 * covered, not longer; once its sync reads queue it is covered for good
 * (the caller keeps queue_seen).
 */
static void
sync_reads (struct rc_cong *e, uint64_t *t, unsigned n, uint64_t lat)
{
  struct rc_cong_sample s = { 0 };
  unsigned i;

  for (i = 0; i < n; i++) {
    s.start_ns = *t;
    s.end_ns = *t + lat;
    s.bytes = 256 << 10;
    s.inflight = 4;
    s.inflight_bytes = 1 << 20;
    s.delivered_bytes = 1 << 20;
    s.sync = true;
    rc_cong_sample (e, &s);
    *t += 5 * MS;               /* 4 in flight: one ends every 5 ms */
  }
}

START_TEST (test_covered_calm)
{
  struct rc_cong e;
  struct rc_cong_estimate est;
  struct rc_cong_load l = {
    .client_reads = 4, .client_bytes = 1 << 20, .all_client_bytes = 1 << 20,
    .window_bytes = 1 << 20,
  };
  uint64_t t = MS;

  rc_cong_init (&e, 64, true, false);
  /* Nothing measured: one ra-io-max is not enough (at 1 ms, where the
   * CPU's noise makes its reads look queued, such a client was trapped
   * in 3 runs of 6); twice is, but not as a client the backend bounds.
   */
  l.now_ns = t;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.client_bytes = 2 << 20;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  /* Covered at its last trigger, half is enough to stay so. */
  l.client_bytes = 1 << 20;
  l.covered = true;
  l.covered_since_ns = t;
  /* 8 reads in 40 ms at their base latency: the BDP is its own 1 MiB,
   * which it covers; calm for 35 ms, less than 8 x 20 ms.
   */
  sync_reads (&e, &t, 8, 20 * MS);
  rc_cong_get (&e, &est);
  ck_assert_uint_eq (est.bdp_bytes, 1 << 20);
  l.now_ns = t;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  /* 160 ms calm while covered (from the end of its first read): not
   * covered any more.
   */
  sync_reads (&e, &t, 30, 20 * MS);
  l.now_ns = t;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_UNCOVERED_CALM);
  /* Not a client that read less than three quarters of its depth in a
   * base latency while covered (bound by the CPU, not the distance):
   * here 1 MiB in 20 ms is its distance's rate.
   */
  l.covered_rate = 0.74 * (double) (1 << 20) / (double) (20 * MS);
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  /* A client let go before passed the test then, with the rate measured
   * up to its let-go: the verdict stands, though the base latency
   * measured since may be lower (1M depth 2 behind 20 ms at 1 Gbit/s:
   * 0.77 of its depth in a base latency of 25.8 ms, 0.60 in one of 20.5,
   * and covered again for the rest of the job).
   */
  l.let_go = true;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_UNCOVERED_CALM);
  l.let_go = false;
  l.covered_rate = 0.76 * (double) (1 << 20) / (double) (20 * MS);
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_UNCOVERED_CALM);
  l.covered_rate = 0;
  /* ... and at its next trigger too, while the calm lasts (the caller
   * keeps covered_since_ns), if it keeps one and a half window_bytes
   * (the BDP known); with less it is not covered at all.
   */
  l.covered = false;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.window_bytes = 512 << 10;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_UNCOVERED_CALM);
  l.window_bytes = 1 << 20;
  l.covered = true;
  /* Never a client that keeps two BDPs and twice window_bytes in
   * flight: the BDP is not its own depth then, its reads take longer
   * than the base latency (a copy tool at 1 ms, bound by the CPU).
   */
  l.client_bytes = 2 << 20;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.client_bytes = (2 << 20) - 1;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_UNCOVERED_CALM);
  l.client_bytes = 3 << 20;
  l.window_bytes = 2 << 20;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_UNCOVERED_CALM);
  l.client_bytes = 4 << 20;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.window_bytes = 1 << 20;
  l.client_bytes = 1 << 20;
  /* Calm before it was covered does not count: a client covered just
   * now is covered (calm) for 8 base latencies, then not.
   */
  l.covered_since_ns = t - 100 * MS;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.covered_since_ns = 0;       /* covered just now: the caller's clock */
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.covered_since_ns = t - 160 * MS;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_UNCOVERED_CALM);
  /* Without a clock, never let go. */
  l.now_ns = 0;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  l.now_ns = t;
  /* ... unless its reads queued while it was covered: the backend bounds
   * it then, calm or not.
   */
  l.queue_seen = true;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_COVERED);
  /* Sync reads that take twice their base latency queue: covered, and
   * the caller remembers it.
   */
  l.queue_seen = false;
  sync_reads (&e, &t, 16, 40 * MS);
  l.now_ns = t;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_COVERED);
  /* Calm again, but for less than 8 base latencies: covered, calm. */
  sync_reads (&e, &t, 24, 20 * MS);
  l.now_ns = t;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l),
                    RC_CONG_COVERED_CALM);
  /* The BDP known (its own 1 MiB) and the sync reads queued: a client
   * not covered yet becomes so only with one and a half window_bytes in
   * flight (4 reads of 256 KiB at 1 ms, where the CPU's noise makes
   * reads look queued, were covered for good in about 1 run of 10 with
   * one window_bytes enough; with twice, nbdcopy's connections at 1 ms,
   * 7-8 reads of 256 KiB, were not covered and read ahead).
   */
  sync_reads (&e, &t, 16, 40 * MS);
  l.now_ns = t;
  l.covered = false;
  l.covered_since_ns = 0;
  rc_cong_get (&e, &est);
  ck_assert_uint_gt (est.bdp_bytes, 0);
  ck_assert_uint_le (est.bdp_bytes, 1 << 20);
  l.client_bytes = 1 << 20;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.client_bytes = (3 << 19) - 1;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.client_bytes = 3 << 19;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_COVERED);
  /* Kernel mode measures nothing: never covered. */
  rc_cong_init (&e, 64, false, false);
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_GO);
}
END_TEST

/* The calm let-go's measure and record (src/trigger.c, rc_covered_rate,
 * rc_covered_note): from the first trigger after a read completed once
 * the client is covered, over its last one to two segments; a let-go
 * client's record stands while the calm lasts; from afresh once it is
 * neither covered nor let go.  D: the client keeps 2 MiB in flight.
 */
START_TEST (test_covered_rate)
{
  const uint64_t D = 2 << 20;
  struct ra_state ra;

  memset (&ra, 0xff, sizeof ra);
  ra_state_init (&ra);
  ck_assert_uint_eq (ra.done_bytes, 0);
  ck_assert (ra.cov.mark_bytes == 0 && ra.cov.from_ns == 0 && !ra.cov.let_go);
  ck_assert (rc_covered_rate (&ra, 5 * MS) == 0);
  /* Covered at its second read, nothing completed yet: not measured. */
  rc_covered_note (&ra, RC_CONG_COVERED_CALM, 1 * MS, D);
  rc_covered_note (&ra, RC_CONG_COVERED_CALM, 2 * MS, D);
  ck_assert (rc_covered_rate (&ra, 3 * MS) == 0);
  ck_assert (ra.covered && !ra.queue_seen);
  ck_assert_uint_eq (ra.covered_since_ns, 1 * MS);
  /* Its first reads complete at 11 ms: 2 MiB, measured from there. */
  ra.done_bytes = 2 << 20;
  rc_covered_note (&ra, RC_CONG_COVERED_CALM, 11 * MS, D);
  ck_assert (rc_covered_rate (&ra, 11 * MS) == 0);
  ck_assert (rc_covered_rate (&ra, 21 * MS) > 0);     /* nothing read since */
  ck_assert (rc_covered_rate (&ra, 21 * MS) < 1e-6);
  ra.done_bytes = 10 << 20;
  ck_assert (rc_covered_rate (&ra, 21 * MS) == (double) (8 << 20) / (10 * MS));
  /* Let go at 21 ms: the record stands while the calm lasts (the WINDOW
   * question asks no rate of a let-go client: rc_cong_load's let_go),
   * covered calm again ...
   */
  rc_covered_note (&ra, RC_CONG_UNCOVERED_CALM, 21 * MS, D);
  ck_assert (!ra.covered && ra.cov.let_go);
  ck_assert_uint_eq (ra.covered_since_ns, 1 * MS);
  ra.done_bytes = 11 << 20;
  rc_covered_note (&ra, RC_CONG_COVERED_CALM, 100 * MS, D);
  ck_assert (ra.covered && !ra.queue_seen && ra.cov.let_go);
  ck_assert_uint_eq (ra.covered_since_ns, 1 * MS);
  /* ... or GO for less than RC_CONG_LATELY_HALF_NS (1M depth 4 behind
   * 50 ms at 1 Gbit/s: let go at 467 ms, GO at 667 ms when its reads in
   * progress fell under half the BDP, then covered again for 8 base
   * latencies).
   */
  rc_covered_note (&ra, RC_CONG_GO, 200 * MS, D);
  ck_assert (!ra.covered && !ra.queue_seen && ra.cov.let_go);
  ck_assert_uint_eq (ra.covered_since_ns, 1 * MS);
  ck_assert_uint_eq (ra.cov.from_ns, 11 * MS);
  rc_covered_note (&ra, RC_CONG_GO, 200 * MS + RC_CONG_LATELY_HALF_NS - 1, D);
  ck_assert (ra.cov.let_go);
  rc_covered_note (&ra, RC_CONG_UNCOVERED_CALM, 1300 * MS, D);
  ck_assert (ra.cov.let_go && ra.cov.go_since_ns == 0);
  /* GO for RC_CONG_LATELY_HALF_NS: from afresh. */
  rc_covered_note (&ra, RC_CONG_GO, 1400 * MS, D);
  ck_assert (ra.cov.let_go);
  rc_covered_note (&ra, RC_CONG_GO, 1400 * MS + RC_CONG_LATELY_HALF_NS, D);
  ck_assert (!ra.cov.let_go && ra.covered_since_ns == 0);
  ck_assert (ra.cov.from_ns == 0 && ra.cov.go_since_ns == 0);
  ck_assert (rc_covered_rate (&ra, 3000 * MS) == 0);
  /* Let go again, then the sync reads queue while it is covered: the
   * calm ended, covered from afresh, but held covered by the queue only
   * while it lasts (let_go_once: the let-go's own windows made the sync
   * reads of 1M at depth 2 behind 10 ms queue for 40 ms, and COVERED
   * held it covered to the end of the job).
   */
  rc_covered_note (&ra, RC_CONG_COVERED_CALM, 2500 * MS, D);
  ck_assert_uint_eq (ra.covered_since_ns, 2500 * MS);
  ra.done_bytes = 12 << 20;
  rc_covered_note (&ra, RC_CONG_COVERED_CALM, 2510 * MS, D);
  rc_covered_note (&ra, RC_CONG_UNCOVERED_CALM, 2700 * MS, D);
  ck_assert (ra.cov.let_go);
  rc_covered_note (&ra, RC_CONG_COVERED, 2800 * MS, D);
  ck_assert (ra.covered && !ra.queue_seen && !ra.cov.let_go);
  ck_assert (ra.let_go_once);
  ck_assert_uint_eq (ra.covered_since_ns, 2800 * MS);
  ck_assert_uint_eq (ra.cov.mark_bytes, 12 << 20);
  ck_assert (ra.cov.from_ns == 0);
  rc_covered_note (&ra, RC_CONG_COVERED, 2810 * MS, D);
  ck_assert (ra.covered && !ra.queue_seen);
  ck_assert_uint_eq (ra.covered_since_ns, 2800 * MS);
  /* Not covered, never let go: from afresh, and a queue seen while
   * covered holds it (queue_seen).
   */
  ra_state_init (&ra);
  ck_assert (!ra.let_go_once);
  ra.done_bytes = 11 << 20;
  rc_covered_note (&ra, RC_CONG_COVERED_CALM, 200 * MS, D);
  ra.done_bytes = 12 << 20;
  rc_covered_note (&ra, RC_CONG_COVERED_CALM, 210 * MS, D);
  ck_assert (ra.cov.from_ns == 210 * MS);
  rc_covered_note (&ra, RC_CONG_GO, 220 * MS, D);
  ck_assert (!ra.covered && ra.covered_since_ns == 0);
  ck_assert (rc_covered_rate (&ra, 300 * MS) == 0);
  ck_assert (ra.cov.from_ns == 0 && !ra.cov.let_go);
  rc_covered_note (&ra, RC_CONG_COVERED, 300 * MS, D);
  ck_assert_uint_eq (ra.cov.mark_bytes, 12 << 20);
  ck_assert (ra.covered && ra.queue_seen);
  /* No clock: never measured. */
  rc_covered_note (&ra, RC_CONG_COVERED, 0, D);
  ck_assert (rc_covered_rate (&ra, 0) == 0);
}
END_TEST

/* The covered, calm client has read bytes by ms. */
static void
read_by (struct ra_state *ra, uint64_t bytes, uint64_t ms, uint64_t depth)
{
  ra->done_bytes = bytes;
  rc_covered_note (ra, RC_CONG_COVERED_CALM, ms * MS, depth);
}

/* The measure spans the client's last one to two segments of eight
 * depths (src/trigger.c, RATE_SEGMENT_DEPTHS), so a slow start ages
 * out: qemu-img bench 1M at depth 2 behind 10 ms read its first pairs
 * at 22 ms where the base latency was 11 ms, and was judged on that for
 * 900 ms.
 */
START_TEST (test_covered_rate_segments)
{
  const uint64_t D = 2 << 20;
  struct ra_state ra;

  ra_state_init (&ra);
  rc_covered_note (&ra, RC_CONG_COVERED_CALM, 1 * MS, D);
  read_by (&ra, 2 << 20, 23, D);
  ck_assert_uint_eq (ra.cov.from_ns, 23 * MS);
  /* Slow: 2 MiB every 22 ms.  A segment is not over before 8 depths. */
  read_by (&ra, 16 << 20, 177, D);
  ck_assert_uint_eq (ra.cov.from_ns, 23 * MS);
  ck_assert (rc_covered_rate (&ra, 177 * MS) == (double) (14 << 20) / (154 * MS));
  read_by (&ra, 18 << 20, 199, D);
  ck_assert_uint_eq (ra.cov.from_ns, 23 * MS);    /* the first segment */
  ck_assert_uint_eq (ra.cov.seg_ns, 199 * MS);
  /* Then 2 MiB every 11 ms: once the second segment is over, the
   * measure starts where it began, at 199 ms.
   */
  read_by (&ra, 32 << 20, 276, D);
  ck_assert_uint_eq (ra.cov.from_ns, 23 * MS);
  read_by (&ra, 34 << 20, 287, D);
  ck_assert_uint_eq (ra.cov.from_ns, 199 * MS);
  ck_assert_uint_eq (ra.cov.seg_ns, 287 * MS);
  ck_assert (rc_covered_rate (&ra, 287 * MS) == (double) (16 << 20) / (88 * MS));
  /* Depth, not time, ends a segment: 16 MiB more, 8 depths of 2 MiB,
   * is no segment's end for a client 8 MiB deep.
   */
  read_by (&ra, 50 << 20, 400, 8 << 20);
  ck_assert_uint_eq (ra.cov.from_ns, 199 * MS);
  ck_assert_uint_eq (ra.cov.seg_ns, 287 * MS);
}
END_TEST

/* What a client kept in flight lately (rc_cong_lately): its peak holds,
 * halved for every second since (linearly in between), and a read with
 * more bytes in flight than that makes a new peak.  A copy tool sixteen
 * reads deep, fed from pages read ahead for it with two reads in flight,
 * still counts as deep for the WINDOW question, until it has kept few
 * for seconds.
 */
START_TEST (test_lately)
{
  const uint64_t S = 1000 * MS, K = 1024;
  struct rc_cong_peak p = { 0 };
  struct rc_cong e;
  struct rc_cong_load l = {
    .all_client_bytes = 512 * K, .window_bytes = 1 << 20,
  };
  unsigned reads;
  uint64_t bytes;
  int i;

  rc_cong_lately (&p, S, 16, 4096 * K, &reads, &bytes);
  ck_assert_uint_eq (reads, 16);
  ck_assert_uint_eq (bytes, 4096 * K);
  rc_cong_lately (&p, S + S / 2, 2, 512 * K, &reads, &bytes);
  ck_assert_uint_eq (reads, 12);
  ck_assert_uint_eq (bytes, 3072 * K);
  rc_cong_lately (&p, 2 * S, 2, 512 * K, &reads, &bytes);
  ck_assert_uint_eq (reads, 8);
  ck_assert_uint_eq (bytes, 2048 * K);
  rc_cong_lately (&p, 3 * S, 3, 512 * K, &reads, &bytes);
  ck_assert_uint_eq (reads, 4);
  ck_assert_uint_eq (bytes, 1024 * K);
  /* Its reads now count when they are more than the peak's, halved. */
  rc_cong_lately (&p, 3 * S, 6, 768 * K, &reads, &bytes);
  ck_assert_uint_eq (reads, 6);
  ck_assert_uint_eq (bytes, 1024 * K);
  /* A read that started before the peak's and comes after it: no age. */
  rc_cong_lately (&p, S, 1, 4 * K, &reads, &bytes);
  ck_assert_uint_eq (bytes, 4096 * K);
  /* More in flight than the peak halved: the new peak. */
  rc_cong_lately (&p, 3 * S, 8, 2048 * K, &reads, &bytes);
  ck_assert_uint_eq (reads, 8);
  ck_assert_uint_eq (bytes, 2048 * K);
  ck_assert_uint_eq (p.ns, 3 * S);
  /* Forgotten after a minute of few reads. */
  rc_cong_lately (&p, 70 * S, 1, 64 * K, &reads, &bytes);
  ck_assert_uint_eq (reads, 1);
  ck_assert_uint_eq (bytes, 64 * K);

  /* In the WINDOW question: with a BDP of 3 MiB known, two reads of
   * 256K are a client the backend has room for, sixteen cover it.
   */
  rc_cong_init (&e, 64, true, false);
  for (i = 0; i < 16; i++) {
    struct rc_cong_sample smp = {
      .start_ns = S + (uint64_t) i * MS, .end_ns = S + (uint64_t) (i + 1) * MS,
      .bytes = 256 * K, .inflight = 12, .delivered_bytes = 3072 * K,
      .sync = true,
    };
    rc_cong_sample (&e, &smp);
  }
  l.now_ns = 2 * S;
  memset (&p, 0, sizeof p);
  rc_cong_lately (&p, S, 16, 4096 * K, &reads, &bytes);
  rc_cong_lately (&p, S + S / 4, 2, 512 * K, &l.client_reads,
                  &l.client_bytes);
  ck_assert_uint_ge (l.client_bytes, 3072 * K);
  ck_assert_int_ne (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_GO);
  l.client_reads = 2;
  l.client_bytes = 512 * K;
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_GO);

  /* A peak of six reads of 256K, one and a half ra-io-max (the bar once
   * the BDP is known), goes in whole reads: ten milliseconds later, fed
   * from pages with two reads in flight, the client still has the bar
   * and is covered beside clients that cover half the BDP.
   */
  memset (&p, 0, sizeof p);
  rc_cong_lately (&p, S, 6, 1536 * K, &reads, &bytes);
  rc_cong_lately (&p, S + 10 * MS, 2, 512 * K, &l.client_reads,
                  &l.client_bytes);
  ck_assert_uint_eq (l.client_reads, 6);
  ck_assert_uint_eq (l.client_bytes, 1536 * K);
  l.all_client_bytes = 4096 * K;
  ck_assert_int_ne (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_GO);
  /* A third of a second on, a read's worth is forgotten: five reads. */
  rc_cong_lately (&p, S + 340 * MS, 2, 512 * K, &l.client_reads,
                  &l.client_bytes);
  ck_assert_uint_eq (l.client_reads, 5);
  ck_assert_uint_eq (l.client_bytes, 1280 * K);
  ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_WINDOW, &l), RC_CONG_GO);
}
END_TEST

/* A window's async part starts beside its own sync part for a client of
 * one read at a time, unless the clients' sync reads queue now: at first
 * (nothing measured), and with sync reads at their base latency, beside;
 * once they take twice it, after the sync part; calm again, beside
 * again.  In both modes (the estimator measures in kernel mode too).  A
 * client of two reads in flight, or one yielding to a random reader:
 * after the sync part.
 */
START_TEST (test_async_beside_sync)
{
  struct rc_cong e;
  const struct rc_cong_load l = { .client_reads = 1 };
  const struct rc_cong_load deep = { .client_reads = 2 };
  const struct rc_cong_load yielding = { .client_reads = 1,
                                         .yielding = true };
  uint64_t t = MS;
  bool learn;

  for (learn = false; ; learn = true) {
    rc_cong_init (&e, 64, learn, false);
    ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_BESIDE, &l), RC_CONG_GO);
    ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_BESIDE, &deep),
                      RC_CONG_HOLD_ESTIMATE);
    ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_BESIDE, &yielding),
                      RC_CONG_HOLD_ESTIMATE);
    sync_reads (&e, &t, 8, 20 * MS);
    ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_BESIDE, &l), RC_CONG_GO);
    sync_reads (&e, &t, 16, 40 * MS);
    ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_BESIDE, &l),
                      RC_CONG_HOLD_ESTIMATE);
    sync_reads (&e, &t, 24, 20 * MS);
    ck_assert_int_eq (rc_cong_decide (&e, RC_CONG_BESIDE, &l), RC_CONG_GO);
    if (learn)
      break;
  }
}
END_TEST

static Suite *
congestion_suite (void)
{
  Suite *s = suite_create ("congestion");
  TCase *tc = tcase_create ("estimator");

  tcase_add_test (tc, test_slots_found);
  tcase_add_test (tc, test_slows_under_load);
  tcase_add_test (tc, test_fast_never_congested);
  tcase_add_test (tc, test_decide_rules);
  tcase_add_test (tc, test_bdp_delivered);
  tcase_add_test (tc, test_covered_calm);
  tcase_add_test (tc, test_covered_rate);
  tcase_add_test (tc, test_covered_rate_segments);
  tcase_add_test (tc, test_lately);
  tcase_add_test (tc, test_async_beside_sync);
  suite_add_tcase (s, tc);
  return s;
}

int
main (void)
{
  SRunner *sr = srunner_create (congestion_suite ());
  int failed;

  srunner_run_all (sr, CK_NORMAL);
  failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
