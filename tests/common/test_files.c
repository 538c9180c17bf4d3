/*
 * test_files.c: kdc_file_read_all, kdc_file_map and atomic output: commit
 * replaces, abort leaves nothing behind, and an interrupted write leaves an
 * older file intact.
 */
#include "test_util.h"

#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>

#include "kdc/arena.h"

static void test_read_all(void **state TU_UNUSED) {
  const char *p = tu_path("r.txt");
  tu_write(p, "hello", 5);
  void *data;
  size_t n;
  TU_OK(kdc_file_read_all(p, &data, &n));
  assert_int_equal(n, 5);
  assert_memory_equal(data, "hello", 5);
  assert_int_equal(((char *)data)[5], 0);     /* NUL after the data */
  assert_int_equal((uintptr_t)data % 64, 0);  /* aligned */
  free(data);
  tu_write(p, "", 0);
  TU_OK(kdc_file_read_all(p, &data, &n));
  assert_int_equal(n, 0);
  free(data);
  /* Larger than any first guess of a pipe reader. */
  size_t big = 200000;
  char *buf = malloc(big);
  for (size_t i = 0; i < big; i++) buf[i] = (char)(i * 31);
  tu_write(p, buf, big);
  TU_OK(kdc_file_read_all(p, &data, &n));
  assert_int_equal(n, big);
  assert_memory_equal(data, buf, big);
  free(data);
  free(buf);
}

static void test_read_errors(void **state TU_UNUSED) {
  void *data = (void *)1;
  size_t n = 1;
  const char *missing = tu_path("missing.bin");
  TU_ERR(kdc_file_read_all(missing, &data, &n), KDC_IO_ERROR, missing,
         "No such file or directory");
  assert_null(data);
  TU_ERR(kdc_file_read_all(tu_tmpdir(), &data, &n), KDC_IO_ERROR, tu_tmpdir(), "directory");
  kdc_file_map m;
  TU_ERR(kdc_file_map_open(missing, &m), KDC_IO_ERROR, missing, "No such file");
}

static void test_map(void **state TU_UNUSED) {
  const char *p = tu_path("m.bin");
  tu_write(p, "0123456789", 10);
  kdc_file_map m;
  TU_OK(kdc_file_map_open(p, &m));
  assert_true(m.mapped);
  assert_int_equal(m.size, 10);
  assert_memory_equal(m.data, "0123456789", 10);
  kdc_file_map_close(&m);
  tu_write(p, "", 0);  /* empty: cannot be mapped, read instead */
  TU_OK(kdc_file_map_open(p, &m));
  assert_false(m.mapped);
  assert_int_equal(m.size, 0);
  kdc_file_map_close(&m);
  kdc_file_map_copy("abc", 3, &m);
  assert_memory_equal(m.data, "abc", 3);
  kdc_file_map_close(&m);
}

/* The file at |p| holds exactly the |n| bytes |text|. */
static void expect_file(const char *p, const char *text, size_t n) {
  void *data;
  size_t got;
  TU_OK(kdc_file_read_all(p, &data, &got));
  assert_int_equal(got, n);
  assert_memory_equal(data, text, n);
  free(data);
}

static void test_atomic_commit(void **state TU_UNUSED) {
  int before = tu_dir_entries();
  const char *p = tu_path("out.bin");
  TU_OK(kdc_file_write_atomic(p, "first", 5));
  TU_OK(kdc_file_write_atomic(p, "second!", 7));
  expect_file(p, "second!", 7);
  assert_int_equal(tu_dir_entries(), before + 1);  /* no temp files left */
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  mode_t mask = umask(0);
  umask(mask);
  assert_int_equal(sb.st_mode & 0777, 0666 & ~mask);
  unlink(p);
}

