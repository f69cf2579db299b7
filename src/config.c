/* ra-cache: configuration keys, parsing, the libconfig file, validation. */

#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libconfig.h>

#include "racache/config.h"
#include "racache/util.h"

#define FIELD(f) offsetof (struct rc_config, f)

/* The names of the enum values, indexed by them: the one table the
 * parser, the debug dump, the counters and ra-trace use.
 */
static const char *const congestion_choices[] = { "skip", "wait", NULL };
static const char *const mode_choices[] = { "kernel", "adaptive", NULL };

const char *
rc_mode_name (enum ra_mode m)
{
  return m <= RA_MODE_ADAPTIVE ? mode_choices[m] : "?";
}

const char *
rc_congestion_name (enum rc_congestion_policy p)
{
  return p <= RC_CONGESTION_WAIT ? congestion_choices[p] : "?";
}

const struct rc_key rc_keys[] = {
  { "ra-cache-size", RC_KEY_SIZE, FIELD (cache_size), NULL,
    RC_MIN_PAGE_SIZE, INT64_MAX, 0, "SIZE", "256M",
    "one page to the memory limit, at least twice ra-max",
    "Page data kept in memory, at most." },
  { "ra-cache-page-size", RC_KEY_SIZE, FIELD (page_size), NULL,
    RC_MIN_PAGE_SIZE, RC_MAX_PAGE_SIZE, RC_KEY_POW2, "SIZE", "4K",
    "a power of two from 512 to 1M",
    "Cache page size." },
  { "ra-mode", RC_KEY_ENUM, FIELD (mode), mode_choices,
    0, 0, 0, "kernel|adaptive", "adaptive", "kernel or adaptive",
    "Window sizing: the kernel's rules, or per stream from measurements." },
  { "ra-max", RC_KEY_SIZE, FIELD (ra_max), NULL,
    0, RC_MAX_RA_MAX, 0, "SIZE", "8M",
    "0 (readahead off) to 1G, whole pages",
    "Largest readahead window (adaptive mode: the upper limit)." },
  { "ra-io-max", RC_KEY_SIZE, FIELD (io_max), NULL,
    RC_MIN_PAGE_SIZE, RC_MAX_IO_MAX, 0, "SIZE", "1M",
    "one page to 32M, whole pages",
    "Largest single backend read." },
  { "ra-max-background", RC_KEY_UNSIGNED, FIELD (max_background), NULL,
    1, RC_MAX_BACKGROUND, 0, "N", "12",
    "1 to 256",
    "Background workers: async backend reads in flight, at most." },
  { "ra-backend-connections", RC_KEY_UNSIGNED, FIELD (backend_connections),
    NULL, 0, RC_MAX_BACKGROUND, RC_KEY_AUTO, "N|auto", "auto",
    "0 to 256, or auto",
    "Backend connections the background workers open and share (auto: 1, "
    "or 4 with a plugin that runs one request at a time per connection; at "
    "most ra-max-background are used)." },
  { "ra-congestion-threshold", RC_KEY_UNSIGNED, FIELD (congestion_threshold),
    NULL, 1, RC_MAX_BACKGROUND, RC_KEY_AUTO, "N|auto", "auto",
    "1 to ra-max-background, or auto",
    "Skip async parts when this many backend reads are in flight (auto: "
    "3/4 of ra-max-background)." },
  { "ra-congestion", RC_KEY_ENUM, FIELD (congestion), congestion_choices,
    0, 0, 0, "skip|wait", "skip", "skip or wait",
    "At the threshold, skip the async part or queue it." },
  { "ra-cache-stats", RC_KEY_STRING, FIELD (stats_file), NULL,
    0, 0, 0, "FILE", "none", "a file path",
    "Write the counters as JSON to this file at exit (and every interval)." },
  { "ra-cache-stats-socket", RC_KEY_STRING, FIELD (stats_socket), NULL,
    0, 0, 0, "PATH", "none", "a Unix socket path",
    "Serve the counters as JSON on this Unix socket (mode 0600)." },
  { "ra-cache-stats-listen", RC_KEY_STRING, FIELD (stats_listen), NULL,
    0, 0, 0, "[ADDR:]PORT", "none",
    "a port from 1 to 65535, after an IPv4 address, [IPv6] or host name "
    "(default 127.0.0.1)",
    "Serve the counters over HTTP on this TCP address, for Prometheus: "
    "GET /metrics (Prometheus text format), GET /stats (JSON)." },
  { "ra-cache-stats-interval", RC_KEY_UNSIGNED, FIELD (stats_interval), NULL,
    0, 86400, 0, "SECS", "0", "0 (off) to 86400 seconds",
    "Log a one-line summary and rewrite the stats and learned files this "
    "often." },
  { "ra-cache-learn", RC_KEY_STRING, FIELD (learn_file), NULL,
    0, 0, 0, "FILE", "none", "a file path",
    "Record which pages clients read into this file, and replay them "
    "ahead of the clients at the next start." },
};
const size_t rc_nkeys = sizeof rc_keys / sizeof rc_keys[0];

