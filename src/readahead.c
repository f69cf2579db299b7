/* ra-cache: the readahead engine.
 *
 * The big picture
 * ===============
 *
 * Readahead reads pages into the cache before a client asks for them.  It
 * only ever reads pages that are not in the cache yet.  It is triggered in
 * two ways, both from the client read path:
 *
 *  - a sync trigger: the page a client needs is not cached at all;
 *  - an async trigger: the page a client needs is cached and carries the
 *    marker, which means "this page was read ahead, and now that it is
 *    used it is time to read the next window".  The read path clears the
 *    marker before calling us.
 *
 * Either trigger calls ondemand(), which decides a window: start, size and
 * async_size.  Every window is partly a sync part and partly an async
 * part: the first size - async_size pages are the sync part (a client is
 * waiting for them: they are not speculation, and are never skipped), and
 * the last async_size pages are the async part (nobody waits for them:
 * they are genuinely ahead, and may be skipped when the backend is
 * congested).  The first page of the async part carries the marker.  Once
 * a sequential stream is established its windows are wholly async: the
 * reader keeps finding the marker before it runs out of pages.
 *
 * req (the kernel's req_count) is the pages of the client request from
 * the accessed page.  It names specific pages, not just a number: where
 * the window starts past the accessed page (because pages in between are
 * cached), only the requested pages at or past the window's start are
 * still wanted, and only those form the sync part (correction 1 in
 * doc/readahead-rules.md; Linux 5.18 made it wholly async, which its own
 * documentation calls wrong).
 *
 * ondemand() tries these branches in order:
 *
 *  A  index 0: INITIAL.  Reads from the start of an export are usually
 *     sequential, so start a window right away.
 *  B  index is where the stream state expects the next trigger: the first
 *     page of its async part (the marker page) or the page just after the
 *     window.  Sequential: push the window forward and ramp its size up
 *     (next_size).  A sync trigger's window starts at the needed page
 *     (correction 3, Linux 6.11).
 *  C  an async trigger that the state does not explain: another stream
 *     interleaved with this one owns the state.  The page cache is the
 *     history: the next window starts at the first hole after index and
 *     its size ramps up from the distance to that hole plus req
 *     (160334a0cfa8).  With no hole within ra_max there is nothing to
 *     read (correction 2, Linux 6.11).
 *  D  req larger than ra_max: oversize read: INITIAL.
 *  E  index is prev_pos's page or the one after: a sequential miss
 *     (the window was lost, or the stream is just starting): INITIAL.
 *  F  context readahead: count the contiguous cached pages before index.
 *     If they are more than req, they are probably an earlier part of
 *     this stream: size the window from them (doubled when they reach
 *     back to page 0), with a one page async part.
 *  G  a random read: read exactly the request, no marker, leave the
 *     stream state alone.  In adaptive mode the near rule (near.c) is
 *     asked first, and may make it an N window instead.
 *
 * The code is split as the kernel's: the async trigger is async_ra()
 * (page_cache_async_ra: A, B, C), the sync trigger sync_ra()
 * (page_cache_sync_ra: A, B, D, E, F, then N or G); before them, adaptive
 * mode's prologue decides the cap, and after them the window is pulled
 * in if needed and emitted.
 *
 * INITIAL starts a window at index sized by init_size(req), with the
 * pages beyond the request as its async part.  Before submitting, if the
 * window starts at index and is wholly async, the read would hit its own
 * marker at once, so the next window is pulled in (merged) now.
 *
 * submit() inserts the new pages (not up to date) into the cache, sets the
 * marker, and turns each contiguous run of new pages into backend reads
 * of at most io_max pages.  When the backend is congested the caller may
 * read only the sync part: it removes the async pages from the cache and
 * ra_drop_async() shrinks the state to what was really read, so the next
 * access misses at start + size and branch B continues the stream.
 *
 * Where this deviates from the kernel it is said at that branch.
 * doc/readahead-rules.md explains every branch and correction N here.
 *
 * Adaptive mode
 * =============
 *
 * The kernel's largest window, ra_max, is one constant for every
 * stream: right for a disk a fraction of a millisecond away, too small
 * over a network (the reader runs out of pages while the next window is
 * still on its way) and too large for many streams sharing a small
 * cache (read-ahead pages are evicted before they are reached).  In
 * adaptive mode (ra-mode=adaptive) the branches, the sync and async
 * parts, the marker and the congestion rule are all as above; only the
 * largest window is per stream, its cap, decided at every trigger:
 *
 *  - the model size: the smallest power of two W (from adapt_min) with
 *    W >= 2 * rate * fetch(W), where rate is the stream's consumption
 *    rate (pages between its sequential async triggers over the time
 *    between them, a moving average) and fetch(W) the time a window of
 *    W pages takes to arrive: its backend reads of at most io_max pages
 *    run `parallel` at a time, each costing latency + pages * per-page
 *    cost (struct ra_model, measured over the backend's reads).  A
 *    window is read while the previous one is consumed (its marker is
 *    its first page), so W >= rate * fetch(W) keeps the reader from
 *    waiting; the factor 2 is the margin for variation.  Until both are
 *    measured the model size is the limit;
 *  - late feedback (ra_late): a reader that waits for a page an async
 *    part has in flight undoes a waste step or else doubles the
 *    stream's windows (boost), and takes the stream's next marker now,
 *    so the next window starts early (once until the reader reaches the
 *    marker so taken);
 *  - waste feedback: pages this stream read ahead that were evicted
 *    unused halve its windows (shrink);
 *  - after 8 windows without either event, one step of shrink, else of
 *    boost, is undone;
 *  - the limit: ra_max, the window whose backend reads stay below the
 *    congestion threshold (self_max: a larger window would make its own
 *    stream look congested and skip its next async part), the stream's
 *    fair share of the cache (share), and, while other clients wait for
 *    reads at random beside it, the caller's yield bound (yield_max:
 *    speculation's bytes in flight are what those reads queue behind).
 *    The cap is never below adapt_min (unless ra_max is).
 *
 * All of it is deterministic given struct ra_inputs (clock, backend
 * model estimate, share, waste, near hits, yield bound), which the
 * caller measures.
 *
 * The near rule (branch N, adaptive mode only) is in near.c, with its
 * own big picture.
 */

