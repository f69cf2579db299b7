/* ra-cache: what a trigger does, once, for every user of the engine
 * (src/trigger.c): the filter's cache (src/cache.c), ra-trace's
 * simulation (src/trace-sim.c) and the unit tests.
 *
 * A trigger (a miss: sync; a marker: async) asks the engine for a
 * window (rc_read_decide), inserts the window's new pages in flight
 * (ra_submit) in batches of backend reads, keeps or drops the window's
 * async part by the congestion rule, and has its user issue the batches:
 * the sync ones first, then the async ones.  Around that, for every
 * user alike: a client whose own reads keep the backend busy reads just
 * its request (and, where its user can, around the cache); in adaptive
 * mode the engine is told the clock, the backend model, the cache's
 * share, the stream's waste and near hits, and the yield bound while a
 * client of another stream waits for reads at random.
 *
 * What differs between users is behind two sets of callbacks: the cache
 * (struct rc_trigger_cache_ops: query, insert, abandon, take a marker,
 * the cache's adaptive inputs) and the rest (struct rc_trigger_ops: the
 * clock, the backend model, the congestion decision, whether a
 * background reader is there, read-around, and issuing the batches).
 * struct rc_trigger carries one trigger from its question to its
 * batches, as the kernel's readahead_control does.
 */
#ifndef RACACHE_TRIGGER_H
#define RACACHE_TRIGGER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "racache/congestion.h"
#include "racache/pagecache.h"
#include "racache/readahead.h"
#include "racache/readpath.h"
#include "racache/stats.h"

/* The yield bound (adaptive mode): for RC_YIELD_NS after a client of
 * another stream last waited for a read at random (a branch G window),
 * a stream's windows are at most self_max / RC_YIELD_DIV pages, in
 * backend reads of at most io_max / RC_YIELD_DIV.
 */
#define RC_YIELD_NS (UINT64_C (1000000000))
#define RC_YIELD_DIV 4

struct rc_trigger;

struct rc_trigger_cache_ops {
  /* The engine's queries. */
  const struct ra_cache_ops *query;
  /* Insert absent page index in flight (kind, owner: as rc_pc_insert);
   * true if this call inserted it.
   */
  bool (*insert) (void *cache, ra_pgoff index, bool marker,
                  enum rc_insert_kind kind, unsigned owner);
  /* Remove the pages a dropped async batch inserted; how many. */
  ra_pgoff (*abandon) (void *cache, ra_pgoff start, ra_pgoff count);
  /* Take the marker off page index if it carries one (early trigger). */
  bool (*take_marker) (void *cache, ra_pgoff index);
  /* Optional (adaptive mode): the cache's part of the engine's inputs:
   * share, owner's wasted since its last decision, and the near hits
   * since the last decision of any stream.
   */
  void (*inputs) (void *cache, unsigned owner, struct ra_inputs *in);
  /* Optional (adaptive mode): the owner of the window that inserted
   * page index (rc_pc_page_owner), 0 for none.
   */
  unsigned (*owner) (void *cache, ra_pgoff index);
  /* Optional (adaptive mode): a miss no stream explained was decided
   * (branch G or N): the clock of the near hits' horizon.
   */
  void (*near_step) (void *cache);
};

/* The filter's cache: src/pagecache.c. */
extern const struct rc_trigger_cache_ops rc_pc_trigger_ops;

struct rc_trigger_ops {
  /* Adaptive mode: the clock (ns), and the backend model (false while
   * it knows nothing).
   */
  uint64_t (*now_ns) (void *opaque);
  bool (*model) (void *opaque, double *lat_ns, double *page_ns);
  /* THE congestion decision (racache/congestion.h) of question q over
   * the user's reads now; asked: what the trigger knows of the question
   * (EARLY: new_reads; WINDOW: client_reads, client_bytes, covered), the
   * user fills in the rest.
   */
  enum rc_cong_answer (*congestion) (void *opaque, enum rc_cong_question q,
                                     const struct rc_cong_load *asked);
  /* Optional: false while nobody could read an async part (no
   * background connection): it is dropped.
   */
  bool (*ready) (void *opaque);
  /* Optional: read around the cache.  When the trigger would read the
   * request t->rd and nothing more (src/trigger.c, read_around), around_ok
   * (under the stream's lock) says whether it can be one backend read
   * into the client's buffer; around then reads it (after).
   */
  bool (*around_ok) (void *opaque, const struct rc_trigger *t);
  int (*around) (void *opaque, struct rc_trigger *t, int *err);
  /* Issue t's batches: the sync ones first, then the async ones.
   * Returns 0, or -1 with *err when a sync read of a page of
   * [t->need_start, t->need_end) failed.
   */
  int (*issue) (void *opaque, struct rc_trigger *t, int *err);
  /* Optional: told of each window decided with pages in it, once it is
   * read around the cache or submitted and its async part kept or
   * dropped (t's answer is complete but for the batches' reads), under
   * the stream's lock: for a log line, nothing slow.
   */
  void (*decided) (void *opaque, const struct rc_trigger *t);
};

/* One cache's triggers: shared by all of its streams. */
struct rc_trigger_env {
  const struct rc_trigger_ops *ops;
  void *opaque;
  const struct rc_trigger_cache_ops *cache_ops;
  void *cache;
  const struct ra_params *params;
  struct rc_stats *st;
  /* When a client last waited for a read at random, and its stream's
   * owner: the yield bound.
   */
  _Atomic uint64_t random_wait_ns;
  _Atomic unsigned random_wait_owner;
  /* The near rule's state (branch N), shared by the streams: a file
   * system read through the kernel spreads its misses over several
   * connections.  near_lock is taken inside a stream's lock, around
   * the engine's decision, and nothing but the cache's shard locks
   * (its queries) inside it.
   */
  pthread_mutex_t near_lock;
  struct ra_near near;
};