void
rc_config_defaults (struct rc_config *c)
{
  memset (c, 0, sizeof *c);
  c->cache_size = RC_DEFAULT_CACHE_SIZE;
  c->page_size = RC_DEFAULT_PAGE_SIZE;
  c->ra_max = RC_DEFAULT_RA_MAX;
  c->io_max = RC_DEFAULT_IO_MAX;
  c->max_background = RC_DEFAULT_MAX_BACKGROUND;
  c->backend_connections = RC_BACKEND_CONNECTIONS_AUTO;
  c->congestion_threshold = 0;  /* derived in rc_config_check */
  c->congestion = RC_CONGESTION_SKIP;
  c->mode = RA_MODE_ADAPTIVE;
}

void
rc_config_free (struct rc_config *c)
{
  free (c->stats_file);
  free (c->stats_socket);
  free (c->stats_listen);
  free (c->learn_file);
  c->stats_file = c->stats_socket = c->stats_listen = c->learn_file = NULL;
}

int
rc_parse_size (const char *s, uint64_t *out)
{
  uint64_t v = 0;
  unsigned shift = 0;
  const char *p = s;

  if (*p < '0' || *p > '9')
    return -1;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (UINT64_MAX - (*p - '0')) / 10)
      return -1;
    v = v * 10 + (*p - '0');
  }
  switch (*p) {
  case '\0': break;
  case 'b': case 'B': shift = 0; p++; break;
  case 'k': case 'K': shift = 10; p++; break;
  case 'm': case 'M': shift = 20; p++; break;
  case 'g': case 'G': shift = 30; p++; break;
  case 't': case 'T': shift = 40; p++; break;
  case 'p': case 'P': shift = 50; p++; break;
  case 'e': case 'E': shift = 60; p++; break;
  default: return -1;
  }
  /* "KiB", "MB": what ra-bench has always taken too. */
  if (shift && (strcmp (p, "iB") == 0 || strcmp (p, "B") == 0))
    p += strlen (p);
  if (*p != '\0')
    return -1;
  if (shift && v > (UINT64_C (1) << (63 - shift)))
    return -1;
  v <<= shift;
  if (v > INT64_MAX)
    return -1;
  *out = v;
  return 0;
}

int
rc_parse_duration (const char *s, uint64_t bare_unit_ns, uint64_t max_ns,
                   uint64_t *out)
{
  static const struct { const char *name; uint64_t ns; } units[] = {
    { "ns", 1 }, { "us", 1000 }, { "ms", 1000000 }, { "s", 1000000000 },
    { "", 0 },                  /* a bare number: bare_unit_ns */
  };
  uint64_t whole = 0, frac = 0, scale = 1, unit;
  size_t k, digits = 0, fd = 0;
  const char *p = s;

  if (strcmp (s, "0") == 0) {
    *out = 0;
    return 0;
  }
  for (; *p >= '0' && *p <= '9'; p++, digits++) {
    if (whole > UINT64_C (1000000000000))
      return -1;
    whole = whole * 10 + (uint64_t) (*p - '0');
  }
  if (*p == '.') {
    for (p++; *p >= '0' && *p <= '9'; p++, fd++) {
      if (fd == 9)
        return -1;
      frac = frac * 10 + (uint64_t) (*p - '0');
      scale *= 10;
    }
    if (fd == 0)
      return -1;
  }
  if (digits + fd == 0)
    return -1;
  for (k = 0; k < sizeof units / sizeof units[0]; k++) {
    if (strcmp (p, units[k].name) != 0)
      continue;
    unit = units[k].ns ? units[k].ns : bare_unit_ns;
    if (unit == 0 || whole > max_ns / unit)
      return -1;
    whole = whole * unit + (frac * unit + scale / 2) / scale;
    if (whole > max_ns)
      return -1;
    *out = whole;
    return 0;
  }
  return -1;
}

