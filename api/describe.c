/*
 * api/describe.c: the texts of `kdc inspect` -- a plan's description, its
 * collectives, a tensor's layout, the sharding explanations kept at
 * compile time (the EXPLAIN section), the PTX -- and a model's summary,
 * each into a string; and the plan's mesh, memory and collectives as JSON
 * (runtime/describe.c) for programs.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "common/io.h"
#include "frontend/frontend.h"

int kdc_is_plan_file(const char *path) {
  char magic[8] = {0};
  int fd;
  uint64_t size;
  if (!path) return 0;
  kdc_status st = kdc_file_open_input(path, &fd, &size);  /* never blocks on a FIFO */
  if (st) {
    kdc_status_free(st);  /* the model reader reports it */
    return 0;
  }
  ssize_t got = read(fd, magic, sizeof magic);
  close(fd);
  size_t n = got > 0 ? (size_t)got : 0;
  /* a plan cut inside its magic is still a (truncated) plan, not bad JSON */
  return n > 0 && memcmp(magic, "KDCPLAN", n < 7 ? n : 7) == 0;
}

/* The EXPLAIN blocks of |pf| whose name is |name| (any function). */
static kdc_status explain(const kdc_plan_file *pf, const char *path, const char *name, FILE *out) {
  const void *data = NULL;
  size_t size = 0;
  if (!kdc_plan_file_find(pf, KDC_PLAN_SECTION_EXPLAIN, &data, &size))
    return KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no sharding explanations (compiled "
                   "without --mesh)", path);
  const char *s = data, *end = s + size;
  size_t nlen = strlen(name);
  bool found = false;
  while (s < end) {
    const char *next = s + 1;
    while (next < end && !(next[-1] == '\n' && next + 2 < end && next[0] == '@' && next[1] == '@'))
      next++;
    /* "@@ func name\n" */
    const char *sp = memchr(s, ' ', (size_t)(next - s));
    const char *sp2 = sp ? memchr(sp + 1, ' ', (size_t)(next - sp - 1)) : NULL;
    const char *nl = memchr(s, '\n', (size_t)(next - s));
    if (sp2 && nl && (size_t)(nl - sp2 - 1) == nlen && !memcmp(sp2 + 1, name, nlen)) {
      fwrite(s, 1, (size_t)(next - s), out);
      found = true;
    }
    s = next;
  }
  if (!found)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: no value named \"%s\" (give a weight path, an input, "
                   "an output or a layer name)", path, name);
  return NULL;
}

/* The sections read from the file itself (EXPLAIN, PTX). */
static kdc_status from_file(const kdc_plan *p, const char *path, int what, const char *name,
                            FILE *out) {
  kdc_plan_file *pf = NULL;
  KDC_RETURN_IF_ERROR(p && p->bytes ? kdc_plan_file_open_mem(path, p->bytes, p->size, &pf)
                                    : kdc_plan_file_open(path, &pf));
  kdc_status st = NULL;
  if (what == KDC_DESCRIBE_EXPLAIN) {
    st = explain(pf, path, name, out);
  } else {
    const void *data = NULL;
    size_t size = 0;
    if (!kdc_plan_file_find(pf, KDC_PLAN_SECTION_PTX, &data, &size))
      st = KDC_ERR(KDC_INVALID_INPUT, "%s: the plan has no PTX (compile with --target cuda)", path);
    else
      fwrite(data, 1, size, out);
  }
  kdc_plan_file_close(pf);
  return st;
}

static kdc_status describe(const kdc_plan *p, const kdc_rt_plan *rt, const char *path, int what,
                           const char *name, FILE *out) {
  if ((what == KDC_DESCRIBE_SHARDING || what == KDC_DESCRIBE_EXPLAIN) && !name)
    return KDC_ERR(KDC_INVALID_INPUT, "%s: --%s needs a name", path,
                   what == KDC_DESCRIBE_SHARDING ? "sharding" : "explain");
  switch (what) {
  case KDC_DESCRIBE_PLAN: kdc_rt_plan_describe(rt, out); return NULL;
  case KDC_DESCRIBE_COLLECTIVES: kdc_rt_plan_describe_collectives(rt, out); return NULL;
  case KDC_DESCRIBE_SHARDING: return kdc_rt_plan_describe_sharding(rt, name, out);
  case KDC_DESCRIBE_JSON: kdc_rt_plan_describe_json(rt, out); return NULL;
  case KDC_DESCRIBE_EXPLAIN:
  case KDC_DESCRIBE_PTX: return from_file(p, path, what, name, out);
  default: return KDC_ERR(KDC_INVALID_INPUT, "describe: unknown kind %d", what);
  }
}

/* Closes the memory stream |f| of *|buf| (its text exists only after
 * that): *|text| on success, else the text is dropped. */
static kdc_status to_text(FILE *f, char **buf, kdc_status st, char **text) {
  if (f) fclose(f);
  if (st || !f) {
    free(*buf);
    return st ? st : KDC_ERR(KDC_OUT_OF_MEMORY, "describe: out of memory");
  }
  *text = *buf;
  return NULL;
}

kdc_status kdc_plan_describe(const kdc_plan *p, int what, const char *name, char **text) {
  if (!p || !text) return KDC_ERR(KDC_INVALID_INPUT, "describe: no plan or no place for the text");
  *text = NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  kdc_status st = f ? describe(p, p->rt, p->path ? p->path : "plan", what, name, f) : NULL;
  return to_text(f, &buf, st, text);
}

kdc_status kdc_plan_file_describe(const char *path, int what, const char *name, char **text) {
  if (!path || !text) return KDC_ERR(KDC_INVALID_INPUT, "inspect: no file given (see kdc --help)");
  *text = NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  kdc_status st = NULL;
  if (f && (what == KDC_DESCRIBE_EXPLAIN || what == KDC_DESCRIBE_PTX)) {
    st = describe(NULL, NULL, path, what, name, f);
  } else if (f) {
    kdc_rt_plan *rt = NULL;
    /* describing needs no GPU and no machine code */
    kdc_rt_options ro = {.target = KDC_RT_TARGET_CPU, .describe_only = 1};
    st = kdc_rt_plan_load_with(path, &ro, &rt);
    if (!st) st = describe(NULL, rt, path, what, name, f);
    if (rt) kdc_rt_plan_release(rt);
  }
  return to_text(f, &buf, st, text);
}

kdc_status kdc_model_summary(const char *path, const char *text, size_t len, char **out) {
  if (!out || (!path && !text)) return KDC_ERR(KDC_INVALID_INPUT, "summary: no model given");
  *out = NULL;
  kdc_keras_model *m = NULL;
  kdc_status st = text ? kdc_frontend_load_text(path ? path : "model.json", text, len, &m)
                       : kdc_frontend_load(path, &m);
  char *buf = NULL;
  size_t n = 0;
  FILE *f = st ? NULL : open_memstream(&buf, &n);
  if (f) st = kdc_frontend_summary(m, f);
  int64_t fixed = -1;
  const kdc_keras_layer *at = NULL;
  if (f && !st) st = kdc_frontend_fixed_batch(m, &fixed, &at);
  if (f && !st && fixed >= 0)
    fprintf(f, "Batch: %lld, fixed by the batch_shape of input \"%s\" (kdc compile uses it; a "
            "different --batch is an error)\n", (long long)fixed, at->name);
  kdc_frontend_free(m);
  if (!f && !st) st = KDC_ERR(KDC_OUT_OF_MEMORY, "summary: out of memory");
  if (!f) return st;
  return to_text(f, &buf, st, out);
}
