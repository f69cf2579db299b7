/* ra-cache: counters as JSON, and a libev loop in its own thread that
 * serves them on a Unix socket and over HTTP (TCP), and logs a summary
 * line periodically.
 */
#ifndef RACACHE_STATS_SERVER_H
#define RACACHE_STATS_SERVER_H

#include <stdio.h>

#include "racache/cache.h"

/* The layout of the JSON document: raised when a key changes meaning or
 * goes away (keys are only ever added within one schema).
 */
#define RC_STATS_SCHEMA 1

/* Start counting uptime_seconds (when the cache is created). */
void rc_stats_mark_start (void);

/* Write the current counters of c as one JSON document (and a newline). */
int rc_stats_write_json (struct rc_cache *c, FILE *fp);

/* The same figures in the Prometheus text exposition format (0.0.4),
 * from the same list (RC_STATS_ITEMS in include/racache/stats.h):
 * JSON key K is metric ra_cache_K_total when it is a counter, ra_cache_K
 * when it is a gauge; "windows" is ra_cache_windows_total{branch="X"};
 * version, schema and ra_mode are the labels of ra_cache_info (value 1).
 */
int rc_stats_write_prometheus (struct rc_cache *c, FILE *fp);

/* The items of RC_STATS_ITEMS (include/racache/stats.h) as one line of
 * text, PREFIXkey=value key=value ... under the JSON keys, for logs
 * (malloc'd; NULL if out of memory).  flags: 0 for every item but the
 * labels, RC_STATS_SUMMARY_ONLY for those marked SUMMARY.
 */
char *rc_stats_line (struct rc_cache *c, unsigned flags, const char *prefix);

/* The summary line logged every ra-cache-stats-interval:
 * rc_stats_line (c, RC_STATS_SUMMARY_ONLY, "ra-cache: ").
 */
char *rc_stats_summary (struct rc_cache *c);

/* Write the JSON document to path (replaced atomically). */
int rc_stats_write_file (struct rc_cache *c, const char *path);

struct rc_stats_server;

/* Create the Unix socket at path, mode 0600, listening, non-blocking and
 * close-on-exec: done before nbdkit forks, so that a bad path stops it
 * with an error.  Returns the fd, or -1 with a message in err.
 */
int rc_stats_listen (const char *path, char *err, size_t len);

/* Resolve spec (rc_parse_listen in racache/config.h; a host name through getaddrinfo)
 * and listen on TCP there, non-blocking and close-on-exec: done before
 * nbdkit forks, like rc_stats_listen.  Returns the fd, or -1 with a
 * message in err ("ra-cache-stats-listen: ADDR:PORT: Address already in
 * use").
 */
int rc_stats_listen_tcp (const char *spec, char *err, size_t len);

/* The listeners of a stats server: bound before nbdkit forks
 * (rc_stats_bind), then served (rc_stats_server_start takes them over)
 * or closed unserved (rc_stats_unbind).
 */
struct rc_stats_listeners {
  int unix_fd;                  /* ra-cache-stats-socket, or -1 */
  const char *socket_path;      /* its path (the caller's string) */
  int http_fd;                  /* ra-cache-stats-listen, or -1 */
};
#define RC_STATS_LISTENERS_NONE { .unix_fd = -1, .http_fd = -1 }

/* Bind the Unix socket at socket_path and the TCP listener at
 * listen_spec (either may be NULL: none).  Returns 0, or -1 with a
 * message in err and nothing left bound.
 */
int rc_stats_bind (struct rc_stats_listeners *l, const char *socket_path,
                   const char *listen_spec, char *err, size_t len);

/* Close the listeners l still holds, and remove the Unix socket. */
void rc_stats_unbind (struct rc_stats_listeners *l);

/* Start the loop thread, serving the listeners of l: one JSON document
 * to each connection on the Unix socket, HTTP on the TCP listener
 * (GET /metrics, GET /stats: src/stats-http.c).  The server takes them
 * over (l is left holding none) and closes them, removing the socket,
 * when stopped; on failure l still holds them.  interval_secs (0 =
 * never): call log(summary) that often, and rewrite stats_file (may be
 * NULL) then too.  Returns NULL with a message in err on failure.
 */
struct rc_stats_server *
rc_stats_server_start (struct rc_cache *c, struct rc_stats_listeners *l,
                       unsigned interval_secs, const char *stats_file,
                       void (*log) (const char *line),
                       char *err, size_t len);

/* Stop the thread, close the listeners and remove the Unix socket. */
void rc_stats_server_stop (struct rc_stats_server *s);

#endif /* RACACHE_STATS_SERVER_H */
