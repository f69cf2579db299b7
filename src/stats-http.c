/* ra-cache: the counters over HTTP, for Prometheus to scrape.
 *
 * ra-cache-stats-listen=[ADDR:]PORT adds a TCP listener to the stats
 * server's libev loop (src/stats-server.c): the same thread, the same
 * documents as the Unix socket.  Each connection carries one request and
 * one answer, HTTP/1.0 style: read the request head (at most
 * HTTP_HEAD_MAX bytes), answer with Content-Length and
 * "Connection: close", close.
 *
 *   GET /metrics   200, the Prometheus text format (rc_stats_write_prometheus)
 *   GET /stats     200, the JSON document (rc_stats_write_json)
 *   HEAD           the same head, no body
 *   another path 404, another method 405, a request line or header that
 *   is not HTTP/1.x 400, a head longer than HTTP_HEAD_MAX 431.
 *
 * Nothing here blocks the loop, so the Unix socket, the summary timer
 * and other HTTP clients never wait for a slow one: the sockets are
 * non-blocking, each read and write happens when libev says it can, and
 * a connection has HTTP_TIMEOUT seconds in all (a libev timer) before it
 * is closed, answered or not.  At most HTTP_MAX_CONNS connections are
 * open at once; a connection beyond gets 503 and is closed at once, so
 * a flood costs a bounded amount of memory and file descriptors.  The
 * read path never waits for this thread: the counters are atomics.
 */

#include <config.h>

#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "racache/config.h"
#include "racache/stats-server.h"
#include "stats-http.h"

/* The longest request head (request line and headers) read. */
#define HTTP_HEAD_MAX 4096
/* Seconds a connection may take from accept to the last byte of the
 * answer.
 */
#define HTTP_TIMEOUT 5.0
/* Seconds to read (and drop) what a client still sends after the
 * answer, before closing: closing with unread input sends a reset,
 * which can destroy the answer before the client reads it.
 */
#define HTTP_LINGER 1.0
/* Connections open at once, at most. */
#define HTTP_MAX_CONNS 64

enum http_conn_state {
  HTTP_READING,                 /* the request head */
  HTTP_WRITING,                 /* the answer */
  HTTP_DRAINING,                /* answered: reading until end-of-file */
};

struct http_conn {
  ev_io io;
  ev_timer timer;
  struct stats_http *h;
  struct http_conn *prev, *next;
  int fd;
  enum http_conn_state state;
  size_t n;                     /* bytes of head */
  char *out;                    /* the answer (malloc'd) */
  size_t out_len, out_sent;
  char head[HTTP_HEAD_MAX];
};

struct stats_http {
  struct rc_cache *c;
  struct ev_loop *loop;
  int fd;
  ev_io accept_w;
  ev_timer backoff_w;
  struct http_conn *conns;
  unsigned nr_conns;
};

/* ---- ra-cache-stats-listen=[ADDR:]PORT: the listener ---------------------- */

