/* ra-bench: what its pieces share (the big picture is at the top of
 * src/ra-bench.c).
 */
#ifndef RA_BENCH_H
#define RA_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#define PROGRAM "ra-bench"

enum pattern {
  PAT_SEQ, PAT_INTERLEAVED, PAT_MULTICONN, PAT_RANDOM, PAT_STRIDED,
  PAT_BACKWARD, PAT_MIXED,
};

/* Their names, as --pattern takes them and the reports print them. */
extern const char *const pattern_names[];

/* What the command line asked for.  "set" flags tell an explicit value
 * from a default, for the cross-checks.
 */
struct options {
  const char **uris;
  size_t n_uris;
  enum pattern pattern;
  unsigned connections;   bool connections_set;
  unsigned depth;
  uint64_t size;
  uint64_t bytes;         bool bytes_set;
  double time;            bool time_set;
  uint64_t seed;
  uint64_t offset;
  uint64_t length;        bool length_set;
  unsigned streams;       bool streams_set;
  uint64_t stride_read;   bool stride_read_set;
  uint64_t stride_skip;   bool stride_skip_set;
  double write_ratio;     bool write_ratio_set;
  bool json;
};

struct conn;

/* One request slot: a buffer and the request currently using it. */
struct slot {
  struct conn *conn;
  char *buf;
  bool busy;
  bool is_write;
  uint64_t offset;
  uint64_t len;
  uint64_t start_ns;
};

struct conn {
  unsigned index;
  const char *uri;
  struct nbd_handle *nbd;
  ev_io io;
  int events;             /* the events io is started with, 0 = stopped */
  unsigned in_flight;
  bool finished;          /* nothing in flight and nothing more to issue */
  /* interleaved: this connection's streams are index, index + C,
   * index + 2C, ... (C connections), n_streams of them, taken
   * round-robin; next_stream counts the requests generated here.
   */
  unsigned n_streams;
  uint64_t next_stream;
  struct slot *slots;
};

/* The whole run.  Single-threaded: no locking anywhere. */
struct bench {
  struct options opt;
  struct ev_loop *loop;
  struct conn *conns;
  unsigned n_conns;
  unsigned n_finished;

  /* The region as blocks of opt.size bytes. */
  uint64_t region_offset;
  uint64_t blocks;
  uint64_t export_size;

  /* Pattern generator state. */
  bool wrap;              /* a bound was given: sequences may restart */
  uint64_t byte_limit;    /* UINT64_MAX = none */
  uint64_t next_index;    /* requests generated (seq, backward, strided) */
  uint64_t *stream_pos;   /* interleaved, multiconn: per stream */
  uint64_t stream_blocks; /* blocks in each stream's part */
  uint64_t rng;

  /* Progress. */
  bool stopping;          /* time is up or interrupted: issue no more */
  bool interrupted;
  uint64_t issued_bytes;
  uint64_t start_ns, last_completion_ns;

  /* Results of successful requests. */
  uint64_t reads, writes, bytes_read, bytes_written;
  uint64_t *latencies;    /* ns, one per successful request */
  size_t n_latencies, latencies_cap;

  /* The first failure, and how many requests failed. */
  bool failed;
  uint64_t n_errors;
  char *error_message;
};

/* ---- src/bench-pattern.c: the region and the pattern generator --------- */

/* The region and the pattern's shape, now that the export size is known:
 * 0, or -1 after a message.
 */
int bench_plan (struct bench *b);
/* The next block for connection c, or false when the pattern has no
 * more for it.
 */
bool bench_next_block (struct bench *b, struct conn *c, uint64_t *block,
                       bool *is_write);
/* The data a write of len bytes at offset writes. */
void bench_fill_pattern (unsigned char *buf, uint64_t offset, uint64_t len);

/* ---- src/bench-engine.c: the connections and the loop ------------------ */

/* The loop and every connection, checked against the export: 0, or -1
 * after a message (bench_cleanup frees what was set up).
 */
int bench_connect (struct bench *b);
/* Keep the requests in flight until a bound is reached (or ^C), then
 * let them drain; a failure ends the run at once, with b->failed set.
 */
void bench_run (struct bench *b);
/* Close the connections and free all that the run took, the loop too. */
void bench_cleanup (struct bench *b);

/* ---- src/bench-report.c: the figures, as text or JSON ------------------ */

/* Print the run's figures on stdout: text, or JSON with --json.  Sorts
 * b->latencies.
 */
void bench_report (struct bench *b);

#endif /* RA_BENCH_H */
