/* ra-cache: the learned file (ra-cache-learn=FILE, src/learn.c): which
 * pages clients read, in the order they first read them, kept from one
 * run of the server to the next.
 *
 * Recording: every client read names its pages (rc_learn_record); a page
 * read for the first time in this run is appended to this run's list of
 * extents (runs of pages), so the list is the order of first access.  A
 * bitmap of the pages seen, one bit a page in pieces of
 * RC_LEARN_CHUNK_PAGES pages allocated as they are touched, tells a page
 * read again from a new one without a lock.  The list holds at most
 * RC_LEARN_MAX_EXTENTS extents; beyond that nothing more is recorded.
 *
 * The file (rc_learn_save): this run's extents in their order, then the
 * extents of the file this run started with that this run did not read,
 * one run older; an extent not read for RC_LEARN_KEEP_RUNS runs is
 * dropped: what is not read again fades.  A run that read nothing leaves
 * a good file as it was.  Written atomically (a private temporary file,
 * mode 0600, renamed into place).  Tied to the export it was learned on
 * by its size and name: a file learned on another export, a truncated
 * or garbled one, is ignored with one message and rewritten at the next
 * save.  Extents are stored in bytes, so a file survives a change of
 * ra-cache-page-size.
 *
 * The sequence (what replay follows, src/replay.c): the file's extents
 * as loaded, numbered page by page in file order (a page's position).
 * rc_learn_position tells a page's position, rc_learn_window lists the
 * pages of a range of positions.  Read-only once loaded: any thread may
 * ask without a lock.
 *
 * No function here touches the cache or the backend.
 */
#ifndef RACACHE_LEARN_H
#define RACACHE_LEARN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "racache/readahead.h"

#define RC_LEARN_MAX_EXTENTS (UINT32_C (1) << 20)
#define RC_LEARN_KEEP_RUNS 3u
#define RC_LEARN_CHUNK_PAGES (UINT64_C (1) << 15)

struct rc_learn;

/* A run of pages: [start, start + count), age: runs since it was read. */
struct rc_learn_extent {
  ra_pgoff start;
  uint32_t count;
  uint32_t age;
};

/* Learn on export of size bytes named name (pages of 1 << shift bytes)
 * into path.  The file at path, if any, is read: if it is not a good
 * file of this export, why (len bytes) says why and the sequence is
 * empty; else why is "".  Returns NULL with errno set when memory ran
 * out.
 */
struct rc_learn *rc_learn_new (const char *path, uint64_t size,
                               const char *name, unsigned shift,
                               char *why, size_t len);
void rc_learn_free (struct rc_learn *l);

/* A client read pages [first, last): record those read for the first
 * time.  Cheap when every page was seen before (no lock).
 */
void rc_learn_record (struct rc_learn *l, ra_pgoff first, ra_pgoff last);

/* Write the file (see the top of this file).  Returns 0 (also when a
 * good file was left as it was), or -1 with errno set.
 */
int rc_learn_save (struct rc_learn *l);

/* Pages in the sequence (loaded), and recorded in this run so far. */
uint64_t rc_learn_sequence_pages (const struct rc_learn *l);
uint64_t rc_learn_recorded_pages (struct rc_learn *l);

/* The position of page index in the sequence: true and *pos if the
 * sequence has it.
 */
bool rc_learn_position (const struct rc_learn *l, ra_pgoff index,
                        uint64_t *pos);
/* The highest position below limit of the pages [first, last) in the
 * sequence, plus one; 0 if none of them is there below limit.
 */
uint64_t rc_learn_reached (const struct rc_learn *l, ra_pgoff first,
                           ra_pgoff last, uint64_t limit);

/* The pages of positions [from, from + n) as runs sorted by page and
 * merged where they touch or are at most gap pages apart (the gap read
 * too), into out (at most max runs; the caller gives max >= n).
 * Returns how many runs.
 */
size_t rc_learn_window (const struct rc_learn *l, uint64_t from, uint64_t n,
                        ra_pgoff gap, struct rc_learn_extent *out,
                        size_t max);

#endif /* RACACHE_LEARN_H */
