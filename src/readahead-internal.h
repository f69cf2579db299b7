/* ra-cache: what readahead.c and near.c share (not part of the core's
 * interface).
 */

#ifndef RACACHE_READAHEAD_INTERNAL_H
#define RACACHE_READAHEAD_INTERNAL_H

#include "racache/readahead.h"

static inline ra_pgoff
ra_min_pg (ra_pgoff a, ra_pgoff b)
{
  return a < b ? a : b;
}

/* The smallest power of two >= n (1 for 0). */
static inline ra_pgoff
ra_roundup_pow2 (ra_pgoff n)
{
  ra_pgoff r = 1;

  while (r < n)
    r <<= 1;
  return r;
}

/* The near rule (near.c): the async part for a miss at
 * [index, index + req) that branches A-F do not explain, within a
 * window of at most max pages (dense_max for a dense area's block);
 * records the miss in n, and sets n->behind, the pages of the block
 * before index to read too.
 */
extern ra_pgoff ra_near_ahead (struct ra_near *n, const struct ra_params *p,
                               ra_pgoff index, ra_pgoff req, ra_pgoff max,
                               ra_pgoff dense_max);

#endif /* RACACHE_READAHEAD_INTERNAL_H */
