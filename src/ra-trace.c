/* ra-trace: replay an access trace through the readahead engine.
 *
 * A tuning tool.  It reads a trace of client reads (a plain list of
 * "OFFSET LENGTH [STREAM]" lines, or the log written by nbdkit's log
 * filter), replays it through the engine of src/readahead.c over a
 * simulated page cache, and prints every window the engine decides and a
 * summary, so that ra-max, ra-io-max, the cache size and the page size
 * can be tried offline on real traffic.
 *
 * The simulation follows the read path of readahead-spec.md: for each
 * page of a read, from its first: a page that is not cached is a sync
 * trigger (ondemand (i, false, last - i)); a page that carries the
 * marker has it cleared and is an async trigger (ondemand (i, true,
 * last - i)); each window is submitted with ra_submit; prev_pos is set
 * with ra_update_prev_pos when the read is done.  Pages are up to date as
 * soon as they are inserted (there is no backend latency, and so no
 * congestion).  Each stream has its own stream state; the cache (and so
 * the markers) is shared by all of them, as in the filter, where the
 * state is per NBD connection.
 *
 * The cache holds at most --cache-size bytes of pages.  Eviction is the
 * filter's rule (src/pagecache.c, evict_one): least recently used first,
 * with pages nobody has read yet ("unused": read ahead, not yet used by
 * a client) going before pages a client used by ageing twice as fast.  A
 * plain "unused first at any age" rule would evict the window a
 * streaming reader is about to consume as soon as the cache is full.
 * The pages of the read in progress are never evicted (in the filter
 * they are in flight or being copied): a read larger than the cache
 * overfills it until the read is done.
 *
 * Timing (--latency, --bandwidth, --parallel, --client-gap) and adaptive
 * mode (--mode adaptive): a discrete-event simulation over a virtual
 * clock (ns).  There is one client timeline: the reads are replayed one
 * after another in trace order, whatever their stream, --client-gap
 * apart.  Each backend read (a batch of ra_submit) is issued at the
 * clock of its trigger and computed at once, first come first served:
 * it starts when one of --parallel slots is free (at or after its issue),
 * its transfer starts after the latency and once the link is free (one
 * link, transfers serialized on it), and it completes after its bytes /
 * bandwidth; its pages are ready then.  A client that needs a page not
 * ready yet waits: the clock moves to its completion.  Reads complete in
 * order of their completion time as the clock passes them: the backend
 * model (ra_model_sample, start to completion) learns from them and
 * their pages join the LRU lists (pages in flight cannot be evicted, as
 * in the filter).  The congestion rule of the filter (ra-congestion=skip)
 * applies: a window submitted while threshold reads are in flight (issued,
 * not complete) reads only its sync part.  In adaptive mode each trigger
 * gets struct ra_inputs as src/cache.c gives them (clock, model estimate,
 * share of the cache over its markers, the stream's read-ahead pages
 * evicted unused), and a wait for a page an async part had in flight is
 * late feedback: ra_late, and an early async trigger at the marker it
 * names, as src/cache.c late() does (with its congestion condition).
 * With no latency and no bandwidth limit every read completes at its
 * issue: the replay is exactly the instant one above.
 */

#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "racache/config.h"
#include "racache/readahead.h"

#define PROG "ra-trace"

/* Defaults of the tool (the filter's ra-cache-size and ra-io-max
 * defaults are larger; a trace is usually replayed with the values one
 * means to try).
 */
#define DEFAULT_PAGE_SIZE  4096u
#define DEFAULT_RA_MAX     (UINT64_C(4) << 20)
#define DEFAULT_IO_MAX     (UINT64_C(256) << 10)
#define DEFAULT_CACHE_SIZE (UINT64_C(64) << 20)
/* Backend reads at once: the filter's default ra-max-background, which
 * is also its number of workers.
 */
#define DEFAULT_PARALLEL   12u
/* --latency and --client-gap: at most an hour. */
#define MAX_TIME_NS        (UINT64_C(3600) * 1000000000)

/* Reads end at most here (NBD offsets are signed 64 bit in nbdkit). */
#define MAX_END ((uint64_t) INT64_MAX)

#ifdef RA_TRACE_FUZZ
/* fuzz/fuzz-trace.c includes this file without main: an error goes back
 * to the fuzz target (which frees what the trace holds) instead of
 * exiting, and its message goes to the stream the target chooses.
 */
static FILE *fuzz_err_stream (void);
static void fuzz_error_exit (void) __attribute__ ((noreturn));
#define ERR_STREAM (fuzz_err_stream ())
#define ERROR_EXIT() fuzz_error_exit ()
#else
#define ERR_STREAM stderr
#define ERROR_EXIT() exit (EXIT_FAILURE)
#endif

static void __attribute__ ((noreturn, format (printf, 1, 2)))
die (const char *fmt, ...)
{
  va_list ap;

  fflush (stdout);
  fputs (PROG ": ", ERR_STREAM);
  va_start (ap, fmt);
  vfprintf (ERR_STREAM, fmt, ap);
  va_end (ap);
  fputc ('\n', ERR_STREAM);
  ERROR_EXIT ();
}

static void *
xrealloc (void *p, size_t n)
{
  p = realloc (p, n);
  if (!p)
    die ("out of memory");
  return p;
}

/* ---- the trace ---------------------------------------------------------- */

struct trace_read {
  uint64_t offset, length;
  uint64_t stream_id;          /* as written in the trace */
  size_t stream;               /* dense index into the stream states */
  unsigned long line;
};

struct trace {
  const char *name;            /* file name for messages */
  struct trace_read *reads;
  size_t nr, alloc;
  uint64_t max_end;            /* largest offset + length */
  uint64_t log_export_size;    /* largest size= of a log Connect line */
  char *linebuf;               /* read_trace's getline buffer */
  size_t linecap;
};

static void __attribute__ ((noreturn, format (printf, 3, 4)))
line_error (const struct trace *t, unsigned long line, const char *fmt, ...)
{
  va_list ap;

  fflush (stdout);
  fprintf (ERR_STREAM, PROG ": %s:%lu: ", t->name, line);
  va_start (ap, fmt);
  vfprintf (ERR_STREAM, fmt, ap);
  va_end (ap);
  fputc ('\n', ERR_STREAM);
  ERROR_EXIT ();
}

static bool
is_space (char c)
{
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
    c == '\f';
}

static bool
is_digit (char c)
{
  return c >= '0' && c <= '9';
}

static int
hex_value (char c)
{
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Parse the whole of [s, s + len) as a decimal or 0x hex number.
 * Returns false if it is not one or does not fit in 64 bits.
 */
static bool
parse_number (const char *s, size_t len, uint64_t *out)
{
  uint64_t v = 0;
  size_t i = 0;

  if (len == 0)
    return false;
  if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    for (i = 2; i < len; i++) {
      int d = hex_value (s[i]);
      if (d < 0 || v > (UINT64_MAX >> 4))
        return false;
      v = (v << 4) | (unsigned) d;
    }
  }
  else {
    for (i = 0; i < len; i++) {
      if (!is_digit (s[i]) || v > (UINT64_MAX - (unsigned) (s[i] - '0')) / 10)
        return false;
      v = v * 10 + (unsigned) (s[i] - '0');
    }
  }
  *out = v;
  return true;
}

/* The next whitespace-separated token from *p (NUL-terminated string);
 * a double-quoted part (as in export="a b") belongs to the token, with
 * backslash escapes.  Returns false at the end of the string.
 */
static bool
next_token (const char **p, const char **tok, size_t *len)
{
  const char *s = *p;
  bool quoted = false;

  while (is_space (*s))
    s++;
  if (*s == '\0') {
    *p = s;
    return false;
  }
  *tok = s;
  for (; *s && (quoted || !is_space (*s)); s++) {
    if (quoted && *s == '\\' && s[1])
      s++;
    else if (*s == '"')
      quoted = !quoted;
  }
  *len = (size_t) (s - *tok);
  *p = s;
  return true;
}

/* Does the token start with key= ?  Then *val is the value. */
static bool
token_key (const char *tok, size_t len, const char *key,
           const char **val, size_t *vlen)
{
  size_t k = strlen (key);

  if (len <= k || memcmp (tok, key, k) != 0 || tok[k] != '=')
    return false;
  *val = tok + k + 1;
  *vlen = len - k - 1;
  return true;
}

