/* ra-cache-stat: the figures an operator watches, from the stats socket
 * of nbdkit-ra-cache-filter, as a table refreshed every INTERVAL
 * seconds (like vmstat).  See ra-cache-stat(1).
 *
 * The JSON document is flat numbers apart from "windows" and a few
 * strings: a tiny scanner that finds "key": NUMBER is all this needs.
 */

#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *prog = "ra-cache-stat";

static void __attribute__ ((noreturn, format (printf, 1, 2)))
die (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "%s: ", prog);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
  exit (EXIT_FAILURE);
}

/* The keys read, in this order. */
enum {
  K_UPTIME, K_CLIENT_BYTES, K_BACKEND_BYTES, K_HITS, K_MISSES, K_ASYNC,
  K_WASTED, K_SKIPPED, K_INFLIGHT, K_MEMORY, NR_KEYS
};
static const char *const keys[NR_KEYS] = {
  "uptime_seconds", "client_bytes", "backend_bytes", "page_hits",
  "page_misses", "async_pages", "ahead_wasted_pages", "async_skipped",
  "inflight_now", "cache_memory_bytes",
};

struct sample {
  double v[NR_KEYS];
};

/* The number after "key": in doc, or NAN. */
static double
json_number (const char *doc, const char *key)
{
  size_t len = strlen (key);
  const char *p = doc;
  char *end;
  double d;

  while ((p = strchr (p, '"')) != NULL) {
    p++;
    if (strncmp (p, key, len) == 0 && p[len] == '"') {
      p += len + 1;
      p += strspn (p, " \t\r\n");
      if (*p != ':')
        continue;
      p++;
      errno = 0;
      d = strtod (p, &end);
      if (end == p || errno != 0)
        return NAN;
      return d;
    }
    /* Skip to the closing quote of this string. */
    p = strchr (p, '"');
    if (!p)
      break;
    p++;
  }
  return NAN;
}

/* Read one JSON document from the socket at path into s. */
static void
fetch (const char *path, struct sample *s)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  struct timeval tv = { .tv_sec = 10 };
  char *doc = NULL;
  size_t len = 0, cap = 0;
  ssize_t r;
  int fd, i;

  if (strlen (path) >= sizeof addr.sun_path)
    die ("%s: socket path too long", path);
  strcpy (addr.sun_path, path);
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd == -1)
    die ("socket: %s", strerror (errno));
  setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect (fd, (struct sockaddr *) &addr, sizeof addr) == -1) {
    int e = errno;

    if (e == ENOENT)
      die ("%s: no such socket (is nbdkit running with "
           "ra-cache-stats-socket=%s?)", path, path);
    if (e == ECONNREFUSED)
      die ("%s: connection refused (nbdkit is not running, or the "
           "socket is stale)", path);
    die ("%s: %s", path, strerror (e));
  }
  /* Ask for JSON at once: without a request the server waits a moment
   * for one.  A server that answers without reading it (an older one,
   * or one with many clients waiting) may have closed already: no
   * SIGPIPE, and the answer is read all the same.
   */
  (void) send (fd, "json\n", 5, MSG_NOSIGNAL);
  shutdown (fd, SHUT_WR);
  for (;;) {
    if (cap - len < 4096) {
      cap = cap ? cap * 2 : 16384;
      if (cap > (1 << 20))
        die ("%s: the answer is too long for a ra-cache stats document",
             path);
      doc = realloc (doc, cap);
      if (!doc)
        die ("%s", strerror (errno));
    }
    r = read (fd, doc + len, cap - len - 1);
    if (r == -1 && errno == EINTR)
      continue;
    /* The server closed without reading the request: Linux then
     * reports ECONNRESET after the data it sent, instead of EOF.
     */
    if (r == -1 && errno == ECONNRESET && len > 0)
      break;
    if (r == -1)
      die ("%s: reading: %s", path,
           errno == EAGAIN ? "no answer within 10 s" : strerror (errno));
    if (r == 0)
      break;
    len += r;
  }
  close (fd);
  doc[len] = '\0';
  if (isnan (json_number (doc, "schema")))
    die ("%s: not a ra-cache stats socket (no \"schema\" in the answer)",
         path);
  for (i = 0; i < NR_KEYS; i++) {
    s->v[i] = json_number (doc, keys[i]);
    if (isnan (s->v[i]))
      die ("%s: the stats have no number \"%s\"", path, keys[i]);
  }
  free (doc);
}

