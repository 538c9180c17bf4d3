/*
 * runtime/plan_load.c robustness and introspection.  The container tests
 * (tests/common) cover the header and checksum; here every plan is
 * re-packed with a valid checksum so the corruption reaches the section
 * parsers: truncated and bit-flipped PROGRAM and WEIGHTS payloads,
 * inconsistent references, bad bitcode.  Each must be a KDC_INVALID_INPUT
 * naming the file and section, never a crash (run under ASan/UBSan).
 */
#include "../codegen/cg_test.h"

static char *plan_path;

/* A dense layer + softmax-ish tail: kernels, a GEMM, a weight, a copy. */
static void build_plan(void) {
  kdc_module *m = kdc_ir_module_create("tiny");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  int64_t xd[2] = {3, 5}, wd[2] = {5, 4};
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, xd), wt = kdc_type_make(KDC_DTYPE_F32, 2, wd);
  float w[20];
  cgt_fill(&wt, w, 5, false);
  kdc_ir_module_add_weight(m, "d/kernel", &wt, w);
  kdc_value_id x = kdc_ir_parameter(f, KDC_PARAM_INPUT, "x", &xt);
  kdc_value_id k = kdc_ir_parameter(f, KDC_PARAM_WEIGHT, "d/kernel", &wt);
  kdc_value_id y = kdc_ir_unary(f, KDC_OP_TANH, kdc_ir_matmul(f, x, k));
  kdc_ir_add_result(f, y, "y");
  kdc_ir_add_result(f, x, "x_copy");
  assert_null(kdc_pass_fuse(m, NULL));
  assert_null(kdc_pass_plan_memory(m, NULL));
  plan_path = strdup(cgt_path("tiny.plan"));  /* cgt_path buffers rotate */
  assert_null(kdc_codegen_cpu_plan(m, NULL, plan_path));
  kdc_ir_module_destroy(m);
}

/* Re-packs the plan with section |kind| replaced by |data| (NULL: dropped). */
static const char *repack(uint32_t kind, const void *data, size_t size) {
  kdc_plan_file *pf;
  assert_null(kdc_plan_file_open(plan_path, &pf));
  kdc_plan_writer *w = kdc_plan_writer_create();
  for (size_t i = 0; i < kdc_plan_file_count(pf); i++) {
    kdc_plan_section_info si = kdc_plan_file_info(pf, i);
    if (si.kind != kind) assert_null(kdc_plan_writer_add(w, si.kind, si.name, si.data, si.size));
    else if (data) assert_null(kdc_plan_writer_add(w, si.kind, si.name, data, size));
  }
  const char *out = cgt_path("bad.plan");
  assert_null(kdc_plan_writer_write(w, out));
  kdc_plan_writer_destroy(w);
  kdc_plan_file_close(pf);
  return out;
}

static void *section_copy(uint32_t kind, size_t *size) {
  kdc_plan_file *pf;
  const void *d;
  assert_null(kdc_plan_file_open(plan_path, &pf));
  assert_true(kdc_plan_file_find(pf, kind, &d, size));
  void *c = malloc(*size + 1);
  memcpy(c, d, *size);
  kdc_plan_file_close(pf);
  return c;
}

/* Loads |path|; expects failure mentioning |what| (may be NULL). */
static void expect_bad(const char *path, const char *what) {
  kdc_rt_plan *p = NULL;
  kdc_status st = kdc_rt_plan_load(path, &p);
  if (!st) fail_msg("plan loaded, expected an error about %s", what ? what : "?");
  assert_null(p);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  assert_non_null(strstr(kdc_status_message(st), path));
  if (what && !strstr(kdc_status_message(st), what))
    fail_msg("message \"%s\" lacks \"%s\"", kdc_status_message(st), what);
  kdc_status_free(st);
}

