/* ra-cache: what a trigger does (include/racache/trigger.h), once.
 *
 * The sequence, as mm/readahead.c's page_cache_sync_ra and
 * page_cache_async_ra around their readahead_control:
 *
 *   1. covered: a client whose own reads keep the backend busy (several
 *      reads, as many bytes as the backend's bandwidth-delay product and
 *      half of ra-max, counted at the most it kept lately: the WINDOW
 *      congestion question) gets a window of just its request;
 *   2. inputs (adaptive mode): the clock, the backend model, the cache's
 *      fair share, the stream's waste and near hits, and the yield bound;
 *   3. decide: rc_read_decide (the engine, readahead.c);
 *   3b. first burst: before the stream's first read completed, an async
 *      trigger past its first two windows, of a client with ra-io-max
 *      of reads in flight, reads nothing (first_burst);
 *   4. around: a request whose window keeps nothing beyond it (covered,
 *      or its async part may not be kept now), from its first page, is
 *      read around the cache where the user can;
 *   5. submit: the window's new pages inserted in flight, in batches of
 *      t->io pages (a quarter of io_max while yielding, and before the
 *      stream's first read completed: first_reads_quarter);
 *   6. keep or drop: the async part is dropped (its pages removed, the
 *      stream state shrunk: ra_drop_async) when the KEEP congestion
 *      question says so or nobody could read it;
 *   7. issue: the user reads the sync batches and has the async ones
 *      read beside them (or after them: the BESIDE congestion question).
 *
 * Steps 1 to 6 run under the stream's lock, step 7 without it.
 */

#include <config.h>

#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "racache/trigger.h"
#include "racache/util.h"

void
rc_trigger_env_init (struct rc_trigger_env *env,
                     const struct rc_trigger_ops *ops, void *opaque,
                     const struct rc_trigger_cache_ops *cache_ops,
                     void *cache, const struct ra_params *params,
                     struct rc_stats *st)
{
  env->ops = ops;
  env->opaque = opaque;
  env->cache_ops = cache_ops;
  env->cache = cache;
  env->params = params;
  env->st = st;
  atomic_store (&env->random_wait_ns, 0);
  atomic_store (&env->random_wait_owner, 0);
  pthread_mutex_init (&env->near_lock, NULL);
  env->near = (struct ra_near) { 0 };
}

void
rc_trigger_env_destroy (struct rc_trigger_env *env)
{
  pthread_mutex_destroy (&env->near_lock);
}

void
rc_trigger_init (struct rc_trigger *t, struct ra_state *ra, unsigned owner,
                 ra_pgoff index, bool marker, ra_pgoff last,
                 struct rc_read *rd, unsigned depth_reads,
                 uint64_t depth_bytes)
{
  t->ra = ra;
  t->owner = owner;
  t->depth_reads = depth_reads;
  t->depth_bytes = depth_bytes;
  t->lately_reads = depth_reads;
  t->lately_bytes = depth_bytes;
  t->index = index;
  t->marker = marker;
  t->last = last;
  t->rd = rd;
  t->user = NULL;
  memset (&t->w, 0, sizeof t->w);
  t->io = 0;
  t->covered = t->around = t->yielded = false;
  memset (&t->res, 0, sizeof t->res);
  t->dropped = t->burst = 0;
  t->marker_page = RA_NO_MARKER;
  t->need_start = index;
  t->need_end = last;
  t->b = t->inline_b;
  t->n = 0;
  t->cap = RC_TRIGGER_INLINE_BATCHES;
  t->overflow = false;
}

void
rc_trigger_free (struct rc_trigger *t)
{
  if (t->b != t->inline_b)
    free (t->b);
  t->b = t->inline_b;
  t->n = 0;
  t->cap = RC_TRIGGER_INLINE_BATCHES;
}

/* ---- submit: insert the window's pages, collect its batches ---------- */

