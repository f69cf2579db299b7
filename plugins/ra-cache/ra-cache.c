/* nbdkit-ra-cache-filter: thin glue from nbdkit's filter callbacks to the
 * ra-cache core (src/).  The core decides and caches; this file parses
 * parameters, owns the backend contexts and maps nbdkit calls onto
 * rc_read / rc_fill / rc_invalidate.
 *
 * Backend contexts: a client's reads (the sync part of its windows) use
 * the connection's own context; each background worker opens a shared
 * context of its own (nbdkit_next_context_open with the backend saved in
 * .after_fork), so prefetch needs no client connection.
 *
 * Thread models: when the final thread model is parallel every backend
 * call runs in parallel.  With serialize_requests (curl and ssh in nbdkit
 * 1.32) calls on different contexts may run in parallel and calls on one
 * context never overlap: a client's context is used by its requests only
 * and each worker's by that worker only, so no lock either.  With
 * serialize_all_requests or serialize_connections (a sh script by
 * default) nbdkit serializes the clients' calls but knows nothing of our
 * workers, so every call
 * this filter makes into the plugin, from a client or a worker, takes
 * one lock, and so do the plugin's open and the size and can_* queries
 * of a connecting client: prefetch still works, and those calls never
 * overlap.  nbdkit's own finalize and close of a client's plugin context
 * run after this filter's callbacks return and cannot take the lock: a
 * worker's read can overlap them (see LIMITATIONS in the man page).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nbdkit-filter.h>

#include "racache/cache.h"
#include "racache/config.h"
#include "racache/stats-server.h"
#include "racache/util.h"

/* -D ra-cache.verbose=1: log every backend read; -D ra-cache.windows=1:
 * one line per window (src/cache.c, env_decided).  nbdkit looks a flag
 * up as the symbol NAME_debug_FLAG with only dots turned into
 * underscores, so for this filter "ra-cache_debug_verbose", which no C
 * identifier can spell: export each variable under that name too.
 */
NBDKIT_DLL_PUBLIC int ra_cache_debug_verbose = 0;
NBDKIT_DLL_PUBLIC int ra_cache_debug_windows = 0;
/* A top-level asm alias rather than a C declaration with an asm label:
 * with -fsanitize=address GCC would emit an ODR indicator symbol for the
 * declaration, "__odr_asan.ra-cache_debug_verbose", unquoted, which the
 * assembler rejects.
 */
__asm__ (".globl \"ra-cache_debug_verbose\"\n"
         "\t.type \"ra-cache_debug_verbose\", @object\n"
         "\t.size \"ra-cache_debug_verbose\", 4\n"
         "\t.set \"ra-cache_debug_verbose\", ra_cache_debug_verbose\n"
         ".globl \"ra-cache_debug_windows\"\n"
         "\t.type \"ra-cache_debug_windows\", @object\n"
         "\t.size \"ra-cache_debug_windows\", 4\n"
         "\t.set \"ra-cache_debug_windows\", ra_cache_debug_windows\n");

static struct rc_config cfg;
static bool serialize_backend, serialize_requests;
static pthread_mutex_t backend_lock = PTHREAD_MUTEX_INITIALIZER;
static nbdkit_backend *saved_backend;
static struct rc_cache *cache;
static struct rc_stats_server *stats_server;
/* The stats socket and HTTP listener, bound in .get_ready (before nbdkit
 * forks, so that a bad path or port is an error the operator sees) and
 * served from .after_fork, when the stats server takes them over.
 */
static struct rc_stats_listeners stats_listeners = RC_STATS_LISTENERS_NONE;

struct handle {
  struct rc_stream *stream;
  bool bypass;                  /* this connection does not use the cache */
  enum rc_uncached_reason why;  /* ... and why (set before bypass) */
  int multi_conn;               /* the plugin's can_multi_conn */
  bool connected;               /* counted by rc_cache_connect */
  /* A plugin without multi-conn: the requests of this connection on
   * the cached path now (cached_begin), and the switch to bypass at its
   * first write, which waits for them (note_write).
   */
  pthread_mutex_t lock;
  pthread_cond_t idle;
  unsigned cached_ops;
};

/* A connection's bypass flag is read by its requests, which may run in
 * parallel, and set by its first write (see note_write).
 */
