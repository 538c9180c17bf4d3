/*
 * files.c: whole-file reads, atomic writes, and a command's output set.
 *
 * Inputs are regular files only: a FIFO, directory, socket or device is an
 * error naming what it is, found by fstat() on a descriptor opened with
 * O_NONBLOCK (so a FIFO never blocks the open).  A reader with a size limit
 * checks it against st_size before allocating; files whose st_size is 0
 * (procfs) are read up to the limit.
 *
 * Invariant of every kdc output: nothing half-written ever sits at the final
 * path.  Outputs go to "<path>.tmp.XXXXXX" in the same directory (rename()
 * is atomic only within one file system), are flushed and fsync'ed, then
 * renamed over the final path; on any error the temp file is unlinked and an
 * older file at the final path is left as it was.  The final path must be a
 * regular file or a new name; a symlink is written through to its target
 * (the temp file goes into the target's directory), a character device
 * (/dev/null, a terminal) is written directly, and anything else (directory,
 * FIFO, socket, block device) is an error.  Live temp files are listed in a
 * fixed registry (128 slots, each with its own copy of the path) that a
 * SIGINT/SIGTERM/SIGHUP handler and an atexit handler unlink.
 *
 * An output set (kdc_outputs_begin/end) makes a command's outputs
 * all-or-nothing: the commits of the declared outputs are held back (the
 * temp files complete and fsync'ed) and renamed together at the end, or all
 * removed.
 */
#include "common/io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kdc/arena.h"

/* ---- file types ---- */

const char *kdc_file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return "a regular file";
  case S_IFDIR: return "a directory";
  case S_IFIFO: return "a FIFO (named pipe)";
  case S_IFSOCK: return "a socket";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  case S_IFLNK: return "a symbolic link";
  default: return "not a regular file";
  }
}

kdc_status kdc_file_open_input(const char *path, int *out_fd, uint64_t *out_size) {
  *out_fd = -1;
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return KDC_ERR(KDC_IO_ERROR, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return KDC_ERR(KDC_IO_ERROR, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return KDC_ERR(KDC_IO_ERROR, "%s: cannot read: is %s (kdc reads regular files only)", path,
                   kdc_file_type_name(sb.st_mode));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *out_fd = fd;
  *out_size = (uint64_t)sb.st_size;
  return NULL;
}

static kdc_status too_large(const char *path, uint64_t size, size_t max, const char *what) {
  return KDC_ERR(KDC_INVALID_INPUT, "%s: %s%llu bytes: over the %zu-byte limit of %s "
                 "(docs/ARCHITECTURE.md, \"Files in and out\")", path, size ? "" : "over ",
                 (unsigned long long)size, max, what);
}

kdc_status kdc_file_read_max(const char *path, size_t max, const char *what, void **out_data,
                             size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  int fd;
  uint64_t st_size;
  KDC_RETURN_IF_ERROR(kdc_file_open_input(path, &fd, &st_size));
  if (st_size > max) {
    close(fd);
    return too_large(path, st_size, max, what);
  }
  /* A real size is read in one go; a zero st_size (procfs) grows the block
   * up to |max|. */
  size_t cap = st_size ? (size_t)st_size + 1 : max < 65535 ? max + 1 : 65536;
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
      if (size + 1 > max) {
        free(data);
        close(fd);
        return too_large(path, 0, max, what);
      }
      cap = cap > max / 2 ? max + 1 : cap * 2;
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

kdc_status kdc_file_read_all(const char *path, void **out_data, size_t *out_size) {
  return kdc_file_read_max(path, SIZE_MAX - 64, "a file", out_data, out_size);
}

kdc_status kdc_file_map_open(const char *path, kdc_file_map *out) {
  memset(out, 0, sizeof *out);
  int fd;
  uint64_t size;
  KDC_RETURN_IF_ERROR(kdc_file_open_input(path, &fd, &size));
  if (size > 0 && size <= SIZE_MAX) {
    void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      close(fd);
      out->data = p;
      out->size = (size_t)size;
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
  if (!p) kdc_out_of_memory(size + 1);
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

/* ---- the registry of live temp files (signals, exit) ---- */

/* Each slot owns a copy of its path, so the handler never reads memory that
 * another thread frees: state 0 free, 1 being filled, 2 live. */
enum { MAX_LIVE = 128, LIVE_PATH = 4096 + 32 };
static struct {
  _Atomic int state;
  pid_t pid;  /* the process that made it: a forked child leaves its parent's alone */
  char path[LIVE_PATH];
} live[MAX_LIVE];
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void unlink_live(void) {
  pid_t me = getpid();
  for (int i = 0; i < MAX_LIVE; i++)
    if (atomic_load(&live[i].state) == 2 && live[i].pid == me) unlink(live[i].path);
}

/* Async-signal-safe: unlink(), signal() and raise() only. */
static void on_signal(int sig) {
  int saved = errno;
  unlink_live();
  signal(sig, SIG_DFL);
  raise(sig);  /* delivered when this handler returns: the default action */
  errno = saved;
}

static void init_live(void) {
  const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old;
    if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(sigs[i], &sa, NULL);
  }
  atexit(unlink_live);
}

/* Signals are blocked while a temp file exists but is not registered. */
static void block_signals(sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, old);
}

static void live_add(const char *path) {
  size_t n = strlen(path);
  if (n >= LIVE_PATH) return;  /* only abort() and a failed commit remove it */
  for (int i = 0; i < MAX_LIVE; i++) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&live[i].state, &expect, 1)) continue;
    memcpy(live[i].path, path, n + 1);
    live[i].pid = getpid();
    atomic_store(&live[i].state, 2);
    return;
  }
  /* full (128 live at once): likewise */
}