struct submit {
  struct rc_trigger_env *env;
  struct rc_trigger *t;
  enum rc_insert_kind sync_kind, async_kind;
};

static bool
submit_insert (void *opaque, ra_pgoff index, bool marker, bool async)
{
  struct submit *sub = opaque;

  /* Once the list cannot grow, the rest of the window stays absent and
   * is read on demand.  One slot is always kept for the run being built.
   */
  if (sub->t->overflow)
    return false;
  if (!sub->env->cache_ops->insert (sub->env->cache, index, marker,
                                    async ? sub->async_kind : sub->sync_kind,
                                    sub->t->owner))
    return false;
  if (marker)
    sub->t->marker_page = index;
  return true;
}

static void
submit_batch (void *opaque, ra_pgoff start, ra_pgoff count, bool async)
{
  struct rc_trigger *t = ((struct submit *) opaque)->t;

  t->b[t->n].start = start;
  t->b[t->n].count = count;
  t->b[t->n].async = async;
  t->n++;
  /* Keep a free slot for the run that is being built. */
  if (t->n + 1 >= t->cap) {
    unsigned ncap = t->cap * 2;
    struct rc_batch *nb = malloc (ncap * sizeof *nb);

    if (nb) {
      memcpy (nb, t->b, t->n * sizeof *nb);
      if (t->b != t->inline_b)
        free (t->b);
      t->b = nb;
      t->cap = ncap;
    }
    else
      t->overflow = true;
  }
}

static const struct ra_submit_ops submit_ops = {
  .insert = submit_insert,
  .batch = submit_batch,
};

static bool may_keep_async (struct rc_trigger_env *env);

/* Insert t's window (forced: NBD_CMD_CACHE) in batches of t->io pages. */
static void
submit (struct rc_trigger_env *env, struct rc_trigger *t, bool forced)
{
  struct submit sub = {
    .env = env, .t = t,
    .sync_kind = forced ? RC_INSERT_FORCED
      : t->w.branch == RA_G_RANDOM ? RC_INSERT_RANDOM : RC_INSERT_SYNC,
    .async_kind = forced ? RC_INSERT_FORCED
      : t->w.branch == RA_N_NEAR ? RC_INSERT_NEAR : RC_INSERT_AHEAD,
  };

  STAT_ADD (env->st, windows[t->w.branch], 1);
  ra_submit (&t->w, t->io, &submit_ops, &sub, &t->res);
  /* The near rule's pages before the window (branch N): speculation
   * with no marker, read only when an async part may be kept now.
   */
  if (t->w.behind > 0 && t->w.behind <= t->w.start && !forced &&
      may_keep_async (env)) {
    const struct ra_window b = {
      .branch = t->w.branch, .start = t->w.start - t->w.behind,
      .size = t->w.behind, .async_size = t->w.behind,
      .marker = RA_NO_MARKER,
    };
    struct ra_submit_result res;

    ra_submit (&b, t->io, &submit_ops, &sub, &res);
    t->res.async_pages += res.async_pages;
    t->res.batches += res.batches;
  }
}

/* Would an async part be kept now?  Not when the congestion rule says
 * so, nor when nobody could read it.
 */
static bool
may_keep_async (struct rc_trigger_env *env)
{
  struct rc_cong_load asked = { .executing = 0 };

  return env->ops->congestion (env->opaque, RC_CONG_KEEP, &asked) == RC_CONG_GO
    && (!env->ops->ready || env->ops->ready (env->opaque));
}

/* Step 6: drop the async part when it may not be kept. */
static void
keep_or_drop (struct rc_trigger_env *env, struct rc_trigger *t)
{
  if (t->res.async_pages == 0 || may_keep_async (env))
    return;
  t->dropped = rc_drop_async_batches (t->ra, &t->w, t->last, t->b, &t->n,
                                      env->cache_ops->abandon, env->cache);
  STAT_ADD (env->st, async_skipped, 1);
  STAT_ADD (env->st, async_skipped_pages, t->dropped);
}