static bool
bypassed (struct handle *h)
{
  return __atomic_load_n (&h->bypass, __ATOMIC_ACQUIRE);
}

/* A read or a cache request enters the cached path: false if the
 * connection bypasses the cache.  Pair with cached_end.
 */
static bool
cached_begin (struct handle *h)
{
  bool ok;

  if (h->multi_conn == 1)
    return !bypassed (h);
  ACQUIRE_LOCK (&h->lock);
  ok = !h->bypass;
  if (ok)
    h->cached_ops++;
  RELEASE_LOCK (&h->lock);
  return ok;
}

static void
cached_end (struct handle *h)
{
  if (h->multi_conn == 1)
    return;
  ACQUIRE_LOCK (&h->lock);
  if (--h->cached_ops == 0)
    pthread_cond_broadcast (&h->idle);
  RELEASE_LOCK (&h->lock);
}

/* A write (pwrite, trim, zero) on a cached connection.  A plugin without
 * can_multi_conn may give each connection its own view of the data (a
 * private disk, a copy-on-write overlay): the shared cache and the
 * workers' contexts would then show this connection other data than it
 * wrote, and what the cached path reads through this connection's own
 * context (its sync parts) would put its private data in the shared
 * cache.  So from its first write on, such a connection reads through
 * its own context, uncached; and the write waits until the requests
 * that entered the cached path before it are done, so that none of them
 * reads what it writes (a read of one of its pages whose copy the write
 * made stale would read it again, through this context).
 */
static void
note_write (struct handle *h)
{
  if (h->multi_conn == 1)
    return;
  ACQUIRE_LOCK (&h->lock);
  if (!h->bypass) {
    h->why = RC_UNCACHED_PRIVATE_WRITES;
    __atomic_store_n (&h->bypass, true, __ATOMIC_RELEASE);
    nbdkit_debug ("ra-cache: a write on a connection to a plugin without "
                  "multi-conn consistency: from now on this connection "
                  "reads through its own context, uncached");
  }
  while (h->cached_ops > 0)
    pthread_cond_wait (&h->idle, &h->lock);
  RELEASE_LOCK (&h->lock);
}

/* The cached export: the canonical name of the default export, as the
 * next layer first named it to a connecting client (nbdkit resolves a
 * client's "" to that name before .open, so .open never sees "" from a
 * client).  Set once; NULL until the first client asked for the default
 * export.  The workers' contexts open this name too.
 */
static pthread_mutex_t export_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cached_export;

/* The cached export's name, or NULL if not known yet. */
static const char *
get_cached_export (void)
{
  const char *r;

  ACQUIRE_LOCK (&export_lock);
  r = cached_export;
  RELEASE_LOCK (&export_lock);
  return r;
}

/* Parameters given on the command line, applied after the file. */
static struct rc_given given;

static void
ra_cache_load (void)
{
  rc_config_defaults (&cfg);
}

static void
ra_cache_unload (void)
{
  rc_config_free (&cfg);
  free (cached_export);
  cached_export = NULL;
}

static int
ra_cache_config (nbdkit_next_config *next, nbdkit_backend *nxdata,
                 const char *key, const char *value)
{
  char msg[256];
  int r;

  if (strcmp (key, "ra-cache-config") == 0) {
    given.file = value;
    return 0;
  }
  r = rc_given_add (&given, key, value, msg, sizeof msg);
  if (r == 1)
    return next (nxdata, key, value);
  if (r == -1) {
    nbdkit_error ("%s", msg);
    return -1;
  }
  return 0;
}

/* ra-cache-stats=FILE and ra-cache-learn=FILE (key) are written at
 * exit (and every ra-cache-stats-interval): check now that they can be,
 * so that a typo stops nbdkit at startup rather than losing the
 * counters or what was learned at exit.  The file is created in its
 * directory (a temporary file renamed into place), so the directory
 * must exist and be writable; FILE itself must not be a directory.
 */
