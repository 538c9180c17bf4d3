/*
 * runtime/jit_cache.c, the compiled-code cache of the CPU JIT: a load from
 * the cache runs the same machine code as a compiled load (bitwise-equal
 * outputs, same JIT statistics); truncated, corrupt and foreign entries are
 * recompiled and overwritten; a directory that cannot be created means no
 * cache and no error; loads racing for one key (threads of one process,
 * as the processes of an mpirun job do) all succeed, one of them compiles
 * and the others wait for its lock and read its entry, leaving one valid
 * entry and no temporary files; writers racing below the lock never show a
 * reader a torn entry; the key changes with the code and with the
 * compilation's description.  The JIT compiles a plan as a fixed list of
 * partitions (hot kernels with O3, the rest with O2 without unrolling) on
 * any number of threads: the objects (the cache entry) are the same bytes
 * for 1 and 4 threads, and the outputs equal the interpreter's.
 */
#include <dirent.h>
#include <pthread.h>

#include "../codegen/cg_test.h"
#include "common/io.h"

static char *plan_path, *plan2_path;

/* Fuses, plans and compiles |m| (destroyed) into the temp dir's |name|. */
static char *write_plan(kdc_module *m, const char *name) {
  assert_null(kdc_pass_fuse(m, NULL));
  assert_null(kdc_pass_plan_memory(m, NULL));
  char *path = strdup(cgt_path(name));
  assert_null(kdc_codegen_cpu_plan(m, NULL, path));
  kdc_ir_module_destroy(m);
  return path;
}

/* tanh(x @ k) and exp(x) * 2: two kernels and a GEMM.  |scale| changes the
 * second kernel's constant, so the two plans have different code. */
static char *build_plan(const char *name, float scale) {
  kdc_module *m = kdc_ir_module_create("cache");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xd[2] = {16, 24}, wd[2] = {24, 32};
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, xd), wt = kdc_type_make(KDC_DTYPE_F32, 2, wd);
  float w[24 * 32];
  cgt_fill(&wt, w, 5, false);
  kdc_ir_module_add_weight(m, "d/kernel", &wt, w);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_value_id k = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d/kernel", &wt);
  kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_TANH, kdc_ir_matmul(f, x, k)), "y");
  kdc_value_id e = kdc_ir_unary(f, KDC_OP_EXP, x);
  kdc_ir_add_result(f, kdc_ir_binary_scalar(f, KDC_OP_MUL, e, scale), "z");
  return write_plan(m, name);
}

typedef struct result {
  float y[16 * 32], z[16 * 24];
  bool cached;
  size_t merged, nontemporal;
} result;

