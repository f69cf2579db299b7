/* ra-trace: replay an access trace through the readahead engine.
 *
 * A tuning tool.  It reads a trace of client reads (a plain list of
 * "OFFSET LENGTH [STREAM]" lines, or the log written by nbdkit's log
 * filter), replays it through the filter's read path over its page cache
 * without data and a simulated backend, and prints every window the
 * engine decides and a summary, so that ra-max, ra-io-max, the cache
 * size and the page size can be tried offline on real traffic.
 *
 * In pieces, one concern each: src/trace.c parses the trace (and returns
 * errors), src/trace-sim.c is the replay (the virtual clock and backend,
 * the window rows and the summary), this file the options, the heading
 * and main.  The options that are the filter's parameters take its
 * defaults and its checks (src/config.c), and --config reads its
 * configuration file, overridden by them as the filter's is
 * (struct rc_given).
 */

#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "racache/config.h"
#include "trace.h"
#include "trace-sim.h"

#define PROG "ra-trace"

/* --latency and --client-gap: at most an hour. */
#define MAX_TIME_NS        (UINT64_C(3600) * 1000000000)

/* The simulation's fatal errors, and this program's: one message, exit. */
void
rt_fatal (const char *fmt, ...)
{
  va_list ap;

  fflush (stdout);
  fputs (PROG ": ", stderr);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
  exit (EXIT_FAILURE);
}

#define die rt_fatal

/* ---- options ------------------------------------------------------------ */

