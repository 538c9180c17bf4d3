/*
 * test_files.c: kdc_file_read_all, kdc_file_map and atomic output: commit
 * replaces, abort leaves nothing behind, and an interrupted write leaves an
 * older file intact.
 */
#include "test_util.h"

#include <sys/stat.h>

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

static void test_atomic_commit(void **state TU_UNUSED) {
  int before = tu_dir_entries();
  const char *p = tu_path("out.bin");
  TU_OK(kdc_file_write_atomic(p, "first", 5));
  TU_OK(kdc_file_write_atomic(p, "second!", 7));
  void *data;
  size_t n;
  TU_OK(kdc_file_read_all(p, &data, &n));
  assert_int_equal(n, 7);
  assert_memory_equal(data, "second!", 7);
  free(data);
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
