/* ra-bench: the region and the pattern generator: which block each
 * request uses, and what a write writes (the big picture is at the top
 * of src/ra-bench.c).
 */

#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ra-bench.h"

/* ---- random numbers ---------------------------------------------------- */

/* splitmix64: small, fast, and the same sequence for the same --seed. */
static uint64_t
rng_next (uint64_t *state)
{
  uint64_t z = (*state += UINT64_C (0x9e3779b97f4a7c15));

  z = (z ^ (z >> 30)) * UINT64_C (0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C (0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* Uniform in [0, n), without the modulo bias. */
static uint64_t
rng_below (uint64_t *state, uint64_t n)
{
  uint64_t threshold = -n % n, r;

  do
    r = rng_next (state);
  while (r < threshold);
  return r % n;
}

/* Uniform in [0, 1). */
static double
rng_unit (uint64_t *state)
{
  return (double) (rng_next (state) >> 11) * 0x1.0p-53;
}

/* ---- the plan ---------------------------------------------------------- */

/* The region and the pattern's shape, now that the export size is known. */
int
bench_plan (struct bench *b)
{
  const struct options *o = &b->opt;
  uint64_t length;

  if (o->offset >= b->export_size) {
    fprintf (stderr, "%s: --offset %" PRIu64 " is not inside the export "
             "(%" PRIu64 " bytes)\n", PROGRAM, o->offset, b->export_size);
    return -1;
  }
  length = o->length_set ? o->length : b->export_size - o->offset;
  if (length > b->export_size - o->offset) {
    fprintf (stderr, "%s: --offset %" PRIu64 " + --length %" PRIu64
             " goes past the end of the export (%" PRIu64 " bytes)\n",
             PROGRAM, o->offset, length, b->export_size);
    return -1;
  }
  if (length < o->size) {
    fprintf (stderr, "%s: the region (%" PRIu64 " bytes) is smaller than "
             "the request size (%" PRIu64 " bytes)\n", PROGRAM, length,
             o->size);
    return -1;
  }
  b->region_offset = o->offset;
  b->blocks = length / o->size;

  if (o->pattern == PAT_INTERLEAVED || o->pattern == PAT_MULTICONN) {
    if (o->streams > b->blocks) {
      fprintf (stderr, "%s: %u streams need at least %u requests in the "
               "region, which holds %" PRIu64 "\n", PROGRAM, o->streams,
               o->streams, b->blocks);
      return -1;
    }
    b->stream_blocks = b->blocks / o->streams;
    b->stream_pos = calloc (o->streams, sizeof *b->stream_pos);
    if (!b->stream_pos) {
      perror (PROGRAM ": calloc");
      return -1;
    }
  }

  b->wrap = o->bytes_set || o->time_set;
  if (o->bytes_set)
    b->byte_limit = o->bytes;
  else if (!o->time_set &&
           (o->pattern == PAT_RANDOM || o->pattern == PAT_MIXED))
    b->byte_limit = b->blocks * o->size;   /* as many bytes as one pass */
  else
    b->byte_limit = UINT64_MAX;
  b->rng = o->seed;
  return 0;
}

/* ---- pattern generator ------------------------------------------------- */

/* Reads per pass of the strided pattern: whole strides, plus the reads of
 * the partial stride at the end of the region.
 */
static uint64_t
strided_reads_per_pass (const struct bench *b)
{
  uint64_t K = b->opt.stride_read, S = b->opt.stride_skip;
  uint64_t period = K + S;   /* no overflow: both <= INT64_MAX */
  uint64_t tail = b->blocks % period;

  return b->blocks / period * K + (tail < K ? tail : K);
}

/* The next block for connection c, or false when the pattern has no more
 * for it (one pass done without a bound).
 */
bool
bench_next_block (struct bench *b, struct conn *c, uint64_t *block,
                  bool *is_write)
{
  uint64_t k, stream, pos;

  *is_write = false;
  switch (b->opt.pattern) {
  case PAT_SEQ:
  case PAT_BACKWARD:
    k = b->next_index;
    if (!b->wrap && k >= b->blocks)
      return false;
    b->next_index++;
    k %= b->blocks;
    *block = b->opt.pattern == PAT_SEQ ? k : b->blocks - 1 - k;
    return true;

  case PAT_STRIDED: {
    uint64_t per_pass = strided_reads_per_pass (b);
    uint64_t K = b->opt.stride_read, period = K + b->opt.stride_skip;

    k = b->next_index;
    if (!b->wrap && k >= per_pass)
      return false;
    b->next_index++;
    k %= per_pass;
    *block = k / K * period + k % K;
    return true;
  }

  case PAT_INTERLEAVED:
  case PAT_MULTICONN:
    /* interleaved: stream s belongs to connection s % C, and each
     * connection takes its own streams round-robin (with C = 1: stream
     * 0, 1, ..., N-1, 0, 1, ...).  All streams have the same length, so
     * without a bound a connection's streams end in the same round.
     */
    if (b->opt.pattern == PAT_INTERLEAVED)
      stream = c->index + (c->next_stream % c->n_streams) * b->n_conns;
    else
      stream = c->index;
    pos = b->stream_pos[stream];
    if (!b->wrap && pos >= b->stream_blocks)
      return false;
    b->stream_pos[stream]++;
    if (b->opt.pattern == PAT_INTERLEAVED)
      c->next_stream++;
    *block = stream * b->stream_blocks + pos % b->stream_blocks;
    return true;

  case PAT_RANDOM:
  case PAT_MIXED:
    /* Bounded by bytes only (there is always a byte limit or a time). */
    *block = rng_below (&b->rng, b->blocks);
    if (b->opt.pattern == PAT_MIXED)
      *is_write = rng_unit (&b->rng) < b->opt.write_ratio;
    return true;
  }
  return false;
}

/* Deterministic write data: at every 8-byte aligned offset of the export,
 * its offset as a big-endian 64-bit number, the layout of
 * nbdkit-pattern-plugin(1), so a region written by mixed reads back like
 * the pattern plugin.
 */
void
bench_fill_pattern (unsigned char *buf, uint64_t offset, uint64_t len)
{
  uint64_t i, pos, word;

  for (i = 0; i < len; i++) {
    pos = offset + i;
    word = pos & ~UINT64_C (7);
    buf[i] = (unsigned char) (word >> (8 * (7 - (pos & 7))));
  }
}
