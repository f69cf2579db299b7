/* ra-cache: the congestion estimator and THE congestion decision.
 *
 * Pure logic: no threads, no nbdkit, no I/O.  The caller feeds it one
 * sample per completed backend read (rc_cong_sample, serialized by the
 * caller) and asks rc_cong_decide, which reads only the published
 * estimate (atomics), from any thread without a lock.
 *
 * What it learns (in the manner of TCP Vegas and BBR, which tell a full
 * queue from a long path by the latency of each packet against what is
 * in flight):
 *
 *  - base latency: per size class of read (powers of two from 4 KiB),
 *    the smallest latency seen in the last 5-10 s: what a read of that
 *    size costs when it queues behind nothing;
 *  - slots: how many reads the backend serves at once without queueing,
 *    as the reads clients wait for (sync reads) pay for it.  Every sync
 *    read had k reads in flight (itself included) when it was issued
 *    and took r times its base latency; r is smoothed per level k.  The
 *    smoothed r of sync reads that ran alone is the noise floor (a
 *    loaded machine's latency varies without any queueing; 1 until such
 *    a read is seen, at most 2).  A level whose r is more than 1.25
 *    times the floor queued, and the slots are one below the lowest such
 *    level.  With none: the limit (the fixed ra-congestion-threshold)
 *    until some level has queued, then one above the highest level seen
 *    (probing).  A level's figure counts after 4 reads and its count
 *    halves every epoch (5 s), so what is not seen again is forgotten.
 *    Async reads that slow down under load keep nobody waiting: a lone
 *    stream's read-ahead may use the limit;
 *  - queueing delay: the smoothed latency above base of the clients'
 *    own (sync) reads: what speculation costs them;
 *  - calm: whether the clients' sync reads queue (their smoothed r is
 *    more than 1.25 times the floor), and since when they have not;
 *  - bandwidth-delay product: the largest delivery rate seen (the bytes
 *    delivered while a read ran, in its latency, as BBR measures it;
 *    without that count, the bytes in flight when it was issued: Little's
 *    law, which overstates the rate of a read that passed others) times
 *    the smallest base latency.
 *
 * The decision (rc_cong_decide) answers these questions about
 * speculation (async reads; a client's sync reads are never held back):
 *
 *  - RC_CONG_ISSUE: may a worker start a queued async read now?  With
 *    learning, only while the reads running leave, after it, one of the
 *    estimated slots free for the next sync read, and their bytes are
 *    below twice the bandwidth-delay product (when known): beyond that
 *    the pipe is full, and where the backend shares its bandwidth among
 *    the reads in flight (nbdkit's rate filter, TCP connections side by
 *    side) one more read would only slow those the clients need next.
 *    Twice, as BBR caps what it has in flight: the BDP measured only
 *    grows while more than it is in flight.  Either way an async read
 *    may start when none runs at all.
 *    With ra-congestion=wait (either mode), only below the fixed
 *    threshold (HOLD_LIMIT).  Other clients' sync reads running do not
 *    hold it back by themselves (they count among the reads running):
 *    a random reader that always has a read in flight would let
 *    speculation out only at the instants its reads end, each time
 *    together with its next read.  A window's own async part waits for
 *    its sync part only as BESIDE says.
 *  - RC_CONG_WINDOW: may a client's trigger have a window beyond its
 *    request at all?  With learning, not when the client keeps several
 *    reads in flight, at least one and a half window_bytes of them (the
 *    largest backend read, ra-io-max; twice that while the BDP is not
 *    known yet), while its own reads in flight
 *    cover the backend's bandwidth-delay product (when known), or all
 *    clients' reads together cover half of it: its async part would
 *    only share the backend with them (COVERED).  Half, because where
 *    no bandwidth bounds the backend the product measured is what was
 *    in flight, speculation included: against the whole of it,
 *    speculation once started would keep itself going.  Such clients
 *    (qemu-img convert: 8 reads of 2 MiB; nbdcopy's connections, each
 *    with a few 256 KiB reads, that together fill the pipe) keep it
 *    full by themselves; a client of one read at a time never does.
 *    A client covered at its last trigger stays so down to half the
 *    BDP and half ra-io-max (a third of the bytes it takes to become
 *    so once the BDP is known): its depth varies from read to read, and
 *    every uncovered trigger of a deep client starts a window of
 *    speculation it does not need.  For the same reason what a client
 *    keeps is the most it kept lately, halved for every second since
 *    (in whole reads: rc_cong_lately below): fed from pages read ahead
 *    for it, a copy tool keeps few reads in flight (nbdcopy's
 *    connections at 1 ms, sixteen reads deep where they miss, kept two
 *    for 200 ms at a time), and would otherwise look like a client of a
 *    read or two, whose windows went on feeding it.
 *    Covered is COVERED once the clients' sync reads have queued while
 *    the client was covered (the backend, not the client, is then the
 *    bound), else COVERED_CALM; a client covered but calm stops being
 *    covered once the sync reads have not queued for 8 base latencies
 *    while it was covered (calm before it was, as while qemu-img reads
 *    a qcow2 image's tables one at a time, does not count), unless it
 *    keeps at least two BDPs and twice window_bytes in flight, or read
 *    less than three quarters of client_bytes in a base latency while
 *    covered (covered_rate, when measured: over the client's last eight
 *    to sixteen depths, so that a slow start ages out): then
 *    UNCOVERED_CALM, which reads ahead as GO and goes on doing so while
 *    the calm lasts (the caller keeps covered_since_ns, and the rate's
 *    verdict at the let-go; a client let go for one window only, then
 *    covered again, was trapped in 1 run of 12).  So once the client was let go
 *    (let_go), the caller keeps them through answers that cover it
 *    calm and through GO answers for less than RC_CONG_LATELY_HALF_NS,
 *    and starts afresh once the sync reads queue while it is covered
 *    (COVERED: the calm ended) or after GO answers for that long; and
 *    the rate's verdict at the let-go stands, whatever base latency is
 *    measured since.  Without them, in 5 runs of 17, qemu-img bench 1M
 *    at depth 2 behind 20 ms at 1 Gbit/s failed the rate test against
 *    the lower base latency measured after its let-go (0.60 of its
 *    depth in 20.5 ms, 0.77 in the 25.8 ms before) and was covered for
 *    the rest of the job, at no filter's speed; at depth 4 behind 50 ms
 *    a GO answer (its reads in progress under half the BDP) cleared
 *    the record, and it was covered again for 8 base latencies.  And a
 *    client once let go is not held covered by a queue it saw
 *    (queue_seen stays false: struct ra_state's let_go_once): covered
 *    again while the sync reads queue, once they are calm it is judged
 *    as any calm covered client (8 base latencies, the rate measured
 *    afresh).  The let-go's own windows can make them queue for a
 *    moment (1M at depth 2 behind 10 ms: for 40 ms), and held, it was
 *    covered to the end of the job in 3 of 8 alternated runs.
 *    Why: a client covered before anything read ahead keeps only its
 *    own reads in flight, so the BDP measured is its own depth, which it
 *    then covers for good (4 reads of 256 KiB behind 20 ms at 1 Gbit/s,
 *    covered while the BDP was unknown by one ra-io-max alone, at the
 *    speed of no filter in 3 runs of 12).  Its reads run at their base
 *    latency: the backend has room, the client waits on distance alone.
 *    Where the CPU's noise makes its reads look queued (1 ms), nothing
 *    lets it go: so a client must keep twice ra-io-max to be covered
 *    before the BDP is known, and more than one after.  A copy tool
 *    keeps far more (convert: 16 MiB); 4 reads of 256 KiB at 1 ms,
 *    covered at once in 3 runs of 6, ran at the speed of no filter
 *    there (0.47-0.57 s against 0.29-0.35 with windows; bench/RESULTS.md,
 *    "Covered before the BDP is known"), and with one ra-io-max enough
 *    once the BDP was known, were still covered in about 1 run of 10,
 *    where the first reads measured a BDP about their own depth (1.4 MB
 *    against their 1 MiB).  Twice ra-io-max after the BDP was known
 *    too left nbdcopy's connections at 1 ms uncovered, which keep 7-8
 *    reads of 256 KiB (1.7-2.0 MB) lately, and they read up to 31,000
 *    pages ahead a run (bench/RESULTS.md, "A client of one ra-io-max is
 *    never covered").  The trap needs a BDP about the client's own
 *    depth; a client that keeps two BDPs, and two of the largest
 *    backend reads, is not trapped by it: its reads take longer than
 *    the base latency (a copy tool at 1 ms, bound by the CPU, not the
 *    distance), and letting it go only starts windows it does not need
 *    (nbdcopy's connections at 1 ms, 13 reads and 3.3 MB each against a
 *    BDP of 0.8 MB, let go 110 ms into the job, read up to 11,500 pages
 *    ahead a run; bench/RESULTS.md, "Not letting go a client two BDPs
 *    deep").  Nor is a client that reads much less than its depth in a
 *    base latency: calm reads and a BDP of its own depth, but bound by
 *    something else, windows do not speed it up.  qemu-img convert of
 *    a raw image behind 10 ms keeps 16 MiB in flight, a BDP of 15 MB,
 *    and reads 0.85-0.96 GB/s, about half of 16 MiB in 10 ms: the CPU
 *    bounds the copy on two cores.  Let go, it read no faster, at
 *    0.69-0.80 GB/s, and copied every page through the cache (37 MB of
 *    cache memory); the trapped client reads its depth in a base
 *    latency, as does nbdcopy on one connection there, 0.95 of its 4
 *    MiB (bench/RESULTS.md, "Not letting go a client bound by the
 *    CPU").
 *  - RC_CONG_KEEP / RC_CONG_EARLY: may a window just decided keep its
 *    async part (KEEP, at submit; with ra-congestion=skip the fixed
 *    threshold of reads running and queued drops it, as the kernel's
 *    FUSE rule does), or may an early window be started at all (EARLY:
 *    not when its reads would reach the threshold)?  The same in both
 *    modes, but for one rule: with learning, no early window while the
 *    BDP is not known (HOLD_ESTIMATE).  A reader that waits for a page
 *    an async part has in flight says its windows come late only where
 *    the backend has room; where bandwidth bounds it, the reader waits
 *    whatever is in flight, and reads in flight share the link, so an
 *    early window delays the very pages the reader waits for.  Until
 *    the BDP is known the ISSUE rule cannot bound what runs, so the
 *    next window starts at its marker, as the kernel's does (4 reads
 *    of 256 KiB behind 50 ms at 100 Mbit/s, a 4 MiB job: early
 *    windows of 4-8 MiB, a median of 0.41 s in 18 runs, 0.36 s in 36
 *    without them, no filter 0.31 s; bench/RESULTS.md, "No early window
 *    before the BDP is known").
 *  - RC_CONG_BESIDE: may a window's async part be queued beside its own
 *    sync part, or must it wait until the sync part has been read?
 *    Beside (GO) for a client of one read at a time (client_reads < 2):
 *    for it waiting costs a whole backend round trip at every sync
 *    trigger (behind 20 ms a stream's first window started its async
 *    part 20 ms late).  A client with more reads in flight asks for the
 *    async part's pages at once and has them read among the sync reads
 *    anyway (promoted); reading the rest beside its sync reads only adds
 *    to them.  Not beside (HOLD_ESTIMATE) either while the clients' sync
 *    reads queue now (the backend, not distance, bounds them, and the
 *    sync read would share it with the async part), nor while the window
 *    yields to a random reader (its p99 beside nbdcopy, in
 *    bench/congestion.sh, was 1.15x ra-max=0 with the async part beside,
 *    1.10x without).
 */
