/* ra-cache: the background workers' job queue and the completions
 * clients wait on (src/jobq.h).
 *
 * A batch of a window's sync part is read by the client thread that
 * waits for it (or, when the sync part has several batches, partly by
 * workers in parallel: rc_wait_for); a batch of the async part is queued
 * for the background workers and never delays the client that triggered
 * it.  Sync jobs are queued ahead of async jobs so that a waiting
 * client never waits behind speculation, and a client that comes to
 * wait for a page of a queued async job promotes that job among the sync
 * jobs (rc_promote); so does one that waits for a page of a window's
 * async part still parked while the window's sync part is read
 * (rc_park_job, as the BESIDE congestion question says).  An async job
 * starts only when rc_cong_decide says so: in adaptive mode only while
 * the estimated backend slots leave one free for the next sync read
 * (counted once per job as "held"); in kernel mode with
 * ra-congestion=wait only below the congestion threshold (counted once
 * per job as "delayed").
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>

#include "cache-internal.h"
#include "racache/util.h"

static void
jobs_init (struct rc_jobs *l)
{
  l->head = NULL;
  l->tail = &l->head;
}

static void
jobs_append (struct rc_jobs *l, struct rc_job *j)
{
  j->next = NULL;
  *l->tail = j;
  l->tail = &j->next;
}

/* Remove *pj, a job of l, and return it. */
static struct rc_job *
jobs_unlink (struct rc_jobs *l, struct rc_job **pj)
{
  struct rc_job *j = *pj;

  *pj = j->next;
  if (l->tail == &j->next)
    l->tail = pj;
  j->next = NULL;
  return j;
}

void
rc_jobq_init (struct rc_jobq *q)
{
  pthread_mutex_init (&q->lock, NULL);
  pthread_cond_init (&q->cond, NULL);
  jobs_init (&q->sync);
  jobs_init (&q->async);
  jobs_init (&q->parked);
  q->promotions = NULL;
  q->queued = q->queued_async = 0;
  q->stopping = false;
}

void
rc_jobq_destroy (struct rc_jobq *q)
{
  pthread_mutex_destroy (&q->lock);
  pthread_cond_destroy (&q->cond);
}

void
rc_wait_init (struct rc_wait *w, ra_pgoff need_start, ra_pgoff need_end)
{
  pthread_mutex_init (&w->lock, NULL);
  pthread_cond_init (&w->done, NULL);
  w->pending = 0;
  w->need_start = need_start;
  w->need_end = need_end;
  w->err = 0;
}

void
rc_wait_destroy (struct rc_wait *w)
{
  pthread_mutex_destroy (&w->lock);
  pthread_cond_destroy (&w->done);
}

static void
wait_add (struct rc_wait *w)
{
  ACQUIRE_LOCK (&w->lock);
  w->pending++;
  RELEASE_LOCK (&w->lock);
}

/* A job of group w, pages [start, start + count), ended with err. */
static void
wait_finish (struct rc_wait *w, int err, ra_pgoff start, ra_pgoff count)
{
  ACQUIRE_LOCK (&w->lock);
  if (err && !w->err && start < w->need_end && start + count > w->need_start)
    w->err = err;
  /* Signal while holding the lock: the waiter may destroy w as soon as
   * it sees pending == 0.
   */
  if (--w->pending == 0)
    pthread_cond_broadcast (&w->done);
  RELEASE_LOCK (&w->lock);
}

void
rc_job_finish (struct rc_cache *c, struct rc_job *j, int r, int err)
{
  if (j->async)
    STAT_ADD (&c->stats, async_pages, r == 0 ? j->count : 0);
  if (j->wait)
    wait_finish (j->wait, r == 0 ? 0 : err, j->start, j->count);
  free (j);
}

/* A job that will not be read: its pages go back to absent. */
static void
give_up (struct rc_cache *c, struct rc_job *j, int err)
{
  rc_pc_complete (c->pc, j->start, j->count, NULL, 0, err);
  rc_job_finish (c, j, -1, err);
}