static void live_remove(const char *path) {
  for (int i = 0; i < MAX_LIVE; i++) {
    if (atomic_load(&live[i].state) != 2 || strcmp(live[i].path, path) != 0) continue;
    int expect = 2;
    if (atomic_compare_exchange_strong(&live[i].state, &expect, 0)) return;
  }
}

/* ---- output targets ---- */

/* Where an output named |path| is written: *|out| is the path to create or
 * replace (|path|, or the end of its chain of symlinks) and *|device| says
 * it is a character device, written in place.  Anything but a regular file,
 * a new name or a character device is an error. */
static kdc_status resolve_output(const char *path, const char *flag, char **out, bool *device) {
  const char *sep = flag ? ": " : "";
  flag = flag ? flag : "";
  *out = NULL;
  *device = false;
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (S_ISCHR(sb.st_mode)) {
      *device = true;
      *out = kdc_xstrdup(path);
      return NULL;
    }
    if (!S_ISREG(sb.st_mode))
      return KDC_ERR(KDC_IO_ERROR, "%s: %s%scannot write: is %s (outputs are regular files, or "
                     "a character device such as /dev/null)", path, flag, sep,
                     kdc_file_type_name(sb.st_mode));
  } else if (errno != ENOENT) {
    return KDC_ERR(KDC_IO_ERROR, "%s: %s%scannot write: %s", path, flag, sep, strerror(errno));
  }
  /* A regular file or a new name (maybe behind a dangling symlink): follow
   * the links by hand, so the temp file goes next to the file replaced. */
  char *cur = kdc_xstrdup(path);
  for (int hops = 0; hops < 40; hops++) {
    if (lstat(cur, &sb) != 0 || !S_ISLNK(sb.st_mode)) {
      *out = cur;
      return NULL;
    }
    char target[PATH_MAX];
    ssize_t n = readlink(cur, target, sizeof target - 1);
    if (n < 0) {
      kdc_status st = KDC_ERR(KDC_IO_ERROR, "%s: %s%scannot read the symbolic link %s: %s", path,
                              flag, sep, cur, strerror(errno));
      free(cur);
      return st;
    }
    target[n] = 0;
    const char *slash = strrchr(cur, '/');
    char *next;
    if (target[0] == '/' || !slash) {
      next = kdc_xstrdup(target);
    } else {
      size_t d = (size_t)(slash - cur) + 1;
      next = kdc_xmalloc(d + (size_t)n + 1);
      memcpy(next, cur, d);
      memcpy(next + d, target, (size_t)n + 1);
    }
    free(cur);
    cur = next;
  }
  free(cur);
  return KDC_ERR(KDC_IO_ERROR, "%s: %s%scannot write: too many levels of symbolic links", path,
                 flag, sep);
}

/* ---- the output set ---- */

typedef struct held_file {
  char *tmp_path, *path;
} held_file;

static struct {
  bool active;
  char **paths;        /* the declared outputs, as given */
  size_t n_paths;
  held_file *held;     /* committed, waiting for kdc_outputs_end */
  size_t n_held, cap_held;
} outs;

