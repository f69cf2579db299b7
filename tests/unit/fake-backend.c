/* The scripted fake backend of the unit tests: see fake-backend.h. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <check.h>

#include "fake-backend.h"

int fake_client_ctx_tag;

uint64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000u + ts.tv_nsec;
}

void
sleep_ns (long ns)
{
  struct timespec ts = { .tv_sec = ns / 1000000000L,
                         .tv_nsec = ns % 1000000000L };

  while (nanosleep (&ts, &ts) == -1 && errno == EINTR)
    ;
}

struct wctx {
  unsigned id;
};

static void
fake_fill (struct fake *f, uint64_t b)
{
  uint64_t o, end = (b + 1) * VBLOCK;
  uint32_t v = atomic_load (&f->ver[b]);

  if (end > f->size)
    end = f->size;
  for (o = b * VBLOCK; o < end; o++)
    f->data[o] = fake_pattern (o, v);
}

void
fake_init (struct fake *f, uint64_t size)
{
  uint64_t nb = (size + VBLOCK - 1) / VBLOCK, b;

  memset (f, 0, sizeof *f);
  pthread_mutex_init (&f->lock, NULL);
  pthread_cond_init (&f->cond, NULL);
  f->size = size;
  f->data = malloc (size);
  f->ver = calloc (nb, sizeof *f->ver);
  f->committed = calloc (nb, sizeof *f->committed);
  ck_assert (f->data && f->ver && f->committed);
  for (b = 0; b < nb; b++)
    fake_fill (f, b);
  f->log_on = true;
}

void
fake_free (struct fake *f)
{
  free (f->data);
  free ((void *) f->ver);
  free ((void *) f->committed);
  free (f->log);
  pthread_mutex_destroy (&f->lock);
  pthread_cond_destroy (&f->cond);
}

int
fake_pread (void *opaque, void *ctx, void *buf, uint32_t count,
            uint64_t offset, int *err)
{
  struct fake *f = opaque;
  bool failed = true;
  int e = 0;
  long delay;

  pthread_mutex_lock (&f->lock);
  f->nreqs++;
  if (++f->cur > f->max_cur)
    f->max_cur = f->cur;
  if (count == 0 || offset > f->size || count > f->size - offset) {
    f->bad++;
    e = EINVAL;
  }
  else if (f->fail_next > 0) {
    f->fail_next--;
    e = f->fail_errno;
  }
  else if (offset < f->err_hi && offset + count > f->err_lo)
    e = f->err_errno;
  else if (f->fail_workers && ctx != CLIENT_CTX)
    e = f->fail_workers_errno ? f->fail_workers_errno : EIO;
  else {
    /* Copy now: a request held at the gate returns the data of when it
     * started, as a real read racing with a write may.
     */
    memcpy (buf, f->data + offset, count);
    failed = false;
  }
  if (f->log_on) {
    if (f->nlog == f->caplog) {
      f->caplog = f->caplog ? 2 * f->caplog : 256;
      f->log = realloc (f->log, f->caplog * sizeof *f->log);
      if (!f->log)
        abort ();
    }
    f->log[f->nlog++] = (struct req) {
      .offset = offset, .count = count, .thread = pthread_self (),
      .ctx = ctx, .err = failed ? (e ? e : -1) : 0 };
  }
  while (f->gate_closed && offset < f->gate_hi &&
         offset + count > f->gate_lo) {
    f->gate_blocked++;
    pthread_cond_broadcast (&f->cond);
    pthread_cond_wait (&f->cond, &f->lock);
    f->gate_blocked--;
  }
  delay = f->delay_ns;
  pthread_mutex_unlock (&f->lock);

  if (delay)
    sleep_ns (delay);

  pthread_mutex_lock (&f->lock);
  f->cur--;
  pthread_mutex_unlock (&f->lock);
  if (failed) {
    *err = e;
    return -1;
  }
  return 0;
}

void *
fake_worker_open (void *opaque)
{
  struct fake *f = opaque;
  struct wctx *w = malloc (sizeof *w);

  if (!w)
    return NULL;
  pthread_mutex_lock (&f->lock);
  while (f->open_blocked) {
    f->open_waiting++;
    pthread_cond_wait (&f->cond, &f->lock);
    f->open_waiting--;
  }
  if (f->open_fail) {
    pthread_mutex_unlock (&f->lock);
    free (w);
    return NULL;
  }
  w->id = f->opened++;
  pthread_mutex_unlock (&f->lock);
  return w;
}