/* The first burst.  Before a stream's first read has completed, its
 * async triggers come as fast as a deep client's reads reach the filter
 * (nbdcopy's 16 in a millisecond), not one consumption time apart as
 * the kernel's ramp assumes: the ramp would read 1M, 2M and 4M ahead on
 * nothing but the order of the reads, while the client asks for most of
 * those pages itself, and every page read ahead is cache memory that a
 * fresh server touches for the first time.  So until then a stream
 * makes its first two windows with an async part (the initial one and
 * the next: all that a client of a few reads, such as 256K depth 4,
 * triggers), and a later async trigger whose client has at least
 * ra-io-max of its own reads in flight reads nothing.  The window stays
 * in the stream state, as though read, so that the client's read that
 * reaches its start finds it missing and the ramp goes on from it
 * (branch B, sync), sized as it would have been; its pages count as
 * async_burst_pages.  Adaptive mode only: kernel mode is the kernel's
 * rules exactly.  A client with less in flight (64K depth 16: 320K
 * at its third trigger) needs the window's head start: its reads are
 * not enough to keep the backend busy.
 */
static bool
first_burst (const struct rc_trigger_env *env, struct rc_trigger *t)
{
  if (env->params->mode != RA_MODE_ADAPTIVE || t->ra->prev_valid ||
      t->w.async_size == 0)
    return false;
  if (t->ra->first_windows < 2) {
    t->ra->first_windows++;
    return false;
  }
  return t->marker && t->w.async_size == t->w.size &&
    t->depth_bytes >= (uint64_t) env->params->io_max
                      << env->params->page_shift;
}

/* Backend reads of a quarter of ra-io-max for the windows a stream makes
 * before its first read has completed (adaptive mode).  A deep client's
 * next reads land at once in the pages of those windows, and each waits
 * for the backend read that holds its page: on a fresh server a whole
 * background read of 1 MiB came back far later than the client's own
 * reads (figures: bench/RESULTS.md, "The first windows in quarter
 * reads").  Not random reads (G) nor near windows (N): they read the
 * request alone, as a client's own read.
 */
static bool
first_reads_quarter (const struct rc_trigger_env *env,
                     const struct rc_trigger *t, bool prev_valid)
{
  return env->params->mode == RA_MODE_ADAPTIVE && !prev_valid &&
    t->w.branch != RA_G_RANDOM && t->w.branch != RA_N_NEAR;
}

/* ---- the yield bound and the inputs ---------------------------------- */

/* What a yielding stream keeps of x pages (a quarter, at least one). */
static ra_pgoff
yield_part (ra_pgoff x)
{
  return x / RC_YIELD_DIV > 0 ? x / RC_YIELD_DIV : 1;
}

/* The yield bound.  A client that waits for a read at random (a branch
 * G window: a guest's random I/O) queues behind the bytes that
 * speculation has in flight, on the backend, on the link and on the
 * CPUs that move them; so, for a while after a client of another stream
 * last did, each stream's windows are bounded to a quarter of the
 * congestion bound and read in backend reads of a quarter of ra-io-max,
 * as ra-io-max set to a quarter would make them.  A lone stream, or one
 * whose own reads are the random ones, never yields.  Measured in the
 * bench/RESULTS.md ("Congestion measured").  Only a stream with a read
 * completed counts as a random reader (random_read below).
 */
static bool
yielding (struct rc_trigger_env *env, unsigned owner, uint64_t now)
{
  uint64_t t = atomic_load_explicit (&env->random_wait_ns,
                                     memory_order_relaxed);

  return t != 0 && now - t < RC_YIELD_NS &&
    atomic_load_explicit (&env->random_wait_owner, memory_order_relaxed)
    != owner;
}

/* A deep sequential client's reads reach the cache out of order (the
 * server's threads race): one that lands ahead of the stream's previous
 * position looks random to the engine (branch G) but lies within the
 * span of the stream's own reads in flight.  It is no random reader
 * waiting, and must not make the other streams yield.
 */
