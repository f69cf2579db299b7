/* ra-cache: writing a file that readers see whole or not at all
 * (include/racache/util.h): the stats file and the learned file.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "racache/util.h"

/* A private temporary file in path's directory, renamed into place, so
 * that readers see the old file or the new one, never part of one.
 * mkostemp creates it with O_EXCL (an existing name, a symlink planted
 * there included, is never opened or followed) and mode 0600: what
 * ra-cache writes is the operator's business.
 */
int
rc_write_file_atomic (const char *path, int (*write) (FILE *fp, void *arg),
                      void *arg)
{
  size_t n = strlen (path);
  char *tmp = malloc (n + sizeof ".XXXXXX");
  FILE *fp;
  int fd, r, e;

  if (!tmp)
    return -1;
  snprintf (tmp, n + sizeof ".XXXXXX", "%s.XXXXXX", path);
  fd = mkostemp (tmp, O_CLOEXEC);
  if (fd == -1) {
    free (tmp);
    return -1;
  }
  fp = fdopen (fd, "w");
  if (!fp) {
    e = errno;
    close (fd);
    r = -1;
    errno = e;
    goto out;
  }
  r = write (fp, arg);
  if (fclose (fp) != 0)
    r = -1;
  if (r == 0 && rename (tmp, path) == -1)
    r = -1;
 out:
  if (r == -1) {
    e = errno;
    unlink (tmp);
    errno = e;
  }
  free (tmp);
  return r;
}