static bool
token_is (const char *tok, size_t len, const char *word)
{
  return len == strlen (word) && memcmp (tok, word, len) == 0;
}

/* Does s start with the log filter's time stamp,
 * "YYYY-MM-DD HH:MM:SS[.frac] " ?  Returns the text after it, or NULL.
 */
static const char *
skip_log_timestamp (const char *s)
{
  static const char pattern[] = "dddd-dd-dd dd:dd:dd";
  size_t i;

  for (i = 0; pattern[i]; i++) {
    if (pattern[i] == 'd' ? !is_digit (s[i]) : s[i] != pattern[i])
      return NULL;
  }
  s += i;
  if (*s == '.') {
    s++;
    if (!is_digit (*s))
      return NULL;
    while (is_digit (*s))
      s++;
  }
  if (!is_space (*s))
    return NULL;
  return s;
}

static void
add_read (struct trace *t, unsigned long line, uint64_t offset,
          uint64_t length, uint64_t stream_id)
{
  struct trace_read *r;

  if (length == 0)
    line_error (t, line, "the length of a read must not be 0");
  if (offset > MAX_END || length > MAX_END - offset)
    line_error (t, line, "read at offset %" PRIu64 " of %" PRIu64
                " bytes ends past 2^63-1", offset, length);
  if (t->nr == t->alloc) {
    t->alloc = t->alloc ? 2 * t->alloc : 1024;
    t->reads = xrealloc (t->reads, t->alloc * sizeof *t->reads);
  }
  r = &t->reads[t->nr++];
  r->offset = offset;
  r->length = length;
  r->stream_id = stream_id;
  r->stream = 0;
  r->line = line;
  if (offset + length > t->max_end)
    t->max_end = offset + length;
}

/* A line written by nbdkit's log filter, after its time stamp (or a
 * line starting with "connection=").  Read lines are reads, with their
 * connection number as the stream; Connect lines give the export size;
 * every other line (the ...Read completions, writes, flushes, Ready,
 * Preconnect, Disconnect, ...) is ignored.
 */
static void
parse_log_line (struct trace *t, unsigned long line, const char *s)
{
  const char *tok, *val;
  size_t len, vlen;
  uint64_t stream = 0, offset = 0, count = 0, size;
  bool have_offset = false, have_count = false;

  if (!next_token (&s, &tok, &len))
    return;
  if (token_key (tok, len, "connection", &val, &vlen)) {
    if (!parse_number (val, vlen, &stream))
      line_error (t, line, "log line: bad connection number '%.*s'",
                  (int) vlen, val);
    if (!next_token (&s, &tok, &len))
      return;
  }
  if (token_is (tok, len, "Connect")) {
    while (next_token (&s, &tok, &len)) {
      if (token_key (tok, len, "size", &val, &vlen)) {
        if (!parse_number (val, vlen, &size))
          line_error (t, line, "log Connect line: bad size '%.*s'",
                      (int) vlen, val);
        if (size > MAX_END)     /* nbdkit's sizes are int64_t */
          line_error (t, line, "log Connect line: size %" PRIu64
                      " is larger than 2^63-1", size);
        if (size > t->log_export_size)
          t->log_export_size = size;
      }
    }
    return;
  }
  if (!token_is (tok, len, "Read"))
    return;
  while (next_token (&s, &tok, &len)) {
    if (token_key (tok, len, "offset", &val, &vlen)) {
      if (!parse_number (val, vlen, &offset))
        line_error (t, line, "log Read line: bad offset '%.*s'",
                    (int) vlen, val);
      have_offset = true;
    }
    else if (token_key (tok, len, "count", &val, &vlen)) {
      if (!parse_number (val, vlen, &count))
        line_error (t, line, "log Read line: bad count '%.*s'",
                    (int) vlen, val);
      have_count = true;
    }
  }
  if (!have_offset || !have_count)
    line_error (t, line, "log Read line without offset= and count=");
  add_read (t, line, offset, count, stream);
}

/* A plain line: OFFSET LENGTH [STREAM] [# comment]. */
static void
parse_plain_line (struct trace *t, unsigned long line, char *s)
{
  static const char *const what[3] = { "OFFSET", "LENGTH", "STREAM" };
  uint64_t v[3] = { 0, 0, 0 };
  const char *p = s, *tok;
  size_t len;
  char *hash = strchr (s, '#');
  int n = 0;

  if (hash)
    *hash = '\0';
  while (next_token (&p, &tok, &len)) {
    if (n == 3)
      line_error (t, line, "expected OFFSET LENGTH [STREAM], found more "
                  "(at '%.*s')", (int) len, tok);
    if (!parse_number (tok, len, &v[n]))
      line_error (t, line, "%s: '%.*s' is not a number (decimal or 0x hex)",
                  what[n], (int) len, tok);
    n++;
  }
  if (n == 0)
    return;                     /* only a comment */
  if (n == 1)
    line_error (t, line, "expected OFFSET LENGTH [STREAM], found only one "
                "number");
  add_read (t, line, v[0], v[1], v[2]);
}

static void
parse_line (struct trace *t, unsigned long line, char *s)
{
  const char *rest;

  while (is_space (*s))
    s++;
  if (*s == '\0' || *s == '#')
    return;
  if ((rest = skip_log_timestamp (s)) != NULL)
    parse_log_line (t, line, rest);
  else if (strncmp (s, "connection=", 11) == 0)
    parse_log_line (t, line, s);
  else
    parse_plain_line (t, line, s);
}

static void
read_trace (struct trace *t, FILE *fp)
{
  ssize_t n;
  unsigned long line = 0;

  while (errno = 0, (n = getline (&t->linebuf, &t->linecap, fp)) != -1) {
    line++;
    if (memchr (t->linebuf, '\0', (size_t) n))
      line_error (t, line, "a NUL byte: this is not a text trace");
    parse_line (t, line, t->linebuf);
  }
  if (ferror (fp))
    die ("%s: read error: %s", t->name, strerror (errno));
  free (t->linebuf);
  t->linebuf = NULL;
  t->linecap = 0;
}

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
  return x < y ? -1 : x > y;
}

/* Number the streams densely (in order of their ids); returns how many
 * there are and their ids in *ids_out.
 */
static size_t
number_streams (struct trace *t, uint64_t **ids_out)
{
  uint64_t *ids;
  size_t i, n = 0;

  ids = xrealloc (NULL, (t->nr ? t->nr : 1) * sizeof *ids);
  for (i = 0; i < t->nr; i++)
    ids[i] = t->reads[i].stream_id;
  qsort (ids, t->nr, sizeof *ids, cmp_u64);
  for (i = 0; i < t->nr; i++)
    if (n == 0 || ids[n - 1] != ids[i])
      ids[n++] = ids[i];
  for (i = 0; i < t->nr; i++) {
    uint64_t *f = bsearch (&t->reads[i].stream_id, ids, n, sizeof *ids,
                           cmp_u64);
    t->reads[i].stream = (size_t) (f - ids);
  }
  *ids_out = ids;
  return n;
}

/* ---- the simulated page cache ------------------------------------------ */

struct page {
  ra_pgoff index;
  struct page *hnext;           /* hash chain */
  struct page *lprev, *lnext;   /* LRU list (newest at the head); NULL
                                 * while in flight (timed replay) */
  uint64_t stamp;               /* tick when put on its list */
  uint64_t ready;               /* clock (ns) when its read completes */
  size_t owner;                 /* stream (dense index) that inserted it */
  bool marker;                  /* carries the marker */
  bool used;                    /* a client read it */
  bool async;                   /* inserted as part of an async part */
  bool near;                    /* ... of a near window (branch N) */
};

struct counters {
  uint64_t reads, client_bytes;
  uint64_t hits, misses;
  uint64_t sync_triggers, async_triggers;
  uint64_t windows[RA_NR_BRANCHES];
  uint64_t sync_inserted, async_inserted;
  uint64_t ra_evicted_unused;   /* async pages evicted before any use */
  uint64_t sync_evicted_unused; /* sync part pages likewise */
  uint64_t evicted;
  uint64_t backend_requests, backend_bytes;
  /* Timing and adaptive mode (printed only with those options). */
  uint64_t waits;               /* page accesses that waited */
  uint64_t ahead_waits;         /* ... for a read-ahead page in flight */
  uint64_t stall_ns;            /* clock time spent waiting */
  uint64_t late_events;         /* ra_late calls */
  uint64_t early_triggers;      /* async triggers made early by them */
  uint64_t congestion_skips;    /* windows whose async part was skipped */
  uint64_t pages_skipped;       /* its pages */
  ra_pgoff largest_window;
};

