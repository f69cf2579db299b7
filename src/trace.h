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

struct trace_read {
  uint64_t offset, length;
  uint64_t stream_id;          /* as written in the trace */
  size_t stream;               /* dense index (trace_number_streams) */
  unsigned long line;
};

struct trace {
  const char *name;            /* file name for messages */
  struct trace_read *reads;
  size_t nr, alloc;
  uint64_t max_end;            /* largest offset + length */
  uint64_t log_export_size;    /* largest size= of a log Connect line */
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

/* The export size when none is given: the largest size of the log's
 * Connect lines or the end of the last page read, whichever is larger.
 */
uint64_t trace_export_size (const struct trace *t, uint64_t page_size);

/* -1 with t->err if a read ends past export_size. */
int trace_check_export_size (struct trace *t, uint64_t export_size);

#endif /* RA_TRACE_TRACE_H */