/* A window's batches: a list that starts inside struct rc_trigger and
 * grows on the heap for windows of many backend reads.
 */
#define RC_TRIGGER_INLINE_BATCHES 64

struct rc_trigger {
  /* The question (rc_trigger_init). */
  struct ra_state *ra;          /* the stream's state; NULL: forced */
  unsigned owner;               /* the stream's owner number, 0: forced */
  unsigned depth_reads;         /* the stream's reads in flight lately */
  uint64_t depth_bytes;         /* ... and their bytes */
  /* The most it kept in flight lately, for the WINDOW congestion
   * question (include/racache/congestion.h): its reads and their bytes
   * when they were at their most, halved for every second since
   * (rc_trigger_init sets them to the two above; the filter's streams
   * set them after it: src/cache.c).
   */
  unsigned lately_reads;
  uint64_t lately_bytes;
  ra_pgoff index;               /* the trigger's page */
  bool marker;                  /* an async trigger */
  ra_pgoff last;                /* the end (pages) of its client read */
  struct rc_read *rd;           /* that read, or NULL */
  void *user;                   /* the user's, for its ops (NULL at init) */
  /* The answer. */
  struct ra_window w;
  ra_pgoff io;                  /* pages per backend read of its batches */
  bool covered;                 /* the client's reads covered the backend:
                                   the window is just the request */
  bool around;                  /* served around the cache */
  bool yielded;                 /* bounded by the yield to a random
                                   reader (RC_YIELD_DIV) */
  struct ra_submit_result res;  /* pages inserted by part */
  ra_pgoff dropped;             /* async pages dropped for congestion */
  ra_pgoff burst;               /* pages of a window not read: the
                                   stream's first burst (src/trigger.c) */
  ra_pgoff marker_page;         /* the page that got the marker, or
                                   RA_NO_MARKER */
  ra_pgoff need_start, need_end; /* pages whose read errors are the
                                    caller's (issue) */
  struct rc_batch *b;
  unsigned n, cap;
  bool overflow;                /* the list could not grow: the rest of
                                   the window stays absent */
  struct rc_batch inline_b[RC_TRIGGER_INLINE_BATCHES];
};

void rc_trigger_env_destroy (struct rc_trigger_env *env);
void rc_trigger_env_init (struct rc_trigger_env *env,
                          const struct rc_trigger_ops *ops, void *opaque,
                          const struct rc_trigger_cache_ops *cache_ops,
                          void *cache, const struct ra_params *params,
                          struct rc_stats *st);

/* A trigger of stream state ra (owner) at page index of a client read
 * rd ending at page last (rd may be NULL: an early trigger).  depth: the
 * stream's reads in flight lately (reads, bytes).
 */
void rc_trigger_init (struct rc_trigger *t, struct ra_state *ra,
                      unsigned owner, ra_pgoff index, bool marker,
                      ra_pgoff last, struct rc_read *rd,
                      unsigned depth_reads, uint64_t depth_bytes);
/* Free what t's batch list took; t may be used again after init. */
void rc_trigger_free (struct rc_trigger *t);

/* Do trigger t (see the top of this file).  lock, if not NULL, guards
 * t->ra: it is held while the window is decided and inserted, and
 * released before the batches are issued.  Returns what issue (or
 * around) returned.
 */
int rc_trigger (struct rc_trigger_env *env, struct rc_trigger *t,
                pthread_mutex_t *lock, int *err);

/* Forced readahead (NBD_CMD_CACHE) of [*index, last): the next chunk's
 * window, inserted and issued (no marker, no stream, no congestion
 * rule; user: the trigger's user pointer); *index moves past it.  Returns 0 when there was none left, 1
 * after a chunk, -1 with *err when a read of it failed.
 */
int rc_trigger_forced (struct rc_trigger_env *env, ra_pgoff *index,
                       ra_pgoff last, void *user, int *err);

/* Adaptive mode: the client waited for page t->index (t from
 * rc_trigger_init: the stream, its owner and depth, the page), which an
 * async part had in flight.  The engine counts it late and may name the
 * stream's next marker: that marker is taken and its async trigger made
 * now (when the congestion decision lets the window's reads start), so
 * the next window starts early; t is then that trigger.  lock as for
 * rc_trigger.  Returns true if it made one.
 */
bool rc_trigger_late (struct rc_trigger_env *env, struct rc_trigger *t,
                      pthread_mutex_t *lock);

/* The calm let-go's measure of a covered client (ra->done_bytes: the
 * bytes it has read; ra->cov), under the lock of rc_trigger: what it
 * read in a ns while covered, over its last segments (0: not measured;
 * not asked once it was let go); and the stream's record of a WINDOW
 * answer (ra->covered, queue_seen, covered_since_ns, the measure and
 * the let-go; src/trigger.c says how); depth_bytes: what the client
 * keeps in flight (rc_cong_load's client_bytes), which sizes the
 * measure's segments.
 */
double rc_covered_rate (const struct ra_state *ra, uint64_t now);
void rc_covered_note (struct ra_state *ra, enum rc_cong_answer a,
                      uint64_t now, uint64_t depth_bytes);

#endif /* RACACHE_TRIGGER_H */
