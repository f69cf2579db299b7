/* ra-cache: counters.  Updated with relaxed atomic operations so that the
 * read path never takes a lock for them.
 */
#ifndef RACACHE_STATS_H
#define RACACHE_STATS_H

#include <stdint.h>
#include <stdatomic.h>

#include "racache/readahead.h"

struct rc_stats {
  _Atomic uint64_t client_reads;      /* client read requests */
  _Atomic uint64_t client_bytes;      /* bytes returned to clients */
  _Atomic uint64_t page_hits;         /* pages found up to date or in flight */
  _Atomic uint64_t page_misses;       /* pages not cached when needed (sync trigger) */
  _Atomic uint64_t page_waits;        /* pages a client found in flight and waited for */
  _Atomic uint64_t windows[RA_NR_BRANCHES]; /* windows by branch */
  _Atomic uint64_t sync_pages;        /* sync part pages read */
  _Atomic uint64_t async_pages;       /* async part pages read */
  _Atomic uint64_t ahead_used;        /* pages read ahead and later used */
  _Atomic uint64_t ahead_wasted;      /* pages read ahead, evicted unused */
  _Atomic uint64_t async_skipped;     /* async parts skipped for congestion */
  _Atomic uint64_t async_skipped_pages;
  _Atomic uint64_t async_delayed;     /* async reads held back for congestion (wait) */
  _Atomic uint64_t async_promoted;    /* queued async reads a client then needed */
  _Atomic uint64_t async_held;        /* async reads the estimate held back */
  _Atomic uint64_t async_covered;     /* async parts dropped: the client's reads cover the BDP */
  _Atomic uint64_t inflight_hwm;      /* most backend reads in flight at once */
  _Atomic uint64_t backend_reads;     /* backend read requests */
  _Atomic uint64_t backend_bytes;     /* bytes read from the backend */
  _Atomic uint64_t backend_errors;    /* backend reads that failed */
  _Atomic uint64_t backend_reads_in_place; /* straight into pages or a client's buffer */
  _Atomic uint64_t direct_reads;      /* reads served around a full cache */
  _Atomic uint64_t evictions;         /* pages evicted to make room */
  _Atomic uint64_t invalidated_pages; /* pages dropped or marked stale by writes */
  _Atomic uint64_t cache_bytes;       /* bytes of page data in the cache now */
  /* Background backend connections (src/prefetch.c). */
  _Atomic uint64_t conn_opens;        /* opened (first time or again) */
  _Atomic uint64_t conn_open_failures;/* opens that failed */
  _Atomic uint64_t conn_lost;         /* open connections that broke */
  _Atomic uint64_t conn_reconnects;   /* opens that replaced a broken one */
  _Atomic uint64_t conn_late;         /* opens that completed too late: closed */
  /* Adaptive mode. */
  _Atomic uint64_t adapt_late;        /* reads that waited for a page read ahead */
  _Atomic uint64_t adapt_early;       /* async triggers taken early after that */
  _Atomic uint64_t adapt_waste;       /* decisions told of pages evicted unused */
  _Atomic uint64_t adapt_cap_pages;   /* the cap of the last decision */
};

#define STAT_ADD(st, field, n) \
  atomic_fetch_add_explicit (&(st)->field, (n), memory_order_relaxed)
#define STAT_SUB(st, field, n) \
  atomic_fetch_sub_explicit (&(st)->field, (n), memory_order_relaxed)
#define STAT_GET(st, field) \
  atomic_load_explicit (&(st)->field, memory_order_relaxed)

static inline void
stat_max (_Atomic uint64_t *field, uint64_t v)
{
  uint64_t cur = atomic_load_explicit (field, memory_order_relaxed);
  while (v > cur &&
         !atomic_compare_exchange_weak_explicit (field, &cur, v,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed))
    ;
}

#endif /* RACACHE_STATS_H */