/* Take a queued sync job of group w (for its waiting client), or NULL. */
static struct rc_job *
steal_job (struct rc_cache *c, struct rc_wait *w)
{
  struct rc_job **pj, *j = NULL;

  ACQUIRE_LOCK (&c->q.lock);
  for (pj = &c->q.sync.head; *pj; pj = &(*pj)->next)
    if ((*pj)->wait == w) {
      j = jobs_unlink (&c->q.sync, pj);
      atomic_fetch_sub (&c->q.queued, 1);
      break;
    }
  RELEASE_LOCK (&c->q.lock);
  return j;
}

/* The client never waits for a worker that is busy or has no backend
 * connection: it reads the jobs of its group nobody started itself.
 */
int
rc_wait_for (struct rc_cache *c, void *ctx, struct rc_wait *w)
{
  struct rc_job *j;
  int err;

  while ((j = steal_job (c, w)) != NULL) {
    int r;

    err = 0;
    r = rc_backend_read_pages (c, ctx, j->start, j->count, true, &err);
    rc_job_finish (c, j, r, err);
  }
  ACQUIRE_LOCK (&w->lock);
  while (w->pending > 0)
    pthread_cond_wait (&w->done, &w->lock);
  err = w->err;
  RELEASE_LOCK (&w->lock);
  return err;
}

/* Does a client wait for a page of [start, start + count) whose job
 * was not queued yet (rc_promote)?  Called with c->q.lock held.
 */
static bool
promote_pending (struct rc_cache *c, ra_pgoff start, ra_pgoff count)
{
  struct rc_promotion *pr;

  for (pr = c->q.promotions; pr; pr = pr->next)
    if (pr->index >= start && pr->index < start + count)
      return true;
  return false;
}

/* A new job, in its group if any; NULL (its pages given back, its
 * group told) when out of memory.
 */
static struct rc_job *
job_new (struct rc_cache *c, ra_pgoff start, ra_pgoff count, bool async,
         struct rc_wait *wait, unsigned owner)
{
  struct rc_job *j = malloc (sizeof *j);

  if (!j) {
    /* Nothing will read these pages: give them back at once. */
    rc_pc_complete (c->pc, start, count, NULL, 0, ENOMEM);
    if (wait) {
      wait_add (wait);
      wait_finish (wait, ENOMEM, start, count);
    }
    return NULL;
  }
  *j = (struct rc_job) {
    .start = start, .count = count, .async = async, .wait = wait,
    .owner = owner,
  };
  if (wait)
    wait_add (wait);
  return j;
}

/* Why j may not be queued (an errno), or 0.  Called with c->q.lock
 * held.
 */
static int
refusal (struct rc_cache *c, const struct rc_job *j)
{
  if (c->q.stopping)
    return ESHUTDOWN;           /* nobody will read these pages */
  /* No worker can read it (no background connection), and no client
   * waits to read it itself: drop it.  (The pool drops the orphans
   * under this lock after the last connection went: none is missed.)
   */
  if (!j->wait && atomic_load (&c->pool.nopen_now) == 0)
    return ENOTCONN;
  return 0;
}

/* Queue j, or return why not.  Called with c->q.lock held. */
static int
enqueue (struct rc_cache *c, struct rc_job *j)
{
  bool async = j->async && !j->wait;
  int refused = refusal (c, j);

  if (refused)
    return refused;
  atomic_fetch_add (&c->q.queued, 1);
  if (async && promote_pending (c, j->start, j->count)) {
    STAT_ADD (&c->stats, async_promoted, 1);
    async = false;              /* a client waits for it already */
  }
  if (async)
    atomic_fetch_add (&c->q.queued_async, 1);
  jobs_append (async ? &c->q.async : &c->q.sync, j);
  rc_workers_grow (c);
  return 0;
}

/* Queue j, or park it (token not NULL) unless a client already waits
 * for one of its pages; give it up if it may not be queued.
 */
