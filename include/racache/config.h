/* ra-cache: every tunable in one struct, with its default and limits.
 * The man page, etc/ra-cache.conf and the filter's --help text list the
 * same keys and defaults; keep them in agreement.
 */
#ifndef RACACHE_CONFIG_H
#define RACACHE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/* Defaults, chosen for a backend about 1 ms away (see the man page):
 * a window must cover at least the bandwidth-delay product that one
 * reader can use (1 ms at ~1 GB/s is ~1 MB), and the async part of a
 * full window is the whole window, so 4 MiB keeps several milliseconds
 * of data in flight; 1 MiB backend requests keep the per-request latency
 * small compared to the transfer while staying far below the sizes that
 * backends have failed to allocate.
 */
#define RC_DEFAULT_CACHE_SIZE      (UINT64_C(256) << 20)
#define RC_DEFAULT_PAGE_SIZE       4096u
#define RC_DEFAULT_RA_MAX          (UINT64_C(4) << 20)
#define RC_DEFAULT_IO_MAX          (UINT64_C(1) << 20)
#define RC_DEFAULT_MAX_BACKGROUND  12u
#define RC_DEFAULT_CONGESTION_THRESHOLD 9u   /* 3/4 of max_background */

#define RC_MIN_PAGE_SIZE   512u
#define RC_MAX_PAGE_SIZE   (1u << 20)
#define RC_MAX_RA_MAX      (UINT64_C(1) << 30)
#define RC_MAX_IO_MAX      (UINT64_C(32) << 20)
#define RC_MAX_BACKGROUND  256u

struct rc_config {
  uint64_t cache_size;        /* bytes of page data, at most */
  uint32_t page_size;         /* bytes, power of two */
  uint64_t ra_max;            /* bytes, largest window; 0 = readahead off */
  uint64_t io_max;            /* bytes, largest backend read */
  unsigned max_background;    /* async backend reads in flight, at most */
  unsigned congestion_threshold; /* skip the async part at this many reads in flight */
  int congestion_threshold_set;  /* given explicitly (else 3/4 of max_background) */
};

void rc_config_defaults (struct rc_config *c);

/* Cross-check a configuration and fill in derived values.  Returns NULL
 * when it is valid, else a message naming the key that is wrong, written
 * into buf.
 */
const char *rc_config_check (struct rc_config *c, char *buf, size_t len);

#endif /* RACACHE_CONFIG_H */