#include <config.h>

#include <assert.h>
#include <stddef.h>

#include "racache/readahead.h"
#include "readahead-internal.h"

/* Each branch's letter and what it is (the man page's words). */
static const struct {
  const char *name, *description;
} branches[RA_NR_BRANCHES] = {
  [RA_NONE] = { "none", "none" },
  [RA_A_INITIAL] = { "A", "initial" },
  [RA_B_SEQUENTIAL] = { "B", "sequential" },
  [RA_C_INTERLEAVED] = { "C", "interleaved" },
  [RA_D_OVERSIZE] = { "D", "oversize" },
  [RA_E_SEQ_MISS] = { "E", "sequential miss" },
  [RA_F_CONTEXT] = { "F", "context" },
  [RA_G_RANDOM] = { "G", "random" },
  [RA_N_NEAR] = { "N", "near" },
  [RA_FORCED] = { "forced", "forced" },
  [RA_OFF] = { "off", "off" },
};

const char *
ra_branch_name (enum ra_branch b)
{
  return (unsigned) b < RA_NR_BRANCHES ? branches[b].name : "?";
}

const char *
ra_branch_description (enum ra_branch b)
{
  return (unsigned) b < RA_NR_BRANCHES ? branches[b].description : "?";
}

void
ra_state_init (struct ra_state *ra)
{
  ra->start = ra->size = ra->async_size = 0;
  ra->prev_pos = 0;
  ra->prev_valid = false;
  ra->ad = (struct ra_adapt) { 0 };
  ra->near = (struct ra_near) { 0 };
  ra->covered = false;
  ra->queue_seen = false;
  ra->first_windows = 0;
  ra->covered_since_ns = 0;
  ra->done_bytes = 0;
  ra->cov = (struct ra_covered_rate) { 0 };
  ra->let_go_once = false;
}