static bool declared(const char *path) {
  if (!outs.active) return false;
  for (size_t i = 0; i < outs.n_paths; i++)
    if (!strcmp(outs.paths[i], path)) return true;
  return false;
}

/* |a| and |b| name the same file: the same path, or the same st_dev/st_ino
 * (|a| and |b| followed through symlinks). */
static bool same_file(const char *a, const char *b) {
  if (!strcmp(a, b)) return true;
  struct stat sa, sb;
  if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  /* a new output: compare where it would be created */
  char *ra = NULL, *rb = NULL;
  bool da, db, same = false;
  kdc_status e1 = resolve_output(a, NULL, &ra, &da), e2 = resolve_output(b, NULL, &rb, &db);
  if (!e1 && !e2) same = !strcmp(ra, rb);
  kdc_status_free(e1);
  kdc_status_free(e2);
  free(ra);
  free(rb);
  return same;
}

kdc_status kdc_outputs_begin(const kdc_file_arg *out, size_t n_out, const kdc_file_arg *in,
                             size_t n_in) {
  KDC_ASSERT(!outs.active);
  /* an input that is a FIFO or a device fails now, before any work (a
   * missing one is left to its reader) */
  for (size_t j = 0; j < n_in; j++) {
    struct stat sb;
    if (in[j].path && stat(in[j].path, &sb) == 0 && !S_ISREG(sb.st_mode))
      return KDC_ERR(KDC_IO_ERROR, "%s: cannot read: is %s (kdc reads regular files only)",
                     in[j].path, kdc_file_type_name(sb.st_mode));
  }
  for (size_t i = 0; i < n_out; i++) {
    if (!out[i].path) continue;
    char *final;
    bool device;
    KDC_RETURN_IF_ERROR(resolve_output(out[i].path, out[i].flag, &final, &device));
    free(final);
    if (device) continue;  /* /dev/null twice, or as an input, destroys nothing */
    for (size_t j = 0; j < n_in; j++)
      if (in[j].path && same_file(out[i].path, in[j].path))
        return KDC_ERR(KDC_INVALID_INPUT, "%s: %s names the same file as %s %s: it would be "
                       "overwritten", out[i].path, out[i].flag, in[j].flag, in[j].path);
    for (size_t j = 0; j < i; j++)
      if (out[j].path && same_file(out[i].path, out[j].path))
        return KDC_ERR(KDC_INVALID_INPUT, "%s: %s names the same file as %s %s", out[i].path,
                       out[i].flag, out[j].flag, out[j].path);
  }
  outs.active = true;
  outs.paths = kdc_xcalloc(n_out + 1, sizeof *outs.paths);
  outs.n_paths = 0;
  for (size_t i = 0; i < n_out; i++)
    if (out[i].path) outs.paths[outs.n_paths++] = kdc_xstrdup(out[i].path);
  return NULL;
}

