/* ra-cache: the readahead engine.
 *
 * Pure decision logic: given a stream state, a client access and a small
 * query interface to the page cache, decide which window to read.  No
 * threads, no nbdkit, no I/O.  The words used here (page, request,
 * req_count, window, sync part, async part, marker, stream state) have
 * exactly the meanings given in doc/readahead-rules.md and in the big picture
 * comment at the top of src/readahead.c.
 */
#ifndef RACACHE_READAHEAD_H
#define RACACHE_READAHEAD_H

#include <stdbool.h>
#include <stdint.h>

/* A page index: byte offset / page size. */
typedef uint64_t ra_pgoff;

#define RA_NO_MARKER UINT64_MAX

/* Largest chunk of a forced readahead (NBD_CMD_CACHE), in bytes. */
#define RA_FORCED_CHUNK_BYTES (2u * 1024 * 1024)

/* Which branch of ondemand() produced a window. */
enum ra_branch {
  RA_NONE = 0,      /* no readahead (branch C found no hole, or ra off) */
  RA_A_INITIAL,     /* A: read at page 0 */
  RA_B_SEQUENTIAL,  /* B: the expected page: push the window forward */
  RA_C_INTERLEAVED, /* C: marker found, state belongs to another stream */
  RA_D_OVERSIZE,    /* D: request larger than the largest window */
  RA_E_SEQ_MISS,    /* E: sequential miss next to prev_pos */
  RA_F_CONTEXT,     /* F: context readahead from cached history */
  RA_G_RANDOM,      /* G: random read: exactly the request, no marker */
  RA_N_NEAR,        /* N: adaptive mode only: a miss no stream explains,
                     * window sized by near hits (the near rule) */
  RA_FORCED,        /* forced readahead (NBD_CMD_CACHE), no marker */
  RA_OFF,           /* ra_max == 0: exactly the request, no marker */
  RA_NR_BRANCHES
};

/* Short name of a branch ("A" .. "G", "N", "forced", "off", "none"). */
const char *ra_branch_name (enum ra_branch b);
/* What branch b is, in a word or two ("sequential", "context", ...),
 * for people: the names the man page gives beside the letters.
 */
const char *ra_branch_description (enum ra_branch b);

/* How windows are sized (ra-mode). */
enum ra_mode {
  RA_MODE_KERNEL = 0,   /* the rules exactly: ra_max is every stream's limit */
  RA_MODE_ADAPTIVE = 1, /* each stream's limit follows its measured needs */
};

/* Adaptive mode, per stream (all zero in kernel mode).  The stream's
 * largest window, cap, replaces ra_max in the sizing rules; it is the
 * window that keeps the next window arriving before the reader reaches
 * it (from the reader's consumption rate and the backend model), scaled
 * by the late feedback (x 2^boost) and the waste feedback (/ 2^shrink),
 * within ra_max, the congestion bound and the stream's fair share of
 * the cache.  See "Adaptive mode" in src/readahead.c.
 */
struct ra_adapt {
  ra_pgoff cap;         /* largest window now (pages); 0 = not decided */
  uint64_t mark_ns;     /* clock at the last sequential async trigger */
  ra_pgoff mark_index;  /* its page */
  double rate;          /* pages per second the reader consumes; 0 = unknown */
  unsigned boost;       /* late prefetch feedback, log2 */
  unsigned shrink;      /* waste feedback, log2 */
  unsigned calm;        /* windows since the last late or waste event */
  ra_pgoff late_start;  /* start of the window last counted late, + 1 */
  ra_pgoff early_mark;  /* marker last taken early: no other is taken
                         * for a reader still behind it */
  uint64_t late_events; /* reads that waited for a page in flight ahead */
  uint64_t waste_events;/* calls that reported pages evicted unused */
};

/* Adaptive mode's near rule (branch N): a sync miss that branches A-F
 * do not explain, in the spirit of Linux swap readahead
 * (mm/swap_state.c, __swapin_nr_pages): the window beyond the request
 * grows while the pages earlier near windows read ahead are used soon
 * (near hits), and shrinks to nothing when they are not.  One is shared
 * by all the streams of an export (ra_control's near: a file system
 * read through the kernel spreads its misses over several connections),
 * else each stream uses its own.  See the top of src/near.c.  All zero in kernel mode.
 */