ra_pgoff
ra_self_max (unsigned threshold, ra_pgoff io_max)
{
  return threshold > 1 ? (threshold - 1) * io_max : io_max;
}

ra_pgoff
ra_fair_share (uint64_t capacity, uint64_t markers)
{
  return capacity / (4 * (markers ? markers : 1));
}

/* The backend model. */

/* Weight kept by the older samples at each new one: about the last 20
 * reads count.
 */
#define MODEL_DECAY 0.95

void
ra_model_init (struct ra_model *m)
{
  *m = (struct ra_model) { 0 };
}

void
ra_model_sample (struct ra_model *m, ra_pgoff pages, uint64_t ns)
{
  double x = (double) pages, y = (double) ns;

  m->s0 = m->s0 * MODEL_DECAY + 1;
  m->sx = m->sx * MODEL_DECAY + x;
  m->sy = m->sy * MODEL_DECAY + y;
  m->sxx = m->sxx * MODEL_DECAY + x * x;
  m->sxy = m->sxy * MODEL_DECAY + x * y;
  m->reads++;
}

bool
ra_model_estimate (const struct ra_model *m, double *lat_ns,
                   double *page_ns)
{
  double mx, my, var, cov, slope, lat;

  *lat_ns = *page_ns = 0;
  if (m->reads == 0 || m->s0 <= 0)
    return false;
  mx = m->sx / m->s0;
  my = m->sy / m->s0;
  var = m->sxx / m->s0 - mx * mx;
  cov = m->sxy / m->s0 - mx * my;
  /* Sizes spread by less than a page: the split between latency and
   * transfer cannot be told; all of it is latency (what a window of
   * reads of that size costs).
   */
  if (var < 1.0) {
    *lat_ns = my;
    return true;
  }
  slope = cov / var;
  if (slope < 0)
    slope = 0;
  lat = my - slope * mx;
  if (lat < 0) {                /* no fixed cost visible: all transfer */
    lat = 0;
    slope = mx > 0 ? my / mx : 0;
  }
  *lat_ns = lat;
  *page_ns = slope;
  return true;
}

ra_pgoff
ra_init_size (ra_pgoff req, ra_pgoff max)
{
  ra_pgoff r = ra_roundup_pow2 (req);

  if (r <= max / 32)
    return 4 * r;
  if (r <= max / 4)
    return 2 * r;
  return max;
}

ra_pgoff
ra_next_size (ra_pgoff cur, ra_pgoff max)
{
  if (cur < max / 16)
    return 4 * cur;
  if (cur <= max / 2)
    return 2 * cur;
  return max;
}

static bool
cached (const struct ra_cache_ops *c, void *opaque, ra_pgoff index)
{
  return c->cached (opaque, index);
}

static ra_pgoff
next_hole (const struct ra_cache_ops *c, void *opaque,
           ra_pgoff index, ra_pgoff max)
{
  ra_pgoff i;

  if (c->next_hole)
    return c->next_hole (opaque, index, max);
  for (i = index; i < index + max; i++)
    if (!cached (c, opaque, i))
      return i;
  return index + max;
}

static ra_pgoff
history (const struct ra_cache_ops *c, void *opaque,
         ra_pgoff index, ra_pgoff max)
{
  ra_pgoff h = 0;

  if (c->history)
    return c->history (opaque, index, max);
  while (h < max && h < index && cached (c, opaque, index - h - 1))
    h++;
  return h;
}

/* Pages of the request [index, index + req) at or past start: the part
 * of req_count that the window still has to read for a waiting client
 * (doc/readahead-rules.md, "Correction 1: req follows the pages it names").
 */
static ra_pgoff
wanted_from (ra_pgoff index, ra_pgoff req, ra_pgoff start)
{
  return index + req > start ? index + req - start : 0;
}