static int
check_file_path (const char *key, const char *path)
{
  const char *slash = strrchr (path, '/');
  char *dir;
  struct stat st;
  int r = -1;

  if (slash == path)
    dir = strdup ("/");
  else if (slash)
    dir = strndup (path, slash - path);
  else
    dir = strdup (".");
  if (!dir) {
    nbdkit_error ("%s: %m", key);
    return -1;
  }
  if (stat (dir, &st) == -1)
    nbdkit_error ("%s: %s: cannot use the directory %s: %m",
                  key, path, dir);
  else if (!S_ISDIR (st.st_mode))
    nbdkit_error ("%s: %s: %s is not a directory", key, path, dir);
  else if (access (dir, W_OK | X_OK) == -1)
    nbdkit_error ("%s: %s: the directory %s is not writable: %m",
                  key, path, dir);
  else if (stat (path, &st) == 0 && S_ISDIR (st.st_mode))
    nbdkit_error ("%s: %s is a directory", key, path);
  else
    r = 0;
  free (dir);
  return r;
}

/* Make *path absolute, relative to the directory nbdkit was started in:
 * nbdkit chdirs to / when it forks into the background, after this.
 * Paths set in a configuration file are relative to that directory too
 * (not to the file's): they are resolved here, with the command line's.
 */
static int
make_absolute (char **path)
{
  char *abs;

  if (!*path)
    return 0;
  abs = nbdkit_absolute_path (*path);
  if (!abs)
    return -1;
  free (*path);
  *path = abs;
  return 0;
}

static int
ra_cache_config_complete (nbdkit_next_config_complete *next,
                          nbdkit_backend *nxdata)
{
  char msg[512];
  const char *bad;

  /* Defaults, then the file, then the command line (which overrides the
   * file whatever the order of the parameters).
   */
  rc_config_free (&cfg);
  rc_config_defaults (&cfg);
  if (rc_given_apply (&given, &cfg, msg, sizeof msg) == -1) {
    nbdkit_error ("%s", msg);
    return -1;
  }
  bad = rc_config_check (&cfg, msg, sizeof msg);
  if (bad) {
    if (given.file)
      nbdkit_error ("%s (configuration from %s and the command line)",
                    bad, given.file);
    else
      nbdkit_error ("%s", bad);
    return -1;
  }
  /* ra-cache-size is a limit that page memory grows to, reserved as
   * address space at once: one larger than the machine (or the cgroup)
   * can give is a typo (100T for 100G) and would end in the OOM killer.
   */
  {
    const char *what;
    uint64_t mem = rc_memory_limit (&what);

    uint64_t want;

    if (cfg.cache_size > mem) {
      nbdkit_error ("ra-cache-size: %" PRIu64 " bytes is larger than %s "
                    "(%" PRIu64 " bytes)", cfg.cache_size, what, mem);
      return -1;
    }
    /* What the filter may come to hold, for one connection's reads at
     * once (nbdkit's default 16 threads): above 3/4 of the limit, the
     * plugin, nbdkit and the kernel's own use of the cgroup leave
     * little room.  Said, not refused: the cache fills only as data
     * earns its place.
     */
    want = cfg.cache_size + rc_memory_other_estimate (&cfg, 16);
    if (want > mem / 4 * 3)
      nbdkit_error ("ra-cache: warning: ra-cache-size (%" PRIu64 " bytes) "
                    "and the memory beyond page data (about %" PRIu64
                    " bytes: see MEMORY in nbdkit-ra-cache-filter(1)) are "
                    "more than 3/4 of %s (%" PRIu64 " bytes): lower "
                    "ra-cache-size, or the server may be killed when the "
                    "cache fills", cfg.cache_size, want - cfg.cache_size,
                    what, mem);
  }
  if (make_absolute (&cfg.stats_file) == -1 ||
      make_absolute (&cfg.stats_socket) == -1 ||
      make_absolute (&cfg.learn_file) == -1)
    return -1;
  if (cfg.stats_file &&
      check_file_path ("ra-cache-stats", cfg.stats_file) == -1)
    return -1;
  if (cfg.learn_file &&
      check_file_path ("ra-cache-learn", cfg.learn_file) == -1)
    return -1;
  return next (nxdata);
}

static int
ra_cache_thread_model (void)
{
  return NBDKIT_THREAD_MODEL_PARALLEL;
}

