/* Unit tests of the learned file (src/learn.c): the order of first
 * access, the sequence's positions and windows, the merge of runs and
 * the fading of what is not read again, the files to ignore (garbage,
 * truncated, garbled, another export), another page size, the bound on
 * extents, and recording from several threads at once.
 */
#include <config.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <check.h>

#include "racache/learn.h"

#define SIZE (UINT64_C (64) << 20)      /* 16384 pages of 4K */

static char path[256];

static void
setup (void)
{
  snprintf (path, sizeof path, "/tmp/test-learn.%d", (int) getpid ());
  unlink (path);
}

static void
teardown (void)
{
  unlink (path);
}

/* A learner over path for export (size, name), shift, that must find a
 * good file (why_want NULL) or one it ignores for a reason containing
 * why_want.
 */
static struct rc_learn *
open_learn (uint64_t size, const char *name, unsigned shift,
            const char *why_want)
{
  char why[256];
  struct rc_learn *l = rc_learn_new (path, size, name, shift,
                                     why, sizeof why);

  ck_assert_ptr_nonnull (l);
  if (why_want)
    ck_assert_msg (strstr (why, why_want), "why: \"%s\", want \"%s\"",
                   why, why_want);
  else
    ck_assert_msg (why[0] == 0, "unexpected: %s", why);
  return l;
}

/* Save l, free it, and learn again over the file: the next run. */
static struct rc_learn *
next_run (struct rc_learn *l, uint64_t size, const char *name, unsigned shift)
{
  ck_assert_int_eq (rc_learn_save (l), 0);
  rc_learn_free (l);
  return open_learn (size, name, shift, NULL);
}

static uint64_t
pos_of (struct rc_learn *l, ra_pgoff index)
{
  uint64_t pos;

  ck_assert_msg (rc_learn_position (l, index, &pos), "page %ju",
                 (uintmax_t) index);
  return pos;
}

START_TEST (test_order_and_positions)
{
  struct rc_learn *l = open_learn (SIZE, "", 12, NULL);
  struct rc_learn_extent w[16];
  uint64_t pos;
  size_t n;

  ck_assert_uint_eq (rc_learn_sequence_pages (l), 0);
  rc_learn_record (l, 10, 14);
  rc_learn_record (l, 2, 4);
  rc_learn_record (l, 12, 16);          /* 12, 13 seen: 14, 15 new */
  rc_learn_record (l, 3, 4);            /* nothing new */
  ck_assert_uint_eq (rc_learn_recorded_pages (l), 8);
  l = next_run (l, SIZE, "", 12);
  ck_assert_uint_eq (rc_learn_sequence_pages (l), 8);
  /* Order of first access: 10..13, 2..3, 14..15. */
  ck_assert_uint_eq (pos_of (l, 10), 0);
  ck_assert_uint_eq (pos_of (l, 13), 3);
  ck_assert_uint_eq (pos_of (l, 2), 4);
  ck_assert_uint_eq (pos_of (l, 3), 5);
  ck_assert_uint_eq (pos_of (l, 14), 6);
  ck_assert_uint_eq (pos_of (l, 15), 7);
  ck_assert (!rc_learn_position (l, 4, &pos));
  ck_assert (!rc_learn_position (l, 16, &pos));
  /* Reached: the highest position below the limit, plus one. */
  ck_assert_uint_eq (rc_learn_reached (l, 0, 100, 8), 8);
  ck_assert_uint_eq (rc_learn_reached (l, 0, 100, 6), 6);
  ck_assert_uint_eq (rc_learn_reached (l, 11, 12, 8), 2);
  ck_assert_uint_eq (rc_learn_reached (l, 14, 16, 6), 0);
  ck_assert_uint_eq (rc_learn_reached (l, 4, 10, 8), 0);
  /* Windows: by page, merged where they touch or are within the gap. */
  n = rc_learn_window (l, 0, 8, 0, w, 16);
  ck_assert_uint_eq (n, 2);
  ck_assert_uint_eq (w[0].start, 2);
  ck_assert_uint_eq (w[0].count, 2);
  ck_assert_uint_eq (w[1].start, 10);
  ck_assert_uint_eq (w[1].count, 6);
  n = rc_learn_window (l, 2, 4, 0, w, 16);     /* 12, 13, 2, 3 */
  ck_assert_uint_eq (n, 2);
  ck_assert_uint_eq (w[0].start, 2);
  ck_assert_uint_eq (w[1].start, 12);
  ck_assert_uint_eq (w[1].count, 2);
  n = rc_learn_window (l, 0, 8, 6, w, 16);     /* gap 4..9 bridged */
  ck_assert_uint_eq (n, 1);
  ck_assert_uint_eq (w[0].start, 2);
  ck_assert_uint_eq (w[0].count, 14);
  rc_learn_free (l);
}
END_TEST