/* Set async_size so that the window's sync part is exactly the wanted
 * pages.  When the wanted pages fill the whole window, the window would
 * have no async part and so no marker: a reader whose requests are
 * larger than the window would never be read ahead of again (every read
 * a sync miss).  Then the ramped size is kept as an async part after the
 * wanted pages, so the marker chain goes on.  (Linux never meets this
 * case, as it makes the whole window async: doc/readahead-rules.md,
 * Correction 1.)
 */
static void
set_sync_part (struct ra_state *ra, ra_pgoff wanted)
{
  if (wanted >= ra->size) {
    ra->async_size = ra->size;
    ra->size += wanted;
  }
  else
    ra->async_size = ra->size - wanted;
}

/* Clamp the state's window to the export and describe it in *w. */
static void
emit (const struct ra_state *ra, const struct ra_params *p,
      enum ra_branch branch, struct ra_window *w)
{
  ra_pgoff nr = ra_nr_pages (p);
  ra_pgoff end = ra->start + ra->size;
  ra_pgoff async_start = end - ra->async_size;

  w->branch = branch;
  w->start = ra->start;
  w->behind = 0;
  if (ra->start >= nr) {
    w->size = w->async_size = 0;
    w->marker = RA_NO_MARKER;
    return;
  }
  if (end > nr)
    end = nr;
  w->size = end - ra->start;
  w->async_size = async_start < end ? end - async_start : 0;
  /* The marker is the first page of the async part as the window was
   * decided.  Linux counts it from the clamped size instead, which puts
   * it earlier near the end of a file for no benefit; here a clamped
   * window keeps its marker as decided, or has none (see "The marker of a
   * window clamped by the end of the export" in doc/readahead-rules.md).
   */
  w->marker = ra->async_size > 0 && async_start < end
    ? async_start : RA_NO_MARKER;
}

/* A window that is exactly the request, with no marker, leaving the
 * stream state alone (G, and readahead turned off).
 */
static void
emit_exact (const struct ra_params *p, enum ra_branch branch,
            ra_pgoff index, ra_pgoff req, struct ra_window *w)
{
  struct ra_state tmp = { .start = index, .size = req, .async_size = 0 };

  emit (&tmp, p, branch, w);
}

/* Adaptive mode. */

#define ADAPT_MAX_BOOST 4       /* windows up to 16 times the model size */
#define ADAPT_MAX_SHRINK 4      /* down to a 16th */
#define ADAPT_CALM_WINDOWS 8    /* windows without events before relaxing */

/* Seconds a window of w pages takes to arrive (see the big picture). */
static double
fetch_secs (const struct ra_params *p, const struct ra_inputs *in,
            ra_pgoff w)
{
  ra_pgoff io = p->io_max ? p->io_max : 1;
  ra_pgoff reads = (w + io - 1) / io;
  unsigned par = p->parallel ? p->parallel : 1;
  ra_pgoff rounds = (reads + par - 1) / par;

  return (double) rounds
    * (in->lat_ns + (double) ra_min_pg (w, io) * in->page_ns) / 1e9;
}

/* The stream's limit: ra_max within the congestion bound, its share of
 * the cache (when share) and the yield bound, never below adapt_min (or
 * ra_max, if that is smaller).  Without the share it bounds the near
 * rule's read of a dense area (near.c).
 */
static ra_pgoff
adapt_limit (const struct ra_params *p, const struct ra_inputs *in,
             bool share)
{
  ra_pgoff floor = ra_min_pg (p->adapt_min ? p->adapt_min : 1, p->ra_max);
  ra_pgoff limit = p->ra_max;

  if (p->self_max)
    limit = ra_min_pg (limit, p->self_max);
  if (share && in && in->share)
    limit = ra_min_pg (limit, in->share);
  if (in && in->yield_max)
    limit = ra_min_pg (limit, in->yield_max);
  return limit > floor ? limit : floor;
}

