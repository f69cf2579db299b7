/* ra-cache: every tunable in one struct, with its default and limits.
 *
 * The keys are the same as nbdkit parameters and in a libconfig file
 * (ra-cache-config=FILE).  rc_keys[] is the list of them; the filter's
 * --help text, the man page and etc/ra-cache.conf repeat it for their
 * readers, and a test checks that all of them name the same keys and
 * defaults.
 */
#ifndef RACACHE_CONFIG_H
#define RACACHE_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "racache/readahead.h"

/* Defaults (the man page, PARAMETERS, and bench/RESULTS.md's measurements
 * say why): a window must cover the bandwidth-delay product that one
 * reader can use (bandwidth times latency).  8 MiB is the largest
 * window whose backend reads (8 of ra-io-max) stay below the default
 * congestion threshold (9): a larger one makes its own stream look
 * congested and skips its next async part.  In adaptive mode (the
 * default) ra-max is only the upper limit: each stream's windows follow
 * its measured needs.  1 MiB backend requests keep the per-request
 * latency small compared to the transfer while staying far below the
 * sizes that backends have failed to allocate.
 */
#define RC_DEFAULT_CACHE_SIZE      (UINT64_C(256) << 20)
#define RC_DEFAULT_PAGE_SIZE       4096u
#define RC_DEFAULT_RA_MAX          (UINT64_C(8) << 20)
#define RC_DEFAULT_IO_MAX          (UINT64_C(1) << 20)
#define RC_DEFAULT_MAX_BACKGROUND  12u
/* Backend connections the workers share (ra-backend-connections).  The
 * default is chosen when the workers start, from how the plugin runs
 * requests: the nbd plugin (libnbd) and nbdkit's parallel plugins carry
 * many reads at once on one connection, so one keeps 12 workers busy;
 * every connection costs the server threads and buffers of its own (an
 * nbdkit server: -t threads, each warming its own buffer; nbd-server: a
 * process) that a short job pays for, and servers that limit
 * connections (qemu-nbd allows 1 by default, -e N) keep slots for
 * clients.  A plugin that runs one request at a time per connection
 * (curl and ssh in nbdkit 1.32) gets RC_SERIAL_BACKEND_CONNECTIONS, so
 * that that many reads run at once.
 */
#define RC_BACKEND_CONNECTIONS_AUTO   UINT_MAX
#define RC_PARALLEL_BACKEND_CONNECTIONS 1u
#define RC_SERIAL_BACKEND_CONNECTIONS 4u
/* Adaptive mode: a stream's largest window is never below this (nor
 * below ra-max, if that is smaller): the kernel's default ra_pages.
 */
#define RC_ADAPT_MIN_WINDOW        (UINT64_C(128) << 10)

#define RC_MIN_PAGE_SIZE   512u
#define RC_MAX_PAGE_SIZE   (1u << 20)
#define RC_MAX_RA_MAX      (UINT64_C(1) << 30)
#define RC_MAX_IO_MAX      (UINT64_C(32) << 20)
#define RC_MAX_BACKGROUND  256u

/* ra-mode is the engine's enum ra_mode (racache/readahead.h):
 * RA_MODE_KERNEL or RA_MODE_ADAPTIVE.
 */

enum rc_congestion_policy {
  RC_CONGESTION_SKIP = 0,     /* drop the async part (kernel/FUSE rule) */
  RC_CONGESTION_WAIT = 1,     /* queue it until in-flight drops below */
};

/* Their names, as the keys take them ("kernel", "adaptive"; "skip",
 * "wait").
 */
const char *rc_mode_name (enum ra_mode m);
const char *rc_congestion_name (enum rc_congestion_policy p);