#ifndef RACACHE_CONGESTION_H
#define RACACHE_CONGESTION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define RC_CONG_CLASSES 12      /* 4 KiB, 8 KiB, ... 8 MiB and larger */
#define RC_CONG_LEVELS 65       /* reads in flight 1 .. 64 and more */

struct rc_cong {
  /* Configuration (rc_cong_init). */
  unsigned limit;               /* the fixed threshold: an upper bound */
  bool learn;                   /* false: the fixed rule alone */
  bool wait;                    /* ra-congestion=wait (else skip) */

  /* State, updated by rc_cong_sample under the caller's lock. */
  uint64_t epoch_ns;            /* start of the current epoch */
  uint64_t base_cur[RC_CONG_CLASSES], base_prev[RC_CONG_CLASSES];
  double rate_cur, rate_prev;   /* delivery rate, bytes per ns: maxima */
  double level_ratio[RC_CONG_LEVELS]; /* smoothed latency / base, by k */
  uint32_t level_n[RC_CONG_LEVELS];   /* samples behind it (halved each epoch) */
  bool congested_seen;          /* a level queued once: probe from then on */
  double floor_ratio;           /* smoothed r of reads that ran alone */
  unsigned slots;
  double qdelay_ns;             /* smoothed, sync reads */
  double sync_ratio;            /* smoothed r of sync reads (0: none yet) */
  uint64_t calm_since_ns;       /* when sync_ratio last fell to the floor
                                 * (0: it queues, or no sync read yet) */
  uint64_t samples;