static void test_load_run_describe(void **state) {
  (void)state;
  kdc_rt_plan *p;
  assert_null(kdc_rt_plan_load(plan_path, &p));
  assert_int_equal(kdc_rt_plan_func_count(p), 1);
  assert_int_equal(kdc_rt_plan_find_func(p, "predict"), 0);
  assert_int_equal(kdc_rt_plan_find_func(p, "nope"), -1);
  assert_int_equal(kdc_rt_plan_input_count(p, 0), 1);
  assert_string_equal(kdc_rt_plan_input(p, 0, 0)->name, "x");
  assert_int_equal(kdc_rt_plan_input(p, 0, 0)->dims[1], 5);
  assert_int_equal(kdc_rt_plan_output_count(p, 0), 2);
  assert_string_equal(kdc_rt_plan_output(p, 0, 1)->name, "x_copy");
  assert_null(kdc_rt_plan_input(p, 0, 1));
  float x[15], y[12], xc[15];
  for (int i = 0; i < 15; i++) x[i] = (float)i / 7;
  const void *in[1] = {x};
  void *out[2] = {y, xc};
  assert_null(kdc_rt_plan_run(p, in, out));
  assert_memory_equal(x, xc, sizeof x);
  void *missing[2] = {y, NULL};
  kdc_status st = kdc_rt_plan_run(p, in, missing);
  assert_non_null(st);
  kdc_status_free(st);
  char *text = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&text, &len);
  kdc_rt_plan_describe(p, o);
  fclose(o);
  static const char *const want[] = {"arena:", "gemm", "kernel kdc_kernel_0", "copy in:x",
                                     "d/kernel f32[5,4]", "func @predict",
                                     "\"model\": \"tiny\""};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(text, want[i])) fail_msg("describe lacks \"%s\":\n%s", want[i], text);
  free(text);
  kdc_rt_plan_retain(p);
  kdc_rt_plan_release(p);
  kdc_rt_plan_release(p);
}

static void test_truncated_program(void **state) {
  (void)state;
  size_t size;
  uint8_t *prog = section_copy(KDC_PLAN_SECTION_PROGRAM, &size);
  for (size_t n = 0; n < size; n++)
    expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, prog, n), "program");
  free(prog);
}

static void test_truncated_weights(void **state) {
  (void)state;
  size_t size;
  uint8_t *w = section_copy(KDC_PLAN_SECTION_WEIGHTS, &size);
  for (size_t n = 0; n < size; n += (n < 200 ? 1 : 16))
    expect_bad(repack(KDC_PLAN_SECTION_WEIGHTS, w, n), "weights");
  free(w);
}

/* Every byte of the program flipped in turn: an error or a plan that
 * loads, never a crash.  Plans that load are described, not run (a flip in
 * a kernel's argument sizes is a consistent lie the loader cannot see). */
static void test_flipped_program(void **state) {
  (void)state;
  size_t size;
  uint8_t *prog = section_copy(KDC_PLAN_SECTION_PROGRAM, &size);
  int loaded = 0;
  for (size_t i = 0; i < size; i++)
    for (int bit = 0; bit < 8; bit += 3) {
      prog[i] ^= (uint8_t)(1u << bit);
      kdc_rt_plan *p = NULL;
      kdc_status st = kdc_rt_plan_load(repack(KDC_PLAN_SECTION_PROGRAM, prog, size), &p);
      if (st) {
        if (kdc_status_code(st) != KDC_INVALID_INPUT)
          fail_msg("byte %zu bit %d: %s", i, bit, kdc_status_message(st));
        kdc_status_free(st);
      } else {
        FILE *devnull = fopen("/dev/null", "w");
        kdc_rt_plan_describe(p, devnull);
        fclose(devnull);
        kdc_rt_plan_release(p);
        loaded++;
      }
      prog[i] ^= (uint8_t)(1u << bit);
    }
  print_message("%d of %zu flipped programs still load\n", loaded, 3 * size);
  free(prog);
}