int
rc_stats_listen_tcp (const char *spec, char *err, size_t len)
{
  struct addrinfo hints = {
    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
    .ai_flags = AI_NUMERICSERV,
  };
  struct addrinfo *res, *ai;
  char host[NI_MAXHOST], service[8], where[NI_MAXHOST + 16];
  unsigned port;
  int r, fd = -1, first_errno = 0;
  bool numeric;

  if (rc_parse_listen (spec, host, sizeof host, &port, err, len) == -1)
    return -1;
  snprintf (service, sizeof service, "%u", port);
  snprintf (where, sizeof where, strchr (host, ':') ? "[%s]:%u" : "%s:%u",
            host, port);
  /* What looks like an address (digits and dots, or an IPv6 address) is
   * one, or an error: never a name to look up.
   */
  numeric = strspn (host, "0123456789.") == strlen (host) ||
    strchr (host, ':') != NULL;
  if (numeric)
    hints.ai_flags |= AI_NUMERICHOST;
  r = getaddrinfo (host, service, &hints, &res);
  if (r != 0 && numeric && r != EAI_SYSTEM && r != EAI_MEMORY) {
    snprintf (err, len, "ra-cache-stats-listen: %s: '%s' is not an address",
              where, host);
    return -1;
  }
  if (r != 0) {
    snprintf (err, len, "ra-cache-stats-listen: %s: cannot resolve '%s': %s",
              where, host, r == EAI_SYSTEM ? strerror (errno)
              : gai_strerror (r));
    return -1;
  }
  /* A name may resolve to several addresses: listen on the first that
   * works, and report the first failure if none does.
   */
  for (ai = res; ai; ai = ai->ai_next) {
    int one = 1;

    fd = socket (ai->ai_family,
                 ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                 ai->ai_protocol);
    if (fd == -1) {
      if (!first_errno)
        first_errno = errno;
      continue;
    }
    /* A restart must not wait for the last run's connections in
     * TIME_WAIT; a port that another socket listens on is still refused.
     */
    (void) setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* A burst of connections waits in the kernel's backlog, not in
     * clients' SYN retries.
     */
    if (bind (fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        listen (fd, SOMAXCONN) == 0)
      break;
    if (!first_errno)
      first_errno = errno;
    close (fd);
    fd = -1;
  }
  freeaddrinfo (res);
  if (fd == -1)
    snprintf (err, len, "ra-cache-stats-listen: %s: %s", where,
              strerror (first_errno));
  return fd;
}

/* ---- one request ---------------------------------------------------------- */

/* A byte of a token (a method, a header name): RFC 9110's tchar. */
static bool
is_tchar (char ch)
{
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
    (ch >= '0' && ch <= '9') || (ch && strchr ("!#$%&'*+-.^_`|~", ch));
}

static bool
is_token (const char *s, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (!is_tchar (s[i]))
      return false;
  return n > 0;
}

/* The end of the head in [0, n): just after the empty line, or NULL. */
static const char *
head_end (const char *head, size_t n)
{
  const char *p = head, *end = head + n;

  while ((p = memchr (p, '\n', end - p)) != NULL) {
    p++;
    if (p < end && *p == '\n')
      return p + 1;
    if (p + 1 < end && p[0] == '\r' && p[1] == '\n')
      return p + 2;
  }
  return NULL;
}

/* The header lines after the request line, [p, end): "name: value",
 * no continuation lines (obsolete since RFC 7230).
 */
static bool
headers_ok (const char *p, const char *end)
{
  while (p < end) {
    const char *eol = memchr (p, '\n', end - p);
    const char *line_end = eol ? eol : end, *colon;

    if (line_end > p && line_end[-1] == '\r')
      line_end--;
    if (line_end == p)          /* the empty line: the end of the head */
      return true;
    colon = memchr (p, ':', line_end - p);
    if (!colon || !is_token (p, colon - p))
      return false;
    if (!eol)
      break;
    p = eol + 1;
  }
  return true;
}

/* Parse the head [0, n): the status to answer, the document for 200
 * (*prometheus), and whether the answer has no body (*head_only: HEAD,
 * whatever the status).
 */
static int
parse_request (const char *head, size_t n, bool *prometheus, bool *head_only)
{
  const char *eol = memchr (head, '\n', n);
  const char *line_end, *sp1, *target, *sp2, *version, *path;
  size_t path_len, i;

  *prometheus = *head_only = false;
  if (!eol || memchr (head, '\0', n))
    return 400;
  line_end = eol > head && eol[-1] == '\r' ? eol - 1 : eol;
  /* METHOD SP TARGET SP HTTP/1.x */
  sp1 = memchr (head, ' ', line_end - head);
  if (!sp1 || !is_token (head, sp1 - head))
    return 400;
  target = sp1 + 1;
  sp2 = memchr (target, ' ', line_end - target);
  if (!sp2 || sp2 == target)
    return 400;
  for (i = 0; target + i < sp2; i++)
    if ((unsigned char) target[i] <= ' ' || target[i] == 0x7f)
      return 400;
  version = sp2 + 1;
  if (line_end - version != 8 || memcmp (version, "HTTP/1.", 7) != 0 ||
      version[7] < '0' || version[7] > '9')
    return 400;
  if (!headers_ok (eol + 1, head + n))
    return 400;

  if (sp1 - head == 4 && memcmp (head, "HEAD", 4) == 0)
    *head_only = true;
  else if (!(sp1 - head == 3 && memcmp (head, "GET", 3) == 0))
    return 405;

  /* Origin form, "/metrics?x=y"; or absolute form,
   * "http://host:port/metrics", which a proxy may send.
   */
  path = target;
  if (sp2 - target > 7 && strncasecmp (target, "http://", 7) == 0) {
    path = memchr (target + 7, '/', sp2 - (target + 7));
    if (!path)
      path = sp2;
  }
  path_len = strcspn (path, "? ");
  if (path_len == strlen ("/metrics") && memcmp (path, "/metrics", 8) == 0)
    *prometheus = true;
  else if (!(path_len == strlen ("/stats") && memcmp (path, "/stats", 6) == 0))
    return 404;
  return 200;
}

static const char *
reason (int status)
{
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 431: return "Request Header Fields Too Large";
  default: return "Internal Server Error";
  }
}

