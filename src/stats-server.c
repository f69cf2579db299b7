/* ra-cache: live stats.  A libev loop in its own thread serves the
 * current counters to whoever asks, and a timer logs a one-line summary.
 * The read path never waits for this thread: counters are atomics.
 *
 * Two listeners share the loop, either or both:
 *
 * - a Unix socket (ra-cache-stats-socket=PATH), here: each connection
 *   gets one document, then is closed.  A client may send one request
 *   line first: "prometheus" gets the Prometheus text format, "json"
 *   (or any other line, or end-of-file) the JSON document at once; a
 *   client that sends nothing (every reader written before the request
 *   existed) gets the JSON after RC_STATS_REQUEST_WAIT seconds.  The wait
 *   is a libev timer per connection, so that waiting clients never hold
 *   up the loop.
 *
 * - TCP (ra-cache-stats-listen=[ADDR:]PORT), in src/stats-http.c: HTTP,
 *   GET /metrics (Prometheus) and GET /stats (JSON), non-blocking
 *   throughout, for Prometheus to scrape.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <ev.h>

#include "racache/stats-server.h"
#include "stats-http.h"

/* How long a connection may take to send its request line. */
#define RC_STATS_REQUEST_WAIT 0.1
/* Connections waiting for one at once; more get the JSON at once. */
#define RC_STATS_MAX_PENDING 64

struct rc_stats_server;

/* A connection waiting for its request line. */
struct stats_conn {
  ev_io io;
  ev_timer timer;
  struct rc_stats_server *s;
  struct stats_conn *prev, *next;
  int fd;
  size_t n;
  char buf[32];
};

struct rc_stats_server {
  struct rc_cache *c;
  struct ev_loop *loop;
  ev_io accept_w;
  ev_timer timer_w;
  ev_timer backoff_w;           /* restarts accept_w after EMFILE & co */
  ev_async stop_w;
  int fd;
  int http_fd;                  /* the TCP listener, or -1 */
  struct stats_http *http;      /* serving it */
  char *path;
  char *stats_file;             /* rewritten by the timer, or NULL */
  void (*log) (const char *line);
  pthread_t thread;
  struct stats_conn *pending;   /* connections waiting for a request */
  unsigned nr_pending;
};

/* Write the document in the format asked for (prometheus != 0) to fd
 * and close it.  fd is blocking with a send timeout.
 */
static void
serve (struct rc_stats_server *s, int fd, int prometheus)
{
  FILE *fp = fdopen (fd, "w");

  if (!fp) {
    close (fd);
    return;
  }
  if (prometheus)
    rc_stats_write_prometheus (s->c, fp);
  else
    rc_stats_write_json (s->c, fp);
  fclose (fp);
}

static void
conn_unlink (struct stats_conn *k)
{
  struct rc_stats_server *s = k->s;

  STATS_LIST_UNLINK (s->pending, k);
  s->nr_pending--;
}

/* The request is complete (a line, end-of-file, a full buffer or the
 * timer): answer it.
 */
static void
conn_finish (struct ev_loop *loop, struct stats_conn *k)
{
  size_t n = k->n;
  int prometheus;

  ev_io_stop (loop, &k->io);
  ev_timer_stop (loop, &k->timer);
  conn_unlink (k);
  k->buf[n] = '\0';
  n = strcspn (k->buf, "\r\n");
  while (n > 0 && (k->buf[n-1] == ' ' || k->buf[n-1] == '\t'))
    n--;
  prometheus = n == strlen ("prometheus") &&
    strncmp (k->buf, "prometheus", n) == 0;
  serve (k->s, k->fd, prometheus);
  free (k);
}

static void
on_conn_read (struct ev_loop *loop, ev_io *w, int revents)
{
  struct stats_conn *k = w->data;
  ssize_t r;

  r = recv (k->fd, k->buf + k->n, sizeof k->buf - 1 - k->n, MSG_DONTWAIT);
  if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  if (r == -1) {                /* the client went away */
    ev_io_stop (loop, &k->io);
    ev_timer_stop (loop, &k->timer);
    conn_unlink (k);
    close (k->fd);
    free (k);
    return;
  }
  k->n += r;
  if (r == 0 || memchr (k->buf, '\n', k->n) || k->n == sizeof k->buf - 1)
    conn_finish (loop, k);
}