/* The --help text: one printf of the text (longer than 80 lines, as
 * the text is).
 */
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
"Options (SIZE: bytes, or with a binary suffix k, M, G, T (either case)).\n"
"The filter's parameters, with its defaults and checks, are --page-size\n"
"(ra-cache-page-size), --ra-max, --io-max (ra-io-max), --cache-size\n"
"(ra-cache-size), --mode (ra-mode), --parallel (ra-max-background):\n"
"  --config=FILE       the filter's configuration file (ra-cache-config);\n"
"                      options override its keys\n"
"  --page-size=SIZE    cache page, a power of two from 512 to 1M [4K]\n"
"  --ra-max=SIZE       largest window, whole pages, 0 (off) to 1G, at most\n"
"                      half of --cache-size [8M]\n"
"  --io-max=SIZE       largest backend request, whole pages, one page to\n"
"                      32M [1M]\n"
"  --cache-size=SIZE   simulated cache, at least one page (rounded down to\n"
"                      whole pages) [256M]\n"
"  --export-size=SIZE  export size [the largest size= of the log's Connect\n"
"                      lines and the end of the last page read, whichever\n"
"                      is larger]; a read past a given size is an error\n"
"  --mode=MODE         kernel: ra-max is every stream's largest window (as\n"
"                      Linux); adaptive: each stream's largest window (its\n"
"                      cap) follows its measured needs, up to ra-max\n"
"                      [adaptive]\n"
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
"Simulation: the read path of doc/readahead-rules.md, page by page: a page not\n"
"cached is a sync trigger, a page with the marker an async trigger (the\n"
"marker is cleared); windows are submitted at once and their pages are up\n"
"to date at once.  The cache is the filter's page cache (src/pagecache.c,\n"
"without data): its shards and eviction rule (pages read once first, then\n"
"unused or active pages, oldest first, unused ageing twice as fast) and\n"
"each stream's drop-behind.\n"
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
"    marker    the page that got the marker, or - (none, or it was cached)\n"
"    inserted  pages the window inserted (cached pages are skipped)\n"
"    batches   backend requests it made (at most io-max each; a batch\n"
"              never mixes the sync and the async part)\n"
"  then \"# summary\" and lines \"KEY: NUMBER [(PERCENT of WHAT)]\":\n"
"    reads, streams, client bytes, page hits, page misses, sync triggers,\n"
"    async triggers, windows, windows A .. G / off / none, pages inserted,\n"
"    sync part pages, pages read ahead (async part pages inserted), read\n"
"    ahead never used (= read ahead evicted unused + read ahead unused at\n"
"    end), sync part unused at end, pages evicted, backend requests, backend\n"
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
"Example: the worked example of doc/readahead-rules.md (ra-max 32 pages, 16K reads):\n"
"  for i in $(seq 0 21); do echo $((i * 16384)) 16384; done |\n"
"    " PROG " --mode=kernel --ra-max=128K --export-size=1G\n"
"A 20 ms backend, the kernel's window against adaptive windows:\n"
"  for i in $(seq 0 4095); do echo $((i * 65536)) 65536; done > seq\n"
"  " PROG " -q --mode=kernel --ra-max=128K --latency=20ms --bandwidth=1G seq\n"
"  " PROG " -q --mode=adaptive --ra-max=8M --latency=20ms --bandwidth=1G seq\n"
"Record real traffic and replay it:\n"
"  nbdkit --filter=log PLUGIN ... logfile=/tmp/nbd.log\n"
"  " PROG " --config=/etc/ra-cache/ra-cache.conf /tmp/nbd.log\n"
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
  for (; isdigit ((unsigned char) *p); p++, digits++) {
    if (whole > UINT64_C (1000000000000))
      return false;
    whole = whole * 10 + (uint64_t) (*p - '0');
  }
  if (*p == '.') {
    size_t fd = 0;

    for (p++; isdigit ((unsigned char) *p); p++, fd++) {
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

/* The options that are the filter's configuration keys (src/config.c
 * checks them, with the filter's defaults and ranges).
 */
static const struct { const char *option, *key; } config_options[] = {
  { "page-size", "ra-cache-page-size" },
  { "ra-max", "ra-max" },
  { "io-max", "ra-io-max" },
  { "cache-size", "ra-cache-size" },
  { "mode", "ra-mode" },
  { "parallel", "ra-max-background" },
};
#define NR_CONFIG_OPTIONS \
  (sizeof config_options / sizeof config_options[0])

/* What the command line says. */
struct options {
  struct rc_config cfg;
  struct rc_given given;        /* the filter's keys and --config */
  uint64_t export_size;
  bool have_export_size, quiet;
  struct timing tm;
  const char *trace;            /* NULL: standard input */
};

/* A message of src/config.c about key: named by the option that set it
 * when the command line did ("--io-max: ..."), else by the key.
 */
static void __attribute__ ((noreturn))
config_error (const struct options *o, const char *msg)
{
  const char *file = o->given.file;
  size_t k;

  for (k = 0; k < NR_CONFIG_OPTIONS; k++) {
    size_t n = strlen (config_options[k].key);

    if (rc_given_has (&o->given, config_options[k].key) &&
        strncmp (msg, config_options[k].key, n) == 0 && msg[n] == ':')
      die ("--%s%s", config_options[k].option, msg + n);
  }
  die ("%s%s%s", file ? file : "", file ? ": " : "", msg);
}

/* ra-trace's own options: those that take a value (getopt_long returns
 * their OPT_*), and those that take none, each also a short option (its
 * letter).  The filter's keys come first, as OPT_KEY + their index in
 * config_options.
 */
enum { OPT_CONFIG = 256, OPT_EXPORT_SIZE, OPT_LATENCY, OPT_BANDWIDTH,
       OPT_CLIENT_GAP, OPT_KEY };
static const struct option value_options[] = {
  { "config", required_argument, NULL, OPT_CONFIG },
  { "export-size", required_argument, NULL, OPT_EXPORT_SIZE },
  { "latency", required_argument, NULL, OPT_LATENCY },
  { "bandwidth", required_argument, NULL, OPT_BANDWIDTH },
  { "client-gap", required_argument, NULL, OPT_CLIENT_GAP },
};
static const struct { char letter; const char *option; } flag_options[] = {
  { 'q', "quiet" }, { 'h', "help" }, { 'V', "version" },
};
#define NR_VALUE_OPTIONS (sizeof value_options / sizeof value_options[0])
#define NR_FLAG_OPTIONS (sizeof flag_options / sizeof flag_options[0])

/* getopt_long's arguments, built from the three tables above so that
 * each option (its name, whether it takes a value, its short form) is
 * written once: the long options of config_options, value_options and
 * flag_options in that order, and the flags' letters as the short
 * options, after ':' (a missing value is then ':', for our message).
 */
struct getopt_args {
  struct option longopts[NR_CONFIG_OPTIONS + NR_VALUE_OPTIONS +
                         NR_FLAG_OPTIONS + 1];
  char shortopts[1 + NR_FLAG_OPTIONS + 1];
};

static void
build_getopt_args (struct getopt_args *g)
{
  size_t k, n = 0;

  for (k = 0; k < NR_CONFIG_OPTIONS; k++)
    g->longopts[n++] = (struct option) {
      .name = config_options[k].option, .has_arg = required_argument,
      .val = OPT_KEY + (int) k,
    };
  for (k = 0; k < NR_VALUE_OPTIONS; k++)
    g->longopts[n++] = value_options[k];
  g->shortopts[0] = ':';
  for (k = 0; k < NR_FLAG_OPTIONS; k++) {
    g->longopts[n++] = (struct option) {
      .name = flag_options[k].option, .has_arg = no_argument,
      .val = flag_options[k].letter,
    };
    g->shortopts[1 + k] = flag_options[k].letter;
  }
  g->longopts[n] = (struct option) { .name = NULL };
  g->shortopts[1 + k] = '\0';
}

static void
parse_options (int argc, char *argv[], struct options *o)
{
  struct getopt_args g;
  char err[512];
  const char *msg;
  int c;

  build_getopt_args (&g);
  memset (o, 0, sizeof *o);
  rc_config_defaults (&o->cfg);
  opterr = 0;                   /* messages of our own, below */
  while ((c = getopt_long (argc, argv, g.shortopts, g.longopts,
                           NULL)) != -1) {
    if (c >= OPT_KEY && c < OPT_KEY + (int) NR_CONFIG_OPTIONS) {
      const char *key = config_options[c - OPT_KEY].key;

      if (rc_given_add (&o->given, key, optarg, err, sizeof err) != 0)
        die ("--%s%s", config_options[c - OPT_KEY].option,
             err + strlen (key));
      continue;
    }
    switch (c) {
    case OPT_CONFIG: o->given.file = optarg; break;
    case OPT_EXPORT_SIZE:
      o->export_size = size_option ("export-size", optarg);
      if (o->export_size == 0)
        die ("--export-size: must not be 0");
      o->have_export_size = true;
      break;
    case OPT_LATENCY: o->tm.latency_ns = time_option ("latency", optarg); break;
    case OPT_CLIENT_GAP: o->tm.gap_ns = time_option ("client-gap", optarg); break;
    case OPT_BANDWIDTH:
      o->tm.bandwidth = size_option ("bandwidth", optarg);
      if (o->tm.bandwidth == 0)
        die ("--bandwidth: must not be 0 (leave it out for an unlimited "
             "link)");
      break;
    case 'q': o->quiet = true; break;
    case 'h': usage (stdout); exit (EXIT_SUCCESS);
    case 'V':
      printf (PROG " (" PACKAGE_NAME ") " PACKAGE_VERSION "\n");
      exit (EXIT_SUCCESS);
    case ':':
      die ("option '%s' needs a value (try --help)", argv[optind - 1]);
    default:
      /* A flag's letter: a long flag given a value (--quiet=1). */
      if (optopt && strchr (g.shortopts + 1, optopt))
        die ("option '%s' takes no value (try --help)", argv[optind - 1]);
      if (optopt)
        die ("unknown option '-%c' (try --help)", optopt);
      die ("unknown option '%s' (try --help)", argv[optind - 1]);
    }
  }
  if (argc - optind > 1)
    die ("at most one trace file, found %d arguments (try --help)",
         argc - optind);
  if (optind < argc && strcmp (argv[optind], "-") != 0)
    o->trace = argv[optind];
  /* The configuration file, but the keys the command line gave, then the
   * filter's checks across keys.
   */
  if (rc_given_apply (&o->given, &o->cfg, err, sizeof err) == -1)
    die ("%s", err);
  if ((msg = rc_config_check (&o->cfg, err, sizeof err)) != NULL)
    config_error (o, msg);
}

/* Read the trace named by the options, and settle the export size. */
static void
load_trace (struct options *o, struct trace *t)
{
  FILE *fp = stdin;

  t->name = o->trace ? o->trace : "<stdin>";
  if (o->trace && (fp = fopen (o->trace, "r")) == NULL)
    die ("%s: %s", t->name, strerror (errno));
  if (trace_read_file (t, fp) == -1)
    die ("%s", t->err);
  if (fp != stdin)
    fclose (fp);
  if (!o->have_export_size)
    o->export_size = trace_export_size (t, o->cfg.page_size);
  else if (trace_check_export_size (t, o->export_size) == -1)
    die ("%s", t->err);
}

/* The heading lines: the parameters used. */
static void
print_heading (const struct sim *s, const struct options *o)
{
  uint64_t capacity = rc_pc_capacity (s->pc);

  printf ("# " PROG ": page-size=%" PRIu64 " ra-max=%" PRIu64
          " io-max=%" PRIu64 " cache-size=%" PRIu64 " export-size=%" PRIu64
          "\n# in pages: ra-max=%" PRIu64 " io-max=%" PRIu64
          " cache-size=%" PRIu64 " export-size=%" PRIu64 "\n",
          o->cfg.page_size, o->cfg.ra_max, o->cfg.io_max,
          capacity << s->p.page_shift, o->export_size,
          (uint64_t) s->p.ra_max, (uint64_t) s->p.io_max, capacity,
          (uint64_t) ra_nr_pages (&s->p));
  if (!s->extended)
    return;
  printf ("# timing: mode=%s latency-ns=%" PRIu64 " bandwidth=%" PRIu64
          " parallel=%u client-gap-ns=%" PRIu64 " congestion-threshold=%u\n",
          rc_mode_name (s->p.mode), s->tm.latency_ns, s->tm.bandwidth,
          s->p.parallel, s->tm.gap_ns, o->cfg.congestion_threshold);
  if (s->p.mode == RA_MODE_ADAPTIVE)
    printf ("# adaptive, in pages: adapt-min=%" PRIu64 " self-max=%" PRIu64
            "\n", (uint64_t) s->p.adapt_min, (uint64_t) s->p.self_max);
}

/* The counters as the filter reports them (the one table of
 * include/racache/stats.h, under its JSON keys) on one line, last: for
 * scripts that compare a replay with a real run's stats.  (Here, not
 * in src/trace-sim.c: the fuzzer links that without src/stats.c.)
 */
static void
print_counters (const struct sim *s)
{
  rc_stats_print (stdout, &s->st, UINT32_C (1) << s->p.page_shift,
                  RC_STATS_LINE, 0, "# counters: ");
  putchar ('\n');
}

int
main (int argc, char *argv[])
{
  struct options o;
  struct trace t = { 0 };
  struct ra_params p;
  struct sim s;
  uint64_t *stream_ids;
  size_t nstreams, i;

  parse_options (argc, argv, &o);
  load_trace (&o, &t);
  if (trace_number_streams (&t, &stream_ids, &nstreams) == -1)
    die ("%s", t.err);

  rc_engine_params (&o.cfg, o.cfg.max_background, &p);
  p.export_size = o.export_size;
  sim_init (&s, &o.cfg, &p, &o.tm, nstreams, o.quiet);
  print_heading (&s, &o);
  if (!o.quiet)
    print_table_header (&s);
  for (i = 0; i < t.nr; i++)
    replay_read (&s, &t.reads[i]);
  print_summary (&s);
  if (s.extended)
    print_timing (&s, stream_ids);
  print_counters (&s);

  sim_free (&s);
  free (stream_ids);
  trace_free (&t);
  rc_config_free (&o.cfg);
  if (fflush (stdout) == EOF || ferror (stdout))
    die ("error writing the output: %s", strerror (errno));
  return EXIT_SUCCESS;
}