/* The answer to the head read: status line, headers, body (malloc'd). */
static char *
make_answer (struct rc_cache *c, const char *head, size_t n, bool complete,
             size_t *out_len)
{
  bool prometheus = false, head_only = false;
  int status = complete ? parse_request (head, n, &prometheus, &head_only)
    : 431;
  char *body = NULL, *out;
  size_t body_len = 0;
  const char *type = "text/plain; charset=utf-8";
  char start[256];
  int start_len;

  if (status == 200) {
    FILE *fp = open_memstream (&body, &body_len);

    if (fp) {
      int r = prometheus ? rc_stats_write_prometheus (c, fp)
        : rc_stats_write_json (c, fp);

      if (fclose (fp) != 0 || r == -1) {
        free (body);
        body = NULL;
      }
    }
    if (!body)
      status = 500;
    else if (prometheus)
      type = "text/plain; version=0.0.4; charset=utf-8";
    else
      type = "application/json";
  }
  if (status != 200) {
    if (asprintf (&body, "%d %s\n", status, reason (status)) == -1)
      return NULL;
    body_len = strlen (body);
  }
  start_len = snprintf (start, sizeof start,
                        "HTTP/1.1 %d %s\r\n"
                        "Content-Type: %s\r\n"
                        "Content-Length: %zu\r\n"
                        "Connection: close\r\n"
                        "%s"
                        "\r\n",
                        status, reason (status), type, body_len,
                        status == 405 ? "Allow: GET, HEAD\r\n" : "");
  *out_len = start_len + (head_only ? 0 : body_len);
  out = malloc (*out_len);
  if (out) {
    memcpy (out, start, start_len);
    memcpy (out + start_len, body, *out_len - start_len);
  }
  free (body);
  return out;
}

/* ---- connections ---------------------------------------------------------- */

static void
conn_close (struct http_conn *k)
{
  struct stats_http *h = k->h;

  ev_io_stop (h->loop, &k->io);
  ev_timer_stop (h->loop, &k->timer);
  STATS_LIST_UNLINK (h->conns, k);
  h->nr_conns--;
  close (k->fd);
  free (k->out);
  free (k);
}

static void
conn_watch (struct http_conn *k, int events)
{
  ev_io_stop (k->h->loop, &k->io);
  ev_io_set (&k->io, k->fd, events);
  ev_io_start (k->h->loop, &k->io);
}

/* Send what is left of the answer; when it has all gone, linger. */
static void
conn_write (struct http_conn *k)
{
  while (k->out_sent < k->out_len) {
    ssize_t r = send (k->fd, k->out + k->out_sent, k->out_len - k->out_sent,
                      MSG_NOSIGNAL);

    if (r == -1 && errno == EINTR)
      continue;
    if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;                   /* on_conn_io calls again */
    if (r == -1) {              /* the client went away */
      conn_close (k);
      return;
    }
    k->out_sent += r;
  }
  free (k->out);
  k->out = NULL;
  shutdown (k->fd, SHUT_WR);
  k->state = HTTP_DRAINING;
  conn_watch (k, EV_READ);
  ev_timer_stop (k->h->loop, &k->timer);
  ev_timer_set (&k->timer, HTTP_LINGER, 0);
  ev_timer_start (k->h->loop, &k->timer);
}

