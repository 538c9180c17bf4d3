/*
 * files.c: whole-file reads and atomic writes.
 *
 * Invariant of every kdc output: nothing half-written ever sits at the final
 * path.  Outputs go to "<path>.tmp.XXXXXX" in the same directory (rename()
 * is atomic only within one file system), are flushed and fsync'ed, then
 * renamed over the final path; on any error the temp file is unlinked and an
 * older file at the final path is left as it was.
 */
#include "common/io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kdc/arena.h"

kdc_status kdc_file_read_all(const char *path, void **out_data, size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return KDC_ERR(KDC_IO_ERROR, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return KDC_ERR(KDC_IO_ERROR, "%s: cannot stat: %s", path, strerror(e));
  }
  if (S_ISDIR(sb.st_mode)) {
    close(fd);
    return KDC_ERR(KDC_IO_ERROR, "%s: cannot read: is a directory", path);
  }
  /* Regular files are read in one go; pipes and /dev files grow the block. */
  size_t cap = S_ISREG(sb.st_mode) ? (size_t)sb.st_size + 1 : 65536;
  size_t size = 0;
  uint8_t *data = NULL;
  for (;;) {
    if (data && size + 1 == cap) {
      /* Full: probe for EOF before growing (the common case for files). */
      uint8_t c;
      ssize_t got = read(fd, &c, 1);
      if (got == 0) break;
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        int e = errno;
        free(data);
        close(fd);
        return KDC_ERR(KDC_IO_ERROR, "%s: read error at byte %zu: %s", path, size,
                       strerror(e));
      }
      cap *= 2;
      uint8_t *grown = aligned_alloc(64, (cap + 63) / 64 * 64);
      if (grown) memcpy(grown, data, size);
      free(data);
      data = grown;
      if (data) data[size++] = c;
    } else if (!data) {
      data = aligned_alloc(64, (cap + 63) / 64 * 64);
    }
    if (!data) {
      close(fd);
      return KDC_ERR(KDC_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", path, cap);
    }
    ssize_t got = read(fd, data + size, cap - 1 - size);
    if (got < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      free(data);
      close(fd);
      return KDC_ERR(KDC_IO_ERROR, "%s: read error at byte %zu: %s", path, size,
                     strerror(e));
    }
    if (got == 0) break;
    size += (size_t)got;
  }
  close(fd);
  data[size] = 0;
  *out_data = data;
  *out_size = size;
  return NULL;
}

kdc_status kdc_file_map_open(const char *path, kdc_file_map *out) {
  memset(out, 0, sizeof *out);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return KDC_ERR(KDC_IO_ERROR, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      close(fd);
      out->data = p;
      out->size = (size_t)sb.st_size;
      out->mapped = true;
      return NULL;
    }
  }
  close(fd);
  void *data;
  KDC_RETURN_IF_ERROR(kdc_file_read_all(path, &data, &out->size));
  out->data = data;
  return NULL;
}

void kdc_file_map_copy(const void *bytes, size_t size, kdc_file_map *out) {
  uint8_t *p = aligned_alloc(64, (size + 1 + 63) / 64 * 64);
  if (!p) kdc_fatal(__FILE__, __LINE__, "out of memory copying %zu bytes", size);
  if (size) memcpy(p, bytes, size);
  p[size] = 0;
  out->data = p;
  out->size = size;
  out->mapped = false;
}

void kdc_file_map_close(kdc_file_map *m) {
  if (m->mapped)
    munmap((void *)m->data, m->size);
  else
    free((void *)m->data);
  memset(m, 0, sizeof *m);
}

/* ---- atomic output ---- */

struct kdc_atomic_file {
  FILE *fp;
  char *path;      /* final path */
  char *tmp_path;  /* "<path>.tmp.XXXXXX" */
};

static mode_t file_mode;  /* 0666 & ~umask, computed once */
static pthread_once_t file_mode_once = PTHREAD_ONCE_INIT;

/* mkstemp creates 0600 files; outputs get the mode open(O_CREAT, 0666)
 * would give.  umask can only be read by setting it, so do that once. */
