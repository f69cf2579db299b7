/* ra-cache: small helpers shared by the core and the filter (our own
 * equivalents of nbdkit's internal CLEANUP_FREE and
 * ACQUIRE_LOCK_FOR_CURRENT_SCOPE, which nbdkit does not install).
 */
#ifndef RACACHE_UTIL_H
#define RACACHE_UTIL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* A lock that cannot be taken or released is a bug: stop at once. */
#define ACQUIRE_LOCK(m)                                                 \
  do {                                                                  \
    if (pthread_mutex_lock (m) != 0) {                                  \
      fprintf (stderr, "ra-cache: %s:%d: pthread_mutex_lock failed\n",  \
               __FILE__, __LINE__);                                     \
      abort ();                                                         \
    }                                                                   \
  } while (0)

#define RELEASE_LOCK(m)                                                 \
  do {                                                                  \
    if (pthread_mutex_unlock (m) != 0) {                                \
      fprintf (stderr, "ra-cache: %s:%d: pthread_mutex_unlock failed\n",\
               __FILE__, __LINE__);                                     \
      abort ();                                                         \
    }                                                                   \
  } while (0)

static inline void
rc_cleanup_unlock (pthread_mutex_t **m)
{
  if (*m)
    RELEASE_LOCK (*m);
}

#define RC_CONCAT_(a, b) a##b
#define RC_CONCAT(a, b) RC_CONCAT_ (a, b)

/* Hold m until the end of the enclosing scope. */
#define LOCK_FOR_SCOPE(m)                                               \
  __attribute__ ((cleanup (rc_cleanup_unlock)))                         \
  pthread_mutex_t *RC_CONCAT (rc_scope_lock_, __LINE__) = (m);          \
  ACQUIRE_LOCK (RC_CONCAT (rc_scope_lock_, __LINE__))

static inline void
rc_cleanup_free (void *ptr)
{
  free (*(void **) ptr);
}

#define CLEANUP_FREE __attribute__ ((cleanup (rc_cleanup_free)))

/* Memory in transparent huge pages (src/hugemem.c): len bytes, zero,
 * in whole RC_HUGE_SIZE units aligned so that the kernel may back them
 * with huge pages, reserved and touched only as used; below RC_HUGE_MIN
 * bytes, from calloc.  *maplen is what the block holds (0: calloc'd),
 * for rc_huge_free and for memory accounting.  NULL: out of memory.
 */
#define RC_HUGE_SIZE ((size_t) 2 << 20)
#define RC_HUGE_MIN (RC_HUGE_SIZE / 2)
void *rc_huge_alloc (size_t len, size_t *maplen);
void rc_huge_free (void *p, size_t maplen);

/* What rc_huge_alloc maps for len bytes: whole RC_HUGE_SIZE units; 0
 * below RC_HUGE_MIN (calloc) or where the rounding overflows.
 */
static inline size_t
rc_huge_map_len (size_t len)
{
  size_t n = (len + RC_HUGE_SIZE - 1) & ~(RC_HUGE_SIZE - 1);

  return len < RC_HUGE_MIN || n < len ? 0 : n;
}

/* How many len-byte pieces one rc_huge_alloc (len) block holds: a block
 * of whole huge pages is cut in as many as fit (two 1 MiB bounce buffers
 * in 2 MiB), a calloc'd one is one piece.
 */
static inline size_t
rc_huge_pieces (size_t len)
{
  size_t map = rc_huge_map_len (len);

  return map ? map / len : 1;
}

/* The monotonic clock in ns: the one clock of the core's decisions. */
static inline uint64_t
rc_now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000 + (uint64_t) ts.tv_nsec;
}

/* A condition variable that waits on the monotonic clock. */
static inline void
rc_cond_init (pthread_cond_t *cond)
{
  pthread_condattr_t a;

  pthread_condattr_init (&a);
  pthread_condattr_setclock (&a, CLOCK_MONOTONIC);
  pthread_cond_init (cond, &a);
  pthread_condattr_destroy (&a);
}

/* Wait on cond (made by rc_cond_init) until deadline (rc_now_ns;
 * UINT64_MAX: none), a signal or a spurious wakeup.
 */
static inline void
rc_cond_wait_until (pthread_cond_t *cond, pthread_mutex_t *lock,
                    uint64_t deadline)
{
  struct timespec ts;

  if (deadline == UINT64_MAX) {
    pthread_cond_wait (cond, lock);
    return;
  }
  ts.tv_sec = deadline / 1000000000;
  ts.tv_nsec = deadline % 1000000000;
  pthread_cond_timedwait (cond, lock, &ts);
}

/* Write path atomically (src/atomic-file.c): write (fp, arg) fills a
 * private temporary file (mode 0600) in path's directory, which is
 * renamed into place if it returned 0.  Returns 0, or -1 with errno set.
 */
int rc_write_file_atomic (const char *path,
                          int (*write) (FILE *fp, void *arg), void *arg);

#endif /* RACACHE_UTIL_H */
