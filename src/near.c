/* ra-cache: the near rule (branch N of the readahead engine, adaptive
 * mode only).
 *
 * A file system read through the kernel (tar, a build, a boot) reads
 * many small files and their metadata: reads in roughly increasing
 * order with small gaps, or, on a file system filled through the
 * kernel, spread over its block groups (a directory's blocks, its inode
 * table, its files' data: each region a few hundred KiB, the regions
 * MiB apart), often spread by the client over several connections.  A
 * to F see no stream in that, and G reads exactly what was asked, one
 * backend round trip per read.  Linux swap readahead (mm/swap_state.c,
 * __swapin_nr_pages) meets the same kind of access and sizes the window
 * around each fault from how many of the pages it read ahead before
 * were hit since; the near rule does the same for a miss that A-F do
 * not explain.  Its state (struct ra_near) is ra_control's near, one
 * for all of an export's streams (the caller serializes), else the
 * stream's own:
 *
 *  - near hits (struct ra_inputs near_hits, from the page cache): pages
 *    of N windows' async parts that a client read for the first time
 *    soon after the window (the page cache's horizon: within
 *    RC_PC_NEAR_HORIZON misses that no stream explains).  A page used
 *    later says nothing of the misses around it: a random reader over a
 *    small export in a cache that holds it uses much of what was read,
 *    in the end;
 *  - used and read: the near hits, and the pages N windows read ahead,
 *    each sum decayed by an eighth at each such miss; a window counts in
 *    read once RA_NEAR_RIPE misses have passed since it (until then it
 *    is pending: its hits may still come);
 *  - good: used is at least a 32nd of read and pending together.  Then
 *    the miss gets a window of the current size, wherever it falls (a
 *    trial's size if there was none), doubled when used is an eighth,
 *    up to 1 MiB beyond the request;
 *  - poor: used is less than a 32nd of read alone (windows that have
 *    had their time).  The size halves, and below 64K it is nothing:
 *    the trial failed (fails counts them, at most 10);
 *  - neither (windows wait for their hits), or no size: exact (G),
 *    unless the miss is the 2^(fails+1)-th in a row to fall in the
 *    region of one of the last RA_NEAR_REGIONS misses (a region is 1
 *    MiB, or a 256th of the export if that is less): then a trial
 *    window of 256 KiB beyond the request (at least the request's size,
 *    rounded up to a power of two).  A stream whose trials are not hit
 *    tries ever more rarely, one in 2048 such misses at most;
 *  - a dense area read out of order: the NEAR_DENSE_MISSES-th (5th)
 *    miss in a region and its two neighbours among the recent ones
 *    (near_cluster: such an area need not keep within one region),
 *    one of them before the one before it in its region, reads the
 *    region's whole 1 MiB block, once while it stays among the recent
 *    ones; the neighbours' next misses then read theirs (an inode
 *    table read in hash order, a find over a tree whose directories'
 *    blocks lie among their files: a page at a time at random within a
 *    few MiB, each page used in the end but few soon, so that the
 *    ratio above never keeps a window).  That block is bounded by the
 *    stream's limit without its share of the cache (dense_max: ra_max,
 *    the congestion bound, the yield bound), not by its cap: the share
 *    counts the markers that such reads leave unread, and a cap cut to
 *    it read a region a third at a time.  A reader striding forward
 *    never takes it, and a random reader's misses fall five times in
 *    one of its last eight regions or their neighbours too rarely to
 *    matter (in the simulation: once in 20,000 4K reads over 400 MB;
 *    13 times in 50,000 over 64 MiB from four streams in a 16 MiB
 *    cache, 1.2% more backend bytes);
 *  - a miss inside the last one's request (a read retried after an
 *    error) is exact and changes nothing;
 *  - the pages read are the block of that size (within the stream's
 *    cap, or dense_max) aligned on its size within index's region
 *    (block_behind), and the request: a file
 *    system reads a region out of order (an inode table in hash order, a
 *    directory's files), before the miss as often as after it.  The
 *    window is [index, index + req + async), its sync part the request,
 *    the marker on its first async page like any window (B or C go on
 *    from it if the reader reaches it); the block's pages before index
 *    are the window's behind (struct ra_window), which the trigger reads
 *    as async pages, without a marker, when an async part may be kept.
 *
 * A random reader therefore reads exactly its requests unless two of
 * its misses in a row each fall in the region of one of the eight
 * before (a chance of 1 in 1024 a miss at most, on any export), and
 * then one trial window, not hit soon, after which the next trial
 * waits twice as long.  Kernel mode never takes N: its branches are
 * those of doc/readahead-rules.md.
 */