int
rc_parse_listen (const char *spec, char *host, size_t hostlen,
                       unsigned *port, char *err, size_t len)
{
  const char *h, *p, *colon;
  size_t hl;

  if (spec[0] == '[') {
    const char *end = strchr (spec, ']');

    if (!end || end[1] != ':') {
      snprintf (err, len, "ra-cache-stats-listen: '%s': not [IPV6]:PORT",
                spec);
      return -1;
    }
    h = spec + 1;
    hl = end - h;
    p = end + 2;
  }
  else if ((colon = strrchr (spec, ':')) != NULL) {
    h = spec;
    hl = colon - spec;
    p = colon + 1;
    if (memchr (h, ':', hl)) {
      snprintf (err, len, "ra-cache-stats-listen: '%s': an IPv6 address "
                "goes in brackets: [ADDR]:PORT", spec);
      return -1;
    }
  }
  else {
    h = RC_DEFAULT_STATS_LISTEN_ADDR;
    hl = strlen (h);
    p = spec;
  }
  if (hl == 0) {
    snprintf (err, len, "ra-cache-stats-listen: '%s': no address before "
              "the port (give ADDR:PORT, or PORT alone for %s)", spec,
              RC_DEFAULT_STATS_LISTEN_ADDR);
    return -1;
  }
  if (hl >= hostlen) {
    snprintf (err, len, "ra-cache-stats-listen: '%s': the address is too "
              "long", spec);
    return -1;
  }
  if (*p == '\0' || strspn (p, "0123456789") != strlen (p) ||
      strlen (p) > 5 || atoi (p) < 1 || atoi (p) > 65535) {
    snprintf (err, len, "ra-cache-stats-listen: '%s': the port '%s' is not "
              "a number from 1 to 65535", spec, p);
    return -1;
  }
  memcpy (host, h, hl);
  host[hl] = '\0';
  *port = atoi (p);
  return 0;
}

static const struct rc_key *
find_key (const char *name)
{
  size_t i;

  for (i = 0; i < rc_nkeys; i++)
    if (strcmp (rc_keys[i].name, name) == 0)
      return &rc_keys[i];
  return NULL;
}

static int
set_number (struct rc_config *c, const struct rc_key *k, uint64_t v,
            char *err, size_t len)
{
  char *field = (char *) c + k->offset;

  if (k->type == RC_KEY_UNSIGNED) {
    if (v > UINT32_MAX) {
      snprintf (err, len, "%s: %" PRIu64 " is too large", k->name, v);
      return -1;
    }
    *(unsigned *) field = v;
  }
  else
    *(uint64_t *) field = v;
  return 0;
}

static int
is_pow2 (uint64_t v)
{
  return v != 0 && (v & (v - 1)) == 0;
}

#define FIELD_IS(k, field) ((k)->offset == FIELD (field))

/* The range of one key on its own, from the table (checks across keys
 * are in rc_config_check), so that a bad value in a file is reported at
 * its line.
 */
static int
check_range (const struct rc_key *k, uint64_t v, char *err, size_t len)
{
  if (v >= k->min && v <= k->max && (!(k->flags & RC_KEY_POW2) || is_pow2 (v)))
    return 0;
  snprintf (err, len, "%s: %" PRIu64 " is out of range: %s", k->name, v,
            k->range);
  return -1;
}