/* Decide the stream's cap for this trigger (see the big picture). */
static ra_pgoff
adapt_cap (struct ra_adapt *ad, const struct ra_params *p,
           const struct ra_inputs *in)
{
  ra_pgoff floor = ra_min_pg (p->adapt_min ? p->adapt_min : 1, p->ra_max);
  ra_pgoff limit = adapt_limit (p, in, true);
  ra_pgoff w = limit;
  unsigned i;

  if (in && in->wasted > 0) {
    if (ad->shrink < ADAPT_MAX_SHRINK)
      ad->shrink++;
    ad->waste_events++;
    ad->calm = 0;
  }
  if (in && ad->rate > 0 && in->lat_ns >= 0 && in->lat_ns + in->page_ns > 0) {
    for (w = floor; w < limit; w *= 2)
      if ((double) w >= 2 * ad->rate * fetch_secs (p, in, w))
        break;
    if (w > limit)
      w = limit;
  }
  for (i = 0; i < ad->boost && w < limit; i++)
    w *= 2;
  for (i = 0; i < ad->shrink && w > floor; i++)
    w /= 2;
  if (w > limit)
    w = limit;
  if (w < floor)
    w = floor;
  ad->cap = w;
  return w;
}

/* A sequential async trigger at index: measure the consumption rate, and
 * count a window without events.
 */
static void
adapt_sequential (struct ra_adapt *ad, const struct ra_inputs *in,
                  ra_pgoff index)
{
  if (++ad->calm >= ADAPT_CALM_WINDOWS) {
    if (ad->shrink > 0)
      ad->shrink--;
    else if (ad->boost > 0)
      ad->boost--;
    ad->calm = 0;
  }
  if (!in || in->now_ns == 0)
    return;
  if (ad->mark_ns != 0 && in->now_ns > ad->mark_ns && index > ad->mark_index) {
    double inst = (double) (index - ad->mark_index) * 1e9
      / (double) (in->now_ns - ad->mark_ns);

    ad->rate = ad->rate > 0 ? (3 * ad->rate + inst) / 4 : inst;
  }
  ad->mark_ns = in->now_ns;
  ad->mark_index = index;
}

ra_pgoff
ra_late (struct ra_state *ra, const struct ra_params *p, ra_pgoff index)
{
  struct ra_adapt *ad = &ra->ad;
  ra_pgoff m;

  if (p->mode != RA_MODE_ADAPTIVE || p->ra_max == 0 || ra->size == 0)
    return RA_NO_MARKER;
  if (ad->late_start == ra->start + 1)
    return RA_NO_MARKER;        /* this window was counted already */
  ad->late_start = ra->start + 1;
  ad->late_events++;
  /* Windows too small: first undo a waste step, else grow. */
  if (ad->shrink > 0)
    ad->shrink--;
  else if (ad->boost < ADAPT_MAX_BOOST)
    ad->boost++;
  ad->calm = 0;
  /* Each early trigger makes a new state window, which may be counted
   * late again while the reader still waits where it was: without this
   * the stream would run away ahead of its reader, a window per wait.
   */
  if (ra->async_size == 0 || index < ad->early_mark)
    return RA_NO_MARKER;
  m = ra->start + ra->size - ra->async_size;
  if (m <= index)
    return RA_NO_MARKER;
  ad->early_mark = m;
  return m;
}

void
ra_ondemand (struct ra_state *ra, const struct ra_params *p,
             const struct ra_cache_ops *cache, void *opaque,
             ra_pgoff index, bool marker, ra_pgoff req,
             struct ra_window *w)
{
  const struct ra_control ctl = {
    .ra = ra, .p = p, .cache = cache, .opaque = opaque,
    .index = index, .marker = marker, .req = req, .in = NULL,
  };

  ra_ondemand_at (&ctl, w);
}

/* The parts of ondemand().  Each sets the stream state's window and
 * returns its branch, or RA_NONE with the state untouched when there is
 * no window to set (then *w is what to read, if anything).
 */

