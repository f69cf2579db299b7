/* ra-cache: backend reads and their accounting.
 *
 * Every backend read the cache makes goes through counted_read: it is
 * counted in flight while it runs (executing, executing_bytes: what the
 * congestion decision and the estimator see), and when it succeeds it
 * is a sample for the congestion estimator (src/congestion.c: its
 * latency, its size, the reads running when it started and the bytes
 * delivered while it ran: delivered_bytes) and, for a
 * read of pages in adaptive mode, for the backend model.  The variants
 * below differ only in where the bytes go: into the pages' own memory
 * when it lies in one piece (no copy), through a bounce buffer into the
 * pages, straight into a client's buffer (and from there into the
 * pages), or into a client's buffer with no pages at all (read around).
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache-internal.h"
#include "racache/util.h"

/* A backend read finished: a held-back async job may start now. */
static void
inflight_done (struct rc_cache *c)
{
  atomic_fetch_sub (&c->executing, 1);
  if ((c->cong.learn || c->cfg.congestion == RC_CONGESTION_WAIT) &&
      atomic_load (&c->q.queued_async) > 0) {
    ACQUIRE_LOCK (&c->q.lock);
    RELEASE_LOCK (&c->q.lock);
    pthread_cond_signal (&c->q.cond);
  }
}

/* Read count bytes at offset from the backend (no cache involved). */
int
rc_backend_read_bytes (struct rc_cache *c, void *ctx, void *buf,
                       uint32_t count, uint64_t offset, int *err)
{
  int r;

  STAT_ADD (&c->stats, backend_reads, 1);
  STAT_ADD (&c->stats, backend_bytes, count);
  r = c->be.pread (c->be.opaque, ctx, buf, count, offset, err);
  if (r == -1) {
    STAT_ADD (&c->stats, backend_errors, 1);
    if (*err == 0)
      *err = EIO;
  }
  return r;
}

/* The one accounting helper: read len bytes at offset into buf, counted
 * in flight; a successful read is a sample for the estimator (sync: a
 * client waits for it) and, pages > 0 in adaptive mode, for the model.
 */
static int
counted_read (struct rc_cache *c, void *ctx, void *buf, uint32_t len,
              uint64_t offset, ra_pgoff pages, bool sync, int *err)
{
  unsigned inflight = atomic_fetch_add (&c->executing, 1) + 1;
  uint64_t ibytes = atomic_fetch_add (&c->executing_bytes, len) + len;
  uint64_t d0 = atomic_load (&c->delivered_bytes);
  uint64_t t0 = rc_now_ns (), t1;
  int r;

  stat_max (&c->stats.inflight_high_water, inflight);
  r = rc_backend_read_bytes (c, ctx, buf, len, offset, err);
  atomic_fetch_sub (&c->executing_bytes, len);
  rc_hist_observe (&c->stats.backend_read_seconds, rc_now_ns () - t0);
  if (r == 0) {
    struct rc_cong_sample cs = {
      .start_ns = t0, .end_ns = t1 = rc_now_ns (), .bytes = len,
      .inflight = inflight, .inflight_bytes = ibytes, .sync = sync,
      .delivered_bytes = atomic_fetch_add (&c->delivered_bytes, len) + len
        - d0,
    };

    ACQUIRE_LOCK (&c->cong_lock);
    rc_cong_sample (&c->cong, &cs);
    RELEASE_LOCK (&c->cong_lock);
    if (pages > 0 && c->params.mode == RA_MODE_ADAPTIVE) {
      ACQUIRE_LOCK (&c->model_lock);
      ra_model_sample (&c->model, pages, t1 - t0);
      RELEASE_LOCK (&c->model_lock);
    }
  }
  inflight_done (c);
  return r;
}

/* Read the in-flight pages [start, start + count) into buf and complete
 * them (used: buf is a client's, who has read them; sync: a client waits
 * for them).
 */
static int
read_pages_into (struct rc_cache *c, void *ctx, ra_pgoff start,
                 ra_pgoff count, char *buf, bool used, bool sync, int *err)
{
  unsigned shift = c->params.page_shift;
  uint64_t offset = start << shift;
  uint64_t len = count << shift;
  int r = 0;

  *err = 0;
  if (offset >= c->params.export_size)
    len = 0;
  else if (len > c->params.export_size - offset)
    len = c->params.export_size - offset;
  if (len > 0)
    r = counted_read (c, ctx, buf, (uint32_t) len, offset, count, sync, err);
  if (used && r == 0)
    rc_pc_complete_used (c->pc, start, count, buf, len);
  else
    rc_pc_complete (c->pc, start, count, buf, len, r == -1 ? *err : 0);
  return r;
}

