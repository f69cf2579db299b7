/* libFuzzer target: ra-trace's trace parser (src/trace.c), and the
 * replay of the traces it accepts through the simulation
 * (src/trace-sim.c: the core's read path and readahead engine) when
 * they are small.
 *
 * The parser returns its errors: every input either parses or is
 * rejected with a message (t.err), and then its memory is freed here.
 * The simulation's fatal errors (rt_fatal: out of memory, an engine
 * bug) print to the stream given here and longjmp back.  Set
 * RA_TRACE_FUZZ_VERBOSE=1 to see the messages.
 *
 * The input is the trace, as a file (read with trace_read_file, the
 * tool's own function).  When the accepted reads cover at most
 * MAX_REPLAY_PAGES pages, none more than MAX_READ_OVER_CACHE times the
 * cache, they are replayed as the tool does without --export-size, with
 * one of a few sets of parameters chosen by a hash of the input, and the
 * simulation is checked: every page read is a hit or a miss, and the
 * simulated cache is within its capacity after each read.
 */

#include <config.h>

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "racache/config.h"
#include "racache/readpath.h"
#include "../src/trace.h"

#define MAX_REPLAY_PAGES (UINT64_C (1) << 16)
#define MAX_READ_OVER_CACHE 8

static jmp_buf fuzz_jmp;
static FILE *fuzz_err;

void
rt_fatal (const char *fmt, ...)
{
  va_list ap;

  fputs ("ra-trace: ", fuzz_err);
  va_start (ap, fmt);
  vfprintf (fuzz_err, fmt, ap);
  va_end (ap);
  fputc ('\n', fuzz_err);
  longjmp (fuzz_jmp, 1);
}

/* What an input owns, freed whether it was accepted or not (file scope,
 * so that it survives the longjmp).
 */
static struct trace t;
static struct sim s;
static bool have_sim;

int LLVMFuzzerInitialize (int *argc, char ***argv);

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  (void) argc; (void) argv;
  if (getenv ("RA_TRACE_FUZZ_VERBOSE"))
    fuzz_err = stderr;
  else
    fuzz_err = fopen ("/dev/null", "w");
  if (!fuzz_err) {
    perror ("/dev/null");
    exit (EXIT_FAILURE);
  }
  return 0;
}

static uint64_t
hash (const uint8_t *data, size_t size)
{
  uint64_t h = UINT64_C (0xcbf29ce484222325);
  size_t i;

  for (i = 0; i < size; i++)
    h = (h ^ data[i]) * UINT64_C (0x100000001b3);
  return h;
}

static void
replay (uint64_t h)
{
  static const unsigned shifts[] = { 9, 12, 16 };
  static const uint64_t ra_pages[] = { 0, 1, 4, 32, 128 };
  static const uint64_t io_pages[] = { 1, 8, 64 };
  static const uint64_t cache_pages[] = { 2, 16, 300, 1024 };
  unsigned shift = shifts[h % 3];
  uint64_t page_size = UINT64_C (1) << shift;
  uint64_t ra_max = ra_pages[(h >> 8) % 5] << shift;
  uint64_t io_max = io_pages[(h >> 16) % 3] << shift;
  uint64_t cache_size = cache_pages[(h >> 24) % 4] << shift;
  uint64_t export_size = 0, pages = 0, before;
  const struct timing instant = { 0 };
  struct rc_config cfg;
  struct ra_params p;
  char err[256];
  size_t i;

  for (i = 0; i < t.nr; i++) {
    const struct trace_read *r = &t.reads[i];
    uint64_t n = ((r->offset + r->length + page_size - 1) >> shift) -
      (r->offset >> shift);

    pages += n;
    if (pages > MAX_REPLAY_PAGES)
      return;                   /* too slow to replay at every input */
    /* A read many times the cache is quadratic in its pages (as in the
     * filter, whose cache it is: every page the cache cannot hold is a
     * sync trigger whose window walks the rest of the read).
     */
    if (n > MAX_READ_OVER_CACHE * (cache_size >> shift))
      return;
  }
  /* main's checks of the options: ra-max at most half the cache. */
  if (ra_max > cache_size / 2)
    ra_max = (cache_size / 2) & ~(page_size - 1);

  /* As main does without --export-size. */
  if (trace_export_size (&t, page_size, &export_size) == -1)
    return;

  /* The tool's configuration, kernel mode: the instant replay. */
  rc_config_defaults (&cfg);
  cfg.page_size = page_size;
  cfg.ra_max = ra_max;
  cfg.io_max = io_max;
  cfg.cache_size = cache_size;
  cfg.mode = RA_MODE_KERNEL;
  if (rc_config_check (&cfg, err, sizeof err) != NULL) {
    fprintf (stderr, "configuration: %s\n", err);
    abort ();
  }
  rc_engine_params (&cfg, cfg.max_background, &p);
  p.export_size = export_size;
  sim_init (&s, &cfg, &p, &instant, &t, true);
  have_sim = true;
  for (i = 0; i < t.nr; i++) {
    before = STAT_GET (&s.st, page_hits) + STAT_GET (&s.st, page_misses);
    replay_read (&s, &t.reads[i]);
    if (STAT_GET (&s.st, page_hits) + STAT_GET (&s.st, page_misses) - before !=
        ((t.reads[i].offset + t.reads[i].length + page_size - 1) >> shift) -
        (t.reads[i].offset >> shift)) {
      fprintf (stderr, "read %zu: hits + misses is not its page count\n", i);
      abort ();
    }
    {
      struct rc_pc_counts pcc;

      rc_pc_counts (s.pc, &pcc);
      if (pcc.pages > rc_pc_capacity (s.pc)) {
        fprintf (stderr, "read %zu: %" PRIu64 " pages cached, capacity %"
                 PRIu64 "\n", i, pcc.pages, rc_pc_capacity (s.pc));
        abort ();
      }
    }
  }
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  FILE *fp;

  if (size == 0)
    return 0;
  fp = fmemopen ((void *) data, size, "r");
  if (!fp)
    abort ();
  memset (&t, 0, sizeof t);
  t.name = "fuzz";
  have_sim = false;

  if (setjmp (fuzz_jmp) == 0) {
    if (trace_read_file (&t, fp) == 0)
      replay (hash (data, size));
    else
      fprintf (fuzz_err, "ra-trace: %s\n", t.err);
  }

  fclose (fp);
  if (have_sim)
    sim_free (&s);
  trace_free (&t);
  return 0;
}
