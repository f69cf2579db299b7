/* ra-cache: the read path, the congestion rule and the engine
 * parameters, once (include/racache/readpath.h).
 */

#include <config.h>

#include <limits.h>

#include "racache/readpath.h"

void
rc_read_init (struct rc_read *rd, uint64_t offset, uint64_t count,
              unsigned shift)
{
  uint64_t ps = UINT64_C (1) << shift;

  rd->offset = offset;
  rd->count = count;
  rd->first = offset >> shift;
  rd->last = (offset + count + ps - 1) >> shift;
  rd->done_start = rd->done_end = 0;
  rd->done_missed = false;
  rd->copied_end = offset;
  rd->user = NULL;
}

/* Over 80 lines on purpose: one loop over the read's pages whose cases
 * (delivered by a trigger, a run of hits, one page's access) share the
 * page and its tries, and read best side by side.
 */
int
rc_read_path (const struct rc_read_ops *ops, void *opaque,
              struct rc_stats *st, unsigned shift, struct rc_read *rd,
              int *err)
{
  uint64_t ps = UINT64_C (1) << shift;
  uint64_t offset = rd->offset, end = offset + rd->count;
  ra_pgoff i = rd->first;
  unsigned tries = 0;

  while (i < rd->last) {
    uint64_t page_start = i << shift;
    uint64_t from = offset > page_start ? offset : page_start;
    uint64_t to = end < page_start + ps ? end : page_start + ps;
    bool waited = false, waited_ahead = false;
    int ignored;

    if (i == rd->done_start && rd->done_end > i) {
      /* Delivered by a sync trigger: its page counted as a miss. */
      if (rd->done_missed)
        STAT_ADD (st, page_misses, rd->done_end - i - (tries > 0));
      else
        STAT_ADD (st, page_hits, rd->done_end - i - (tries > 0));
      i = rd->done_end;
      rd->done_end = 0;
      rd->copied_end = (i << shift) < end ? i << shift : end;
      tries = 0;
      continue;
    }
    /* Whole pages that are plain hits: many at a time. */
    if (ops->copy_run && tries == 0 && from == page_start &&
        to == page_start + ps &&
        !(i < rd->done_start && rd->done_end > rd->done_start)) {
      ra_pgoff whole = (end >> shift) - i;
      unsigned k = ops->copy_run (opaque, rd, i,
                                  whole > UINT_MAX ? UINT_MAX
                                  : (unsigned) whole);

      if (k > 0) {
        STAT_ADD (st, page_hits, k);
        i += k;
        rd->copied_end = i << shift;
        continue;
      }
    }
    switch (ops->access (opaque, rd, i, from, to, &waited, &waited_ahead)) {
    case RC_ACCESS_COPIED:
      if (tries == 0)
        STAT_ADD (st, page_hits, 1);
      if (waited)
        STAT_ADD (st, page_waits, 1);
      rd->copied_end = to;
      if (waited_ahead && ops->late)
        ops->late (opaque, rd, i);
      i++;
      tries = 0;
      break;

    case RC_ACCESS_MARKER:
      /* Async trigger; a failure there is not this client's. */
      ops->trigger (opaque, rd, i, true, &ignored);
      break;

    case RC_ACCESS_ABSENT:
      if (tries == 0)
        STAT_ADD (st, page_misses, 1);
      if (++tries > RC_READ_MAX_TRIES) {
        /* The cache cannot hold the page for us: read around it. */
        STAT_ADD (st, direct_reads, 1);
        if (ops->direct (opaque, rd, i, from, to, err) == -1)
          return -1;
        rd->copied_end = to;
        i++;
        tries = 0;
        break;
      }
      /* Fails only if a read of a page of the request failed (see the
       * trigger op), whatever became of page i since.
       */
      if (ops->trigger (opaque, rd, i, false, err) == -1)
        return -1;
      break;
    }
  }
  STAT_ADD (st, client_bytes, rd->count);
  return 0;
}