  /* Published for rc_cong_decide and the stats (any thread). */
  _Atomic unsigned slots_now;
  _Atomic uint64_t qdelay_now_ns;
  _Atomic uint64_t base_now_ns;  /* smallest base latency of any class */
  _Atomic uint64_t bdp_now_bytes; /* 0: not known yet */
  _Atomic bool queued_now;       /* sync reads queue (sync_ratio) */
  _Atomic uint64_t calm_from_ns; /* since when they have not (0: they
                                 * do, or none yet) */
};

/* One completed backend read. */
struct rc_cong_sample {
  uint64_t start_ns, end_ns;    /* monotonic clock */
  uint64_t bytes;
  unsigned inflight;            /* backend reads running when it was
                                 * issued, itself included ... */
  uint64_t inflight_bytes;      /* ... and their bytes (0: unknown) */
  uint64_t delivered_bytes;     /* bytes of all the reads that completed
                                 * while it ran, itself included (0:
                                 * unknown: inflight_bytes stands in) */
  bool sync;                    /* a client waited for it */
};

/* What is going on when a question is asked. */
struct rc_cong_load {
  unsigned executing;           /* backend reads running now */
  uint64_t executing_bytes;     /* ISSUE: their bytes (0: not counted) */
  unsigned queued;              /* jobs waiting for a worker */
  unsigned new_reads;           /* EARLY: the reads the window would add */
  unsigned client_reads;        /* WINDOW: the reads the client keeps in
                                 * flight (the most it kept lately: struct
                                 * rc_trigger's lately_reads) ... */
  uint64_t client_bytes;        /* ... and their bytes */
  uint64_t all_client_bytes;    /* WINDOW: the bytes of every client's
                                 * reads in progress (0: unknown) */
  uint64_t window_bytes;        /* WINDOW: one ra-io-max (a client must
                                 * keep one and a half in flight to
                                 * become covered, twice before the BDP
                                 * is known, half to stay so) */
  bool covered;                 /* WINDOW: the client was covered at its
                                 * last trigger (it stays so down to
                                 * half window_bytes, and half the
                                 * BDP) */
  bool queue_seen;              /* WINDOW: ... and the clients' sync
                                 * reads have queued while it was (the
                                 * caller keeps it: RC_CONG_COVERED;
                                 * not for a client once let go) */
  uint64_t covered_since_ns;    /* WINDOW: since when it has been covered
                                 * or let go calm (0: neither, or no
                                 * clock; a let-go client's stands while
                                 * the calm lasts) */
  uint64_t now_ns;              /* WINDOW: the clock (rc_now_ns; 0: none) */
  double covered_rate;          /* WINDOW: the bytes a ns the client read
                                 * while covered, over its last
                                 * segments (src/trigger.c,
                                 * rc_covered_rate; 0:
                                 * not measured) */
  bool let_go;                  /* WINDOW: the client was let go calm
                                 * and its record stands (struct
                                 * ra_covered_rate's let_go): the rate
                                 * passed then */
  bool yielding;                /* BESIDE: the window yields to a random
                                 * reader (src/trigger.c, yielding) */
};

