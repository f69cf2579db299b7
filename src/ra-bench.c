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
 *
 * In pieces, one concern each (src/ra-bench.h is what they share): this
 * file the options and main, src/bench-pattern.c the region and the
 * pattern generator, src/bench-engine.c the connections and the libev
 * loop that drives them, src/bench-report.c the figures and the report.
 */

#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libnbd.h>

#include "racache/config.h"
#include "ra-bench.h"

/* Exit codes: 1 for a failed run, 2 for a usage error. */
#define EXIT_USAGE 2

#define MAX_REQUEST_SIZE  (64 * 1024 * 1024)  /* nbdkit's own limit */
#define MAX_DEPTH         1024
#define MAX_CONNECTIONS   256
#define MAX_STREAMS       65536
#define MAX_BUFFER_MEMORY (UINT64_C (2) << 30)

const char *const pattern_names[] = {
  [PAT_SEQ] = "seq", [PAT_INTERLEAVED] = "interleaved",
  [PAT_MULTICONN] = "multiconn", [PAT_RANDOM] = "random",
  [PAT_STRIDED] = "strided", [PAT_BACKWARD] = "backward",
  [PAT_MIXED] = "mixed",
};
#define N_PATTERNS (sizeof pattern_names / sizeof pattern_names[0])

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
"  -t, --time SECS        seconds to keep issuing requests (decimals, or a unit\n"
"                         ns, us, ms or s: 500ms)\n"
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
    {
      uint64_t ns;

      /* Seconds (decimals allowed), or a number and a unit ns, us, ms
       * or s, as ra-trace's times.
       */
      if (rc_parse_duration (arg, UINT64_C (1000000000),
                             UINT64_C (10000000) * 1000000000, &ns) == -1 ||
          ns == 0)
        usage_error ("--time: '%s' is not a time: seconds (such as 1.5), or "
                     "a number and a unit ns, us, ms or s, more than 0 and "
                     "at most 10000000s", arg);
      o->time = (double) ns / 1e9;
      o->time_set = true;
    }
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

int
main (int argc, char *argv[])
{
  struct bench b = { 0 };
  int status = EXIT_FAILURE;

  parse_options (argc, argv, &b.opt);
  signal (SIGPIPE, SIG_IGN);
  if (bench_connect (&b) == -1 || bench_plan (&b) == -1)
    goto out;
  bench_run (&b);

  if (b.failed) {
    fprintf (stderr, "%s: %s\n", PROGRAM,
             b.error_message ? b.error_message : "failed (out of memory)");
    if (b.n_errors > 1)
      fprintf (stderr, "%s: %" PRIu64 " requests failed in all\n", PROGRAM,
               b.n_errors);
    goto out;
  }
  bench_report (&b);
  if (fflush (stdout) == EOF || ferror (stdout)) {
    perror (PROGRAM ": stdout");
    goto out;
  }
  status = EXIT_SUCCESS;

 out:
  bench_cleanup (&b);
  return status;
}
