/* Unit tests of the core cache (src/cache.c, src/jobq.c, src/connpool.c,
 * src/pagecache.c) over the scripted fake backend of fake-backend.c.
 *
 * Tests that need several threads never call ck_assert outside the test
 * thread: helper threads record what went wrong and the test thread
 * asserts.  The stress test runs for RC_STRESS_SECS seconds (default
 * 1.5 per configuration).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <check.h>

#include "racache/cache.h"
#include "racache/config.h"
#include "racache/congestion.h"
#include "racache/pagecache.h"
#include "racache/readahead.h"
#include "racache/stats.h"
#include "racache/util.h"

#include "fake-backend.h"

/* ---- the cache under test --------------------------------------------- */

struct opts {
  uint64_t page, cache, ra_max, io_max;
  unsigned bg, thresh;
  unsigned policy;
  unsigned conns;               /* ra-backend-connections; 0: the default */
  bool serial;                  /* the backend runs one call per context */
  uint64_t limit_retry_ns;      /* struct rc_backend's; 0: the default */
  unsigned mode;                /* ra-mode (RA_MODE_*) */
};

/* OPTS (.field = value, ...): the defaults below, with some overridden
 * (a later designated initializer wins, on purpose).
 */
#pragma GCC diagnostic ignored "-Woverride-init"
#define OPTS(...) ((struct opts) {                                      \
      .page = 4 * KiB, .cache = 4 * MiB, .ra_max = 128 * KiB,           \
      .io_max = 128 * KiB, .bg = 4, .thresh = 4,                        \
      .policy = RC_CONGESTION_SKIP, .mode = RA_MODE_ADAPTIVE,          \
      __VA_ARGS__ })

/* ---- the test bed: the checked fixture of every TCase ------------------ */

/* Each test's fake backend (bed_fake) and the cache mk_cache made last
 * and free_cache has not freed.  bed_teardown frees both after the test,
 * with free_cache's checks: every worker context closed, no request
 * outside the export.
 */
static struct {
  struct fake f;
  bool has_fake;
  struct rc_cache *c;
} bed;

static void
bed_setup (void)
{
  memset (&bed, 0, sizeof bed);
}

static void free_cache (struct rc_cache *c, struct fake *f);

static void
bed_teardown (void)
{
  if (bed.c)
    free_cache (bed.c, &bed.f);
  if (bed.has_fake)
    fake_free (&bed.f);
  bed.has_fake = false;
}

/* The test's fake export of size bytes. */
static struct fake *
bed_fake (uint64_t size)
{
  ck_assert (!bed.has_fake);
  fake_init (&bed.f, size);
  bed.has_fake = true;
  return &bed.f;
}

static struct rc_cache *mk_cache_nowait (struct fake *f, struct opts o);

/* A counter of the fake that other threads change, read under its lock. */
static unsigned
fake_read (struct fake *f, const unsigned *field)
{
  unsigned v;

  pthread_mutex_lock (&f->lock);
  v = *field;
  pthread_mutex_unlock (&f->lock);
  return v;
}

/* The connections the workers of a cache made with o open. */
static unsigned
opts_connections (struct opts o)
{
  unsigned n = o.conns ? o.conns
    : o.serial ? RC_SERIAL_BACKEND_CONNECTIONS
    : RC_PARALLEL_BACKEND_CONNECTIONS;

  return n < o.bg ? n : o.bg;
}

static struct rc_cache *
mk_cache (struct fake *f, struct opts o)
{
  struct rc_cache *c = mk_cache_nowait (f, o);
  unsigned want = opts_connections (o);
  uint64_t deadline = now_ns () + PATIENCE_NS;

  /* Wait for the workers' connections, so that the first windows are
   * read as they would be later.
   */
  while (rc_cache_connections (c) < want && now_ns () < deadline)
    sleep_ns (100000);
  ck_assert_uint_eq (rc_cache_connections (c), want);
  return c;
}

/* The cache as a client has just connected (rc_cache_connect): the
 * workers' connections are being opened.
 */
static struct rc_cache *
mk_cache_nowait (struct fake *f, struct opts o)
{
  struct rc_config cfg;
  struct rc_backend be = {
    .opaque = f, .pread = fake_pread,
    .worker_open = fake_worker_open, .worker_close = fake_worker_close,
  };
  struct rc_cache *c;
  char msg[256];
  const char *bad;

  rc_config_defaults (&cfg);
  cfg.page_size = o.page;
  cfg.cache_size = o.cache;
  cfg.ra_max = o.ra_max;
  cfg.io_max = o.io_max;
  cfg.max_background = o.bg;
  cfg.congestion_threshold = o.thresh;
  cfg.congestion = o.policy;
  cfg.mode = o.mode;
  if (o.conns)
    cfg.backend_connections = o.conns;
  be.one_call_per_ctx = o.serial;
  be.limit_retry_ns = o.limit_retry_ns;
  bad = rc_config_check (&cfg, msg, sizeof msg);
  ck_assert_msg (bad == NULL, "config: %s", bad);
  c = rc_cache_new (&cfg, &be, cfg.max_background);
  ck_assert (c != NULL);
  ck_assert (bed.c == NULL);
  bed.c = c;                    /* bed_teardown frees it if the test does not */
  ck_assert_int_eq (rc_cache_set_export_size (c, f->size), 0);
  rc_cache_connect (c);
  return c;
}

static void
free_cache (struct rc_cache *c, struct fake *f)
{
  if (c == bed.c)
    bed.c = NULL;
  rc_cache_free (c);
  ck_assert_uint_eq (f->opened, f->closed);
  ck_assert_uint_eq (f->bad, 0);
}

#define ST(c, field) STAT_GET (rc_cache_stats (c), field)

static struct rc_pc_counts
counts (struct rc_cache *c)
{
  struct rc_pc_counts n;

  rc_pc_counts (rc_cache_pagecache (c), &n);
  return n;
}

/* Wait until no backend read is running or queued and no page is in
 * flight.
 */
static bool
idle (struct rc_cache *c)
{
  uint64_t deadline = now_ns () + PATIENCE_NS;

  do {
    if (counts (c).inflight == 0 && rc_cache_inflight (c) == 0)
      return true;
    sleep_ns (200000);
  } while (now_ns () < deadline);
  return false;
}

/* Idle, and the cache's count of pages per group is right. */
#define ASSERT_IDLE(c)                                                  \
  do {                                                                  \
    ck_assert_msg (idle (c), "cache never became idle");                \
    ck_assert_msg (rc_pc_groups_consistent (rc_cache_pagecache (c)),    \
                   "pages per group miscounted");                       \
  } while (0)

static bool
cached (struct rc_cache *c, ra_pgoff index)
{
  return rc_pc_query_ops.cached (rc_cache_pagecache (c), index);
}

/* Read through the cache into a guarded buffer; check the guards and
 * (when the read succeeds) the data against the export.  Returns the
 * errno, 0 on success.
 */
#define GUARD 64
static int
rd (struct rc_cache *c, struct rc_stream *s, struct fake *f,
    uint64_t off, uint32_t len)
{
  uint8_t *mem = malloc (len + 2 * GUARD);
  uint32_t i;
  int err = 0, r;

  if (!mem)
    abort ();
  memset (mem, 0xA5, len + 2 * GUARD);
  r = rc_read (c, s, CLIENT_CTX, mem + GUARD, len, off, &err);
  for (i = 0; i < GUARD; i++) {
    if (mem[i] != 0xA5)
      ck_abort_msg ("read wrote before its buffer");
    if (mem[GUARD + len + i] != 0xA5)
      ck_abort_msg ("read wrote past its buffer");
  }
  if (r == 0)
    check_now (f, mem + GUARD, off, len);
  else if (err == 0)
    ck_abort_msg ("rc_read failed without an errno");
  free (mem);
  return r == 0 ? 0 : err;
}

#define RD_OK(c, s, f, off, len)                                        \
  do {                                                                  \
    int e_ = rd ((c), (s), (f), (off), (len));                          \
    if (e_ != 0)                                                        \
      ck_abort_msg ("read of %u at %" PRIu64 " failed: %s",             \
                    (unsigned) (len), (uint64_t) (off), strerror (e_)); \
  } while (0)

static uint64_t
xorshift (uint64_t *s)
{
  uint64_t x = *s;

  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* ---- read path correctness -------------------------------------------- */

static void
data_for_page_size (uint64_t ps)
{
  struct opts o = OPTS (.page = ps,
                        .cache = ps >= 64 * KiB ? 4 * MiB : 2 * MiB,
                        .ra_max = 8 * ps,
                        .io_max = ps > 64 * KiB ? ps : 64 * KiB);
  /* Not a multiple of the page size: the last page is partly outside. */
  uint64_t size = 37 * ps + 1234;
  static const uint32_t chunks[] = {
    1, 3, 511, 512, 4095, 4096, 4097, 65535, 65536, 131071, 1 * MiB,
  };
  uint64_t seed = 0x1234567 + ps;
  struct rc_cache *c;
  struct rc_stream *s;
  size_t k;
  int i;

  struct fake *f = bed_fake (size);

  /* Sequential, each chunk size on a fresh cache. */
  for (k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
    uint64_t off = 0;
    int n = 0;

    c = mk_cache (f, o);
    s = rc_stream_new ();
    while (off < size && n++ < 3000) {
      uint32_t len = size - off < chunks[k] ? size - off : chunks[k];
      RD_OK (c, s, f, off, len);
      off += len;
    }
    ASSERT_IDLE (c);
    ck_assert_uint_le (counts (c).pages, counts (c).capacity);
    rc_stream_free (s);
    free_cache (c, f);
  }

  /* Random and unaligned, on one cache, from several streams. */
  c = mk_cache (f, o);
  {
    struct rc_stream *ss[3] = { rc_stream_new (), rc_stream_new (),
                                rc_stream_new () };
    for (i = 0; i < 600; i++) {
      uint64_t off = xorshift (&seed) % size;
      uint32_t len = xorshift (&seed) % (3 * ps + 1);

      if (len > size - off)
        len = size - off;
      RD_OK (c, ss[i % 3], f, off, len);
    }
    for (i = 0; i < 3; i++)
      rc_stream_free (ss[i]);
  }
  ASSERT_IDLE (c);
  free_cache (c, f);

  /* The end of the export, on a fresh cache each time. */
  {
    static const struct { uint64_t from_end; uint32_t len; } tail[] = {
      { 1, 1 }, { 1234, 1234 }, { 1235, 2 }, { 1234 + 100, 1334 },
      { 1234 + 1, 1 }, { 3 * 1024 * 1024, 0 /* whole rest */ },
    };
    for (k = 0; k < sizeof tail / sizeof tail[0]; k++) {
      uint64_t off = tail[k].from_end > size ? 0 : size - tail[k].from_end;
      uint32_t len = tail[k].len ? tail[k].len : size - off;

      c = mk_cache (f, o);
      s = rc_stream_new ();
      RD_OK (c, s, f, off, len);
      RD_OK (c, s, f, off, len);       /* again, from the cache */
      ASSERT_IDLE (c);
      rc_stream_free (s);
      free_cache (c, f);
    }
  }

  /* The whole export in one read. */
  c = mk_cache (f, o);
  s = rc_stream_new ();
  RD_OK (c, s, f, 0, size);
  ASSERT_IDLE (c);
  rc_stream_free (s);
}

START_TEST (test_data_512)
{
  data_for_page_size (512);
}
END_TEST

START_TEST (test_data_4k)
{
  data_for_page_size (4 * KiB);
}
END_TEST

START_TEST (test_data_64k)
{
  data_for_page_size (64 * KiB);
}
END_TEST

/* Zero-length reads and fills return at once, even at an unaligned
 * offset: no backend read, nothing written, no page inserted.
 */
START_TEST (test_zero_length)
{
  static const uint64_t offs[] = { 0, 100, 4096, 4097, 40000 - 1,
                                   40000 };
  struct rc_cache *c;
  struct rc_stream *s;
  size_t k;

  struct fake *f = bed_fake (40000);
  c = mk_cache (f, OPTS ());
  s = rc_stream_new ();
  for (k = 0; k < sizeof offs / sizeof offs[0]; k++) {
    uint8_t guard = 0x5A;
    int err = 0;

    ck_assert_int_eq (rc_read (c, s, CLIENT_CTX, &guard, 0, offs[k], &err),
                      0);
    ck_assert_uint_eq (guard, 0x5A);
    ASSERT_IDLE (c);
    ck_assert_msg (f->nreqs == 0,
                   "a zero-length read at %" PRIu64 " read the backend "
                   "(%" PRIu64 " requests)", offs[k], f->nreqs);
    ck_assert_uint_eq (counts (c).pages, 0);
    ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 0, offs[k], &err), 0);
    ASSERT_IDLE (c);
    ck_assert_msg (f->nreqs == 0,
                   "a zero-length fill at %" PRIu64 " read the backend",
                   offs[k]);
    ck_assert_uint_eq (counts (c).pages, 0);
  }
  rc_stream_free (s);
}
END_TEST

/* Windows of more backend reads than submit's batch list holds
 * (ra_max 128 pages, io_max 1 page): the data is still right and
 * nothing stays in flight.
 */