static bool
reordered (const struct ra_params *p, const struct rc_trigger *t,
           uint64_t prev_pos)
{
  uint64_t at = t->index << p->page_shift;
  uint64_t span = 2 * t->depth_bytes +
    ((t->last - t->index) << p->page_shift);

  return t->depth_reads >= 2 &&
    (at >= prev_pos ? at - prev_pos : prev_pos - at) <= span;
}

/* Is the window a read at random?  A branch G window, not a deep
 * client's reordered read, of a stream with a read completed: before
 * that a stream has no history and its first reads are branch G
 * wherever they lie, and streams that start together each at its own
 * offset (fio's jobs, nbdcopy's connections) yielded to each other for a
 * second (bench/RESULTS.md, "A stream's first reads are no random
 * reader").  Such a read of a client not covered makes the others
 * yield (the yield bound above); a large one of a deep client is read
 * around the cache (large_random_read).
 */
static bool
random_read (const struct ra_params *p, const struct rc_trigger *t,
             bool prev_valid, uint64_t prev_pos)
{
  return t->w.branch == RA_G_RANDOM && t->w.size > 0 && prev_valid &&
    !reordered (p, t, prev_pos);
}

static void
note_random_wait (struct rc_trigger_env *env, unsigned owner)
{
  atomic_store_explicit (&env->random_wait_owner, owner,
                         memory_order_relaxed);
  atomic_store_explicit (&env->random_wait_ns,
                         env->ops->now_ns ? env->ops->now_ns (env->opaque)
                         : 0, memory_order_relaxed);
}

/* Adaptive mode: what the engine is told at each decision. */
static void
inputs (struct rc_trigger_env *env, const struct rc_trigger *t,
        struct ra_inputs *in)
{
  memset (in, 0, sizeof *in);
  in->now_ns = env->ops->now_ns ? env->ops->now_ns (env->opaque) : 0;
  if (!env->ops->model || !env->ops->model (env->opaque, &in->lat_ns,
                                            &in->page_ns))
    in->lat_ns = -1;
  if (env->cache_ops->inputs)
    env->cache_ops->inputs (env->cache, t->owner, in);
  if (t->marker && env->cache_ops->owner) {
    unsigned o = env->cache_ops->owner (env->cache, t->index);

    in->foreign_marker = o != 0 && o != t->owner % RC_PC_OWNERS;
  }
  in->yield_max = yielding (env, t->owner, in->now_ns)
    ? yield_part (env->params->self_max) : 0;
}

/* ---- the rate of a covered client ------------------------------------ */

/* The bytes a ns the client read while covered, for the calm let-go
 * (include/racache/congestion.h, RC_CONG_WINDOW): a client whose reads
 * wait on the distance alone reads its depth in a base latency; one that
 * reads much less is bound by something windows do not move.  Measured
 * from the first trigger after one of its reads completed once it was
 * covered (the wait for its first reads does not count) to now, over
 * the last one to two segments of RATE_SEGMENT_DEPTHS times its depth
 * (rc_covered_note: the start of the older one moves on when a segment
 * ends, so a slow start ages out); not asked once the client was let go
 * (its verdict then stands: rc_cong_load's let_go).  The mean over that
 * time, idle gaps included, against the most the client kept in flight
 * lately: both err towards keeping a client covered.  0: not measured
 * (no read completed, no clock); a client that read nothing since gets
 * the smallest positive rate.
 */
double
rc_covered_rate (const struct ra_state *ra, uint64_t now)
{
  const struct ra_covered_rate *c = &ra->cov;

  if (c->from_ns == 0 || now <= c->from_ns)
    return 0;
  if (ra->done_bytes == c->from_bytes)
    return DBL_MIN;
  return (double) (ra->done_bytes - c->from_bytes)
    / (double) (now - c->from_ns);
}