#define RA_NEAR_REGIONS 8
#define RA_NEAR_RIPE 8
struct ra_near {
  ra_pgoff recent[RA_NEAR_REGIONS]; /* regions of the latest such misses,
                                     * the latest first */
  unsigned char misses[RA_NEAR_REGIONS]; /* misses in each since it
                                 * entered recent[] (at most 255) */
  bool filled[RA_NEAR_REGIONS]; /* its block was read as a dense region */
  bool back[RA_NEAR_REGIONS];   /* a miss in it fell before the one before */
  ra_pgoff last[RA_NEAR_REGIONS]; /* its latest miss */
  unsigned nrecent;     /* entries of recent[] in use */
  ra_pgoff lo, req_end; /* the latest such miss: its request */
  bool valid;           /* lo and req_end describe a miss */
  ra_pgoff ahead;       /* the pages a near window reads beyond the
                         * request now (0: the miss is read exactly) */
  ra_pgoff behind;      /* of the latest window, those before it */
  ra_pgoff ring[RA_NEAR_RIPE]; /* the async parts of the latest misses'
                         * near windows (0: none), pos the oldest */
  unsigned pos;
  ra_pgoff pending;     /* their sum */
  ra_pgoff hits;        /* near hits (struct ra_inputs) since the last
                         * miss */
  double used, read;    /* near hits, and pages read ahead by near
                         * windows older than RA_NEAR_RIPE misses, each
                         * decayed by an eighth a miss */
  unsigned streak;      /* misses in a row near a recent one, since the
                         * last trial */
  unsigned fails;       /* trials in a row that were not used */
};

/* What a covered client reads in a ns (src/trigger.c, rc_covered_rate),
 * measured while it is covered (not asked once it was let go), and
 * whether it was let go calm; all zero while it is neither covered nor
 * let go (a let-go client's record stands while the calm lasts:
 * rc_covered_note).
 */
struct ra_covered_rate {
  uint64_t mark_bytes;  /* done_bytes when it was covered
                         * (covered_since_ns) */
  uint64_t from_ns;     /* the first trigger after a read of it completed
                         * since (0: none yet), or the start of the
                         * older of the measure's last two segments */
  uint64_t from_bytes;  /* done_bytes then; both move on to the
                         * segment's start when a segment ends */
  uint64_t seg_ns;      /* the start of the newest segment of the measure */
  uint64_t seg_bytes;   /* done_bytes then */
  bool let_go;          /* let go calm since */
  uint64_t go_since_ns; /* let go, GO answers since (0: not GO) */
};

/* Stream state: one per NBD connection (the kernel keeps one per open
 * file).  start/size/async_size describe the most recent window as the
 * kernel records it (not clamped to the end of the export).
 */
struct ra_state {
  ra_pgoff start;
  ra_pgoff size;
  ra_pgoff async_size;
  uint64_t prev_pos;    /* byte after the end of the last read */
  bool prev_valid;      /* false until the first read completes */
  struct ra_adapt ad;   /* adaptive mode only */
  struct ra_near near;  /* adaptive mode only, when ra_control's near
                         * is NULL */
  bool covered;         /* its last trigger found the client's own reads
                         * covering the backend (src/trigger.c) */
  bool queue_seen;      /* ... and the clients' sync reads had queued
                         * while it was covered (RC_CONG_COVERED; never
                         * once it was let go: let_go_once) */
  uint64_t covered_since_ns; /* ... since when, or since when it was
                         * covered before being let go calm (0: neither) */
  uint64_t done_bytes;  /* the client's bytes read so far (src/cache.c) */
  struct ra_covered_rate cov; /* src/trigger.c, rc_covered_rate */
  bool let_go_once;     /* let go calm at least once: a queue of the
                         * sync reads covers it again, but does not hold
                         * it covered once they are calm (src/trigger.c,
                         * rc_covered_note) */
  unsigned first_windows; /* windows made before its first read completed,
                         * up to 2 (src/trigger.c, first_burst) */
};

/* Engine parameters.  Sizes in pages except where said. */
struct ra_params {
  unsigned page_shift;  /* log2 of the page size */
  ra_pgoff ra_max;      /* largest window (kernel ra_pages); 0 = off;
                         * in adaptive mode the upper limit of every cap */
  ra_pgoff io_max;      /* largest backend request (kernel io_pages), >= 1 */
  uint64_t export_size; /* bytes */
  /* Adaptive mode only (ignored in kernel mode): */
  enum ra_mode mode;
  ra_pgoff adapt_min;   /* smallest cap (pages), unless ra_max is smaller */
  ra_pgoff self_max;    /* largest window whose backend reads stay below the
                         * congestion threshold; 0 = no bound */
  unsigned parallel;    /* backend reads that can run at once; 0 = 1 */
};

/* What adaptive mode measures outside the engine, handed to each
 * decision so that the engine stays deterministic: tests give a clock
 * and backend timings of their choosing.
 */
