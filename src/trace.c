/* ra-trace: the trace parser (src/trace.h). */

#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

/* Reads end at most here (NBD offsets are signed 64 bit in nbdkit). */
#define TRACE_MAX_END ((uint64_t) INT64_MAX)

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

/* (The tool never calls setlocale: the C locale's classes.) */
#define is_space(c) isspace ((unsigned char) (c))

/* Parse the whole of [s, s + len) as a decimal or 0x hex number; false
 * if it is not one or does not fit in 64 bits.
 */
static bool
parse_number (const char *s, size_t len, uint64_t *out)
{
  static const char digits[] = "0123456789abcdef";
  bool hex = len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  unsigned base = hex ? 16 : 10;
  uint64_t v = 0;
  size_t i;

  if (len == 0)
    return false;
  for (i = hex ? 2 : 0; i < len; i++) {
    const char *d = s[i] ? strchr (digits, tolower ((unsigned char) s[i]))
      : NULL;

    if (!d || (unsigned) (d - digits) >= base ||
        v > (UINT64_MAX - (unsigned) (d - digits)) / base)
      return false;
    v = v * base + (unsigned) (d - digits);
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
  *p = *tok = s;
  if (*s == '\0')
    return false;
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

/* The first key=NUMBER token of s: 1 with *v set, 0 if there is none,
 * -1 (t->err: "WHAT: bad KEY 'VALUE'") if NUMBER is not a number.
 */
static int
log_field (struct trace *t, unsigned long line, const char *s,
           const char *what, const char *key, uint64_t *v)
{
  size_t k = strlen (key), len;
  const char *tok;

  while (next_token (&s, &tok, &len))
    if (len > k && memcmp (tok, key, k) == 0 && tok[k] == '=') {
      if (!parse_number (tok + k + 1, len - k - 1, v))
        return line_error (t, line, "%s: bad %s '%.*s'", what, key,
                           (int) (len - k - 1), tok + k + 1);
      return 1;
    }
  return 0;
}

/* Does s start with the log filter's time stamp,
 * "YYYY-MM-DD HH:MM:SS[.frac] " ?  Returns the text after it, or NULL.
 */
static const char *
skip_log_timestamp (const char *s)
{
  static const char pattern[] = "dddd-dd-dd dd:dd:dd";
  size_t i;

  for (i = 0; pattern[i]; i++)
    if (pattern[i] == 'd' ? !isdigit ((unsigned char) s[i])
        : s[i] != pattern[i])
      return NULL;
  s += i;
  if (*s == '.') {
    if (!isdigit ((unsigned char) *++s))
      return NULL;
    while (isdigit ((unsigned char) *s))
      s++;
  }
  return is_space (*s) ? s : NULL;
}

static int
add_read (struct trace *t, unsigned long line, uint64_t offset,
          uint64_t length, uint64_t stream_id)
{
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
  t->reads[t->nr++] = (struct trace_read) {
    .offset = offset, .length = length, .stream_id = stream_id, .line = line,
  };
  if (offset + length > t->max_end)
    t->max_end = offset + length;
  return 0;
}

/* A line of nbdkit's log filter, after its time stamp.  Its verb is its
 * first token that is not key=value: Read lines are reads (the stream:
 * the connection), Connect lines give the export size, others are
 * ignored (ra-trace(1)).
 */
static int
parse_log_line (struct trace *t, unsigned long line, const char *s)
{
  const char *args = s, *verb;
  size_t len;
  uint64_t stream = 0, offset, count, size;
  int r, have_offset, have_count;

  do
    if (!next_token (&args, &verb, &len))
      return 0;
  while (memchr (verb, '=', len));
  if (len == 7 && memcmp (verb, "Connect", 7) == 0) {
    r = log_field (t, line, args, "log Connect line", "size", &size);
    if (r == 1 && size > TRACE_MAX_END)       /* nbdkit's sizes are int64_t */
      return line_error (t, line, "log Connect line: size %" PRIu64
                         " is larger than 2^63-1", size);
    if (r == 1 && size > t->log_export_size)
      t->log_export_size = size;
    return r < 0 ? -1 : 0;
  }
  if (len != 4 || memcmp (verb, "Read", 4) != 0)
    return 0;
  if (log_field (t, line, s, "log line", "connection", &stream) == -1 ||
      (have_offset = log_field (t, line, args, "log Read line", "offset",
                                &offset)) == -1 ||
      (have_count = log_field (t, line, args, "log Read line", "count",
                               &count)) == -1)
    return -1;
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
  int n = 0;

  s[strcspn (s, "#")] = '\0';
  while (next_token (&p, &tok, &len)) {
    if (n == 3)
      return line_error (t, line, "expected OFFSET LENGTH [STREAM], found "
                         "more (at '%.*s')", (int) len, tok);
    if (!parse_number (tok, len, &v[n]))
      return line_error (t, line, "%s: '%.*s' is not a number (decimal or "
                         "0x hex)", what[n], (int) len, tok);
    n++;
  }
  if (n == 0)
    return 0;                   /* only a comment */
  if (n == 1)
    return line_error (t, line, "expected OFFSET LENGTH [STREAM], found "
                       "only one number");
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

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
  return x < y ? -1 : x > y;
}

/* Number the streams densely, in order of their ids. */
static int
number_streams (struct trace *t)
{
  uint64_t *ids = t->stream_ids = malloc ((t->nr ? t->nr : 1) * sizeof *ids);
  size_t i, n = 0;

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
  t->nstreams = n;
  return 0;
}

int
trace_read_file (struct trace *t, FILE *fp)
{
  char *buf = NULL;
  size_t cap = 0;
  unsigned long line = 0;
  ssize_t n;
  int r = 0;

  while (r == 0 && (errno = 0, n = getline (&buf, &cap, fp)) != -1) {
    line++;
    if (memchr (buf, '\0', (size_t) n))
      r = line_error (t, line, "a NUL byte: this is not a text trace");
    else
      r = parse_line (t, line, buf);
  }
  if (r == 0 && ferror (fp)) {
    snprintf (t->err, sizeof t->err, "%s: read error: %s", t->name,
              strerror (errno));
    r = -1;
  }
  free (buf);
  return r == 0 ? number_streams (t) : r;
}

int
trace_export_size (struct trace *t, uint64_t page_size, uint64_t *size)
{
  uint64_t end = (t->max_end + page_size - 1) & ~(page_size - 1);
  size_t i;

  if (*size == 0)
    *size = t->log_export_size > end ? t->log_export_size : end;
  for (i = 0; i < t->nr; i++)
    if (t->reads[i].offset + t->reads[i].length > *size)
      return line_error (t, t->reads[i].line, "read at offset %" PRIu64
                         " of %" PRIu64 " bytes ends past the export size (%"
                         PRIu64 ")", t->reads[i].offset, t->reads[i].length,
                         *size);
  return 0;
}

void
trace_free (struct trace *t)
{
  free (t->reads);
  free (t->stream_ids);
}
