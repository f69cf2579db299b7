/* ra-trace: replay a trace of client reads through the readahead engine
 * (ra-trace(1)).  src/trace.c parses the trace, src/trace-sim.c replays
 * it; here are the options, the heading and main.  The filter's
 * parameters take its defaults and checks (src/config.c), and --config
 * its file, which they override (struct rc_given).
 */

#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "racache/config.h"
#include "trace.h"
#include "ra-trace-help.h"

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

/* --help: the man page's OPTIONS (RA_TRACE_OPTIONS_HELP, pod2help). */
static void
usage (FILE *fp)
{
  fputs ("Usage: " PROG " [OPTIONS] [TRACE]\n"
         "Replay a trace of client reads (\"OFFSET LENGTH [STREAM]\" lines, "
         "or nbdkit's log\nfilter's log; TRACE absent or '-': standard "
         "input) through ra-cache's\nreadahead engine over a simulated page "
         "cache; print every window and a summary.\n\n"
         RA_TRACE_OPTIONS_HELP
         "\nThe trace format, the simulation and the output: " PROG "(1).\n",
         fp);
}

/* --export-size, --bandwidth (sizes), --latency, --client-gap (times). */
static uint64_t
value_option (const char *opt, const char *arg, bool time)
{
  uint64_t v;

  if (!time && rc_parse_size (arg, &v) == -1)
    die ("--%s: '%s' is not a size (digits and an optional suffix k, M, G, "
         "T)", opt, arg);
  if (time && rc_parse_duration (arg, 0, MAX_TIME_NS, &v) == -1)
    die ("--%s: '%s' is not a time: a number and a unit ns, us, ms or s "
         "(such as 20ms or 1.5ms), or 0; at most 3600s", opt, arg);
  return v;
}

/* The options.  The filter's keys come first, as OPT_KEY + their index
 * in keys[]; the flags' values are their short options.
 */
enum { OPT_CONFIG = 256, OPT_EXPORT_SIZE, OPT_LATENCY, OPT_BANDWIDTH,
       OPT_CLIENT_GAP, OPT_KEY };
static const struct option longopts[] = {
  { "page-size", required_argument, NULL, OPT_KEY + 0 },
  { "ra-max", required_argument, NULL, OPT_KEY + 1 },
  { "io-max", required_argument, NULL, OPT_KEY + 2 },
  { "cache-size", required_argument, NULL, OPT_KEY + 3 },
  { "mode", required_argument, NULL, OPT_KEY + 4 },
  { "parallel", required_argument, NULL, OPT_KEY + 5 },
  { "config", required_argument, NULL, OPT_CONFIG },
  { "export-size", required_argument, NULL, OPT_EXPORT_SIZE },
  { "latency", required_argument, NULL, OPT_LATENCY },
  { "bandwidth", required_argument, NULL, OPT_BANDWIDTH },
  { "client-gap", required_argument, NULL, OPT_CLIENT_GAP },
  { "quiet", no_argument, NULL, 'q' },
  { "help", no_argument, NULL, 'h' },
  { "version", no_argument, NULL, 'V' },
  { NULL },
};
#define SHORTOPTS ":qhV"        /* ':': a missing value is ':' */
static const char *const keys[] = {
  "ra-cache-page-size", "ra-max", "ra-io-max", "ra-cache-size", "ra-mode",
  "ra-max-background",
};
#define NR_KEYS (sizeof keys / sizeof keys[0])

/* What the command line says. */
struct options {
  struct rc_config cfg;
  struct rc_given given;        /* the filter's keys and --config */
  uint64_t export_size;
  bool quiet;
  struct timing tm;
  const char *trace;            /* NULL: standard input */
};

/* A message of src/config.c about a key: named by the option when the
 * command line set it ("--io-max: ..."), else by the key.
 */
static void __attribute__ ((noreturn))
config_error (const struct options *o, const char *msg)
{
  const char *file = o->given.file;
  size_t k;

  for (k = 0; k < NR_KEYS; k++) {
    size_t n = strlen (keys[k]);

    if (rc_given_has (&o->given, keys[k]) &&
        strncmp (msg, keys[k], n) == 0 && msg[n] == ':')
      die ("--%s%s", longopts[k].name, msg + n);
  }
  die ("%s%s%s", file ? file : "", file ? ": " : "", msg);
}

static void
parse_options (int argc, char *argv[], struct options *o)
{
  char err[512];
  const char *msg;
  int c;

  memset (o, 0, sizeof *o);
  rc_config_defaults (&o->cfg);
  opterr = 0;                   /* messages of our own, below */
  while ((c = getopt_long (argc, argv, SHORTOPTS, longopts,
                           NULL)) != -1) {
    if (c >= OPT_KEY && c < OPT_KEY + (int) NR_KEYS) {
      const char *key = keys[c - OPT_KEY];

      if (rc_given_add (&o->given, key, optarg, err, sizeof err) != 0)
        die ("--%s%s", longopts[c - OPT_KEY].name, err + strlen (key));
      continue;
    }
    switch (c) {
    case OPT_CONFIG: o->given.file = optarg; break;
    case OPT_EXPORT_SIZE:
      o->export_size = value_option ("export-size", optarg, false);
      if (o->export_size == 0)
        die ("--export-size: must not be 0");
      break;
    case OPT_LATENCY:
      o->tm.latency_ns = value_option ("latency", optarg, true);
      break;
    case OPT_CLIENT_GAP:
      o->tm.gap_ns = value_option ("client-gap", optarg, true);
      break;
    case OPT_BANDWIDTH:
      o->tm.bandwidth = value_option ("bandwidth", optarg, false);
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
      if (optopt && strchr (SHORTOPTS + 1, optopt))
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
  if (trace_export_size (t, o->cfg.page_size, &o->export_size) == -1)
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

int
main (int argc, char *argv[])
{
  struct options o;
  struct trace t = { 0 };
  struct ra_params p;
  struct sim s;
  size_t i;

  parse_options (argc, argv, &o);
  load_trace (&o, &t);

  rc_engine_params (&o.cfg, o.cfg.max_background, &p);
  p.export_size = o.export_size;
  sim_init (&s, &o.cfg, &p, &o.tm, &t, o.quiet);
  print_heading (&s, &o);
  if (!o.quiet)
    print_table_header (&s);
  for (i = 0; i < t.nr; i++)
    replay_read (&s, &t.reads[i]);
  print_summary (&s);
  if (s.extended)
    print_timing (&s);
  /* The filter's counters (include/racache/stats.h) under their names. */
  printf ("# counters\n");
  rc_stats_print (stdout, &s.st, UINT32_C (1) << s.p.page_shift,
                  RC_STATS_LIST, 0, "");

  sim_free (&s);
  trace_free (&t);
  rc_config_free (&o.cfg);
  if (fflush (stdout) == EOF || ferror (stdout))
    die ("error writing the output: %s", strerror (errno));
  return EXIT_SUCCESS;
}
