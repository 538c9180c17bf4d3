/*
 * codegen/plan_writer.c: kdc_codegen_cpu_plan, the codegen's entry point.
 *
 * Builds one LLVM module for every kernel of every selected function
 * (lower.c), verifies it, and writes plan.bin through the container writer
 * (common/io.h) with these sections, in this order:
 *   metadata  METADATA  JSON: model, target, batch, each function's I/O
 *   program   PROGRAM   the step programs (runtime/program.h)
 *   weights   WEIGHTS   weight and materialised-constant data
 *   code      CODE      LLVM bitcode, target-independent and unoptimised:
 *                       the runtime sets the host triple and CPU features
 *                       and runs the O3 pipeline at load (JIT), so the build
 *                       never probes the host (STYLE anti-pattern 5)
 *   ir        IR_TEXT   the final IR in its canonical text (kdc inspect)
 *   ptx       PTX       with --target cuda: the PTX of every kernel (ptx_wrap.c)
 *   cuda      CUDA      with --target cuda: the launch table (docs/gpu.md)
 * The file appears complete at |out_path| or not at all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/BitWriter.h>

#include "codegen/codegen.h"

static void plan_init(cg_plan *P, const kdc_module *m) {
  memset(P, 0, sizeof *P);
  P->m = m;
  P->ctx = LLVMContextCreate();
  P->mod = LLVMModuleCreateWithNameInContext("kdc_plan", P->ctx);
  P->b = LLVMCreateBuilderInContext(P->ctx);
  P->f32 = LLVMFloatTypeInContext(P->ctx);
  P->i1 = LLVMInt1TypeInContext(P->ctx);
  P->i8 = LLVMInt8TypeInContext(P->ctx);
  P->i16 = LLVMInt16TypeInContext(P->ctx);
  P->half = LLVMHalfTypeInContext(P->ctx);
  P->i32 = LLVMInt32TypeInContext(P->ctx);
  P->i64 = LLVMInt64TypeInContext(P->ctx);
  P->ptr = LLVMPointerTypeInContext(P->ctx, 0);
  P->void_t = LLVMVoidTypeInContext(P->ctx);
  P->a = kdc_arena_create();
}

static void plan_free(cg_plan *P) {
  LLVMDisposeBuilder(P->b);
  LLVMDisposeModule(P->mod);
  LLVMContextDispose(P->ctx);
  kdc_arena_destroy(P->a);
  free(P->prog.kernels);
  free(P->prog.funcs);
  free(P->bodies);
  free(P->w);
  free(P->wdata);
  kdc_strindex_free(&P->w_index);
  free(P->globals);
  free(P->ktype);
  free(P->kform);
  cg_dedup_free(&P->dedup);
}

/* A JSON string literal (names come from the model: escape everything). */
static void put_json_str(FILE *o, const char *s) {
  fputc('"', o);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
    else if (c < 0x20) fprintf(o, "\\u%04x", c);
    else fputc(c, o);
  }
  fputc('"', o);
}

static void put_tensors(FILE *o, const kdc_prog_tensor *t, uint32_t n) {
  fprintf(o, "[");
  for (uint32_t i = 0; i < n; i++) {
    fprintf(o, "%s{\"name\": ", i ? ", " : "");
    put_json_str(o, t[i].name);
    fprintf(o, ", \"dtype\": \"%s\", \"shape\": [", kdc_io_dtype_name(t[i].dtype));
    for (int d = 0; d < t[i].rank; d++)
      fprintf(o, "%s%lld", d ? ", " : "", (long long)t[i].dims[d]);
    fprintf(o, "]}");
  }
  fprintf(o, "]");
}

