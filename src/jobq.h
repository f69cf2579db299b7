/* ra-cache: the background workers' job queue and the completions
 * clients wait on (src/jobq.c).
 *
 * A job is one backend read of a batch of pages in flight.  Sync jobs (a
 * client waits for them, in a group: struct rc_wait) run before async
 * jobs (speculation), which start only when the congestion decision lets
 * them.  The queue's lock is taken before the connection pool's (a
 * worker takes a connection with the queue locked) and after a stream's
 * and the page cache's are released.
 */
#ifndef RACACHE_JOBQ_H
#define RACACHE_JOBQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "racache/readahead.h"

struct rc_cache;

/* Completion of a group of sync reads a client waits for. */
struct rc_wait {
  pthread_mutex_t lock;
  pthread_cond_t done;
  unsigned pending;
  ra_pgoff need_start, need_end; /* the pages whose errors count */
  int err;                      /* first error of a read of them, or 0 */
};

/* A client about to wait for page index, in flight, whose async job
 * was not queued yet (rc_promote): the job is queued among the sync
 * jobs.  Registered for the wait only (rc_promote_end), on the waiting
 * client's stack, so that no waiter is ever forgotten and no stale
 * entry promotes unrelated speculation.
 */
struct rc_promotion {
  ra_pgoff index;
  bool registered;
  struct rc_promotion *next;
};

struct rc_job {
  struct rc_job *next;
  ra_pgoff start, count;
  bool async;
  bool delayed;                 /* held back by the threshold (counted once) */
  bool held;                    /* held back by the estimate (counted once) */
  struct rc_wait *wait;         /* NULL for async parts */
  unsigned owner;               /* the stream of an async part's window
                                 * (0: none, as the learned replay's) */
  const void *parked;           /* parked (rc_park_job): its token */
};

/* A list of jobs in queue order. */
struct rc_jobs {
  struct rc_job *head, **tail;
};

/* Guarded by lock, except the counters. */
struct rc_jobq {
  pthread_mutex_t lock;
  pthread_cond_t cond;          /* wakes the workers */
  struct rc_jobs sync, async;
  struct rc_jobs parked;        /* async jobs parked (rc_park_job) */
  struct rc_promotion *promotions;
  _Atomic unsigned queued;      /* jobs queued, sync and async */
  _Atomic unsigned queued_async;
  bool stopping;
};

void rc_jobq_init (struct rc_jobq *q);
void rc_jobq_destroy (struct rc_jobq *q);

/* A group whose first error counts only when a failed read overlaps
 * pages [need_start, need_end).
 */
void rc_wait_init (struct rc_wait *w, ra_pgoff need_start, ra_pgoff need_end);
void rc_wait_destroy (struct rc_wait *w);
/* The waiting client reads, with its own context ctx, every job of the
 * group that no worker has started, then waits for the rest.  Returns
 * the first error that counts, or 0.
 */
int rc_wait_for (struct rc_cache *c, void *ctx, struct rc_wait *w);

/* Queue a read of the in-flight pages [start, start + count): sync
 * (wait: the group a client waits on) or async (wait NULL; owner: the
 * stream whose window it is, or 0).  A job that cannot be queued (no
 * memory, shutting down, an async job while no background connection
 * is open) gives its pages back at once.
 */
void rc_queue_job (struct rc_cache *c, ra_pgoff start, ra_pgoff count,
                   bool async, struct rc_wait *wait, unsigned owner);
/* A window's async batch while its sync part is read (by the thread
 * that parks it; token: any address unique to that read): no worker
 * starts it, as the sync read must not share the backend with it, but
 * a client that comes to wait for one of its pages (a deep client's
 * next reads) has it queued among the sync jobs at once (rc_promote)
 * instead of waiting for the sync read and then for it.  Refused as
 * rc_queue_job refuses an async job.  token NULL: queued at once, as
 * rc_queue_job (..., true, NULL, owner) would.
 */
void rc_park_job (struct rc_cache *c, ra_pgoff start, ra_pgoff count,
                  unsigned owner, const void *token);
/* The sync read of token is over: queue its jobs still parked as async
 * jobs (rc_queue_job).
 */
void rc_unpark_jobs (struct rc_cache *c, const void *token);
/* The next job a worker may start, or NULL: a sync job if any, else an
 * async job if the congestion decision lets it start now.  Called with
 * c->q.lock held.
 */
struct rc_job *rc_jobq_take (struct rc_cache *c);
/* A job ended (r: 0 or -1 with err): count it, tell its group, free it. */
void rc_job_finish (struct rc_cache *c, struct rc_job *j, int r, int err);
/* No background connection is open: drop the queued jobs no client
 * reads itself (their pages go back to absent).
 */
void rc_jobq_drop_orphans (struct rc_cache *c);
/* The connection of stream owner closed: drop its async jobs still
 * queued (their pages go back to absent), counted in
 * async_cancelled_pages.
 */
void rc_jobq_drop_owner (struct rc_cache *c, unsigned owner);
/* Shutting down: no new jobs; the queued ones are given up (ESHUTDOWN
 * to their clients).
 */
void rc_jobq_stop (struct rc_cache *c);

/* A client is about to wait for page index, in flight: promote its job
 * (queued as async or parked), or register pr (alive until
 * rc_promote_end) for when it is queued.
 */
void rc_promote (struct rc_cache *c, ra_pgoff index, struct rc_promotion *pr);
/* The wait is over: unregister pr if rc_promote registered it. */
void rc_promote_end (struct rc_cache *c, struct rc_promotion *pr);

#endif /* RACACHE_JOBQ_H */
