/* ra-trace: the trace parser (src/trace.h). */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

/* Record "NAME:LINE: message" in t->err; returns -1. */
static int __attribute__ ((format (printf, 3, 4)))
line_error (struct trace *t, unsigned long line, const char *fmt, ...)
{
  va_list ap;
  int n;

  n = snprintf (t->err, sizeof t->err, "%s:%lu: ", t->name, line);
  if (n < 0 || (size_t) n >= sizeof t->err)
    n = 0;
  va_start (ap, fmt);
  vsnprintf (t->err + n, sizeof t->err - (size_t) n, fmt, ap);
  va_end (ap);
  return -1;
}

static bool
is_space (char c)
{
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
    c == '\f';
}

bool
trace_is_digit (char c)
{
  return c >= '0' && c <= '9';
}

static int
hex_value (char c)
{
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Parse the whole of [s, s + len) as a decimal or 0x hex number.
 * Returns false if it is not one or does not fit in 64 bits.
 */
bool
trace_parse_number (const char *s, size_t len, uint64_t *out)
{
  uint64_t v = 0;
  size_t i = 0;

  if (len == 0)
    return false;
  if (len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    for (i = 2; i < len; i++) {
      int d = hex_value (s[i]);
      if (d < 0 || v > (UINT64_MAX >> 4))
        return false;
      v = (v << 4) | (unsigned) d;
    }
  }
  else {
    for (i = 0; i < len; i++) {
      if (!trace_is_digit (s[i]) || v > (UINT64_MAX - (unsigned) (s[i] - '0')) / 10)
        return false;
      v = v * 10 + (unsigned) (s[i] - '0');
    }
  }
  *out = v;
  return true;
}

/* The next whitespace-separated token from *p (NUL-terminated string);
 * a double-quoted part (as in export="a b") belongs to the token, with
 * backslash escapes.  Returns false at the end of the string.
 */
static bool
next_token (const char **p, const char **tok, size_t *len)
{
  const char *s = *p;
  bool quoted = false;

  while (is_space (*s))
    s++;
  if (*s == '\0') {
    *p = s;
    return false;
  }
  *tok = s;
  for (; *s && (quoted || !is_space (*s)); s++) {
    if (quoted && *s == '\\' && s[1])
      s++;
    else if (*s == '"')
      quoted = !quoted;
  }
  *len = (size_t) (s - *tok);
  *p = s;
  return true;
}

/* Does the token start with key= ?  Then *val is the value. */
static bool
token_key (const char *tok, size_t len, const char *key,
           const char **val, size_t *vlen)
{
  size_t k = strlen (key);

  if (len <= k || memcmp (tok, key, k) != 0 || tok[k] != '=')
    return false;
  *val = tok + k + 1;
  *vlen = len - k - 1;
  return true;
}

static bool
token_is (const char *tok, size_t len, const char *word)
{
  return len == strlen (word) && memcmp (tok, word, len) == 0;
}

/* Does s start with the log filter's time stamp,
 * "YYYY-MM-DD HH:MM:SS[.frac] " ?  Returns the text after it, or NULL.
 */
static const char *
skip_log_timestamp (const char *s)
{
  static const char pattern[] = "dddd-dd-dd dd:dd:dd";
  size_t i;

  for (i = 0; pattern[i]; i++) {
    if (pattern[i] == 'd' ? !trace_is_digit (s[i]) : s[i] != pattern[i])
      return NULL;
  }
  s += i;
  if (*s == '.') {
    s++;
    if (!trace_is_digit (*s))
      return NULL;
    while (trace_is_digit (*s))
      s++;
  }
  if (!is_space (*s))
    return NULL;
  return s;
}

static int
add_read (struct trace *t, unsigned long line, uint64_t offset,
          uint64_t length, uint64_t stream_id)
{
  struct trace_read *r;

  if (length == 0)
    return line_error (t, line, "the length of a read must not be 0");
  if (offset > TRACE_MAX_END || length > TRACE_MAX_END - offset)
    return line_error (t, line, "read at offset %" PRIu64 " of %" PRIu64
                " bytes ends past 2^63-1", offset, length);
  if (t->nr == t->alloc) {
    size_t alloc = t->alloc ? 2 * t->alloc : 1024;
    struct trace_read *reads = realloc (t->reads, alloc * sizeof *reads);

    if (!reads)
      return line_error (t, line, "out of memory");
    t->reads = reads;
    t->alloc = alloc;
  }
  r = &t->reads[t->nr++];
  r->offset = offset;
  r->length = length;
  r->stream_id = stream_id;
  r->stream = 0;
  r->line = line;
  if (offset + length > t->max_end)
    t->max_end = offset + length;
  return 0;
}

/* A line written by nbdkit's log filter, after its time stamp (or a
 * line starting with "connection=").  Read lines are reads, with their
 * connection number as the stream; Connect lines give the export size;
 * every other line (the ...Read completions, writes, flushes, Ready,
 * Preconnect, Disconnect, ...) is ignored.
 */
static int
parse_log_line (struct trace *t, unsigned long line, const char *s)
{
  const char *tok, *val;
  size_t len, vlen;
  uint64_t stream = 0, offset = 0, count = 0, size;
  bool have_offset = false, have_count = false;

  if (!next_token (&s, &tok, &len))
    return 0;
  if (token_key (tok, len, "connection", &val, &vlen)) {
    if (!trace_parse_number (val, vlen, &stream))
      return line_error (t, line, "log line: bad connection number '%.*s'",
                  (int) vlen, val);
    if (!next_token (&s, &tok, &len))
      return 0;
  }
  if (token_is (tok, len, "Connect")) {
    while (next_token (&s, &tok, &len)) {
      if (token_key (tok, len, "size", &val, &vlen)) {
        if (!trace_parse_number (val, vlen, &size))
          return line_error (t, line, "log Connect line: bad size '%.*s'",
                      (int) vlen, val);
        if (size > TRACE_MAX_END)     /* nbdkit's sizes are int64_t */
          return line_error (t, line, "log Connect line: size %" PRIu64
                      " is larger than 2^63-1", size);
        if (size > t->log_export_size)
          t->log_export_size = size;
      }
    }
    return 0;
  }
  if (!token_is (tok, len, "Read"))
    return 0;
  while (next_token (&s, &tok, &len)) {
    if (token_key (tok, len, "offset", &val, &vlen)) {
      if (!trace_parse_number (val, vlen, &offset))
        return line_error (t, line, "log Read line: bad offset '%.*s'",
                    (int) vlen, val);
      have_offset = true;
    }
    else if (token_key (tok, len, "count", &val, &vlen)) {
      if (!trace_parse_number (val, vlen, &count))
        return line_error (t, line, "log Read line: bad count '%.*s'",
                    (int) vlen, val);
      have_count = true;
    }
  }
  if (!have_offset || !have_count)
    return line_error (t, line, "log Read line without offset= and count=");
  return add_read (t, line, offset, count, stream);
}

/* A plain line: OFFSET LENGTH [STREAM] [# comment]. */
static int
parse_plain_line (struct trace *t, unsigned long line, char *s)
{
  static const char *const what[3] = { "OFFSET", "LENGTH", "STREAM" };
  uint64_t v[3] = { 0, 0, 0 };
  const char *p = s, *tok;
  size_t len;
  char *hash = strchr (s, '#');
  int n = 0;

  if (hash)
    *hash = '\0';
  while (next_token (&p, &tok, &len)) {
    if (n == 3)
      return line_error (t, line, "expected OFFSET LENGTH [STREAM], found more "
                  "(at '%.*s')", (int) len, tok);
    if (!trace_parse_number (tok, len, &v[n]))
      return line_error (t, line, "%s: '%.*s' is not a number (decimal or 0x hex)",
                  what[n], (int) len, tok);
    n++;
  }
  if (n == 0)
    return 0;                   /* only a comment */
  if (n == 1)
    return line_error (t, line, "expected OFFSET LENGTH [STREAM], found only one "
                "number");
  return add_read (t, line, v[0], v[1], v[2]);
}

static int
parse_line (struct trace *t, unsigned long line, char *s)
{
  const char *rest;

  while (is_space (*s))
    s++;
  if (*s == '\0' || *s == '#')
    return 0;
  if ((rest = skip_log_timestamp (s)) != NULL)
    return parse_log_line (t, line, rest);
  if (strncmp (s, "connection=", 11) == 0)
    return parse_log_line (t, line, s);
  return parse_plain_line (t, line, s);
}

int
trace_read_file (struct trace *t, FILE *fp)
{
  ssize_t n;
  unsigned long line = 0;

  while (errno = 0, (n = getline (&t->linebuf, &t->linecap, fp)) != -1) {
    line++;
    if (memchr (t->linebuf, '\0', (size_t) n))
      return line_error (t, line, "a NUL byte: this is not a text trace");
    if (parse_line (t, line, t->linebuf) == -1)
      return -1;
  }
  if (ferror (fp)) {
    snprintf (t->err, sizeof t->err, "%s: read error: %s", t->name,
              strerror (errno));
    return -1;
  }
  free (t->linebuf);
  t->linebuf = NULL;
  t->linecap = 0;
  return 0;
}

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
  return x < y ? -1 : x > y;
}

