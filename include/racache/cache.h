/* ra-cache: the cache as the filter uses it: a page cache shared by all
 * connections, one stream state per connection, the readahead engine
 * deciding windows, and background workers reading their async parts.
 *
 * The filter hands the core a small backend interface (struct rc_backend)
 * so that the core does not depend on nbdkit and the unit tests can hand
 * it a fake backend.
 */
#ifndef RACACHE_CACHE_H
#define RACACHE_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "racache/config.h"
#include "racache/pagecache.h"
#include "racache/stats.h"

struct rc_backend {
  void *opaque;
  /* Read count bytes at offset.  ctx is the caller's backend context:
   * a connection's (for reads done on behalf of a waiting client) or a
   * worker's.  Returns 0, or -1 with *err set to an errno value.
   */
  int (*pread) (void *opaque, void *ctx, void *buf, uint32_t count,
                uint64_t offset, int *err);
  /* Open and close a worker's own backend context, in the worker's
   * thread.  worker_open returns NULL on failure (the worker's reads
   * then fail with EIO).  Both may be NULL: ctx is then NULL.
   */
  void *(*worker_open) (void *opaque);
  void (*worker_close) (void *opaque, void *ctx);
  /* Optional: log one line (error = true: always shown). */
  void (*log) (void *opaque, bool error, const char *msg);
  /* Log one line per window decided through log (-D ra-cache.windows=1):
   * stream, trigger, branch, start, size, async part, what became of it.
   */
  bool log_windows;
  /* A context carries one call at a time (a plugin that serializes
   * requests per connection, such as curl): a background connection is
   * then used by one worker at a time.
   */
  bool one_call_per_ctx;
  /* After the server was seen to limit connections, how long until one
   * more background connection is tried (doubling after each new sign
   * of the limit, up to 30 min); 0: 30 s.
   */
  uint64_t limit_retry_ns;
};

struct rc_cache;
struct rc_stream;

/* Create a cache and start nworkers background workers (at least 1;
 * normally cfg->max_background).  Returns NULL with errno set on error.
 */
struct rc_cache *rc_cache_new (const struct rc_config *cfg,
                               const struct rc_backend *be,
                               unsigned nworkers);
/* Stop the workers: queued reads are abandoned, reads in flight finish.
 * Afterwards the cache serves nothing new; call only when no client
 * reads are running.
 */
void rc_cache_stop (struct rc_cache *c);
/* Stop the workers if still running, and free everything. */
void rc_cache_free (struct rc_cache *c);

/* Background backend connections (src/connpool.c): the workers open
 * min (ra-backend-connections, workers) connections with worker_open,
 * one at a time, while at least one client is connected: the filter
 * calls rc_cache_connect once a client has its own backend context (so
 * a server that allows one connection serves that client first) and
 * rc_cache_disconnect when it goes.  The connections stay open while no
 * client is connected.  A worker takes a job only while a connection is
 * open.
 */
void rc_cache_connect (struct rc_cache *c);
void rc_cache_disconnect (struct rc_cache *c);
/* A client's own backend open under way (the filter's .open), from
 * rc_cache_open_begin to rc_cache_open_end (ok: it succeeded), o alive
 * meanwhile: its duration tells how long an open takes, and one that is
 * not answered while background connections are open makes the pool
 * close one (a server that limits connections may wait for its slot).
 */
struct rc_client_open {
  uint64_t t0;
  struct rc_client_open *next;
};
void rc_cache_open_begin (struct rc_cache *c, struct rc_client_open *o);
void rc_cache_open_end (struct rc_cache *c, struct rc_client_open *o,
                        bool ok);
/* Background connections open now, and the most the pool keeps now
 * (lowered while the server is seen to limit connections).
 */
unsigned rc_cache_connections (struct rc_cache *c);
unsigned rc_cache_connection_limit (struct rc_cache *c);
/* Bytes of the bounce buffers allocated (kept for reuse: as many as
 * backend reads ever needed one at once, ra-io-max each).
 */
uint64_t rc_cache_bounce_bytes (struct rc_cache *c);

/* Set the export size on first use; later calls return -1 if the size
 * differs (the connection must then not use the cache).
 */
int rc_cache_set_export_size (struct rc_cache *c, uint64_t size);