/* serialize_backend: every call into the plugin takes backend_lock.
 * Needed only when the plugin allows one request at a time in the whole
 * server (SERIALIZE_ALL_REQUESTS, SERIALIZE_CONNECTIONS).  With
 * SERIALIZE_REQUESTS (serialize_requests) a plugin allows requests on
 * different contexts in parallel, one at a time per context: a client's
 * context is only used from that client's requests, which nbdkit
 * already serializes, and the core lends a background connection to one
 * worker at a time (struct rc_backend's one_call_per_ctx), so no lock
 * is needed.
 */
static int
ra_cache_get_ready (int thread_model)
{
  serialize_backend = thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_CONNECTIONS
    || thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_ALL_REQUESTS;
  serialize_requests = thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS;
  if (serialize_backend)
    nbdkit_debug ("ra-cache: the plugin serializes all requests: "
                  "backend calls from workers and clients take one lock");
  else if (thread_model == NBDKIT_THREAD_MODEL_SERIALIZE_REQUESTS)
    nbdkit_debug ("ra-cache: the plugin serializes requests per "
                  "connection: a background connection carries one "
                  "worker's read at a time");
  /* nbdkit forks into the background after .get_ready and before
   * .after_fork (server/main.c: start_serving): bind the stats socket
   * and port now, so that a bad path or port fails nbdkit in the
   * foreground with the error on stderr; the loop thread serving them
   * starts in .after_fork (threads do not survive the fork).
   */
  {
    char msg[512];

    if (rc_stats_bind (&stats_listeners, cfg.stats_socket, cfg.stats_listen,
                       msg, sizeof msg) == -1) {
      nbdkit_error ("%s", msg);
      return -1;
    }
  }
  return 0;
}

/* The core's backend interface. */

/* Read [offset, offset + count) through context next, which must lie
 * within next's own export size, in reads that respect next's block
 * size limits: at most maximum bytes each, and when the backend has a
 * minimum, widened to whole blocks (through a bounce buffer) except at
 * the end of the export.
 */
static int
limited_pread (nbdkit_next *next, char *buf, uint32_t count,
               uint64_t offset, uint64_t size, int *err)
{
  uint32_t minimum = 0, preferred = 0, maximum = 0;
  uint64_t end = offset + count, a, e, p;
  char *bounce = NULL;
  int r = 0;

  if (next->block_size (next, &minimum, &preferred, &maximum) == -1) {
    *err = EIO;
    return -1;
  }
  if (minimum == 0)
    minimum = 1;
  if (maximum == 0 || maximum == (uint32_t) -1)
    maximum = 0xffffffff;
  maximum -= maximum % minimum;   /* nbdkit's contract; be safe */
  if (maximum == 0)
    maximum = minimum;

  a = offset - offset % minimum;
  e = end % minimum ? end + (minimum - end % minimum) : end;
  if (e > size)
    e = size;                   /* a partial last block, as a client's */
  if (a == offset && e == end && count <= maximum)
    return next->pread (next, buf, count, offset, 0, err);

  for (p = a; p < e && r == 0; ) {
    uint32_t len = e - p > maximum ? maximum : (uint32_t) (e - p);

    if (p >= offset && p + len <= end)
      r = next->pread (next, buf + (p - offset), len, p, 0, err);
    else {
      uint64_t from = p > offset ? p : offset;
      uint64_t to = p + len < end ? p + len : end;

      if (!bounce && !(bounce = malloc (maximum < e - a ? maximum : e - a))) {
        *err = ENOMEM;
        r = -1;
        break;
      }
      r = next->pread (next, bounce, len, p, 0, err);
      if (r == 0)
        memcpy (buf + (from - offset), bounce + (from - p), to - from);
    }
    p += len;
  }
  free (bounce);
  return r;
}

