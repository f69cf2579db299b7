/* ra-cache: memory in transparent huge pages (rc_huge_alloc).
 *
 * Touching fresh memory costs a page fault per 4 KiB page, and on a
 * virtual machine a fault is dear: on the 2-core VMs of bench/RESULTS.md
 * ("Huge pages for the tables and bounce buffers") 1 MiB cost 3-4 ms in
 * 4 KiB pages (260 faults) and 0.15-0.2 ms as one 2 MiB huge page the
 * kernel had already used.  The memory a cache needs whatever the job
 * (its hash tables, its bounce buffers) comes from here when it is large
 * enough to fill half a huge page: whole 2 MiB units, aligned, madvised
 * MADV_HUGEPAGE, reserved but not touched (MAP_NORESERVE), zero.
 * Smaller blocks come from calloc, as a huge page for a few KiB would
 * hold 2 MiB of memory for them.  Where the kernel gives no huge pages
 * (transparent_hugepage=never), the mapping is ordinary memory, touched
 * as it is used.
 */

#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "racache/util.h"

void *
rc_huge_alloc (size_t len, size_t *maplen)
{
  size_t map, n;
  char *base, *aligned;

  *maplen = 0;
  if (len < RC_HUGE_MIN)
    return calloc (1, len ? len : 1);
  n = rc_huge_map_len (len);
  map = n + RC_HUGE_SIZE;
  if (n == 0 || map < n)
    return NULL;
  base = mmap (NULL, map, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED)
    return NULL;
  aligned = (char *) (((uintptr_t) base + RC_HUGE_SIZE - 1)
                      & ~(uintptr_t) (RC_HUGE_SIZE - 1));
  if (aligned > base)
    munmap (base, aligned - base);
  if (aligned + n < base + map)
    munmap (aligned + n, base + map - (aligned + n));
#ifdef MADV_HUGEPAGE
  madvise (aligned, n, MADV_HUGEPAGE);
#endif
  *maplen = n;
  return aligned;
}

void
rc_huge_free (void *p, size_t maplen)
{
  if (maplen)
    munmap (p, maplen);
  else
    free (p);
}