/* Hand-made programs with one inconsistency each. */
static void test_inconsistent_program(void **state) {
  (void)state;
  kdc_prog_kernel kern = {"kdc_kernel_0", 1};
  kdc_prog_tensor in = {
      .name = "x", .dtype = KDC_IO_DTYPE_F32, .rank = 1, .dims = {4}, .bytes = 16};
  kdc_prog_loc args[1] = {{KDC_PROG_BUF_ARENA, 0, 0, 16}};
  kdc_prog_step step = {.kind = KDC_STEP_KERNEL, .kernel = {0, 4, 1, 1, args, 1}};
  kdc_prog_func fn = {"predict", 1, 1, 1, &in, &in, &step, false};
  kdc_program p = {.arena_bytes = 64, .n_kernels = 1, .n_funcs = 1, .kernels = &kern, .funcs = &fn};
  kdc_buf b;
  /* 1: offset beyond the arena */
  args[0].offset = 60;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "beyond its size 64");
  kdc_buf_free(&b);
  args[0].offset = 0;
  /* 2: a kernel that does not exist */
  step.kernel.kernel = 3;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "kernel 3 does not exist");
  kdc_buf_free(&b);
  step.kernel.kernel = 0;
  /* 3: an output buffer that does not exist */
  args[0] = (kdc_prog_loc){KDC_PROG_BUF_OUTPUT, 2, 0, 16};
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "output buffer 2 does not exist");
  kdc_buf_free(&b);
  /* 4: a kernel writing an input */
  args[0] = (kdc_prog_loc){KDC_PROG_BUF_INPUT, 0, 0, 16};
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "read-only");
  kdc_buf_free(&b);
  args[0] = (kdc_prog_loc){KDC_PROG_BUF_ARENA, 0, 0, 16};
  /* 4b: no output, or more outputs than arguments */
  for (uint32_t n_out = 0; n_out <= 2; n_out += 2) {
    char want[64];
    snprintf(want, sizeof want, "%u outputs of 1 arguments", n_out);
    step.kernel.n_out = n_out;
    kdc_buf_init(&b);
    kdc_prog_encode(&p, &b);
    expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), want);
    kdc_buf_free(&b);
  }
  step.kernel.n_out = 1;
  /* 4c: an extent past its output (a crafted plan: the kernel would run
   * outside its buffers; the threading estimate overflowed int64 first) */
  step.kernel.extent = (int64_t)1 << 62;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "exceeds its outputs' 16 bytes");
  kdc_buf_free(&b);
  step.kernel.extent = 4;
  /* 5: a kernel name the code does not define */
  kern.name = "kdc_kernel_77";
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "kdc_kernel_77 is not defined");
  kdc_buf_free(&b);
  kern.name = "kdc_kernel_0";
  /* 6: a GEMM whose matrices exceed their buffers */
  kdc_prog_step g = {.kind = KDC_STEP_GEMM};
  g.gemm = (kdc_prog_gemm_step){1, 2, 2, 2, false, false, 2, 2, 2, 4, 4, 4,
                                {KDC_PROG_BUF_INPUT, 0, 0, 16}, {KDC_PROG_BUF_INPUT, 0, 0, 16},
                                {KDC_PROG_BUF_ARENA, 0, 0, 12}, KDC_IO_DTYPE_F32, false,
                                1, 0, 0, 0};
  fn.steps = &g;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "exceed their buffers");
  kdc_buf_free(&b);
  /* 6a: a two-level batch: 3 inner entries do not divide 4; 2 x 2 entries
   * of 1x1 matrices fit a 16-byte C two strides of 2 apart, not of 3 */
  g.gemm = (kdc_prog_gemm_step){4, 1, 1, 1, false, false, 1, 1, 1, 2, 2, 2,
                                {KDC_PROG_BUF_INPUT, 0, 0, 16}, {KDC_PROG_BUF_INPUT, 0, 0, 16},
                                {KDC_PROG_BUF_ARENA, 0, 0, 16}, KDC_IO_DTYPE_F32, false,
                                3, 1, 1, 1};
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "inner batch 3 does not divide");
  kdc_buf_free(&b);
  g.gemm.batch_inner = 2, g.gemm.stride_c = 3;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "exceed their buffers");
  kdc_buf_free(&b);
  g.gemm = (kdc_prog_gemm_step){1, 2, 2, 2, false, false, 2, 2, 2, 4, 4, 4,
                                {KDC_PROG_BUF_INPUT, 0, 0, 16}, {KDC_PROG_BUF_INPUT, 0, 0, 16},
                                {KDC_PROG_BUF_ARENA, 0, 0, 12}, KDC_IO_DTYPE_F32, false,
                                1, 0, 0, 0};
  /* 6b: a GEMM of integers; 6c: the same sizes in bf16 fit their buffers
   * (2 bytes an element) but a bf16 GEMM runs on CUDA only */
  g.gemm.dtype = KDC_IO_DTYPE_I32;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "is not f32, bf16 or f16");
  kdc_buf_free(&b);
  g.gemm.dtype = KDC_IO_DTYPE_BF16;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  {
    kdc_rt_plan *pl = NULL;
    const char *path = repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size);
    kdc_status st = kdc_rt_plan_load(path, &pl);
    assert_non_null(st);
    assert_null(pl);
    assert_int_equal(kdc_status_code(st), KDC_UNSUPPORTED);
    assert_non_null(strstr(kdc_status_message(st), "a bf16 GEMM runs on CUDA only"));
    kdc_status_free(st);
  }
  kdc_buf_free(&b);
  /* 7: another payload version */
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  b.data[0] = 99;
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "version 99");
  kdc_buf_free(&b);
}