/* Bounce buffers for reads whose pages do not lie in one piece, kept
 * for reuse: a fresh buffer per read costs page faults on every read.
 * As many exist as reads ever needed one at once.  They are cut from
 * blocks of huge pages (rc_huge_alloc: a 1 MiB buffer in 4 KiB pages
 * cost 256 page faults the first time, bench/RESULTS.md "Huge pages for
 * the tables and bounce buffers"), as many buffers as a block holds: two
 * of the default 1 MiB in one 2 MiB huge page.
 */
struct rc_bounce_block {
  struct rc_bounce_block *next;
  void *mem;
  size_t map;                   /* rc_huge_alloc's maplen */
  size_t bytes;                 /* counted in bounce_bytes */
};

/* Called with bounce_lock held: a new block, its buffers put on the free
 * list (which stays empty when memory runs out: the read fails with
 * ENOMEM).
 */
static void
bounce_grow (struct rc_cache *c)
{
  size_t len = (size_t) c->params.io_max << c->params.page_shift, n, i;
  struct rc_bounce_block *k = malloc (sizeof *k);

  if (!k)
    return;
  if (!(k->mem = rc_huge_alloc (len, &k->map))) {
    free (k);
    return;
  }
  k->next = c->bounce_blocks;
  c->bounce_blocks = k;
  n = rc_huge_pieces (len);
  for (i = 0; i < n; i++) {
    char *b = (char *) k->mem + i * len;

    memcpy (b, &c->bounce_free, sizeof (char *));
    c->bounce_free = b;
  }
  k->bytes = k->map ? k->map : len;
  atomic_fetch_add (&c->bounce_bytes, k->bytes);
}

static char *
bounce_take (struct rc_cache *c)
{
  char *b;

  ACQUIRE_LOCK (&c->bounce_lock);
  if (!c->bounce_free)
    bounce_grow (c);
  b = c->bounce_free;
  if (b)
    memcpy (&c->bounce_free, b, sizeof (char *));
  RELEASE_LOCK (&c->bounce_lock);
  return b;
}

static void
bounce_put (struct rc_cache *c, char *b)
{
  ACQUIRE_LOCK (&c->bounce_lock);
  memcpy (b, &c->bounce_free, sizeof (char *));
  c->bounce_free = b;
  RELEASE_LOCK (&c->bounce_lock);
}

void
rc_bounce_free_all (struct rc_cache *c)
{
  c->bounce_free = NULL;
  while (c->bounce_blocks) {
    struct rc_bounce_block *k = c->bounce_blocks;

    c->bounce_blocks = k->next;
    atomic_fetch_sub (&c->bounce_bytes, k->bytes);
    rc_huge_free (k->mem, k->map);
    free (k);
  }
}

uint64_t
rc_cache_bounce_bytes (struct rc_cache *c)
{
  return atomic_load (&c->bounce_bytes);
}

int
rc_backend_read_pages (struct rc_cache *c, void *ctx, ra_pgoff start,
                       ra_pgoff count, bool sync, int *err)
{
  char *buf = rc_pc_run_data (c->pc, start, count);
  char *bounce = NULL;
  int r;

  if (buf)
    STAT_ADD (&c->stats, backend_reads_in_place, 1);
  else if (!(buf = bounce = bounce_take (c))) {
    *err = ENOMEM;
    rc_pc_complete (c->pc, start, count, NULL, 0, ENOMEM);
    return -1;
  }
  r = read_pages_into (c, ctx, start, count, buf, false, sync, err);
  if (bounce)
    bounce_put (c, bounce);
  return r;
}

int
rc_backend_read_pages_to (struct rc_cache *c, void *ctx, ra_pgoff start,
                          ra_pgoff count, char *dst, int *err)
{
  STAT_ADD (&c->stats, backend_reads_in_place, 1);
  return read_pages_into (c, ctx, start, count, dst, true, true, err);
}

int
rc_backend_read_direct (struct rc_cache *c, void *ctx, void *buf,
                        uint32_t count, uint64_t offset, int *err)
{
  return counted_read (c, ctx, buf, count, offset, 0, true, err);
}

int
rc_backend_read_around (struct rc_cache *c, void *ctx, void *buf,
                        uint32_t count, uint64_t offset, int *err)
{
  STAT_ADD (&c->stats, backend_reads_in_place, 1);
  return counted_read (c, ctx, buf, count, offset, 0, true, err);
}