static int
backend_pread (void *opaque, void *ctx, void *buf, uint32_t count,
               uint64_t offset, int *err)
{
  nbdkit_next *next = ctx;
  int64_t size;
  int r;

  if (ra_cache_debug_verbose)
    nbdkit_debug ("ra-cache: backend read %" PRIu32 " bytes at %" PRIu64
                  "%s", count, offset, ctx ? "" : " (no context)");
  if (serialize_backend)
    ACQUIRE_LOCK (&backend_lock);
  /* nbdkit asserts that a read lies within the context's export size,
   * which it learnt when the context connected (cached: no plugin call).
   * A backend that shrank since the cache took its size, or a context
   * opened after it shrank, must not be asked past its end.
   */
  size = next->get_size (next);
  if (size == -1 || offset > (uint64_t) size || count > size - offset) {
    static bool said;

    if (!__atomic_exchange_n (&said, true, __ATOMIC_RELAXED))
      nbdkit_debug ("ra-cache: a backend read of %" PRIu32 " bytes at %"
                    PRIu64 " is past the end of its context's export "
                    "(%" PRIi64 " bytes): the backend shrank? "
                    "failing such reads with EIO", count, offset, size);
    *err = EIO;
    r = -1;
  }
  else
    r = limited_pread (next, buf, count, offset, size, err);
  if (serialize_backend)
    RELEASE_LOCK (&backend_lock);
  return r;
}

/* The plugin's open runs without backend_lock, also with a plugin that
 * serializes all requests: an open can take seconds (a login over a
 * WAN), and every client call would wait for it.  nbdkit runs a
 * connecting client's open beside other connections' requests with
 * serialize_requests and parallel plugins; with serialize_all_requests
 * this open is the one plugin call of the filter that may overlap
 * another (see LIMITATIONS in the man page).  The short calls after it
 * take the lock.
 */
static void *
backend_worker_open (void *opaque)
{
  nbdkit_next *next;
  static bool said;

  /* Contexts without a connection make nbdkit_export_name() fail, and
   * the nbd plugin (1.32) calls it in its open whatever its parameters:
   * nothing the filter can open avoids it.
   */
  if (!__atomic_exchange_n (&said, true, __ATOMIC_RELAXED))
    nbdkit_debug ("ra-cache: opening the background workers' contexts, "
                  "which have no client connection: a plugin that asks "
                  "for the export name in its open (the nbd plugin) logs "
                  "\"no connection in this thread\" once per worker; "
                  "this is harmless");
  /* The export the cached connections read (see ra_cache_open): a
   * worker runs its first job after such a connection opened.
   */
  next = nbdkit_next_context_open (saved_backend, 1,
                                   get_cached_export () ?: "", 1);
  /* nbdkit checks every request against the context's export size,
   * which it learns from get_size: ask once, as a connection would.
   */
  if (next) {
    if (serialize_backend)
      ACQUIRE_LOCK (&backend_lock);
    if (next->prepare (next) == -1 || next->get_size (next) == -1) {
      nbdkit_next_context_close (next);
      next = NULL;
    }
    if (serialize_backend)
      RELEASE_LOCK (&backend_lock);
  }
  /* The core retries with backoff and logs once (backend_log). */
  if (!next)
    nbdkit_debug ("ra-cache: a background backend connection could not "
                  "be opened");
  return next;
}

static void
backend_worker_close (void *opaque, void *ctx)
{
  nbdkit_next *next = ctx;

  if (serialize_backend)
    ACQUIRE_LOCK (&backend_lock);
  next->finalize (next);
  nbdkit_next_context_close (next);
  if (serialize_backend)
    RELEASE_LOCK (&backend_lock);
}

static void
backend_log (void *opaque, bool error, const char *msg)
{
  if (error)
    nbdkit_error ("%s", msg);
  else
    nbdkit_debug ("%s", msg);
}

static struct rc_backend backend_ops = {
  .pread = backend_pread,
  .worker_open = backend_worker_open,
  .worker_close = backend_worker_close,
  .log = backend_log,
};

static void
log_line (const char *line)
{
  nbdkit_debug ("%s", line);
}

static int
ra_cache_after_fork (nbdkit_backend *backend)
{
  unsigned nworkers = cfg.max_background;

  saved_backend = backend;
  nbdkit_debug ("ra-cache: version %s", PACKAGE_VERSION);
  {
    char line[1024];

    rc_config_describe (&cfg, serialize_requests, line, sizeof line);
    nbdkit_debug ("ra-cache: config: %s", line);
  }
  /* Workers beyond one would only queue on the lock. */
  if (serialize_backend)
    nworkers = 1;
  backend_ops.one_call_per_ctx = serialize_requests;
  backend_ops.log_windows = ra_cache_debug_windows != 0;
  cache = rc_cache_new (&cfg, &backend_ops, nworkers);
  if (!cache) {
    nbdkit_error ("ra-cache: cannot create the cache: %m");
    return -1;
  }
  rc_stats_mark_start ();
  if (cfg.stats_socket || cfg.stats_listen || cfg.stats_interval > 0) {
    char msg[256];

    stats_server = rc_stats_server_start (cache, &stats_listeners,
                                          cfg.stats_interval, cfg.stats_file,
                                          log_line,
                                          msg, sizeof msg);
    if (!stats_server) {
      nbdkit_error ("%s", msg);
      return -1;
    }
  }
  return 0;
}