/* Hand-made SPMD programs: a valid one (an all_reduce on a 2x4 mesh, run
 * through the global API), then one inconsistency each in the mesh, the
 * shardings and the COLLECTIVE step. */
static void test_spmd_program(void **state) {
  (void)state;
  kdc_prog_kernel kern = {"kdc_kernel_0", 1};
  kdc_prog_tensor x = {.name = "x", .dtype = KDC_IO_DTYPE_F32, .rank = 1, .dims = {8}, .bytes = 32};
  x.sharding.naxes[0] = 1;  /* {a}: local f32[4] */
  kdc_prog_tensor y = x;
  y.name = "y";
  kdc_prog_step step = {.kind = KDC_STEP_COLLECTIVE};
  kdc_prog_coll_step *c = &step.coll;
  *c = (kdc_prog_coll_step){.kind = KDC_COLL_ALL_REDUCE, .dtype = KDC_IO_DTYPE_F32, .naxes = 1,
                            .axes = {1}, .rank = 1, .in_dims = {4}, .out_dims = {4},
                            .src = {KDC_PROG_BUF_INPUT, 0, 0, 16},
                            .dst = {KDC_PROG_BUF_OUTPUT, 0, 0, 16}};
  kdc_prog_func fn = {"predict", 1, 1, 1, &x, &y, &step, false};
  kdc_program p = {.n_kernels = 1, .n_funcs = 1, .kernels = &kern, .funcs = &fn};
  p.mesh = (kdc_prog_mesh){2, {"a", "b"}, {2, 4}, 8};
  kdc_buf b;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  const char *good = repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size);
  kdc_buf_free(&b);
  kdc_rt_plan *plan;
  assert_null(kdc_rt_plan_load(good, &plan));
  assert_int_equal(kdc_rt_plan_device_count(plan), 8);
  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
  const void *ins[1] = {in};
  void *outs[1] = {out};
  assert_null(kdc_rt_plan_run(plan, ins, outs));
  for (int i = 0; i < 8; i++) assert_true(out[i] == 4 * in[i]);  /* 4 replicas over b */
  kdc_rt_plan_release(plan);
  /* 1: an axis not in the mesh */
  c->axes[0] = 5;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "not in the mesh");
  kdc_buf_free(&b);
  c->axes[0] = 1;
  /* 2: shapes that do not match the kind */
  c->kind = KDC_COLL_ALL_GATHER;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "shapes do not match");
  kdc_buf_free(&b);
  c->kind = KDC_COLL_ALL_REDUCE;
  /* 3: source and destination overlap */
  c->src = (kdc_prog_loc){KDC_PROG_BUF_ARENA, 0, 0, 16};
  c->dst = (kdc_prog_loc){KDC_PROG_BUF_ARENA, 0, 8, 16};
  p.arena_bytes = 64;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "overlap");
  kdc_buf_free(&b);
  c->dst.offset = 16;
  /* 4: a sum of bools */
  c->dtype = KDC_IO_DTYPE_BOOL;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "of bool");
  kdc_buf_free(&b);
  c->dtype = KDC_IO_DTYPE_F32;
  /* 5: a sharding the shape does not divide */
  x.dims[0] = 7;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "does not fit");
  kdc_buf_free(&b);
  x.dims[0] = 8;
  /* 6: too many devices */
  p.mesh.sizes[1] = 4000;
  kdc_buf_init(&b);
  kdc_prog_encode(&p, &b);
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), "more than 4096 devices");
  kdc_buf_free(&b);
}

