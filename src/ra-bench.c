/* ra-bench: a load generator for NBD servers.
 *
 * The big picture.  One thread runs one libev loop.  Each connection is a
 * libnbd handle connected synchronously (nbd_connect_uri) and then driven
 * with libnbd's asynchronous API: an ev_io watcher on the handle's socket
 * whose events always mirror nbd_aio_get_direction, and nbd_aio_notify_read
 * / nbd_aio_notify_write when the socket is ready.  Each connection owns
 * --depth request slots (one buffer each); a free slot is refilled from the
 * pattern generator as soon as the event that freed it has been handled, so
 * the queue depth stays full until the bound (--bytes, --time, or one pass
 * over the region) is reached, and then the requests in flight drain.
 *
 * libnbd calls a completion callback with its handle locked, so the
 * callback only records the result and frees the slot; new requests are
 * submitted afterwards, from the watcher, outside libnbd.
 *
 * The region [offset, offset+length) is seen as "blocks" of the request
 * size; every pattern is a rule that picks the next block.  Latencies of
 * every request are kept, so the percentiles are exact (nearest rank).
 */

#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ev.h>
#include <libnbd.h>

#include "racache/config.h"
#include "racache/util.h"

#define PROGRAM "ra-bench"

/* Exit codes: 1 for a failed run, 2 for a usage error. */
#define EXIT_USAGE 2

#define MAX_REQUEST_SIZE  (64 * 1024 * 1024)  /* nbdkit's own limit */
#define MAX_DEPTH         1024
#define MAX_CONNECTIONS   256
#define MAX_STREAMS       65536
#define MAX_BUFFER_MEMORY (UINT64_C (2) << 30)

enum pattern {
  PAT_SEQ, PAT_INTERLEAVED, PAT_MULTICONN, PAT_RANDOM, PAT_STRIDED,
  PAT_BACKWARD, PAT_MIXED,
};

static const char *const pattern_names[] = {
  [PAT_SEQ] = "seq", [PAT_INTERLEAVED] = "interleaved",
  [PAT_MULTICONN] = "multiconn", [PAT_RANDOM] = "random",
  [PAT_STRIDED] = "strided", [PAT_BACKWARD] = "backward",
  [PAT_MIXED] = "mixed",
};
#define N_PATTERNS (sizeof pattern_names / sizeof pattern_names[0])

/* What the command line asked for.  "set" flags tell an explicit value
 * from a default, for the cross-checks.
 */
struct options {
  const char **uris;
  size_t n_uris;
  enum pattern pattern;
  unsigned connections;   bool connections_set;
  unsigned depth;
  uint64_t size;
  uint64_t bytes;         bool bytes_set;
  double time;            bool time_set;
  uint64_t seed;
  uint64_t offset;
  uint64_t length;        bool length_set;
  unsigned streams;       bool streams_set;
  uint64_t stride_read;   bool stride_read_set;
  uint64_t stride_skip;   bool stride_skip_set;
  double write_ratio;     bool write_ratio_set;
  bool json;
};

struct conn;

/* One request slot: a buffer and the request currently using it. */
struct slot {
  struct conn *conn;
  char *buf;
  bool busy;
  bool is_write;
  uint64_t offset;
  uint64_t len;
  uint64_t start_ns;
};

struct conn {
  unsigned index;
  const char *uri;
  struct nbd_handle *nbd;
  ev_io io;
  int events;             /* the events io is started with, 0 = stopped */
  unsigned in_flight;
  bool finished;          /* nothing in flight and nothing more to issue */
  /* interleaved: this connection's streams are index, index + C,
   * index + 2C, ... (C connections), n_streams of them, taken
   * round-robin; next_stream counts the requests generated here.
   */
  unsigned n_streams;
  uint64_t next_stream;
  struct slot *slots;
};

/* The whole run.  Single-threaded: no locking anywhere. */
struct bench {
  struct options opt;
  struct ev_loop *loop;
  struct conn *conns;
  unsigned n_conns;
  unsigned n_finished;

  /* The region as blocks of opt.size bytes. */
  uint64_t region_offset;
  uint64_t blocks;
  uint64_t export_size;

  /* Pattern generator state. */
  bool wrap;              /* a bound was given: sequences may restart */
  uint64_t byte_limit;    /* UINT64_MAX = none */
  uint64_t next_index;    /* requests generated (seq, backward, strided) */
  uint64_t *stream_pos;   /* interleaved, multiconn: per stream */
  uint64_t stream_blocks; /* blocks in each stream's part */
  uint64_t rng;

  /* Progress. */
  bool stopping;          /* time is up or interrupted: issue no more */
  bool interrupted;
  uint64_t issued_bytes;
  uint64_t start_ns, last_completion_ns;

  /* Results of successful requests. */
  uint64_t reads, writes, bytes_read, bytes_written;
  uint64_t *latencies;    /* ns, one per successful request */
  size_t n_latencies, latencies_cap;

  /* The first failure, and how many requests failed. */
  bool failed;
  uint64_t n_errors;
  char *error_message;
};

static void usage_error (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2), noreturn));

static void
usage_error (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "%s: ", PROGRAM);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\nTry '%s --help' for more information.\n", PROGRAM);
  exit (EXIT_USAGE);
}