START_TEST (test_many_batches)
{
  struct rc_cache *c;
  struct rc_stream *s;
  uint64_t off;

  struct fake *f = bed_fake (8 * MiB);
  c = mk_cache (f, OPTS (.ra_max = 512 * KiB, .io_max = 4 * KiB));
  s = rc_stream_new ();
  for (off = 0; off < 2 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  for (; off < 8 * MiB; off += 1 * MiB)
    RD_OK (c, s, f, off, 1 * MiB);
  ASSERT_IDLE (c);
  fprintf (stderr, "many batches: %" PRIu64 " windows, %" PRIu64
           " sync + %" PRIu64 " async pages, %" PRIu64 " misses\n",
           ST (c, windows[RA_A_INITIAL]) + ST (c, windows[RA_B_SEQUENTIAL])
           + ST (c, windows[RA_D_OVERSIZE]) + ST (c, windows[RA_E_SEQ_MISS]),
           ST (c, sync_pages), ST (c, async_pages), ST (c, page_misses));
  rc_stream_free (s);
}
END_TEST

/* ---- windows the backend sees ----------------------------------------- */

struct want { uint64_t off; uint32_t count; bool sync; };

/* The requests logged since *from are exactly want[0..n) (by offset);
 * sync ones come from this thread with the client's ctx, async ones from
 * a worker with its own.  Advances *from.
 */
static void
expect_reqs (struct fake *f, size_t *from, const struct want *want,
             size_t n, int read_no)
{
  size_t got, i;
  struct req *r = fake_reqs_since (f, *from, &got);

  ck_assert_msg (got == n, "read %d: %zu backend requests, want %zu%s%"
                 PRIu64 "+%u", read_no, got, n,
                 got ? " (first " : "", got ? r[0].offset : 0,
                 got ? r[0].count : 0);
  for (i = 0; i < n; i++) {
    ck_assert_msg (r[i].offset == want[i].off && r[i].count == want[i].count,
                   "read %d: request %zu is %" PRIu64 "+%u, want %" PRIu64
                   "+%u", read_no, i, r[i].offset, r[i].count,
                   want[i].off, want[i].count);
    ck_assert_int_eq (r[i].err, 0);
    if (want[i].sync) {
      ck_assert_msg (r[i].ctx == CLIENT_CTX &&
                     pthread_equal (r[i].thread, pthread_self ()),
                     "read %d: sync request %" PRIu64 " not issued by the "
                     "reader", read_no, r[i].offset);
    }
    else {
      ck_assert_msg (r[i].ctx != CLIENT_CTX && r[i].ctx != NULL &&
                     !pthread_equal (r[i].thread, pthread_self ()),
                     "read %d: async request %" PRIu64 " not issued by a "
                     "worker", read_no, r[i].offset);
    }
  }
  free (r);
  *from += got;
}

/* The worked example of doc/readahead-rules.md: ra_max 32 pages, 16 KiB
 * reads from 0. */
static void
worked_example (uint64_t io_max)
{
  /* Windows in pages, as the example's table, and the read that triggers
   * each (after which the backend must see it).
   */
  static const struct { int read; uint64_t start, size, async; } win[] = {
    { 0, 0, 8, 4 }, { 1, 8, 16, 16 }, { 2, 24, 32, 32 },
    { 6, 56, 32, 32 }, { 14, 88, 32, 32 },
  };
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  size_t from = 0, k = 0;
  int r;

  struct fake *f = bed_fake (8 * MiB);
  c = mk_cache (f, OPTS (.ra_max = 128 * KiB, .io_max = io_max));
  s = rc_stream_new ();
  for (r = 0; r < 22; r++) {
    struct want w[64];
    size_t n = 0;

    RD_OK (c, s, f, (uint64_t) r * 16 * KiB, 16 * KiB);
    ASSERT_IDLE (c);
    if (k < 5 && win[k].read == r) {
      uint64_t sync_end = win[k].start + win[k].size - win[k].async;
      uint64_t p = win[k].start, end = win[k].start + win[k].size;

      /* Backend requests of at most io_max, never mixing the parts;
       * the first window's async part (made before the first read
       * completed) in reads of a quarter of io_max.  Its sync part is
       * the request: one read, into the client's buffer.
       */
      while (p < end) {
        uint64_t part_end = p < sync_end ? sync_end : end;
        uint64_t len = (part_end - p) * P, most = io_max;

        if (k == 0 && p >= sync_end)     /* a quarter, at least a page */
          most = io_max / 4 >= P ? io_max / 4 : P;
        if (len > most)
          len = most;
        w[n++] = (struct want) { p * P, len, p < sync_end };
        p += len / P;
      }
      k++;
    }
    expect_reqs (f, &from, w, n, r);
    ck_assert_uint_eq (ST (c, windows[RA_A_INITIAL]), 1);
    ck_assert_uint_eq (ST (c, windows[RA_B_SEQUENTIAL]), k - 1);
  }
  ck_assert_uint_eq (k, 5);
  ck_assert_uint_eq (ST (c, async_skipped), 0);
  /* Pages 0..119 were read, the reader used 0..87. */
  ck_assert_uint_eq (counts (c).pages, 120);
  ck_assert_uint_eq (counts (c).unused, 120 - 88);
  rc_stream_free (s);
}

START_TEST (test_worked_example)
{
  worked_example (128 * KiB);
}
END_TEST

START_TEST (test_worked_example_small_io)
{
  worked_example (32 * KiB);
}
END_TEST

/* Random reads read exactly the pages they name (branch G). */
START_TEST (test_random_exact)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  uint64_t seed = 99;
  unsigned slots[100], i, n = 100;
  size_t from = 0;

  struct fake *f = bed_fake (16 * P * (n + 2));
  c = mk_cache (f, OPTS ());
  s = rc_stream_new ();
  /* Slot k is pages [16k, 16k + 8): far from every other read, so no
   * read is next to the previous one (E) or to cached pages (F).
   */
  for (i = 0; i < n; i++)
    slots[i] = i + 1;
  for (i = n - 1; i > 0; i--) {
    unsigned j = xorshift (&seed) % (i + 1), t = slots[i];
    slots[i] = slots[j];
    slots[j] = t;
  }
  for (i = 0; i < n; i++) {
    uint64_t off = 16 * P * slots[i] + xorshift (&seed) % (4 * P);
    uint32_t len = 1 + xorshift (&seed) % (3 * P);
    uint64_t first = off / P, last = (off + len + P - 1) / P;
    struct want w = { first * P, (last - first) * P, true };

    RD_OK (c, s, f, off, len);
    ASSERT_IDLE (c);
    expect_reqs (f, &from, &w, 1, i);
  }
  ck_assert_uint_eq (ST (c, windows[RA_G_RANDOM]), n);
  ck_assert_uint_eq (counts (c).unused, 0);
  rc_stream_free (s);
}
END_TEST

/* ra_max = 0: exactly the request, and hits are still served. */
START_TEST (test_ra_off)
{
  struct rc_cache *c;
  struct rc_stream *s;
  size_t from = 0;
  uint64_t reads;
  int r;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS (.ra_max = 0));
  s = rc_stream_new ();
  for (r = 0; r < 16; r++) {
    struct want w = { (uint64_t) r * 16 * KiB, 16 * KiB, true };

    RD_OK (c, s, f, (uint64_t) r * 16 * KiB, 16 * KiB);
    ASSERT_IDLE (c);
    expect_reqs (f, &from, &w, 1, r);
  }
  ck_assert_uint_eq (ST (c, windows[RA_OFF]), 16);
  reads = ST (c, backend_reads);
  /* Again, unaligned: all from the cache. */
  for (r = 0; r < 16 * 4; r++)
    RD_OK (c, s, f, (uint64_t) r * 4 * KiB + 7, 4 * KiB - 7);
  ck_assert_uint_eq (ST (c, backend_reads), reads);
  ck_assert_uint_eq (fake_nlog (f), from);
  ck_assert_uint_ge (ST (c, page_hits), 16 * 4);
  rc_stream_free (s);
}
END_TEST

/* ---- congestion ------------------------------------------------------- */

struct bg_read {
  pthread_t t;
  struct rc_cache *c;
  struct rc_stream *s;
  struct fake *f;
  uint64_t off;
  uint32_t len;
  uint8_t *buf;
  int r, err;
};

static void *
bg_read_main (void *arg)
{
  struct bg_read *b = arg;

  b->r = rc_read (b->c, b->s, CLIENT_CTX, b->buf, b->len, b->off, &b->err);
  return NULL;
}

static void
bg_read_start (struct bg_read *b, struct rc_cache *c, struct rc_stream *s,
               struct fake *f, uint64_t off, uint32_t len)
{
  b->c = c;
  b->s = s;
  b->f = f;
  b->off = off;
  b->len = len;
  b->buf = malloc (len);
  b->err = 0;
  ck_assert (b->buf);
  ck_assert_int_eq (pthread_create (&b->t, NULL, bg_read_main, b), 0);
}

static void
bg_read_join (struct bg_read *b)
{
  pthread_join (b->t, NULL);
}

/* Wait for a counter to reach n. */
static bool
stat_reaches (_Atomic uint64_t *field, uint64_t n)
{
  uint64_t deadline = now_ns () + PATIENCE_NS;

  while (atomic_load (field) < n && now_ns () < deadline)
    sleep_ns (500000);
  return atomic_load (field) >= n;
}

/* A window submitted while a read is in flight (threshold 1) loses its
 * async part; nothing stays in flight; the next miss continues in B.
 */
START_TEST (test_congestion_skip)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  struct bg_read b;
  struct rc_pc_counts n;
  size_t from, got, i;
  struct req *r;
  uint64_t misses, off;
  ra_pgoff p;

  struct fake *f = bed_fake (4 * MiB);
  f->delay_ns = 1000000;                 /* a slow backend: 1 ms */
  c = mk_cache (f, OPTS (.thresh = 1));
  s = rc_stream_new ();

  /* The first window's async part (pages 4-7) is held in flight. */
  fake_set_gate (f, true, 4 * P, 8 * P);
  RD_OK (c, s, f, 0, 16 * KiB);
  ck_assert (fake_wait_blocked (f, 1));
  ck_assert_uint_eq (ST (c, windows[RA_A_INITIAL]), 1);

  /* The reader reaches the marker (page 4) while it is in flight: the
   * next window [8, 24) is decided with one read running.
   */
  bg_read_start (&b, c, s, f, 16 * KiB, 16 * KiB);
  ck_assert (stat_reaches (&rc_cache_stats (c)->async_skipped, 1));
  fake_set_gate (f, false, 0, 0);
  bg_read_join (&b);
  ck_assert_int_eq (b.r, 0);
  check_now (f, b.buf, b.off, b.len);
  free (b.buf);

  ck_assert_uint_eq (ST (c, async_skipped), 1);
  ck_assert_uint_eq (ST (c, async_skipped_pages), 16);
  ck_assert_uint_eq (ST (c, windows[RA_B_SEQUENTIAL]), 1);
  ASSERT_IDLE (c);
  n = counts (c);
  ck_assert_uint_eq (n.inflight, 0);
  ck_assert_uint_eq (n.pages, 8);
  ck_assert_uint_eq (n.uptodate, 8);
  for (p = 8; p < 24; p++)
    ck_assert_msg (!cached (c, p), "skipped page %" PRIu64 " cached", p);
  r = fake_reqs_since (f, 0, &got);
  for (i = 0; i < got; i++)
    ck_assert_msg (r[i].offset + r[i].count <= 8 * P,
                   "skipped pages were read: %" PRIu64 "+%u",
                   r[i].offset, r[i].count);
  free (r);
  from = got;

  /* The next read misses at page 8 = start + size: branch B, sync. */
  misses = ST (c, page_misses);
  RD_OK (c, s, f, 32 * KiB, 16 * KiB);
  ck_assert_uint_eq (ST (c, page_misses), misses + 1);
  ck_assert_uint_eq (ST (c, windows[RA_B_SEQUENTIAL]), 2);
  ASSERT_IDLE (c);
  {
    struct want w[2] = { { 8 * P, 4 * P, true }, { 12 * P, 4 * P, false } };
    expect_reqs (f, &from, w, 2, 2);
  }

  /* The stream goes on (skipping more or not): data right, B windows. */
  for (off = 48 * KiB; off < 2 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  ck_assert_uint_gt (ST (c, windows[RA_B_SEQUENTIAL]), 4);
  ASSERT_IDLE (c);
  n = counts (c);
  ck_assert_uint_eq (n.inflight, 0);
  ck_assert_uint_eq (n.pages, n.uptodate);
  ck_assert_uint_eq (ST (c, backend_errors), 0);
  rc_stream_free (s);
}
END_TEST

/* Does a logged request touch [lo, hi)? */
static bool
logged_in (struct fake *f, uint64_t lo, uint64_t hi)
{
  size_t got, i;
  struct req *r = fake_reqs_since (f, 0, &got);
  bool hit = false;

  for (i = 0; i < got; i++)
    if (r[i].offset < hi && r[i].offset + r[i].count > lo)
      hit = true;
  free (r);
  return hit;
}

/* Wait (PATIENCE_NS at most) until a request touching [lo, hi) is
 * logged.
 */
static bool
logged_soon (struct fake *f, uint64_t lo, uint64_t hi)
{
  uint64_t deadline = now_ns () + PATIENCE_NS;

  do {
    if (logged_in (f, lo, hi))
      return true;
    sleep_ns (200000);
  } while (now_ns () < deadline);
  return false;
}

/* Make the clients' sync reads queue (the estimator's queued_now):
 * two random 16K reads at the fake's speed set their base latency, a
 * third that takes 20 ms is far above it.  Far from the tests' windows.
 */