/* At exit, with nbdkit -v: every counter, under the JSON keys. */
static void
log_stats (void)
{
  char *line = rc_stats_line (cache, 0, "ra-cache stats: ");

  if (line)
    nbdkit_debug ("%s", line);
  free (line);
}

static void
ra_cache_cleanup (nbdkit_backend *backend)
{
  rc_stats_server_stop (stats_server);
  stats_server = NULL;
  rc_stats_unbind (&stats_listeners); /* bound, never served */
  if (cache) {
    log_stats ();
    /* Stop the workers first, so the file has the final counters. */
    rc_cache_stop (cache);
    if (cfg.stats_file && rc_stats_write_file (cache, cfg.stats_file) == -1)
      nbdkit_error ("ra-cache-stats: %s: %m", cfg.stats_file);
    if (rc_cache_learn_save (cache) == -1)
      nbdkit_error ("ra-cache-learn: %s: %m", cfg.learn_file);
    rc_cache_free (cache);
    cache = NULL;
  }
}

/* Serialize a plugin call when the plugin needs it. */
#define BACKEND_CALL(expr)                              \
  ({                                                    \
    int r_;                                             \
    if (serialize_backend)                              \
      ACQUIRE_LOCK (&backend_lock);                     \
    r_ = (expr);                                        \
    if (serialize_backend)                              \
      RELEASE_LOCK (&backend_lock);                     \
    r_;                                                 \
  })

/* nbdkit asks this when a client names "" (and before .open), per
 * connection: pass the next layer's answer on, and remember the first
 * answer as the cached export.
 */
static const char *
ra_cache_default_export (nbdkit_next_default_export *next,
                         nbdkit_backend *nxdata, int readonly, int is_tls)
{
  const char *name = next (nxdata, readonly);

  if (name) {
    ACQUIRE_LOCK (&export_lock);
    if (!cached_export) {
      cached_export = strdup (name);
      if (cached_export)
        nbdkit_debug ("ra-cache: the cached export is the default "
                      "export, \"%s\"", name);
    }
    RELEASE_LOCK (&export_lock);
  }
  return name;
}

static void *
ra_cache_open (nbdkit_next_open *next, nbdkit_context *nxdata,
               int readonly, const char *exportname, int is_tls)
{
  struct handle *h;

  struct rc_client_open o;
  int r;

  /* With a plugin that serializes requests, its open must not overlap
   * a background worker's read either.  The core times it: how long an
   * open takes, and whether one waits for a slot that the background
   * connections hold (src/connpool.c).
   */
  rc_cache_open_begin (cache, &o);
  r = BACKEND_CALL (next (nxdata, readonly, exportname));
  rc_cache_open_end (cache, &o, r == 0);
  if (r == -1)
    return NULL;
  h = calloc (1, sizeof *h);
  if (!h) {
    nbdkit_error ("calloc: %m");
    return NULL;
  }
  pthread_mutex_init (&h->lock, NULL);
  pthread_cond_init (&h->idle, NULL);
  h->stream = rc_stream_new ();
  if (!h->stream) {
    nbdkit_error ("malloc: %m");
    pthread_mutex_destroy (&h->lock);
    pthread_cond_destroy (&h->idle);
    free (h);
    return NULL;
  }
  /* Only the default export is cached (the workers' contexts read it):
   * a connection to another export name passes through uncached.  A
   * client's "" arrives here as the default export's canonical name; ""
   * itself only from a context without a connection.
   */
  if (exportname && *exportname) {
    const char *def = get_cached_export ();

    h->why = RC_UNCACHED_OTHER_EXPORT;
    h->bypass = !def || strcmp (exportname, def) != 0;
  }
  return h;
}