int
rc_config_set (struct rc_config *c, const char *key, const char *value,
               char *err, size_t len)
{
  const struct rc_key *k = find_key (key);
  uint64_t v;
  char *end;

  if (!k)
    return 1;
  if (k->type == RC_KEY_STRING) {
    char **field = (char **) ((char *) c + k->offset);
    char *copy;

    if (*value == '\0') {
      snprintf (err, len, "%s: must not be empty", key);
      return -1;
    }
    /* The syntax now, so that a file reports it at its line; the
     * address is resolved when the filter listens.
     */
    if (FIELD_IS (k, stats_listen)) {
      char host[1025];
      unsigned port;

      if (rc_parse_listen (value, host, sizeof host, &port,
                                 err, len) == -1)
        return -1;
    }
    copy = strdup (value);
    if (!copy) {
      snprintf (err, len, "%s: %s", key, strerror (errno));
      return -1;
    }
    free (*field);
    *field = copy;
    return 0;
  }
  if (k->type == RC_KEY_ENUM) {
    unsigned i;

    /* Every RC_KEY_ENUM field is an enum of small non-negative values,
     * which the compiler stores as an unsigned int.
     */
    _Static_assert (sizeof (enum ra_mode) == sizeof (unsigned) &&
                    sizeof (enum rc_congestion_policy) == sizeof (unsigned),
                    "RC_KEY_ENUM fields are stored as unsigned");
    for (i = 0; k->choices[i]; i++)
      if (strcmp (k->choices[i], value) == 0) {
        *(unsigned *) ((char *) c + k->offset) = i;
        return 0;
      }
    {
      char list[128] = "";

      for (i = 0; k->choices[i]; i++) {
        if (i > 0)
          strncat (list, ", ", sizeof list - strlen (list) - 1);
        strncat (list, k->choices[i], sizeof list - strlen (list) - 1);
      }
      snprintf (err, len, "%s: '%s' is not one of: %s", key, value, list);
    }
    return -1;
  }
  if (k->type == RC_KEY_SIZE) {
    if (rc_parse_size (value, &v) == -1) {
      snprintf (err, len, "%s: '%s' is not a size (digits and an optional "
                "suffix k, M, G, ...)", key, value);
      return -1;
    }
  }
  else if ((k->flags & RC_KEY_AUTO) && strcmp (value, "auto") == 0) {
    if (FIELD_IS (k, backend_connections))
      c->backend_connections = RC_BACKEND_CONNECTIONS_AUTO;
    else
      c->congestion_threshold = 0;
    return 0;
  }
  else {
    errno = 0;
    if (value[0] < '0' || value[0] > '9' ||
        (v = strtoull (value, &end, 10), errno != 0) || *end != '\0') {
      snprintf (err, len, "%s: '%s' is not a whole number%s", key, value,
                (k->flags & RC_KEY_AUTO) ? " or auto" : "");
      return -1;
    }
  }
  if (check_range (k, v, err, len) == -1)
    return -1;
  return set_number (c, k, v, err, len);
}