/* A backend read issued and not complete yet (timed replay). */
struct backend_read {
  uint64_t done;                /* completion (ns) */
  uint64_t seq;                 /* issue order: ties complete in it */
  uint64_t ns;                  /* start to completion: what the model sees */
  ra_pgoff start, count;
};

/* A batch of the window being submitted, before it is issued. */
struct sim_batch {
  ra_pgoff start, count;
  bool async;
};

/* Per stream, for adaptive mode and the summary. */
struct stream_info {
  uint64_t wasted;              /* read-ahead pages evicted unused, not yet
                                 * handed to the engine */
  uint64_t near_hits;           /* near pages used, not yet handed to it */
  ra_pgoff largest_window;
  ra_pgoff largest_cap;
};

/* The timing options (all zero: an instant backend, kernel mode). */
struct timing {
  bool adaptive;                /* --mode adaptive */
  uint64_t latency_ns;          /* --latency */
  uint64_t bandwidth;           /* --bandwidth, bytes/s; 0 = unlimited */
  unsigned parallel;            /* --parallel */
  uint64_t gap_ns;              /* --client-gap */
};

struct sim {
  struct ra_params p;
  uint64_t page_size;
  uint64_t capacity;            /* pages */
  struct page **buckets;
  size_t nbuckets;              /* power of two */
  unsigned bucket_shift;        /* 64 - log2 (nbuckets) */
  size_t count;
  struct page unused, used;     /* LRU list sentinels */
  uint64_t tick;
  struct page *free_pages;
  ra_pgoff pin_lo, pin_hi;      /* pages of the read in progress */
  uint64_t markers;             /* pages carrying the marker */
  bool near_window;             /* the window being submitted is branch N */
  struct counters c;
  /* Timing (sim_set_timing; the defaults of sim_init are instant). */
  struct timing tm;
  bool timed;                   /* a latency or a bandwidth limit */
  bool extended;                /* print the timing columns and lines */
  unsigned congestion_threshold;
  uint64_t now;                 /* the clock, ns */
  uint64_t *slot_free;          /* tm.parallel: when each slot is free */
  uint64_t link_free;           /* when the link is free */
  struct backend_read *heap;    /* reads in flight, earliest done first */
  size_t nheap, heap_alloc;
  uint64_t seq;
  struct ra_model model;
  struct sim_batch *batches;    /* of the window being submitted */
  size_t nbatches, batches_alloc;
  struct stream_info *streams;  /* NULL until sim_set_timing */
  size_t nstreams;
  /* Output. */
  bool quiet;
  uint64_t cur_read;            /* 1-based read number */
  uint64_t cur_stream_id;
  size_t cur_stream;            /* dense index */
};

static size_t
bucket_of (const struct sim *s, ra_pgoff index)
{
  return (size_t) ((index * UINT64_C (0x9E3779B97F4A7C15)) >> s->bucket_shift);
}

static void
lru_init (struct page *head)
{
  head->lprev = head->lnext = head;
}

static void
lru_unlink (struct page *pg)
{
  if (!pg->lprev)               /* in flight: on no list */
    return;
  pg->lprev->lnext = pg->lnext;
  pg->lnext->lprev = pg->lprev;
  pg->lprev = pg->lnext = NULL;
}

static void
lru_push (struct page *head, struct page *pg)
{
  pg->lnext = head->lnext;
  pg->lprev = head;
  head->lnext->lprev = pg;
  head->lnext = pg;
}

static struct page *
lru_oldest (struct page *head)
{
  return head->lprev == head ? NULL : head->lprev;
}

static void
hash_resize (struct sim *s, size_t nbuckets)
{
  struct page **old = s->buckets;
  size_t oldn = s->nbuckets, i;
  unsigned bits = 0;

  while (((size_t) 1 << bits) < nbuckets)
    bits++;
  s->nbuckets = (size_t) 1 << bits;
  s->bucket_shift = 64 - bits;
  s->buckets = calloc (s->nbuckets, sizeof *s->buckets);
  if (!s->buckets)
    die ("out of memory");
  for (i = 0; i < oldn; i++) {
    struct page *pg = old[i];
    while (pg) {
      struct page *next = pg->hnext;
      size_t b = bucket_of (s, pg->index);
      pg->hnext = s->buckets[b];
      s->buckets[b] = pg;
      pg = next;
    }
  }
  free (old);
}

static void
sim_init (struct sim *s, const struct ra_params *p, uint64_t cache_pages,
          bool quiet)
{
  memset (s, 0, sizeof *s);
  s->p = *p;
  /* Kernel mode until sim_set_timing says otherwise. */
  s->p.mode = RA_MODE_KERNEL;
  s->p.adapt_min = s->p.self_max = 0;
  s->p.parallel = 0;
  s->page_size = UINT64_C (1) << p->page_shift;
  s->capacity = cache_pages;
  s->quiet = quiet;
  lru_init (&s->unused);
  lru_init (&s->used);
  hash_resize (s, 1024);
  ra_model_init (&s->model);
}

/* The timing options, and the adaptive parameters as the filter derives
 * them: adapt_min 128K, the congestion threshold of ra-max-background =
 * parallel (3/4 of it, rounded up: 9 for 12) and self_max = threshold - 1
 * reads of io_max.
 */
static void
sim_set_timing (struct sim *s, const struct timing *tm, size_t nstreams)
{
  unsigned thr;

  s->tm = *tm;
  if (s->tm.parallel == 0)
    s->tm.parallel = 1;
  s->timed = tm->latency_ns > 0 || tm->bandwidth > 0;
  s->extended = s->timed || tm->adaptive || tm->gap_ns > 0;
  thr = rc_default_congestion_threshold (s->tm.parallel);
  s->congestion_threshold = thr;
  s->p.mode = tm->adaptive ? RA_MODE_ADAPTIVE : RA_MODE_KERNEL;
  s->p.adapt_min = RC_ADAPT_MIN_WINDOW >> s->p.page_shift;
  s->p.self_max = ra_self_max (thr, s->p.io_max);
  s->p.parallel = s->tm.parallel;
  s->slot_free = xrealloc (NULL, s->tm.parallel * sizeof *s->slot_free);
  memset (s->slot_free, 0, s->tm.parallel * sizeof *s->slot_free);
  s->nstreams = nstreams;
  s->streams = xrealloc (NULL, (nstreams ? nstreams : 1) * sizeof *s->streams);
  memset (s->streams, 0, (nstreams ? nstreams : 1) * sizeof *s->streams);
}

/* a + b of the clock; the simulation stops rather than wrap. */
static uint64_t
clock_add (uint64_t a, uint64_t b)
{
  if (a > UINT64_MAX - b)
    die ("the simulated clock passes 2^64 ns (584 years): use a smaller "
         "--latency or --client-gap, or a larger --bandwidth");
  return a + b;
}

static struct page *
lookup (const struct sim *s, ra_pgoff index)
{
  struct page *pg;

  for (pg = s->buckets[bucket_of (s, index)]; pg; pg = pg->hnext)
    if (pg->index == index)
      return pg;
  return NULL;
}

static bool
pinned (const struct sim *s, const struct page *pg)
{
  return pg->index >= s->pin_lo && pg->index < s->pin_hi;
}

static void
remove_page (struct sim *s, struct page *pg)
{
  struct page **pp = &s->buckets[bucket_of (s, pg->index)];

  while (*pp != pg)
    pp = &(*pp)->hnext;
  *pp = pg->hnext;
  lru_unlink (pg);
  if (pg->marker)
    s->markers--;
  s->count--;
  pg->hnext = s->free_pages;
  s->free_pages = pg;
}

/* Evict one page by the filter's rule: the oldest unused page if it has
 * waited at least half as long as the oldest used page, else the oldest
 * used page; never a page of the read in progress, nor one in flight
 * (those are on no list).  Returns false if nothing can be evicted.
 */
