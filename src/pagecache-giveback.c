/* ra-cache: the page cache's given-back pages (see
 * include/racache/pagecache.h; the rest of the cache is
 * src/pagecache.c).
 *
 * One concern: the pages the cache gives back before eviction would
 * take them, and its memory of having given them back.  Drop-behind
 * (rc_pc_drop_behind) frees, for reuse, the pages a client has read
 * once behind a stream, rc_pc_behind_pages behind it; a read around the
 * cache (rc_pc_read_around_ok, rc_pc_read_around_done) is allowed only
 * where none of its pages is cached and no whole group of it was given
 * back lately.  Both remember what they gave back, by group of pages, in
 * the refault history, which rc_pc_insert tests: data read again after
 * it was given back earns its place and is kept as active, if it was
 * given back within about the last one to one and a third caches' worth
 * of groups (as the kernel weighs a refault's distance: data the cache
 * could have held; a second pass over an export larger than the cache
 * would only turn the whole cache over, with fresh memory touched for
 * nothing).  (The other bound on pages read once, the inactive reserve,
 * is the cache's own: drop_behind in src/pagecache.c, which marks the
 * history here too.)
 * Calls take the shard locks through rc_pc_walk, which skips
 * the groups that hold no page (the cache's group_pages); the history
 * is atomics and takes no lock.
 */

#include <config.h>

#include <stdlib.h>

#include "pagecache-internal.h"
#include "racache/util.h"

void
rc_pc_giveback_init (struct rc_pagecache *pc, uint64_t total_pages)
{
  /* A generation of the refault history holds a third of the cache's
   * groups, so that the three before the current one hold the cache's
   * worth: at least 16 groups, and at most a thirty-second of a
   * generation's bits, so that a false hit stays rare (with the default
   * cache one test in fifty; at most one in eight, and less than a
   * cache remembered, for a cache above 1.5 GiB of 4K pages).
   */
  pc->refault_limit = (total_pages >> GROUP_SHIFT) / (REFAULT_GENS - 1);
  if (pc->refault_limit < 16)
    pc->refault_limit = 16;
  if (pc->refault_limit > REFAULT_GEN_BITS / 32)
    pc->refault_limit = REFAULT_GEN_BITS / 32;
  pc->behind_pages = RC_PC_BEHIND_BYTES / pc->page_size;
  if (pc->behind_pages > total_pages / 4)
    pc->behind_pages = total_pages / 4;
}

/* Page index's group's bit in a generation of the history. */
static inline uint64_t
refault_bit (ra_pgoff index)
{
  return ((index >> GROUP_SHIFT) * UINT64_C (0x9E3779B97F4A7C15))
    >> (64 - REFAULT_GEN_SHIFT);
}

#define GEN_WORDS (REFAULT_GEN_BITS / 64)
_Static_assert (REFAULT_GENS * REFAULT_GEN_BITS == REFAULT_BITS,
                "the generations share the history's bits");

/* Page index's group was given back (drop-behind, read around). */
void
rc_pc_refault_mark (struct rc_pagecache *pc, ra_pgoff index)
{
  unsigned cur = atomic_load_explicit (&pc->refault_cur,
                                       memory_order_relaxed)
    % REFAULT_GENS;
  uint64_t b = refault_bit (index), m = UINT64_C (1) << (b & 63);
  _Atomic uint64_t *gen = pc->refault + cur * GEN_WORDS;
  uint64_t old;
  size_t i;

  old = atomic_fetch_or_explicit (&gen[b >> 6], m, memory_order_relaxed);
  /* The mark that fills the current generation (exactly one) clears the
   * oldest and makes it the current one: what the history forgets is
   * what was given back more than the other generations' worth of
   * groups ago.  Racing marks may land in either or be lost: harmless,
   * the history is a hint.
   */
  if ((old & m) == 0 &&
      atomic_fetch_add_explicit (&pc->refault_set, 1, memory_order_relaxed)
      + 1 == pc->refault_limit) {
    unsigned next = (cur + 1) % REFAULT_GENS;
    _Atomic uint64_t *oldest = pc->refault + next * GEN_WORDS;

    for (i = 0; i < GEN_WORDS; i++)
      atomic_store_explicit (&oldest[i], 0, memory_order_relaxed);
    atomic_store_explicit (&pc->refault_cur, next, memory_order_relaxed);
    atomic_store_explicit (&pc->refault_set, 0, memory_order_relaxed);
  }
}

/* Was page index's group given back lately (in any generation)? */
bool
rc_pc_refault_test (struct rc_pagecache *pc, ra_pgoff index)
{
  uint64_t b = refault_bit (index), m = UINT64_C (1) << (b & 63);
  unsigned g;

  for (g = 0; g < REFAULT_GENS; g++)
    if (atomic_load_explicit (&pc->refault[g * GEN_WORDS + (b >> 6)],
                              memory_order_relaxed) & m)
      return true;
  return false;
}

static void
drop_behind_one (struct rc_pagecache *pc, struct shard *s, ra_pgoff i,
                 void *argv)
{
  struct page *p = lookup (s, i);

  if (p && p->list == L_INACTIVE && !(p->flags & PF_MARKER)) {
    rc_pc_refault_mark (pc, i);
    rc_pc_remove_page (pc, s, p);
    STAT_ADD (pc->stats, evictions, 1);
  }
}

void
rc_pc_drop_behind (struct rc_pagecache *pc, ra_pgoff from, ra_pgoff to)
{
  if (to > from)
    rc_pc_walk (pc, from, to - from, drop_behind_one, NULL, true);
}

ra_pgoff
rc_pc_behind_pages (const struct rc_pagecache *pc)
{
  return pc->behind_pages;
}

static void
absent_one (struct rc_pagecache *pc, struct shard *s, ra_pgoff i,
            void *argv)
{
  bool *absent = argv;

  (void) pc;
  if (*absent && lookup (s, i))
    *absent = false;
}

/* The whole groups of [start, start + count): [*from, *to). */
static bool
whole_groups (ra_pgoff start, ra_pgoff count, ra_pgoff *from, ra_pgoff *to)
{
  ra_pgoff g = (ra_pgoff) 1 << GROUP_SHIFT;

  *from = (start + g - 1) & ~(g - 1);
  *to = (start + count) & ~(g - 1);
  return *from < *to;
}

bool
rc_pc_read_around_ok (struct rc_pagecache *pc, ra_pgoff start,
                      ra_pgoff count)
{
  bool absent = true;
  ra_pgoff i, from, to;

  if (whole_groups (start, count, &from, &to))
    for (i = from; i < to; i += (ra_pgoff) 1 << GROUP_SHIFT)
      if (rc_pc_refault_test (pc, i))
        return false;
  rc_pc_walk (pc, start, count, absent_one, &absent, true);
  return absent;
}

void
rc_pc_read_around_done (struct rc_pagecache *pc, ra_pgoff start,
                        ra_pgoff count)
{
  ra_pgoff i, from, to;

  if (whole_groups (start, count, &from, &to))
    for (i = from; i < to; i += (ra_pgoff) 1 << GROUP_SHIFT)
      rc_pc_refault_mark (pc, i);
}
