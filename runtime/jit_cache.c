/*
 * runtime/jit_cache.c: the persistent compiled-code cache of the CPU JIT.
 *
 * jit.c turns a plan's CODE section into one object file for this CPU.
 * With a cache directory (kdc_rt_options.cache_dir, else the environment
 * variable KDC_CACHE_DIR; none by default) that object is kept in
 * "DIR/<32 hex digits>.kdcobj", named by a 128-bit key over everything that
 * determines the machine code: the bitcode's bytes and jit.c's description
 * of the compilation (target triple, CPU name, CPU features, pipeline and
 * optimisation level, LLVM version, RT_JIT_CODE_VERSION).  The next load of
 * the same code on the same kind of machine maps the object instead of
 * running the optimiser and the backend again (seconds of CPU per plan).
 *
 * An entry is a header followed by the object:
 *
 *   magic "KDCJITO\1" | u32 format version | u32 0 | key[2] (u64) |
 *   n_nontemporal, n_merged (u64, jit.c's statistics) |
 *   object size (u64) | xxHash64 of the object (u64) | object bytes
 *
 * Little-endian u64 fields, as the host writes them (an entry of another
 * byte order has another magic and is ignored).  An entry is trusted only if
 * every header field matches and the file is exactly header + object with
 * the right checksum: a truncated, corrupt or foreign file (another key
 * under this name, another format) is ignored, and the recompiled object
 * replaces it.
 *
 * Writes are atomic (common/files.c: "<path>.tmp.XXXXXX" in the same
 * directory, fsync, rename): a reader sees no entry or a whole one, and
 * processes writing the same key at once each rename a complete, identical
 * file over it.  Loads that miss take an flock on "DIR/<key>.lock" before
 * compiling, and look again once they hold it: the processes of one job
 * (mpirun -np 8) load the same plan at the same moment, and this way one
 * of them compiles it while the others wait and then read its entry,
 * instead of all of them compiling it at once.  The lock is only an
 * optimisation: without it (a file system without flock) every process
 * compiles and the atomic rename keeps the entry whole.  flock locks go
 * with the process's open file, so they are released when it exits, even
 * if it crashes; lock files are empty and stay.  The cache is an optimisation and never an error: a
 * directory that cannot be created, read or written means compiling, as
 * without a cache.  Nothing is ever evicted; removing the directory (or any
 * file in it) at any time is safe.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"
#include "runtime/runtime.h"

enum { FORMAT_VERSION = 1, HEADER_WORDS = 8 };
static const char MAGIC[8] = {'K', 'D', 'C', 'J', 'I', 'T', 'O', 1};

const char *rt_jit_cache_dir(const kdc_rt_options *opt) {
  const char *dir = opt && opt->cache_dir ? opt->cache_dir : getenv("KDC_CACHE_DIR");
  return dir && *dir ? dir : NULL;
}

void rt_jit_cache_key(const void *code, size_t size, const char *desc, rt_jit_key *out) {
  for (int half = 0; half < 2; half++) {
    kdc_hash64_state s;
    kdc_hash64_init(&s, 0x6b6463u + (uint64_t)half * 0x9e3779b97f4a7c15u);
    uint64_t n = size;
    kdc_hash64_update(&s, &n, sizeof n);
    kdc_hash64_update(&s, code, size);
    kdc_hash64_update(&s, desc, strlen(desc) + 1);
    out->w[half] = kdc_hash64_digest(&s);
  }
}

/* "DIR/<key><ext>" (heap). */
static char *entry_path(const char *dir, const rt_jit_key *key, const char *ext) {
  size_t n = strlen(dir) + strlen(ext) + 40;
  char *p = kdc_xmalloc(n);
  snprintf(p, n, "%s/%016llx%016llx%s", dir, (unsigned long long)key->w[0],
           (unsigned long long)key->w[1], ext);
  return p;
}

static void header(uint64_t h[HEADER_WORDS], const rt_jit_key *key, const rt_jit_stats *st,
                   const void *obj, size_t size) {
  memcpy(&h[0], MAGIC, sizeof MAGIC);
  h[1] = FORMAT_VERSION;
  h[2] = key->w[0];
  h[3] = key->w[1];
  h[4] = st->n_nontemporal;
  h[5] = st->n_merged;
  h[6] = size;
  h[7] = kdc_hash64(obj, size, 0);
}

bool rt_jit_cache_get(const char *dir, const rt_jit_key *key, void **out_file,
                      const void **out_obj, size_t *out_size, rt_jit_stats *out_stats) {
  char *path = entry_path(dir, key, ".kdcobj");
  void *data = NULL;
  size_t n = 0;
  kdc_status st = kdc_file_read_all(path, &data, &n);
  free(path);
  if (st) {  /* no entry yet, or unreadable: compile */
    kdc_status_free(st);
    return false;
  }
  const size_t hb = HEADER_WORDS * sizeof(uint64_t);
  uint64_t h[HEADER_WORDS], want[HEADER_WORDS];
  if (n < hb) goto bad;
  memcpy(h, data, hb);
  if (h[6] != n - hb) goto bad;
  rt_jit_stats stats = {.n_nontemporal = h[4], .n_merged = h[5]};
  header(want, key, &stats, (const char *)data + hb, n - hb);
  if (memcmp(h, want, sizeof h) != 0) goto bad;
  *out_file = data;
  *out_obj = (const char *)data + hb;
  *out_size = n - hb;
  *out_stats = stats;
  return true;
bad:
  free(data);
  return false;
}

int rt_jit_cache_lock(const char *dir, const rt_jit_key *key) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) return -1;
  char *path = entry_path(dir, key, ".lock");
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  free(path);
  if (fd < 0) return -1;
  int r;
  while ((r = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {}
  if (r != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void rt_jit_cache_unlock(int lock) {
  if (lock >= 0) close(lock);  /* releases the flock */
}

void rt_jit_cache_put(const char *dir, const rt_jit_key *key, const void *obj, size_t size,
                      const rt_jit_stats *stats) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) return;  /* no cache, no error */
  const size_t hb = HEADER_WORDS * sizeof(uint64_t);
  uint64_t h[HEADER_WORDS];
  header(h, key, stats, obj, size);
  char *buf = kdc_xmalloc(hb + size);
  memcpy(buf, h, hb);
  memcpy(buf + hb, obj, size);
  char *path = entry_path(dir, key, ".kdcobj");
  kdc_status_free(kdc_file_write_atomic(path, buf, hb + size));  /* unwritable: no cache */
  free(path);
  free(buf);
}
