/* Unit tests of the counters' report (src/stats.c, rc_stats_print): the
 * items of RC_STATS_ITEMS (include/racache/stats.h) under their JSON
 * keys, the ratios made from the counters, the windows by branch, the
 * summary subset, and no item that needs a running cache.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <check.h>

#include "racache/stats.h"

/* rc_stats_print's output as a malloc'd string. */
static char *
print (const struct rc_stats *st, enum rc_stats_style style, unsigned flags,
       const char *prefix)
{
  char *s = NULL;
  size_t len;
  FILE *fp = open_memstream (&s, &len);

  ck_assert_ptr_nonnull (fp);
  ck_assert_int_eq (rc_stats_print (fp, st, 4096, style, flags, prefix), 0);
  ck_assert_int_eq (fclose (fp), 0);
  return s;
}

static void
fill (struct rc_stats *st)
{
  memset (st, 0, sizeof *st);
  STAT_ADD (st, client_reads, 7);
  STAT_ADD (st, client_bytes, 1000);
  STAT_ADD (st, backend_bytes, 1500);
  STAT_ADD (st, page_hits, 3);
  STAT_ADD (st, page_misses, 1);
  STAT_ADD (st, windows[RA_B_SEQUENTIAL], 5);
  STAT_ADD (st, adapt_cap_pages, 2);
}

START_TEST (test_line)
{
  struct rc_stats st;
  char *s;

  fill (&st);
  s = print (&st, RC_STATS_LINE, 0, "x: ");
  ck_assert_msg (strncmp (s, "x: page_size=4096 hit_ratio=0.7500 ", 35) == 0,
                 "%s", s);
  ck_assert_ptr_nonnull (strstr (s, " backend_bytes_per_client_byte=1.5000 "));
  ck_assert_ptr_nonnull (strstr (s, " client_reads=7 client_bytes=1000 "));
  ck_assert_ptr_nonnull (strstr (s, " windows.A=0 windows.B=5 "));
  ck_assert_ptr_nonnull (strstr (s, " adapt_last_cap_bytes=8192"));
  /* No labels, nothing that needs the cache, one line. */
  ck_assert_ptr_null (strstr (s, "version"));
  ck_assert_ptr_null (strstr (s, "ra_mode"));
  ck_assert_ptr_null (strstr (s, "inflight_now"));
  ck_assert_ptr_null (strstr (s, "uptime_seconds"));
  ck_assert_ptr_null (strchr (s, '\n'));
  free (s);
}
END_TEST

START_TEST (test_list_and_summary)
{
  struct rc_stats st;
  char *s;

  fill (&st);
  s = print (&st, RC_STATS_LIST, 0, "# ");
  ck_assert_msg (strncmp (s, "# page_size: 4096\n# hit_ratio: 0.7500\n",
                          38) == 0, "%s", s);
  ck_assert_ptr_nonnull (strstr (s, "\n# windows.B: 5\n"));
  free (s);

  s = print (&st, RC_STATS_LINE, RC_STATS_SUMMARY_ONLY, "");
  ck_assert_msg (strncmp (s, "hit_ratio=0.7500 "
                          "backend_bytes_per_client_byte=1.5000 "
                          "client_reads=7 client_bytes=1000 ", 70) == 0,
                 "%s", s);
  ck_assert_ptr_null (strstr (s, "page_hits"));
  ck_assert_ptr_null (strstr (s, "windows"));
  ck_assert_ptr_nonnull (strstr (s, " backend_bytes=1500 "));
  free (s);
}
END_TEST

static Suite *
stats_suite (void)
{
  Suite *s = suite_create ("stats");
  TCase *tc = tcase_create ("print");

  tcase_add_test (tc, test_line);
  tcase_add_test (tc, test_list_and_summary);
  suite_add_tcase (s, tc);
  return s;
}

int
main (void)
{
  SRunner *sr = srunner_create (stats_suite ());
  int failed;

  srunner_run_all (sr, CK_NORMAL);
  failed = srunner_ntests_failed (sr);
  srunner_free (sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