static void
ra_cache_close (void *handle)
{
  struct handle *h = handle;

  if (h->connected)
    rc_cache_disconnect (cache);
  rc_stream_closed (cache, h->stream);
  rc_stream_free (h->stream);
  pthread_mutex_destroy (&h->lock);
  pthread_cond_destroy (&h->idle);
  free (h);
}

static int
ra_cache_prepare (nbdkit_next *next, void *handle, int readonly)
{
  struct handle *h = handle;
  int64_t size;
  uint32_t minimum = 0, preferred = 0, maximum = 0;
  int r;

  if (h->bypass) {
    const char *def = get_cached_export ();

    nbdkit_debug ("ra-cache: this connection asked for another export "
                  "than the default (\"%s\"): it is not cached",
                  def ? def : "not known yet");
    return 0;
  }
  if (serialize_backend)
    ACQUIRE_LOCK (&backend_lock);
  size = next->get_size (next);
  if (serialize_backend)
    RELEASE_LOCK (&backend_lock);
  if (size == -1)
    return -1;
  if (serialize_backend)
    ACQUIRE_LOCK (&backend_lock);
  r = next->block_size (next, &minimum, &preferred, &maximum);
  if (serialize_backend)
    RELEASE_LOCK (&backend_lock);
  if (r == -1)
    return -1;
  rc_cache_set_backend_limits (cache, minimum, preferred, maximum);
  h->multi_conn = BACKEND_CALL (next->can_multi_conn (next));
  if (h->multi_conn == -1)
    return -1;
  if (rc_cache_set_export_size (cache, size) == -1) {
    nbdkit_debug ("ra-cache: export size %" PRIi64 " differs from the "
                  "cached export's: this connection is not cached", size);
    h->why = RC_UNCACHED_SIZE_MISMATCH;
    h->bypass = true;
  }
  /* This client has its backend connection: the workers may open
   * theirs now (not before: a server that allows one connection must
   * give it to the first client).
   */
  if (!h->bypass && rc_cache_learn_start (cache, get_cached_export () ?: "")
      == -1) {
    nbdkit_error ("ra-cache-learn: %m");
    return -1;
  }
  if (!h->bypass && !h->connected) {
    rc_cache_connect (cache);
    h->connected = true;
  }
  return 0;
}


/* The calls nbdkit makes into the plugin while a client connects: with a
 * serializing plugin they too must not overlap a worker's read.
 */
#define PASS_THROUGH(name)                                      \
  static int                                                    \
  ra_cache_##name (nbdkit_next *next, void *handle)             \
  {                                                             \
    return BACKEND_CALL (next->name (next));                    \
  }
PASS_THROUGH (can_write)
PASS_THROUGH (can_flush)
PASS_THROUGH (is_rotational)
PASS_THROUGH (can_trim)
PASS_THROUGH (can_zero)
PASS_THROUGH (can_fast_zero)
PASS_THROUGH (can_extents)
PASS_THROUGH (can_fua)
PASS_THROUGH (can_multi_conn)

static int64_t
ra_cache_get_size (nbdkit_next *next, void *handle)
{
  int64_t r;

  if (serialize_backend)
    ACQUIRE_LOCK (&backend_lock);
  r = next->get_size (next);
  if (serialize_backend)
    RELEASE_LOCK (&backend_lock);
  return r;
}

static int
ra_cache_block_size (nbdkit_next *next, void *handle,
                     uint32_t *minimum, uint32_t *preferred, uint32_t *maximum)
{
  return BACKEND_CALL (next->block_size (next, minimum, preferred, maximum));
}

static int
ra_cache_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count,
                uint64_t offset, uint32_t flags, int *err)
{
  struct handle *h = handle;
  int r;

  if (!cached_begin (h)) {
    /* why was set before bypass, which cached_begin read with an
     * acquiring load or under h->lock: why is visible here.
     */
    rc_note_uncached (cache, h->why, count);
    return BACKEND_CALL (next->pread (next, buf, count, offset, flags, err));
  }
  r = rc_read (cache, h->stream, next, buf, count, offset, err);
  cached_end (h);
  return r;
}

