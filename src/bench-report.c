/* ra-bench: the report: a run's figures (throughput, IOPS, exact
 * latency percentiles) as text or as one JSON object.
 */

#include <config.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ra-bench.h"

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[n], in ms: the smallest value
 * with at least pct% of the values at or below it.
 */
static double
percentile_ms (const uint64_t *v, size_t n, unsigned pct)
{
  size_t rank;

  if (n == 0)
    return 0;
  rank = (size_t) (((uint64_t) pct * n + 99) / 100);   /* ceil (pct/100 n) */
  if (rank < 1)
    rank = 1;
  if (rank > n)
    rank = n;
  return (double) v[rank - 1] / 1e6;
}

static void
json_string (FILE *fp, const char *s)
{
  const unsigned char *p;

  fputc ('"', fp);
  for (p = (const unsigned char *) s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf (fp, "\\%c", *p);
    else if (*p < 0x20)
      fprintf (fp, "\\u%04x", *p);
    else
      fputc (*p, fp);
  }
  fputc ('"', fp);
}

/* The figures of a run, as both reports print them. */
struct results {
  uint64_t requests, bytes;
  double secs, mbps, mibps, iops;
  double p50, p90, p99, maxms, minms, mean;   /* latencies in ms */
};

/* Sorts b->latencies. */
static void
summarise (struct bench *b, struct results *r)
{
  uint64_t elapsed_ns = b->last_completion_ns > b->start_ns
    ? b->last_completion_ns - b->start_ns : 0;
  size_t i;

  r->requests = b->reads + b->writes;
  r->bytes = b->bytes_read + b->bytes_written;
  r->secs = (double) elapsed_ns / 1e9;
  r->mbps = r->secs > 0 ? (double) r->bytes / r->secs / 1e6 : 0;
  r->mibps = r->secs > 0 ? (double) r->bytes / r->secs / 1048576.0 : 0;
  r->iops = r->secs > 0 ? (double) r->requests / r->secs : 0;

  qsort (b->latencies, b->n_latencies, sizeof *b->latencies, cmp_u64);
  r->p50 = percentile_ms (b->latencies, b->n_latencies, 50);
  r->p90 = percentile_ms (b->latencies, b->n_latencies, 90);
  r->p99 = percentile_ms (b->latencies, b->n_latencies, 99);
  r->maxms = percentile_ms (b->latencies, b->n_latencies, 100);
  r->minms = b->n_latencies ? (double) b->latencies[0] / 1e6 : 0;
  r->mean = 0;
  for (i = 0; i < b->n_latencies; i++)
    r->mean += (double) b->latencies[i] / 1e6;
  if (b->n_latencies)
    r->mean /= (double) b->n_latencies;
}

static void
report_json (const struct bench *b, const struct results *r)
{
  const struct options *o = &b->opt;
  size_t i;

  printf ("{\"program\": \"%s\", \"version\": \"%s\", \"uris\": [",
          PROGRAM, PACKAGE_VERSION);
  for (i = 0; i < o->n_uris; i++) {
    if (i)
      printf (", ");
    json_string (stdout, o->uris[i]);
  }
  printf ("], \"pattern\": \"%s\", \"connections\": %u, \"depth\": %u, "
          "\"request_size\": %" PRIu64 ", ",
          pattern_names[o->pattern], b->n_conns, o->depth, o->size);
  if (o->pattern == PAT_INTERLEAVED || o->pattern == PAT_MULTICONN)
    printf ("\"streams\": %u, ", o->streams);
  if (o->pattern == PAT_STRIDED)
    printf ("\"stride_read\": %" PRIu64 ", \"stride_skip\": %" PRIu64 ", ",
            o->stride_read, o->stride_skip);
  if (o->pattern == PAT_MIXED)
    printf ("\"write_ratio\": %g, ", o->write_ratio);
  if (o->pattern == PAT_RANDOM || o->pattern == PAT_MIXED)
    printf ("\"seed\": %" PRIu64 ", ", o->seed);
  printf ("\"export_size\": %" PRIu64 ", \"offset\": %" PRIu64 ", "
          "\"length\": %" PRIu64 ", ",
          b->export_size, b->region_offset, b->blocks * o->size);
  printf ("\"interrupted\": %s, \"requests\": %" PRIu64 ", "
          "\"reads\": %" PRIu64 ", \"writes\": %" PRIu64 ", "
          "\"bytes\": %" PRIu64 ", \"bytes_read\": %" PRIu64 ", "
          "\"bytes_written\": %" PRIu64 ", \"elapsed_s\": %.6f, "
          "\"mb_per_s\": %.3f, \"mib_per_s\": %.3f, \"iops\": %.1f, ",
          b->interrupted ? "true" : "false", r->requests, b->reads,
          b->writes, r->bytes, b->bytes_read, b->bytes_written, r->secs,
          r->mbps, r->mibps, r->iops);
  printf ("\"latency_ms\": {\"min\": %.4f, \"mean\": %.4f, \"p50\": %.4f, "
          "\"p90\": %.4f, \"p99\": %.4f, \"max\": %.4f}}\n",
          r->minms, r->mean, r->p50, r->p90, r->p99, r->maxms);
}

static void
report_text (const struct bench *b, const struct results *r)
{
  const struct options *o = &b->opt;

  printf ("pattern:     %s", pattern_names[o->pattern]);
  if (o->pattern == PAT_INTERLEAVED || o->pattern == PAT_MULTICONN)
    printf (", %u streams", o->streams);
  if (o->pattern == PAT_STRIDED)
    printf (", read %" PRIu64 " skip %" PRIu64, o->stride_read,
            o->stride_skip);
  if (o->pattern == PAT_MIXED)
    printf (", write ratio %g", o->write_ratio);
  if (o->pattern == PAT_RANDOM || o->pattern == PAT_MIXED)
    printf (", seed %" PRIu64, o->seed);
  printf ("\n");
  printf ("target:      %s%s\n", o->uris[0], o->n_uris > 1 ? " ..." : "");
  printf ("setup:       %u connection%s x depth %u, request size %" PRIu64
          ", region %" PRIu64 "+%" PRIu64 "\n",
          b->n_conns, b->n_conns == 1 ? "" : "s", o->depth, o->size,
          b->region_offset, b->blocks * o->size);
  printf ("requests:    %" PRIu64 " (%" PRIu64 " reads, %" PRIu64
          " writes)%s\n", r->requests, b->reads, b->writes,
          b->interrupted ? ", interrupted" : "");
  printf ("bytes:       %" PRIu64 " (%" PRIu64 " read, %" PRIu64
          " written)\n", r->bytes, b->bytes_read, b->bytes_written);
  printf ("elapsed:     %.3f s\n", r->secs);
  printf ("throughput:  %.2f MB/s, %.2f MiB/s\n", r->mbps, r->mibps);
  printf ("IOPS:        %.1f\n", r->iops);
  printf ("latency ms:  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  "
          "(min %.3f, mean %.3f)\n", r->p50, r->p90, r->p99, r->maxms,
          r->minms, r->mean);
}

void
bench_report (struct bench *b)
{
  struct results r;

  summarise (b, &r);
  if (b->opt.json)
    report_json (b, &r);
  else
    report_text (b, &r);
}