static void
place (struct rc_cache *c, struct rc_job *j, const void *token)
{
  bool parked = false;
  int refused;

  ACQUIRE_LOCK (&c->q.lock);
  if (token && !promote_pending (c, j->start, j->count)) {
    if (!(refused = refusal (c, j))) {
      j->parked = token;
      jobs_append (&c->q.parked, j);
      parked = true;
    }
  }
  else
    refused = enqueue (c, j);
  RELEASE_LOCK (&c->q.lock);
  if (refused)
    give_up (c, j, refused);
  else if (!parked)
    pthread_cond_signal (&c->q.cond);
}

void
rc_queue_job (struct rc_cache *c, ra_pgoff start, ra_pgoff count,
              bool async, struct rc_wait *wait, unsigned owner)
{
  struct rc_job *j = job_new (c, start, count, async, wait, owner);

  if (j)
    place (c, j, NULL);
}

void
rc_park_job (struct rc_cache *c, ra_pgoff start, ra_pgoff count,
             unsigned owner, const void *token)
{
  struct rc_job *j = job_new (c, start, count, true, NULL, owner);

  if (j)
    place (c, j, token);
}

void
rc_unpark_jobs (struct rc_cache *c, const void *token)
{
  struct rc_job **pj, *j, *refused = NULL;
  unsigned queued = 0;
  int err = 0, r;

  ACQUIRE_LOCK (&c->q.lock);
  pj = &c->q.parked.head;
  while (*pj) {
    if ((*pj)->parked != token) {
      pj = &(*pj)->next;
      continue;
    }
    j = jobs_unlink (&c->q.parked, pj);
    j->parked = NULL;
    if ((r = enqueue (c, j)) != 0) {    /* nobody waits for them */
      err = r;
      j->next = refused;
      refused = j;
    }
    else
      queued++;
  }
  RELEASE_LOCK (&c->q.lock);
  /* A worker per job, as rc_queue_job wakes one per job: a worker does
   * not wake another when it takes a job and more are queued.
   */
  while (queued-- > 0)
    pthread_cond_signal (&c->q.cond);
  while ((j = refused) != NULL) {
    refused = j->next;
    give_up (c, j, err);
  }
}

/* May the queued async job j start now?  Counts it once as delayed or
 * held back when not.
 */
static bool
async_may_start (struct rc_cache *c, struct rc_job *j)
{
  struct rc_cong_load asked = { .executing = 0 };

  switch (rc_congestion (c, RC_CONG_ISSUE, &asked)) {
  case RC_CONG_GO:
  case RC_CONG_COVERED:
  case RC_CONG_COVERED_CALM:
  case RC_CONG_UNCOVERED_CALM:
    return true;
  case RC_CONG_HOLD_LIMIT:
    if (!j->delayed) {
      j->delayed = true;
      STAT_ADD (&c->stats, async_delayed, 1);
    }
    return false;
  case RC_CONG_HOLD_ESTIMATE:
    if (!j->held) {
      j->held = true;
      STAT_ADD (&c->stats, async_held, 1);
    }
    return false;
  }
  return false;
}

struct rc_job *
rc_jobq_take (struct rc_cache *c)
{
  struct rc_job *j = NULL;

  if (c->q.sync.head)
    j = jobs_unlink (&c->q.sync, &c->q.sync.head);
  else if (c->q.async.head && async_may_start (c, c->q.async.head)) {
    j = jobs_unlink (&c->q.async, &c->q.async.head);
    atomic_fetch_sub (&c->q.queued_async, 1);
  }
  if (j)
    atomic_fetch_sub (&c->q.queued, 1);
  return j;
}

/* Drop the queued jobs no client waits for (all of them; or when owner
 * != 0, the async jobs of owner: a promoted one, among the sync jobs,
 * has a client waiting); their pages go back to absent.  Returns the
 * pages dropped.
 */