#include <config.h>

#include <stdbool.h>

#include "racache/readahead.h"
#include "readahead-internal.h"

#define NEAR_REACH_BYTES (UINT64_C (1) << 20) /* a region: 1 MiB */
#define NEAR_EXPORT_FRACTION 256        /* ... at most a 256th of the export */
#define NEAR_TRIAL_BYTES (UINT64_C (256) << 10) /* a trial: 256K */
#define NEAR_MIN_BYTES (UINT64_C (64) << 10)    /* smaller: read exactly */
#define NEAR_MAX_BYTES (UINT64_C (1) << 20)     /* the largest: 1 MiB */
#define NEAR_MAX_FAILS 10       /* a trial at most every 2^11 misses */
#define NEAR_DENSE_MISSES 5     /* a dense region: this many misses */
#define NEAR_KEEP_DIV 32       /* kept while a 32nd is used soon */
#define NEAR_GROW_DIV 8         /* doubled while an eighth is */

/* bytes in pages, at least one. */
static ra_pgoff
near_pages (const struct ra_params *p, uint64_t bytes)
{
  ra_pgoff n = bytes >> p->page_shift;

  return n > 0 ? n : 1;
}

/* The async part of a trial window. */
static ra_pgoff
trial_pages (const struct ra_params *p, ra_pgoff req)
{
  ra_pgoff t = near_pages (p, NEAR_TRIAL_BYTES);

  return ra_roundup_pow2 (req > t ? req : t);
}

/* The region of page index: 1 MiB, or a 256th of the export if that is
 * less, so that on any export a random reader's miss falls in one of
 * the RA_NEAR_REGIONS latest misses' regions with a chance of 1 in 32
 * at most.
 */
static ra_pgoff
region_pages (const struct ra_params *p)
{
  uint64_t bytes = p->export_size / NEAR_EXPORT_FRACTION;
  ra_pgoff reach = (bytes < NEAR_REACH_BYTES ? bytes : NEAR_REACH_BYTES)
    >> p->page_shift;

  return reach > 0 ? reach : 1;
}

static ra_pgoff
region_of (const struct ra_params *p, ra_pgoff index)
{
  return index / region_pages (p);
}

/* The pages before index of the block of issue pages read for a miss
 * at index: the block aligned on its size within index's region, or,
 * where that would cross the region's end (issue cut by the cap, not a
 * power of two), the region's last issue pages; so that a block as
 * large as the region is the region, whatever cut it.
 */
static ra_pgoff
block_behind (const struct ra_params *p, ra_pgoff index, ra_pgoff issue)
{
  ra_pgoff reach = region_pages (p), off = index % reach, start;

  if (issue == 0)
    return 0;
  start = off - off % issue;
  if (start + issue > reach && reach >= issue)
    start = reach - issue;
  return off - start;
}

/* Is region r one of the latest misses' regions?  Make it the latest
 * (recent[0]), and count this miss in it.
 */
static bool
near_recent (struct ra_near *n, ra_pgoff r, ra_pgoff index)
{
  unsigned i, k = n->nrecent;
  unsigned char misses = 0;
  bool found = false, filled = false, back = false;

  for (i = 0; i < n->nrecent; i++)
    if (n->recent[i] == r) {
      found = true;
      misses = n->misses[i];
      filled = n->filled[i];
      back = n->back[i] || index < n->last[i];
      k = i;
      break;
    }
  if (k == RA_NEAR_REGIONS)
    k--;
  else if (k == n->nrecent)
    n->nrecent++;
  for (i = k; i > 0; i--) {
    n->recent[i] = n->recent[i - 1];
    n->misses[i] = n->misses[i - 1];
    n->filled[i] = n->filled[i - 1];
    n->back[i] = n->back[i - 1];
    n->last[i] = n->last[i - 1];
  }
  n->recent[0] = r;
  n->misses[0] = misses < 255 ? misses + 1 : misses;
  n->filled[0] = filled;
  n->back[0] = back;
  n->last[0] = index;
  return found;
}