/* The file's extents: (start, count, age) in order. */
static size_t
read_back (struct rc_learn *l, struct rc_learn_extent *out, size_t max)
{
  uint64_t total = rc_learn_sequence_pages (l), p;
  size_t n = 0;

  /* Positions in order name the pages in file order; group runs. */
  for (p = 0; p < total; p++) {
    struct rc_learn_extent e[1];

    ck_assert_uint_eq (rc_learn_window (l, p, 1, 0, e, 1), 1);
    if (n > 0 && out[n - 1].start + out[n - 1].count == e[0].start)
      out[n - 1].count++;
    else {
      ck_assert_uint_lt (n, max);
      out[n++] = e[0];
    }
  }
  return n;
}

START_TEST (test_merge_and_fade)
{
  struct rc_learn_extent e[8];
  struct rc_learn *l;
  struct stat st1, st2;
  int run;

  l = open_learn (SIZE, "disk", 12, NULL);
  rc_learn_record (l, 100, 110);
  rc_learn_record (l, 5, 7);
  ck_assert_int_eq (rc_learn_save (l), 0);
  rc_learn_free (l);

  /* Runs that read only 5..6 and 50: first what they read, then what
   * they did not, until it faded after RC_LEARN_KEEP_RUNS runs.
   */
  for (run = 1; run <= (int) RC_LEARN_KEEP_RUNS; run++) {
    l = open_learn (SIZE, "disk", 12, NULL);
    rc_learn_record (l, 50, 51);
    rc_learn_record (l, 5, 7);
    l = next_run (l, SIZE, "disk", 12);
    ck_assert_uint_eq (read_back (l, e, 8), run < (int) RC_LEARN_KEEP_RUNS ? 3 : 2);
    ck_assert_uint_eq (e[0].start, 50);
    ck_assert_uint_eq (e[1].start, 5);
    ck_assert_uint_eq (e[1].count, 2);
    if (run < (int) RC_LEARN_KEEP_RUNS) {
      ck_assert_uint_eq (e[2].start, 100);
      ck_assert_uint_eq (e[2].count, 10);
    }
    rc_learn_free (l);
  }

  /* A run that reads nothing leaves a good file as it was. */
  ck_assert_int_eq (stat (path, &st1), 0);
  l = open_learn (SIZE, "disk", 12, NULL);
  ck_assert_int_eq (rc_learn_save (l), 0);
  rc_learn_free (l);
  ck_assert_int_eq (stat (path, &st2), 0);
  ck_assert_uint_eq (st1.st_ino, st2.st_ino);
  ck_assert_uint_eq (st2.st_mode & 0777, 0600);
}
END_TEST

static void
write_bytes (const void *buf, size_t n)
{
  FILE *fp = fopen (path, "w");

  ck_assert_ptr_nonnull (fp);
  ck_assert_uint_eq (fwrite (buf, 1, n, fp), n);
  ck_assert_int_eq (fclose (fp), 0);
}

static size_t
read_bytes (unsigned char *buf, size_t max)
{
  FILE *fp = fopen (path, "r");
  size_t n;

  ck_assert_ptr_nonnull (fp);
  n = fread (buf, 1, max, fp);
  fclose (fp);
  return n;
}

/* A good file of export (SIZE, "disk") with a few extents. */
static size_t
good_file (unsigned char *buf, size_t max)
{
  struct rc_learn *l;

  unlink (path);
  l = open_learn (SIZE, "disk", 12, NULL);
  rc_learn_record (l, 1, 3);
  rc_learn_record (l, 40, 41);
  ck_assert_int_eq (rc_learn_save (l), 0);
  rc_learn_free (l);
  return read_bytes (buf, max);
}

START_TEST (test_bad_files)
{
  unsigned char buf[4096];
  size_t n;
  struct rc_learn *l;

  /* Garbage. */
  memset (buf, 'x', sizeof buf);
  write_bytes (buf, sizeof buf);
  l = open_learn (SIZE, "disk", 12, "not a learned file");
  ck_assert_uint_eq (rc_learn_sequence_pages (l), 0);
  /* Ignored and rewritten: the next save writes a good file. */
  rc_learn_record (l, 7, 8);
  l = next_run (l, SIZE, "disk", 12);
  ck_assert_uint_eq (rc_learn_sequence_pages (l), 1);
  rc_learn_free (l);

  /* Empty, too short. */
  write_bytes (buf, 0);
  rc_learn_free (open_learn (SIZE, "disk", 12, "not a learned file"));

  /* Truncated: the last byte gone. */
  n = good_file (buf, sizeof buf);
  write_bytes (buf, n - 1);
  rc_learn_free (open_learn (SIZE, "disk", 12, "truncated"));
  /* A byte more. */
  buf[n] = 0;
  write_bytes (buf, n + 1);
  rc_learn_free (open_learn (SIZE, "disk", 12, "truncated"));

  /* A flipped bit in an extent. */
  n = good_file (buf, sizeof buf);
  buf[n - 10] ^= 4;
  write_bytes (buf, n);
  rc_learn_free (open_learn (SIZE, "disk", 12, "checksum"));

  /* Another version. */
  n = good_file (buf, sizeof buf);
  buf[8] = 9;
  write_bytes (buf, n);
  rc_learn_free (open_learn (SIZE, "disk", 12, "version 9"));

  /* Another export: size, or name. */
  good_file (buf, sizeof buf);
  rc_learn_free (open_learn (SIZE * 2, "disk", 12, "another export"));
  good_file (buf, sizeof buf);
  rc_learn_free (open_learn (SIZE, "other", 12, "another export"));
  /* An extent beyond a smaller export of the same name: another size. */
  good_file (buf, sizeof buf);
  rc_learn_free (open_learn (4096 * 10, "disk", 12, "another export"));

  /* A directory is not a file. */
  unlink (path);
  ck_assert_int_eq (mkdir (path, 0700), 0);
  rc_learn_free (open_learn (SIZE, "disk", 12, "not a regular file"));
  ck_assert_int_eq (rmdir (path), 0);
}
END_TEST

