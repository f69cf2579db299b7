/* ra-trace: the trace of client reads, parsed (src/trace.c).
 *
 * A plain list of "OFFSET LENGTH [STREAM]" lines, or the log written by
 * nbdkit's log filter, detected line by line.  The parser returns errors
 * ("NAME:LINE: message" in t->err) and never exits, so that the tool
 * and the fuzzer (fuzz/fuzz-trace.c) link the same code.
 */
#ifndef RA_TRACE_TRACE_H
#define RA_TRACE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Reads end at most here (NBD offsets are signed 64 bit in nbdkit). */
#define TRACE_MAX_END ((uint64_t) INT64_MAX)

struct trace_read {
  uint64_t offset, length;
  uint64_t stream_id;          /* as written in the trace */
  size_t stream;               /* dense index into the stream states */
  unsigned long line;
};

struct trace {
  const char *name;            /* file name for messages */
  struct trace_read *reads;
  size_t nr, alloc;
  uint64_t max_end;            /* largest offset + length */
  uint64_t log_export_size;    /* largest size= of a log Connect line */
  char *linebuf;               /* trace_read_file's getline buffer */
  size_t linecap;
  char err[512];               /* the message of the last error */
};

/* Read a whole trace from fp into t (t zeroed, t->name set); returns 0,
 * or -1 with the message in t->err.  trace_free frees what it holds
 * either way.
 */
int trace_read_file (struct trace *t, FILE *fp);
void trace_free (struct trace *t);

/* Number the streams densely (in order of their ids) in each read's
 * stream; *n_out of them, their ids in *ids_out (the caller frees it).
 * Returns 0, or -1 with t->err (out of memory).
 */
int trace_number_streams (struct trace *t, uint64_t **ids_out,
                          size_t *n_out);

/* -1 with t->err if a read ends past export_size. */
int trace_check_export_size (struct trace *t, uint64_t export_size);

/* Parse the whole of [s, s + len) as a decimal or 0x hex number; false
 * if it is not one or does not fit in 64 bits.
 */
bool trace_parse_number (const char *s, size_t len, uint64_t *out);
bool trace_is_digit (char c);

#endif /* RA_TRACE_TRACE_H */
