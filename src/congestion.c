/* ra-cache: the congestion estimator and the congestion decision
 * (include/racache/congestion.h says what they learn and decide).
 */

#include <config.h>

#include <stdatomic.h>
#include <stdint.h>

#include "racache/congestion.h"

/* The windowed minimum and maximum keep two epochs of this length: what
 * they show is at most twice as old.
 */
#define EPOCH_NS (UINT64_C (5) * 1000000000)

/* Sync reads at a level of k in flight queued when their smoothed
 * latency ratio is more than this times the noise floor (a backend whose
 * latency varies as much alone as under load is not congested).
 */
#define QUEUED_RATIO 1.25
/* The noise floor: the smoothed ratio of reads that ran alone (1 at
 * first), at most this.
 */
#define FLOOR_MAX 2.0
/* A level's figure counts once it has this many samples (halved at
 * every epoch, so that what is not seen again is forgotten).
 */
#define LEVEL_MIN_SAMPLES 4
/* A covered client whose reads have not queued since it was covered is
 * let go once the clients' sync reads have not queued for this many base
 * latencies while it was covered (the header, RC_CONG_WINDOW).
 */
#define CALM_BASES 8
/* ... unless it keeps this many BDPs in flight, and twice window_bytes
 * (`two_io_max` in rc_cong_decide; the header, RC_CONG_WINDOW).
 */
#define CALM_BDPS 2
/* ... nor one that read less than this share of its depth in a base
 * latency while covered (lately: over its last eight to sixteen depths,
 * src/trigger.c), judged until its let-go (let_go: then the
 * verdict stands while its record does; the header, RC_CONG_WINDOW).
 */
#define CALM_LITTLE 0.75

static unsigned
size_class (uint64_t bytes)
{
  unsigned c = 0;

  bytes = bytes > 4096 ? (bytes - 1) >> 12 : 0;
  while (bytes > 0 && c < RC_CONG_CLASSES - 1) {
    bytes >>= 1;
    c++;
  }
  return c;
}

/* The slots the levels show: one below the lowest level whose reads
 * queued; with none, one above the highest level seen (probing) once
 * some level has queued, else the limit.
 */
static void
estimate_slots (struct rc_cong *e)
{
  unsigned k, top = 1, slots = e->limit;
  double floor = e->floor_ratio < FLOOR_MAX ? e->floor_ratio : FLOOR_MAX;

  for (k = 2; k < RC_CONG_LEVELS; k++) {
    if (e->level_n[k] < LEVEL_MIN_SAMPLES)
      continue;
    if (e->level_ratio[k] > floor * QUEUED_RATIO) {
      e->congested_seen = true;
      slots = k - 1;
      break;
    }
    top = k;
  }
  if (k == RC_CONG_LEVELS && e->congested_seen && top + 1 < slots)
    slots = top + 1;
  if (slots > e->limit)
    slots = e->limit;
  if (slots < 1)
    slots = 1;
  e->slots = slots;
}

static void
publish (struct rc_cong *e)
{
  uint64_t base = UINT64_MAX, bdp = 0;
  double rate = e->rate_cur > e->rate_prev ? e->rate_cur : e->rate_prev;
  unsigned i;

  for (i = 0; i < RC_CONG_CLASSES; i++) {
    if (e->base_cur[i] < base)
      base = e->base_cur[i];
    if (e->base_prev[i] < base)
      base = e->base_prev[i];
  }
  if (base == UINT64_MAX)
    base = 0;
  if (e->samples >= 8 && rate > 0 && base > 0)
    bdp = (uint64_t) (rate * (double) base);
  atomic_store_explicit (&e->slots_now, (unsigned) e->slots,
                         memory_order_relaxed);
  atomic_store_explicit (&e->qdelay_now_ns, (uint64_t) e->qdelay_ns,
                         memory_order_relaxed);
  atomic_store_explicit (&e->base_now_ns, base, memory_order_relaxed);
  atomic_store_explicit (&e->bdp_now_bytes, bdp, memory_order_relaxed);
  atomic_store_explicit (&e->queued_now,
                         e->sync_ratio > 0 && e->calm_since_ns == 0,
                         memory_order_relaxed);
  atomic_store_explicit (&e->calm_from_ns, e->calm_since_ns,
                         memory_order_relaxed);
}

void
rc_cong_init (struct rc_cong *e, unsigned limit, bool learn, bool wait)
{
  unsigned i;

  e->limit = limit ? limit : 1;
  e->learn = learn;
  e->wait = wait;
  e->epoch_ns = 0;
  for (i = 0; i < RC_CONG_CLASSES; i++)
    e->base_cur[i] = e->base_prev[i] = UINT64_MAX;
  e->rate_cur = e->rate_prev = 0;
  for (i = 0; i < RC_CONG_LEVELS; i++) {
    e->level_ratio[i] = 0;
    e->level_n[i] = 0;
  }
  e->congested_seen = false;
  e->floor_ratio = 1.0;
  e->slots = e->limit;
  e->qdelay_ns = 0;
  e->sync_ratio = 0;
  e->calm_since_ns = 0;
  e->samples = 0;
  publish (e);
}

