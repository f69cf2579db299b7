/* A scripted fake backend for unit tests of the core cache
 * (tests/unit/test-cache.c; any unit test may link fake-backend.c).
 *
 * An in-memory export whose bytes follow a deterministic pattern of
 * (offset, version): every 512-byte block has a version, bumped by a
 * simulated write (fake_write).  It can delay each request, fail
 * requests by byte range, by count, or when issued by a worker, hold
 * requests that touch a byte range until the test opens a gate (the data
 * is copied before the gate, so a held read returns what the export held
 * when it started), and it logs every request (offset, count, thread,
 * ctx) and counts concurrent calls.  Its callbacks (fake_pread,
 * fake_worker_open, fake_worker_close) make a struct rc_backend whose
 * opaque is the struct fake.  The functions assert with Check.
 */
#ifndef RACACHE_TESTS_FAKE_BACKEND_H
#define RACACHE_TESTS_FAKE_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KiB 1024u
#define MiB (1024u * 1024u)

/* Monotonic time in ns, and a sleep that survives signals. */
uint64_t now_ns (void);
void sleep_ns (long ns);

/* How long the tests wait for something that should happen at once
 * (generous: valgrind and the sanitizers are slow).
 */
#define PATIENCE_NS (UINT64_C (30) * 1000000000u)

#define VBLOCK 512u             /* version granularity, the smallest page */

/* The byte at offset o when its block has version v. */
static inline uint8_t
fake_pattern (uint64_t o, uint32_t v)
{
  uint64_t x = o * UINT64_C (0x9E3779B97F4A7C15)
    + (uint64_t) (v + 1) * UINT64_C (0xD6E8FEB86659FD93);

  x ^= x >> 31;
  return (uint8_t) (x >> 24);
}

struct req {
  uint64_t offset;
  uint32_t count;
  pthread_t thread;
  void *ctx;
  int err;                      /* the error returned, 0 = success */
};

struct fake {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t size;
  uint8_t *data;
  _Atomic uint32_t *ver;        /* per VBLOCK; written under lock */
  _Atomic uint32_t *committed;  /* per VBLOCK: written and invalidated */
  long delay_ns;                /* every request sleeps this long */

  /* Error injection. */
  uint64_t err_lo, err_hi;      /* requests touching [lo, hi) fail */
  int err_errno;
  unsigned fail_next;           /* the next N requests fail */
  int fail_errno;
  bool fail_workers;            /* requests with a worker's ctx fail */
  int fail_workers_errno;       /* ... with this errno (0: EIO) */
  bool open_fail;               /* worker_open returns NULL */
  bool open_blocked;            /* worker_open waits while set */
  unsigned open_waiting;        /* worker_opens waiting now */

  /* Requests touching [gate_lo, gate_hi) wait while gate_closed. */
  bool gate_closed;
  uint64_t gate_lo, gate_hi;
  unsigned gate_blocked;

  bool log_on;
  struct req *log;
  size_t nlog, caplog;

  unsigned cur, max_cur;        /* concurrent calls now, at most */
  uint64_t nreqs;
  unsigned opened, closed;      /* worker contexts */
  unsigned bad;                 /* requests outside the export or empty */
};

/* A client's backend context (workers get their own from worker_open). */
extern int fake_client_ctx_tag;
#define CLIENT_CTX ((void *) &fake_client_ctx_tag)

/* A fake export of size bytes, every block at version 0, logging on. */
void fake_init (struct fake *f, uint64_t size);
void fake_free (struct fake *f);

/* The struct rc_backend callbacks (opaque: the struct fake). */
int fake_pread (void *opaque, void *ctx, void *buf, uint32_t count,
                uint64_t offset, int *err);
void *fake_worker_open (void *opaque);
void fake_worker_close (void *opaque, void *ctx);

/* A write to the export: bump the version of the blocks of
 * [off, off + len) (whole blocks) and rewrite them.  The caller then
 * tells the cache (rc_invalidate) and commits.
 */
void fake_write (struct fake *f, uint64_t off, uint64_t len);
/* The write of [off, off + len) has been invalidated in the cache: from
 * now on a read must return at least this version.
 */
void fake_commit (struct fake *f, uint64_t off, uint64_t len);

/* Requests logged so far. */
size_t fake_nlog (struct fake *f);
/* Requests touching [lo, hi) wait while closed. */
void fake_set_gate (struct fake *f, bool closed, uint64_t lo, uint64_t hi);
/* Requests touching [lo, hi) fail with errno e. */
void fake_set_errors (struct fake *f, uint64_t lo, uint64_t hi, int e);
/* Wait (PATIENCE_NS at most) until n requests are held at the gate. */
bool fake_wait_blocked (struct fake *f, unsigned n);
/* The requests logged since index from, sorted by offset (malloc'd). */
struct req *fake_reqs_since (struct fake *f, size_t from, size_t *n);
/* Compare bytes read at off with the export now (ck_abort on a
 * difference).
 */
void check_now (struct fake *f, const uint8_t *buf, uint64_t off,
                uint32_t len);

#endif /* RACACHE_TESTS_FAKE_BACKEND_H */