static void test_atomic_stream_and_temp_name(void **state TU_UNUSED) {
  const char *p = tu_path("stream.txt");
  kdc_atomic_file *f;
  TU_OK(kdc_atomic_file_open(p, &f));
  const char *tmp = kdc_atomic_file_temp_path(f);
  assert_non_null(strstr(tmp, "stream.txt.tmp."));
  assert_int_equal(access(tmp, F_OK), 0);
  assert_int_not_equal(access(p, F_OK), 0);  /* nothing at the final path yet */
  fprintf(kdc_atomic_file_stream(f), "x=%d\n", 42);
  TU_OK(kdc_atomic_file_write(f, "end\n", 4));
  TU_OK(kdc_atomic_file_commit(f));
  void *data;
  size_t n;
  TU_OK(kdc_file_read_all(p, &data, &n));
  assert_int_equal(n, 9);
  assert_memory_equal(data, "x=42\nend\n", 9);
  free(data);
  unlink(p);
}

static void test_atomic_abort_leaves_nothing(void **state TU_UNUSED) {
  int before = tu_dir_entries();
  const char *p = tu_path("aborted.bin");
  kdc_atomic_file *f;
  TU_OK(kdc_atomic_file_open(p, &f));
  TU_OK(kdc_atomic_file_write(f, "partial", 7));
  kdc_atomic_file_abort(f);
  assert_int_not_equal(access(p, F_OK), 0);
  assert_int_equal(tu_dir_entries(), before);
  kdc_atomic_file_abort(NULL);  /* harmless */
}

/* A writer that fails midway (simulated by aborting after half the data)
 * leaves the previous output byte for byte as it was. */
static void test_atomic_failure_keeps_old_file(void **state TU_UNUSED) {
  const char *p = tu_path("keep.bin");
  TU_OK(kdc_file_write_atomic(p, "old contents", 12));
  int before = tu_dir_entries();
  kdc_atomic_file *f;
  TU_OK(kdc_atomic_file_open(p, &f));
  char big[100000];
  memset(big, 'n', sizeof big);
  TU_OK(kdc_atomic_file_write(f, big, sizeof big / 2));
  kdc_atomic_file_abort(f);
  void *data;
  size_t n;
  TU_OK(kdc_file_read_all(p, &data, &n));
  assert_int_equal(n, 12);
  assert_memory_equal(data, "old contents", 12);
  free(data);
  assert_int_equal(tu_dir_entries(), before);
  unlink(p);
}

static void test_atomic_open_error(void **state TU_UNUSED) {
  const char *p = tu_path("no_such_dir/out.bin");
  kdc_atomic_file *f = (kdc_atomic_file *)1;
  TU_ERR(kdc_atomic_file_open(p, &f), KDC_IO_ERROR, p, "No such file or directory");
  assert_null(f);
  TU_ERR(kdc_file_write_atomic(p, "x", 1), KDC_IO_ERROR, p);
}

/* A directory (or FIFO) as the final path is refused at open: nothing is
 * created and the directory stays. */
static void test_atomic_open_not_regular(void **state TU_UNUSED) {
  const char *p = tu_path("adir");
  assert_int_equal(mkdir(p, 0755), 0);
  int before = tu_dir_entries();
  kdc_atomic_file *f;
  TU_ERR(kdc_atomic_file_open(p, &f), KDC_IO_ERROR, p, "is a directory");
  const char *fifo = tu_path("afifo");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  TU_ERR(kdc_atomic_file_open(fifo, &f), KDC_IO_ERROR, fifo, "is a FIFO");
  assert_int_equal(tu_dir_entries(), before + 1);
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  rmdir(p);
  unlink(fifo);
}

/* Commit fails when the rename fails (the final path became a directory
 * after open): the temp file goes too. */
static void test_atomic_commit_error(void **state TU_UNUSED) {
  const char *p = tu_path("late_dir");
  int before = tu_dir_entries();
  kdc_atomic_file *f;
  TU_OK(kdc_atomic_file_open(p, &f));
  TU_OK(kdc_atomic_file_write(f, "x", 1));
  assert_int_equal(mkdir(p, 0755), 0);
  TU_ERR(kdc_atomic_file_commit(f), KDC_IO_ERROR, p, "rename");
  assert_int_equal(tu_dir_entries(), before + 1);
  rmdir(p);
}