static void hold(char *tmp_path, char *path) {
  for (size_t i = 0; i < outs.n_held; i++) {
    if (strcmp(outs.held[i].path, path) != 0) continue;
    /* written twice: the newer file replaces the held one */
    unlink(outs.held[i].tmp_path);
    live_remove(outs.held[i].tmp_path);
    free(outs.held[i].tmp_path);
    free(path);
    outs.held[i].tmp_path = tmp_path;
    return;
  }
  KDC_GROW(outs.held, outs.cap_held, outs.n_held + 1);
  outs.held[outs.n_held++] = (held_file){tmp_path, path};
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

kdc_status kdc_outputs_end(bool keep) {
  kdc_status st = NULL;
  for (size_t i = 0; i < outs.n_held; i++) {
    held_file *h = &outs.held[i];
    if (keep && !st && rename(h->tmp_path, h->path) != 0)
      st = KDC_ERR(KDC_IO_ERROR, "%s: cannot rename the temporary file: %s", h->path,
                   strerror(errno));
    else if (keep && !st)
      sync_dir(h->path);
    else
      unlink(h->tmp_path);
    live_remove(h->tmp_path);
    free(h->tmp_path);
    free(h->path);
  }
  for (size_t i = 0; i < outs.n_paths; i++) free(outs.paths[i]);
  free(outs.paths);
  free(outs.held);
  memset(&outs, 0, sizeof outs);
  return st;
}

/* ---- atomic output ---- */

struct kdc_atomic_file {
  FILE *fp;
  char *path;      /* the path as given (messages) */
  char *final;     /* where it lands: |path| or the end of its symlinks */
  char *tmp_path;  /* "<final>.tmp.XXXXXX"; NULL for a device written in place */
  bool held;       /* declared in the output set: commit holds the rename */
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

static void destroy(kdc_atomic_file *f) {
  free(f->tmp_path);
  free(f->final);
  free(f->path);
  free(f);
}

/* The test hook of tests/e2e (the interrupted write): with KDC_TEST_SIGNAL_IN_WRITE
 * set, a temp file's first commit sends this process SIGINT. */
static void test_signal_hook(void) {
  if (getenv("KDC_TEST_SIGNAL_IN_WRITE")) raise(SIGINT);
}

kdc_status kdc_atomic_file_open(const char *path, kdc_atomic_file **out) {
  *out = NULL;
  pthread_once(&file_mode_once, init_file_mode);
  pthread_once(&live_once, init_live);
  char *final;
  bool device;
  KDC_RETURN_IF_ERROR(resolve_output(path, NULL, &final, &device));
  kdc_atomic_file *f = kdc_xcalloc(1, sizeof *f);
  f->path = kdc_xstrdup(path);
  f->final = final;
  int fd;
  if (device) {
    fd = open(final, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      kdc_status st = KDC_ERR(KDC_IO_ERROR, "%s: cannot open: %s", path, strerror(errno));
      destroy(f);
      return st;
    }
  } else {
    f->held = declared(path);
    size_t n = strlen(final);
    f->tmp_path = kdc_xmalloc(n + sizeof ".tmp.XXXXXX");
    memcpy(f->tmp_path, final, n);
    memcpy(f->tmp_path + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    sigset_t old;
    block_signals(&old);
    fd = mkstemp(f->tmp_path);
    int e = errno;
    if (fd >= 0) live_add(f->tmp_path);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (fd < 0) {
      kdc_status st = KDC_ERR(KDC_IO_ERROR, "%s: cannot create a temporary file: %s", path,
                              strerror(e));
      destroy(f);
      return st;
    }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    /* An existing output keeps its mode; a new one gets the umask's. */
    struct stat sb;
    mode_t mode = stat(final, &sb) == 0 ? (sb.st_mode & 07777) : file_mode;
    (void)fchmod(fd, mode);
  }
  f->fp = fdopen(fd, "wb");
  if (!f->fp) {
    int e = errno;
    close(fd);
    if (f->tmp_path) {
      unlink(f->tmp_path);
      live_remove(f->tmp_path);
    }
    destroy(f);
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

const char *kdc_atomic_file_temp_path(const kdc_atomic_file *f) {
  return f->tmp_path ? f->tmp_path : f->final;
}

void kdc_atomic_file_abort(kdc_atomic_file *f) {
  if (!f) return;
  if (f->fp) fclose(f->fp);
  if (f->tmp_path) {
    unlink(f->tmp_path);
    live_remove(f->tmp_path);
  }
  destroy(f);
}

kdc_status kdc_atomic_file_commit(kdc_atomic_file *f) {
  const char *what = NULL;
  int e = 0;
  if (ferror(f->fp)) {
    what = "write error", e = EIO;
  } else if (fflush(f->fp) != 0) {
    what = "write error", e = errno;
  } else if (f->tmp_path && fsync(fileno(f->fp)) != 0 && errno != EINVAL) {
    what = "cannot sync", e = errno;
  }
  if (fclose(f->fp) != 0 && !what) what = "cannot close", e = errno;
  f->fp = NULL;
  if (!what && f->tmp_path) test_signal_hook();
  if (!what && f->tmp_path && f->held) {
    hold(f->tmp_path, f->final);  /* renamed by kdc_outputs_end */
    f->tmp_path = f->final = NULL;
    destroy(f);
    return NULL;
  }
  if (!what && f->tmp_path && rename(f->tmp_path, f->final) != 0)
    what = "cannot rename the temporary file", e = errno;
  if (what) {
    kdc_status st = KDC_ERR(KDC_IO_ERROR, "%s: %s: %s", f->path, what, strerror(e));
    if (f->tmp_path) {
      unlink(f->tmp_path);
      live_remove(f->tmp_path);
    }
    destroy(f);
    return st;
  }
  if (f->tmp_path) {
    live_remove(f->tmp_path);
    sync_dir(f->final);
  }
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