static void
header (void)
{
  printf ("%10s %10s %6s %10s %10s %8s %8s %10s\n",
          "client", "backend", "hit", "ahead", "wasted", "skipped",
          "inflight", "cache");
  printf ("%10s %10s %6s %10s %10s %8s %8s %10s\n",
          "MB/s", "MB/s", "%", "pages", "pages", "parts", "now", "MiB");
}

/* One row: the change from prev to cur (prev NULL: since the start). */
static void
row (const struct sample *prev, const struct sample *cur)
{
  static const struct sample zero;
  double d[NR_KEYS], secs;
  char hit[16];
  int i;

  if (!prev)
    prev = &zero;
  for (i = 0; i < NR_KEYS; i++)
    d[i] = cur->v[i] - prev->v[i];
  secs = d[K_UPTIME] > 0 ? d[K_UPTIME] : 0;
  if (d[K_HITS] + d[K_MISSES] > 0)
    snprintf (hit, sizeof hit, "%.1f",
              100.0 * d[K_HITS] / (d[K_HITS] + d[K_MISSES]));
  else
    snprintf (hit, sizeof hit, "-");
  printf ("%10.2f %10.2f %6s %10.0f %10.0f %8.0f %8.0f %10.1f\n",
          secs > 0 ? d[K_CLIENT_BYTES] / secs / 1e6 : 0.0,
          secs > 0 ? d[K_BACKEND_BYTES] / secs / 1e6 : 0.0,
          hit, d[K_ASYNC], d[K_WASTED], d[K_SKIPPED],
          cur->v[K_INFLIGHT], cur->v[K_MEMORY] / 1048576.0);
  fflush (stdout);
}

static void
usage (FILE *fp)
{
  fprintf (fp,
"Usage: ra-cache-stat [-1] SOCKET [INTERVAL [COUNT]]\n"
"\n"
"Print the figures of an nbdkit-ra-cache-filter stats socket\n"
"(ra-cache-stats-socket=SOCKET) as a table.  The first row is since the\n"
"cache started; then one row every INTERVAL seconds (COUNT rows in all,\n"
"or until interrupted) with the changes over that interval.  Without\n"
"INTERVAL, or with -1, one row.\n"
"\n"
"  -1, --once       one row (the figures since the start) and exit\n"
"  -h, --help       print this help and exit\n"
"  -V, --version    print the version and exit\n");
}

static double
parse_interval (const char *s)
{
  char *end;
  double d;

  errno = 0;
  d = strtod (s, &end);
  if (end == s || *end || errno || !(d > 0) || d > 86400)
    die ("INTERVAL '%s': expected a number of seconds > 0 (try --help)", s);
  return d;
}

static long
parse_count (const char *s)
{
  char *end;
  long n;

  errno = 0;
  n = strtol (s, &end, 10);
  if (end == s || *end || errno || n < 1)
    die ("COUNT '%s': expected a whole number >= 1 (try --help)", s);
  return n;
}

int
main (int argc, char *argv[])
{
  static const struct option long_options[] = {
    { "once", no_argument, NULL, '1' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
  };
  struct sample prev, cur;
  const char *path;
  double interval = 0;
  long count = 1, i;
  int c, once = 0;

  while ((c = getopt_long (argc, argv, "1hV", long_options, NULL)) != -1) {
    switch (c) {
    case '1': once = 1; break;
    case 'h': usage (stdout); exit (EXIT_SUCCESS);
    case 'V': printf ("%s %s\n", prog, PACKAGE_VERSION); exit (EXIT_SUCCESS);
    default: usage (stderr); exit (EXIT_FAILURE);
    }
  }
  if (optind >= argc)
    die ("missing SOCKET (try --help)");
  if (argc - optind > 3)
    die ("too many arguments (try --help)");
  path = argv[optind];
  if (argc - optind >= 2) {
    interval = parse_interval (argv[optind + 1]);
    count = argc - optind >= 3 ? parse_count (argv[optind + 2]) : 0;
  }
  if (once)
    count = 1;

  fetch (path, &cur);
  header ();
  row (NULL, &cur);
  for (i = 1; count == 0 || i < count; i++) {
    struct timespec ts = {
      .tv_sec = (time_t) interval,
      .tv_nsec = (long) ((interval - (time_t) interval) * 1e9),
    };

    while (nanosleep (&ts, &ts) == -1 && errno == EINTR)
      ;
    prev = cur;
    fetch (path, &cur);
    row (&prev, &cur);
  }
  return EXIT_SUCCESS;
}
