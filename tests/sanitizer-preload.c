/* ra-cache tests, sanitizer builds only: a tiny library that
 * tests/nbdkit-sanitizer-wrapper.sh preloads into nbdkit together with
 * the sanitizer runtime (libasan.so or libtsan.so).  It is built
 * without sanitizer flags.  Two jobs:
 *
 * 1. Define swift_demangle.  nbdkit is not instrumented, so the
 *    preloaded runtime initializes lazily, in the first malloc.  That is
 *    p11-kit's constructor (via gnutls) calling newlocale(), which holds
 *    glibc's __libc_setlocale_lock for writing.  While initializing, the
 *    runtime looks up dlsym (RTLD_DEFAULT, "swift_demangle"); when the
 *    lookup fails it calls dlerror(), which translates the message with
 *    dcgettext(), which read-locks the same lock: EDEADLK, ignored, and
 *    the unlocks that follow leave the lock's reader count negative.  The
 *    next strerror() or freelocale() (p11-kit's destructor at exit) then
 *    waits for ever: nbdkit hangs at exit after any error message.  With
 *    the symbol present the lookup succeeds and dlerror() is not called.
 *    The sanitizer calls it to demangle Swift names; returning NULL means
 *    "not a Swift name".
 *
 * 2. Give nbdkit's children (--run commands, sh plugin scripts) the
 *    environment without the preload: the wrapper saves the test's own
 *    LD_PRELOAD in RA_CACHE_SAVED_LD_PRELOAD; restore it (or unset
 *    LD_PRELOAD) once the libraries are loaded.  Only nbdkit, which loads
 *    the instrumented filter, runs with the sanitizer runtime.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

char *swift_demangle (const char *name, size_t len, char *out,
                      size_t *out_len, uint32_t flags);

char *
swift_demangle (const char *name, size_t len, char *out, size_t *out_len,
                uint32_t flags)
{
  (void) name; (void) len; (void) out; (void) out_len; (void) flags;
  return NULL;
}

static void __attribute__ ((constructor))
restore_ld_preload (void)
{
  const char *saved = getenv ("RA_CACHE_SAVED_LD_PRELOAD");

  if (!saved)
    return;                     /* not started by the wrapper */
  if (*saved)
    setenv ("LD_PRELOAD", saved, 1);
  else
    unsetenv ("LD_PRELOAD");
  unsetenv ("RA_CACHE_SAVED_LD_PRELOAD");
}