void
rc_read_decide (struct ra_state *ra, const struct ra_params *p,
                const struct ra_cache_ops *cache, void *opaque,
                const struct rc_read *rd, ra_pgoff index, bool marker,
                ra_pgoff last, const struct ra_inputs *in,
                struct ra_near *near, struct ra_window *w)
{
  const struct ra_control ctl = {
    .ra = ra, .p = p, .cache = cache, .opaque = opaque,
    .index = index, .marker = marker, .req = last - index, .in = in,
    .near = near,
  };

#if RC_PREV_POS_PER_BATCH
  if (rd && rd->copied_end > rd->offset)
    ra_update_prev_pos (ra, rd->copied_end);
#else
  (void) rd;
#endif
  ra_ondemand_at (&ctl, w);
}

void
rc_behind_init (struct rc_behind *bh)
{
  unsigned k;

  bh->behind = RA_NO_MARKER;    /* no read yet */
  for (k = 0; k < RC_STREAM_READS; k++)
    bh->reading[k] = RA_NO_MARKER;
}

int
rc_behind_start (struct rc_behind *bh, ra_pgoff first)
{
  int k;

  for (k = 0; k < RC_STREAM_READS; k++)
    if (bh->reading[k] == RA_NO_MARKER) {
      bh->reading[k] = first;
      return k;
    }
  return -1;
}

/* Giving back from where the stream gave back last, its pages come back
 * in the order it read them even when its reads complete out of order
 * (qemu-img convert has eight 2M reads in flight), and their memory
 * comes back in one piece for its next windows.  A stream that jumped
 * back or forward (a fresh stream too) starts again from there, giving
 * back only what lies behind the read that jumped.
 */
ra_pgoff
rc_behind_end (struct rc_behind *bh, int slot, ra_pgoff first, ra_pgoff end,
               ra_pgoff b, ra_pgoff *to)
{
  ra_pgoff low = end, hi, from, span;
  int k;

  if (slot >= 0)
    bh->reading[slot] = RA_NO_MARKER;
  for (k = 0; k < RC_STREAM_READS; k++)
    if (bh->reading[k] < low)
      low = bh->reading[k];
  hi = low > b ? low - b : 0;
  if (bh->behind == RA_NO_MARKER || hi + 2 * b < bh->behind)
    bh->behind = first > b ? first - b : 0;   /* first read, or jumped back */
  *to = hi;
  if (hi <= bh->behind)
    return hi;
  from = bh->behind;
  span = 32 * b > 2 * (end - first) ? 32 * b : 2 * (end - first);
  if (hi - from > span) {                       /* jumped forward */
    from = first > b ? first - b : 0;
    if (from > hi)
      from = hi;
  }
  bh->behind = hi;
  return from;
}

ra_pgoff
rc_drop_async_batches (struct ra_state *ra, const struct ra_window *w,
                       ra_pgoff last, struct rc_batch *b, unsigned *n,
                       ra_pgoff (*abandon) (void *opaque, ra_pgoff start,
                                            ra_pgoff count),
                       void *opaque)
{
  ra_pgoff dropped = 0;
  unsigned i, j;

  for (i = j = 0; i < *n; i++) {
    if (b[i].async && b[i].start >= last)
      dropped += abandon (opaque, b[i].start, b[i].count);
    else
      b[j++] = b[i];
  }
  *n = j;
  if (ra)
    ra_drop_async (ra, w, dropped);
  return dropped;
}

void
rc_engine_params_io_max (const struct rc_config *cfg, struct ra_params *p,
                         ra_pgoff io_max)
{
  p->io_max = io_max ? io_max : 1;
  p->self_max =
    ra_self_max (cfg->congestion_threshold ? cfg->congestion_threshold
                 : rc_default_congestion_threshold (cfg->max_background),
                 p->io_max);
}

void
rc_engine_params (const struct rc_config *cfg, unsigned nworkers,
                  struct ra_params *p)
{
  p->page_shift = (unsigned) __builtin_ctzll (cfg->page_size);
  p->ra_max = cfg->ra_max >> p->page_shift;
  p->export_size = 0;
  p->mode = cfg->mode;
  p->adapt_min = RC_ADAPT_MIN_WINDOW >> p->page_shift;
  p->parallel = nworkers ? nworkers : 1;
  rc_engine_params_io_max (cfg, p, cfg->io_max >> p->page_shift);
}