/* INITIAL: a window at index sized from req. */
static enum ra_branch
initial (struct ra_state *ra, ra_pgoff index, ra_pgoff req, ra_pgoff max,
         enum ra_branch branch)
{
  ra->start = index;
  ra->size = ra_init_size (req, max);
  ra->async_size = ra->size > req ? ra->size - req : ra->size;
  return branch;
}

/* Is index where the stream state expects the next trigger (branch B)? */
static bool
expected (const struct ra_state *ra, ra_pgoff index)
{
  return index == ra->start + ra->size - ra->async_size ||
         index == ra->start + ra->size;
}

/* B: push the window forward, ramping its size up. */
static enum ra_branch
sequential (struct ra_state *ra, ra_pgoff index, bool marker, ra_pgoff req,
            ra_pgoff max)
{
  ra_pgoff old_size = ra->size;

  if (marker) {
    ra->start += ra->size;
    ra->size = ra_next_size (old_size, max);
    ra->async_size = ra->size;
    /* Correction 1: when the window starts past index (the trigger
     * was the marker page), requested pages at or past the new start
     * are still wanted; Linux makes the whole window async.  A marker
     * at start + size itself moves the start past nothing: the window
     * stays wholly async and SUBMIT pulls the next one in, as Linux.
     */
    if (ra->start > index)
      set_sync_part (ra, wanted_from (index, req, ra->start));
    return RA_B_SEQUENTIAL;
  }
  /* Correction 3 (Linux 6.11): a sync trigger must read the page it
   * needs, so its window starts at index.  At index == start + size
   * this is exactly the kernel's window; when the marker page itself
   * went missing (evicted or dropped), the kernel would skip past it.
   */
  ra->start = index;
  ra->size = ra_next_size (old_size, max);
  ra->async_size = ra->size;
  /* A state emptied by a congestion drop has no size to ramp from:
   * restart at the initial size (still counted as B).
   */
  if (ra->size == 0) {
    ra->size = ra_init_size (req, max);
    ra->async_size = ra->size > req ? ra->size - req : ra->size;
  }
  return RA_B_SEQUENTIAL;
}

/* The async trigger of page_cache_async_ra: A, B, or C (a marker the
 * state does not explain: interleaved streams; the cache tells how far
 * this stream's previous window reached).  foreign (adaptive mode): the
 * marker was set by another stream's window, and the window is sized
 * from this stream's own state (why: doc/readahead-rules.md, branch C).
 */
static enum ra_branch
async_ra (struct ra_state *ra, const struct ra_params *p,
          const struct ra_cache_ops *cache, void *opaque,
          ra_pgoff index, ra_pgoff req, ra_pgoff max, bool foreign)
{
  ra_pgoff s, own = ra->size;

  if (index == 0)
    return initial (ra, index, req, max, RA_A_INITIAL);
  if (expected (ra, index))
    return sequential (ra, index, true, req, max);
  s = next_hole (cache, opaque, index + 1, max);
  /* Correction 2 (Linux 6.11): no hole within max, no readahead.
   * Linux 5.18 would read from index + max + 1 on.
   */
  if (s >= index + 1 + max)
    return RA_NONE;
  ra->start = s;
  if (foreign)
    ra->size = own > 0 ? ra_next_size (own, max) : ra_init_size (req, max);
  else
    ra->size = ra_next_size ((s - index) + req, max);
  /* Correction 1: only requested pages past the hole are sync. */
  set_sync_part (ra, wanted_from (index, req, s));
  return RA_C_INTERLEAVED;
}

/* F: context readahead: contiguous cached pages before index that are
 * more than req are probably an earlier part of this stream.
 */
static enum ra_branch
context (struct ra_state *ra, const struct ra_cache_ops *cache,
         void *opaque, ra_pgoff index, ra_pgoff req, ra_pgoff max)
{
  /* At most max - 1 pages are counted, as Linux 5.18 counts them
   * (count_history_pages: page_cache_prev_miss from index - 1 scans max
   * entries, the first of them index - 1 itself).
   */
  ra_pgoff h = history (cache, opaque, index, max - 1);

  if (h <= req)
    return RA_NONE;
  if (h >= index)               /* reaches back to page 0 */
    h *= 2;
  ra->start = index;
  ra->size = h + req < max ? h + req : max;
  ra->async_size = 1;
  return RA_F_CONTEXT;
}