/* The head is complete (or full, or the client has finished sending):
 * answer it.
 */
static void
conn_answer (struct http_conn *k, bool complete)
{
  k->out = make_answer (k->h->c, k->head, k->n, complete, &k->out_len);
  if (!k->out) {
    conn_close (k);
    return;
  }
  k->state = HTTP_WRITING;
  conn_watch (k, EV_WRITE);
  conn_write (k);
}

static void
conn_read (struct http_conn *k)
{
  ssize_t r = recv (k->fd, k->head + k->n, sizeof k->head - k->n, 0);

  if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  if (r == -1 || (r == 0 && k->n == 0)) {
    conn_close (k);
    return;
  }
  if (r == 0) {
    /* End of file before the empty line: answer what came (a client
     * may send a request line and shut down its side).
     */
    conn_answer (k, true);
    return;
  }
  k->n += r;
  if (head_end (k->head, k->n))
    conn_answer (k, true);
  else if (k->n == sizeof k->head)
    conn_answer (k, false);
}

static void
conn_drain (struct http_conn *k)
{
  char buf[1024];
  ssize_t r = recv (k->fd, buf, sizeof buf, 0);

  if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  if (r <= 0)
    conn_close (k);
}

static void
on_conn_io (struct ev_loop *loop, ev_io *w, int revents)
{
  struct http_conn *k = w->data;

  switch (k->state) {
  case HTTP_READING: conn_read (k); break;
  case HTTP_WRITING: conn_write (k); break;
  case HTTP_DRAINING: conn_drain (k); break;
  }
}

/* Too slow (or lingering done): close, answered or not. */
static void
on_conn_timer (struct ev_loop *loop, ev_timer *w, int revents)
{
  conn_close (w->data);
}

static void
on_accept (struct ev_loop *loop, ev_io *w, int revents)
{
  static const char busy[] =
    "HTTP/1.1 503 Service Unavailable\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 24\r\n"
    "Connection: close\r\n"
    "Retry-After: 1\r\n"
    "\r\n"
    "503 Service Unavailable\n";
  struct stats_http *h = w->data;
  struct http_conn *k = NULL;
  int fd;

  fd = stats_accept (loop, &h->accept_w, &h->backoff_w, SOCK_NONBLOCK);
  if (fd == -1)
    return;
  if (h->nr_conns < HTTP_MAX_CONNS)
    k = malloc (sizeof *k);
  if (!k) {
    char request[1024];

    /* Drop the request if it is there already (it usually is, having
     * waited in the backlog): closing with unread input would send a
     * reset instead of the answer.  A new socket's send buffer takes the
     * answer at once, or it is lost.
     */
    (void) recv (fd, request, sizeof request, MSG_DONTWAIT);
    (void) send (fd, busy, sizeof busy - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    close (fd);
    return;
  }
  memset (k, 0, offsetof (struct http_conn, head));
  k->h = h;
  k->fd = fd;
  k->state = HTTP_READING;
  STATS_LIST_PUSH (h->conns, k);
  h->nr_conns++;
  stats_watch_conn (loop, &k->io, &k->timer, on_conn_io, on_conn_timer, fd,
                    HTTP_TIMEOUT, k);
}

struct stats_http *
stats_http_start (struct ev_loop *loop, struct rc_cache *c, int fd)
{
  struct stats_http *h = calloc (1, sizeof *h);

  if (!h)
    return NULL;
  h->c = c;
  h->loop = loop;
  h->fd = fd;
  ev_io_init (&h->accept_w, on_accept, fd, EV_READ);
  h->accept_w.data = h;
  ev_io_start (loop, &h->accept_w);
  stats_accept_backoff_init (&h->backoff_w, &h->accept_w);
  return h;
}

void
stats_http_stop (struct stats_http *h)
{
  if (!h)
    return;
  ev_io_stop (h->loop, &h->accept_w);
  ev_timer_stop (h->loop, &h->backoff_w);
  while (h->conns)
    conn_close (h->conns);
  free (h);
}