void
rc_cong_sample (struct rc_cong *e, const struct rc_cong_sample *s)
{
  uint64_t lat = s->end_ns > s->start_ns ? s->end_ns - s->start_ns : 1;
  unsigned cls = size_class (s->bytes), i;
  unsigned k = s->inflight ? s->inflight : 1;
  uint64_t base;
  double r, rate;

  if (e->epoch_ns == 0 || s->end_ns < e->epoch_ns)
    e->epoch_ns = s->end_ns;
  else if (s->end_ns - e->epoch_ns >= EPOCH_NS) {
    for (i = 0; i < RC_CONG_CLASSES; i++) {
      e->base_prev[i] = e->base_cur[i];
      e->base_cur[i] = UINT64_MAX;
    }
    e->rate_prev = e->rate_cur;
    e->rate_cur = 0;
    e->epoch_ns = s->end_ns;
    for (i = 0; i < RC_CONG_LEVELS; i++)
      e->level_n[i] /= 2;
  }
  if (lat < e->base_cur[cls])
    e->base_cur[cls] = lat;
  base = e->base_cur[cls] < e->base_prev[cls]
    ? e->base_cur[cls] : e->base_prev[cls];
  r = (double) lat / (double) base;

  /* Delivery rate: the bytes delivered while it ran, in its latency
   * (without that count, the bytes in flight at its issue; without
   * them, k reads of about its size).
   */
  rate = (double) (s->delivered_bytes ? s->delivered_bytes
                   : s->inflight_bytes ? s->inflight_bytes
                   : (uint64_t) k * s->bytes) / (double) lat;
  if (rate > e->rate_cur)
    e->rate_cur = rate;

  if (s->sync) {
    double floor = e->floor_ratio < FLOOR_MAX ? e->floor_ratio : FLOOR_MAX;

    e->qdelay_ns += ((double) (lat - base) - e->qdelay_ns) / 8;
    if (e->sync_ratio == 0)
      e->sync_ratio = r;
    else
      e->sync_ratio += (r - e->sync_ratio) / 8;
    if (e->sync_ratio > floor * QUEUED_RATIO)
      e->calm_since_ns = 0;
    else if (e->calm_since_ns == 0)
      e->calm_since_ns = s->end_ns ? s->end_ns : 1;
  }
  e->samples++;

  /* The levels learn from the reads clients wait for: what speculation
   * costs them.  Async reads slower under load cost nobody (a lone
   * stream's own read-ahead may use the whole backend).
   */
  if (e->learn && s->sync) {
    unsigned lv = k < RC_CONG_LEVELS ? k : RC_CONG_LEVELS - 1;

    if (e->level_n[lv] == 0)
      e->level_ratio[lv] = r;
    else
      e->level_ratio[lv] += (r - e->level_ratio[lv]) / 8;
    if (e->level_n[lv] < UINT32_MAX)
      e->level_n[lv]++;
    if (k == 1)
      e->floor_ratio += (r - e->floor_ratio) / 16;
    estimate_slots (e);
  }
  publish (e);
}