/* How long a let-go client's record outlasts GO answers: a client whose
 * reads in progress fall for a moment under what covers it is the same
 * client (1M at depth 4 behind 50 ms at 1 Gbit/s: one GO, then covered
 * again at its next trigger); one that read shallow for as long as
 * what it kept lately takes to halve (RC_CONG_LATELY_HALF_NS) is not.
 */
#define LET_GO_KEPT_NS RC_CONG_LATELY_HALF_NS

/* A segment of the measure ends once the client completed this many
 * times the bytes it keeps in flight since the segment began: eight
 * depths are eight base latencies of a client the distance bounds, as
 * the calm is (CALM_BASES in src/congestion.c), more of one bound by
 * anything else.  Over the whole time covered, the first reads of a
 * fresh server held a latency-bound client covered: qemu-img bench 1M at
 * depth 2 behind 10 ms read its first 20M at 22-28 ms a pair of reads
 * where the base latency was 11 ms, and the mean since reached three
 * quarters of its depth a base latency only after 900 ms.  With four
 * depths, qemu-img convert behind 10 ms (16M deep, bound by the CPU)
 * passed the test in 1 run of 3, for one segment, and was let go until
 * its sync reads queued (bench/RESULTS.md, "The covered rate over the
 * last segments").
 */
#define RATE_SEGMENT_DEPTHS 8

/* The stream's record of the WINDOW answer a: covered or not, whether
 * the sync reads queued (COVERED), since when it has been covered or let
 * go calm, and the measure above; all from afresh once the client is
 * neither covered nor let go calm.  A client let go stays so while the
 * calm lasts (include/racache/congestion.h, RC_CONG_WINDOW): its record
 * stands through answers that cover it calm and through GO answers for
 * less than LET_GO_KEPT_NS, so that covered again it is let go again
 * at once, not covered for another 8 base latencies; it starts afresh
 * once the sync reads queue while it is covered (COVERED: the calm
 * ended), or after GO answers for LET_GO_KEPT_NS.  Once let go, a
 * client is not held covered by a queue it saw (queue_seen): once the
 * sync reads are calm again it is judged as any calm covered client (8
 * base latencies, the rate measured afresh).  Its own windows made them
 * queue for 40 ms after the let-go of 1M at depth 2 behind 10 ms, and
 * held covered by that, it read at no filter's speed to the end of the
 * job (in 3 of 8 alternated runs; bench/RESULTS.md, "A queue after the
 * let-go").
 */
void
rc_covered_note (struct ra_state *ra, enum rc_cong_answer a, uint64_t now,
                 uint64_t depth_bytes)
{
  struct ra_covered_rate *c = &ra->cov;

  ra->covered = a == RC_CONG_COVERED || a == RC_CONG_COVERED_CALM;
  ra->queue_seen = a == RC_CONG_COVERED && !ra->let_go_once;
  if (c->let_go && a != RC_CONG_COVERED) {
    if (a != RC_CONG_GO) {
      c->go_since_ns = 0;
      return;
    }
    if (c->go_since_ns == 0)
      c->go_since_ns = now;
    if (now - c->go_since_ns < LET_GO_KEPT_NS)
      return;
  }
  if (c->let_go || (!ra->covered && a != RC_CONG_UNCOVERED_CALM)) {
    ra->covered_since_ns = 0;
    *c = (struct ra_covered_rate) { 0 };
    if (!ra->covered)
      return;
  }
  if (ra->covered && ra->covered_since_ns == 0) {
    ra->covered_since_ns = now;
    c->mark_bytes = ra->done_bytes;
  }
  if (c->from_ns == 0 && now != 0 && ra->done_bytes > c->mark_bytes) {
    c->from_ns = c->seg_ns = now;
    c->from_bytes = c->seg_bytes = ra->done_bytes;
  }
  else if (c->from_ns != 0 && depth_bytes > 0 && now > c->seg_ns &&
           ra->done_bytes - c->seg_bytes
           >= RATE_SEGMENT_DEPTHS * depth_bytes) {
    c->from_ns = c->seg_ns;
    c->from_bytes = c->seg_bytes;
    c->seg_ns = now;
    c->seg_bytes = ra->done_bytes;
  }
  if (a == RC_CONG_UNCOVERED_CALM)
    c->let_go = ra->let_go_once = true;
}

