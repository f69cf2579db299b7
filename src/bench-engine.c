/* ra-bench: the engine: the connections (libnbd, connected
 * synchronously) and the one libev loop that drives their asynchronous
 * requests, as the big picture at the top of src/ra-bench.c says.
 * Times are the core's clock, rc_now_ns.
 */

#include <config.h>

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include <libnbd.h>

#include "racache/util.h"
#include "ra-bench.h"

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

/* The run, for the callbacks: libnbd's knows only its slot, and a
 * watcher only its connection.  Set by bench_connect.
 */
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
    if (!bench_next_block (b, c, &block, &is_write))
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
      bench_fill_pattern ((unsigned char *) s->buf, s->offset, len);
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

/* ---- setup, run, cleanup ----------------------------------------------- */

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

/* On failure, what is set up so far is left for bench_cleanup to free. */
int
bench_connect (struct bench *b)
{
  const struct options *o = &b->opt;
  unsigned i;

  the_bench = b;
  b->loop = EV_DEFAULT;
  if (!b->loop) {
    fprintf (stderr, "%s: cannot initialise libev\n", PROGRAM);
    return -1;
  }

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

void
bench_run (struct bench *b)
{
  ev_timer timer;
  ev_signal sigint;
  unsigned i;

  ev_timer_init (&timer, timer_cb, b->opt.time_set ? b->opt.time : 0, 0);
  timer.data = b;
  ev_signal_init (&sigint, sigint_cb, SIGINT);
  sigint.data = b;
  ev_signal_start (b->loop, &sigint);
  ev_unref (b->loop);  /* the signal watcher alone does not keep us running */

  ev_now_update (b->loop);
  b->start_ns = b->last_completion_ns = rc_now_ns ();
  if (b->opt.time_set)
    ev_timer_start (b->loop, &timer);
  for (i = 0; i < b->n_conns; i++) {
    refill (b, &b->conns[i]);
    update_watcher (b, &b->conns[i]);
  }
  if (b->n_finished < b->n_conns && !b->failed)
    ev_run (b->loop, 0);

  if (b->opt.time_set)
    ev_timer_stop (b->loop, &timer);
  ev_ref (b->loop);
  ev_signal_stop (b->loop, &sigint);
}

void
bench_cleanup (struct bench *b)
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
  if (b->loop)
    ev_loop_destroy (b->loop);
}