struct ra_inputs {
  uint64_t now_ns;      /* a monotonic clock; 0 = unknown */
  double lat_ns;        /* backend read latency (fixed cost); < 0 = unknown */
  double page_ns;       /* backend cost per page of a read */
  ra_pgoff share;       /* fair share of the cache per stream; 0 = no bound */
  ra_pgoff wasted;      /* this stream's read-ahead pages evicted unused
                         * since its last decision */
  ra_pgoff near_hits;   /* pages of near windows' async parts (branch
                         * N) that a client read for the first time, soon
                         * after they were read (the caller's horizon),
                         * since the last decision: the near rule's own
                         * windows' (ra_control's near), else this
                         * stream's */
  ra_pgoff yield_max;   /* while other clients wait for reads at random
                         * beside this stream, its largest window
                         * (pages); 0 = no such bound */
  bool foreign_marker;  /* an async trigger whose marker another stream's
                         * window set (branch C then sizes the window
                         * from this stream's own state) */
};

/* Adaptive mode's self_max (struct ra_params) for a congestion threshold
 * of threshold backend reads: the largest window whose reads stay below
 * it while the previous window's are still running, threshold - 1
 * reads of io_max (at least one).
 */
ra_pgoff ra_self_max (unsigned threshold, ra_pgoff io_max);

/* Adaptive mode's fair share of a cache of capacity pages (the share
 * in struct ra_inputs), given the pages carrying a marker now (about one
 * per active sequential stream): a quarter of the cache over them, so
 * that every stream's two windows (the one being read and the next)
 * take at most half the cache and the rest is kept for what clients
 * have used.  A lone stream in a small cache therefore gets a quarter of
 * it, less than ra-max may allow (at most half the cache); counting it
 * alone as half gave two streams half the cache each whenever one's
 * marker was momentarily absent (taken, or evicted), and they thrashed.
 */
ra_pgoff ra_fair_share (uint64_t capacity, uint64_t markers);

/* Backend model: exponentially weighted least squares of read time over
 * read size, giving a latency (the fixed cost of a read) and a cost per
 * page.  Not thread-safe: the caller serializes.
 */
struct ra_model {
  double s0, sx, sy, sxx, sxy;
  uint64_t reads;
};

void ra_model_init (struct ra_model *m);
/* A backend read of pages took ns nanoseconds. */
void ra_model_sample (struct ra_model *m, ra_pgoff pages, uint64_t ns);
/* Latency and cost per page, in ns; false (and both 0) with no samples.
 * With one read size only the whole time counts as latency.
 */
bool ra_model_estimate (const struct ra_model *m, double *lat_ns,
                        double *page_ns);

/* Pages in the export (the last page may be partly outside it). */
static inline ra_pgoff
ra_nr_pages (const struct ra_params *p)
{
  uint64_t ps = UINT64_C(1) << p->page_shift;
  return p->export_size / ps + (p->export_size % ps != 0);
}

/* The page cache as the engine sees it.  "cached" means present in any
 * state (in flight or up to date), as the kernel's page cache lookup.
 * Pages at or past the end of the export are never cached.
 */
struct ra_cache_ops {
  bool (*cached) (void *opaque, ra_pgoff index);
  /* Optional (derived from cached() when NULL): the first page in
   * [index, index + max) that is not cached, or index + max if all are.
   */
  ra_pgoff (*next_hole) (void *opaque, ra_pgoff index, ra_pgoff max);
  /* Optional (derived from cached() when NULL): the number of contiguous
   * cached pages just before index, looking back at most max pages.
   */
  ra_pgoff (*history) (void *opaque, ra_pgoff index, ra_pgoff max);
};

/* A window to read, clamped to the end of the export.  Its first
 * size - async_size pages are the sync part, the last async_size pages
 * the async part.  marker is the first page of the async part (before
 * clamping), or RA_NO_MARKER when there is none inside the export.
 */
struct ra_window {
  enum ra_branch branch;
  ra_pgoff start;
  ra_pgoff size;
  ra_pgoff async_size;
  ra_pgoff marker;
  ra_pgoff behind;      /* branch N only: pages just before start, read
                         * with the async part (the near rule reads an
                         * aligned block around the miss); not part of
                         * the window the stream state records */
};

void ra_state_init (struct ra_state *ra);

/* Sizing helpers (in pages; doc/readahead-rules.md, "How windows grow"). */
ra_pgoff ra_init_size (ra_pgoff req, ra_pgoff max);
ra_pgoff ra_next_size (ra_pgoff cur, ra_pgoff max);

/* ondemand(index, marker, req): decide the window for a trigger
 * without adaptive mode's measurements, the arguments as the fields of
 * struct ra_control (below) say.  Updates the stream state as
 * doc/readahead-rules.md ("The branches") says and returns the window
 * to submit; w->size == 0 means nothing to read.
 */