/* Loads |path| with cache directory |dir| ("" = none) and runs it. */
static kdc_status load_run(const char *path, const char *dir, result *r) {
  kdc_rt_options ro = {.cache_dir = dir};
  kdc_rt_plan *p;
  KDC_RETURN_IF_ERROR(kdc_rt_plan_load_with(path, &ro, &p));
  float x[16 * 24];
  for (int i = 0; i < 16 * 24; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  const void *in[1] = {x};
  void *out[2] = {r->y, r->z};
  kdc_status st = kdc_rt_plan_run(p, in, out);
  r->cached = rt_jit_from_cache(p->jit);
  r->merged = rt_jit_merged_functions(p->jit);
  r->nontemporal = rt_jit_nontemporal_stores(p->jit);
  kdc_rt_plan_release(p);
  return st;
}

static void assert_same(const result *a, const result *b) {
  assert_memory_equal(a->y, b->y, sizeof a->y);
  assert_memory_equal(a->z, b->z, sizeof a->z);
  assert_int_equal(a->merged, b->merged);
  assert_int_equal(a->nontemporal, b->nontemporal);
}

/* The entries in |dir| (every file but the empty lock files, temporary
 * ones included); *|out_one| receives the path of the last one. */
static int count_files(const char *dir, char *out_one, size_t n) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int count = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
      continue;
    size_t len = strlen(e->d_name);
    if (len > 5 && strcmp(e->d_name + len - 5, ".lock") == 0) continue;
    count++;
    if (out_one) snprintf(out_one, n, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  return count;
}

static const char *fresh_dir(const char *name) {
  const char *dir = cgt_path(name);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
  return dir;
}

static result ref;  /* the plan loaded without a cache */

static void test_cached_equals_compiled(void **state) {
  (void)state;
  const char *dir = fresh_dir("c1");
  result a, b;
  assert_null(load_run(plan_path, dir, &a));  /* creates the directory */
  assert_false(a.cached);
  assert_int_equal(count_files(dir, NULL, 0), 1);
  assert_null(load_run(plan_path, dir, &b));
  assert_true(b.cached);
  assert_same(&ref, &a);
  assert_same(&ref, &b);
  /* The environment variable is the default; an empty option turns it off. */
  assert_int_equal(setenv("KDC_CACHE_DIR", dir, 1), 0);
  assert_null(load_run(plan_path, NULL, &b));
  assert_true(b.cached);
  assert_null(load_run(plan_path, "", &b));
  assert_false(b.cached);
  assert_int_equal(setenv("KDC_CACHE_DIR", "", 1), 0);
  assert_null(load_run(plan_path, NULL, &b));
  assert_false(b.cached);
  assert_same(&ref, &b);
}

/* Replaces the cache's only entry with |data| of |n| bytes. */
static void overwrite_entry(const char *entry, const void *data, size_t n) {
  assert_null(kdc_file_write_atomic(entry, data, n));
}

static void test_bad_entries(void **state) {
  (void)state;
  const char *dir = fresh_dir("c2");
  char entry[700], other[700];
  result r;
  assert_null(load_run(plan2_path, dir, &r));  /* another plan's entry: foreign bytes */
  assert_int_equal(count_files(dir, other, sizeof other), 1);
  void *foreign;
  size_t nf;
  assert_null(kdc_file_read_all(other, &foreign, &nf));
  assert_int_equal(remove(other), 0);
  assert_null(load_run(plan_path, dir, &r));
  assert_int_equal(count_files(dir, entry, sizeof entry), 1);
  void *good;
  size_t n;
  assert_null(kdc_file_read_all(entry, &good, &n));
  unsigned char *bad = malloc(n);
  enum { TRUNC_HALF, TRUNC_HEADER, EMPTY, FLIP_OBJECT, FLIP_KEY, FLIP_SIZE, FOREIGN, N_CASES };
  for (int c = 0; c < N_CASES; c++) {
    memcpy(bad, good, n);
    size_t len = n;
    if (c == TRUNC_HALF) len = n / 2;
    if (c == TRUNC_HEADER) len = 20;
    if (c == EMPTY) len = 0;
    if (c == FLIP_OBJECT) bad[n - 100] ^= 0x10;  /* inside the object's code */
    if (c == FLIP_KEY) bad[17] ^= 1;
    if (c == FLIP_SIZE) bad[48] ^= 1;
    if (c == FOREIGN) overwrite_entry(entry, foreign, nf);
    else overwrite_entry(entry, bad, len);
    assert_null(load_run(plan_path, dir, &r));
    if (r.cached) fail_msg("case %d: a bad entry was trusted", c);
    assert_same(&ref, &r);
    void *now;  /* recompiled and overwritten with the good entry */
    size_t nn;
    assert_null(kdc_file_read_all(entry, &now, &nn));
    assert_int_equal(nn, n);
    assert_memory_equal(now, good, n);
    free(now);
    assert_null(load_run(plan_path, dir, &r));
    assert_true(r.cached);
  }
  free(bad);
  free(good);
  free(foreign);
}

static void test_unusable_dir(void **state) {
  (void)state;
  char dir[700];  /* under a regular file: cannot be created, as root too */
  snprintf(dir, sizeof dir, "%s/sub", plan_path);
  result r;
  assert_null(load_run(plan_path, dir, &r));
  assert_false(r.cached);
  assert_same(&ref, &r);
  assert_null(load_run(plan_path, "/nonexistent-kdc-dir/a/b", &r));
  assert_false(r.cached);
  assert_same(&ref, &r);
}

enum { N_RACERS = 4 };
typedef struct racer {
  const char *dir;
  pthread_barrier_t *go;
  result r;
  kdc_status st;
} racer;

static void *race(void *arg) {
  racer *rc = arg;
  pthread_barrier_wait(rc->go);
  rc->st = load_run(plan_path, rc->dir, &rc->r);
  return NULL;
}

static void test_concurrent_writers(void **state) {
  (void)state;
  const char *dir = fresh_dir("c3");
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, N_RACERS);
  racer rc[N_RACERS];
  pthread_t t[N_RACERS];
  for (int i = 0; i < N_RACERS; i++) {
    rc[i] = (racer){.dir = dir, .go = &go};
    assert_int_equal(pthread_create(&t[i], NULL, race, &rc[i]), 0);
  }
  int compiled = 0;
  for (int i = 0; i < N_RACERS; i++) {
    pthread_join(t[i], NULL);
    assert_null(rc[i].st);
    assert_same(&ref, &rc[i].r);
    compiled += !rc[i].r.cached;
  }
  pthread_barrier_destroy(&go);
  assert_int_equal(compiled, 1);  /* the others waited for its lock, then read its entry */
  assert_int_equal(count_files(dir, NULL, 0), 1);  /* no temporary file left */
  result r;
  assert_null(load_run(plan_path, dir, &r));
  assert_true(r.cached);
  assert_same(&ref, &r);
}