static void
sync_reads_queue (struct rc_cache *c, struct fake *f)
{
  struct rc_stream *r = rc_stream_new ();
  struct rc_cong_estimate est;
  long delay = f->delay_ns;

  f->delay_ns = 0;
  RD_OK (c, r, f, 3 * MiB, 16 * KiB);
  RD_OK (c, r, f, 3 * MiB + 256 * KiB, 16 * KiB);
  f->delay_ns = 20000000;
  RD_OK (c, r, f, 3 * MiB + 512 * KiB, 16 * KiB);
  f->delay_ns = delay;
  rc_cache_congestion (c, &est);
  ck_assert_uint_gt (est.queue_delay_ns, 1000000);
  rc_stream_free (r);
}

/* A stream's first read (pages 0-3) is held at the backend; its
 * window's async part is pages 4-7.  While the clients' sync reads do not
 * queue (queued false: nothing measured yet), the async part is read
 * beside the held sync part.  While they queue, it is queued once its
 * own sync part has been read: not read while the sync read is held,
 * read after it.
 */
static void
async_part_beside_held_sync (bool queued)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  struct bg_read b;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS ());
  if (queued)
    sync_reads_queue (c, f);
  s = rc_stream_new ();
  fake_set_gate (f, true, 0, 4 * P);
  bg_read_start (&b, c, s, f, 0, 16 * KiB);
  ck_assert (fake_wait_blocked (f, 1));
  if (!queued)
    ck_assert_msg (logged_soon (f, 4 * P, 8 * P),
                   "the async part waited for its own sync part");
  else {
    sleep_ns (100000000);       /* time enough for a worker to start it */
    ck_assert_msg (!logged_in (f, 4 * P, 8 * P),
                   "the async part was read before its own sync part");
  }
  fake_set_gate (f, false, 0, 0);
  bg_read_join (&b);
  ck_assert_int_eq (b.r, 0);
  check_now (f, b.buf, b.off, b.len);
  free (b.buf);
  ck_assert_uint_eq (ST (c, windows[RA_A_INITIAL]), 1);
  if (queued)
    ck_assert (logged_soon (f, 4 * P, 8 * P));
  ASSERT_IDLE (c);
  rc_stream_free (s);
}

START_TEST (test_async_beside_own_sync)
{
  async_part_beside_held_sync (false);
}
END_TEST

START_TEST (test_async_after_own_sync)
{
  async_part_beside_held_sync (true);
}
END_TEST

/* Stream other's one-page read of page 700, held at the backend (the
 * gate over pages 512-1023) until release_held_read.
 */
static void
hold_read (struct bg_read *b, struct rc_cache *c, struct rc_stream *other,
           struct fake *f)
{
  fake_set_gate (f, true, 512 * 4096, 1024 * 4096);
  bg_read_start (b, c, other, f, 700 * 4096, 4096);
  ck_assert (fake_wait_blocked (f, 1));
}

/* Open the gate; the held read succeeds with the export's data. */
static void
release_held_read (struct bg_read *b, struct fake *f)
{
  fake_set_gate (f, false, 0, 0);
  bg_read_join (b);
  ck_assert_int_eq (b->r, 0);
  check_now (f, b->buf, b->off, b->len);
  free (b->buf);
}

/* Another client's sync read does not hold speculation back: while a
 * random reader's read is held at the backend, a new stream's first
 * window has its async part read.
 */
START_TEST (test_async_beside_others_sync)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *random, *s;
  struct bg_read b;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS ());
  random = rc_stream_new ();
  s = rc_stream_new ();
  hold_read (&b, c, random, f);
  RD_OK (c, s, f, 0, 16 * KiB);
  ck_assert_uint_eq (ST (c, windows[RA_A_INITIAL]), 1);
  ck_assert_msg (logged_soon (f, 4 * P, 8 * P),
                 "the async part waited for another client's read");
  ck_assert_uint_eq (fake_read (f, &f->gate_blocked), 1);
  release_held_read (&b, f);
  ASSERT_IDLE (c);
  rc_stream_free (s);
  rc_stream_free (random);
}
END_TEST

/* A window whose async part may not be kept (the threshold of reads in
 * flight is reached: here 1, by another stream's held read) reads just
 * the client's request, around the cache: no page is made for it, the
 * stream state shrinks by the dropped part, and the next read goes on
 * sequentially.
 */
START_TEST (test_drop_reads_around)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s, *other;
  struct bg_read b;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS (.thresh = 1));
  s = rc_stream_new ();
  other = rc_stream_new ();
  fake_set_gate (f, true, 1 * MiB, 1 * MiB + P);
  bg_read_start (&b, c, other, f, 1 * MiB, P);
  ck_assert (fake_wait_blocked (f, 1));
  RD_OK (c, s, f, 0, 16 * P);
  ck_assert_uint_eq (ST (c, read_around_pages), 16);
  ck_assert_uint_ge (ST (c, async_skipped), 1);
  ck_assert (!cached (c, 0) && !cached (c, 15) && !cached (c, 16));
  fake_set_gate (f, false, 0, 0);
  bg_read_join (&b);
  ck_assert_int_eq (b.r, 0);
  free (b.buf);
  RD_OK (c, s, f, 16 * P, 16 * P);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (ST (c, windows[RA_G_RANDOM]), 1);   /* the other's */
  rc_stream_free (s);
  rc_stream_free (other);
}
END_TEST

/* A random read (branch G) of a quarter of ra-io-max or more by a client
 * with another read in flight is read around the cache; one by a client
 * with no other read in flight, or a smaller one, keeps its pages; and
 * the same data read again is kept (its groups were given back).
 */
START_TEST (test_large_random_read_around)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  struct bg_read b;
  uint64_t around;

  struct fake *f = bed_fake (64 * MiB);
  c = mk_cache (f, OPTS (.io_max = 1 * MiB, .cache = 32 * MiB));
  s = rc_stream_new ();
  /* Depth 1: kept. */
  RD_OK (c, s, f, 16 * MiB, 512 * KiB);
  ck_assert_uint_eq (ST (c, windows[RA_G_RANDOM]), 1);
  ck_assert_uint_eq (ST (c, read_around_pages), 0);
  ck_assert (cached (c, 16 * MiB / P) && cached (c, (16 * MiB + 508 * KiB) / P));
  /* A read of the stream held in flight: depth 2. */
  fake_set_gate (f, true, 0, 64 * KiB);
  bg_read_start (&b, c, s, f, 0, 64 * KiB);
  ck_assert (fake_wait_blocked (f, 1));
  RD_OK (c, s, f, 40 * MiB, 512 * KiB);           /* large: around */
  ck_assert_uint_eq (ST (c, windows[RA_G_RANDOM]), 2);
  ck_assert_uint_eq (ST (c, read_around_pages), 128);
  ck_assert (!cached (c, 40 * MiB / P) && !cached (c, (40 * MiB + 508 * KiB) / P));
  RD_OK (c, s, f, 48 * MiB, 64 * KiB);            /* small: kept */
  ck_assert_uint_eq (ST (c, windows[RA_G_RANDOM]), 3);
  ck_assert_uint_eq (ST (c, read_around_pages), 128);
  ck_assert (cached (c, 48 * MiB / P));
  around = ST (c, read_around_pages);
  RD_OK (c, s, f, 40 * MiB, 512 * KiB);           /* read again: kept */
  ck_assert_uint_eq (ST (c, read_around_pages), around);
  ck_assert (cached (c, 40 * MiB / P) && cached (c, (40 * MiB + 508 * KiB) / P));
  fake_set_gate (f, false, 0, 0);
  bg_read_join (&b);
  ck_assert_int_eq (b.r, 0);
  free (b.buf);
  ASSERT_IDLE (c);
  rc_stream_free (s);
  free_cache (c, f);
}
END_TEST

/* A deep sequential client's read that arrives ahead of the stream's
 * position (the server's threads race) is decided as random (branch G)
 * but lies within the stream's reads in flight: it is no random reader
 * waiting, and another stream does not yield to it.
 */
START_TEST (test_reordered_no_yield)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s, *s2;
  struct bg_read b0, b1;

  struct fake *f = bed_fake (8 * MiB);
  /* Reads of 512K, more than the stream keeps in flight: not covered. */
  c = mk_cache (f, OPTS (.io_max = 512 * KiB));
  s = rc_stream_new ();
  s2 = rc_stream_new ();
  /* The gate holds the window's sync part and its async part, which
   * b1's wait promotes (and b1 reads ahead to 64).
   */
  fake_set_gate (f, true, 0, 32 * P);
  bg_read_start (&b0, c, s, f, 0, 16 * P);       /* held */
  ck_assert (fake_wait_blocked (f, 1));
  bg_read_start (&b1, c, s, f, 16 * P, 16 * P);  /* waits for it */
  sleep_ns (100000000);
  RD_OK (c, s, f, 80 * P, 16 * P);               /* ahead: branch G */
  ck_assert_uint_eq (ST (c, windows[RA_G_RANDOM]), 1);
  RD_OK (c, s2, f, 4 * MiB, 16 * P);             /* another stream */
  ck_assert_uint_eq (ST (c, windows_yielded), 0);
  fake_set_gate (f, false, 0, 0);
  bg_read_join (&b0);
  bg_read_join (&b1);
  ck_assert_int_eq (b0.r, 0);
  ck_assert_int_eq (b1.r, 0);
  free (b0.buf);
  free (b1.buf);
  ASSERT_IDLE (c);
  rc_stream_free (s);
  rc_stream_free (s2);
}
END_TEST

/* More clients wait for pages of a window's async part than the 16 a
 * fixed list once held, all while the window's sync part is read (held
 * here at the gate), when its async jobs are parked: every one of their
 * jobs is promoted among the sync jobs at once and read although the
 * sync read is still held; the others wait for the sync read.
 */
START_TEST (test_promote_many)
{
  const uint64_t P = 4096;
  enum { NWAIT = 20 };
  struct rc_cache *c;
  struct rc_stream *s, *w[NWAIT];
  struct bg_read a, b[NWAIT];
  int k;

  struct fake *f = bed_fake (4 * MiB);
  /* Kernel mode: read 128 pages at 0, a window of 256 pages whose async
   * part (128..255) is 32 jobs of 4 pages.
   */
  c = mk_cache (f, OPTS (.mode = RA_MODE_KERNEL, .cache = 16 * MiB,
                         .ra_max = 1 * MiB, .io_max = 16 * KiB));
  sync_reads_queue (c, f);      /* so that the async part is parked */
  s = rc_stream_new ();
  fake_set_gate (f, true, 0, 128 * P);
  bg_read_start (&a, c, s, f, 0, 128 * P);
  ck_assert (fake_wait_blocked (f, 1));
  for (k = 0; k < NWAIT; k++) {
    w[k] = rc_stream_new ();
    bg_read_start (&b[k], c, w[k], f, (128 + 4 * k + 1) * P, 100);
  }
  for (k = 0; k < NWAIT; k++) {
    bg_read_join (&b[k]);       /* while a is held */
    ck_assert_int_eq (b[k].r, 0);
    check_now (f, b[k].buf, b[k].off, b[k].len);
    free (b[k].buf);
    rc_stream_free (w[k]);
  }
  ck_assert_uint_eq (ST (c, async_promoted), NWAIT);
  ck_assert_uint_eq (fake_read (f, &f->gate_blocked), 1);
  ck_assert_msg (!logged_in (f, (128 + 4 * NWAIT) * P, 256 * P),
                 "an async job nobody waits for was read before its "
                 "window's sync part");
  fake_set_gate (f, false, 0, 0);
  bg_read_join (&a);
  ck_assert_int_eq (a.r, 0);
  free (a.buf);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (ST (c, windows[RA_A_INITIAL]), 1);
  ck_assert_uint_eq (ST (c, async_promoted), NWAIT);
  rc_stream_free (s);
}
END_TEST

/* Once a window's sync part is read, its async part's jobs go to the
 * workers all at once: with the async part held at the gate, several of
 * its reads wait there together (one worker woken for all of them would
 * read them one after another).
 */
START_TEST (test_unparked_jobs_wake_workers)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;

  struct fake *f = bed_fake (4 * MiB);
  /* As test_promote_many: an async part of 32 jobs of 4 pages. */
  c = mk_cache (f, OPTS (.mode = RA_MODE_KERNEL, .cache = 16 * MiB,
                         .ra_max = 1 * MiB, .io_max = 16 * KiB));
  sync_reads_queue (c, f);      /* so that the async part is parked */
  s = rc_stream_new ();
  fake_set_gate (f, true, 128 * P, 256 * P);
  RD_OK (c, s, f, 0, 128 * P);
  ck_assert_msg (fake_wait_blocked (f, 4),
                 "the async part's jobs were not read side by side");
  fake_set_gate (f, false, 0, 0);
  ASSERT_IDLE (c);
  rc_stream_free (s);
}
END_TEST

/* The threads of this process now (/proc/self/task). */
static unsigned
threads_now (void)
{
  FILE *fp = fopen ("/proc/self/status", "r");
  char line[128];
  unsigned n = 0;

  ck_assert_ptr_nonnull (fp);
  while (fgets (line, sizeof line, fp))
    if (sscanf (line, "Threads: %u", &n) == 1)
      break;
  fclose (fp);
  ck_assert_uint_gt (n, 0);
  return n;
}