static void
on_conn_timer (struct ev_loop *loop, ev_timer *w, int revents)
{
  conn_finish (loop, w->data);
}

int
stats_accept (struct ev_loop *loop, ev_io *accept_w, ev_timer *backoff_w,
              int flags)
{
  int fd = accept4 (accept_w->fd, NULL, NULL, SOCK_CLOEXEC | flags);

  /* Out of file descriptors (or memory): the connection stays in the
   * backlog and the level-triggered watcher would fire again at once,
   * spinning.  Stop watching for a while; keep serving afterwards.
   */
  if (fd == -1 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                   errno == ENOMEM)) {
    ev_io_stop (loop, accept_w);
    /* Set again each time: a one-shot timer that has fired keeps its
     * absolute expiry time, and restarting it as is fires at once.
     */
    ev_timer_set (backoff_w, 0.25, 0);
    ev_timer_start (loop, backoff_w);
  }
  return fd;
}

static void
on_backoff (struct ev_loop *loop, ev_timer *w, int revents)
{
  ev_io_start (loop, w->data);
}

void
stats_accept_backoff_init (ev_timer *backoff_w, ev_io *accept_w)
{
  ev_timer_init (backoff_w, on_backoff, 0.25, 0);
  backoff_w->data = accept_w;
}

void
stats_watch_conn (struct ev_loop *loop, ev_io *io, ev_timer *timer,
                  void (*on_io) (struct ev_loop *, ev_io *, int),
                  void (*on_timer) (struct ev_loop *, ev_timer *, int),
                  int fd, double timeout, void *data)
{
  ev_io_init (io, on_io, fd, EV_READ);
  io->data = data;
  ev_io_start (loop, io);
  ev_timer_init (timer, on_timer, timeout, 0);
  timer->data = data;
  ev_timer_start (loop, timer);
}

static void
on_accept (struct ev_loop *loop, ev_io *w, int revents)
{
  struct rc_stats_server *s = w->data;
  struct timeval tv = { .tv_sec = 1 };
  struct stats_conn *k;
  int fd;

  fd = stats_accept (loop, &s->accept_w, &s->backoff_w, 0);
  if (fd == -1)
    return;
  /* A client that does not read must not stall the loop for long. */
  setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  k = s->nr_pending < RC_STATS_MAX_PENDING ? calloc (1, sizeof *k) : NULL;
  if (!k) {
    serve (s, fd, 0);
    return;
  }
  k->s = s;
  k->fd = fd;
  STATS_LIST_PUSH (s->pending, k);
  s->nr_pending++;
  stats_watch_conn (loop, &k->io, &k->timer, on_conn_read, on_conn_timer, fd,
                    RC_STATS_REQUEST_WAIT, k);
}

static void
on_timer (struct ev_loop *loop, ev_timer *w, int revents)
{
  struct rc_stats_server *s = w->data;
  char *line = rc_stats_summary (s->c);

  if (line && s->log)
    s->log (line);
  free (line);
  if (s->stats_file && rc_stats_write_file (s->c, s->stats_file) == -1 &&
      s->log) {
    char msg[512];

    snprintf (msg, sizeof msg, "ra-cache-stats: %s: %s", s->stats_file,
              strerror (errno));
    s->log (msg);
  }
  /* ra-cache-learn: what was learned so far survives a crash. */
  if (rc_cache_learn_save (s->c) == -1 && s->log) {
    char msg[512];

    snprintf (msg, sizeof msg, "ra-cache-learn: %s: %s",
              rc_cache_config (s->c)->learn_file, strerror (errno));
    s->log (msg);
  }
}

static void
on_stop (struct ev_loop *loop, ev_async *w, int revents)
{
  ev_break (loop, EVBREAK_ALL);
}

static void *
loop_main (void *arg)
{
  struct rc_stats_server *s = arg;

  ev_run (s->loop, 0);
  return NULL;
}