/* Writers of one key racing a reader, below the lock (as when flock is
 * unavailable): every read finds no entry or the whole one. */
enum { N_PUTS = 20 };
typedef struct putter {
  const char *dir;
  const rt_jit_key *key;
  const unsigned char *obj;
  size_t size;
  int torn;  /* reader: entries that were neither absent nor whole */
} putter;

static void *put_many(void *arg) {
  putter *p = arg;
  rt_jit_stats st = {3, 4};
  for (int i = 0; i < N_PUTS; i++) rt_jit_cache_put(p->dir, p->key, p->obj, p->size, &st);
  return NULL;
}

static void *get_many(void *arg) {
  putter *p = arg;
  for (int i = 0; i < 4 * N_PUTS; i++) {
    void *file;
    const void *obj;
    size_t n;
    rt_jit_stats st;
    if (!rt_jit_cache_get(p->dir, p->key, &file, &obj, &n, &st)) continue;
    p->torn += n != p->size || memcmp(obj, p->obj, n) != 0 || st.n_merged != 4;
    free(file);
  }
  return NULL;
}

static void test_racing_puts(void **state) {
  (void)state;
  const char *dir = fresh_dir("c4");
  enum { SIZE = 1 << 20 };
  unsigned char *obj = malloc(SIZE);
  for (size_t i = 0; i < SIZE; i++) obj[i] = (unsigned char)(i * 131 + (i >> 9));
  rt_jit_key key = {{1, 2}};
  putter p = {.dir = dir, .key = &key, .obj = obj, .size = SIZE};
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, i ? put_many : get_many, &p), 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  assert_int_equal(p.torn, 0);
  assert_int_equal(count_files(dir, NULL, 0), 1);
  get_many(&p);
  assert_int_equal(p.torn, 0);
  free(obj);
}

/* A hot kernel (exp over 1024 x 1024: 2^20 element-ops) and |n| distinct
 * small ones (tanh(h) * c_i + i, each a result), so that both pipelines
 * and several partitions are used. */
static void parts_graph(kdc_func *f, int n) {
  int64_t bd[2] = {1024, 1024}, sd[2] = {8, 40};
  kdc_type bt = kdc_type_make(KDC_DTYPE_F32, 2, bd), st = kdc_type_make(KDC_DTYPE_F32, 2, sd);
  kdc_value_id big = kdc_ir_parameter(f, KDC_PARAM_INPUT, "big", &bt);
  kdc_value_id h = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &st);
  kdc_ir_add_result(f, kdc_ir_unary(f, KDC_OP_EXP, big), "e");
  for (int i = 0; i < n; i++) {
    h = kdc_ir_binary_scalar(f, KDC_OP_MUL, kdc_ir_unary(f, KDC_OP_TANH, h), 1.0 + 0.125 * i);
    h = kdc_ir_binary_scalar(f, KDC_OP_ADD, h, (double)i);
    char rn[16];
    snprintf(rn, sizeof rn, "r%d", i);
    kdc_ir_add_result(f, h, rn);  /* each step its own kernel */
  }
}