static int
ra_cache_pwrite (nbdkit_next *next, void *handle, const void *buf,
                 uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  int r;

  note_write (handle);
  r = BACKEND_CALL (next->pwrite (next, buf, count, offset, flags, err));

  /* Success or failure, the cached copy may now be wrong (a connection
   * that bypasses the cache may still write the cached export).
   */
  rc_invalidate (cache, offset, count);
  return r;
}

static int
ra_cache_trim (nbdkit_next *next, void *handle, uint32_t count,
               uint64_t offset, uint32_t flags, int *err)
{
  int r;

  note_write (handle);
  r = BACKEND_CALL (next->trim (next, count, offset, flags, err));

  rc_invalidate (cache, offset, count);
  return r;
}

static int
ra_cache_zero (nbdkit_next *next, void *handle, uint32_t count,
               uint64_t offset, uint32_t flags, int *err)
{
  int r;

  note_write (handle);
  r = BACKEND_CALL (next->zero (next, count, offset, flags, err));

  rc_invalidate (cache, offset, count);
  return r;
}

static int
ra_cache_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
  return BACKEND_CALL (next->flush (next, flags, err));
}

static int
ra_cache_extents (nbdkit_next *next, void *handle, uint32_t count,
                  uint64_t offset, uint32_t flags,
                  struct nbdkit_extents *extents, int *err)
{
  return BACKEND_CALL (next->extents (next, count, offset, flags, extents,
                                      err));
}

static int
ra_cache_can_cache (nbdkit_next *next, void *handle)
{
  return NBDKIT_CACHE_NATIVE;
}

static int
ra_cache_cache (nbdkit_next *next, void *handle, uint32_t count,
                uint64_t offset, uint32_t flags, int *err)
{
  struct handle *h = handle;
  int r;

  if (!cached_begin (h))
    return 0;                   /* advisory: nothing to keep it in */
  r = rc_fill (cache, next, count, offset, err);
  cached_end (h);
  return r;
}

static struct nbdkit_filter filter = {
  .name              = "ra-cache",
  /* nbdkit 1.32's struct nbdkit_filter has no version of its own:
   * _version must be nbdkit's (NBDKIT_REGISTER_FILTER sets it and
   * nbdkit refuses a filter whose _version differs), and --version
   * prints that.  So the filter's version goes in the long name, which
   * --help shows.
   */
  .longname          = "nbdkit readahead cache filter, ra-cache "
                       PACKAGE_VERSION,
  .load              = ra_cache_load,
  .unload            = ra_cache_unload,
  .config            = ra_cache_config,
  .config_complete   = ra_cache_config_complete,
  .thread_model      = ra_cache_thread_model,
  .get_ready         = ra_cache_get_ready,
  .after_fork        = ra_cache_after_fork,
  .cleanup           = ra_cache_cleanup,
  .default_export    = ra_cache_default_export,
  .open              = ra_cache_open,
  .close             = ra_cache_close,
  .prepare           = ra_cache_prepare,
  .get_size          = ra_cache_get_size,
  .block_size        = ra_cache_block_size,
  .can_write         = ra_cache_can_write,
  .can_flush         = ra_cache_can_flush,
  .is_rotational     = ra_cache_is_rotational,
  .can_trim          = ra_cache_can_trim,
  .can_zero          = ra_cache_can_zero,
  .can_fast_zero     = ra_cache_can_fast_zero,
  .can_extents       = ra_cache_can_extents,
  .can_fua           = ra_cache_can_fua,
  .can_multi_conn    = ra_cache_can_multi_conn,
  .pread             = ra_cache_pread,
  .pwrite            = ra_cache_pwrite,
  .trim              = ra_cache_trim,
  .zero              = ra_cache_zero,
  .flush             = ra_cache_flush,
  .extents           = ra_cache_extents,
  .can_cache         = ra_cache_can_cache,
  .cache             = ra_cache_cache,
};

/* --help: every key of the one table (src/config.c, rc_keys), with its
 * default and range.  nbdkit copies this struct when it registers the
 * filter, after the library's constructors have run.
 */
static void __attribute__ ((constructor))
ra_cache_set_help (void)
{
  filter.config_help = rc_config_help ();
}

NBDKIT_REGISTER_FILTER (filter)