void
fake_worker_close (void *opaque, void *ctx)
{
  struct fake *f = opaque;

  pthread_mutex_lock (&f->lock);
  f->closed++;
  pthread_mutex_unlock (&f->lock);
  free (ctx);
}

/* A write to the export: bump the version of the blocks of
 * [off, off + len) (whole blocks) and rewrite them.  The caller then
 * tells the cache (rc_invalidate) and commits.
 */
void
fake_write (struct fake *f, uint64_t off, uint64_t len)
{
  uint64_t b;

  pthread_mutex_lock (&f->lock);
  for (b = off / VBLOCK; b * VBLOCK < off + len; b++) {
    atomic_fetch_add (&f->ver[b], 1);
    fake_fill (f, b);
  }
  pthread_mutex_unlock (&f->lock);
}

/* The write of [off, off + len) has been invalidated in the cache: from
 * now on a read must return at least this version.
 */
void
fake_commit (struct fake *f, uint64_t off, uint64_t len)
{
  uint64_t b;

  for (b = off / VBLOCK; b * VBLOCK < off + len; b++) {
    uint32_t v = atomic_load (&f->ver[b]);
    uint32_t c = atomic_load (&f->committed[b]);

    while (c < v && !atomic_compare_exchange_weak (&f->committed[b], &c, v))
      ;
  }
}

size_t
fake_nlog (struct fake *f)
{
  size_t n;

  pthread_mutex_lock (&f->lock);
  n = f->nlog;
  pthread_mutex_unlock (&f->lock);
  return n;
}

void
fake_set_gate (struct fake *f, bool closed, uint64_t lo, uint64_t hi)
{
  pthread_mutex_lock (&f->lock);
  f->gate_closed = closed;
  f->gate_lo = lo;
  f->gate_hi = hi;
  pthread_cond_broadcast (&f->cond);
  pthread_mutex_unlock (&f->lock);
}

void
fake_set_errors (struct fake *f, uint64_t lo, uint64_t hi, int e)
{
  pthread_mutex_lock (&f->lock);
  f->err_lo = lo;
  f->err_hi = hi;
  f->err_errno = e;
  pthread_mutex_unlock (&f->lock);
}

/* Wait until n requests are held at the gate. */
bool
fake_wait_blocked (struct fake *f, unsigned n)
{
  uint64_t deadline = now_ns () + PATIENCE_NS;
  bool ok;

  pthread_mutex_lock (&f->lock);
  while (f->gate_blocked < n && now_ns () < deadline) {
    pthread_mutex_unlock (&f->lock);
    sleep_ns (1000000);
    pthread_mutex_lock (&f->lock);
  }
  ok = f->gate_blocked >= n;
  pthread_mutex_unlock (&f->lock);
  return ok;
}

static int
cmp_req (const void *a, const void *b)
{
  const struct req *x = a, *y = b;

  if (x->offset != y->offset)
    return x->offset < y->offset ? -1 : 1;
  return x->count < y->count ? -1 : x->count > y->count;
}

/* The requests logged since index from, sorted by offset (malloc'd). */
struct req *
fake_reqs_since (struct fake *f, size_t from, size_t *n)
{
  struct req *r;

  pthread_mutex_lock (&f->lock);
  *n = f->nlog - from;
  r = malloc ((*n + 1) * sizeof *r);
  ck_assert (r);
  memcpy (r, f->log + from, *n * sizeof *r);
  pthread_mutex_unlock (&f->lock);
  qsort (r, *n, sizeof *r, cmp_req);
  return r;
}

/* Compare bytes read at off with the export now. */
void
check_now (struct fake *f, const uint8_t *buf, uint64_t off, uint32_t len)
{
  uint32_t i;
  uint8_t want = 0;

  pthread_mutex_lock (&f->lock);
  for (i = 0; i < len; i++)
    if (buf[i] != f->data[off + i]) {
      want = f->data[off + i];
      break;
    }
  pthread_mutex_unlock (&f->lock);
  if (i != len)
    ck_abort_msg ("wrong data at byte %" PRIu64 " of a read of %" PRIu32
                  " at %" PRIu64 ": got %u, want %u",
                  off + i, len, off, buf[i], want);
}