static char *build_parts_plan(const char *name) {
  kdc_module *m = kdc_ir_module_create("parts");
  parts_graph(kdc_ir_func_create(m, "predict"), 24);
  return write_plan(m, name);
}

/* Loads |path| on |threads| threads with cache |dir| (compiling into it);
 * the entry's bytes in *|entry|, the JIT's times in *|t|. */
static void load_parts(const char *path, int threads, const char *dir, void **entry, size_t *n,
                       rt_jit_times *t) {
  kdc_rt_options ro = {.cache_dir = dir, .n_threads = threads};
  kdc_rt_plan *p;
  assert_null(kdc_rt_plan_load_with(path, &ro, &p));
  assert_false(rt_jit_from_cache(p->jit));
  *t = *rt_jit_get_times(p->jit);
  kdc_rt_plan_release(p);
  char file[700];
  assert_int_equal(count_files(dir, file, sizeof file), 1);
  assert_null(kdc_file_read_all(file, entry, n));
}

static void test_threads_same_objects(void **state) {
  (void)state;
  char *path = build_parts_plan("parts.plan");
  void *e1, *e4;
  size_t n1, n4;
  rt_jit_times t1, t4;
  load_parts(path, 1, fresh_dir("t1"), &e1, &n1, &t1);
  load_parts(path, 4, fresh_dir("t4"), &e4, &n4, &t4);
  fprintf(stderr, "partitions %zu (hot %zu), %zu functions\n", t1.parts, t1.hot_parts,
          t1.functions);
  assert_true(t1.parts >= 2);
  assert_int_equal(t1.hot_parts, 1);
  assert_int_equal(t4.parts, t1.parts);
  assert_int_equal(n1, n4);
  assert_memory_equal(e1, e4, n1);
  free(e1);
  free(e4);
  free(path);
}

/* The outputs of a partitioned plan compiled on 3 threads equal the
 * interpreter's (cg_test.h's checker; the hot kernel's exp is kdc's own). */
static void test_parts_results(void **state) {
  (void)state;
  kdc_module *m = kdc_ir_module_create("parts2");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  parts_graph(f, 6);
  cgt_opts o = {.threads = 3};
  cgt_check(m, f, &o);
  kdc_ir_module_destroy(m);
}

static void test_key(void **state) {
  (void)state;
  unsigned char code[64] = {1, 2, 3};
  rt_jit_key k0, k1;
  rt_jit_cache_key(code, sizeof code, "cpu=a", &k0);
  rt_jit_cache_key(code, sizeof code, "cpu=a", &k1);
  assert_memory_equal(&k0, &k1, sizeof k0);
  rt_jit_cache_key(code, sizeof code, "cpu=b", &k1);
  assert_memory_not_equal(&k0, &k1, sizeof k0);
  code[63] ^= 1;
  rt_jit_cache_key(code, sizeof code, "cpu=a", &k1);
  assert_memory_not_equal(&k0, &k1, sizeof k0);
  rt_jit_cache_key(code, sizeof code - 1, "cpu=a", &k1);
  assert_memory_not_equal(&k0, &k1, sizeof k0);
}

static int setup(void **state) {
  (void)state;
  plan_path = build_plan("a.plan", 2.0f);
  plan2_path = build_plan("b.plan", 3.0f);
  assert_null(load_run(plan_path, "", &ref));
  assert_false(ref.cached);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_key),
      cmocka_unit_test(test_cached_equals_compiled),
      cmocka_unit_test(test_bad_entries),
      cmocka_unit_test(test_unusable_dir),
      cmocka_unit_test(test_concurrent_writers),
      cmocka_unit_test(test_racing_puts),
      cmocka_unit_test(test_threads_same_objects),
      cmocka_unit_test(test_parts_results),
  };
  int rc = cmocka_run_group_tests(tests, setup, NULL);
  free(plan_path);
  free(plan2_path);
  return rc;
}