/* The sync trigger of page_cache_sync_ra: A, B, D, E, F; then in
 * adaptive mode N; G otherwise (RA_NONE).
 */
static enum ra_branch
sync_ra (struct ra_state *ra, const struct ra_params *p,
         const struct ra_cache_ops *cache, void *opaque,
         ra_pgoff index, ra_pgoff req, ra_pgoff max, struct ra_near *near,
         ra_pgoff dense_max)
{
  enum ra_branch b;
  ra_pgoff ahead;

  if (index == 0)
    return initial (ra, index, req, max, RA_A_INITIAL);
  if (expected (ra, index))
    return sequential (ra, index, false, req, max);
  if (req > max)
    return initial (ra, index, req, max, RA_D_OVERSIZE);
  /* E: sequential miss: index is prev_pos's page or the one after. */
  if (ra->prev_valid) {
    ra_pgoff prev_index = ra->prev_pos >> p->page_shift;

    if (index == prev_index || index == prev_index + 1)
      return initial (ra, index, req, max, RA_E_SEQ_MISS);
  }
  b = context (ra, cache, opaque, index, req, max);
  if (b != RA_NONE || !near)
    return b;
  ahead = ra_near_ahead (near, p, index, req, max, dense_max);
  if (ahead == 0 && near->behind == 0)
    return RA_NONE;
  ra->start = index;
  ra->size = req + ahead;
  ra->async_size = ahead;
  return RA_N_NEAR;
}

/* Adaptive mode's prologue: the near hits, the consumption rate at a
 * sequential async trigger, and this stream's cap, which takes the
 * place of ra_max.
 */
static ra_pgoff
adapt_prologue (struct ra_state *ra, struct ra_near *near,
                const struct ra_params *p, const struct ra_inputs *in,
                ra_pgoff index, bool marker)
{
  if (in)
    near->hits += in->near_hits;
  if (marker && index == ra->start + ra->size - ra->async_size &&
      ra->size > 0)
    adapt_sequential (&ra->ad, in, index);
  return adapt_cap (&ra->ad, p, in);
}

void
ra_ondemand_at (const struct ra_control *ctl, struct ra_window *w)
{
  struct ra_state *ra = ctl->ra;
  const struct ra_params *p = ctl->p;
  ra_pgoff index = ctl->index, req = ctl->req;
  bool marker = ctl->marker;
  ra_pgoff max = p->ra_max;
  bool adaptive = p->mode == RA_MODE_ADAPTIVE && max > 0;
  struct ra_near *near = ctl->near ? ctl->near : &ra->near;
  enum ra_branch branch;

  if (req == 0)
    req = 1;
  if (adaptive)
    max = adapt_prologue (ra, near, p, ctl->in, index, marker);

  /* Readahead off: a sync trigger reads exactly the request (the cache
   * still serves hits); there are no markers to trigger on.
   */
  if (max == 0) {
    if (marker)
      emit_exact (p, RA_NONE, index, 0, w);
    else
      emit_exact (p, RA_OFF, index, req, w);
    return;
  }

  /* An oversize request may use up to io_max (9491ae4aade6, Linux 4.10):
   * the pages asked for are not speculation.
   */
  if (req > max && p->io_max > max)
    max = req < p->io_max ? req : p->io_max;

  if (marker)
    branch = async_ra (ra, p, ctl->cache, ctl->opaque, index, req, max,
                       adaptive && ctl->in && ctl->in->foreign_marker);
  else
    branch = sync_ra (ra, p, ctl->cache, ctl->opaque, index, req, max,
                      adaptive ? near : NULL,
                      adaptive ? adapt_limit (p, ctl->in, false) : max);
  if (branch == RA_NONE) {
    /* No hole after an unexplained marker: nothing to read; else G: a
     * random read: exactly the request, state untouched.
     */
    if (marker)
      emit_exact (p, RA_NONE, index, 0, w);
    else
      emit_exact (p, RA_G_RANDOM, index, req, w);
    return;
  }

  /* The read would hit this window's own marker at once: pull the next
   * window in now.
   */
  if (index == ra->start && ra->size == ra->async_size) {
    ra_pgoff add = ra_next_size (ra->size, max);

    if (ra->size + add <= max) {
      ra->async_size = add;
      ra->size += add;
    }
    else {
      ra->size = max;
      ra->async_size = max / 2;
    }
  }
  emit (ra, p, branch, w);
  if (branch == RA_N_NEAR)
    w->behind = near->behind;
}

