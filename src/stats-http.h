/* ra-cache: between the stats server's loop (src/stats-server.c) and its
 * HTTP listener (src/stats-http.c).  Not installed, not for the filter.
 */
#ifndef RACACHE_STATS_HTTP_H
#define RACACHE_STATS_HTTP_H

#include <ev.h>

#include "racache/cache.h"

struct stats_http;

/* Serve HTTP on fd (from rc_stats_listen_tcp) from loop, which runs in
 * the stats thread.  fd stays the caller's: stats_http_stop does not
 * close it.  NULL if out of memory.
 */
struct stats_http *stats_http_start (struct ev_loop *loop, struct rc_cache *c,
                                     int fd);

/* Once the loop has stopped: close the connections still open, free. */
void stats_http_stop (struct stats_http *h);

/* Both listeners accept through these.  stats_accept: accept4 (flags
 * and SOCK_CLOEXEC) on the socket accept_w watches; out of file
 * descriptors or memory, stop accept_w for a while (backoff_w, set up by
 * stats_accept_backoff_init, starts it again).  Returns the new fd, or
 * -1.
 */
int stats_accept (struct ev_loop *loop, ev_io *accept_w, ev_timer *backoff_w,
                  int flags);
void stats_accept_backoff_init (ev_timer *backoff_w, ev_io *accept_w);
/* The two servers' lists of connections, doubly linked through next and
 * prev from head.
 */
#define STATS_LIST_PUSH(head, k)                \
  do {                                          \
    (k)->prev = NULL;                           \
    (k)->next = (head);                         \
    if ((k)->next)                              \
      (k)->next->prev = (k);                    \
    (head) = (k);                               \
  } while (0)
#define STATS_LIST_UNLINK(head, k)              \
  do {                                          \
    if ((k)->prev)                              \
      (k)->prev->next = (k)->next;              \
    else                                        \
      (head) = (k)->next;                       \
    if ((k)->next)                              \
      (k)->next->prev = (k)->prev;              \
  } while (0)

/* Watch an accepted connection: io for reading fd, timer firing after
 * timeout seconds, both with data.
 */
void stats_watch_conn (struct ev_loop *loop, ev_io *io, ev_timer *timer,
                       void (*on_io) (struct ev_loop *, ev_io *, int),
                       void (*on_timer) (struct ev_loop *, ev_timer *, int),
                       int fd, double timeout, void *data);

#endif /* RACACHE_STATS_HTTP_H */