/* Workers start as jobs wait for them (src/workers.c, rc_workers_grow):
 * a new cache runs one worker (and the connector), not
 * ra-max-background of them; an async part of many jobs held at the
 * gate starts more, up to ra-max-background (4 here) and no further.
 * (Counted against the threads after the cache is freed, not before it
 * is made: ThreadSanitizer starts a thread of its own with the first
 * thread a process creates.)
 */
START_TEST (test_workers_on_demand)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  unsigned made, grown;

  struct fake *f = bed_fake (4 * MiB);
  /* As test_unparked_jobs_wake_workers: an async part of 32 jobs. */
  c = mk_cache (f, OPTS (.mode = RA_MODE_KERNEL, .cache = 16 * MiB,
                         .ra_max = 1 * MiB, .io_max = 16 * KiB));
  made = threads_now ();
  sync_reads_queue (c, f);
  s = rc_stream_new ();
  fake_set_gate (f, true, 128 * P, 256 * P);
  RD_OK (c, s, f, 0, 128 * P);
  ck_assert (fake_wait_blocked (f, 4));
  sleep_ns (50000000);
  grown = threads_now ();
  fake_set_gate (f, false, 0, 0);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (threads_now (), grown);
  rc_stream_free (s);
  free_cache (c, f);
  /* One worker and the connector at first; four workers at most. */
  ck_assert_uint_eq (made, threads_now () + 2);
  ck_assert_uint_eq (grown, threads_now () + 1 + 4);
}
END_TEST

/* A client waits for a page whose async read is already running (not
 * queued): once its wait is over, nothing of it is left to promote a
 * later async read of that page that nobody waits for.
 */
START_TEST (test_promote_not_stale)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s, *s2, *s3;
  struct bg_read b;

  struct fake *f = bed_fake (4 * MiB);
  /* Kernel mode: 4 pages at 0, a window of 16 whose async part is jobs
   * [4, 8), [8, 12), [12, 16).
   */
  c = mk_cache (f, OPTS (.mode = RA_MODE_KERNEL, .ra_max = 128 * KiB,
                         .io_max = 16 * KiB));
  s = rc_stream_new ();
  fake_set_gate (f, true, 4 * P, 8 * P);
  RD_OK (c, s, f, 0, 4 * P);
  ck_assert (fake_wait_blocked (f, 1));        /* a worker reads [4, 8) */
  s2 = rc_stream_new ();
  bg_read_start (&b, c, s2, f, 5 * P, 100);     /* waits for page 5 */
  sleep_ns (200000000);
  fake_set_gate (f, false, 0, 0);
  bg_read_join (&b);
  ck_assert_int_eq (b.r, 0);
  free (b.buf);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (ST (c, async_promoted), 0);
  /* The same window again, read by a fresh stream: no one waits. */
  rc_invalidate (c, 0, 64 * P);
  s3 = rc_stream_new ();
  RD_OK (c, s3, f, 0, 4 * P);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (ST (c, windows[RA_A_INITIAL]), 2);
  ck_assert_uint_eq (ST (c, async_promoted), 0);
  rc_stream_free (s);
  rc_stream_free (s2);
  rc_stream_free (s3);
}
END_TEST

/* The yield bound: a sequential stream yields (windows_yielded) after a
 * client of another stream waited for a read at random, not when it is
 * alone and not to its own random reads.  Nor to another stream's first
 * read, which is branch G wherever it lies (no history): streams that
 * start together each at an offset of their own (fio's jobs, nbdcopy's
 * connections) must not yield to each other.
 */
START_TEST (test_yield_to_random)
{
  struct opts o = OPTS (.ra_max = 2 * MiB, .io_max = 256 * KiB,
                        .bg = 12, .thresh = 9, .cache = 16 * MiB);
  struct rc_cache *c;
  struct rc_stream *random, *s;
  uint64_t off;

  struct fake *f = bed_fake (64 * MiB);

  /* Alone. */
  c = mk_cache (f, o);
  s = rc_stream_new ();
  for (off = 0; off < 4 * MiB; off += 64 * KiB)
    RD_OK (c, s, f, off, 64 * KiB);
  ck_assert_uint_gt (ST (c, windows[RA_B_SEQUENTIAL]), 0);
  ck_assert_uint_eq (ST (c, windows_yielded), 0);
  /* Its own random reads: no yield to itself. */
  RD_OK (c, s, f, 48 * MiB, 4 * KiB);
  RD_OK (c, s, f, 32 * MiB, 4 * KiB);
  ck_assert_uint_ge (ST (c, windows[RA_G_RANDOM]), 1);
  for (off = 8 * MiB; off < 12 * MiB; off += 64 * KiB)
    RD_OK (c, s, f, off, 64 * KiB);
  ck_assert_uint_eq (ST (c, windows_yielded), 0);
  ASSERT_IDLE (c);
  rc_stream_free (s);
  free_cache (c, f);

  /* Beside another stream: its first read, then a random reader's. */
  c = mk_cache (f, o);
  random = rc_stream_new ();
  s = rc_stream_new ();
  RD_OK (c, random, f, 48 * MiB, 4 * KiB);
  ck_assert_uint_eq (ST (c, windows[RA_G_RANDOM]), 1);
  for (off = 0; off < 4 * MiB; off += 64 * KiB)
    RD_OK (c, s, f, off, 64 * KiB);
  ck_assert_uint_eq (ST (c, windows_yielded), 0);
  RD_OK (c, random, f, 32 * MiB, 4 * KiB);
  ck_assert_uint_ge (ST (c, windows[RA_G_RANDOM]), 2);
  for (off = 4 * MiB; off < 8 * MiB; off += 64 * KiB)
    RD_OK (c, s, f, off, 64 * KiB);
  ck_assert_uint_gt (ST (c, windows_yielded), 0);
  ASSERT_IDLE (c);
  rc_stream_free (s);
  rc_stream_free (random);
}
END_TEST

/* The largest of the backend reads logged from request from on that
 * start at lo or after; *n: how many there are.
 */
static uint32_t
largest_read_since (struct fake *f, size_t from, uint64_t lo, size_t *n)
{
  size_t got, i;
  struct req *r = fake_reqs_since (f, from, &got);
  uint32_t most = 0;

  *n = 0;
  for (i = 0; i < got; i++)
    if (r[i].offset >= lo) {
      (*n)++;
      if (r[i].count > most)
        most = r[i].count;
    }
  free (r);
  return most;
}

/* Before a stream's first read has completed, its windows are read in
 * backend reads of a quarter of ra-io-max (first_reads_quarter); once
 * one has, in reads of ra-io-max again.  Kernel mode keeps the kernel's
 * rules: ra-io-max from the first window.
 */
START_TEST (test_first_window_quarter_reads)
{
  struct rc_cache *c;
  struct rc_stream *s;
  size_t from, n;
  uint64_t off, first_async;

  struct fake *f = bed_fake (16 * MiB);
  /* A first read of 1 MiB: its window's async part of 1 MiB or more
   * (the sync part is the request: one read into the client's buffer).
   */
  c = mk_cache (f, OPTS (.ra_max = 4 * MiB, .io_max = 1 * MiB,
                         .cache = 16 * MiB));
  s = rc_stream_new ();
  RD_OK (c, s, f, 0, 1 * MiB);
  ASSERT_IDLE (c);
  first_async = ST (c, async_pages);
  ck_assert_uint_ge (first_async, 256);
  ck_assert_uint_eq (largest_read_since (f, 0, 1 * MiB, &n), 256 * KiB);
  ck_assert_uint_eq (n, first_async / 64);
  /* The next windows: reads of ra-io-max. */
  from = fake_nlog (f);
  for (off = 1 * MiB; off < 8 * MiB; off += 1 * MiB)
    RD_OK (c, s, f, off, 1 * MiB);
  ASSERT_IDLE (c);
  ck_assert_uint_gt (ST (c, async_pages), first_async);
  ck_assert_uint_eq (largest_read_since (f, from, 2 * MiB, &n), 1 * MiB);
  rc_stream_free (s);
  free_cache (c, f);

  c = mk_cache (f, OPTS (.mode = RA_MODE_KERNEL, .ra_max = 4 * MiB,
                         .io_max = 1 * MiB, .cache = 16 * MiB));
  s = rc_stream_new ();
  from = fake_nlog (f);
  RD_OK (c, s, f, 0, 1 * MiB);
  ASSERT_IDLE (c);
  ck_assert_uint_gt (ST (c, async_pages), 0);
  ck_assert_uint_eq (largest_read_since (f, from, 1 * MiB, &n), 1 * MiB);
  rc_stream_free (s);
}
END_TEST

/* A slow backend and a low threshold, no gate: skips happen, nothing
 * leaks, the data is right.
 */
START_TEST (test_congestion_slow)
{
  struct rc_cache *c;
  struct rc_stream *s;
  struct rc_pc_counts n;
  uint64_t off;

  struct fake *f = bed_fake (4 * MiB);
  f->delay_ns = 3000000;
  c = mk_cache (f, OPTS (.thresh = 1));
  s = rc_stream_new ();
  for (off = 0; off < 1 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  ck_assert_uint_gt (ST (c, async_skipped), 0);
  ck_assert_uint_gt (ST (c, windows[RA_B_SEQUENTIAL]), 0);
  ASSERT_IDLE (c);
  n = counts (c);
  ck_assert_uint_eq (n.inflight, 0);
  ck_assert_uint_eq (n.pages, n.uptodate);
  rc_stream_free (s);
}
END_TEST

/* ra-congestion=wait: async parts are held back, never skipped. */
START_TEST (test_congestion_wait)
{
  struct rc_cache *c;
  struct rc_stream *s;
  uint64_t off;

  struct fake *f = bed_fake (4 * MiB);
  f->delay_ns = 2000000;
  c = mk_cache (f, OPTS (.thresh = 1, .io_max = 16 * KiB,
                          .policy = RC_CONGESTION_WAIT));
  s = rc_stream_new ();
  for (off = 0; off < 1 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  ck_assert_uint_eq (ST (c, async_skipped), 0);
  ck_assert_uint_gt (ST (c, async_delayed), 0);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (counts (c).inflight, 0);
  rc_stream_free (s);
}
END_TEST

/* The connection of a stream closed (rc_stream_closed): the async reads
 * of its windows still queued are dropped, not read.  Here the first
 * window's async part (pages 4-7) is held back by ra-congestion=wait's
 * threshold of 1 while another stream's read is held at the backend.
 */
START_TEST (test_closed_stream_drops_queued_async)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *other, *s;
  struct bg_read b;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS (.thresh = 1, .mode = RA_MODE_KERNEL,
                          .policy = RC_CONGESTION_WAIT));
  other = rc_stream_new ();
  s = rc_stream_new ();
  hold_read (&b, c, other, f);
  RD_OK (c, s, f, 0, 16 * KiB);
  ck_assert_uint_eq (ST (c, windows[RA_A_INITIAL]), 1);
  rc_stream_closed (c, s);
  ck_assert_uint_eq (ST (c, async_cancelled_pages), 4);
  release_held_read (&b, f);
  ASSERT_IDLE (c);
  ck_assert_msg (!logged_in (f, 4 * P, 8 * P),
                 "the closed stream's queued async part was read");
  /* Its pages went back to absent: a new reader misses there. */
  RD_OK (c, other, f, 4 * P, P);
  ck_assert (logged_soon (f, 4 * P, 5 * P));
  ASSERT_IDLE (c);
  rc_stream_free (s);
  rc_stream_free (other);
}
END_TEST

/* ---- errors ----------------------------------------------------------- */

START_TEST (test_sync_error)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS ());

  /* By range: the reader gets the backend's errno. */
  s = rc_stream_new ();
  fake_set_errors (f, 40 * KiB, 40 * KiB + 1, ENXIO);
  ck_assert_int_eq (rd (c, s, f, 40 * KiB, 8 * KiB), ENXIO);
  ck_assert_uint_eq (ST (c, backend_errors), 1);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (counts (c).pages, 0);
  fake_set_errors (f, 0, 0, 0);
  RD_OK (c, s, f, 40 * KiB, 8 * KiB);
  rc_stream_free (s);

  /* By count. */
  s = rc_stream_new ();
  f->fail_next = 1;
  f->fail_errno = EROFS;
  ck_assert_int_eq (rd (c, s, f, 100 * KiB, 100), EROFS);
  RD_OK (c, s, f, 100 * KiB, 100);
  rc_stream_free (s);

  /* A backend that fails without an errno: EIO. */
  s = rc_stream_new ();
  f->fail_next = 1;
  f->fail_errno = 0;
  ck_assert_int_eq (rd (c, s, f, 200 * KiB, 100), EIO);
  RD_OK (c, s, f, 200 * KiB, 100);
  rc_stream_free (s);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (counts (c).inflight, 0);
  free_cache (c, f);

  /* A sync part of several backend reads (io_max 2 pages; pages 20..27,
   * branch G): the third batch fails, read by a worker; the reader
   * still gets its errno, and only that batch is missing afterwards.
   * (The read starts and ends inside a page: a sync part wholly inside
   * the client's buffer would be one backend read straight into it.)
   */
  c = mk_cache (f, OPTS (.io_max = 8 * KiB));
  s = rc_stream_new ();
  fake_set_errors (f, 24 * P, 24 * P + 1, ENOSPC);
  ck_assert_int_eq (rd (c, s, f, 20 * P + 1, 8 * P - 2), ENOSPC);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (counts (c).pages, 6);
  ck_assert (!cached (c, 24) && !cached (c, 25));
  fake_set_errors (f, 0, 0, 0);
  {
    size_t from = fake_nlog (f);
    struct want w = { 24 * P, 2 * P, true };
    RD_OK (c, s, f, 20 * P + 1, 8 * P - 2);
    ASSERT_IDLE (c);
    expect_reqs (f, &from, &w, 1, 0);
  }

  /* The same sync part read page-aligned lies wholly in the client's
   * buffer: one backend read of 8 pages straight into it, by this
   * thread, however small io_max is (as the client's read would reach
   * the backend without the filter).
   */
  {
    size_t from = fake_nlog (f);
    struct rc_stream *s2 = rc_stream_new ();
    struct want w = { 60 * P, 8 * P, true };
    RD_OK (c, s2, f, 60 * P, 8 * P);
    ASSERT_IDLE (c);
    expect_reqs (f, &from, &w, 1, 0);
    ck_assert (cached (c, 60) && cached (c, 67));
    rc_stream_free (s2);
  }

  /* rc_fill returns the error too. */
  fake_set_errors (f, 1 * MiB + 5 * P, 1 * MiB + 5 * P + 1, EPERM);
  {
    int err = 0;
    ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 64 * KiB, 1 * MiB, &err), -1);
    ck_assert_int_eq (err, EPERM);
  }
  fake_set_errors (f, 0, 0, 0);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (counts (c).inflight, 0);
  rc_stream_free (s);
}
END_TEST