enum rc_cong_question {
  RC_CONG_ISSUE,                /* a worker would start an async read */
  RC_CONG_KEEP,                 /* a window keeps its async part */
  RC_CONG_EARLY,                /* an early async trigger is taken */
  RC_CONG_WINDOW,               /* a trigger reads beyond its request */
  RC_CONG_BESIDE,               /* a window's async part starts beside
                                 * its sync part */
};

enum rc_cong_answer {
  RC_CONG_GO = 0,
  RC_CONG_HOLD_LIMIT,           /* the fixed threshold */
  RC_CONG_HOLD_ESTIMATE,        /* the learned slots are in use */
  RC_CONG_COVERED,              /* the client's reads cover the BDP,
                                 * and the clients' sync reads queue or
                                 * have queued while it was covered */
  RC_CONG_COVERED_CALM,         /* they cover it, but no sync read has
                                 * queued since it was first covered */
  RC_CONG_UNCOVERED_CALM,       /* they cover it, but none has queued
                                 * for 8 base latencies since: GO (the
                                 * caller keeps covered_since_ns) */
};

/* The most a client kept in flight lately, for the WINDOW question's
 * client_reads and client_bytes (why: RC_CONG_WINDOW above): its reads
 * in progress and their bytes when the bytes were at their most, halved
 * for every RC_CONG_LATELY_HALF_NS since (linearly in between), and
 * rounded up to whole reads; the bytes go with the reads, in reads of
 * the peak's mean size.  Halved on their own, the bytes of a client
 * that keeps exactly the bar to be covered (six reads of 256 KiB, one
 * and a half ra-io-max) fell below it at once after its peak, and a
 * copy tool fed from pages kept reading ahead (bench/RESULTS.md, "The
 * depth lately in whole reads").
 */