int
trace_number_streams (struct trace *t, uint64_t **ids_out, size_t *n_out)
{
  uint64_t *ids;
  size_t i, n = 0;

  ids = malloc ((t->nr ? t->nr : 1) * sizeof *ids);
  if (!ids) {
    snprintf (t->err, sizeof t->err, "out of memory");
    return -1;
  }
  for (i = 0; i < t->nr; i++)
    ids[i] = t->reads[i].stream_id;
  qsort (ids, t->nr, sizeof *ids, cmp_u64);
  for (i = 0; i < t->nr; i++)
    if (n == 0 || ids[n - 1] != ids[i])
      ids[n++] = ids[i];
  for (i = 0; i < t->nr; i++) {
    uint64_t *f = bsearch (&t->reads[i].stream_id, ids, n, sizeof *ids,
                           cmp_u64);
    t->reads[i].stream = (size_t) (f - ids);
  }
  *ids_out = ids;
  *n_out = n;
  return 0;
}

int
trace_check_export_size (struct trace *t, uint64_t export_size)
{
  size_t i;

  for (i = 0; i < t->nr; i++)
    if (t->reads[i].offset + t->reads[i].length > export_size)
      return line_error (t, t->reads[i].line, "read at offset %" PRIu64
                         " of %" PRIu64 " bytes ends past the export size (%"
                         PRIu64 ")", t->reads[i].offset, t->reads[i].length,
                         export_size);
  return 0;
}

void
trace_free (struct trace *t)
{
  free (t->linebuf);
  free (t->reads);
  t->linebuf = NULL;
  t->reads = NULL;
  t->nr = t->alloc = t->linecap = 0;
}