/* bind failed with EADDRINUSE: something is at path.  A socket nobody
 * answers on (a server that crashed, or was killed, left it) is removed,
 * so that a restart works: returns 1, try again.  Anything else is
 * refused with a message saying what it is: returns -1.
 */
static int
check_in_use (const char *path, const struct sockaddr_un *addr,
              char *err, size_t len)
{
  struct stat st;
  int fd, r, e;

  if (lstat (path, &st) == -1)
    return 1;                   /* gone since: try again */
  if (!S_ISSOCK (st.st_mode)) {
    snprintf (err, len, "ra-cache-stats-socket: %s exists and is not a "
              "socket (it is a %s): remove it or choose another path", path,
              S_ISREG (st.st_mode) ? "regular file"
              : S_ISDIR (st.st_mode) ? "directory"
              : S_ISLNK (st.st_mode) ? "symbolic link" : "special file");
    return -1;
  }
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd == -1) {
    snprintf (err, len, "ra-cache-stats-socket: socket: %s", strerror (errno));
    return -1;
  }
  /* Non-blocking: a live server with a full backlog gives EAGAIN. */
  r = connect (fd, (const struct sockaddr *) addr, sizeof *addr);
  e = errno;
  close (fd);
  if (r == -1 && e == ECONNREFUSED) {
    if (unlink (path) == -1 && errno != ENOENT) {
      snprintf (err, len, "ra-cache-stats-socket: %s: a stale socket "
                "(nobody answers on it) that cannot be removed: %s",
                path, strerror (errno));
      return -1;
    }
    return 1;
  }
  if (r == 0 || e == EAGAIN || e == EINPROGRESS)
    snprintf (err, len, "ra-cache-stats-socket: %s: another server is "
              "using this socket", path);
  else
    snprintf (err, len, "ra-cache-stats-socket: %s: the path is in use "
              "(connecting to it: %s)", path, strerror (e));
  return -1;
}

int
rc_stats_listen (const char *path, char *err, size_t len)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  struct stat st;
  int fd, tries = 0;

  if (strlen (path) >= sizeof addr.sun_path) {
    snprintf (err, len, "ra-cache-stats-socket: %s: path too long", path);
    return -1;
  }
  strcpy (addr.sun_path, path);
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd == -1) {
    snprintf (err, len, "ra-cache-stats-socket: socket: %s", strerror (errno));
    return -1;
  }
  /* Created mode 0600: the counters are the operator's business.  Not
   * with umask(), which is process-wide and would race other threads
   * creating files.  Linux creates a Unix socket's file with the mode of
   * the socket's own inode (minus the umask: unix_bind in
   * net/unix/af_unix.c), and fchmod on the socket sets that inode's
   * mode: so fchmod before bind creates the file 0600 with no window.
   * Where a system ignores that (fchmod fails, or the file comes out
   * with more bits), chmod the file at once: connecting needs write
   * permission, which nbdkit's umask (0022) already denies group and
   * others, so the window is harmless there.
   */
  (void) fchmod (fd, 0600);
  while (bind (fd, (struct sockaddr *) &addr, sizeof addr) == -1) {
    if (errno == EADDRINUSE && tries++ < 3) {
      if (check_in_use (path, &addr, err, len) == 1)
        continue;
      close (fd);
      return -1;
    }
    snprintf (err, len, "ra-cache-stats-socket: %s: %s", path,
              strerror (errno));
    close (fd);
    return -1;
  }
  if (lstat (path, &st) == 0 && (st.st_mode & 0177) != 0 &&
      chmod (path, 0600) == -1) {
    snprintf (err, len, "ra-cache-stats-socket: %s: chmod: %s", path,
              strerror (errno));
    close (fd);
    unlink (path);
    return -1;
  }
  if (listen (fd, 16) == -1) {
    snprintf (err, len, "ra-cache-stats-socket: listen: %s",
              strerror (errno));
    close (fd);
    unlink (path);
    return -1;
  }
  return fd;
}