#define RC_CONG_LATELY_HALF_NS (UINT64_C (1000000000))
struct rc_cong_peak {
  uint64_t bytes;               /* the most bytes in progress */
  unsigned reads;               /* its reads in progress then */
  uint64_t ns;                  /* when */
};

/* A read of the client's started at now_ns: reads and bytes are its
 * reads in progress now, that one included.  Updates p (all zero at
 * first; the caller serializes the calls for one client) and sets
 * *reads_lately and *bytes_lately to what the client kept lately.
 */
void rc_cong_lately (struct rc_cong_peak *p, uint64_t now_ns, unsigned reads,
                     uint64_t bytes, unsigned *reads_lately,
                     uint64_t *bytes_lately);

/* limit: the fixed threshold (>= 1); learn: use the estimate (adaptive
 * mode); wait: ra-congestion=wait.
 */
void rc_cong_init (struct rc_cong *e, unsigned limit, bool learn, bool wait);

/* Learn from one completed backend read (the caller serializes calls). */
void rc_cong_sample (struct rc_cong *e, const struct rc_cong_sample *s);

/* THE congestion decision (any thread, no lock). */
enum rc_cong_answer rc_cong_decide (const struct rc_cong *e,
                                    enum rc_cong_question q,
                                    const struct rc_cong_load *l);

/* The published estimate. */
struct rc_cong_estimate {
  unsigned slots;
  uint64_t queue_delay_ns, base_latency_ns, bdp_bytes;
};
void rc_cong_get (const struct rc_cong *e, struct rc_cong_estimate *out);

#endif /* RACACHE_CONGESTION_H */