/* The output set: declared outputs appear only at end(true), all of them;
 * end(false) leaves nothing; an undeclared path commits at once; the same
 * path twice and an output equal to an input are errors naming both flags. */
static void test_output_set(void **state TU_UNUSED) {
  char a[512], b[512], in[512], other[512];
  snprintf(a, sizeof a, "%s", tu_path("set_a.bin"));
  snprintf(b, sizeof b, "%s", tu_path("set_b.bin"));
  snprintf(in, sizeof in, "%s", tu_path("set_in.bin"));
  snprintf(other, sizeof other, "%s", tu_path("set_other.bin"));
  tu_write(in, "input", 5);
  int before = tu_dir_entries();
  kdc_file_arg outs[] = {{"--first", a}, {"--second", b}}, ins[] = {{"--in", in}};
  for (int keep = 0; keep < 2; keep++) {
    TU_OK(kdc_outputs_begin(outs, 2, ins, 1));
    TU_OK(kdc_file_write_atomic(a, "A1", 2));
    TU_OK(kdc_file_write_atomic(a, "A2", 2));  /* written twice: the newer one is held */
    TU_OK(kdc_file_write_atomic(b, "B", 1));
    TU_OK(kdc_file_write_atomic(other, "O", 1));  /* not declared: in place at once */
    assert_int_equal(access(other, F_OK), 0);
    assert_int_not_equal(access(a, F_OK), 0);
    assert_int_not_equal(access(b, F_OK), 0);
    TU_OK(kdc_outputs_end(keep));
    unlink(other);
    assert_int_equal(access(a, F_OK) == 0, keep);
    assert_int_equal(access(b, F_OK) == 0, keep);
    assert_int_equal(tu_dir_entries(), before + 2 * keep);  /* no temp files */
  }
  expect_file(a, "A2", 2);
  kdc_file_arg same[] = {{"--first", a}, {"--second", a}}, is_in[] = {{"--out", in}};
  TU_ERR(kdc_outputs_begin(same, 2, ins, 1), KDC_INVALID_INPUT, a,
         "--second names the same file as --first");
  TU_ERR(kdc_outputs_begin(is_in, 1, ins, 1), KDC_INVALID_INPUT, in,
         "--out names the same file as --in");
  assert_int_equal(symlink(in, other), 0);  /* the same file by st_dev/st_ino */
  kdc_file_arg via_link[] = {{"--out", other}};
  TU_ERR(kdc_outputs_begin(via_link, 1, ins, 1), KDC_INVALID_INPUT, other,
         "--out names the same file as --in");
  TU_OK(kdc_outputs_end(false));  /* nothing active: harmless */
  unlink(other);
  unlink(a);
  unlink(b);
  unlink(in);
}

/* Inputs: a FIFO is refused without blocking, a directory too; a procfs
 * file (st_size 0) is read, not "0 bytes"; the size limit is checked. */
static void test_read_inputs(void **state TU_UNUSED) {
  const char *fifo = tu_path("in.fifo");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  void *data = NULL;
  size_t n;
  TU_ERR(kdc_file_read_all(fifo, &data, &n), KDC_IO_ERROR, fifo, "is a FIFO");
  kdc_file_map m;
  TU_ERR(kdc_file_map_open(fifo, &m), KDC_IO_ERROR, fifo, "is a FIFO");  /* plan, safetensors */
  kdc_npy_array a;
  TU_ERR(kdc_npy_read(fifo, &a), KDC_IO_ERROR, fifo, "is a FIFO");
  TU_ERR(kdc_npy_read(tu_tmpdir(), &a), KDC_IO_ERROR, tu_tmpdir(), "is a directory");
  unlink(fifo);
  TU_OK(kdc_file_read_all("/proc/self/status", &data, &n));
  assert_true(n > 0 && strstr(data, "Pid:"));
  free(data);
  TU_ERR(kdc_file_read_max("/proc/self/status", 8, "a test file", &data, &n), KDC_INVALID_INPUT,
         "/proc/self/status", "over the 8-byte limit of a test file");
  const char *p = tu_path("big.txt");
  tu_write(p, "0123456789", 10);
  TU_ERR(kdc_file_read_max(p, 9, "a test file", &data, &n), KDC_INVALID_INPUT, p,
         "10 bytes: over the 9-byte limit");
  TU_OK(kdc_file_read_max(p, 10, "a test file", &data, &n));
  free(data);
  unlink(p);
}