static void
usage (void)
{
  printf (
"Usage: %s --uri URI [OPTIONS]\n"
"A load generator for NBD servers: keeps --depth requests in flight on each\n"
"of --connections connections (libnbd's asynchronous API in one libev loop)\n"
"and reports throughput, IOPS and latency percentiles.\n"
"\n"
"Target:\n"
"  -u, --uri URI          NBD URI, e.g. nbd+unix:///?socket=/tmp/sock or\n"
"                         nbd://localhost:10809/export.  Repeatable: connection\n"
"                         i uses URI i modulo the number of URIs.  Arguments\n"
"                         that are not options are URIs too.\n"
"  -c, --connections N    number of connections, 1-%d (default: the number\n"
"                         of URIs; for multiconn the number of streams)\n"
"  -d, --depth D          requests in flight per connection, 1-%d (default 1)\n"
"  -s, --size SIZE        request size, 1 byte to 64M (default 64K)\n"
"      --offset OFFSET    start of the region to use (default 0)\n"
"      --length LENGTH    length of the region (default: to the end of the\n"
"                         export, from nbd_get_size)\n"
"\n"
"Pattern:\n"
"  -p, --pattern NAME     seq (default): sequential from the region's start\n"
"                         backward: sequential from the region's end downwards\n"
"                         interleaved: --streams sequential streams over equal\n"
"                           parts of the region, requests taken round-robin\n"
"                           from them; with --connections C, stream s is on\n"
"                           connection s %% C (C <= streams), and each\n"
"                           connection takes its own streams round-robin\n"
"                         multiconn: --streams sequential streams, one per\n"
"                           connection\n"
"                         strided: read --stride-read requests, skip\n"
"                           --stride-skip requests, and so on\n"
"                         random: uniform, aligned to the request size\n"
"                         mixed: random offsets, a --write-ratio share of\n"
"                           writes (needs a writable export)\n"
"      --streams N        streams of interleaved (1-%d, at least\n"
"                         --connections) or multiconn (1-%d, one connection\n"
"                         each) (default 4)\n"
"      --stride-read K    requests read per stride, >= 1 (default 1)\n"
"      --stride-skip S    requests skipped per stride, >= 0 (default 1)\n"
"      --write-ratio R    share of writes in mixed, 0 to 1 (default 0.5)\n"
"      --seed N           seed of random and mixed (default 1)\n"
"\n"
"Bound (issuing stops when one is reached, then requests in flight drain):\n"
"  -b, --bytes BYTES      total bytes to transfer\n"
"  -t, --time SECS        seconds to keep issuing requests (decimals allowed)\n"
"                         With either bound, sequences wrap to the start of\n"
"                         the region at its end.  With neither, one pass over\n"
"                         the region (random, mixed: the region's size).\n"
"\n"
"Output:\n"
"  -j, --json             print one JSON object instead of text\n"
"  -h, --help             print this help and exit\n"
"  -V, --version          print the version and exit\n"
"\n"
"SIZE, OFFSET, LENGTH and BYTES take the suffixes k, M, G, T (powers of\n"
"1024; kiB, MiB... also accepted).  Throughput is given in MB/s (10^6\n"
"bytes) and MiB/s; latencies in ms, exact nearest-rank percentiles.\n"
"Exit status: 0 success, 1 connection or I/O failure, 2 usage error.\n"
"See %s(1) for details.\n",
          PROGRAM, MAX_CONNECTIONS, MAX_DEPTH, MAX_STREAMS, MAX_CONNECTIONS,
          PROGRAM);
}

/* ---- option parsing ----------------------------------------------------- */

static uint64_t
size_option (const char *name, const char *arg, uint64_t min, uint64_t max)
{
  uint64_t v;

  if (rc_parse_size (arg, &v) == -1)
    usage_error ("%s: '%s' is not a size (a number with an optional k, M, G "
                 "or T suffix)", name, arg);
  if (v < min || v > max)
    usage_error ("%s: %s is out of range: expected %" PRIu64 " to %" PRIu64
                 " bytes", name, arg, min, max);
  return v;
}

static uint64_t
uint_option (const char *name, const char *arg, uint64_t min, uint64_t max)
{
  uint64_t v = 0;
  const char *p;

  for (p = arg; *p >= '0' && *p <= '9'; p++) {
    if (v > (UINT64_MAX - (uint64_t) (*p - '0')) / 10)
      usage_error ("%s: '%s' is too large", name, arg);
    v = v * 10 + (uint64_t) (*p - '0');
  }
  if (p == arg || *p != '\0')
    usage_error ("%s: '%s' is not a non-negative integer", name, arg);
  if (v < min || v > max)
    usage_error ("%s: %s is out of range: expected %" PRIu64 " to %" PRIu64,
                 name, arg, min, max);
  return v;
}

static double
double_option (const char *name, const char *arg, double min, double max,
               bool min_exclusive)
{
  char *end;
  double v;

  errno = 0;
  v = strtod (arg, &end);
  if (end == arg || *end != '\0' || errno != 0 || !isfinite (v))
    usage_error ("%s: '%s' is not a number", name, arg);
  if ((min_exclusive ? v <= min : v < min) || v > max)
    usage_error ("%s: %s is out of range: expected %s %g and at most %g",
                 name, arg, min_exclusive ? "more than" : "at least",
                 min, max);
  return v;
}

enum {
  OPT_OFFSET = 256, OPT_LENGTH, OPT_STREAMS, OPT_STRIDE_READ, OPT_STRIDE_SKIP,
  OPT_WRITE_RATIO, OPT_SEED,
};

static const char **uris_to_free;

static void
free_uris (void)
{
  free (uris_to_free);
}

static const struct option long_options[] = {
  { "uri",         required_argument, NULL, 'u' },
  { "connections", required_argument, NULL, 'c' },
  { "depth",       required_argument, NULL, 'd' },
  { "size",        required_argument, NULL, 's' },
  { "bytes",       required_argument, NULL, 'b' },
  { "time",        required_argument, NULL, 't' },
  { "pattern",     required_argument, NULL, 'p' },
  { "offset",      required_argument, NULL, OPT_OFFSET },
  { "length",      required_argument, NULL, OPT_LENGTH },
  { "streams",     required_argument, NULL, OPT_STREAMS },
  { "stride-read", required_argument, NULL, OPT_STRIDE_READ },
  { "stride-skip", required_argument, NULL, OPT_STRIDE_SKIP },
  { "write-ratio", required_argument, NULL, OPT_WRITE_RATIO },
  { "seed",        required_argument, NULL, OPT_SEED },
  { "json",        no_argument,       NULL, 'j' },
  { "help",        no_argument,       NULL, 'h' },
  { "version",     no_argument,       NULL, 'V' },
  { NULL, 0, NULL, 0 },
};