/* ---- read around ------------------------------------------------------ */

/* A random read (branch G: the request alone) of a quarter of
 * ra-io-max or more, by a client with several reads in flight: a copy
 * tool reading clusters out of order (qemu-img convert of a qcow2 image
 * whose clusters were written over time) reads such data once, and kept
 * pages only cost it fresh memory and a copy (bench/RESULTS.md, "Large
 * random reads around the cache").  Read around as the covered client's
 * reads are: its groups are remembered as given back, so data read a
 * second time is kept (around_ok then says no).  at_random: the window is
 * a read at random (random_read), not a stream's first reads nor a deep
 * sequential client's reordered one, whose pages are the history the
 * next windows are sized from (a 256K depth-4 reader behind 50 ms lost
 * to reading them around).
 */
static bool
large_random_read (const struct rc_trigger_env *env,
                   const struct rc_trigger *t, bool at_random)
{
  return at_random && t->depth_reads >= 2 &&
    t->w.size >= yield_part (env->params->io_max);
}

/* Step 4: read the client's request around the cache, when all the
 * window would keep of it is that request, from its first page: either
 * the client's own reads cover the backend (a request-only window), or
 * the window's async part may not be kept now (the reads running and
 * queued, the clients' above all, already keep the backend busy), so
 * that its sync part is all that would be read.  For a client with
 * several reads in flight (depth), that holds also when the sync part
 * reaches past the request (branch B's pull-in after a dropped async
 * part: 1 MiB where nbdcopy asked for 256K): the client's other reads
 * ask for those pages themselves, and are read around in turn.  Pages
 * for data a stream reads once only cost then: memory touched for the
 * first time, a copy into them and their bookkeeping (a copy tool with
 * many reads in flight on each of its connections lost to no filter so;
 * bench/RESULTS.md, "Copy tools at every distance").  Not for random
 * reads (branch G: their pages are kept, as data read again), but for
 * the large ones of a deep client (large_random_read above), nor near
 * windows (N), and only where the user can (around_ok: a client buffer, nothing of the
 * request cached, in flight or given back lately).  A dropped async part
 * shrinks the stream state as a dropped batch would (ra_drop_async), a
 * sync part cut to the request shrinks it to the request
 * (ra_keep_only), so the stream goes on with branch B at its next read.
 */
static bool
read_around (struct rc_trigger_env *env, struct rc_trigger *t,
             bool at_random)
{
  const struct ra_window *w = &t->w;
  ra_pgoff req = t->last - t->index, sync = w->size - w->async_size;
  ra_pgoff dropped;

  if (!t->rd || t->marker || !env->ops->around_ok ||
      t->index != t->rd->first || w->start != t->index || w->size < req)
    return false;
  if (large_random_read (env, t, at_random))
    dropped = 0;
  else if (t->covered) {
    if (w->async_size != 0)
      return false;
    dropped = 0;
  }
  else {
    if (w->async_size == 0 ||
        (sync > req && t->depth_reads < 2) ||
        w->branch == RA_G_RANDOM || w->branch == RA_N_NEAR ||
        may_keep_async (env))
      return false;
    dropped = w->size - req;
  }
  if (!env->ops->around_ok (env->opaque, t))
    return false;
  STAT_ADD (env->st, windows[w->branch], 1);
  if (dropped > 0) {
    if (sync > req)
      ra_keep_only (t->ra, w, req);
    else
      ra_drop_async (t->ra, w, dropped);
    STAT_ADD (env->st, async_skipped, 1);
    STAT_ADD (env->st, async_skipped_pages, dropped);
  }
  t->around = true;
  return true;
}