static ra_pgoff
drop_unwaited (struct rc_cache *c, unsigned owner, int err)
{
  struct rc_job **pj, *j, *dropped = NULL;
  ra_pgoff pages = 0;
  int k;

  ACQUIRE_LOCK (&c->q.lock);
  for (k = owner ? 1 : 0; k < 2; k++) {
    struct rc_jobs *l = k == 0 ? &c->q.sync : &c->q.async;

    pj = &l->head;
    while (*pj) {
      if ((*pj)->wait || (owner && (*pj)->owner != owner)) {
        pj = &(*pj)->next;
        continue;
      }
      j = jobs_unlink (l, pj);
      atomic_fetch_sub (&c->q.queued, 1);
      if (k == 1)
        atomic_fetch_sub (&c->q.queued_async, 1);
      j->next = dropped;
      dropped = j;
    }
  }
  RELEASE_LOCK (&c->q.lock);
  while ((j = dropped) != NULL) {
    dropped = j->next;
    pages += j->count;
    give_up (c, j, err);
  }
  return pages;
}

void
rc_jobq_drop_orphans (struct rc_cache *c)
{
  drop_unwaited (c, 0, ENOTCONN);
}

void
rc_jobq_drop_owner (struct rc_cache *c, unsigned owner)
{
  if (owner)
    STAT_ADD (&c->stats, async_cancelled_pages,
              drop_unwaited (c, owner, ECANCELED));
}

void
rc_jobq_stop (struct rc_cache *c)
{
  struct rc_job *j;

  ACQUIRE_LOCK (&c->q.lock);
  c->q.stopping = true;
  for (;;) {
    if (c->q.sync.head)
      j = jobs_unlink (&c->q.sync, &c->q.sync.head);
    else if (c->q.async.head) {
      j = jobs_unlink (&c->q.async, &c->q.async.head);
      atomic_fetch_sub (&c->q.queued_async, 1);
    }
    else
      break;
    atomic_fetch_sub (&c->q.queued, 1);
    give_up (c, j, ESHUTDOWN);
  }
  RELEASE_LOCK (&c->q.lock);
  pthread_cond_broadcast (&c->q.cond);
}

/* A client is about to wait for page index, which is in flight: if its
 * read is still queued as speculation, move it among the sync jobs so
 * the client does not wait behind other speculation (and the read is
 * still issued once); if it is not queued, it may be about to be (or it
 * is running, or done): register pr until the wait is over.
 */
void
rc_promote (struct rc_cache *c, ra_pgoff index, struct rc_promotion *pr)
{
  struct rc_job **pj, *j = NULL;

  pr->registered = false;
  ACQUIRE_LOCK (&c->q.lock);
  for (pj = &c->q.async.head; *pj; pj = &(*pj)->next)
    if (index >= (*pj)->start && index < (*pj)->start + (*pj)->count) {
      j = jobs_unlink (&c->q.async, pj);
      atomic_fetch_sub (&c->q.queued_async, 1);
      break;
    }
  /* A parked job: its window's sync read is still running.  (Not when
   * stopping: no worker would read it; its parker gives it up.)
   */
  for (pj = &c->q.parked.head; !j && !c->q.stopping && *pj;
       pj = &(*pj)->next)
    if (index >= (*pj)->start && index < (*pj)->start + (*pj)->count) {
      j = jobs_unlink (&c->q.parked, pj);
      j->parked = NULL;
      atomic_fetch_add (&c->q.queued, 1);
      break;
    }
  if (j) {
    jobs_append (&c->q.sync, j);
    STAT_ADD (&c->stats, async_promoted, 1);
    rc_workers_grow (c);
  }
  else {
    pr->index = index;
    pr->registered = true;
    pr->next = c->q.promotions;
    c->q.promotions = pr;
  }
  RELEASE_LOCK (&c->q.lock);
  if (j)
    pthread_cond_signal (&c->q.cond);
}

void
rc_promote_end (struct rc_cache *c, struct rc_promotion *pr)
{
  struct rc_promotion **pp;

  if (!pr->registered)
    return;
  ACQUIRE_LOCK (&c->q.lock);
  for (pp = &c->q.promotions; *pp; pp = &(*pp)->next)
    if (*pp == pr) {
      *pp = pr->next;
      break;
    }
  RELEASE_LOCK (&c->q.lock);
  pr->registered = false;
}
