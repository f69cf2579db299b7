/* libFuzzer target: ra-cache's configuration parsing (src/config.c).
 *
 * Each input is used three ways:
 * 1. as a libconfig file: written to a private temporary file and read
 *    with rc_config_load_file (the first byte also decides which keys
 *    count as given on the command line, so the skip callback is
 *    exercised), then cross-checked with rc_config_check;
 * 2. as "KEY=VALUE" text for rc_config_set (the nbdkit parameter path),
 *    with an error buffer of a size the input chooses;
 * 3. as text for rc_parse_size.
 *
 * Beyond the sanitizers it checks that every failure leaves a message
 * (a non-empty, terminated string in the error buffer) and that sizes
 * that parse are in range.  Build and run with fuzz/run.sh.
 */

#include <config.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "racache/config.h"

static char path[] = "/tmp/ra-cache-fuzz-config.XXXXXX";
static int fd = -1;

static void
remove_file (void)
{
  if (fd >= 0)
    unlink (path);
}

int LLVMFuzzerInitialize (int *argc, char ***argv);

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  (void) argc; (void) argv;
  fd = mkstemp (path);
  if (fd == -1) {
    perror ("mkstemp");
    exit (EXIT_FAILURE);
  }
  atexit (remove_file);
  return 0;
}

/* A failure must come with a message. */
static void
check_message (const char *what, const char *err, size_t len)
{
  if (len == 0)
    return;
  if (memchr (err, '\0', len) == NULL) {
    fprintf (stderr, "%s: the error message is not terminated\n", what);
    abort ();
  }
  if (len > 1 && err[0] == '\0') {
    fprintf (stderr, "%s: failed without a message\n", what);
    abort ();
  }
}

static bool
skip_key (const char *key, void *arg)
{
  unsigned bits = *(const unsigned char *) arg;
  size_t i;

  /* Key i counts as given on the command line if bit i is set. */
  for (i = 0; i < rc_nkeys && i < 8; i++)
    if (strcmp (rc_keys[i].name, key) == 0)
      return (bits >> i) & 1;
  return false;
}

static void
fuzz_file (const uint8_t *data, size_t size)
{
  struct rc_config c;
  char err[256], buf[256];
  unsigned char bits = size ? data[0] : 0;
  int r;

  if (ftruncate (fd, 0) == -1 ||
      pwrite (fd, data, size, 0) != (ssize_t) size) {
    perror (path);
    abort ();
  }
  rc_config_defaults (&c);
  memset (err, 'x', sizeof err);
  r = rc_config_load_file (&c, path, skip_key, &bits, err, sizeof err);
  if (r != 0 && r != -1)
    abort ();
  if (r == -1)
    check_message ("rc_config_load_file", err, sizeof err);
  else
    (void) rc_config_check (&c, buf, sizeof buf);
  rc_config_free (&c);
}

static void
fuzz_text (const uint8_t *data, size_t size)
{
  struct rc_config c;
  char *text, *eq, err[256];
  size_t errlen;
  uint64_t v;
  int r;

  text = malloc (size + 1);
  if (!text)
    abort ();
  memcpy (text, data, size);
  text[size] = '\0';

  if (rc_parse_size (text, &v) == 0 && v > INT64_MAX)
    abort ();

  eq = strchr (text, '=');
  if (eq) {
    *eq = '\0';
    /* Error buffers from 1 byte (truncation) to 256. */
    errlen = 1 + (size ? data[size - 1] : 0);
    rc_config_defaults (&c);
    memset (err, 'x', sizeof err);
    r = rc_config_set (&c, text, eq + 1, err, errlen);
    if (r < -1 || r > 1)
      abort ();
    if (r == -1)
      check_message ("rc_config_set", err, errlen);
    if (rc_parse_size (eq + 1, &v) == 0 && v > INT64_MAX)
      abort ();
    rc_config_free (&c);
  }
  free (text);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  fuzz_file (data, size);
  fuzz_text (data, size);
  return 0;
}