/* The misses of the recent regions r - 1, r and r + 1 (a dense area
 * need not respect region boundaries: a directory tree's blocks spread
 * over a few MiB); *back: one of them fell before the one before it.
 */
static unsigned
near_cluster (const struct ra_near *n, ra_pgoff r, bool *back)
{
  unsigned i, sum = 0;

  *back = false;
  for (i = 0; i < n->nrecent; i++)
    if (n->recent[i] + 1 >= r && n->recent[i] <= r + 1) {
      sum += n->misses[i];
      *back = *back || n->back[i];
    }
  return sum;
}

/* Decide the async part for a miss at [index, index + req) that
 * branches A-F do not explain, within a window of at most max pages
 * (dense_max for a dense area's block), and record the miss (see the
 * top of this file).
 */
ra_pgoff
ra_near_ahead (struct ra_near *n, const struct ra_params *p,
               ra_pgoff index, ra_pgoff req, ra_pgoff max, ra_pgoff dense_max)
{
  ra_pgoff ahead = n->ahead, issue, lo = near_pages (p, NEAR_MIN_BYTES);
  double all;
  bool local, good, poor, back;

  /* The last miss's own pages again (a read retried after an error, or
   * pages evicted at once): not a new read, and nothing to learn.
   */
  n->behind = 0;
  if (n->valid && index < n->req_end && index + req > n->lo)
    return 0;
  local = near_recent (n, region_of (p, index), index);
  n->streak = local ? n->streak + 1 : 0;
  /* The windows of RA_NEAR_RIPE misses ago have had their time: they
   * count in read; the later ones wait in pending.
   */
  n->used += (double) n->hits;
  n->hits = 0;
  n->read += (double) n->ring[n->pos];
  n->pending -= n->ring[n->pos];
  all = n->read + (double) n->pending;
  good = all > 0 && NEAR_KEEP_DIV * n->used >= all;
  poor = n->read > 0 && NEAR_KEEP_DIV * n->used < n->read;
  issue = 0;
  if (good) {
    /* An eighth of all used soon (later windows too): a window, grown
     * when half is.
     */
    n->fails = 0;
    if (ahead == 0)
      ahead = trial_pages (p, req);
    else if (NEAR_GROW_DIV * n->used >= all)
      ahead = ra_min_pg (2 * ahead, near_pages (p, NEAR_MAX_BYTES));
    issue = ahead;
  }
  else if (ahead > 0 && poor) {
    /* Less, of windows that have had their time: halve it, down to
     * nothing (a trial not used).
     */
    ahead /= 2;
    if (ahead < lo) {
      ahead = 0;
      if (n->fails < NEAR_MAX_FAILS)
        n->fails++;
    }
  }
  else if (ahead == 0 && local && n->streak >= (2u << n->fails))
    ahead = issue = trial_pages (p, req);
  /* else: a window is waiting for its hits: read exactly meanwhile. */
  if (!n->filled[0] && near_cluster (n, n->recent[0], &back) >=
      NEAR_DENSE_MISSES && back) {
    /* A dense region read out of order: its NEAR_DENSE_MISSES-th miss
     * while it stayed among the recent ones, one of them before the one
     * before it (an inode table read in hash order; not a reader that
     * strides forward, whose pages in between are never read): its
     * whole block, once.
     */
    n->filled[0] = true;
    if (issue < near_pages (p, NEAR_MAX_BYTES))
      issue = near_pages (p, NEAR_MAX_BYTES);
    if (dense_max > max)
      max = dense_max;
  }
  if (issue > 0)
    n->streak = 0;              /* counts the misses since a window */
  n->used -= n->used / 8;
  n->read -= n->read / 8;
  n->ahead = ahead;
  n->lo = index;
  n->req_end = index + req;
  n->valid = true;
  if (issue > max)               /* the block holds the request too */
    issue = max;
  /* The block of issue pages that holds index (block_behind): the
   * pages of a region a file system reads out of order (an inode table,
   * a directory's files) are before the miss as often as after it.
   */
  n->behind = block_behind (p, index, issue);
  n->ring[n->pos] = issue;
  n->pending += issue;
  n->pos = (n->pos + 1) % RA_NEAR_RIPE;
  return issue > n->behind + req ? issue - n->behind - req : 0;
}