/* The defaults, and room for the URIs. */
static void
options_init (int argc, struct options *o)
{
  *o = (struct options) {
    .pattern = PAT_SEQ, .connections = 1, .depth = 1, .size = 65536,
    .seed = 1, .streams = 4, .stride_read = 1, .stride_skip = 1,
    .write_ratio = 0.5,
  };
  /* Every URI is an argument of argv, so argc bounds their number.  Freed
   * at exit, so that usage errors and --help leave nothing behind either.
   */
  o->uris = calloc ((size_t) argc, sizeof *o->uris);
  if (!o->uris) {
    perror (PROGRAM ": calloc");
    exit (EXIT_FAILURE);
  }
  uris_to_free = o->uris;
  atexit (free_uris);
}

static void
print_version (void)
{
  struct nbd_handle *h = nbd_create ();

  printf ("%s %s\n", PROGRAM, PACKAGE_VERSION);
  if (h)
    printf ("libnbd %s\n", nbd_get_version (h));
  nbd_close (h);
}

/* The target options: where to connect, how much to keep in flight, and
 * the region.  Returns false if c is not one of them.
 */
static bool
target_option (int c, const char *arg, struct options *o)
{
  switch (c) {
  case 'u':
    if (*arg == '\0')
      usage_error ("--uri: the URI is empty");
    o->uris[o->n_uris++] = arg;
    return true;
  case 'c':
    o->connections = (unsigned) uint_option ("--connections", arg, 1,
                                             MAX_CONNECTIONS);
    o->connections_set = true;
    return true;
  case 'd':
    o->depth = (unsigned) uint_option ("--depth", arg, 1, MAX_DEPTH);
    return true;
  case 's':
    o->size = size_option ("--size", arg, 1, MAX_REQUEST_SIZE);
    return true;
  case OPT_OFFSET:
    o->offset = size_option ("--offset", arg, 0, INT64_MAX);
    return true;
  case OPT_LENGTH:
    o->length = size_option ("--length", arg, 1, INT64_MAX);
    o->length_set = true;
    return true;
  default:
    return false;
  }
}

static enum pattern
pattern_by_name (const char *name)
{
  size_t i;

  for (i = 0; i < N_PATTERNS; i++)
    if (strcmp (name, pattern_names[i]) == 0)
      return (enum pattern) i;
  usage_error ("--pattern: unknown pattern '%s': expected seq, "
               "interleaved, multiconn, random, strided, backward or "
               "mixed", name);
}

/* The pattern and its parameters.  Returns false if c is not one of them. */
static bool
pattern_option (int c, const char *arg, struct options *o)
{
  switch (c) {
  case 'p':
    o->pattern = pattern_by_name (arg);
    return true;
  case OPT_STREAMS:
    o->streams = (unsigned) uint_option ("--streams", arg, 1, MAX_STREAMS);
    o->streams_set = true;
    return true;
  case OPT_STRIDE_READ:
    o->stride_read = uint_option ("--stride-read", arg, 1, INT64_MAX);
    o->stride_read_set = true;
    return true;
  case OPT_STRIDE_SKIP:
    o->stride_skip = uint_option ("--stride-skip", arg, 0, INT64_MAX);
    o->stride_skip_set = true;
    return true;
  case OPT_WRITE_RATIO:
    o->write_ratio = double_option ("--write-ratio", arg, 0, 1, false);
    o->write_ratio_set = true;
    return true;
  case OPT_SEED:
    o->seed = uint_option ("--seed", arg, 0, UINT64_MAX);
    return true;
  default:
    return false;
  }
}

/* The bounds, the output options, and getopt's errors: every c that
 * target_option and pattern_option do not take.
 */
static void
other_option (int c, const char *arg, char *argv[], struct options *o)
{
  switch (c) {
  case 'b':
    o->bytes = size_option ("--bytes", arg, 1, INT64_MAX);
    o->bytes_set = true;
    break;
  case 't':
    o->time = double_option ("--time", arg, 0, 1e7, true);
    o->time_set = true;
    break;
  case 'j':
    o->json = true;
    break;
  case 'h':
    usage ();
    exit (EXIT_SUCCESS);
  case 'V':
    print_version ();
    exit (EXIT_SUCCESS);
  case ':':
    usage_error ("option '%s' needs an argument", argv[optind - 1]);
  default:
    if (optopt && optopt < 256)
      usage_error ("unknown option '-%c'", optopt);
    usage_error ("unknown option '%s'", argv[optind - 1]);
  }
}

/* The options that only some patterns take. */
static void
check_pattern_options (const struct options *o)
{
  if (o->streams_set && o->pattern != PAT_INTERLEAVED &&
      o->pattern != PAT_MULTICONN)
    usage_error ("--streams is only for --pattern interleaved or multiconn");
  if ((o->stride_read_set || o->stride_skip_set) &&
      o->pattern != PAT_STRIDED)
    usage_error ("--stride-read and --stride-skip are only for "
                 "--pattern strided");
  if (o->write_ratio_set && o->pattern != PAT_MIXED)
    usage_error ("--write-ratio is only for --pattern mixed");
}

/* The number of connections, from --connections, --streams and the URIs,
 * and whether they fit the pattern and the buffer memory limit.
 */