/* ---- the trigger --------------------------------------------------- */

/* Steps 1 to 6 (see the top of this file); t->around when step 4 says
 * to read around instead.
 */
static void
decide_and_submit (struct rc_trigger_env *env, struct rc_trigger *t)
{
  const struct ra_params *p = env->params;
  struct ra_params request_only;
  struct ra_inputs in, *inp = NULL;
  uint64_t prev_pos = t->ra->prev_pos;
  bool prev_valid = t->ra->prev_valid, at_random;
  struct rc_cong_load asked = {
    .client_reads = t->depth_reads > t->lately_reads
      ? t->depth_reads : t->lately_reads,
    .client_bytes = t->depth_bytes > t->lately_bytes
      ? t->depth_bytes : t->lately_bytes,
    .covered = t->ra->covered, .queue_seen = t->ra->queue_seen,
    .covered_since_ns = t->ra->covered_since_ns,
    .now_ns = env->ops->now_ns ? env->ops->now_ns (env->opaque) : 0,
  };
  enum rc_cong_answer a;

  t->io = p->io_max;
  asked.covered_rate = rc_covered_rate (t->ra, asked.now_ns);
  asked.let_go = t->ra->cov.let_go;
  a = env->ops->congestion (env->opaque, RC_CONG_WINDOW, &asked);
  rc_covered_note (t->ra, a, asked.now_ns, asked.client_bytes);
  if (t->ra->covered) {
    request_only = *p;
    request_only.ra_max = 0;
    p = &request_only;
    t->covered = true;
    STAT_ADD (env->st, async_covered, 1);
  }
  if (p->mode == RA_MODE_ADAPTIVE && p->ra_max > 0) {
    inputs (env, t, &in);
    inp = &in;
    if (in.wasted > 0)
      STAT_ADD (env->st, adapt_waste_events, 1);
  }
  if (inp) {
    ACQUIRE_LOCK (&env->near_lock);
    rc_read_decide (t->ra, p, env->cache_ops->query, env->cache, t->rd,
                    t->index, t->marker, t->last, inp, &env->near, &t->w);
    RELEASE_LOCK (&env->near_lock);
    if ((t->w.branch == RA_G_RANDOM || t->w.branch == RA_N_NEAR) &&
        env->cache_ops->near_step)
      env->cache_ops->near_step (env->cache);
  }
  else
    rc_read_decide (t->ra, p, env->cache_ops->query, env->cache, t->rd,
                    t->index, t->marker, t->last, NULL, NULL, &t->w);
  if (inp) {
    atomic_store_explicit (&env->st->adapt_cap_pages, t->ra->ad.cap,
                           memory_order_relaxed);
    if (in.yield_max) {
      STAT_ADD (env->st, windows_yielded, 1);
      t->io = yield_part (p->io_max);
      t->yielded = true;
    }
  }
  if (first_reads_quarter (env, t, prev_valid))
    t->io = yield_part (p->io_max);
  at_random = random_read (p, t, prev_valid, prev_pos);
  if (at_random && !t->covered)
    note_random_wait (env, t->owner);
  if (t->w.size == 0)
    return;
  if (first_burst (env, t)) {
    t->burst = t->w.size;
    STAT_ADD (env->st, async_burst_pages, t->burst);
  }
  else if (!read_around (env, t, at_random)) {
    submit (env, t, false);
    keep_or_drop (env, t);
  }
  if (env->ops->decided)
    env->ops->decided (env->opaque, t);
}

int
rc_trigger (struct rc_trigger_env *env, struct rc_trigger *t,
            pthread_mutex_t *lock, int *err)
{
  if (lock)
    ACQUIRE_LOCK (lock);
  decide_and_submit (env, t);
  if (lock)
    RELEASE_LOCK (lock);
  if (t->around)
    return env->ops->around (env->opaque, t, err);
  return env->ops->issue (env->opaque, t, err);
}