void ra_ondemand (struct ra_state *ra, const struct ra_params *p,
                  const struct ra_cache_ops *cache, void *opaque,
                  ra_pgoff index, bool marker, ra_pgoff req,
                  struct ra_window *w);

/* One call of ondemand(), as the kernel's struct readahead_control
 * carries one readahead request: the stream, how to ask the page cache
 * about it, and the trigger.  The caller fills one in for each call;
 * the engine only reads it (and updates *ra).
 */
struct ra_control {
  struct ra_state *ra;          /* the stream state, updated */
  const struct ra_params *p;    /* the engine's parameters */
  const struct ra_cache_ops *cache; /* the page cache's queries, */
  void *opaque;                 /* with this as their first argument */
  ra_pgoff index;               /* the trigger's page */
  bool marker;                  /* false: a sync trigger (page index is
                                 * not cached); true: an async trigger
                                 * (page index carried the marker, which
                                 * the caller has cleared) */
  ra_pgoff req;                 /* req_count: the pages of the request
                                 * from index (0 is taken as 1) */
  const struct ra_inputs *in;   /* adaptive mode's measurements, or NULL:
                                 * then an adaptive stream's cap is its
                                 * limit, as if nothing were measured
                                 * yet.  Ignored in kernel mode */
  struct ra_near *near;         /* the near rule's state shared by the
                                 * export's streams (updated; the caller
                                 * serializes), or NULL: the stream's
                                 * own (ra->near).  Adaptive mode only */
};

/* ondemand() with adaptive mode's measurements (ctl->in), deciding the
 * window *w as ra_ondemand does.  In kernel mode this is exactly
 * ra_ondemand.
 */
void ra_ondemand_at (const struct ra_control *ctl, struct ra_window *w);

/* Late prefetch feedback (adaptive mode): a client had to wait for page
 * index, which an async part had in flight.  Counts a late event (once
 * per window of the state) that undoes a waste step or else doubles the
 * stream's windows, and with it returns the page that carries the
 * stream's next marker when that page is ahead of index and index has
 * reached the marker taken early before (so the reader is never more
 * than one window pulled ahead): the caller takes the marker from it (if
 * still there) and makes an async trigger at it now, which moves the
 * marker earlier by the distance from index.  Returns RA_NO_MARKER
 * otherwise, and always in kernel mode.
 */
ra_pgoff ra_late (struct ra_state *ra, const struct ra_params *p,
                  ra_pgoff index);

/* Forced readahead for NBD_CMD_CACHE: the next chunk (at most 2 MiB,
 * at least one page) of [index, last), no marker, no stream state.
 * Returns false when index >= last (or past the export).
 */
bool ra_forced (const struct ra_params *p, ra_pgoff index, ra_pgoff last,
                struct ra_window *w);

/* Record a completed client read: prev_pos is the byte after it. */
void ra_update_prev_pos (struct ra_state *ra, uint64_t end_byte);

/* Submitting a window: walk its pages; a page already cached is skipped
 * (it ends the current batch); each new page is inserted (not up to date)
 * with the marker on the window's marker page; each contiguous run of new
 * pages becomes batches of at most io_max pages.  A batch never mixes the
 * sync part and the async part.
 */
struct ra_submit_ops {
  /* Insert page index if absent; return true if this call inserted it. */
  bool (*insert) (void *opaque, ra_pgoff index, bool marker, bool async);
  /* A batch of newly inserted pages to read from the backend. */
  void (*batch) (void *opaque, ra_pgoff start, ra_pgoff count, bool async);
};

struct ra_submit_result {
  ra_pgoff sync_pages;   /* sync part pages inserted */
  ra_pgoff async_pages;  /* async part pages inserted */
  ra_pgoff batches;
};

void ra_submit (const struct ra_window *w, ra_pgoff io_max,
                const struct ra_submit_ops *ops, void *opaque,
                struct ra_submit_result *res);

/* Congestion cleanup: the async part of window w was not read and its
 * dropped pages (newly inserted ones) have been removed from the cache.
 * Shrink size and async_size by that many pages so the state records
 * what was really read; the next access then misses at start + size,
 * which branch B continues.  No-op for windows that did not set the
 * state (G, forced, off).
 */
void ra_drop_async (struct ra_state *ra, const struct ra_window *w,
                    ra_pgoff dropped);

/* Only the first keep pages of window w were read, as a sync part (a
 * deep client's request read around the cache, src/trigger.c): the
 * state becomes that, with no async part, so the next access misses at
 * start + keep, which branch B continues.  No-op where ra_drop_async
 * is, and when keep is not smaller than the state's size.
 */
void ra_keep_only (struct ra_state *ra, const struct ra_window *w,
                   ra_pgoff keep);

#endif /* RACACHE_READAHEAD_H */