static void
settle_connections (struct options *o)
{
  if (o->pattern == PAT_MULTICONN) {
    /* One stream per connection: whichever of the two is given sets both. */
    if (o->streams_set && o->connections_set &&
        o->streams != o->connections)
      usage_error ("--pattern multiconn runs one stream per connection: "
                   "--streams %u and --connections %u disagree",
                   o->streams, o->connections);
    if (o->connections_set)
      o->streams = o->connections;
    else if (!o->streams_set && o->n_uris > 1)
      o->streams = (unsigned) o->n_uris;   /* < argc */
    if (o->streams > MAX_CONNECTIONS)
      usage_error ("--streams: multiconn opens one connection per stream, "
                   "at most %d", MAX_CONNECTIONS);
    o->connections = o->streams;
  }
  else if (!o->connections_set)
    o->connections = o->n_uris > MAX_CONNECTIONS ? MAX_CONNECTIONS
                                                 : (unsigned) o->n_uris;
  if (o->pattern == PAT_INTERLEAVED && o->connections > o->streams)
    usage_error ("--pattern interleaved spreads --streams %u over "
                 "--connections %u: every connection needs a stream, so "
                 "give at least as many streams as connections",
                 o->streams, o->connections);
  if (o->n_uris > o->connections)
    usage_error ("%zu URIs given for %u connection%s: each URI needs a "
                 "connection", o->n_uris, o->connections,
                 o->connections == 1 ? "" : "s");

  if ((uint64_t) o->connections * o->depth * o->size > MAX_BUFFER_MEMORY)
    usage_error ("--connections x --depth x --size needs %" PRIu64
                 " bytes of buffers, more than the limit of %" PRIu64,
                 (uint64_t) o->connections * o->depth * o->size,
                 MAX_BUFFER_MEMORY);
}

static void
parse_options (int argc, char *argv[], struct options *o)
{
  int c;

  options_init (argc, o);
  opterr = 0;
  while ((c = getopt_long (argc, argv, ":u:c:d:s:b:t:p:jhV",
                           long_options, NULL)) != -1) {
    if (!target_option (c, optarg, o) && !pattern_option (c, optarg, o))
      other_option (c, optarg, argv, o);
  }
  for (; optind < argc; optind++) {
    if (*argv[optind] == '\0')
      usage_error ("the URI is empty");
    o->uris[o->n_uris++] = argv[optind];
  }

  if (o->n_uris == 0)
    usage_error ("no server given: use --uri URI");
  check_pattern_options (o);
  settle_connections (o);
}

/* ---- random numbers (the clock: rc_now_ns) ------------------------------ */