/* METADATA: one JSON object (docs/plan-format.md, "Sections"). */
static char *metadata_text(const cg_plan *P, const char *auto_layout, size_t *out_len) {
  char *text = NULL;
  FILE *o = open_memstream(&text, out_len);
  if (!o) return NULL;
  const kdc_prog_func *f0 = P->prog.n_funcs ? &P->prog.funcs[0] : NULL;
  long long batch = f0 && f0->n_inputs && f0->inputs[0].rank ? (long long)f0->inputs[0].dims[0] : 0;
  fprintf(o, "{\"model\": ");
  put_json_str(o, P->m->name);
  if (P->cuda_sm) fprintf(o, ", \"target\": \"cuda\", \"sm\": %d", P->cuda_sm);
  else fprintf(o, ", \"target\": \"cpu\"");
  if (P->tf32) fprintf(o, ", \"matmul_precision\": \"tf32\"");
  fprintf(o, ", \"kdc_version\": \"%s\", \"batch\": %lld, \"mesh\": {",
          kdc_plan_kdc_version(), batch);
  for (uint32_t a = 0; a < P->prog.mesh.naxes; a++) {
    fprintf(o, "%s", a ? ", " : "");
    put_json_str(o, P->prog.mesh.names[a]);
    fprintf(o, ": %lld", (long long)P->prog.mesh.sizes[a]);
  }
  fprintf(o, "}, \"functions\": [");
  for (uint32_t i = 0; i < P->prog.n_funcs; i++) {
    const kdc_prog_func *f = &P->prog.funcs[i];
    fprintf(o, "%s\n  {\"name\": ", i ? "," : "");
    put_json_str(o, f->name);
    fprintf(o, ", \"inputs\": ");
    put_tensors(o, f->inputs, f->n_inputs);
    fprintf(o, ", \"outputs\": ");
    put_tensors(o, f->outputs, f->n_outputs);
    fprintf(o, "}");
  }
  fprintf(o, "]");
  if (auto_layout) fprintf(o, ",\n \"auto_layout\": %s", auto_layout);
  fprintf(o, "}\n");
  fclose(o);
  return text;
}

static kdc_status compile(cg_plan *P, const kdc_codegen_options *opt) {
  const kdc_module *m = P->m;
  KDC_RETURN_IF_ERROR(kdc_mesh_check(&m->mesh));
  if (kdc_mesh_devices(&m->mesh) > KDC_PROG_MAX_DEVICES)
    return KDC_ERR(KDC_UNSUPPORTED, "codegen: a mesh of %lld devices (at most %d)",
                   (long long)kdc_mesh_devices(&m->mesh), KDC_PROG_MAX_DEVICES);
  cg_set_mesh(P);
  size_t n = opt && opt->funcs ? opt->n_funcs : m->n_funcs;
  for (size_t pass = 0; pass < 2; pass++) /* count the entries, then lower them */
    for (size_t i = 0; i < n; i++) {
      const kdc_func *f = opt && opt->funcs ? kdc_ir_module_find_func(m, opt->funcs[i]) : m->funcs[i];
      if (!f)
        return KDC_ERR(KDC_INVALID_INPUT, "codegen: module %s has no function \"%s\"",
                       m->name ? m->name : "", opt->funcs[i]);
      if (kdc_ir_func_is_body(m, f)) continue; /* lowered inside its scan's loop */
      if (pass == 0) {
        P->n_entries++;
        continue;
      }
      uint64_t arena;
      KDC_RETURN_IF_ERROR(cg_lower_func(P, f, &arena));
      if (arena > P->prog.arena_bytes) P->prog.arena_bytes = arena;
    }
  for (size_t k = 0; k < P->n_bodies; k++) { /* bodies after the entries */
    KDC_GROW(P->prog.funcs, P->cap_funcs, P->prog.n_funcs + 1);
    P->prog.funcs[P->prog.n_funcs++] = P->bodies[k];
  }
  char *msg = NULL;
  if (LLVMVerifyModule(P->mod, LLVMReturnStatusAction, &msg)) {
    kdc_status st = KDC_ERR(KDC_INTERNAL, "codegen: generated LLVM IR is invalid: %.400s", msg);
    LLVMDisposeMessage(msg);
    return st;
  }
  LLVMDisposeMessage(msg);
  return NULL;
}