/* A sync part that reaches past the client's request (branch F,
 * context readahead: the page before it is cached up to page 0) and
 * whose extra batch fails, while the client's own page, read already,
 * is given back (here by a write's invalidation, as drop-behind may):
 * the client's read succeeds; the failed batch is not its.
 */
START_TEST (test_extra_batch_error)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  struct bg_read b;
  int err = 0;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS (.mode = RA_MODE_KERNEL, .ra_max = 128 * KiB,
                         .io_max = 8 * KiB));
  /* Pages 0..15 cached (forced, no stream). */
  ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 16 * P, 0, &err), 0);
  ASSERT_IDLE (c);
  s = rc_stream_new ();
  fake_set_errors (f, 18 * P, 18 * P + 1, EIO);
  fake_set_gate (f, true, 18 * P, 20 * P);
  bg_read_start (&b, c, s, f, 16 * P, P);
  ck_assert (fake_wait_blocked (f, 1));         /* [18, 20) held */
  ck_assert (cached (c, 16));
  rc_invalidate (c, 16 * P, P);
  fake_set_gate (f, false, 0, 0);
  bg_read_join (&b);
  ck_assert_uint_ge (ST (c, windows[RA_F_CONTEXT]), 1);
  ck_assert_msg (b.r == 0, "the client got %s for another page's read",
                 strerror (b.err));
  check_now (f, b.buf, b.off, b.len);
  free (b.buf);
  fake_set_errors (f, 0, 0, 0);
  ASSERT_IDLE (c);
  rc_stream_free (s);
}
END_TEST

/* A failed async read drops its pages; the reader never sees the
 * error and the pages are read again on demand.
 */
START_TEST (test_async_error)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  size_t from, got, i;
  struct req *r;
  bool reread = false;
  ra_pgoff p;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS ());
  s = rc_stream_new ();
  fake_set_errors (f, 4 * P, 8 * P, EIO);
  RD_OK (c, s, f, 0, 16 * KiB);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (ST (c, backend_errors), 1);
  for (p = 4; p < 8; p++)
    ck_assert (!cached (c, p));
  ck_assert_uint_eq (counts (c).pages, 4);
  fake_set_errors (f, 0, 0, 0);
  from = fake_nlog (f);
  RD_OK (c, s, f, 16 * KiB, 16 * KiB);
  ASSERT_IDLE (c);
  r = fake_reqs_since (f, from, &got);
  for (i = 0; i < got; i++)
    if (r[i].offset == 4 * P && r[i].ctx == CLIENT_CTX)
      reread = true;
  free (r);
  ck_assert_msg (reread, "the failed pages were not read again on demand");
  ck_assert_uint_eq (counts (c).inflight, 0);
  rc_stream_free (s);
}
END_TEST

/* Every worker read fails: a sequential reader never gets an error. */
START_TEST (test_async_error_persistent)
{
  struct rc_cache *c;
  struct rc_stream *s;
  uint64_t off;

  struct fake *f = bed_fake (4 * MiB);
  f->fail_workers = true;
  c = mk_cache (f, OPTS ());
  s = rc_stream_new ();
  for (off = 0; off < 2 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  ck_assert_uint_gt (ST (c, backend_errors), 0);
  ASSERT_IDLE (c);
  ck_assert_uint_eq (counts (c).inflight, 0);
  ck_assert_uint_eq (counts (c).pages, counts (c).uptodate);
  rc_stream_free (s);
}
END_TEST

/* ---- writes ----------------------------------------------------------- */

/* Is buf entirely the old (a copy) or entirely the new export data? */
static void
check_old_or_new (struct fake *f, const uint8_t *buf, const uint8_t *old,
                  uint64_t off, uint32_t len)
{
  bool is_old = memcmp (buf, old, len) == 0, is_new;

  pthread_mutex_lock (&f->lock);
  is_new = memcmp (buf, f->data + off, len) == 0;
  pthread_mutex_unlock (&f->lock);
  ck_assert_msg (is_old || is_new, "a read racing with a write returned "
                 "neither the old nor the new data");
}

/* A client's own (sync) read is in flight when the write happens. */
START_TEST (test_invalidate_inflight_sync)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  struct bg_read b;
  uint8_t old[4096];

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS ());
  s = rc_stream_new ();
  memcpy (old, f->data + 10 * P, P);
  fake_set_gate (f, true, 10 * P, 11 * P);
  bg_read_start (&b, c, s, f, 10 * P, P);      /* branch G: page 10 */
  ck_assert (fake_wait_blocked (f, 1));        /* holding the old data */
  fake_write (f, 10 * P, P);
  rc_invalidate (c, 10 * P, P);
  fake_commit (f, 10 * P, P);
  fake_set_gate (f, false, 0, 0);
  bg_read_join (&b);
  ck_assert_int_eq (b.r, 0);
  check_old_or_new (f, b.buf, old, 10 * P, P);
  free (b.buf);
  ck_assert_uint_ge (ST (c, invalidated_pages), 1);
  ASSERT_IDLE (c);
  /* The old data was not installed. */
  RD_OK (c, s, f, 10 * P, P);
  RD_OK (c, s, f, 10 * P + 1, P - 2);
  rc_stream_free (s);
}
END_TEST

/* A worker's (async) read is in flight when the write happens. */
START_TEST (test_invalidate_inflight_async)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  ra_pgoff p;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS ());
  s = rc_stream_new ();
  fake_set_gate (f, true, 4 * P, 8 * P);
  RD_OK (c, s, f, 0, 16 * KiB);                /* async part: 4..7 */
  ck_assert (fake_wait_blocked (f, 1));
  fake_write (f, 5 * P, 2 * P);
  rc_invalidate (c, 5 * P + 10, 2 * P - 20);
  fake_commit (f, 5 * P, 2 * P);
  fake_set_gate (f, false, 0, 0);
  ASSERT_IDLE (c);
  ck_assert (!cached (c, 5) && !cached (c, 6));
  ck_assert (cached (c, 4) && cached (c, 7));
  for (p = 4; p < 8; p++)
    RD_OK (c, s, f, p * P, P);
  RD_OK (c, s, f, 0, 8 * P);
  ASSERT_IDLE (c);
  rc_stream_free (s);
}
END_TEST

/* Cached pages: dropped by any overlap, partial or unaligned. */
START_TEST (test_invalidate_cached)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  struct rc_pc_counts n;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS (.ra_max = 0));
  s = rc_stream_new ();
  RD_OK (c, s, f, 0, 16 * P);
  n = counts (c);
  ck_assert_uint_eq (n.pages, 16);

  rc_invalidate (c, 3 * P, 0);                  /* nothing */
  ck_assert_uint_eq (counts (c).pages, 16);

  fake_write (f, 2 * P + 512, 512);
  rc_invalidate (c, 2 * P + 600, 1);            /* one byte of page 2 */
  ck_assert (!cached (c, 2));
  ck_assert_uint_eq (counts (c).pages, 15);
  RD_OK (c, s, f, 0, 16 * P);

  fake_write (f, 5 * P - 512, 1024);           /* straddles 4/5 */
  rc_invalidate (c, 5 * P - 1, 2);
  ck_assert (!cached (c, 4) && !cached (c, 5) && cached (c, 6));
  RD_OK (c, s, f, 4 * P - 100, 2 * P + 200);
  RD_OK (c, s, f, 0, 16 * P);
  rc_stream_free (s);
}
END_TEST

/* ---- eviction --------------------------------------------------------- */

/* In a full cache, pages a client read once go first; then pages read
 * ahead and never used (counted as wasted); then active pages (here
 * pages read at random, branch G), oldest first.
 */
START_TEST (test_evict_order)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  struct rc_pc_counts n;
  unsigned k;
  ra_pgoff p;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS (.cache = 16 * P, .ra_max = 8 * P, .io_max = 8 * P));
  ck_assert_uint_eq (counts (c).capacity, 16);
  s = rc_stream_new ();
  RD_OK (c, s, f, 0, 4 * P);           /* window [0, 8): 4..7 ahead */
  ASSERT_IDLE (c);
  n = counts (c);
  ck_assert_uint_eq (n.pages, 8);
  ck_assert_uint_eq (n.unused, 4);
  rc_stream_free (s);

  /* Random one-page reads (each a fresh stream: branch G). */
  for (k = 0; k < 12; k++) {
    s = rc_stream_new ();
    RD_OK (c, s, f, (100 + 3 * k) * P, P);
    rc_stream_free (s);
    n = counts (c);
    ck_assert_uint_le (n.pages, 16);
    /* Eviction k - 7 took a page read once, 0..3 in order. */
    ck_assert_uint_eq (ST (c, evictions), k < 8 ? 0 : k - 7);
    ck_assert_uint_eq (ST (c, ahead_wasted_pages), 0);
  }
  for (p = 0; p < 4; p++)
    ck_assert_msg (!cached (c, p), "used page %" PRIu64 " kept", p);
  for (p = 4; p < 8; p++)
    ck_assert_msg (cached (c, p), "unused page %" PRIu64 " evicted", p);

  /* Then pages read ahead and never used go, and count as wasted,
   * before the (newer) random pages.
   */
  for (k = 0; k < 4; k++) {
    s = rc_stream_new ();
    RD_OK (c, s, f, (200 + 3 * k) * P, P);
    rc_stream_free (s);
    ck_assert_uint_eq (ST (c, ahead_wasted_pages), k + 1);
  }
  for (p = 4; p < 8; p++)
    ck_assert (!cached (c, p));
  ck_assert (cached (c, 100));

  /* Then random pages, oldest first; nothing more is wasted. */
  s = rc_stream_new ();
  RD_OK (c, s, f, 300 * P, P);
  rc_stream_free (s);
  ck_assert_uint_eq (ST (c, ahead_wasted_pages), 4);
  ck_assert (!cached (c, 100));
  ck_assert (cached (c, 103));
}
END_TEST

/* Drop-behind: a sequential reader recycles the pages behind it, so the
 * cache does not grow to its capacity for data read once; pages read at
 * random, or read twice, make it grow.
 */
/* Pages read once beyond the reserve go back one for one, also when a
 * client's read takes a whole run of hits at a time (rc_pc_copy_run):
 * 4,096 pages read once, 16 at a time, leave the reserve (2,048 pages
 * in a 64M cache of 4K pages), not 4,096 less one a run.
 */
START_TEST (test_reserve_bound)
{
  const ra_pgoff n = 4096, run = 16;
  struct rc_stats st;
  struct rc_pagecache *pc;
  struct rc_pc_counts k;
  char *buf = malloc (run * 4096);
  ra_pgoff i;

  ck_assert_ptr_nonnull (buf);
  memset (&st, 0, sizeof st);
  memset (buf, 7, run * 4096);
  pc = rc_pc_new (64 * MiB, 4096, &st);
  ck_assert_ptr_nonnull (pc);
  rc_pc_set_nr_pages (pc, 2 * n);
  for (i = 0; i < n; i += run) {
    ra_pgoff j;

    for (j = i; j < i + run; j++)
      ck_assert (rc_pc_insert (pc, j, false, RC_INSERT_AHEAD, 0));
    rc_pc_complete (pc, i, run, buf, run * 4096, 0);
    ck_assert_uint_eq (rc_pc_copy_run (pc, i, run, buf, RA_NO_MARKER), run);
  }
  rc_pc_counts (pc, &k);
  ck_assert_uint_eq (k.pages, 2048);
  ck_assert (rc_pc_groups_consistent (pc));
  rc_pc_free (pc);
  free (buf);
}
END_TEST