/* A signal from outside (SIGTERM, SIGINT) while a child holds an open temp
 * file and a completed one held by its output set: the child dies of the
 * signal and neither temp file is left.  (exit() runs the same unlinking
 * from an atexit handler; a forked cmocka child cannot exit() here: the
 * test's own atexit cleanup would empty the directory.) */
static void test_signal_removes_temps(void **state TU_UNUSED) {
  const int how[] = {SIGTERM, SIGINT};
  for (int k = 0; k < 2; k++) {
    int before = tu_dir_entries();
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      char held[512], open_one[512];
      snprintf(held, sizeof held, "%s", tu_path("sig_held.bin"));
      snprintf(open_one, sizeof open_one, "%s", tu_path("sig_open.bin"));
      kdc_file_arg outs[] = {{"--held", held}};
      kdc_atomic_file *f;
      if (kdc_outputs_begin(outs, 1, NULL, 0) || kdc_file_write_atomic(held, "H", 1) ||
          kdc_atomic_file_open(open_one, &f) || kdc_atomic_file_write(f, "O", 1))
        _exit(9);
      fflush(kdc_atomic_file_stream(f));
      if (write(fds[1], "r", 1) != 1) _exit(9);
      for (;;) pause();
    }
    close(fds[1]);
    char c;
    assert_int_equal(read(fds[0], &c, 1), 1);
    close(fds[0]);
    assert_int_equal(tu_dir_entries(), before + 2);  /* both temp files exist */
    kill(pid, how[k]);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFSIGNALED(ws));
    assert_int_equal(WTERMSIG(ws), how[k]);
    assert_int_equal(tu_dir_entries(), before);
  }
}

/* Memory exhausted in a checked allocator: one line and exit status 3 (it
 * was an abort, 134).  Not under ASan, whose allocator reports instead. */
static void test_out_of_memory_exits_3(void **state TU_UNUSED) {
#if defined(__SANITIZE_ADDRESS__)
  skip();
#else
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    tu_dir[0] = 0;  /* exit() must not run the parent's temp-dir cleanup */
    volatile size_t huge = SIZE_MAX / 2;  /* more than any address space */
    void *p = kdc_xmalloc(huge);
    free(p);
    _exit(0);
  }
  close(fds[1]);
  char buf[256] = {0};
  ssize_t got = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 3);
  assert_true(got > 0);
  assert_non_null(strstr(buf, "kdc: error: out of memory: cannot allocate"));
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_all),
      cmocka_unit_test(test_read_errors),
      cmocka_unit_test(test_map),
      cmocka_unit_test(test_atomic_commit),
      cmocka_unit_test(test_atomic_stream_and_temp_name),
      cmocka_unit_test(test_atomic_abort_leaves_nothing),
      cmocka_unit_test(test_atomic_failure_keeps_old_file),
      cmocka_unit_test(test_atomic_open_error),
      cmocka_unit_test(test_atomic_open_not_regular),
      cmocka_unit_test(test_atomic_commit_error),
      cmocka_unit_test(test_output_set),
      cmocka_unit_test(test_read_inputs),
      cmocka_unit_test(test_signal_removes_temps),
      cmocka_unit_test(test_out_of_memory_exits_3),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