/* The backend's block size limits (bytes; 0 = none), on first use like
 * the export size, before the first read: backend reads are then at
 * most max(maximum rounded down to a page, one page) long, whole
 * multiples of the preferred and minimum sizes where those exceed a
 * page and fit.  The core does not align reads to a minimum larger than
 * a page: the backend's pread must widen them (the filter does).
 */
void rc_cache_set_backend_limits (struct rc_cache *c, uint32_t minimum,
                                  uint32_t preferred, uint32_t maximum);

struct rc_stream *rc_stream_new (void);
/* The stream's connection closed: the async reads of its windows that
 * are still queued (held back by the congestion rule) are dropped, as no
 * client asked for them and the backend's time is better spent on the
 * clients that remain (async_cancelled_pages).  Reads already running
 * finish and stay cached for the other streams.
 */
void rc_stream_closed (struct rc_cache *c, struct rc_stream *s);
void rc_stream_free (struct rc_stream *s);

/* A client read through the cache (doc/readahead-rules.md, "The read
 * path").  Returns 0, or -1 with *err set: the error of a backend read
 * that this client waited for (sync part); errors of async reads never
 * reach a client.
 */
int rc_read (struct rc_cache *c, struct rc_stream *s, void *ctx,
             void *buf, uint32_t count, uint64_t offset, int *err);

/* NBD_CMD_CACHE: forced readahead of [offset, offset + count) in chunks
 * of at most 2 MiB, no marker, stream state untouched.  Waits for the
 * reads; returns -1 with *err on a backend error.
 */
int rc_fill (struct rc_cache *c, void *ctx, uint32_t count, uint64_t offset,
             int *err);

/* A write, trim or zero of [offset, offset + count) finished at the
 * backend (successfully or not): drop what the cache holds of it.
 */
void rc_invalidate (struct rc_cache *c, uint64_t offset, uint64_t count);

/* Why a connection's reads pass the cache by (the filter decides). */
enum rc_uncached_reason {
  RC_UNCACHED_OTHER_EXPORT,     /* it named another export */
  RC_UNCACHED_SIZE_MISMATCH,    /* it saw another size than the cache's */
  RC_UNCACHED_PRIVATE_WRITES,   /* it wrote to a plugin without
                                   multi-conn consistency */
};
/* Count a client read of count bytes that passed the cache by for
 * reason (the uncached_reads_* and uncached_bytes_* counters).
 */
void rc_note_uncached (struct rc_cache *c, enum rc_uncached_reason reason,
                       uint64_t count);

/* ra-cache-learn=FILE (include/racache/learn.h, src/replay.c): once
 * the export size is set, start learning on the export named
 * export_name: the file is read, and replayed from the first client
 * read on; a file that is no good for this export is logged (through
 * the backend's log) and ignored.  Later calls do nothing; so does a
 * cache without ra-cache-learn.  Returns 0, or -1 with errno set.
 */
int rc_cache_learn_start (struct rc_cache *c, const char *export_name);
/* Write the learned file (atomically; also at intervals).  Returns 0
 * (also when there is nothing to write), or -1 with errno set.
 */
int rc_cache_learn_save (struct rc_cache *c);
/* Pages in the learned sequence loaded at start; recorded in this run;
 * how far in the sequence clients have read what the replay read.
 */
uint64_t rc_cache_learn_sequence_pages (struct rc_cache *c);
uint64_t rc_cache_learn_recorded_pages (struct rc_cache *c);
uint64_t rc_cache_replay_reached_pages (struct rc_cache *c);

struct rc_stats *rc_cache_stats (struct rc_cache *c);
struct rc_pagecache *rc_cache_pagecache (struct rc_cache *c);
/* Backend reads in flight or queued, now. */
unsigned rc_cache_inflight (struct rc_cache *c);
/* The backend model's latency and cost per page (ns); false if no read
 * was measured (kernel mode measures none).
 */
bool rc_cache_model (struct rc_cache *c, double *lat_ns, double *page_ns);
/* The congestion estimate (include/racache/congestion.h). */
struct rc_cong_estimate;
void rc_cache_congestion (struct rc_cache *c, struct rc_cong_estimate *out);
/* The configuration in use (ra-mode and the rest). */
const struct rc_config *rc_cache_config (struct rc_cache *c);

#endif /* RACACHE_CACHE_H */