START_TEST (test_drop_behind)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  struct rc_pc_counts n;
  uint64_t off, seed = 11, misses, read;
  int i;

  struct fake *f = bed_fake (128 * MiB);
  c = mk_cache (f, OPTS (.cache = 4 * MiB, .ra_max = 64 * KiB,
                          .io_max = 64 * KiB));
  ck_assert_uint_eq (counts (c).capacity, 1024);
  s = rc_stream_new ();
  for (off = 0; off < 32 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  ASSERT_IDLE (c);
  n = counts (c);
  /* The pages behind the reader that it keeps (1M, a quarter of this
   * cache: 256) and its windows ahead (16 pages each): far below the
   * capacity of 1024.
   */
  ck_assert_uint_le (n.pages, 256 + 64);
  ck_assert_uint_gt (ST (c, evictions), 0);
  /* The pages behind come back in order, so the windows ahead get
   * memory in one piece and most backend reads go straight into it.
   */
  ck_assert_uint_gt (ST (c, backend_reads_in_place),
                     ST (c, backend_reads) * 3 / 4);
  ck_assert_uint_eq (ST (c, ahead_wasted_pages), 0);
  rc_stream_free (s);

  /* Data read again after drop-behind gave it back is kept (active)
   * when it was given back within one to one and a third caches' worth
   * of groups (here 4M to 5.3M).  The first 2M went 30M before: a
   * second pass over it reads all of it and gives it back again behind
   * it, as the first did, so a third reads that part (its first 1M; the
   * last 1M was not yet behind the stream) and keeps it (given back a
   * moment before), and a fourth hits.  (With a history of several
   * caches, the second pass kept it all: a second pass over an export
   * larger than the cache filled the whole cache with pages no pass
   * would read before they went.)
   */
  for (i = 0; i < 2; i++) {
    read = ST (c, backend_bytes);
    s = rc_stream_new ();
    for (off = 0; off < 2 * MiB; off += 16 * KiB)
      RD_OK (c, s, f, off, 16 * KiB);
    rc_stream_free (s);
    ASSERT_IDLE (c);
    ck_assert_uint_ge (ST (c, backend_bytes) - read, (2 - i) * MiB);
  }
  misses = ST (c, page_misses);
  s = rc_stream_new ();
  for (off = 0; off < 2 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  rc_stream_free (s);
  ck_assert_uint_eq (ST (c, page_misses), misses);

  /* Given back 3M before (a 4M stream, its first 512K read again: the
   * 2M above, kept, and this fit in the cache together): the first pass
   * again keeps it, the next hits.
   */
  s = rc_stream_new ();
  for (off = 36 * MiB; off < 40 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  rc_stream_free (s);
  for (i = 0; i < 2; i++) {
    misses = ST (c, page_misses);
    s = rc_stream_new ();
    for (off = 36 * MiB; off < 36 * MiB + 512 * KiB; off += 16 * KiB)
      RD_OK (c, s, f, off, 16 * KiB);
    rc_stream_free (s);
    ASSERT_IDLE (c);
  }
  ck_assert_uint_eq (ST (c, page_misses), misses);

  /* Reading the tail of the stream again keeps those pages (active). */
  s = rc_stream_new ();
  RD_OK (c, s, f, 32 * MiB - 64 * KiB, 64 * KiB);
  rc_stream_free (s);

  /* Random reads of pages far from each other grow the cache. */
  for (i = 0; i < 600; i++) {
    s = rc_stream_new ();
    RD_OK (c, s, f, (40 * MiB / P + (xorshift (&seed) % 4000) * 4) * P, P);
    rc_stream_free (s);
  }
  n = counts (c);
  ck_assert_uint_gt (n.pages, 256 + 400);
  ck_assert_uint_le (n.pages, 1024);
}
END_TEST

/* A tiny cache under sequential and random load: within capacity,
 * data right.
 */
START_TEST (test_evict_load)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s, *s2;
  uint64_t seed = 7, off;
  int i;

  struct fake *f = bed_fake (4 * MiB);
  c = mk_cache (f, OPTS (.cache = 16 * P, .ra_max = 8 * P, .io_max = 8 * P));
  s = rc_stream_new ();
  s2 = rc_stream_new ();
  for (off = 0; off < 2 * MiB; off += 16 * KiB) {
    RD_OK (c, s, f, off, 16 * KiB);
    ck_assert_uint_le (counts (c).pages, 16);
  }
  ck_assert_uint_gt (ST (c, evictions), 0);
  for (i = 0; i < 500; i++) {
    uint64_t o = xorshift (&seed) % (4 * MiB - 64 * KiB);
    uint32_t len = 1 + xorshift (&seed) % (40 * KiB);
    RD_OK (c, i & 1 ? s : s2, f, o, len);
    ck_assert_uint_le (counts (c).pages, 16);
  }
  /* Interleaved sequential readers on the tiny cache. */
  for (off = 0; off < 1 * MiB; off += 12 * KiB) {
    RD_OK (c, s, f, off, 12 * KiB);
    RD_OK (c, s2, f, 2 * MiB + off, 12 * KiB);
    ck_assert_uint_le (counts (c).pages, 16);
  }
  ASSERT_IDLE (c);
  ck_assert_uint_le (counts (c).pages, 16);
  ck_assert_uint_gt (ST (c, ahead_wasted_pages), 0);
  rc_stream_free (s);
  rc_stream_free (s2);
}
END_TEST

/* ---- memory in huge pages (src/hugemem.c) ----------------------------- */

/* rc_huge_alloc: whole 2 MiB units, aligned, zero; a small block from
 * calloc (maplen 0).
 */
START_TEST (test_huge_alloc)
{
  size_t map, i;
  char *b = rc_huge_alloc (3 * MiB, &map);

  ck_assert_ptr_nonnull (b);
  ck_assert_uint_eq ((uintptr_t) b % RC_HUGE_SIZE, 0);
  ck_assert_uint_eq (map, 4 * MiB);
  for (i = 0; i < map; i += 4096)
    ck_assert_int_eq (b[i], 0);
  memset (b, 0x5A, map);          /* all of it is ours to write */
  rc_huge_free (b, map);
  b = rc_huge_alloc (100 * KiB, &map);
  ck_assert_ptr_nonnull (b);
  ck_assert_uint_eq (map, 0);
  for (i = 0; i < 100 * KiB; i++)
    ck_assert_int_eq (b[i], 0);
  rc_huge_free (b, map);
}
END_TEST

/* A cache's tables (hash buckets, group slots, refault history) are one
 * block of whole huge pages once they come to half a huge page, and
 * memory_other_bytes counts all of it; a small cache's are calloc'd.
 */
START_TEST (test_tables_huge)
{
  struct fake *f = bed_fake (8 * MiB);
  struct rc_cache *c = mk_cache (f, OPTS (.cache = 256 * MiB));
  struct rc_pc_counts n = counts (c);

  /* 65536 pages: 1 MiB of buckets, 32 KiB of group slots, 128 KiB of
   * history: one 2 MiB block, plus the free-slot bitmap (8 KiB).
   */
  ck_assert_uint_ge (n.other_bytes, RC_HUGE_SIZE + 8 * KiB);
  ck_assert_uint_lt (n.other_bytes, 2 * RC_HUGE_SIZE);
  free_cache (c, f);
  c = mk_cache (f, OPTS (.cache = 4 * MiB));
  n = counts (c);
  ck_assert_uint_lt (n.other_bytes, RC_HUGE_MIN);
}
END_TEST

/* The MEMORY bound counts each bounce buffer as its share of the huge
 * pages it is cut from: 1 MiB buffers two to a 2 MiB block, 1.5 MiB
 * ones one to a block, 3 MiB ones in 4 MiB; small ones as they are.
 */
START_TEST (test_memory_estimate)
{
  static const struct { uint64_t io, each; } t[] = {
    { 64 * KiB, 64 * KiB }, { 1 * MiB, 1 * MiB },
    { 1536 * KiB, 2 * MiB }, { 3 * MiB, 4 * MiB }, { 4 * MiB, 4 * MiB },
  };
  struct rc_config cfg;
  size_t i;

  for (i = 0; i < sizeof t / sizeof t[0]; i++) {
    rc_config_defaults (&cfg);
    cfg.page_size = 4096;
    cfg.cache_size = 1000 * 4096;
    cfg.io_max = t[i].io;
    cfg.max_background = 2;
    ck_assert_uint_eq (rc_memory_other_estimate (&cfg, 4),
                       1000 * RC_MEMORY_PER_PAGE + 6 * t[i].each
                       + RC_MEMORY_FIXED);
  }
}
END_TEST

/* A backend read into pages that lie in two pieces of the arena (here
 * NBD_CMD_CACHE's: no client buffer to read into) goes through a bounce
 * buffer, cut from a block of huge pages: two of 1 MiB in one 2 MiB
 * block, reused by the next such read; the data is right.
 */
START_TEST (test_bounce_huge)
{
  const uint64_t P = 4096;
  struct fake *f = bed_fake (8 * MiB);
  struct rc_cache *c = mk_cache (f, OPTS (.ra_max = 0, .io_max = 1 * MiB));
  struct rc_stream *s = rc_stream_new ();
  uint64_t in_place;
  int err = 0;

  ck_assert_uint_eq (rc_cache_bounce_bytes (c), 0);
  ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 4 * P, 0, &err), 0);
  ASSERT_IDLE (c);                       /* pages 0-3 in slots 0-3 */
  ck_assert_uint_eq (rc_cache_bounce_bytes (c), 0);
  rc_invalidate (c, 1 * P, P);           /* slots 1 and 3 free again */
  rc_invalidate (c, 3 * P, P);
  in_place = ST (c, backend_reads_in_place);
  ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 4 * P, 1 * MiB, &err), 0);
  ASSERT_IDLE (c);                       /* slots 1, 3, 4, 5 */
  ck_assert_uint_eq (ST (c, backend_reads_in_place), in_place);
  ck_assert_uint_eq (rc_cache_bounce_bytes (c), RC_HUGE_SIZE);
  rc_invalidate (c, 1 * MiB + P, P);     /* slots 3 and 5 */
  rc_invalidate (c, 1 * MiB + 3 * P, P);
  ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 4 * P, 2 * MiB, &err), 0);
  ASSERT_IDLE (c);                       /* slots 3, 5, 6, 7 */
  ck_assert_uint_eq (ST (c, backend_reads_in_place), in_place);
  ck_assert_uint_eq (rc_cache_bounce_bytes (c), RC_HUGE_SIZE);
  RD_OK (c, s, f, 1 * MiB, 4 * P);       /* the data read through them */
  RD_OK (c, s, f, 2 * MiB, 4 * P);
  rc_stream_free (s);
}
END_TEST

/* ---- rc_fill (NBD_CMD_CACHE) ------------------------------------------ */

START_TEST (test_fill)
{
  const uint64_t P = 4096;
  const uint64_t size = 12 * MiB + 777;
  struct rc_cache *c;
  struct rc_stream *s, *s2;
  uint64_t fill_off = 4 * MiB + 100, fill_len = 5 * MiB, off, expect_off;
  uint64_t reads, misses, windows[RA_NR_BRANCHES];
  size_t from, got, i;
  struct req *r;
  int err = 0, b;

  struct fake *f = bed_fake (size);
  c = mk_cache (f, OPTS (.cache = 16 * MiB, .io_max = 4 * MiB));
  s = rc_stream_new ();
  RD_OK (c, s, f, 0, 16 * KiB);                /* window A [0, 8) */
  ASSERT_IDLE (c);
  from = fake_nlog (f);

  ck_assert_int_eq (rc_fill (c, CLIENT_CTX, fill_len, fill_off, &err), 0);
  /* Chunks of at most 2 MiB tiling the pages of the range. */
  r = fake_reqs_since (f, from, &got);
  expect_off = fill_off / P * P;
  for (i = 0; i < got; i++) {
    ck_assert_uint_eq (r[i].offset, expect_off);
    ck_assert_uint_le (r[i].count, RA_FORCED_CHUNK_BYTES);
    expect_off += r[i].count;
  }
  free (r);
  ck_assert_uint_eq (expect_off, (fill_off + fill_len + P - 1) / P * P);
  ck_assert_uint_eq (got, 3);
  ck_assert_uint_eq (ST (c, windows[RA_FORCED]), 3);
  from += got;
  ASSERT_IDLE (c);

  /* The stream was not touched: its marker (page 4) continues in B. */
  RD_OK (c, s, f, 16 * KiB, 16 * KiB);
  ck_assert_uint_eq (ST (c, windows[RA_B_SEQUENTIAL]), 1);
  ASSERT_IDLE (c);

  /* Reading the filled range: all hits, no marker, no window. */
  reads = ST (c, backend_reads);
  misses = ST (c, page_misses);
  for (b = 0; b < RA_NR_BRANCHES; b++)
    windows[b] = ST (c, windows[b]);
  s2 = rc_stream_new ();
  for (off = fill_off; off < fill_off + fill_len; off += 64 * KiB) {
    uint64_t len = fill_off + fill_len - off;
    RD_OK (c, s2, f, off, len < 64 * KiB ? len : 64 * KiB);
  }
  ck_assert_uint_eq (ST (c, backend_reads), reads);
  ck_assert_uint_eq (ST (c, page_misses), misses);
  for (b = 0; b < RA_NR_BRANCHES; b++)
    ck_assert_msg (ST (c, windows[b]) == windows[b],
                   "reading filled pages submitted a window (branch %s)",
                   ra_branch_name (b));

  /* Past the end of the export: clamped; a filled range: no reads. */
  ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 1 * MiB, size - 1000, &err), 0);
  ck_assert_uint_eq (f->bad, 0);
  RD_OK (c, s2, f, size - 1000, 1000);
  reads = ST (c, backend_reads);
  ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 1 * MiB, fill_off, &err), 0);
  ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 0, 0, &err), 0);
  ck_assert_uint_eq (ST (c, backend_reads), reads);
  ASSERT_IDLE (c);
  rc_stream_free (s);
  rc_stream_free (s2);
}
END_TEST