static void init_file_mode(void) {
  mode_t mask = umask(022);
  umask(mask);
  file_mode = 0666 & ~mask;
}

kdc_status kdc_atomic_file_open(const char *path, kdc_atomic_file **out) {
  *out = NULL;
  pthread_once(&file_mode_once, init_file_mode);
  kdc_atomic_file *f = kdc_xcalloc(1, sizeof *f);
  f->path = kdc_xstrdup(path);
  size_t n = strlen(path);
  f->tmp_path = kdc_xmalloc(n + sizeof ".tmp.XXXXXX");
  memcpy(f->tmp_path, path, n);
  memcpy(f->tmp_path + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
  int fd = mkstemp(f->tmp_path);
  if (fd >= 0) (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    kdc_status st = KDC_ERR(KDC_IO_ERROR, "%s: cannot create a temporary file: %s", path,
                            strerror(e));
    free(f->tmp_path);
    free(f->path);
    free(f);
    return st;
  }
  /* An existing output keeps its mode; a new one gets the umask's. */
  struct stat sb;
  mode_t mode = stat(path, &sb) == 0 ? (sb.st_mode & 07777) : file_mode;
  (void)fchmod(fd, mode);
  f->fp = fdopen(fd, "wb");
  if (!f->fp) {
    int e = errno;
    close(fd);
    unlink(f->tmp_path);
    free(f->tmp_path);
    free(f->path);
    free(f);
    return KDC_ERR(KDC_IO_ERROR, "%s: cannot open a stream: %s", path, strerror(e));
  }
  *out = f;
  return NULL;
}

kdc_status kdc_atomic_file_write(kdc_atomic_file *f, const void *data, size_t n) {
  if (n == 0) return NULL;
  if (fwrite(data, 1, n, f->fp) != n)
    return KDC_ERR(KDC_IO_ERROR, "%s: write error: %s", f->path, strerror(errno));
  return NULL;
}

FILE *kdc_atomic_file_stream(kdc_atomic_file *f) { return f->fp; }

const char *kdc_atomic_file_temp_path(const kdc_atomic_file *f) { return f->tmp_path; }

static void destroy(kdc_atomic_file *f) {
  free(f->tmp_path);
  free(f->path);
  free(f);
}

void kdc_atomic_file_abort(kdc_atomic_file *f) {
  if (!f) return;
  if (f->fp) fclose(f->fp);
  unlink(f->tmp_path);
  destroy(f);
}

/* fsyncs the directory holding |path| so the rename itself is durable.
 * Best effort: some file systems refuse fsync on directories. */
static void sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
  if (!dir) return;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

kdc_status kdc_atomic_file_commit(kdc_atomic_file *f) {
  const char *what = NULL;
  int e = 0;
  if (ferror(f->fp)) {
    what = "write error", e = EIO;
  } else if (fflush(f->fp) != 0) {
    what = "write error", e = errno;
  } else if (fsync(fileno(f->fp)) != 0 && errno != EINVAL) {
    what = "cannot sync", e = errno;
  }
  if (fclose(f->fp) != 0 && !what) what = "cannot close", e = errno;
  f->fp = NULL;
  if (!what && rename(f->tmp_path, f->path) != 0)
    what = "cannot rename the temporary file", e = errno;
  if (what) {
    kdc_status st = KDC_ERR(KDC_IO_ERROR, "%s: %s: %s", f->path, what, strerror(e));
    unlink(f->tmp_path);
    destroy(f);
    return st;
  }
  sync_dir(f->path);
  destroy(f);
  return NULL;
}

kdc_status kdc_file_write_atomic(const char *path, const void *data, size_t n) {
  kdc_atomic_file *f;
  KDC_RETURN_IF_ERROR(kdc_atomic_file_open(path, &f));
  kdc_status st = kdc_atomic_file_write(f, data, n);
  if (st) {
    kdc_atomic_file_abort(f);
    return st;
  }
  return kdc_atomic_file_commit(f);
}
