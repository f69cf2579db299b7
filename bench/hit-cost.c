/* Cost of serving a 4 KiB read from the cache: fills a cache through a
 * fake in-memory backend, then serves N reads that all hit.  Run it
 * under `valgrind --tool=callgrind` (bench/hit-cost.sh does) and divide
 * the instructions of the hit loop by N.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "racache/cache.h"

#define EXPORT_SIZE (UINT64_C (64) << 20)

static int
fake_pread (void *opaque, void *ctx, void *buf, uint32_t count,
            uint64_t offset, int *err)
{
  memset (buf, (int) (offset >> 12), count);
  return 0;
}

static const struct rc_backend fake = { .pread = fake_pread };

/* Kept out of line so callgrind can attribute the hit loop to it. */
__attribute__ ((noinline)) static void
hit_loop (struct rc_cache *c, struct rc_stream *s, char *buf, unsigned n)
{
  unsigned i;
  int err;

  for (i = 0; i < n; i++)
    if (rc_read (c, s, NULL, buf, 4096,
                 ((uint64_t) (i % 4096)) << 12, &err) == -1)
      abort ();
}

int
main (int argc, char *argv[])
{
  unsigned n = argc > 1 ? (unsigned) atoi (argv[1]) : 100000;
  struct rc_config cfg;
  struct rc_cache *c;
  struct rc_stream *s;
  char buf[4096];
  char msg[256];
  int err;

  rc_config_defaults (&cfg);
  if (rc_config_check (&cfg, msg, sizeof msg)) {
    fprintf (stderr, "%s\n", msg);
    return 1;
  }
  c = rc_cache_new (&cfg, &fake, 1);
  s = rc_stream_new ();
  if (!c || !s || rc_cache_set_export_size (c, EXPORT_SIZE) == -1)
    return 1;
  /* Fill the first 16 MiB (forced readahead), so every read below hits. */
  if (rc_fill (c, NULL, 16 << 20, 0, &err) == -1)
    return 1;
  hit_loop (c, s, buf, n);
  printf ("%u hits served\n", n);
  rc_stream_free (s);
  rc_cache_free (c);
  return 0;
}