static bool
evict_one (struct sim *s)
{
  struct page *unused = lru_oldest (&s->unused);
  struct page *used = lru_oldest (&s->used);
  struct page *victim, *other;

  if (unused &&
      (!used || 2 * (s->tick - unused->stamp) >= s->tick - used->stamp)) {
    victim = unused;
    other = used;
  }
  else {
    victim = used;
    other = unused;
  }
  if (victim && pinned (s, victim))
    victim = other;
  if (!victim || pinned (s, victim))
    return false;
  if (!victim->used) {
    if (victim->async) {
      s->c.ra_evicted_unused++;
      if (s->streams && victim->owner < s->nstreams)
        s->streams[victim->owner].wasted++;
    }
    else
      s->c.sync_evicted_unused++;
  }
  s->c.evicted++;
  remove_page (s, victim);
  return true;
}

/* The engine's query interface. */
static bool
q_cached (void *opaque, ra_pgoff index)
{
  return lookup (opaque, index) != NULL;
}

static const struct ra_cache_ops cache_ops = { .cached = q_cached };

/* ra_submit's callbacks. */
static bool
sub_insert (void *opaque, ra_pgoff index, bool marker, bool async)
{
  struct sim *s = opaque;
  struct page *pg;
  size_t b;

  if (lookup (s, index))
    return false;
  while (s->count >= s->capacity && evict_one (s))
    ;
  if ((pg = s->free_pages) != NULL)
    s->free_pages = pg->hnext;
  else {
    pg = malloc (sizeof *pg);
    if (!pg)
      die ("out of memory");
  }
  pg->index = index;
  pg->marker = marker;
  pg->used = false;
  pg->async = async;
  pg->near = async && s->near_window;
  pg->owner = s->cur_stream;
  b = bucket_of (s, index);
  pg->hnext = s->buckets[b];
  s->buckets[b] = pg;
  if (s->timed) {
    /* In flight until its read completes (issue_batch sets the time):
     * on no list, so not evictable, as in the filter.
     */
    pg->ready = UINT64_MAX;
    pg->stamp = 0;
    pg->lprev = pg->lnext = NULL;
  }
  else {
    pg->ready = s->now;
    pg->stamp = ++s->tick;
    lru_push (&s->unused, pg);
  }
  if (marker)
    s->markers++;
  s->count++;
  if (s->count > s->nbuckets)
    hash_resize (s, 2 * s->nbuckets);
  if (async)
    s->c.async_inserted++;
  else
    s->c.sync_inserted++;
  return true;
}

/* A batch is kept until the window is submitted: the congestion rule may
 * drop the async ones, then issue_batch issues the others.
 */
static void
sub_batch (void *opaque, ra_pgoff start, ra_pgoff count, bool async)
{
  struct sim *s = opaque;

  if (s->nbatches == s->batches_alloc) {
    s->batches_alloc = s->batches_alloc ? 2 * s->batches_alloc : 64;
    s->batches = xrealloc (s->batches,
                           s->batches_alloc * sizeof *s->batches);
  }
  s->batches[s->nbatches].start = start;
  s->batches[s->nbatches].count = count;
  s->batches[s->nbatches].async = async;
  s->nbatches++;
}

static const struct ra_submit_ops submit_ops = {
  .insert = sub_insert, .batch = sub_batch
};

/* A client read copies page pg: it becomes used and most recent. */
static void
use_page (struct sim *s, struct page *pg)
{
  lru_unlink (pg);
  if (!pg->used && pg->near && s->streams && pg->owner < s->nstreams)
    s->streams[pg->owner].near_hits++;
  pg->used = true;
  pg->stamp = ++s->tick;
  lru_push (&s->used, pg);
}

/* ---- the backend (timed replay) ----------------------------------------- */

static bool
read_before (const struct backend_read *a, const struct backend_read *b)
{
  return a->done < b->done || (a->done == b->done && a->seq < b->seq);
}

