/* bench/rusage OUTPUT COMMAND [ARG...]: run COMMAND, wait for it, and
 * write its rusage to OUTPUT as one line
 *
 *   USER_S SYS_S MINOR_FAULTS MAJOR_FAULTS MAXRSS_KIB
 *
 * with the CPU seconds to the microsecond, from wait4(): every thread of
 * the process over its whole life, exit included.  GNU time reports the
 * same rusage in hundredths, too coarse for a front server that spends
 * 0.07 s on a whole job.  The child is started with posix_spawn (no
 * copy-on-write faults of ours counted as the child's, and the peak RSS
 * recorded at exec is this small program's).  A line "exit status N" or
 * "killed by signal N" comes first when COMMAND did not exit with status
 * 0; the figures are always the last line.  Exits with COMMAND's status
 * (128 + N after signal N; 127 if it could not be started, with no
 * figures).  Like GNU time it ignores SIGINT and SIGQUIT while it waits
 * and forwards no signal: the benchmarks stop the child by its own pid.
 */
#include <config.h>

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>

extern char **environ;

static double
seconds (struct timeval tv)
{
  return (double) tv.tv_sec + (double) tv.tv_usec / 1e6;
}

int
main (int argc, char **argv)
{
  FILE *out;
  pid_t pid;
  int r, status, code;
  struct rusage ru;

  if (argc < 3) {
    fprintf (stderr, "usage: %s OUTPUT COMMAND [ARG...]\n", argv[0]);
    return 2;
  }
  /* Opened first: an OUTPUT that cannot be written is an error before
   * anything runs, not a measurement lost afterwards.
   */
  out = fopen (argv[1], "w");
  if (out == NULL) {
    fprintf (stderr, "rusage: %s: %s\n", argv[1], strerror (errno));
    return 2;
  }
  r = posix_spawnp (&pid, argv[2], NULL, NULL, &argv[2], environ);
  if (r != 0) {
    fprintf (stderr, "rusage: %s: %s\n", argv[2], strerror (r));
    fclose (out);
    return 127;
  }
  signal (SIGINT, SIG_IGN);
  signal (SIGQUIT, SIG_IGN);
  while (wait4 (pid, &status, 0, &ru) == -1) {
    if (errno != EINTR) {
      fprintf (stderr, "rusage: wait4: %s\n", strerror (errno));
      fclose (out);
      return 2;
    }
  }
  if (WIFSIGNALED (status)) {
    code = 128 + WTERMSIG (status);
    fprintf (out, "killed by signal %d\n", WTERMSIG (status));
  }
  else {
    code = WEXITSTATUS (status);
    if (code != 0)
      fprintf (out, "exit status %d\n", code);
  }
  fprintf (out, "%.6f %.6f %ld %ld %ld\n",
           seconds (ru.ru_utime), seconds (ru.ru_stime),
           ru.ru_minflt, ru.ru_majflt, ru.ru_maxrss);
  if (fclose (out) == EOF) {
    fprintf (stderr, "rusage: %s: %s\n", argv[1], strerror (errno));
    return 2;
  }
  return code;
}