int
rc_stats_bind (struct rc_stats_listeners *l, const char *socket_path,
               const char *listen_spec, char *err, size_t len)
{
  l->unix_fd = l->http_fd = -1;
  l->socket_path = socket_path;
  if (socket_path &&
      (l->unix_fd = rc_stats_listen (socket_path, err, len)) == -1)
    return -1;
  if (listen_spec &&
      (l->http_fd = rc_stats_listen_tcp (listen_spec, err, len)) == -1) {
    rc_stats_unbind (l);
    return -1;
  }
  return 0;
}

void
rc_stats_unbind (struct rc_stats_listeners *l)
{
  if (l->unix_fd >= 0) {
    close (l->unix_fd);
    unlink (l->socket_path);
  }
  if (l->http_fd >= 0)
    close (l->http_fd);
  l->unix_fd = l->http_fd = -1;
}

struct rc_stats_server *
rc_stats_server_start (struct rc_cache *c, struct rc_stats_listeners *l,
                       unsigned interval_secs, const char *stats_file,
                       void (*log) (const char *line),
                       char *err, size_t len)
{
  struct rc_stats_server *s = calloc (1, sizeof *s);
  int e;

  if (!s) {
    snprintf (err, len, "ra-cache stats: %s", strerror (errno));
    return NULL;
  }
  s->c = c;
  s->fd = -1;
  s->http_fd = -1;
  s->log = log;
  s->loop = ev_loop_new (EVFLAG_AUTO);
  if (!s->loop) {
    snprintf (err, len, "ra-cache stats: cannot create the libev loop");
    free (s);
    return NULL;
  }
  if (l->unix_fd >= 0) {
    s->path = strdup (l->socket_path);
    if (!s->path) {
      snprintf (err, len, "ra-cache stats: %s", strerror (errno));
      goto fail;
    }
    s->fd = l->unix_fd;
    ev_io_init (&s->accept_w, on_accept, s->fd, EV_READ);
    s->accept_w.data = s;
    ev_io_start (s->loop, &s->accept_w);
    stats_accept_backoff_init (&s->backoff_w, &s->accept_w);
  }
  if (l->http_fd >= 0) {
    s->http = stats_http_start (s->loop, c, l->http_fd);
    if (!s->http) {
      snprintf (err, len, "ra-cache stats: %s", strerror (errno));
      goto fail;
    }
    s->http_fd = l->http_fd;
  }
  if (interval_secs > 0 && stats_file) {
    s->stats_file = strdup (stats_file);
    if (!s->stats_file) {
      snprintf (err, len, "ra-cache stats: %s", strerror (errno));
      goto fail;
    }
  }
  if (interval_secs > 0) {
    ev_timer_init (&s->timer_w, on_timer, interval_secs, interval_secs);
    s->timer_w.data = s;
    ev_timer_start (s->loop, &s->timer_w);
  }
  ev_async_init (&s->stop_w, on_stop);
  ev_async_start (s->loop, &s->stop_w);
  e = pthread_create (&s->thread, NULL, loop_main, s);
  if (e != 0) {
    snprintf (err, len, "ra-cache stats: pthread_create: %s", strerror (e));
    goto fail;
  }
  l->unix_fd = l->http_fd = -1;         /* the server's now */
  return s;

 fail:
  /* l still holds the listeners: the caller closes them. */
  stats_http_stop (s->http);
  free (s->path);
  free (s->stats_file);
  ev_loop_destroy (s->loop);
  free (s);
  return NULL;
}

void
rc_stats_server_stop (struct rc_stats_server *s)
{
  if (!s)
    return;
  ev_async_send (s->loop, &s->stop_w);
  pthread_join (s->thread, NULL);
  /* The loop has stopped: connections still waiting are just closed. */
  while (s->pending) {
    struct stats_conn *k = s->pending;

    s->pending = k->next;
    close (k->fd);
    free (k);
  }
  stats_http_stop (s->http);
  if (s->http_fd >= 0)
    close (s->http_fd);
  if (s->fd >= 0) {
    close (s->fd);
    unlink (s->path);
  }
  free (s->path);
  free (s->stats_file);
  ev_loop_destroy (s->loop);
  free (s);
}