static void
heap_push (struct sim *s, const struct backend_read *r)
{
  size_t i;

  if (s->nheap == s->heap_alloc) {
    s->heap_alloc = s->heap_alloc ? 2 * s->heap_alloc : 64;
    s->heap = xrealloc (s->heap, s->heap_alloc * sizeof *s->heap);
  }
  i = s->nheap++;
  while (i > 0 && read_before (r, &s->heap[(i - 1) / 2])) {
    s->heap[i] = s->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  s->heap[i] = *r;
}

static struct backend_read
heap_pop (struct sim *s)
{
  struct backend_read top = s->heap[0], last = s->heap[--s->nheap];
  size_t i = 0, n = s->nheap;

  for (;;) {
    size_t c = 2 * i + 1;

    if (c >= n)
      break;
    if (c + 1 < n && read_before (&s->heap[c + 1], &s->heap[c]))
      c++;
    if (!read_before (&s->heap[c], &last))
      break;
    s->heap[i] = s->heap[c];
    i = c;
  }
  if (n > 0)
    s->heap[i] = last;
  return top;
}

/* A backend read completed: the model learns its time, and its pages
 * (up to date now) join the unused list.
 */
static void
complete_read (struct sim *s, const struct backend_read *r)
{
  ra_pgoff i;

  ra_model_sample (&s->model, r->count, r->ns);
  for (i = r->start; i < r->start + r->count; i++) {
    struct page *pg = lookup (s, i);

    if (pg && !pg->lprev && pg->ready == r->done) {
      pg->stamp = ++s->tick;
      lru_push (&s->unused, pg);
    }
  }
}

/* Move the clock to t (never back), completing the reads done by then. */
static void
set_clock (struct sim *s, uint64_t t)
{
  while (s->nheap > 0 && s->heap[0].done <= t) {
    struct backend_read r = heap_pop (s);
    complete_read (s, &r);
  }
  if (t > s->now)
    s->now = t;
}

/* Nanoseconds to move bytes over the link (rounded up). */
static uint64_t
transfer_ns (const struct sim *s, uint64_t bytes)
{
  unsigned __int128 ns = (unsigned __int128) bytes * 1000000000u;

  ns = (ns + s->tm.bandwidth - 1) / s->tm.bandwidth;
  return ns > UINT64_MAX ? UINT64_MAX : (uint64_t) ns;
}

/* Issue a backend read of pages [start, start + count) now. */
static void
issue_batch (struct sim *s, ra_pgoff start, ra_pgoff count)
{
  uint64_t from = start << s->p.page_shift;
  uint64_t to = (start + count) << s->p.page_shift;
  struct backend_read r;
  uint64_t begin, done;
  unsigned k, slot = 0;
  ra_pgoff i;

  /* The last page of the export may be partial: read what exists. */
  if (to > s->p.export_size)
    to = s->p.export_size;
  s->c.backend_requests++;
  s->c.backend_bytes += to > from ? to - from : 0;
  if (!s->timed) {              /* instant: up to date already */
    ra_model_sample (&s->model, count, 0);
    return;
  }
  /* The slot free first; the read starts there, at or after now. */
  for (k = 1; k < s->tm.parallel; k++)
    if (s->slot_free[k] < s->slot_free[slot])
      slot = k;
  begin = s->slot_free[slot] > s->now ? s->slot_free[slot] : s->now;
  done = clock_add (begin, s->tm.latency_ns);
  if (s->tm.bandwidth) {
    if (done < s->link_free)
      done = s->link_free;
    done = clock_add (done, transfer_ns (s, to > from ? to - from : 0));
    s->link_free = done;
  }
  s->slot_free[slot] = done;
  for (i = start; i < start + count; i++) {
    struct page *pg = lookup (s, i);
    if (pg && pg->ready == UINT64_MAX)
      pg->ready = done;
  }
  r.done = done;
  r.seq = s->seq++;
  r.ns = done - begin;
  r.start = start;
  r.count = count;
  heap_push (s, &r);
}

/* Backend reads issued and not complete (the filter's executing +
 * queued).
 */
static size_t
inflight (const struct sim *s)
{
  return s->nheap;
}

/* The congestion rule dropped a batch: remove its new pages. */
static ra_pgoff
drop_pages (struct sim *s, ra_pgoff start, ra_pgoff count)
{
  ra_pgoff i, n = 0;

  for (i = start; i < start + count; i++) {
    struct page *pg = lookup (s, i);

    if (pg && !pg->used && pg->ready == UINT64_MAX) {
      remove_page (s, pg);
      s->c.async_inserted--;
      n++;
    }
  }
  return n;
}

/* ---- replay ------------------------------------------------------------- */

/* Widths of the window table (see --help and ra-trace(1)). */
#define ROW_FMT "%7" PRIu64 " %6" PRIu64 " %-7s %-6s %10" PRIu64 " %6" PRIu64 \
  " %6" PRIu64 " %10s %8" PRIu64 " %7" PRIu64
#define HEAD_FMT "#%6s %6s %-7s %-6s %10s %6s %6s %10s %8s %7s"

static void
print_table_header (const struct sim *s)
{
  printf (HEAD_FMT, "read", "stream", "trigger", "branch", "start", "size",
          "async", "marker", "inserted", "batches");
  if (s->extended)
    printf (" %12s", "time_ms");
  if (s->tm.adaptive)
    printf (" %6s", "cap");
  putchar ('\n');
}

/* What adaptive mode measures, as src/cache.c adaptive_inputs. */
static void
adaptive_inputs (struct sim *s, struct ra_inputs *in)
{
  in->now_ns = s->now;
  if (!ra_model_estimate (&s->model, &in->lat_ns, &in->page_ns))
    in->lat_ns = -1;
  in->share = ra_fair_share (s->capacity, s->markers);
  in->wasted = in->near_hits = 0;
  if (s->streams && s->cur_stream < s->nstreams) {
    in->wasted = s->streams[s->cur_stream].wasted;
    s->streams[s->cur_stream].wasted = 0;
    in->near_hits = s->streams[s->cur_stream].near_hits;
    s->streams[s->cur_stream].near_hits = 0;
  }
}

/* A trigger at page index of a read ending at page last (req = last -
 * index); kind is "sync", "async" or "early" (an async trigger made early
 * by the late feedback).
 */
static void
trigger (struct sim *s, struct ra_state *ra, ra_pgoff index, bool marker,
         ra_pgoff last, const char *kind)
{
  struct ra_window w;
  struct ra_submit_result res = { 0, 0, 0 };
  ra_pgoff dropped = 0;
  uint64_t issued;
  char mbuf[24];
  size_t b;

  if (s->tm.adaptive) {
    struct ra_inputs in;

    adaptive_inputs (s, &in);
    ra_ondemand_at (ra, &s->p, &cache_ops, s, index, marker, last - index,
                    &in, &w);
  }
  else
    ra_ondemand (ra, &s->p, &cache_ops, s, index, marker, last - index, &w);
  s->nbatches = 0;
  s->near_window = w.branch == RA_N_NEAR;
  if (w.size > 0)
    ra_submit (&w, s->p.io_max, &submit_ops, s, &res);
  /* The filter's congestion rule (ra-congestion=skip, src/cache.c
   * submit_window): only speculation past the request is dropped.
   */
  if (s->timed && res.async_pages > 0 &&
      inflight (s) >= s->congestion_threshold) {
    size_t j = 0;

    for (b = 0; b < s->nbatches; b++) {
      if (s->batches[b].async && s->batches[b].start >= last)
        dropped += drop_pages (s, s->batches[b].start, s->batches[b].count);
      else
        s->batches[j++] = s->batches[b];
    }
    s->nbatches = j;
    ra_drop_async (ra, &w, dropped);
    if (dropped > 0) {
      s->c.congestion_skips++;
      s->c.pages_skipped += dropped;
    }
  }
  issued = s->nbatches;
  for (b = 0; b < s->nbatches; b++)
    issue_batch (s, s->batches[b].start, s->batches[b].count);
  s->nbatches = 0;

  if (marker)
    s->c.async_triggers++;
  else
    s->c.sync_triggers++;
  s->c.windows[w.branch < RA_NR_BRANCHES ? w.branch : RA_NONE]++;
  if (w.size > s->c.largest_window)
    s->c.largest_window = w.size;
  if (s->streams && s->cur_stream < s->nstreams) {
    struct stream_info *si = &s->streams[s->cur_stream];

    if (w.size > si->largest_window)
      si->largest_window = w.size;
    if (ra->ad.cap > si->largest_cap)
      si->largest_cap = ra->ad.cap;
  }
  if (s->quiet)
    return;
  if (w.marker == RA_NO_MARKER)
    strcpy (mbuf, "-");
  else
    snprintf (mbuf, sizeof mbuf, "%" PRIu64, (uint64_t) w.marker);
  printf (ROW_FMT, s->cur_read, s->cur_stream_id, kind,
          ra_branch_name (w.branch),
          (uint64_t) w.start, (uint64_t) w.size, (uint64_t) w.async_size,
          mbuf, (uint64_t) (res.sync_pages + res.async_pages - dropped),
          issued);
  if (s->extended)
    printf (" %12.3f", (double) s->now / 1e6);
  if (s->tm.adaptive)
    printf (" %6" PRIu64, (uint64_t) ra->ad.cap);
  putchar ('\n');
}

/* Adaptive mode: the client waited for page index, which an async part
 * had in flight (src/cache.c late()): the engine counts it and may name
 * the stream's next marker, which is taken now for an early async
 * trigger, unless that window's reads would reach the congestion
 * threshold.
 */
static void
late (struct sim *s, struct ra_state *ra, ra_pgoff index)
{
  ra_pgoff m = ra_late (ra, &s->p, index);
  uint64_t reads = (ra->ad.cap + s->p.io_max - 1) / s->p.io_max;
  struct page *pg;

  s->c.late_events++;
  if (m == RA_NO_MARKER || inflight (s) + reads >= s->congestion_threshold)
    return;
  pg = lookup (s, m);
  if (!pg || !pg->marker)
    return;
  pg->marker = false;
  s->markers--;
  s->c.early_triggers++;
  trigger (s, ra, m, true, m + 1, "early");
}

/* The read path of the spec for one client read. */
static void
replay_read (struct sim *s, struct ra_state *ra, const struct trace *t,
             const struct trace_read *r)
{
  unsigned shift = s->p.page_shift;
  ra_pgoff index = r->offset >> shift;
  ra_pgoff last = (r->offset + r->length + s->page_size - 1) >> shift;
  ra_pgoff i;

  s->cur_stream_id = r->stream_id;
  s->cur_stream = r->stream;
  if (s->c.reads > 0 && s->tm.gap_ns > 0)
    set_clock (s, clock_add (s->now, s->tm.gap_ns));
  s->c.reads++;
  s->c.client_bytes += r->length;
  s->pin_hi = last;
  for (i = index; i < last; i++) {
    struct page *pg;

    s->pin_lo = i;
    pg = lookup (s, i);
    if (!pg) {
      s->c.misses++;
      trigger (s, ra, i, false, last, "sync");
      pg = lookup (s, i);
      if (!pg)                  /* the engine failed to read the page */
        line_error (t, r->line, "internal error: page %" PRIu64 " is not "
                    "cached after a sync trigger (engine bug?)",
                    (uint64_t) i);
    }
    else
      s->c.hits++;
    if (pg->marker) {
      pg->marker = false;
      s->markers--;
      trigger (s, ra, i, true, last, "async");
      pg = lookup (s, i);       /* pinned: still there */
    }
    if (pg->ready > s->now) {
      /* In flight: wait for it.  A read-ahead page nobody used yet is
       * the late case of adaptive mode.
       */
      bool ahead = pg->async && !pg->used;

      if (pg->ready == UINT64_MAX)
        line_error (t, r->line, "internal error: page %" PRIu64 " was "
                    "never issued", (uint64_t) i);
      s->c.waits++;
      if (ahead)
        s->c.ahead_waits++;
      s->c.stall_ns += pg->ready - s->now;
      set_clock (s, pg->ready);
      use_page (s, pg);
      if (ahead && s->tm.adaptive)
        late (s, ra, i);
    }
    else
      use_page (s, pg);
  }
  ra_update_prev_pos (ra, r->offset + r->length);
  s->pin_lo = s->pin_hi = 0;
  while (s->count > s->capacity && evict_one (s))
    ;
}

/* ---- output ------------------------------------------------------------- */

static void
print_kv (const char *key, uint64_t v)
{
  printf ("%-28s %" PRIu64 "\n", key, v);
}

static void
print_kv_pct (const char *key, uint64_t v, uint64_t of, const char *what)
{
  if (of)
    printf ("%-28s %" PRIu64 " (%.1f%% of %s)\n", key, v,
            100.0 * (double) v / (double) of, what);
  else
    print_kv (key, v);
}

static void
print_time_kv (const char *key, uint64_t ns)
{
  printf ("%-28s %.6f s\n", key, (double) ns / 1e9);
}

/* The timing and adaptive lines of the summary. */
static void
print_timing (const struct sim *s, const struct ra_state *states,
              const uint64_t *stream_ids)
{
  const struct counters *c = &s->c;
  double lat, page;
  size_t i;

  print_time_kv ("simulated time:", s->now);
  if (s->now > 0) {
    double bps = (double) c->client_bytes * 1e9 / (double) s->now;
    printf ("%-28s %.0f bytes/s (%.2f MB/s)\n", "client throughput:", bps,
            bps / 1e6);
  }
  else
    printf ("%-28s -\n", "client throughput:");
  if (s->now > 0)
    printf ("%-28s %.6f s (%.1f%% of simulated time)\n", "stall time:",
            (double) c->stall_ns / 1e9,
            100.0 * (double) c->stall_ns / (double) s->now);
  else
    print_time_kv ("stall time:", c->stall_ns);
  print_kv ("page waits:", c->waits);
  print_kv ("page waits on read ahead:", c->ahead_waits);
  print_kv ("congestion skips:", c->congestion_skips);
  print_kv ("pages skipped:", c->pages_skipped);
  if (ra_model_estimate (&s->model, &lat, &page)) {
    printf ("%-28s %.0f ns (%.3f ms)\n", "model latency:", lat, lat / 1e6);
    printf ("%-28s %.1f ns\n", "model cost per page:", page);
  }
  else {
    printf ("%-28s -\n", "model latency:");
    printf ("%-28s -\n", "model cost per page:");
  }
  print_kv ("largest window:", c->largest_window);
  if (!s->tm.adaptive)
    return;
  print_kv ("late events:", c->late_events);
  print_kv ("early triggers:", c->early_triggers);
  for (i = 0; i < s->nstreams; i++) {
    char key[48];

    snprintf (key, sizeof key, "stream %" PRIu64 " cap:", stream_ids[i]);
    printf ("%-28s %" PRIu64 " (largest %" PRIu64 ", largest window %"
            PRIu64 ", late %" PRIu64 ", waste %" PRIu64 ")\n", key,
            (uint64_t) states[i].ad.cap, (uint64_t) s->streams[i].largest_cap,
            (uint64_t) s->streams[i].largest_window,
            states[i].ad.late_events, states[i].ad.waste_events);
  }
}

static void
print_summary (const struct sim *s, size_t nstreams)
{
  /* Every branch a trace can produce (no NBD_CMD_CACHE: no "forced"). */
  static const enum ra_branch order[] = {
    RA_A_INITIAL, RA_B_SEQUENTIAL, RA_C_INTERLEAVED, RA_D_OVERSIZE,
    RA_E_SEQ_MISS, RA_F_CONTEXT, RA_G_RANDOM, RA_N_NEAR, RA_OFF, RA_NONE
  };
  const struct counters *c = &s->c;
  uint64_t ra_unused_end = 0, sync_unused_end = 0, nwin = 0;
  size_t b;
  int k;

  for (b = 0; b < s->nbuckets; b++) {
    const struct page *pg;
    for (pg = s->buckets[b]; pg; pg = pg->hnext)
      if (!pg->used) {
        if (pg->async)
          ra_unused_end++;
        else
          sync_unused_end++;
      }
  }
  for (k = 0; k < RA_NR_BRANCHES; k++)
    nwin += c->windows[k];

  printf ("# summary\n");
  print_kv ("reads:", c->reads);
  print_kv ("streams:", nstreams);
  print_kv ("client bytes:", c->client_bytes);
  print_kv_pct ("page hits:", c->hits, c->hits + c->misses, "pages read");
  print_kv_pct ("page misses:", c->misses, c->hits + c->misses, "pages read");
  print_kv ("sync triggers:", c->sync_triggers);
  print_kv ("async triggers:", c->async_triggers);
  print_kv ("windows:", nwin);
  for (k = 0; k < (int) (sizeof order / sizeof order[0]); k++) {
    char key[32];

    snprintf (key, sizeof key, "windows %s:", ra_branch_name (order[k]));
    print_kv (key, c->windows[order[k]]);
  }
  print_kv ("pages inserted:", c->sync_inserted + c->async_inserted);
  print_kv ("sync part pages:", c->sync_inserted);
  print_kv ("pages read ahead:", c->async_inserted);
  print_kv_pct ("read ahead never used:",
                c->ra_evicted_unused + ra_unused_end, c->async_inserted,
                "read ahead");
  print_kv ("read ahead evicted unused:", c->ra_evicted_unused);
  print_kv ("read ahead unused at end:", ra_unused_end);
  print_kv ("sync part never used:", c->sync_evicted_unused + sync_unused_end);
  print_kv ("pages evicted:", c->evicted);
  print_kv ("backend requests:", c->backend_requests);
  print_kv ("backend bytes:", c->backend_bytes);
  if (c->client_bytes)
    printf ("%-28s %.3f\n", "amplification:",
            (double) c->backend_bytes / (double) c->client_bytes);
  else
    printf ("%-28s -\n", "amplification:");
}

static void
sim_free (struct sim *s)
{
  size_t b;

  for (b = 0; b < s->nbuckets; b++) {
    struct page *pg = s->buckets[b];
    while (pg) {
      struct page *next = pg->hnext;
      free (pg);
      pg = next;
    }
  }
  while (s->free_pages) {
    struct page *next = s->free_pages->hnext;
    free (s->free_pages);
    s->free_pages = next;
  }
  free (s->buckets);
  free (s->slot_free);
  free (s->heap);
  free (s->batches);
  free (s->streams);
}

/* ---- options ------------------------------------------------------------ */

static void
usage (FILE *fp)
{
  fprintf (fp,
"Usage: " PROG " [OPTIONS] [TRACE]\n"
"Replay a trace of client reads through ra-cache's readahead engine over a\n"
"simulated page cache; print every window and a summary.\n"
"\n"
"TRACE is a file, or standard input when it is absent or '-'.  Each line is\n"
"one of (detected line by line):\n"
"  OFFSET LENGTH [STREAM]   a read of LENGTH bytes at byte OFFSET (decimal\n"
"                           or 0x hex); STREAM is a stream id (default 0),\n"
"                           each with its own stream state, like an NBD\n"
"                           connection; the cache is shared\n"
"  a line of nbdkit's log filter (--filter=log logfile=FILE): Read lines\n"
"                           are reads, their connection number the stream;\n"
"                           Connect lines give the export size; all other\n"
"                           log lines (writes, ...Read replies) are ignored\n"
"Blank lines and '#' comments are ignored.  A line that is neither is an\n"
"error: \"" PROG ": FILE:LINE: message\", exit status 1.\n"
"\n"
"Options (SIZE: bytes, or with a binary suffix k, M, G, T (either case)):\n"
"  --page-size=SIZE    cache page, a power of two from 512 to 1M [4K]\n"
"  --ra-max=SIZE       largest window, whole pages, 0 (off) to 1G, at most\n"
"                      half of --cache-size [4M]\n"
"  --io-max=SIZE       largest backend request, whole pages, one page to\n"
"                      32M [256K]\n"
"  --cache-size=SIZE   simulated cache, at least one page (rounded down to\n"
"                      whole pages) [64M]\n"
"  --export-size=SIZE  export size [the largest size= of the log's Connect\n"
"                      lines and the end of the last page read, whichever\n"
"                      is larger]; a read past a given size is an error\n"
"  --mode=MODE         kernel: ra-max is every stream's largest window (as\n"
"                      Linux); adaptive: each stream's largest window (its\n"
"                      cap) follows its measured needs, up to ra-max [kernel]\n"
"  --latency=TIME      backend read latency: a number and a unit ns, us, ms\n"
"                      or s (20ms, 1.5ms, 500us), or 0 [0: instant]\n"
"  --bandwidth=SIZE    bytes per second of the backend link, shared by all\n"
"                      reads [unlimited]\n"
"  --parallel=N        backend reads at once, 1 to 256 (the filter's\n"
"                      ra-max-background) [12]\n"
"  --client-gap=TIME   time the client spends between two reads [0: it reads\n"
"                      as fast as the pages arrive]\n"
"  -q, --quiet         print the summary only\n"
"  -h, --help          print this help and exit\n"
"  -V, --version       print the version and exit\n"
"\n"
"Simulation: the read path of readahead-spec.md, page by page: a page not\n"
"cached is a sync trigger, a page with the marker an async trigger (the\n"
"marker is cleared); windows are submitted at once and their pages are up\n"
"to date at once.  Eviction is LRU, unused pages (not read by a client yet)\n"
"ageing twice as fast as used ones, as in the filter; the pages of the read\n"
"in progress are never evicted.\n"
"\n"
"Timing (--latency or --bandwidth): a simulation over a virtual clock with\n"
"one client reading the trace in order, --client-gap between reads.  Each\n"
"backend request (batch) starts when one of --parallel slots is free, first\n"
"come first served; its transfer starts after the latency once the link is\n"
"free (transfers are serialized on the link) and lasts bytes / bandwidth;\n"
"its pages are ready when it ends, and cannot be evicted before.  A client\n"
"needing a page that is not ready waits for it.  The filter's congestion\n"
"rule applies: a window submitted while 3/4 of --parallel (rounded up, 9 of\n"
"12) requests are in flight reads only its sync part.  In adaptive mode the\n"
"engine is told what the filter tells it: the clock, the latency and cost\n"
"per page measured over the completed requests, a share of the cache of\n"
"cache pages / (4 x pages carrying a marker), the\n"
"stream's read-ahead pages evicted unused; its cap is at least 128K and at most the congestion bound\n"
"(threshold - 1) x io-max (8 x io-max for 12); a wait for a page read ahead\n"
"is late feedback, whose early async trigger is made when the window's\n"
"requests stay below the congestion threshold.\n"
"\n"
"Output (stable; columns separated by spaces; lines starting with '#' are\n"
"headings):\n"
"  # ra-trace: page-size=N ra-max=N io-max=N cache-size=N export-size=N\n"
"  # in pages: ra-max=N io-max=N cache-size=N export-size=N\n"
"  (the parameters used, in bytes, then in pages)\n"
"  then, unless --quiet, one line per window (start, size, async, marker,\n"
"  inserted are in pages):\n"
"    read      read number, from 1, in trace order\n"
"    stream    stream id (the connection number for log lines)\n"
"    trigger   sync (page not cached) or async (marker reached)\n"
"    branch    ondemand branch: A B C D E F G, off (ra-max 0), none (no read)\n"
"    start size async  the window (clamped to the export); async: async part\n"
"    marker    the marker page, or -\n"
"    inserted  pages the window inserted (cached pages are skipped)\n"
"    batches   backend requests it made (at most io-max each; a batch\n"
"              never mixes the sync and the async part)\n"
"  then \"# summary\" and lines \"KEY: NUMBER [(PERCENT of WHAT)]\":\n"
"    reads, streams, client bytes, page hits, page misses, sync triggers,\n"
"    async triggers, windows, windows A .. G / off / none, pages inserted,\n"
"    sync part pages, pages read ahead (async part pages inserted), read\n"
"    ahead never used (= read ahead evicted unused + read ahead unused at\n"
"    end), sync part never used, pages evicted, backend requests, backend\n"
"    bytes, amplification (backend bytes / client bytes, 3 decimals, or -\n"
"    when the trace has no reads)\n"
"  With timing (--latency, --bandwidth, --client-gap) or --mode adaptive\n"
"  also: a third heading line \"# timing: mode=M latency-ns=N bandwidth=N\n"
"  parallel=N client-gap-ns=N congestion-threshold=N\" (bandwidth 0:\n"
"  unlimited) and in adaptive mode \"# adaptive, in pages: adapt-min=N\n"
"  self-max=N\"; in the window table a column time_ms (the clock at the\n"
"  trigger) and in adaptive mode cap (the stream's cap after the decision,\n"
"  pages), trigger early (an async trigger made early by late feedback),\n"
"  and inserted and batches count what was read (not what the congestion\n"
"  rule skipped); after amplification: simulated time (s), client\n"
"  throughput (bytes/s), stall time (s), page waits, page waits on read\n"
"  ahead, congestion skips, pages skipped, model latency (ns), model cost\n"
"  per page (ns), largest window (pages); in adaptive mode late events,\n"
"  early triggers and one line per stream \"stream ID cap: CAP (largest N,\n"
"  largest window N, late N, waste N)\".\n"
"\n"
"Example: the worked example of the spec (ra-max 32 pages, 16K reads):\n"
"  for i in $(seq 0 21); do echo $((i * 16384)) 16384; done |\n"
"    " PROG " --ra-max=128K --export-size=1G\n"
"A 20 ms backend, the kernel's window against adaptive windows:\n"
"  for i in $(seq 0 4095); do echo $((i * 65536)) 65536; done > seq\n"
"  " PROG " -q --mode=kernel --ra-max=128K --latency=20ms --bandwidth=1G seq\n"
"  " PROG " -q --mode=adaptive --ra-max=8M --latency=20ms --bandwidth=1G seq\n"
"Record real traffic and replay it:\n"
"  nbdkit --filter=log PLUGIN ... logfile=/tmp/nbd.log\n"
"  " PROG " --ra-max=1M --cache-size=256M /tmp/nbd.log\n"
"\n"
"Exit status: 0 on success, 1 on any error.  See " PROG "(1).\n");
}

static uint64_t
size_option (const char *opt, const char *arg)
{
  uint64_t v;

  if (rc_parse_size (arg, &v) == -1)
    die ("--%s: '%s' is not a size (digits and an optional suffix k, M, G, "
         "T)", opt, arg);
  return v;
}

static bool
is_pow2 (uint64_t v)
{
  return v != 0 && (v & (v - 1)) == 0;
}

/* A duration: "0", or a decimal number (an optional fraction of at most
 * 9 digits) followed by a unit ns, us, ms or s.  At most max_ns.
 */
static bool
parse_time (const char *arg, uint64_t max_ns, uint64_t *out)
{
  static const struct { const char *name; uint64_t ns; } units[] = {
    { "ns", 1 }, { "us", 1000 }, { "ms", 1000000 }, { "s", 1000000000 },
  };
  const char *p = arg;
  uint64_t whole = 0, frac = 0, scale = 1, v;
  size_t k, digits = 0;

  if (strcmp (arg, "0") == 0) {
    *out = 0;
    return true;
  }
  for (; is_digit (*p); p++, digits++) {
    if (whole > UINT64_C (1000000000000))
      return false;
    whole = whole * 10 + (uint64_t) (*p - '0');
  }
  if (*p == '.') {
    size_t fd = 0;

    for (p++; is_digit (*p); p++, fd++) {
      if (fd == 9)
        return false;
      frac = frac * 10 + (uint64_t) (*p - '0');
      scale *= 10;
    }
    if (fd == 0)
      return false;
    digits += fd;
  }
  if (digits == 0)
    return false;
  for (k = 0; k < sizeof units / sizeof units[0]; k++) {
    if (strcmp (p, units[k].name) != 0)
      continue;
    if (whole > max_ns / units[k].ns)
      return false;
    v = whole * units[k].ns + (frac * units[k].ns + scale / 2) / scale;
    if (v > max_ns)
      return false;
    *out = v;
    return true;
  }
  return false;
}

static uint64_t
time_option (const char *opt, const char *arg)
{
  uint64_t v;

  if (!parse_time (arg, MAX_TIME_NS, &v))
    die ("--%s: '%s' is not a time: a number and a unit ns, us, ms or s "
         "(such as 20ms or 1.5ms), or 0; at most 3600s", opt, arg);
  return v;
}

#ifndef RA_TRACE_FUZZ
int
main (int argc, char *argv[])
{
  enum { OPT_PAGE_SIZE = 256, OPT_RA_MAX, OPT_IO_MAX, OPT_CACHE_SIZE,
         OPT_EXPORT_SIZE, OPT_MODE, OPT_LATENCY, OPT_BANDWIDTH, OPT_PARALLEL,
         OPT_CLIENT_GAP };
  static const struct option long_options[] = {
    { "page-size", required_argument, NULL, OPT_PAGE_SIZE },
    { "ra-max", required_argument, NULL, OPT_RA_MAX },
    { "io-max", required_argument, NULL, OPT_IO_MAX },
    { "cache-size", required_argument, NULL, OPT_CACHE_SIZE },
    { "export-size", required_argument, NULL, OPT_EXPORT_SIZE },
    { "mode", required_argument, NULL, OPT_MODE },
    { "latency", required_argument, NULL, OPT_LATENCY },
    { "bandwidth", required_argument, NULL, OPT_BANDWIDTH },
    { "parallel", required_argument, NULL, OPT_PARALLEL },
    { "client-gap", required_argument, NULL, OPT_CLIENT_GAP },
    { "quiet", no_argument, NULL, 'q' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 }
  };
  uint64_t page_size = DEFAULT_PAGE_SIZE, ra_max = DEFAULT_RA_MAX;
  uint64_t io_max = DEFAULT_IO_MAX, cache_size = DEFAULT_CACHE_SIZE;
  uint64_t export_size = 0;
  bool have_export_size = false, quiet = false;
  struct timing tm = { .parallel = DEFAULT_PARALLEL };
  uint64_t par;
  struct trace t = { 0 };
  struct ra_params p;
  struct ra_state *states;
  struct sim s;
  uint64_t *stream_ids;
  size_t nstreams, i;
  unsigned shift;
  FILE *fp;
  int c;

  opterr = 0;                   /* messages of our own, below */
  while ((c = getopt_long (argc, argv, ":qhV", long_options, NULL)) != -1) {
    switch (c) {
    case OPT_PAGE_SIZE: page_size = size_option ("page-size", optarg); break;
    case OPT_RA_MAX: ra_max = size_option ("ra-max", optarg); break;
    case OPT_IO_MAX: io_max = size_option ("io-max", optarg); break;
    case OPT_CACHE_SIZE: cache_size = size_option ("cache-size", optarg); break;
    case OPT_EXPORT_SIZE:
      export_size = size_option ("export-size", optarg);
      have_export_size = true;
      break;
    case OPT_MODE:
      if (strcmp (optarg, "kernel") == 0)
        tm.adaptive = false;
      else if (strcmp (optarg, "adaptive") == 0)
        tm.adaptive = true;
      else
        die ("--mode: '%s' is neither kernel nor adaptive", optarg);
      break;
    case OPT_LATENCY: tm.latency_ns = time_option ("latency", optarg); break;
    case OPT_CLIENT_GAP: tm.gap_ns = time_option ("client-gap", optarg); break;
    case OPT_BANDWIDTH:
      tm.bandwidth = size_option ("bandwidth", optarg);
      if (tm.bandwidth == 0)
        die ("--bandwidth: must not be 0 (leave it out for an unlimited "
             "link)");
      break;
    case OPT_PARALLEL:
      if (!parse_number (optarg, strlen (optarg), &par) || par < 1 ||
          par > RC_MAX_BACKGROUND)
        die ("--parallel: '%s' is not a number from 1 to %u", optarg,
             RC_MAX_BACKGROUND);
      tm.parallel = (unsigned) par;
      break;
    case 'q': quiet = true; break;
    case 'h': usage (stdout); exit (EXIT_SUCCESS);
    case 'V':
      printf (PROG " (" PACKAGE_NAME ") " PACKAGE_VERSION "\n");
      exit (EXIT_SUCCESS);
    case ':':
      die ("option '%s' needs a value (try --help)", argv[optind - 1]);
    default:
      if (optopt == 'q' || optopt == 'h' || optopt == 'V')
        die ("option '%s' takes no value (try --help)", argv[optind - 1]);
      if (optopt)
        die ("unknown option '-%c' (try --help)", optopt);
      die ("unknown option '%s' (try --help)", argv[optind - 1]);
    }
  }
  if (argc - optind > 1)
    die ("at most one trace file, found %d arguments (try --help)",
         argc - optind);

  /* The filter's ranges (src/config.c), for the tool's options. */
  if (!is_pow2 (page_size) || page_size < RC_MIN_PAGE_SIZE ||
      page_size > RC_MAX_PAGE_SIZE)
    die ("--page-size: %" PRIu64 " must be a power of two from 512 to 1M",
         page_size);
  if (ra_max > RC_MAX_RA_MAX)
    die ("--ra-max: %" PRIu64 " is larger than 1G", ra_max);
  if (ra_max % page_size)
    die ("--ra-max: %" PRIu64 " is not a whole number of pages (page size "
         "%" PRIu64 ")", ra_max, page_size);
  if (io_max < page_size)
    die ("--io-max: %" PRIu64 " is smaller than one page (%" PRIu64 ")",
         io_max, page_size);
  if (io_max > RC_MAX_IO_MAX)
    die ("--io-max: %" PRIu64 " is larger than 32M", io_max);
  if (io_max % page_size)
    die ("--io-max: %" PRIu64 " is not a whole number of pages (page size "
         "%" PRIu64 ")", io_max, page_size);
  if (cache_size < page_size)
    die ("--cache-size: %" PRIu64 " is smaller than one page (%" PRIu64 ")",
         cache_size, page_size);
  if (ra_max > cache_size / 2)
    die ("--ra-max: %" PRIu64 " is larger than half of --cache-size "
         "(%" PRIu64 "): windows would evict themselves", ra_max, cache_size);
  if (have_export_size && export_size == 0)
    die ("--export-size: must not be 0");

  if (optind < argc && strcmp (argv[optind], "-") != 0) {
    t.name = argv[optind];
    fp = fopen (t.name, "r");
    if (!fp)
      die ("%s: %s", t.name, strerror (errno));
  }
  else {
    t.name = "<stdin>";
    fp = stdin;
  }
  read_trace (&t, fp);
  if (fp != stdin)
    fclose (fp);

  shift = (unsigned) __builtin_ctzll (page_size);
  if (have_export_size) {
    for (i = 0; i < t.nr; i++)
      if (t.reads[i].offset + t.reads[i].length > export_size)
        line_error (&t, t.reads[i].line, "read at offset %" PRIu64 " of %"
                    PRIu64 " bytes ends past the export size (%" PRIu64 ")",
                    t.reads[i].offset, t.reads[i].length, export_size);
  }
  else {
    export_size = (t.max_end + page_size - 1) & ~(page_size - 1);
    if (t.log_export_size > export_size)
      export_size = t.log_export_size;
  }
  nstreams = number_streams (&t, &stream_ids);

  p.page_shift = shift;
  p.ra_max = ra_max >> shift;
  p.io_max = io_max >> shift;
  p.export_size = export_size;

  states = xrealloc (NULL, (nstreams ? nstreams : 1) * sizeof *states);
  for (i = 0; i < nstreams; i++)
    ra_state_init (&states[i]);
  sim_init (&s, &p, cache_size >> shift, quiet);
  sim_set_timing (&s, &tm, nstreams);

  printf ("# " PROG ": page-size=%" PRIu64 " ra-max=%" PRIu64
          " io-max=%" PRIu64 " cache-size=%" PRIu64 " export-size=%" PRIu64
          "\n# in pages: ra-max=%" PRIu64 " io-max=%" PRIu64
          " cache-size=%" PRIu64 " export-size=%" PRIu64 "\n",
          page_size, ra_max, io_max, (cache_size >> shift) << shift,
          export_size, (uint64_t) p.ra_max, (uint64_t) p.io_max,
          cache_size >> shift, (uint64_t) ra_nr_pages (&p));
  if (s.extended) {
    printf ("# timing: mode=%s latency-ns=%" PRIu64 " bandwidth=%" PRIu64
            " parallel=%u client-gap-ns=%" PRIu64
            " congestion-threshold=%u\n",
            tm.adaptive ? "adaptive" : "kernel", tm.latency_ns, tm.bandwidth,
            tm.parallel, tm.gap_ns, s.congestion_threshold);
    if (tm.adaptive)
      printf ("# adaptive, in pages: adapt-min=%" PRIu64 " self-max=%" PRIu64
              "\n", (uint64_t) s.p.adapt_min, (uint64_t) s.p.self_max);
  }
  if (!quiet)
    print_table_header (&s);
  for (i = 0; i < t.nr; i++) {
    s.cur_read = i + 1;
    replay_read (&s, &states[t.reads[i].stream], &t, &t.reads[i]);
  }
  print_summary (&s, nstreams);
  if (s.extended)
    print_timing (&s, states, stream_ids);

  sim_free (&s);
  free (states);
  free (stream_ids);
  free (t.reads);
  if (fflush (stdout) == EOF || ferror (stdout))
    die ("error writing the output: %s", strerror (errno));
  return EXIT_SUCCESS;
}
#endif /* !RA_TRACE_FUZZ */