int
rc_trigger_forced (struct rc_trigger_env *env, ra_pgoff *index,
                   ra_pgoff last, void *user, int *err)
{
  struct rc_trigger t;
  int r;

  rc_trigger_init (&t, NULL, 0, *index, false, last, NULL, 0, 0);
  t.user = user;
  if (!ra_forced (env->params, *index, last, &t.w))
    return 0;
  t.io = env->params->io_max;
  t.need_start = 0;
  t.need_end = RA_NO_MARKER;
  submit (env, &t, true);
  r = env->ops->issue (env->opaque, &t, err);
  /* When the batch list could not grow (out of memory), the rest of
   * the chunk was not inserted: go on from the end of the last batch.
   */
  if (t.overflow && t.n > 0)
    *index = t.b[t.n - 1].start + t.b[t.n - 1].count;
  else
    *index = t.w.start + t.w.size;
  rc_trigger_free (&t);
  return r == -1 ? -1 : 1;
}

bool
rc_trigger_late (struct rc_trigger_env *env, struct rc_trigger *t,
                 pthread_mutex_t *lock)
{
  const struct ra_params *p = env->params;
  struct rc_cong_load asked = { .executing = 0 };
  ra_pgoff m, reads;
  void *user;
  unsigned lately_reads;
  uint64_t lately_bytes;
  int ignored;

  STAT_ADD (env->st, adapt_late, 1);
  if (lock)
    ACQUIRE_LOCK (lock);
  m = ra_late (t->ra, p, t->index);
  reads = (t->ra->ad.cap + p->io_max - 1) / p->io_max;
  if (lock)
    RELEASE_LOCK (lock);
  asked.new_reads = (unsigned) reads;
  if (m == RA_NO_MARKER ||
      env->ops->congestion (env->opaque, RC_CONG_EARLY, &asked) != RC_CONG_GO ||
      !env->cache_ops->take_marker (env->cache, m))
    return false;
  STAT_ADD (env->st, adapt_early_triggers, 1);
  user = t->user;
  lately_reads = t->lately_reads;
  lately_bytes = t->lately_bytes;
  rc_trigger_init (t, t->ra, t->owner, m, true, m + 1, NULL, t->depth_reads,
                   t->depth_bytes);
  t->user = user;
  t->lately_reads = lately_reads;
  t->lately_bytes = lately_bytes;
  rc_trigger (env, t, lock, &ignored);
  return true;
}

/* ---- the filter's cache: src/pagecache.c ------------------------------ */

static bool
pc_insert (void *cache, ra_pgoff index, bool marker, enum rc_insert_kind kind,
           unsigned owner)
{
  return rc_pc_insert (cache, index, marker, kind, owner);
}

static ra_pgoff
pc_abandon (void *cache, ra_pgoff start, ra_pgoff count)
{
  return rc_pc_abandon (cache, start, count);
}

static bool
pc_take_marker (void *cache, ra_pgoff index)
{
  return rc_pc_take_marker (cache, index);
}

static void
pc_inputs (void *cache, unsigned owner, struct ra_inputs *in)
{
  in->share = ra_fair_share (rc_pc_capacity (cache), rc_pc_markers (cache));
  in->wasted = rc_pc_take_wasted (cache, owner);
  in->near_hits = rc_pc_take_near_hits (cache);
}

static unsigned
pc_owner (void *cache, ra_pgoff index)
{
  return rc_pc_page_owner (cache, index);
}

static void
pc_near_step (void *cache)
{
  rc_pc_near_step (cache);
}

const struct rc_trigger_cache_ops rc_pc_trigger_ops = {
  .query = &rc_pc_query_ops,
  .insert = pc_insert,
  .abandon = pc_abandon,
  .take_marker = pc_take_marker,
  .inputs = pc_inputs,
  .owner = pc_owner,
  .near_step = pc_near_step,
};