/* A scan plan (ir/scan.c, LOOP step): the running sum s' = s * k + x_t over
 * 4 steps of f32[3], y_t = s'. */
static char *build_loop_plan(void) {
  kdc_module *m = kdc_ir_module_create("loop");
  kdc_func *f = kdc_ir_func_create(m, "predict");
  kdc_func *b = kdc_ir_func_create(m, "body");
  kdc_type st = kdc_type_make(KDC_DTYPE_F32, 1, (int64_t[]){3});
  kdc_type xt = kdc_type_make(KDC_DTYPE_F32, 2, (int64_t[]){4, 3});
  kdc_value_id s = kdc_ir_parameter(b, KDC_PARAM_INPUT, "s", &st);
  kdc_value_id x = kdc_ir_parameter(b, KDC_PARAM_INPUT, "x", &st);
  kdc_value_id k = kdc_ir_parameter(b, KDC_PARAM_INPUT, "k", &st);
  kdc_value_id sn = kdc_ir_binary(b, KDC_OP_ADD, kdc_ir_binary(b, KDC_OP_MUL, s, k), x);
  kdc_ir_add_result(b, sn, "s");
  kdc_ir_add_result(b, sn, "y");
  kdc_value_id xs = kdc_ir_parameter(f, KDC_PARAM_INPUT, "xs", &xt);
  kdc_value_id kk = kdc_ir_parameter(f, KDC_PARAM_INPUT, "k", &st);
  kdc_value_id s0 = kdc_ir_splat(f, KDC_DTYPE_F32, 1, st.dims, 1.0);
  kdc_ir_add_result(f, kdc_ir_scan(f, b, 4, 1, 1, 3, (kdc_value_id[]){s0, xs, kk}), "ys");
  assert_null(kdc_ir_take_error(f));
  assert_null(kdc_pass_fuse(m, NULL));
  assert_null(kdc_pass_plan_memory(m, NULL));
  char *path = strdup(cgt_path("loop.plan"));
  assert_null(kdc_codegen_cpu_plan(m, NULL, path));
  kdc_ir_module_destroy(m);
  return path;
}

/* The LOOP step: a run against hand-computed sums, every program byte
 * flipped (an error or a plan that loads, never a crash), and one
 * inconsistency each in a decoded, re-encoded loop. */
static void test_loop_program(void **state) {
  (void)state;
  char *saved = plan_path;
  plan_path = build_loop_plan();
  kdc_rt_plan *p;
  assert_null(kdc_rt_plan_load(plan_path, &p));
  float xs[12] = {1, 2, 3, 0, 1, 0, 2, 2, 2, -1, 0, 1}, k[3] = {0.5f, 1, 2}, ys[12];
  const void *ins[2] = {xs, k};
  void *outs[1] = {ys};
  assert_null(kdc_rt_plan_run(p, ins, outs));
  float sum[3] = {1, 1, 1};
  for (int t = 0; t < 4; t++)
    for (int i = 0; i < 3; i++) {
      sum[i] = sum[i] * k[i] + xs[t * 3 + i];
      assert_true(ys[t * 3 + i] == sum[i]);
    }
  kdc_rt_plan_release(p);
  test_flipped_program(NULL);
  /* inconsistencies */
  assert_null(kdc_rt_plan_load(plan_path, &p));
  kdc_prog_loop_step *l = NULL;
  for (uint32_t s = 0; s < p->prog.funcs[0].n_steps; s++)
    if (p->prog.funcs[0].steps[s].kind == KDC_STEP_LOOP) l = &p->prog.funcs[0].steps[s].loop;
  assert_non_null(l);
  assert_true(p->prog.funcs[l->body].is_body);
  kdc_buf b;
  for (int c = 0; c < 5; c++) {
    kdc_prog_loop_step keep = *l;
    kdc_prog_loc in0 = l->in[0], in1 = l->in[1];
    int64_t stride1 = l->in_stride[1];
    const char *want = NULL;
    switch (c) {
    case 0: l->body = 0, want = "not a scan body"; break;
    case 1: l->body = 9, want = "not a scan body"; break;
    case 2: l->in_stride[1] = 1 << 20, want = "beyond its size"; break;
    case 3: l->in[0] = l->out[0], want = "carry 0"; break;  /* state over its next value */
    default: l->in[1].bytes = 8, want = "loop input 1 is 8 bytes"; break;
    }
    kdc_buf_init(&b);
    kdc_prog_encode(&p->prog, &b);
    expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, b.data, b.size), want);
    kdc_buf_free(&b);
    *l = keep;
    l->in[0] = in0, l->in[1] = in1, l->in_stride[1] = stride1;
  }
  kdc_rt_plan_release(p);
  free(plan_path);
  plan_path = saved;
}