START_TEST (test_page_size_change)
{
  struct rc_learn *l = open_learn (SIZE, "", 12, NULL);
  struct rc_learn_extent w[4];

  /* 4K pages 0, 15 and 16..17: in 64K pages, 0 (twice) and 1. */
  rc_learn_record (l, 16, 18);
  rc_learn_record (l, 0, 1);
  rc_learn_record (l, 15, 16);
  l = next_run (l, SIZE, "", 16);
  ck_assert_uint_eq (rc_learn_sequence_pages (l), 2);
  ck_assert_uint_eq (pos_of (l, 1), 0);
  ck_assert_uint_eq (pos_of (l, 0), 1);
  ck_assert_uint_eq (rc_learn_window (l, 0, 2, 0, w, 4), 1);
  ck_assert_uint_eq (w[0].start, 0);
  ck_assert_uint_eq (w[0].count, 2);
  rc_learn_free (l);
}
END_TEST

START_TEST (test_extent_bound)
{
  /* Every other page of 2^21 + 2^10 pages: more runs than the file
   * holds; the pages are counted, the file keeps the first
   * RC_LEARN_MAX_EXTENTS of them.
   */
  uint64_t pages = 2 * ((uint64_t) RC_LEARN_MAX_EXTENTS + 1024);
  struct rc_learn *l = open_learn (pages << 12, "", 12, NULL);
  ra_pgoff i;

  for (i = 0; i < pages; i += 2)
    rc_learn_record (l, i, i + 1);
  ck_assert_uint_eq (rc_learn_recorded_pages (l), pages / 2);
  l = next_run (l, pages << 12, "", 12);
  ck_assert_uint_eq (rc_learn_sequence_pages (l), RC_LEARN_MAX_EXTENTS);
  ck_assert_uint_eq (pos_of (l, 2 * ((uint64_t) RC_LEARN_MAX_EXTENTS - 1)),
                     RC_LEARN_MAX_EXTENTS - 1);
  rc_learn_free (l);
}
END_TEST

struct rec_arg {
  struct rc_learn *l;
  unsigned seed;
};

static void *
recorder (void *arg)
{
  struct rec_arg *a = arg;
  int k;

  for (k = 0; k < 20000; k++) {
    ra_pgoff first = rand_r (&a->seed) % 16000;

    rc_learn_record (a->l, first, first + 1 + rand_r (&a->seed) % 32);
  }
  return NULL;
}

START_TEST (test_threads)
{
  struct rc_learn *l = open_learn (SIZE, "", 12, NULL);
  struct rec_arg a[4];
  pthread_t t[4];
  uint64_t seen = 0, pos, p;
  int k;

  for (k = 0; k < 4; k++) {
    a[k] = (struct rec_arg) { .l = l, .seed = (unsigned) k + 1 };
    ck_assert_int_eq (pthread_create (&t[k], NULL, recorder, &a[k]), 0);
  }
  for (k = 0; k < 4; k++)
    pthread_join (t[k], NULL);
  ck_assert_int_eq (rc_learn_save (l), 0);
  /* Each page recorded once: the sequence has every page once. */
  seen = rc_learn_recorded_pages (l);
  rc_learn_free (l);
  l = open_learn (SIZE, "", 12, NULL);
  ck_assert_uint_eq (rc_learn_sequence_pages (l), seen);
  for (p = 0; p < 16384; p++)
    if (rc_learn_position (l, p, &pos))
      ck_assert_uint_lt (pos, seen);
  rc_learn_free (l);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("learn");
  TCase *tc = tcase_create ("learn");
  SRunner *sr;
  int failed;

  tcase_add_checked_fixture (tc, setup, teardown);
  tcase_set_timeout (tc, 60);
  tcase_add_test (tc, test_order_and_positions);
  tcase_add_test (tc, test_merge_and_fade);
  tcase_add_test (tc, test_bad_files);
  tcase_add_test (tc, test_page_size_change);
  tcase_add_test (tc, test_extent_bound);
  tcase_add_test (tc, test_threads);
  suite_add_tcase (s, tc);
  sr = srunner_create (s);
  srunner_run_all (sr, CK_NORMAL);
  failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