/* splitmix64: small, fast, and the same sequence for the same --seed. */
static uint64_t
rng_next (uint64_t *state)
{
  uint64_t z = (*state += UINT64_C (0x9e3779b97f4a7c15));

  z = (z ^ (z >> 30)) * UINT64_C (0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C (0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* Uniform in [0, n), without the modulo bias. */
static uint64_t
rng_below (uint64_t *state, uint64_t n)
{
  uint64_t threshold = -n % n, r;

  do
    r = rng_next (state);
  while (r < threshold);
  return r % n;
}

/* Uniform in [0, 1). */
static double
rng_unit (uint64_t *state)
{
  return (double) (rng_next (state) >> 11) * 0x1.0p-53;
}

/* ---- failures ---------------------------------------------------------- */

static void fail (struct bench *b, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

/* Record a failure: the first one is the one reported; issuing stops and
 * the loop ends at once (requests in flight are abandoned with their
 * connections).
 */
static void
fail (struct bench *b, const char *fmt, ...)
{
  va_list ap;

  b->n_errors++;
  if (!b->failed) {
    b->failed = true;
    va_start (ap, fmt);
    if (vasprintf (&b->error_message, fmt, ap) == -1)
      b->error_message = NULL;
    va_end (ap);
    ev_break (b->loop, EVBREAK_ALL);
  }
}

/* ---- pattern generator ------------------------------------------------- */

/* Reads per pass of the strided pattern: whole strides, plus the reads of
 * the partial stride at the end of the region.
 */
static uint64_t
strided_reads_per_pass (const struct bench *b)
{
  uint64_t K = b->opt.stride_read, S = b->opt.stride_skip;
  uint64_t period = K + S;   /* no overflow: both <= INT64_MAX */
  uint64_t tail = b->blocks % period;

  return b->blocks / period * K + (tail < K ? tail : K);
}

/* The next block for connection c, or false when the pattern has no more
 * for it (one pass done without a bound).
 */
static bool
next_block (struct bench *b, struct conn *c, uint64_t *block, bool *is_write)
{
  uint64_t k, stream, pos;

  *is_write = false;
  switch (b->opt.pattern) {
  case PAT_SEQ:
  case PAT_BACKWARD:
    k = b->next_index;
    if (!b->wrap && k >= b->blocks)
      return false;
    b->next_index++;
    k %= b->blocks;
    *block = b->opt.pattern == PAT_SEQ ? k : b->blocks - 1 - k;
    return true;

  case PAT_STRIDED: {
    uint64_t per_pass = strided_reads_per_pass (b);
    uint64_t K = b->opt.stride_read, period = K + b->opt.stride_skip;

    k = b->next_index;
    if (!b->wrap && k >= per_pass)
      return false;
    b->next_index++;
    k %= per_pass;
    *block = k / K * period + k % K;
    return true;
  }

  case PAT_INTERLEAVED:
  case PAT_MULTICONN:
    /* interleaved: stream s belongs to connection s % C, and each
     * connection takes its own streams round-robin (with C = 1: stream
     * 0, 1, ..., N-1, 0, 1, ...).  All streams have the same length, so
     * without a bound a connection's streams end in the same round.
     */
    if (b->opt.pattern == PAT_INTERLEAVED)
      stream = c->index + (c->next_stream % c->n_streams) * b->n_conns;
    else
      stream = c->index;
    pos = b->stream_pos[stream];
    if (!b->wrap && pos >= b->stream_blocks)
      return false;
    b->stream_pos[stream]++;
    if (b->opt.pattern == PAT_INTERLEAVED)
      c->next_stream++;
    *block = stream * b->stream_blocks + pos % b->stream_blocks;
    return true;

  case PAT_RANDOM:
  case PAT_MIXED:
    /* Bounded by bytes only (there is always a byte limit or a time). */
    *block = rng_below (&b->rng, b->blocks);
    if (b->opt.pattern == PAT_MIXED)
      *is_write = rng_unit (&b->rng) < b->opt.write_ratio;
    return true;
  }
  return false;
}

/* Deterministic write data: at every 8-byte aligned offset of the export,
 * its offset as a big-endian 64-bit number, the layout of
 * nbdkit-pattern-plugin(1), so a region written by mixed reads back like
 * the pattern plugin.
 */
static void
fill_pattern (unsigned char *buf, uint64_t offset, uint64_t len)
{
  uint64_t i, pos, word;

  for (i = 0; i < len; i++) {
    pos = offset + i;
    word = pos & ~UINT64_C (7);
    buf[i] = (unsigned char) (word >> (8 * (7 - (pos & 7))));
  }
}

/* ---- libnbd <-> libev glue --------------------------------------------- */

static void io_cb (struct ev_loop *loop, ev_io *w, int revents);

/* Make the watcher's events what libnbd wants next.  Called after every
 * notify and every submission, since both can change the direction.
 */
static void
update_watcher (struct bench *b, struct conn *c)
{
  unsigned dir = nbd_aio_get_direction (c->nbd);
  int events = 0;

  if (dir & LIBNBD_AIO_DIRECTION_READ)
    events |= EV_READ;
  if (dir & LIBNBD_AIO_DIRECTION_WRITE)
    events |= EV_WRITE;
  /* Finished and idle: nothing will come, stop watching. */
  if (c->finished)
    events = 0;
  if (events == c->events)
    return;
  if (c->events)
    ev_io_stop (b->loop, &c->io);
  c->events = events;
  if (events) {
    ev_io_set (&c->io, c->io.fd, events);
    ev_io_start (b->loop, &c->io);
  }
}

static struct bench *the_bench;

/* Completion callback: called by libnbd, with the handle locked, so it
 * only records; the slot is refilled later by refill().
 */
static int
completion_cb (void *user_data, int *error)
{
  struct slot *s = user_data;
  struct conn *c = s->conn;
  struct bench *b = the_bench;
  uint64_t end = rc_now_ns ();

  s->busy = false;
  c->in_flight--;
  if (end > b->last_completion_ns)
    b->last_completion_ns = end;
  if (*error) {
    fail (b, "%s failed at offset %" PRIu64 " length %" PRIu64 " on %s: %s",
          s->is_write ? "write" : "read", s->offset, s->len, c->uri,
          strerror (*error));
    return 1;
  }
  if (b->n_latencies == b->latencies_cap) {
    size_t cap = b->latencies_cap ? b->latencies_cap * 2 : 4096;
    uint64_t *p = realloc (b->latencies, cap * sizeof *p);

    if (!p) {
      fail (b, "out of memory recording latencies");
      return 1;
    }
    b->latencies = p;
    b->latencies_cap = cap;
  }
  b->latencies[b->n_latencies++] = end - s->start_ns;
  if (s->is_write) {
    b->writes++;
    b->bytes_written += s->len;
  }
  else {
    b->reads++;
    b->bytes_read += s->len;
  }
  return 1;   /* retire the command: no nbd_aio_command_completed needed */
}

/* Fill the free slots of connection c from the pattern, unless stopping,
 * then mark c finished if nothing is in flight.
 */
static void
refill (struct bench *b, struct conn *c)
{
  unsigned i;

  for (i = 0; i < b->opt.depth && !b->failed && !b->stopping; i++) {
    struct slot *s = &c->slots[i];
    uint64_t block, len = b->opt.size;
    bool is_write;
    int64_t cookie;

    if (s->busy)
      continue;
    if (b->issued_bytes >= b->byte_limit)
      break;
    if (!next_block (b, c, &block, &is_write))
      break;
    if (b->byte_limit - b->issued_bytes < len)
      len = b->byte_limit - b->issued_bytes;

    s->offset = b->region_offset + block * b->opt.size;
    s->len = len;
    s->is_write = is_write;
    s->busy = true;
    c->in_flight++;
    b->issued_bytes += len;
    nbd_completion_callback cb = { .callback = completion_cb, .user_data = s };
    if (is_write) {
      fill_pattern ((unsigned char *) s->buf, s->offset, len);
      s->start_ns = rc_now_ns ();
      cookie = nbd_aio_pwrite (c->nbd, s->buf, len, s->offset, cb, 0);
    }
    else {
      s->start_ns = rc_now_ns ();
      cookie = nbd_aio_pread (c->nbd, s->buf, len, s->offset, cb, 0);
    }
    if (cookie == -1) {
      /* Not submitted: the callback will never run for it. */
      s->busy = false;
      c->in_flight--;
      fail (b, "%s at offset %" PRIu64 " length %" PRIu64 " on %s could "
            "not be submitted: %s", is_write ? "write" : "read",
            s->offset, len, c->uri, nbd_get_error ());
    }
  }

  if (!c->finished && c->in_flight == 0 && !b->failed) {
    c->finished = true;
    if (++b->n_finished == b->n_conns)
      ev_break (b->loop, EVBREAK_ALL);
  }
}

static void
io_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  struct conn *c = w->data;
  struct bench *b = the_bench;
  int r = 0;

  /* When both are ready, read first: a reply may change what to write. */
  if (revents & EV_READ)
    r = nbd_aio_notify_read (c->nbd);
  else if (revents & EV_WRITE)
    r = nbd_aio_notify_write (c->nbd);
  if (r == -1) {
    fail (b, "connection to %s failed: %s", c->uri, nbd_get_error ());
    return;
  }
  if (b->failed)
    return;
  refill (b, c);
  update_watcher (b, c);
}

/* Issue no more requests; those in flight drain. */
static void
stop_issuing (struct bench *b)
{
  unsigned i;

  b->stopping = true;
  /* Idle connections will never get another event: finish them now. */
  for (i = 0; i < b->n_conns; i++) {
    refill (b, &b->conns[i]);
    update_watcher (b, &b->conns[i]);
  }
}

static void
timer_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  stop_issuing (w->data);
}

/* The first ^C ends the run early but still reports; the second gives up. */
static void
sigint_cb (struct ev_loop *loop, ev_signal *w, int revents)
{
  struct bench *b = w->data;

  if (b->interrupted) {
    fail (b, "interrupted twice: not waiting for the requests in flight");
    return;
  }
  b->interrupted = true;
  stop_issuing (b);
}

/* ---- setup, run, report ------------------------------------------------ */

/* Opens connection c to its URI and gets the export size. */
static int
open_connection (struct conn *c, int64_t *size)
{
  c->nbd = nbd_create ();
  if (!c->nbd) {
    fprintf (stderr, "%s: nbd_create: %s\n", PROGRAM, nbd_get_error ());
    return -1;
  }
  /* The contents of a failed read are not used: skip libnbd's memset. */
  nbd_set_pread_initialize (c->nbd, false);
  if (nbd_connect_uri (c->nbd, c->uri) == -1) {
    fprintf (stderr, "%s: cannot connect to %s: %s\n", PROGRAM, c->uri,
             nbd_get_error ());
    return -1;
  }
  *size = nbd_get_size (c->nbd);
  if (*size == -1) {
    fprintf (stderr, "%s: %s: cannot get the export size: %s\n", PROGRAM,
             c->uri, nbd_get_error ());
    return -1;
  }
  return 0;
}

/* Whether the export behind c suits the run: the same size as the first
 * connection's (which sets b->export_size), writable if the pattern
 * writes, and taking requests of --size.
 */
static int
check_export (struct bench *b, struct conn *c, int64_t size)
{
  const struct options *o = &b->opt;
  int64_t max;

  if (c->index == 0)
    b->export_size = (uint64_t) size;
  else if ((uint64_t) size != b->export_size) {
    fprintf (stderr, "%s: %s has %" PRIi64 " bytes but %s has %" PRIu64
             ": every connection must see the same export size\n",
             PROGRAM, c->uri, size, b->conns[0].uri, b->export_size);
    return -1;
  }
  if (o->pattern == PAT_MIXED && o->write_ratio > 0 &&
      nbd_is_read_only (c->nbd) != 0) {
    fprintf (stderr, "%s: %s: the export is read-only, but --pattern mixed "
             "with --write-ratio %g writes: use a writable export or "
             "--write-ratio 0\n", PROGRAM, c->uri, o->write_ratio);
    return -1;
  }
  max = nbd_get_block_size (c->nbd, LIBNBD_SIZE_MAXIMUM);
  if (max > 0 && o->size > (uint64_t) max) {
    fprintf (stderr, "%s: %s: --size %" PRIu64 " is larger than the "
             "server's maximum request size %" PRIi64 "\n", PROGRAM,
             c->uri, o->size, max);
    return -1;
  }
  return 0;
}

/* The watcher on c's socket (started later) and c's request slots. */
static int
prepare_io (struct conn *c, const struct options *o)
{
  unsigned j;
  int fd;

  fd = nbd_aio_get_fd (c->nbd);
  if (fd == -1) {
    fprintf (stderr, "%s: %s: nbd_aio_get_fd: %s\n", PROGRAM, c->uri,
             nbd_get_error ());
    return -1;
  }
  ev_io_init (&c->io, io_cb, fd, 0);
  c->io.data = c;

  c->slots = calloc (o->depth, sizeof *c->slots);
  if (!c->slots) {
    perror (PROGRAM ": calloc");
    return -1;
  }
  for (j = 0; j < o->depth; j++) {
    c->slots[j].conn = c;
    c->slots[j].buf = malloc (o->size);
    if (!c->slots[j].buf) {
      perror (PROGRAM ": malloc");
      return -1;
    }
  }
  return 0;
}

/* On failure, what is set up so far is left for cleanup to free. */
static int
connect_all (struct bench *b)
{
  const struct options *o = &b->opt;
  unsigned i;

  b->conns = calloc (o->connections, sizeof *b->conns);
  if (!b->conns) {
    perror (PROGRAM ": calloc");
    return -1;
  }
  b->n_conns = o->connections;
  for (i = 0; i < b->n_conns; i++) {
    struct conn *c = &b->conns[i];
    int64_t size;

    c->index = i;
    c->uri = o->uris[i % o->n_uris];
    /* Streams i, i + C, i + 2C, ... below o->streams (>= C, checked). */
    if (o->pattern == PAT_INTERLEAVED)
      c->n_streams = (o->streams - i + o->connections - 1) / o->connections;
    if (open_connection (c, &size) == -1 ||
        check_export (b, c, size) == -1 ||
        prepare_io (c, o) == -1)
      return -1;
  }
  return 0;
}

/* The region and the pattern's shape, now that the export size is known. */
static int
plan (struct bench *b)
{
  const struct options *o = &b->opt;
  uint64_t length;

  if (o->offset >= b->export_size) {
    fprintf (stderr, "%s: --offset %" PRIu64 " is not inside the export "
             "(%" PRIu64 " bytes)\n", PROGRAM, o->offset, b->export_size);
    return -1;
  }
  length = o->length_set ? o->length : b->export_size - o->offset;
  if (length > b->export_size - o->offset) {
    fprintf (stderr, "%s: --offset %" PRIu64 " + --length %" PRIu64
             " goes past the end of the export (%" PRIu64 " bytes)\n",
             PROGRAM, o->offset, length, b->export_size);
    return -1;
  }
  if (length < o->size) {
    fprintf (stderr, "%s: the region (%" PRIu64 " bytes) is smaller than "
             "the request size (%" PRIu64 " bytes)\n", PROGRAM, length,
             o->size);
    return -1;
  }
  b->region_offset = o->offset;
  b->blocks = length / o->size;

  if (o->pattern == PAT_INTERLEAVED || o->pattern == PAT_MULTICONN) {
    if (o->streams > b->blocks) {
      fprintf (stderr, "%s: %u streams need at least %u requests in the "
               "region, which holds %" PRIu64 "\n", PROGRAM, o->streams,
               o->streams, b->blocks);
      return -1;
    }
    b->stream_blocks = b->blocks / o->streams;
    b->stream_pos = calloc (o->streams, sizeof *b->stream_pos);
    if (!b->stream_pos) {
      perror (PROGRAM ": calloc");
      return -1;
    }
  }

  b->wrap = o->bytes_set || o->time_set;
  if (o->bytes_set)
    b->byte_limit = o->bytes;
  else if (!o->time_set &&
           (o->pattern == PAT_RANDOM || o->pattern == PAT_MIXED))
    b->byte_limit = b->blocks * o->size;   /* as many bytes as one pass */
  else
    b->byte_limit = UINT64_MAX;
  b->rng = o->seed;
  return 0;
}

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[n], in ms: the smallest value
 * with at least pct% of the values at or below it.
 */
static double
percentile_ms (const uint64_t *v, size_t n, unsigned pct)
{
  size_t rank;

  if (n == 0)
    return 0;
  rank = (size_t) (((uint64_t) pct * n + 99) / 100);   /* ceil (pct/100 n) */
  if (rank < 1)
    rank = 1;
  if (rank > n)
    rank = n;
  return (double) v[rank - 1] / 1e6;
}

static void
json_string (FILE *fp, const char *s)
{
  const unsigned char *p;

  fputc ('"', fp);
  for (p = (const unsigned char *) s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf (fp, "\\%c", *p);
    else if (*p < 0x20)
      fprintf (fp, "\\u%04x", *p);
    else
      fputc (*p, fp);
  }
  fputc ('"', fp);
}

/* The figures of a run, as both reports print them. */
struct results {
  uint64_t requests, bytes;
  double secs, mbps, mibps, iops;
  double p50, p90, p99, maxms, minms, mean;   /* latencies in ms */
};

/* Sorts b->latencies. */
static void
summarise (struct bench *b, struct results *r)
{
  uint64_t elapsed_ns = b->last_completion_ns > b->start_ns
    ? b->last_completion_ns - b->start_ns : 0;
  size_t i;

  r->requests = b->reads + b->writes;
  r->bytes = b->bytes_read + b->bytes_written;
  r->secs = (double) elapsed_ns / 1e9;
  r->mbps = r->secs > 0 ? (double) r->bytes / r->secs / 1e6 : 0;
  r->mibps = r->secs > 0 ? (double) r->bytes / r->secs / 1048576.0 : 0;
  r->iops = r->secs > 0 ? (double) r->requests / r->secs : 0;

  qsort (b->latencies, b->n_latencies, sizeof *b->latencies, cmp_u64);
  r->p50 = percentile_ms (b->latencies, b->n_latencies, 50);
  r->p90 = percentile_ms (b->latencies, b->n_latencies, 90);
  r->p99 = percentile_ms (b->latencies, b->n_latencies, 99);
  r->maxms = percentile_ms (b->latencies, b->n_latencies, 100);
  r->minms = b->n_latencies ? (double) b->latencies[0] / 1e6 : 0;
  r->mean = 0;
  for (i = 0; i < b->n_latencies; i++)
    r->mean += (double) b->latencies[i] / 1e6;
  if (b->n_latencies)
    r->mean /= (double) b->n_latencies;
}

static void
report_json (const struct bench *b, const struct results *r)
{
  const struct options *o = &b->opt;
  size_t i;

  printf ("{\"program\": \"%s\", \"version\": \"%s\", \"uris\": [",
          PROGRAM, PACKAGE_VERSION);
  for (i = 0; i < o->n_uris; i++) {
    if (i)
      printf (", ");
    json_string (stdout, o->uris[i]);
  }
  printf ("], \"pattern\": \"%s\", \"connections\": %u, \"depth\": %u, "
          "\"request_size\": %" PRIu64 ", ",
          pattern_names[o->pattern], b->n_conns, o->depth, o->size);
  if (o->pattern == PAT_INTERLEAVED || o->pattern == PAT_MULTICONN)
    printf ("\"streams\": %u, ", o->streams);
  if (o->pattern == PAT_STRIDED)
    printf ("\"stride_read\": %" PRIu64 ", \"stride_skip\": %" PRIu64 ", ",
            o->stride_read, o->stride_skip);
  if (o->pattern == PAT_MIXED)
    printf ("\"write_ratio\": %g, ", o->write_ratio);
  if (o->pattern == PAT_RANDOM || o->pattern == PAT_MIXED)
    printf ("\"seed\": %" PRIu64 ", ", o->seed);
  printf ("\"export_size\": %" PRIu64 ", \"offset\": %" PRIu64 ", "
          "\"length\": %" PRIu64 ", ",
          b->export_size, b->region_offset, b->blocks * o->size);
  printf ("\"interrupted\": %s, \"requests\": %" PRIu64 ", "
          "\"reads\": %" PRIu64 ", \"writes\": %" PRIu64 ", "
          "\"bytes\": %" PRIu64 ", \"bytes_read\": %" PRIu64 ", "
          "\"bytes_written\": %" PRIu64 ", \"elapsed_s\": %.6f, "
          "\"mb_per_s\": %.3f, \"mib_per_s\": %.3f, \"iops\": %.1f, ",
          b->interrupted ? "true" : "false", r->requests, b->reads,
          b->writes, r->bytes, b->bytes_read, b->bytes_written, r->secs,
          r->mbps, r->mibps, r->iops);
  printf ("\"latency_ms\": {\"min\": %.4f, \"mean\": %.4f, \"p50\": %.4f, "
          "\"p90\": %.4f, \"p99\": %.4f, \"max\": %.4f}}\n",
          r->minms, r->mean, r->p50, r->p90, r->p99, r->maxms);
}

static void
report_text (const struct bench *b, const struct results *r)
{
  const struct options *o = &b->opt;

  printf ("pattern:     %s", pattern_names[o->pattern]);
  if (o->pattern == PAT_INTERLEAVED || o->pattern == PAT_MULTICONN)
    printf (", %u streams", o->streams);
  if (o->pattern == PAT_STRIDED)
    printf (", read %" PRIu64 " skip %" PRIu64, o->stride_read,
            o->stride_skip);
  if (o->pattern == PAT_MIXED)
    printf (", write ratio %g", o->write_ratio);
  if (o->pattern == PAT_RANDOM || o->pattern == PAT_MIXED)
    printf (", seed %" PRIu64, o->seed);
  printf ("\n");
  printf ("target:      %s%s\n", o->uris[0], o->n_uris > 1 ? " ..." : "");
  printf ("setup:       %u connection%s x depth %u, request size %" PRIu64
          ", region %" PRIu64 "+%" PRIu64 "\n",
          b->n_conns, b->n_conns == 1 ? "" : "s", o->depth, o->size,
          b->region_offset, b->blocks * o->size);
  printf ("requests:    %" PRIu64 " (%" PRIu64 " reads, %" PRIu64
          " writes)%s\n", r->requests, b->reads, b->writes,
          b->interrupted ? ", interrupted" : "");
  printf ("bytes:       %" PRIu64 " (%" PRIu64 " read, %" PRIu64
          " written)\n", r->bytes, b->bytes_read, b->bytes_written);
  printf ("elapsed:     %.3f s\n", r->secs);
  printf ("throughput:  %.2f MB/s, %.2f MiB/s\n", r->mbps, r->mibps);
  printf ("IOPS:        %.1f\n", r->iops);
  printf ("latency ms:  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  "
          "(min %.3f, mean %.3f)\n", r->p50, r->p90, r->p99, r->maxms,
          r->minms, r->mean);
}

static void
report (struct bench *b)
{
  struct results r;

  summarise (b, &r);
  if (b->opt.json)
    report_json (b, &r);
  else
    report_text (b, &r);
}

static void
cleanup (struct bench *b)
{
  unsigned i, j;

  for (i = 0; i < b->n_conns; i++) {
    struct conn *c = &b->conns[i];

    if (c->events)
      ev_io_stop (b->loop, &c->io);
    if (c->nbd) {
      /* Say goodbye properly when the connection is idle and healthy. */
      if (!b->failed && c->in_flight == 0 && nbd_aio_is_ready (c->nbd))
        nbd_shutdown (c->nbd, 0);
      nbd_close (c->nbd);
    }
    if (c->slots)
      for (j = 0; j < b->opt.depth; j++)
        free (c->slots[j].buf);
    free (c->slots);
  }
  free (b->conns);
  free (b->stream_pos);
  free (b->latencies);
  free (b->error_message);
}

int
main (int argc, char *argv[])
{
  struct bench b = { 0 };
  ev_timer timer;
  ev_signal sigint;
  unsigned i;
  int status = EXIT_FAILURE;

  parse_options (argc, argv, &b.opt);
  signal (SIGPIPE, SIG_IGN);
  the_bench = &b;
  b.loop = EV_DEFAULT;
  if (!b.loop) {
    fprintf (stderr, "%s: cannot initialise libev\n", PROGRAM);
    goto out;
  }

  if (connect_all (&b) == -1 || plan (&b) == -1)
    goto out;

  ev_timer_init (&timer, timer_cb, b.opt.time_set ? b.opt.time : 0, 0);
  timer.data = &b;
  ev_signal_init (&sigint, sigint_cb, SIGINT);
  sigint.data = &b;
  ev_signal_start (b.loop, &sigint);
  ev_unref (b.loop);   /* the signal watcher alone does not keep us running */

  ev_now_update (b.loop);
  b.start_ns = b.last_completion_ns = rc_now_ns ();
  if (b.opt.time_set)
    ev_timer_start (b.loop, &timer);
  for (i = 0; i < b.n_conns; i++) {
    refill (&b, &b.conns[i]);
    update_watcher (&b, &b.conns[i]);
  }
  if (b.n_finished < b.n_conns && !b.failed)
    ev_run (b.loop, 0);

  if (b.opt.time_set)
    ev_timer_stop (b.loop, &timer);
  ev_ref (b.loop);
  ev_signal_stop (b.loop, &sigint);

  if (b.failed) {
    fprintf (stderr, "%s: %s\n", PROGRAM,
             b.error_message ? b.error_message : "failed (out of memory)");
    if (b.n_errors > 1)
      fprintf (stderr, "%s: %" PRIu64 " requests failed in all\n", PROGRAM,
               b.n_errors);
    goto out;
  }
  report (&b);
  if (fflush (stdout) == EOF || ferror (stdout)) {
    perror (PROGRAM ": stdout");
    goto out;
  }
  status = EXIT_SUCCESS;

 out:
  cleanup (&b);
  if (b.loop)
    ev_loop_destroy (b.loop);
  return status;
}
