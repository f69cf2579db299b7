/* ra-cache: small helpers shared by the core and the filter (our own
 * equivalents of nbdkit's internal CLEANUP_FREE and
 * ACQUIRE_LOCK_FOR_CURRENT_SCOPE, which nbdkit does not install).
 */
#ifndef RACACHE_UTIL_H
#define RACACHE_UTIL_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif /* RACACHE_UTIL_H */