struct rc_config {
  uint64_t cache_size;        /* bytes of page data, at most */
  uint64_t page_size;         /* bytes, power of two */
  uint64_t ra_max;            /* bytes, largest window; 0 = readahead off */
  uint64_t io_max;            /* bytes, largest backend read */
  unsigned max_background;    /* async backend reads in flight, at most */
  unsigned backend_connections; /* the workers' own backend connections;
                                * RC_BACKEND_CONNECTIONS_AUTO: chosen by
                                * the plugin's thread model */
  unsigned congestion_threshold; /* skip the async part at this many in flight;
                                  * 0 = 3/4 of max_background */
  enum rc_congestion_policy congestion; /* ra-congestion */
  enum ra_mode mode;          /* ra-mode */
  char *stats_file;           /* JSON written at exit, or NULL */
  char *stats_socket;         /* Unix socket serving JSON, or NULL */
  char *stats_listen;         /* [ADDR:]PORT serving HTTP, or NULL */
  unsigned stats_interval;    /* seconds between summary log lines, 0 = off */
  char *learn_file;           /* ra-cache-learn: learned file, or NULL */
};

/* The backend connections the workers open (before the min with the
 * number of workers): ra-backend-connections, or its default for a
 * plugin that carries many requests per connection or one at a time
 * (one_call_per_ctx).
 */
static inline unsigned
rc_backend_connections (const struct rc_config *c, bool one_call_per_ctx)
{
  if (c->backend_connections != RC_BACKEND_CONNECTIONS_AUTO)
    return c->backend_connections;
  return one_call_per_ctx ? RC_SERIAL_BACKEND_CONNECTIONS
    : RC_PARALLEL_BACKEND_CONNECTIONS;
}

/* The default ra-congestion-threshold: 3/4 of ra-max-background,
 * rounded up.
 */
static inline unsigned
rc_default_congestion_threshold (unsigned max_background)
{
  return (max_background * 3 + 3) / 4;
}

enum rc_key_type { RC_KEY_SIZE, RC_KEY_UNSIGNED, RC_KEY_STRING, RC_KEY_ENUM };

/* Flags of a key's values. */
#define RC_KEY_AUTO  1u          /* also takes "auto" */
#define RC_KEY_POW2  2u          /* a power of two */

/* One key: the one table (src/config.c) that parsing, validation,
 * --help, the debug dump and the documentation tests read.
 */
struct rc_key {
  const char *name;
  enum rc_key_type type;
  size_t offset;              /* of the field in struct rc_config */
  const char *const *choices; /* RC_KEY_ENUM: the values, in enum order
                               * (the field is an enum type) */
  uint64_t min, max;          /* RC_KEY_SIZE, RC_KEY_UNSIGNED */
  unsigned flags;             /* RC_KEY_* */
  const char *meta;           /* the value in --help: SIZE, N, ... */
  const char *def;            /* default, as the documentation writes it */
  const char *range;          /* range, as the documentation writes it */
  const char *help;           /* one sentence */
};

extern const struct rc_key rc_keys[];
extern const size_t rc_nkeys;

void rc_config_defaults (struct rc_config *c);
/* Free the strings a configuration owns. */
void rc_config_free (struct rc_config *c);

/* The --help text of every key, from rc_keys (a static string). */
const char *rc_config_help (void);
/* The configuration c as "key=value" pairs in rc_keys' order, space
 * separated, into buf (len bytes): sizes and numbers as integers,
 * ra-backend-connections resolved for a backend that runs one call per
 * connection or not (rc_backend_connections).
 */
void rc_config_describe (const struct rc_config *c, bool one_call_per_ctx,
                         char *buf, size_t len);

/* Parse a size the way nbdkit does: decimal digits and an optional
 * binary suffix (b, k, M, G, T, P, E, either case, that last one
 * optionally followed by "iB" or "B": "1MiB"), at most 2^63 - 1.
 * Returns -1 if it is not one.  The one size parser of the core and the
 * tools.
 */
int rc_parse_size (const char *s, uint64_t *out);

/* Parse a duration into ns: "0", or a decimal number (a fraction of at
 * most 9 digits allowed) and a unit ns, us, ms or s ("20ms", "1.5s").
 * A number without a unit is in units of bare_unit_ns, or, when that
 * is 0, not a duration.  At most max_ns.  Returns -1 if it is not one.
 * The one duration parser of the tools (ra-trace, ra-bench).
 */