/* A fill of many backend reads (io_max 4 pages) fills all of it. */
START_TEST (test_fill_small_io)
{
  const uint64_t P = 4096;
  struct rc_cache *c;
  struct rc_stream *s;
  uint64_t reads;
  int err = 0;

  struct fake *f = bed_fake (8 * MiB);
  c = mk_cache (f, OPTS (.cache = 8 * MiB, .io_max = 4 * P));
  ck_assert_int_eq (rc_fill (c, CLIENT_CTX, 3 * MiB, 0, &err), 0);
  ASSERT_IDLE (c);
  ck_assert_msg (counts (c).pages == 3 * MiB / P,
                 "rc_fill of %u pages cached %" PRIu64,
                 (unsigned) (3 * MiB / P), counts (c).pages);
  reads = ST (c, backend_reads);
  s = rc_stream_new ();
  RD_OK (c, s, f, 0, 3 * MiB);
  ck_assert_uint_eq (ST (c, backend_reads), reads);
  rc_stream_free (s);
}
END_TEST

/* ---- concurrency stress ----------------------------------------------- */

struct stress {
  struct rc_cache *c;
  struct fake *f;
  uint64_t deadline;
  atomic_bool stop;
  atomic_uint failed;
  pthread_mutex_t msg_lock;
  char msg[512];
  _Atomic uint64_t reads, writes, fills, bytes;
};

struct sthread {
  pthread_t t;
  struct stress *st;
  struct rc_stream *s;
  uint64_t seed;
};