int
rc_config_load_file (struct rc_config *c, const char *path,
                     bool (*skip) (const char *key, void *arg), void *arg,
                     char *err, size_t len)
{
  config_t cf;
  config_setting_t *root;
  int i, n, r = -1;
  char msg[256];

  config_init (&cf);
  if (config_read_file (&cf, path) == CONFIG_FALSE) {
    if (config_error_type (&cf) == CONFIG_ERR_FILE_IO)
      snprintf (err, len, "%s: cannot read the configuration file: %s",
                path, strerror (errno));
    else
      snprintf (err, len, "%s:%d: %s", path, config_error_line (&cf),
                config_error_text (&cf));
    goto out;
  }
  root = config_root_setting (&cf);
  n = config_setting_length (root);
  for (i = 0; i < n; i++) {
    config_setting_t *s = config_setting_get_elem (root, i);
    const char *name = config_setting_name (s);
    int line = config_setting_source_line (s);
    const struct rc_key *k = find_key (name);
    char text[64];
    const char *value;

    if (!k) {
      snprintf (err, len, "%s:%d: %s: unknown key", path, line, name);
      goto out;
    }
    switch (config_setting_type (s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: {
      long long v = config_setting_get_int64 (s);
      if (v < 0) {
        snprintf (err, len, "%s:%d: %s: %lld must not be negative",
                  path, line, name, v);
        goto out;
      }
      snprintf (text, sizeof text, "%lld", v);
      value = text;
      break;
    }
    case CONFIG_TYPE_STRING:
      if (k->type == RC_KEY_UNSIGNED &&
          !((k->flags & RC_KEY_AUTO) &&
            strcmp (config_setting_get_string (s), "auto") == 0))
        goto wrong_type;
      value = config_setting_get_string (s);
      break;
    default:
    wrong_type:
      snprintf (err, len, "%s:%d: %s: wrong type: expected %s", path, line,
                name,
                k->type == RC_KEY_SIZE
                ? "a size (an integer, or a string such as \"4M\")"
                : (k->flags & RC_KEY_AUTO) ? "an integer or \"auto\""
                : k->type == RC_KEY_UNSIGNED ? "an integer" : "a string");
      goto out;
    }
    if ((k->type == RC_KEY_STRING || k->type == RC_KEY_ENUM) &&
        config_setting_type (s) != CONFIG_TYPE_STRING)
      goto wrong_type;
    if (skip && skip (name, arg))
      continue;                 /* the command line overrides the file */
    if (rc_config_set (c, name, value, msg, sizeof msg) != 0) {
      snprintf (err, len, "%s:%d: %s", path, line, msg);
      goto out;
    }
  }
  r = 0;
 out:
  config_destroy (&cf);
  return r;
}

int
rc_given_add (struct rc_given *g, const char *key, const char *value,
              char *err, size_t len)
{
  struct rc_config scratch;
  size_t i;
  int r;

  rc_config_defaults (&scratch);
  r = rc_config_set (&scratch, key, value, err, len);
  rc_config_free (&scratch);
  if (r != 0)
    return r;
  for (i = 0; i < g->n && strcmp (g->keys[i].key, key) != 0; i++)
    ;
  if (i == sizeof g->keys / sizeof g->keys[0]) {
    snprintf (err, len, "%s: too many ra-cache parameters", key);
    return -1;
  }
  g->keys[i].key = key;
  g->keys[i].value = value;
  if (i == g->n)
    g->n++;
  return 0;
}

bool
rc_given_has (const struct rc_given *g, const char *key)
{
  size_t i;

  for (i = 0; i < g->n; i++)
    if (strcmp (g->keys[i].key, key) == 0)
      return true;
  return false;
}

static bool
given_skip (const char *key, void *g)
{
  return rc_given_has (g, key);
}

int
rc_given_apply (const struct rc_given *g, struct rc_config *c, char *err,
                size_t len)
{
  size_t i;

  if (g->file && rc_config_load_file (c, g->file, given_skip, (void *) g,
                                      err, len) == -1)
    return -1;
  for (i = 0; i < g->n; i++)
    if (rc_config_set (c, g->keys[i].key, g->keys[i].value, err, len) != 0)
      return -1;
  return 0;
}

const char *
rc_config_check (struct rc_config *c, char *buf, size_t len)
{
  if (!is_pow2 (c->page_size) ||
      c->page_size < RC_MIN_PAGE_SIZE || c->page_size > RC_MAX_PAGE_SIZE) {
    snprintf (buf, len, "ra-cache-page-size: %" PRIu64 " must be a power of "
              "two from 512 to 1M", c->page_size);
    return buf;
  }
  if (c->cache_size < c->page_size) {
    snprintf (buf, len, "ra-cache-size: %" PRIu64 " is smaller than one page "
              "(%" PRIu64 ")", c->cache_size, c->page_size);
    return buf;
  }
  if (c->ra_max > RC_MAX_RA_MAX) {
    snprintf (buf, len, "ra-max: %" PRIu64 " is larger than 1G", c->ra_max);
    return buf;
  }
  if (c->ra_max % c->page_size) {
    snprintf (buf, len, "ra-max: %" PRIu64 " is not a whole number of pages "
              "(ra-cache-page-size %" PRIu64 ")", c->ra_max, c->page_size);
    return buf;
  }
  if (c->ra_max > c->cache_size / 2) {
    snprintf (buf, len, "ra-max: %" PRIu64 " is larger than half of "
              "ra-cache-size (%" PRIu64 "): windows would evict themselves",
              c->ra_max, c->cache_size);
    return buf;
  }
  if (c->io_max < c->page_size || c->io_max > RC_MAX_IO_MAX) {
    snprintf (buf, len, "ra-io-max: %" PRIu64 " must be from one page "
              "(%" PRIu64 ") to 32M", c->io_max, c->page_size);
    return buf;
  }
  if (c->io_max % c->page_size) {
    snprintf (buf, len, "ra-io-max: %" PRIu64 " is not a whole number of "
              "pages (ra-cache-page-size %" PRIu64 ")",
              c->io_max, c->page_size);
    return buf;
  }
  if (c->max_background < 1 || c->max_background > RC_MAX_BACKGROUND) {
    snprintf (buf, len, "ra-max-background: %u must be from 1 to %u",
              c->max_background, RC_MAX_BACKGROUND);
    return buf;
  }
  if (c->backend_connections > RC_MAX_BACKGROUND &&
      c->backend_connections != RC_BACKEND_CONNECTIONS_AUTO) {
    snprintf (buf, len, "ra-backend-connections: %u must be from 0 to %u",
              c->backend_connections, RC_MAX_BACKGROUND);
    return buf;
  }
  if (c->congestion_threshold == 0)
    c->congestion_threshold = rc_default_congestion_threshold (c->max_background);
  if (c->congestion_threshold > c->max_background) {
    snprintf (buf, len, "ra-congestion-threshold: %u must be from 1 to "
              "ra-max-background (%u)", c->congestion_threshold,
              c->max_background);
    return buf;
  }
  return NULL;
}

/* The smallest memory limit of the cgroup at path (relative to mount,
 * the controller's mount point) and of its ancestors found in file
 * (memory.max or memory.limit_in_bytes); UINT64_MAX if none.
 */
static uint64_t
cgroup_limit (const char *mount, const char *path, const char *file)
{
  char dir[4096], fname[4200];
  uint64_t best = UINT64_MAX;
  char *slash;

  if (snprintf (dir, sizeof dir, "%s%s", mount, path) >= (int) sizeof dir)
    return best;
  for (;;) {
    FILE *fp;
    char buf[64];

    snprintf (fname, sizeof fname, "%s/%s", dir, file);
    fp = fopen (fname, "re");
    if (fp) {
      if (fgets (buf, sizeof buf, fp) && buf[0] >= '0' && buf[0] <= '9') {
        uint64_t v = strtoull (buf, NULL, 10);
        if (v < best)
          best = v;
      }
      fclose (fp);
    }
    slash = strrchr (dir, '/');
    if (!slash || strlen (dir) <= strlen (mount))
      break;
    *slash = '\0';
  }
  return best;
}

uint64_t
rc_memory_limit (const char **what)
{
  long pages = sysconf (_SC_PHYS_PAGES), psize = sysconf (_SC_PAGESIZE);
  uint64_t limit = UINT64_MAX;
  FILE *fp;
  char line[4096];

  *what = "physical memory";
  if (pages > 0 && psize > 0)
    limit = (uint64_t) pages * psize;
  /* /proc/self/cgroup: "0::/path" (cgroup v2) or "N:memory:/path"
   * (cgroup v1, the memory controller, maybe among others).
   */
  fp = fopen ("/proc/self/cgroup", "re");
  if (!fp)
    return limit;
  while (fgets (line, sizeof line, fp)) {
    char *c1 = strchr (line, ':'), *c2, *nl;
    uint64_t v = UINT64_MAX;
    const char *kind = NULL;

    if (!c1 || !(c2 = strchr (c1 + 1, ':')))
      continue;
    if ((nl = strchr (c2, '\n')))
      *nl = '\0';
    *c2 = '\0';
    if (strcmp (line, "0") == 0 && c1[1] == '\0') {
      v = cgroup_limit ("/sys/fs/cgroup", c2 + 1, "memory.max");
      kind = "the cgroup (v2) memory limit (memory.max)";
    }
    else {
      char *tok, *save = NULL;

      for (tok = strtok_r (c1 + 1, ",", &save); tok;
           tok = strtok_r (NULL, ",", &save))
        if (strcmp (tok, "memory") == 0) {
          v = cgroup_limit ("/sys/fs/cgroup/memory", c2 + 1,
                            "memory.limit_in_bytes");
          kind = "the cgroup (v1) memory limit (memory.limit_in_bytes)";
        }
    }
    if (kind && v < limit) {
      limit = v;
      *what = kind;
    }
  }
  fclose (fp);
  return limit;
}

uint64_t
rc_memory_other_estimate (const struct rc_config *c, unsigned readers)
{
  uint64_t pages = c->page_size ? c->cache_size / c->page_size : 0;
  uint64_t bounce = c->io_max, block = rc_huge_map_len (c->io_max);

  /* A bounce buffer's share of the block of whole huge pages it is cut
   * from, as src/backend-read.c cuts them (rc_huge_pieces).
   */
  if (block) {
    size_t pieces = rc_huge_pieces (c->io_max);

    bounce = (block + pieces - 1) / pieces;
  }
  return pages * RC_MEMORY_PER_PAGE
    + bounce * ((uint64_t) readers + c->max_background)
    + RC_MEMORY_FIXED;
}

/* The --help text: a growing string in a fixed buffer. */
struct help_buf {
  char buf[4096];
  size_t n;
  unsigned col;                 /* column of the end */
};

static void
help_put (struct help_buf *h, const char *s, size_t sl)
{
  size_t i;

  for (i = 0; i < sl && h->n + 1 < sizeof h->buf; i++) {
    h->buf[h->n++] = s[i];
    h->col = s[i] == '\n' ? 0 : h->col + 1;
  }
  h->buf[h->n] = '\0';
}

static void
help_pad (struct help_buf *h, unsigned to)
{
  while (h->col < to && h->n + 1 < sizeof h->buf)
    help_put (h, " ", 1);
}

/* "KEY=META", then text from column 28 (on the next line if the first
 * has no room), wrapped at 76 columns.
 */
static void
help_entry (struct help_buf *h, const char *key, const char *meta,
            const char *text)
{
  const char *w = text;

  if (h->n > 0)
    help_put (h, "\n", 1);
  help_put (h, key, strlen (key));
  help_put (h, "=", 1);
  help_put (h, meta, strlen (meta));
  if (h->col > 26)
    help_put (h, "\n", 1);
  help_pad (h, 28);
  while (*w) {
    size_t wl = strcspn (w, " ");

    if (h->col > 28 && h->col + 1 + wl > 76) {
      help_put (h, "\n", 1);
      help_pad (h, 28);
    }
    else if (h->col > 28)
      help_put (h, " ", 1);
    help_put (h, w, wl);
    w += wl;
    w += strspn (w, " ");
  }
}

static struct help_buf help;
static pthread_once_t help_once = PTHREAD_ONCE_INIT;

static void
make_help (void)
{
  size_t i;

  help_entry (&help, "ra-cache-config", "FILE",
              "A libconfig file setting the keys below; the command line "
              "overrides it.");
  for (i = 0; i < rc_nkeys; i++) {
    char text[512];

    snprintf (text, sizeof text, "%s Default %s; %s.", rc_keys[i].help,
              rc_keys[i].def, rc_keys[i].range);
    help_entry (&help, rc_keys[i].name, rc_keys[i].meta, text);
  }
}

const char *
rc_config_help (void)
{
  pthread_once (&help_once, make_help);
  return help.buf;
}

void
rc_config_describe (const struct rc_config *c, bool one_call_per_ctx,
                    char *buf, size_t len)
{
  size_t n = 0, i;

  buf[0] = '\0';
  for (i = 0; i < rc_nkeys && n < len; i++) {
    const struct rc_key *k = &rc_keys[i];
    const char *field = (const char *) c + k->offset;
    const char *sep = n ? " " : "";

    switch (k->type) {
    case RC_KEY_SIZE:
      n += snprintf (buf + n, len - n, "%s%s=%" PRIu64, sep, k->name,
                     *(const uint64_t *) field);
      break;
    case RC_KEY_UNSIGNED:
      n += snprintf (buf + n, len - n, "%s%s=%u", sep, k->name,
                     FIELD_IS (k, backend_connections)
                     ? rc_backend_connections (c, one_call_per_ctx)
                     : *(const unsigned *) field);
      break;
    case RC_KEY_ENUM:
      n += snprintf (buf + n, len - n, "%s%s=%s", sep, k->name,
                     k->choices[*(const unsigned *) field]);
      break;
    case RC_KEY_STRING:
      n += snprintf (buf + n, len - n, "%s%s=%s", sep, k->name,
                     *(char *const *) field ? *(char *const *) field
                     : "none");
      break;
    }
  }
}