int rc_parse_duration (const char *s, uint64_t bare_unit_ns, uint64_t max_ns,
                       uint64_t *out);

/* ra-cache-stats-listen=[ADDR:]PORT: the address when only a port is
 * given (loopback: the counters are the operator's business).
 */
#define RC_DEFAULT_STATS_LISTEN_ADDR "127.0.0.1"

/* Split spec, [ADDR:]PORT, into the address (without the brackets of
 * [IPV6]; RC_DEFAULT_STATS_LISTEN_ADDR when there is none) in host,
 * hostlen bytes, and the port, 1 to 65535.  Only the syntax: the address
 * is resolved when the filter listens (rc_stats_listen_tcp).  Returns 0,
 * or -1 with a message in err.
 */
int rc_parse_listen (const char *spec, char *host, size_t hostlen,
                     unsigned *port, char *err, size_t len);

/* Set key to value (text, as on the command line).  Returns 0 on
 * success, -1 with a message in err for a bad value, 1 if the key is not
 * one of ra-cache's.
 */
int rc_config_set (struct rc_config *c, const char *key, const char *value,
                   char *err, size_t len);

/* Read a libconfig file and set every key in it, except those for which
 * skip(key) is true (given on the command line, which overrides the
 * file).  Returns 0, or -1 with a message naming the file, the line and
 * the key in err.
 */
int rc_config_load_file (struct rc_config *c, const char *path,
                         bool (*skip) (const char *key, void *arg),
                         void *arg, char *err, size_t len);

/* The keys a program was given on its command line (the filter's
 * parameters, ra-trace's options) and its configuration file
 * (ra-cache-config, --config): the command line overrides the file,
 * whatever their order.  The strings are not copied.
 */
struct rc_given {
  const char *file;             /* NULL: none */
  size_t n;                     /* keys given (a key given again replaces
                                 * its value: at most one per key) */
  struct { const char *key, *value; } keys[32];
};

/* Note key=value given, its value checked now (so that the message
 * names it at once).  Returns 0, -1 with a message in err, or 1 if key
 * is not one of ra-cache's.
 */
int rc_given_add (struct rc_given *g, const char *key, const char *value,
                  char *err, size_t len);
bool rc_given_has (const struct rc_given *g, const char *key);
/* Set the keys of g->file in c, but those given, then those given.
 * Returns 0, or -1 with a message in err.
 */
int rc_given_apply (const struct rc_given *g, struct rc_config *c,
                    char *err, size_t len);

/* Cross-check a configuration and fill in derived values.  Returns NULL
 * when it is valid, else a message naming the key that is wrong, written
 * into buf.
 */
const char *rc_config_check (struct rc_config *c, char *buf, size_t len);

/* The memory this process may use at most: physical memory, or the
 * memory limit of its cgroup (v2 memory.max, v1 memory.limit_in_bytes,
 * of its cgroup and every ancestor) if smaller.  *what names which.
 */
uint64_t rc_memory_limit (const char **what);

/* The memory beyond page data that a filter with configuration c may
 * come to hold (the memory_other_bytes gauge), for reads from up to
 * readers threads at once (nbdkit's threads, over all connections) and
 * c->max_background workers: RC_MEMORY_PER_PAGE bytes per page of
 * ra-cache-size (the page struct and hash buckets), a bounce buffer
 * for each read at once (ra-io-max, or its share of the huge pages it
 * is cut from: src/backend-read.c), and RC_MEMORY_FIXED bytes of
 * tables and of rounding to whole huge pages.  The man page's formula
 * (MEMORY) is this.
 */
#define RC_MEMORY_PER_PAGE 96
#define RC_MEMORY_FIXED (UINT64_C (4) << 20)
uint64_t rc_memory_other_estimate (const struct rc_config *c,
                                   unsigned readers);

#endif /* RACACHE_CONFIG_H */