enum rc_cong_answer
rc_cong_decide (const struct rc_cong *e, enum rc_cong_question q,
                const struct rc_cong_load *l)
{
  unsigned slots;
  uint64_t bdp;

  switch (q) {
  case RC_CONG_ISSUE:
    if (!e->learn)
      return e->wait && l->executing >= e->limit
        ? RC_CONG_HOLD_LIMIT : RC_CONG_GO;
    /* ra-congestion=wait: the threshold as before (counted apart). */
    if (e->wait && l->executing >= e->limit)
      return RC_CONG_HOLD_LIMIT;
    /* Leave one slot free for the next sync read, when there are two
     * (the slots are at most the limit: so is what runs).
     */
    slots = atomic_load_explicit (&e->slots_now, memory_order_relaxed);
    if (l->executing > 0 && l->executing + 1 + (slots > 1) > slots)
      return RC_CONG_HOLD_ESTIMATE;
    /* Nor while the reads running carry twice the BDP (why: the header,
     * RC_CONG_ISSUE).
     */
    bdp = atomic_load_explicit (&e->bdp_now_bytes, memory_order_relaxed);
    if (l->executing > 0 && bdp > 0 && l->executing_bytes >= 2 * bdp)
      return RC_CONG_HOLD_ESTIMATE;
    return RC_CONG_GO;

  case RC_CONG_KEEP:
    return !e->wait && l->executing + l->queued >= e->limit
      ? RC_CONG_HOLD_LIMIT : RC_CONG_GO;

  case RC_CONG_EARLY:
    /* With learning, none before the BDP is known (why: the header,
     * RC_CONG_EARLY).
     */
    if (e->learn &&
        atomic_load_explicit (&e->bdp_now_bytes, memory_order_relaxed) == 0)
      return RC_CONG_HOLD_ESTIMATE;
    return l->executing + l->queued + l->new_reads >= e->limit
      ? RC_CONG_HOLD_LIMIT : RC_CONG_GO;

  case RC_CONG_WINDOW:
    /* The client's own reads keep the backend's pipe full.  All
     * clients' reads together need only half the BDP: where no
     * bandwidth bounds the backend, the BDP measured is what was in
     * flight, speculation included, so one moment of speculation would
     * raise the bar the clients must reach to stop it.
     */
    if (e->learn) {
      bdp = atomic_load_explicit (&e->bdp_now_bytes, memory_order_relaxed);
      unsigned h = l->covered ? 1 : 0;     /* hysteresis: half */
      /* A client becomes covered with twice ra-io-max in flight
       * before the BDP is known, one and a half after; once covered,
       * half ra-io-max keeps it so.  Twice ra-io-max also keeps a calm
       * client covered beside CALM_BDPS (why: the header).
       */
      uint64_t two_io_max = 2 * l->window_bytes;
      uint64_t least = l->covered ? l->window_bytes >> 1
        : bdp > 0 ? l->window_bytes + (l->window_bytes >> 1) : two_io_max;
      uint64_t base, from;

      if (l->client_reads < 2 || l->client_bytes < least ||
          (l->client_bytes < bdp >> h && l->all_client_bytes < bdp >> 1))
        return RC_CONG_GO;
      /* Covered.  Was it the backend that bounded it (its sync reads
       * queued), or only distance (why: the header, RC_CONG_WINDOW)?
       */
      if ((l->covered && l->queue_seen) ||
          atomic_load_explicit (&e->queued_now, memory_order_relaxed))
        return RC_CONG_COVERED;
      /* Calm, and covered since: for how long both? */
      base = atomic_load_explicit (&e->base_now_ns, memory_order_relaxed);
      from = atomic_load_explicit (&e->calm_from_ns, memory_order_relaxed);
      if (bdp == 0 || base == 0 || from == 0 || l->covered_since_ns == 0)
        return RC_CONG_COVERED_CALM;
      if (l->covered_since_ns > from)
        from = l->covered_since_ns;
      return l->now_ns > from && l->now_ns - from >= CALM_BASES * base &&
        (l->client_bytes < CALM_BDPS * bdp || l->client_bytes < two_io_max) &&
        (l->let_go || l->covered_rate == 0 ||
         l->covered_rate * (double) base
         >= CALM_LITTLE * (double) l->client_bytes)
        ? RC_CONG_UNCOVERED_CALM : RC_CONG_COVERED_CALM;
    }
    return RC_CONG_GO;

  case RC_CONG_BESIDE:
    /* Why these three: the header, RC_CONG_BESIDE. */
    return l->client_reads < 2 && !l->yielding &&
      !atomic_load_explicit (&e->queued_now, memory_order_relaxed)
      ? RC_CONG_GO : RC_CONG_HOLD_ESTIMATE;
  }
  return RC_CONG_GO;
}

/* v halved for every RC_CONG_LATELY_HALF_NS of age_ns, linearly in
 * between.
 */
static uint64_t
halved (uint64_t v, uint64_t age_ns)
{
  uint64_t k = age_ns / RC_CONG_LATELY_HALF_NS;

  if (k >= 64)
    return 0;
  v >>= k;
  return v - (uint64_t) ((double) v
                         * (double) (age_ns % RC_CONG_LATELY_HALF_NS)
                         / (2.0 * (double) RC_CONG_LATELY_HALF_NS));
}

void
rc_cong_lately (struct rc_cong_peak *p, uint64_t now_ns, unsigned reads,
                uint64_t bytes, unsigned *reads_lately,
                uint64_t *bytes_lately)
{
  /* Another thread's read may have started later and come first. */
  uint64_t age = now_ns > p->ns ? now_ns - p->ns : 0;
  unsigned r = (unsigned) halved (p->reads, age);
  /* The peak's bytes go in whole reads of the peak's mean size, as its
   * reads do: halved continuously, a client that keeps exactly the bar
   * of the WINDOW question (six reads of 256 KiB) fell below it the
   * moment after its peak, and stayed uncovered while fed from pages.
   * (No peak yet: p is all zero.)
   */
  uint64_t b = p->reads ? p->bytes / p->reads * r
    + p->bytes % p->reads * r / p->reads : 0;

  if (bytes >= b) {
    p->bytes = bytes;
    p->reads = reads;
    p->ns = now_ns;
    *bytes_lately = bytes;
    *reads_lately = reads;
  }
  else {
    *bytes_lately = b;
    *reads_lately = r > reads ? r : reads;
  }
}

void
rc_cong_get (const struct rc_cong *e, struct rc_cong_estimate *out)
{
  out->slots = atomic_load_explicit (&e->slots_now, memory_order_relaxed);
  out->queue_delay_ns =
    atomic_load_explicit (&e->qdelay_now_ns, memory_order_relaxed);
  out->base_latency_ns =
    atomic_load_explicit (&e->base_now_ns, memory_order_relaxed);
  out->bdp_bytes = atomic_load_explicit (&e->bdp_now_bytes,
                                         memory_order_relaxed);
}
