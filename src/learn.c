/* ra-cache: the learned file (include/racache/learn.h).
 *
 * The file, all integers little-endian:
 *   0  "RACLEARN"
 *   8  u32 version (RC_LEARN_VERSION)
 *  12  u32 length of the export name (at most RC_LEARN_NAME_MAX)
 *  16  u64 export size in bytes
 *  24  u64 number of extents
 *  32  u64 FNV-1a 64 of the whole file, these 8 bytes read as zero
 *  40  the export name, zero-padded to a multiple of 8 bytes
 *  then the extents, 16 bytes each: u64 offset in bytes, u32 length in
 *  units of 512 bytes (the smallest page size), u32 age (runs since
 *  read).
 * The length of the file follows from the header: anything else is a
 * truncated or garbled file.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "racache/learn.h"
#include "racache/util.h"

#define RC_LEARN_VERSION 1u
#define RC_LEARN_NAME_MAX 4096u
#define HEADER 40u
#define EXTENT 16u
#define UNIT_SHIFT 9u

/* An extent of the sequence, with the position of its first page. */
struct seq_ext {
  ra_pgoff start;
  uint64_t count;
  uint32_t age;
  uint64_t pos;
};

struct rc_learn {
  char *path, *name;
  uint64_t size;
  unsigned shift;
  ra_pgoff nr_pages;
  bool file_good;               /* started from a good file of this export */

  /* The sequence: file order (positions grow), and the same indexes
   * sorted by page.  Read-only after rc_learn_new.
   */
  struct seq_ext *seq;
  size_t nseq;
  uint32_t *by_page;
  uint64_t seq_pages;

  /* Recording.  seen[k] is the bitmap of pages [k, k + 1) *
   * RC_LEARN_CHUNK_PAGES, allocated under lock the first time, read
   * without it.
   */
  _Atomic (_Atomic uint64_t *) *seen;
  size_t nchunks;
  pthread_mutex_t lock;         /* rec, and allocating a chunk */
  struct rc_learn_extent *rec;
  size_t nrec, caprec;
  uint64_t rec_pages;
  bool rec_stopped;             /* full, or out of memory */
};

static void
put32 (unsigned char *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char) (v >> (8 * i));
}

static void
put64 (unsigned char *p, uint64_t v)
{
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char) (v >> (8 * i));
}

