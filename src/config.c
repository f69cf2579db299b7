/* ra-cache: configuration defaults and validation. */

#include <config.h>

#include <stdio.h>
#include <inttypes.h>

#include "racache/config.h"

void
rc_config_defaults (struct rc_config *c)
{
  c->cache_size = RC_DEFAULT_CACHE_SIZE;
  c->page_size = RC_DEFAULT_PAGE_SIZE;
  c->ra_max = RC_DEFAULT_RA_MAX;
  c->io_max = RC_DEFAULT_IO_MAX;
  c->max_background = RC_DEFAULT_MAX_BACKGROUND;
  c->congestion_threshold = RC_DEFAULT_CONGESTION_THRESHOLD;
  c->congestion_threshold_set = 0;
}

static int
is_pow2 (uint64_t v)
{
  return v != 0 && (v & (v - 1)) == 0;
}

const char *
rc_config_check (struct rc_config *c, char *buf, size_t len)
{
  if (!is_pow2 (c->page_size) ||
      c->page_size < RC_MIN_PAGE_SIZE || c->page_size > RC_MAX_PAGE_SIZE) {
    snprintf (buf, len, "ra-cache-page-size: %" PRIu32 " must be a power of "
              "two from 512 to 1M", c->page_size);
    return buf;
  }
  if (c->cache_size < c->page_size) {
    snprintf (buf, len, "ra-cache-size: %" PRIu64 " is smaller than one page "
              "(%" PRIu32 ")", c->cache_size, c->page_size);
    return buf;
  }
  if (c->ra_max > RC_MAX_RA_MAX) {
    snprintf (buf, len, "ra-max: %" PRIu64 " is larger than 1G", c->ra_max);
    return buf;
  }
  if (c->ra_max > c->cache_size / 2) {
    snprintf (buf, len, "ra-max: %" PRIu64 " is larger than half of "
              "ra-cache-size (%" PRIu64 "): windows would evict themselves",
              c->ra_max, c->cache_size);
    return buf;
  }
  if (c->io_max < c->page_size || c->io_max > RC_MAX_IO_MAX) {
    snprintf (buf, len, "ra-io-max: %" PRIu64 " must be from one page "
              "(%" PRIu32 ") to 32M", c->io_max, c->page_size);
    return buf;
  }
  if (c->max_background < 1 || c->max_background > RC_MAX_BACKGROUND) {
    snprintf (buf, len, "ra-max-background: %u must be from 1 to %u",
              c->max_background, RC_MAX_BACKGROUND);
    return buf;
  }
  if (!c->congestion_threshold_set)
    c->congestion_threshold = (c->max_background * 3 + 3) / 4;
  if (c->congestion_threshold < 1 ||
      c->congestion_threshold > c->max_background) {
    snprintf (buf, len, "ra-congestion-threshold: %u must be from 1 to "
              "ra-max-background (%u)", c->congestion_threshold,
              c->max_background);
    return buf;
  }
  return NULL;
}