static void test_bad_code(void **state) {
  (void)state;
  size_t size;
  uint8_t *code = section_copy(KDC_PLAN_SECTION_CODE, &size);
  expect_bad(repack(KDC_PLAN_SECTION_CODE, code, size / 2), "section code");
  memset(code + 40, 0x5a, size - 80 > 64 ? 64 : size - 80);
  expect_bad(repack(KDC_PLAN_SECTION_CODE, code, size), "section code");
  expect_bad(repack(KDC_PLAN_SECTION_CODE, "not bitcode", 11), "LLVM rejected");
  expect_bad(repack(KDC_PLAN_SECTION_CODE, NULL, 0), "no code section");
  expect_bad(repack(KDC_PLAN_SECTION_PROGRAM, NULL, 0), "program");
  free(code);
}

static char *describe_text(kdc_rt_plan *p) {
  char *text = NULL;
  size_t len = 0;
  FILE *o = open_memstream(&text, &len);
  kdc_rt_plan_describe(p, o);
  fclose(o);
  return text;
}

/* describe_only (`kdc inspect`): no JIT; the same description as a full
 * load; every run fails naming the file; the code is not read, so a plan
 * whose bitcode is garbage still describes. */
static void test_describe_only(void **state) {
  (void)state;
  kdc_rt_plan *full, *p;
  kdc_rt_options ro = {.describe_only = 1};
  assert_null(kdc_rt_plan_load(plan_path, &full));
  assert_null(kdc_rt_plan_load_with(plan_path, &ro, &p));
  assert_non_null(full->jit);
  assert_null(p->jit);
  char *a = describe_text(full), *b = describe_text(p);
  assert_string_equal(a, b);
  free(a), free(b);
  float x[15] = {0}, y[12], xc[15];
  const void *in[1] = {x};
  void *out[2] = {y, xc};
  kdc_status st = kdc_rt_plan_run(p, in, out);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  assert_non_null(strstr(kdc_status_message(st), plan_path));
  assert_non_null(strstr(kdc_status_message(st), "described only"));
  kdc_status_free(st);
  kdc_rt_plan_release(p);
  kdc_rt_plan_release(full);
  const char *bad = repack(KDC_PLAN_SECTION_CODE, "not bitcode", 11);
  assert_null(kdc_rt_plan_load_with(bad, &ro, &p));
  kdc_rt_plan_release(p);
  expect_bad(bad, "LLVM rejected");
}

static int setup(void **state) {
  (void)state;
  build_plan();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load_run_describe), cmocka_unit_test(test_truncated_program),
      cmocka_unit_test(test_truncated_weights), cmocka_unit_test(test_flipped_program),
      cmocka_unit_test(test_inconsistent_program), cmocka_unit_test(test_spmd_program),
      cmocka_unit_test(test_bad_code), cmocka_unit_test(test_loop_program),
      cmocka_unit_test(test_describe_only),
  };
  int rc = cmocka_run_group_tests(tests, setup, NULL);
  free(plan_path);
  return rc;
}