bool
ra_forced (const struct ra_params *p, ra_pgoff index, ra_pgoff last,
           struct ra_window *w)
{
  ra_pgoff nr = ra_nr_pages (p);
  ra_pgoff chunk = (RA_FORCED_CHUNK_BYTES >> p->page_shift) ?: 1;

  if (last > nr)
    last = nr;
  if (index >= last)
    return false;
  w->branch = RA_FORCED;
  w->start = index;
  w->size = last - index < chunk ? last - index : chunk;
  w->async_size = 0;
  w->marker = RA_NO_MARKER;
  return true;
}

void
ra_update_prev_pos (struct ra_state *ra, uint64_t end_byte)
{
  ra->prev_pos = end_byte;
  ra->prev_valid = true;
}

void
ra_submit (const struct ra_window *w, ra_pgoff io_max,
           const struct ra_submit_ops *ops, void *opaque,
           struct ra_submit_result *res)
{
  ra_pgoff async_start = w->start + w->size - w->async_size;
  ra_pgoff run_start = 0, run_len = 0;
  bool run_async = false;
  ra_pgoff i;

  assert (io_max >= 1);
  res->sync_pages = res->async_pages = res->batches = 0;

#define FLUSH_RUN()                                             \
  do {                                                          \
    if (run_len > 0) {                                          \
      ops->batch (opaque, run_start, run_len, run_async);       \
      res->batches++;                                           \
      run_len = 0;                                              \
    }                                                           \
  } while (0)

  for (i = w->start; i < w->start + w->size; i++) {
    bool async = i >= async_start;

    if (!ops->insert (opaque, i, i == w->marker, async)) {
      FLUSH_RUN ();             /* a cached page ends the batch */
      continue;
    }
    if (async)
      res->async_pages++;
    else
      res->sync_pages++;
    if (run_len > 0 && (run_async != async || run_len == io_max))
      FLUSH_RUN ();
    if (run_len == 0) {
      run_start = i;
      run_async = async;
    }
    run_len++;
  }
  FLUSH_RUN ();
#undef FLUSH_RUN
}

/* Does the stream state still describe window w? */
static bool
state_is (const struct ra_state *ra, const struct ra_window *w)
{
  switch (w->branch) {
  case RA_A_INITIAL: case RA_B_SEQUENTIAL: case RA_C_INTERLEAVED:
  case RA_D_OVERSIZE: case RA_E_SEQ_MISS: case RA_F_CONTEXT:
  case RA_N_NEAR:
    return ra->start == w->start; /* else the state has moved on since */
  default:
    return false;               /* the state does not describe it */
  }
}

void
ra_keep_only (struct ra_state *ra, const struct ra_window *w, ra_pgoff keep)
{
  if (!state_is (ra, w) || keep >= ra->size)
    return;
  ra->size = keep;
  ra->async_size = 0;
}

void
ra_drop_async (struct ra_state *ra, const struct ra_window *w,
               ra_pgoff dropped)
{
  if (!state_is (ra, w))
    return;
  if (dropped > ra->async_size)
    dropped = ra->async_size;
  ra->size -= dropped;
  ra->async_size -= dropped;
}