static uint32_t
get32 (const unsigned char *p)
{
  uint32_t v = 0;

  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static uint64_t
get64 (const unsigned char *p)
{
  uint64_t v = 0;

  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static uint64_t
fnv1a (const unsigned char *p, size_t n)
{
  uint64_t h = UINT64_C (14695981039346656037);
  size_t i;

  for (i = 0; i < n; i++) {
    /* The checksum field counts as zero. */
    h ^= (i >= 32 && i < 40) ? 0 : p[i];
    h *= UINT64_C (1099511628211);
  }
  return h;
}

static size_t
name_space (size_t len)
{
  return (len + 7) & ~(size_t) 7;
}

/* Indexes of l->seq sorted by page. */
static const struct seq_ext *sort_base;

static int
cmp_by_page (const void *a, const void *b)
{
  ra_pgoff x = sort_base[*(const uint32_t *) a].start;
  ra_pgoff y = sort_base[*(const uint32_t *) b].start;

  return x < y ? -1 : x > y;
}

/* Build by_page and the positions from seq (file order), trimming the
 * pages two extents share (a file learned with larger pages than ours
 * converts to overlapping runs; a page belongs to the extent that comes
 * first by page) and dropping what is left empty.
 */
static int
index_sequence (struct rc_learn *l)
{
  static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;
  ra_pgoff end = 0;
  uint64_t pos = 0;
  size_t i, j;

  l->by_page = malloc ((l->nseq ? l->nseq : 1) * sizeof *l->by_page);
  if (!l->by_page)
    return -1;
  for (int pass = 0; pass < 2; pass++) {
    for (i = 0; i < l->nseq; i++)
      l->by_page[i] = (uint32_t) i;
    ACQUIRE_LOCK (&sort_lock);
    sort_base = l->seq;
    qsort (l->by_page, l->nseq, sizeof *l->by_page, cmp_by_page);
    RELEASE_LOCK (&sort_lock);
    if (pass == 1)
      break;
    for (i = 0; i < l->nseq; i++) {
      struct seq_ext *e = &l->seq[l->by_page[i]];
      ra_pgoff e_end = e->start + e->count;

      if (e->start < end) {
        e->count = e_end > end ? e_end - end : 0;
        e->start = end;
      }
      if (e->start + e->count > end)
        end = e->start + e->count;
    }
    for (i = j = 0; i < l->nseq; i++)
      if (l->seq[i].count > 0) {
        l->seq[j] = l->seq[i];
        l->seq[j++].pos = pos;
        pos += l->seq[i].count;
      }
    l->nseq = j;
    l->seq_pages = pos;
  }
  return 0;
}

/* Read the file at l->path into l->seq.  Returns 0 with why[0] == 0 for
 * a good file of this export (or none at all: a first run), 0 with the
 * reason in why for a file to ignore, -1 when memory ran out.
 */
static int
load (struct rc_learn *l, char *why, size_t len)
{
  CLEANUP_FREE unsigned char *buf = NULL;
  struct stat st;
  uint64_t n, i, max_size;
  size_t got = 0;
  uint32_t name_len;
  int fd;

  why[0] = 0;
  fd = open (l->path, O_RDONLY | O_CLOEXEC);
  if (fd == -1) {
    if (errno != ENOENT)
      snprintf (why, len, "cannot read it: %s", strerror (errno));
    return 0;
  }
  max_size = HEADER + RC_LEARN_NAME_MAX + (uint64_t) RC_LEARN_MAX_EXTENTS * EXTENT;
  if (fstat (fd, &st) == -1 || !S_ISREG (st.st_mode)) {
    snprintf (why, len, "not a regular file");
    goto out;
  }
  if ((uint64_t) st.st_size > max_size || st.st_size < HEADER) {
    snprintf (why, len, "not a learned file (%" PRIu64 " bytes long)",
              (uint64_t) st.st_size);
    goto out;
  }
  buf = malloc (st.st_size);
  if (!buf) {
    close (fd);
    return -1;
  }
  while (got < (size_t) st.st_size) {
    ssize_t r = read (fd, buf + got, st.st_size - got);

    if (r <= 0) {
      snprintf (why, len, "cannot read it: %s",
                r == 0 ? "it shrank" : strerror (errno));
      goto out;
    }
    got += r;
  }
  if (memcmp (buf, "RACLEARN", 8) != 0) {
    snprintf (why, len, "not a learned file");
    goto out;
  }
  if (get32 (buf + 8) != RC_LEARN_VERSION) {
    snprintf (why, len, "version %" PRIu32 ", not %u", get32 (buf + 8),
              RC_LEARN_VERSION);
    goto out;
  }
  name_len = get32 (buf + 12);
  n = get64 (buf + 24);
  if (name_len > RC_LEARN_NAME_MAX || n > RC_LEARN_MAX_EXTENTS ||
      HEADER + name_space (name_len) + n * EXTENT != got) {
    snprintf (why, len, "truncated or garbled (%zu bytes)", got);
    goto out;
  }
  if (fnv1a (buf, got) != get64 (buf + 32)) {
    snprintf (why, len, "its checksum does not match: garbled");
    goto out;
  }
  if (get64 (buf + 16) != l->size ||
      name_len != strlen (l->name) ||
      memcmp (buf + HEADER, l->name, name_len) != 0) {
    snprintf (why, len, "learned on another export (\"%.*s\", %" PRIu64
              " bytes)", (int) (name_len > 64 ? 64 : name_len),
              (const char *) buf + HEADER, get64 (buf + 16));
    goto out;
  }
  l->seq = malloc ((n ? n : 1) * sizeof *l->seq);
  if (!l->seq) {
    close (fd);
    return -1;
  }
  for (i = 0; i < n; i++) {
    const unsigned char *p = buf + HEADER + name_space (name_len) + i * EXTENT;
    uint64_t off = get64 (p), bytes = (uint64_t) get32 (p + 8) << UNIT_SHIFT;
    uint64_t ps = UINT64_C (1) << l->shift;

    if (bytes == 0 || off > l->size || bytes > l->size - off ||
        get32 (p + 12) >= RC_LEARN_KEEP_RUNS) {
      snprintf (why, len, "extent %" PRIu64 " is out of the export", i);
      free (l->seq);
      l->seq = NULL;
      goto out;
    }
    l->seq[i].start = off >> l->shift;
    l->seq[i].count = ((off + bytes + ps - 1) >> l->shift) - (off >> l->shift);
    l->seq[i].age = get32 (p + 12);
  }
  l->nseq = n;
 out:
  close (fd);
  return 0;
}

struct rc_learn *
rc_learn_new (const char *path, uint64_t size, const char *name,
              unsigned shift, char *why, size_t len)
{
  struct rc_learn *l = calloc (1, sizeof *l);

  if (!l)
    return NULL;
  pthread_mutex_init (&l->lock, NULL);
  l->size = size;
  l->shift = shift;
  l->nr_pages = (size + (UINT64_C (1) << shift) - 1) >> shift;
  l->path = strdup (path);
  l->name = strdup (name ? name : "");
  l->nchunks = (l->nr_pages + RC_LEARN_CHUNK_PAGES - 1) / RC_LEARN_CHUNK_PAGES;
  l->seen = calloc (l->nchunks ? l->nchunks : 1, sizeof *l->seen);
  if (!l->path || !l->name || !l->seen || load (l, why, len) == -1 ||
      index_sequence (l) == -1) {
    rc_learn_free (l);
    errno = ENOMEM;
    return NULL;
  }
  l->file_good = why[0] == 0;
  return l;
}

void
rc_learn_free (struct rc_learn *l)
{
  size_t k;

  if (!l)
    return;
  for (k = 0; l->seen && k < l->nchunks; k++)
    free ((void *) atomic_load (&l->seen[k]));
  free (l->seen);
  free (l->seq);
  free (l->by_page);
  free (l->rec);
  free (l->path);
  free (l->name);
  pthread_mutex_destroy (&l->lock);
  free (l);
}

/* The bitmap word of page index, allocated if need be (NULL: no memory). */
static _Atomic uint64_t *
seen_word (struct rc_learn *l, ra_pgoff index, bool alloc)
{
  size_t k = index / RC_LEARN_CHUNK_PAGES;
  _Atomic uint64_t *chunk = atomic_load_explicit (&l->seen[k],
                                                  memory_order_acquire);

  if (!chunk && alloc) {
    LOCK_FOR_SCOPE (&l->lock);
    chunk = atomic_load_explicit (&l->seen[k], memory_order_relaxed);
    if (!chunk) {
      chunk = calloc (RC_LEARN_CHUNK_PAGES / 64, sizeof *chunk);
      if (!chunk)
        return NULL;
      atomic_store_explicit (&l->seen[k], chunk, memory_order_release);
    }
  }
  return chunk ? &chunk[(index % RC_LEARN_CHUNK_PAGES) / 64] : NULL;
}

static bool
seen (struct rc_learn *l, ra_pgoff index)
{
  _Atomic uint64_t *w = seen_word (l, index, false);

  return w && (atomic_load_explicit (w, memory_order_relaxed)
               & (UINT64_C (1) << (index % 64)));
}

/* The most pages one extent holds: its length in 512-byte units fits
 * in 32 bits.
 */
static uint64_t
extent_max (const struct rc_learn *l)
{
  return UINT32_MAX >> (l->shift - UNIT_SHIFT);
}

/* Append the new run [start, start + count) to this run's list. */
static void
append (struct rc_learn *l, ra_pgoff start, ra_pgoff count)
{
  LOCK_FOR_SCOPE (&l->lock);
  struct rc_learn_extent *last = l->nrec ? &l->rec[l->nrec - 1] : NULL;

  l->rec_pages += count;
  if (last && last->start + last->count == start &&
      last->count + count <= extent_max (l)) {
    last->count += (uint32_t) count;
    return;
  }
  if (l->rec_stopped)
    return;
  if (l->nrec == l->caprec) {
    size_t cap = l->caprec ? 2 * l->caprec : 256;
    struct rc_learn_extent *p;

    if (cap > RC_LEARN_MAX_EXTENTS)
      cap = RC_LEARN_MAX_EXTENTS;
    if (l->nrec == cap ||
        !(p = realloc (l->rec, cap * sizeof *p))) {
      l->rec_stopped = true;
      return;
    }
    l->rec = p;
    l->caprec = cap;
  }
  l->rec[l->nrec++] = (struct rc_learn_extent) {
    .start = start, .count = (uint32_t) count, .age = 0 };
}

void
rc_learn_record (struct rc_learn *l, ra_pgoff first, ra_pgoff last)
{
  ra_pgoff i, run = 0, run_start = 0;

  if (last > l->nr_pages)
    last = l->nr_pages;
  for (i = first; i < last; i++) {
    _Atomic uint64_t *w = seen_word (l, i, true);
    uint64_t bit = UINT64_C (1) << (i % 64);
    bool fresh = w && !(atomic_load_explicit (w, memory_order_relaxed) & bit)
      && !(atomic_fetch_or_explicit (w, bit, memory_order_relaxed) & bit);

    if (fresh && run > 0 && run_start + run == i && run < extent_max (l)) {
      run++;
      continue;
    }
    if (run > 0)
      append (l, run_start, run);
    run = fresh ? 1 : 0;
    run_start = i;
  }
  if (run > 0)
    append (l, run_start, run);
}

uint64_t
rc_learn_sequence_pages (const struct rc_learn *l)
{
  return l->seq_pages;
}

uint64_t
rc_learn_recorded_pages (struct rc_learn *l)
{
  LOCK_FOR_SCOPE (&l->lock);
  return l->rec_pages;
}

/* The index into by_page of the last extent starting at or before
 * index, or -1.
 */
static ssize_t
find_by_page (const struct rc_learn *l, ra_pgoff index)
{
  ssize_t lo = 0, hi = (ssize_t) l->nseq - 1, r = -1;

  while (lo <= hi) {
    ssize_t mid = lo + (hi - lo) / 2;

    if (l->seq[l->by_page[mid]].start <= index) {
      r = mid;
      lo = mid + 1;
    }
    else
      hi = mid - 1;
  }
  return r;
}

bool
rc_learn_position (const struct rc_learn *l, ra_pgoff index, uint64_t *pos)
{
  ssize_t k = find_by_page (l, index);
  const struct seq_ext *e;

  if (k < 0)
    return false;
  e = &l->seq[l->by_page[k]];
  if (index >= e->start + e->count)
    return false;
  *pos = e->pos + (index - e->start);
  return true;
}

uint64_t
rc_learn_reached (const struct rc_learn *l, ra_pgoff first, ra_pgoff last,
                  uint64_t limit)
{
  ssize_t k = find_by_page (l, first);
  uint64_t best = 0;

  if (k < 0)
    k = 0;
  for (; (size_t) k < l->nseq; k++) {
    const struct seq_ext *e = &l->seq[l->by_page[k]];
    ra_pgoff from = first > e->start ? first : e->start;
    ra_pgoff to = last < e->start + e->count ? last : e->start + e->count;
    uint64_t lo, hi;

    if (e->start >= last)
      break;
    if (from >= to)
      continue;
    lo = e->pos + (from - e->start);
    hi = e->pos + (to - e->start);   /* one past the highest */
    if (lo >= limit)
      continue;
    if (hi > limit)
      hi = limit;
    if (hi > best)
      best = hi;
  }
  return best;
}

static int
cmp_extent (const void *a, const void *b)
{
  ra_pgoff x = ((const struct rc_learn_extent *) a)->start;
  ra_pgoff y = ((const struct rc_learn_extent *) b)->start;

  return x < y ? -1 : x > y;
}

size_t
rc_learn_window (const struct rc_learn *l, uint64_t from, uint64_t n,
                 ra_pgoff gap, struct rc_learn_extent *out, size_t max)
{
  size_t lo = 0, hi = l->nseq, k, m = 0, j;
  uint64_t end = from + n;

  /* The extent holding position from: the last one starting at or
   * before it.
   */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;

    if (l->seq[mid].pos <= from)
      lo = mid;
    else
      hi = mid;
  }
  for (k = lo; k < l->nseq && l->seq[k].pos < end && m < max; k++) {
    const struct seq_ext *e = &l->seq[k];
    uint64_t a = from > e->pos ? from : e->pos;
    uint64_t b = end < e->pos + e->count ? end : e->pos + e->count;

    if (a >= b)
      continue;
    out[m++] = (struct rc_learn_extent) {
      .start = e->start + (a - e->pos), .count = (uint32_t) (b - a) };
  }
  qsort (out, m, sizeof *out, cmp_extent);
  for (k = 0, j = 0; k < m; k++) {
    if (j > 0 && out[k].start <= out[j - 1].start + out[j - 1].count + gap) {
      ra_pgoff e = out[k].start + out[k].count;

      if (e > out[j - 1].start + out[j - 1].count)
        out[j - 1].count = (uint32_t) (e - out[j - 1].start);
    }
    else
      out[j++] = out[k];
  }
  return j;
}

/* What rc_learn_save writes: the header and name, then the extents. */
struct image {
  const struct rc_learn *l;
  const struct rc_learn_extent *ext;
  size_t n;
};

static int
write_image (FILE *fp, void *arg)
{
  const struct image *im = arg;
  const struct rc_learn *l = im->l;
  size_t name_len = strlen (l->name), total, i;
  CLEANUP_FREE unsigned char *buf = NULL;
  unsigned char *p;

  total = HEADER + name_space (name_len) + im->n * EXTENT;
  buf = calloc (1, total);
  if (!buf)
    return -1;
  memcpy (buf, "RACLEARN", 8);
  put32 (buf + 8, RC_LEARN_VERSION);
  put32 (buf + 12, (uint32_t) name_len);
  put64 (buf + 16, l->size);
  put64 (buf + 24, im->n);
  memcpy (buf + HEADER, l->name, name_len);
  p = buf + HEADER + name_space (name_len);
  for (i = 0; i < im->n; i++, p += EXTENT) {
    uint64_t off = (uint64_t) im->ext[i].start << l->shift;
    uint64_t bytes = (uint64_t) im->ext[i].count << l->shift;

    if (off + bytes > l->size)  /* the export's last, partial page */
      bytes = l->size - off;
    put64 (p, off);
    put32 (p + 8, (uint32_t) ((bytes + (1u << UNIT_SHIFT) - 1) >> UNIT_SHIFT));
    put32 (p + 12, im->ext[i].age);
  }
  put64 (buf + 32, fnv1a (buf, total));
  return fwrite (buf, 1, total, fp) == total ? 0 : -1;
}

int
rc_learn_save (struct rc_learn *l)
{
  CLEANUP_FREE struct rc_learn_extent *out = NULL;
  struct image im = { .l = l };
  size_t n = 0, cap, i;

  {
    LOCK_FOR_SCOPE (&l->lock);

    if (l->file_good && l->rec_pages == 0)
      return 0;                 /* nothing read: nothing to learn */
    cap = l->nrec + 64;
    out = malloc (cap * sizeof *out);
    if (!out)
      return -1;
    memcpy (out, l->rec, l->nrec * sizeof *out);
    n = l->nrec;
  }
  /* What the sequence had that this run did not read, one run older. */
  for (i = 0; i < l->nseq && n < RC_LEARN_MAX_EXTENTS; i++) {
    const struct seq_ext *e = &l->seq[i];
    ra_pgoff p = e->start, end = e->start + e->count;

    if (e->age + 1 >= RC_LEARN_KEEP_RUNS)
      continue;
    while (p < end && n < RC_LEARN_MAX_EXTENTS) {
      ra_pgoff q;

      while (p < end && seen (l, p))
        p++;
      for (q = p; q < end && !seen (l, q) && q - p < extent_max (l); q++)
        ;
      if (q == p)
        break;
      if (n == cap) {
        struct rc_learn_extent *np;

        cap *= 2;
        np = realloc (out, cap * sizeof *out);
        if (!np)
          return -1;
        out = np;
      }
      out[n++] = (struct rc_learn_extent) {
        .start = p, .count = (uint32_t) (q - p), .age = e->age + 1 };
      p = q;
    }
  }
  im.ext = out;
  im.n = n;
  return rc_write_file_atomic (l->path, write_image, &im);
}