static void
stress_fail (struct stress *st, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

static void
stress_fail (struct stress *st, const char *fmt, ...)
{
  va_list ap;

  pthread_mutex_lock (&st->msg_lock);
  if (atomic_fetch_add (&st->failed, 1) == 0) {
    va_start (ap, fmt);
    vsnprintf (st->msg, sizeof st->msg, fmt, ap);
    va_end (ap);
  }
  pthread_mutex_unlock (&st->msg_lock);
}

#define STRESS_MAX_READ (96 * KiB)
#define STRESS_HOT (512 * KiB)

/* Read and check that every block holds a version at least the one
 * committed before the read started and at most the newest written.
 */
static void
stress_read (struct stress *st, struct rc_stream *s, uint64_t off,
             uint32_t len, uint8_t *buf, uint32_t *lo)
{
  struct fake *f = st->f;
  uint64_t b0 = off / VBLOCK, b1 = (off + len + VBLOCK - 1) / VBLOCK, b;
  int err = 0;

  if (len == 0)
    return;
  for (b = b0; b < b1; b++)
    lo[b - b0] = atomic_load (&f->committed[b]);
  if (rc_read (st->c, s, CLIENT_CTX, buf, len, off, &err) == -1) {
    stress_fail (st, "read of %u at %" PRIu64 " failed: %s", len, off,
                 strerror (err));
    return;
  }
  for (b = b0; b < b1; b++) {
    uint64_t from = b * VBLOCK > off ? b * VBLOCK : off;
    uint64_t to = (b + 1) * VBLOCK < off + len ? (b + 1) * VBLOCK : off + len;
    uint32_t hi = atomic_load (&f->ver[b]), v = hi + 1;
    bool match = false;

    while (!match && v-- > lo[b - b0]) {
      uint64_t o;

      match = true;
      for (o = from; o < to; o++)
        if (buf[o - off] != fake_pattern (o, v)) {
          match = false;
          break;
        }
    }
    if (!match) {
      uint32_t w;
      long found = -1;

      for (w = 0; w <= hi && found < 0; w++) {
        uint64_t o;
        for (o = from; o < to && buf[o - off] == fake_pattern (o, w); o++)
          ;
        if (o == to)
          found = w;
      }
      stress_fail (st, "read of %u at %" PRIu64 ": block %" PRIu64
                   " holds version %ld, want %u..%u", len, off, b, found,
                   lo[b - b0], hi);
      return;
    }
  }
  atomic_fetch_add (&st->reads, 1);
  atomic_fetch_add (&st->bytes, len);
}

static void *
stress_main (void *arg)
{
  struct sthread *t = arg;
  struct stress *st = t->st;
  struct fake *f = st->f;
  uint8_t *buf = malloc (STRESS_MAX_READ);
  uint32_t *lo = malloc ((STRESS_MAX_READ / VBLOCK + 2) * sizeof *lo);
  uint64_t size = f->size;

  if (!buf || !lo)
    abort ();
  while (!atomic_load (&st->stop) && atomic_load (&st->failed) == 0) {
    unsigned op = xorshift (&t->seed) % 100;
    /* Half of everything happens in a small hot region, so that writes
     * often race with reads of the same blocks in flight.
     */
    uint64_t span = xorshift (&t->seed) & 1 ? STRESS_HOT : size;

    if (now_ns () > st->deadline)
      break;
    if (op < 12) {
      /* A write of 1..16 blocks. */
      uint64_t nb = 1 + xorshift (&t->seed) % 16;
      uint64_t off = xorshift (&t->seed) % (span / VBLOCK - nb) * VBLOCK;

      fake_write (f, off, nb * VBLOCK);
      rc_invalidate (st->c, off, nb * VBLOCK);
      fake_commit (f, off, nb * VBLOCK);
      atomic_fetch_add (&st->writes, 1);
    }
    else if (op < 15) {
      uint64_t off = xorshift (&t->seed) % span;
      uint32_t len = 1 + xorshift (&t->seed) % (256 * KiB);
      int err = 0;

      if (len > size - off)
        len = size - off;
      if (rc_fill (st->c, CLIENT_CTX, len, off, &err) == -1)
        stress_fail (st, "rc_fill failed: %s", strerror (err));
      atomic_fetch_add (&st->fills, 1);
    }
    else if (op < 50) {
      uint64_t off = xorshift (&t->seed) % span;
      uint32_t len = 1 + xorshift (&t->seed) % (32 * KiB);

      if (len > size - off)
        len = size - off;
      stress_read (st, t->s, off, len, buf, lo);
    }
    else {
      /* A sequential run. */
      static const uint32_t sizes[] = { 4 * KiB, 16 * KiB, 64 * KiB };
      uint64_t off = xorshift (&t->seed) % span;
      unsigned n = 1 + xorshift (&t->seed) % 48, i;
      uint32_t len = xorshift (&t->seed) & 1
        ? sizes[xorshift (&t->seed) % 3]
        : 1 + xorshift (&t->seed) % STRESS_MAX_READ;

      if (xorshift (&t->seed) & 1)
        off &= ~(uint64_t) (16 * KiB - 1);
      for (i = 0; i < n && off < size; i++) {
        uint32_t l = size - off < len ? size - off : len;
        stress_read (st, t->s, off, l, buf, lo);
        off += l;
        if (atomic_load (&st->failed))
          break;
      }
    }
  }
  free (buf);
  free (lo);
  return NULL;
}

static double
stress_secs (void)
{
  const char *e = getenv ("RC_STRESS_SECS");
  double d = e ? atof (e) : 1.5;

  return d > 0 ? d : 1.5;
}

static void
stress (struct opts o, uint64_t size, long delay_ns, unsigned nthreads,
        unsigned nshared)
{
  struct stress st;
  struct sthread t[16];
  struct rc_stream *shared = rc_stream_new ();
  struct rc_pc_counts n;
  unsigned i;

  ck_assert (nthreads <= 16);
  struct fake *f = bed_fake (size);
  f->log_on = false;
  f->delay_ns = delay_ns;
  memset (&st, 0, sizeof st);
  pthread_mutex_init (&st.msg_lock, NULL);
  st.c = mk_cache (f, o);
  st.f = f;
  st.deadline = now_ns () + (uint64_t) (stress_secs () * 1e9);
  for (i = 0; i < nthreads; i++) {
    t[i].st = &st;
    t[i].s = i < nshared ? shared : rc_stream_new ();
    t[i].seed = 0x9E3779B97F4A7C15u * (i + 1);
    ck_assert_int_eq (pthread_create (&t[i].t, NULL, stress_main, &t[i]), 0);
  }
  while (now_ns () < st.deadline && atomic_load (&st.failed) == 0) {
    n = counts (st.c);
    ck_assert_uint_le (n.pages, n.capacity);
    sleep_ns (5000000);
  }
  atomic_store (&st.stop, true);
  for (i = 0; i < nthreads; i++)
    pthread_join (t[i].t, NULL);
  ck_assert_msg (atomic_load (&st.failed) == 0, "%s", st.msg);
  ck_assert_msg (idle (st.c), "stress: cache never became idle");
  n = counts (st.c);
  ck_assert_uint_eq (n.inflight, 0);
  ck_assert_uint_le (n.pages, n.capacity);
  ck_assert_uint_eq (n.pages, n.uptodate);
  ck_assert_uint_gt (atomic_load (&st.reads), 0);
  ck_assert_uint_eq (ST (st.c, backend_errors), 0);
  fprintf (stderr, "stress: %" PRIu64 " reads (%" PRIu64 " MiB), %" PRIu64
           " writes, %" PRIu64 " fills; backend %" PRIu64 " reads, max %u "
           "concurrent; %" PRIu64 " evictions, %" PRIu64 " skipped, %"
           PRIu64 " delayed, %" PRIu64 " promoted, %" PRIu64 " direct\n",
           atomic_load (&st.reads), atomic_load (&st.bytes) >> 20,
           atomic_load (&st.writes), atomic_load (&st.fills),
           ST (st.c, backend_reads), f->max_cur, ST (st.c, evictions),
           ST (st.c, async_skipped), ST (st.c, async_delayed),
           ST (st.c, async_promoted), ST (st.c, direct_reads));
  for (i = nshared; i < nthreads; i++)
    rc_stream_free (t[i].s);
  rc_stream_free (shared);
  pthread_mutex_destroy (&st.msg_lock);
}

START_TEST (test_stress_skip)
{
  /* 12 threads (4 sharing a stream), 4 KiB pages, a 1 MiB cache. */
  stress (OPTS (.cache = 1 * MiB, .ra_max = 256 * KiB, .io_max = 64 * KiB,
                .bg = 8, .thresh = 3),
          8 * MiB, 50000, 12, 4);
}
END_TEST

START_TEST (test_stress_wait)
{
  /* 8 threads (3 sharing a stream), 512 B pages, a 256 KiB cache. */
  stress (OPTS (.page = 512, .cache = 256 * KiB, .ra_max = 64 * KiB,
                .io_max = 8 * KiB, .bg = 4, .thresh = 2,
                .policy = RC_CONGESTION_WAIT),
          4 * MiB, 20000, 8, 3);
}
END_TEST

/* ---- background connections ------------------------------------------ */

/* Every read of a client, by its own context. */
static bool
all_by_client (struct fake *f, size_t from)
{
  size_t n, i;
  struct req *r = fake_reqs_since (f, from, &n);
  bool ok = true;

  for (i = 0; i < n; i++)
    if (r[i].ctx != CLIENT_CTX)
      ok = false;
  free (r);
  return ok;
}

static bool
wait_connections (struct rc_cache *c, unsigned n)
{
  uint64_t deadline = now_ns () + PATIENCE_NS;

  while (rc_cache_connections (c) != n && now_ns () < deadline)
    sleep_ns (1000000);
  return rc_cache_connections (c) == n;
}

/* The backend refuses every extra connection: readahead goes on with
 * the client's own reads (async parts dropped), nothing hangs; once it
 * accepts them, prefetch works again.
 */
START_TEST (test_open_fails)
{
  struct rc_cache *c;
  struct rc_stream *s;
  uint64_t off;

  struct fake *f = bed_fake (8 * MiB);
  f->open_fail = true;
  c = mk_cache_nowait (f, OPTS (.ra_max = 256 * KiB, .io_max = 64 * KiB,
                                .conns = 4));
  s = rc_stream_new ();
  for (off = 0; off < 2 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  ASSERT_IDLE (c);
  ck_assert (all_by_client (f, 0));
  ck_assert_uint_eq (ST (c, async_pages), 0);
  ck_assert_uint_gt (ST (c, async_skipped), 0);
  ck_assert_uint_gt (ST (c, backend_connection_failures), 0);
  ck_assert_uint_eq (rc_cache_connections (c), 0);

  pthread_mutex_lock (&f->lock);
  f->open_fail = false;
  pthread_mutex_unlock (&f->lock);
  ck_assert_msg (wait_connections (c, 4), "the connections were not "
                 "opened once the backend accepted them");
  for (; off < 6 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  ASSERT_IDLE (c);
  ck_assert_uint_gt (ST (c, async_pages), 0);
  rc_stream_free (s);
}
END_TEST

struct free_arg {
  struct rc_cache *c;
  _Atomic bool done;
};

static void *
free_thread (void *arg)
{
  struct free_arg *a = arg;

  rc_cache_free (a->c);
  atomic_store (&a->done, true);
  return NULL;
}

/* The fake's worker_open is held, or not. */
static void
hold_opens (struct fake *f, bool held)
{
  pthread_mutex_lock (&f->lock);
  f->open_blocked = held;
  pthread_cond_broadcast (&f->cond);
  pthread_mutex_unlock (&f->lock);
}

/* worker_open does not return while the test holds it (a server that
 * holds the connection in its backlog): every read completes through
 * the client's context, a multi-batch sync part included.  At shutdown
 * the connector is joined, not left behind: rc_cache_free returns only
 * once the open has returned and its context is closed (the filter's
 * cleanup runs before nbdkit unloads the plugin the open runs in).
 */
START_TEST (test_open_blocks)
{
  struct rc_cache *c;
  struct rc_stream *s;
  struct free_arg fa = { .done = false };
  pthread_t t;
  uint64_t off;

  struct fake *f = bed_fake (8 * MiB);
  f->open_blocked = true;
  /* A 16 KiB io_max: a 64 KiB read's sync part is several batches. */
  c = mk_cache_nowait (f, OPTS (.ra_max = 256 * KiB, .io_max = 16 * KiB));
  s = rc_stream_new ();
  for (off = 0; off < 2 * MiB; off += 64 * KiB)
    RD_OK (c, s, f, off, 64 * KiB);
  RD_OK (c, s, f, 5 * MiB, 256 * KiB);
  ASSERT_IDLE (c);
  ck_assert (all_by_client (f, 0));
  ck_assert_uint_eq (fake_read (f, &f->open_waiting), 1);
  rc_stream_free (s);
  rc_cache_disconnect (c);
  rc_cache_stop (c);
  fa.c = c;
  bed.c = NULL;
  ck_assert_int_eq (pthread_create (&t, NULL, free_thread, &fa), 0);
  /* Longer than the 1 s after which the connector used to be left
   * behind, its open still under way.
   */
  sleep_ns (1500000000);
  ck_assert_msg (!atomic_load (&fa.done),
                 "rc_cache_free returned while an open was under way");
  hold_opens (f, false);
  pthread_join (t, NULL);
  ck_assert (atomic_load (&fa.done));
  ck_assert_uint_eq (f->opened, 1);
  ck_assert_uint_eq (f->closed, 1);
}
END_TEST

/* A slow open is a slow open: a background open answered after a
 * while, with the client still there or not (a probe that left before
 * it was answered), is kept, and the next client's windows are read
 * ahead through it.
 */
START_TEST (test_open_slow_kept)
{
  struct rc_cache *c;
  struct rc_stream *s;
  uint64_t off;

  struct fake *f = bed_fake (8 * MiB);
  f->open_blocked = true;
  c = mk_cache_nowait (f, OPTS (.ra_max = 256 * KiB, .io_max = 64 * KiB));
  /* The probe leaves at once; the open is answered 0.6 s later. */
  rc_cache_disconnect (c);
  sleep_ns (600000000);
  hold_opens (f, false);
  ck_assert_msg (wait_connections (c, 1), "the slow open was not kept");
  ck_assert_uint_eq (rc_cache_connection_limit (c), 1);
  ck_assert_uint_eq (ST (c, backend_connections_late), 0);
  rc_cache_connect (c);
  s = rc_stream_new ();
  for (off = 0; off < 4 * MiB; off += 64 * KiB)
    RD_OK (c, s, f, off, 64 * KiB);
  ASSERT_IDLE (c);
  ck_assert_uint_gt (ST (c, async_pages), 0);
  rc_stream_free (s);
}
END_TEST

/* A server that limits connections: the background open waits in its
 * backlog and is answered right after the client left.  The pool keeps
 * no connection (the slot goes to the next client), counts it and shows
 * the lowered limit; after the retry backoff the limit rises again and a
 * connection opens while a client is connected.
 */
START_TEST (test_open_limit_rises)
{
  struct rc_cache *c;
  uint64_t deadline;

  struct fake *f = bed_fake (8 * MiB);
  f->open_blocked = true;
  c = mk_cache_nowait (f, OPTS (.limit_retry_ns = 400000000));
  /* In the backlog longer than an open takes (the fake's are instant). */
  sleep_ns (600000000);
  rc_cache_disconnect (c);
  hold_opens (f, false);
  deadline = now_ns () + PATIENCE_NS;
  while (ST (c, backend_connections_late) == 0 && now_ns () < deadline)
    sleep_ns (1000000);
  ck_assert_uint_eq (ST (c, backend_connections_late), 1);
  ck_assert_uint_eq (rc_cache_connection_limit (c), 0);
  while (fake_read (f, &f->closed) < 1 && now_ns () < deadline)
    sleep_ns (1000000);
  ck_assert_uint_eq (fake_read (f, &f->closed), 1);
  ck_assert_uint_eq (rc_cache_connections (c), 0);
  /* A client comes back; the limit rises after the backoff. */
  rc_cache_connect (c);
  ck_assert_msg (wait_connections (c, 1), "the limit never rose again");
  ck_assert_uint_eq (rc_cache_connection_limit (c), 1);
  ck_assert_uint_eq (ST (c, backend_connections_late), 1);
}
END_TEST

/* A client's own open is not answered while a background connection is
 * open (a server with one slot, which the pool holds): the pool closes
 * its connection and lowers the limit.
 */
START_TEST (test_open_yields_to_client)
{
  struct rc_cache *c;
  struct rc_client_open o;
  uint64_t deadline;

  struct fake *f = bed_fake (8 * MiB);
  c = mk_cache (f, OPTS (.limit_retry_ns = 60000000000));
  rc_cache_disconnect (c);
  ck_assert_uint_eq (rc_cache_connections (c), 1);
  rc_cache_open_begin (c, &o);
  deadline = now_ns () + PATIENCE_NS;
  while (rc_cache_connections (c) > 0 && now_ns () < deadline)
    sleep_ns (1000000);
  ck_assert_uint_eq (rc_cache_connections (c), 0);
  ck_assert_uint_eq (rc_cache_connection_limit (c), 0);
  ck_assert_uint_eq (ST (c, backend_connections_late), 1);
  rc_cache_open_end (c, &o, true);
  rc_cache_connect (c);
  sleep_ns (300000000);
  ck_assert_uint_eq (rc_cache_connections (c), 0);
}
END_TEST

/* ra-backend-connections by default: one connection for a backend that
 * carries many calls on one, four for one that runs one call at a time
 * per connection (curl, ssh), never more than the workers; a value set
 * wins.  Reads go on through each.
 */
START_TEST (test_conn_default)
{
  static const struct {
    unsigned bg, conns;
    bool serial;
    unsigned want;
  } cases[] = {
    { 12, 0, false, 1 }, { 12, 0, true, 4 }, { 2, 0, true, 2 },
    { 12, 3, false, 3 }, { 12, 2, true, 2 },
  };
  size_t i;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct rc_cache *c;
    struct rc_stream *s;
    uint64_t off;
    struct fake *f = bed_fake (4 * MiB);

    c = mk_cache (f, OPTS (.ra_max = 256 * KiB, .io_max = 64 * KiB,
                           .bg = cases[i].bg, .thresh = cases[i].bg,
                           .conns = cases[i].conns,
                           .serial = cases[i].serial));
    ck_assert_uint_eq (rc_cache_connections (c), cases[i].want);
    s = rc_stream_new ();
    for (off = 0; off < 2 * MiB; off += 64 * KiB)
      RD_OK (c, s, f, off, 64 * KiB);
    ASSERT_IDLE (c);
    ck_assert_uint_gt (ST (c, async_pages), 0);
    ck_assert_uint_eq (f->opened, cases[i].want);
    rc_stream_free (s);
    free_cache (c, f);
    fake_free (f);
    bed.has_fake = false;
  }
}
END_TEST

/* The backend restarts: the workers' connections fail with ENOTCONN,
 * are closed and reopened (counted), and the reader never sees it.
 */
START_TEST (test_conn_lost)
{
  struct rc_cache *c;
  struct rc_stream *s;
  uint64_t off;

  struct fake *f = bed_fake (16 * MiB);
  c = mk_cache (f, OPTS (.ra_max = 256 * KiB, .io_max = 64 * KiB,
                         .conns = 4));
  s = rc_stream_new ();
  pthread_mutex_lock (&f->lock);
  f->fail_workers = true;
  f->fail_workers_errno = ENOTCONN;
  pthread_mutex_unlock (&f->lock);
  for (off = 0; off < 2 * MiB; off += 16 * KiB)
    RD_OK (c, s, f, off, 16 * KiB);
  ASSERT_IDLE (c);
  ck_assert_uint_gt (ST (c, backend_connections_lost), 0);
  pthread_mutex_lock (&f->lock);
  f->fail_workers = false;
  pthread_mutex_unlock (&f->lock);
  ck_assert_msg (wait_connections (c, 4), "not reopened");
  ck_assert_uint_gt (ST (c, backend_reconnects), 0);
  ck_assert_uint_eq (ST (c, backend_reconnects), ST (c, backend_connections_lost));
  {
    uint64_t before = ST (c, async_pages);

    for (; off < 8 * MiB; off += 16 * KiB)
      RD_OK (c, s, f, off, 16 * KiB);
    ASSERT_IDLE (c);
    ck_assert_uint_gt (ST (c, async_pages), before);
  }
  /* No client left: the connections stay open (a backend whose opens
   * are slow pays for them once), and the limit where it was.
   */
  rc_cache_disconnect (c);
  sleep_ns (300000000);
  ck_assert_uint_eq (rc_cache_connections (c), 4);
  ck_assert_uint_eq (rc_cache_connection_limit (c), 4);
  rc_stream_free (s);
}
END_TEST

/* ---- the suite -------------------------------------------------------- */

/* A test case of the suite, each test on a fresh bed (bed_setup). */
static TCase *
bed_tcase (Suite *s, const char *name, double timeout)
{
  TCase *tc = tcase_create (name);

  tcase_add_checked_fixture (tc, bed_setup, bed_teardown);
  tcase_set_timeout (tc, timeout);
  suite_add_tcase (s, tc);
  return tc;
}

static Suite *
cache_suite (void)
{
  Suite *s = suite_create ("cache");
  TCase *tc;

  tc = bed_tcase (s, "read", 120);
  tcase_add_test (tc, test_data_512);
  tcase_add_test (tc, test_data_4k);
  tcase_add_test (tc, test_data_64k);
  tcase_add_test (tc, test_zero_length);
  tcase_add_test (tc, test_many_batches);

  tc = bed_tcase (s, "windows", 120);
  tcase_add_test (tc, test_worked_example);
  tcase_add_test (tc, test_worked_example_small_io);
  tcase_add_test (tc, test_random_exact);
  tcase_add_test (tc, test_ra_off);

  tc = bed_tcase (s, "congestion", 120);
  tcase_add_test (tc, test_congestion_skip);
  tcase_add_test (tc, test_congestion_slow);
  tcase_add_test (tc, test_congestion_wait);
  tcase_add_test (tc, test_closed_stream_drops_queued_async);
  tcase_add_test (tc, test_async_beside_own_sync);
  tcase_add_test (tc, test_async_after_own_sync);
  tcase_add_test (tc, test_async_beside_others_sync);
  tcase_add_test (tc, test_yield_to_random);
  tcase_add_test (tc, test_first_window_quarter_reads);
  tcase_add_test (tc, test_promote_many);
  tcase_add_test (tc, test_unparked_jobs_wake_workers);
  tcase_add_test (tc, test_workers_on_demand);
  tcase_add_test (tc, test_drop_reads_around);
  tcase_add_test (tc, test_reordered_no_yield);
  tcase_add_test (tc, test_large_random_read_around);
  tcase_add_test (tc, test_promote_not_stale);

  tc = bed_tcase (s, "errors", 120);
  tcase_add_test (tc, test_sync_error);
  tcase_add_test (tc, test_extra_batch_error);
  tcase_add_test (tc, test_async_error);
  tcase_add_test (tc, test_async_error_persistent);

  tc = bed_tcase (s, "writes", 120);
  tcase_add_test (tc, test_invalidate_inflight_sync);
  tcase_add_test (tc, test_invalidate_inflight_async);
  tcase_add_test (tc, test_invalidate_cached);

  tc = bed_tcase (s, "eviction", 120);
  tcase_add_test (tc, test_evict_order);
  tcase_add_test (tc, test_drop_behind);
  tcase_add_test (tc, test_reserve_bound);
  tcase_add_test (tc, test_evict_load);

  tc = bed_tcase (s, "memory", 60);
  tcase_add_test (tc, test_huge_alloc);
  tcase_add_test (tc, test_tables_huge);
  tcase_add_test (tc, test_memory_estimate);
  tcase_add_test (tc, test_bounce_huge);

  tc = bed_tcase (s, "fill", 120);
  tcase_add_test (tc, test_fill);
  tcase_add_test (tc, test_fill_small_io);

  tc = bed_tcase (s, "connections", 120);
  tcase_add_test (tc, test_open_fails);
  tcase_add_test (tc, test_open_blocks);
  tcase_add_test (tc, test_open_slow_kept);
  tcase_add_test (tc, test_open_limit_rises);
  tcase_add_test (tc, test_open_yields_to_client);
  tcase_add_test (tc, test_conn_lost);
  tcase_add_test (tc, test_conn_default);

  tc = bed_tcase (s, "stress", 300);
  tcase_add_test (tc, test_stress_skip);
  tcase_add_test (tc, test_stress_wait);

  return s;
}

int
main (void)
{
  SRunner *sr = srunner_create (cache_suite ());
  int failed;

  srunner_run_all (sr, CK_NORMAL);
  failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