static kdc_status write_plan(cg_plan *P, const kdc_codegen_options *opt, const char *path) {
  kdc_plan_writer *w = kdc_plan_writer_create();
  kdc_buf prog, weights, launch;
  kdc_buf_init(&prog);
  kdc_buf_init(&weights);
  kdc_buf_init(&launch);
  char *ptx = NULL;
  size_t ptx_len = 0;
  size_t meta_len = 0;
  char *meta = metadata_text(P, opt ? opt->metadata_auto : NULL, &meta_len);
  kdc_prog_encode(&P->prog, &prog);
  /* the weights go out as table + the initialisers' own buffers, uncopied */
  static const uint8_t zeros[KDC_PLAN_ALIGN];
  uint64_t *data_at = kdc_xcalloc((size_t)P->nw + 1, sizeof *data_at);
  kdc_prog_encode_weights_table(P->w, P->nw, &weights, data_at);
  kdc_plan_part *wparts = kdc_xcalloc(2 * (size_t)P->nw + 1, sizeof *wparts);
  size_t n_wparts = 0;
  uint64_t wpos = weights.size;
  wparts[n_wparts++] = (kdc_plan_part){weights.data, weights.size};
  for (uint32_t i = 0; i < P->nw; i++) {
    if (data_at[i] > wpos) wparts[n_wparts++] = (kdc_plan_part){zeros, data_at[i] - wpos};
    if (P->w[i].bytes) wparts[n_wparts++] = (kdc_plan_part){P->wdata[i], P->w[i].bytes};
    wpos = data_at[i] + P->w[i].bytes;
  }
  free(data_at);
  char *ir = opt && opt->no_ir_text ? NULL : kdc_ir_module_to_string(P->m);
  kdc_status st = NULL;
  /* first: it drops the GPU-only operand bodies from the CPU module */
  if (opt && opt->cuda_sm) st = cg_ptx_emit(P, opt->cuda_sm, &ptx, &ptx_len, &launch);
  if (!st && ptx) {  /* SASS next to the PTX when a ptxas is at hand (ptxas.c) */
    char ptxas[4096], why[200] = "";
    cg_cubin cubin;
    memset(&cubin, 0, sizeof cubin);
    st = cg_ptxas_find(ptxas, sizeof ptxas, why, sizeof why);
    if (!st && *ptxas) st = cg_ptxas_assemble(ptxas, ptx, ptx_len, opt->cuda_sm, &cubin);
    if (!st) cg_cubin_put(&launch, &cubin, why);
    free(cubin.data);
  }
  LLVMMemoryBufferRef bc = LLVMWriteBitcodeToMemoryBuffer(P->mod);
  if (!st && !meta) st = KDC_ERR(KDC_OUT_OF_MEMORY, "codegen: metadata");
  if (!st) st = kdc_plan_writer_add(w, KDC_PLAN_SECTION_METADATA, "metadata", meta, meta_len);
  if (!st) st = kdc_plan_writer_add(w, KDC_PLAN_SECTION_PROGRAM, "program", prog.data, prog.size);
  if (!st)
    st = kdc_plan_writer_add_parts(w, KDC_PLAN_SECTION_WEIGHTS, "weights", wparts, n_wparts);
  if (!st)
    st = kdc_plan_writer_add_parts(
        w, KDC_PLAN_SECTION_CODE, "code",
        &(kdc_plan_part){LLVMGetBufferStart(bc), LLVMGetBufferSize(bc)}, 1);
  if (!st && ir) st = kdc_plan_writer_add(w, KDC_PLAN_SECTION_IR_TEXT, "ir", ir, strlen(ir));
  if (!st && ptx) st = kdc_plan_writer_add(w, KDC_PLAN_SECTION_PTX, "ptx", ptx, ptx_len);
  if (!st && ptx)
    st = kdc_plan_writer_add(w, KDC_PLAN_SECTION_CUDA, "cuda", launch.data, launch.size);
  if (!st && opt && opt->keras)
    st = kdc_plan_writer_add(w, KDC_PLAN_SECTION_KERAS, "keras", opt->keras, strlen(opt->keras));
  if (!st && opt && opt->explain)
    st = kdc_plan_writer_add(w, KDC_PLAN_SECTION_EXPLAIN, "explain", opt->explain,
                             strlen(opt->explain));
  if (!st && opt && opt->train_state)
    st = kdc_plan_writer_add(w, KDC_PLAN_SECTION_TRAIN_STATE, "train_state", opt->train_state,
                             opt->train_state_size);
  if (!st) st = kdc_plan_writer_write(w, path);
  kdc_plan_writer_destroy(w);
  LLVMDisposeMemoryBuffer(bc);
  kdc_buf_free(&prog);
  kdc_buf_free(&weights);
  free(wparts);
  kdc_buf_free(&launch);
  free(ptx);
  free(meta);
  free(ir);
  return st;
}

kdc_status kdc_codegen_cpu_plan(const kdc_module *m, const kdc_codegen_options *opt,
                                const char *out_path) {
  cg_plan P;
  plan_init(&P, m);
  P.cuda_sm = opt ? opt->cuda_sm : 0;
  P.tf32 = opt && opt->tf32;
  kdc_status st = compile(&P, opt);
  if (!st) st = write_plan(&P, opt, out_path);
  plan_free(&P);
  return st;
}
