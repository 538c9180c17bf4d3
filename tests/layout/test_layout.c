/* layout.json (frontend/layout.c): parsing, the Keras LayoutMap lookup
 * (KERAS.md 1.3 test table, fullmatch vs search), resolution into shardings
 * on real keras-hub shapes (KERAS.md 5), data shardings, errors, warnings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "frontend/layout.h"

/* ---- helpers -------------------------------------------------------------- */

static kdc_mesh mesh(const char *shape, const char *axes) {
  kdc_mesh m;
  kdc_status st = kdc_mesh_parse(shape, axes, &m);
  if (st) fail_msg("%s", kdc_status_message(st));
  return m;
}

static kdc_layout *parse_ok(const char *json) {
  kdc_layout *l = NULL;
  kdc_status st = kdc_layout_parse(json, strlen(json), "layout.json", &l);
  if (st) fail_msg("%s", kdc_status_message(st));
  return l;
}

static void parse_err(const char *json, const char *message) {
  kdc_layout *l = (kdc_layout *)1;
  kdc_status st = kdc_layout_parse(json, strlen(json), "layout.json", &l);
  if (!st) fail_msg("parsed: %s", json);
  assert_string_equal(kdc_status_message(st), message);
  assert_null(l);
  kdc_status_free(st);
}

/* The IR text of a sharding (ir/sharding.c), checking that layouts only
 * ever produce closed dims, without partial or replicated clauses. */
static const char *spec(const kdc_mesh *m, const kdc_sharding *s) {
  static char buf[256];
  assert_true(s->present);
  assert_int_equal(s->open_mask, 0);
  assert_int_equal(s->partial, 0);
  assert_int_equal(s->replicated, 0);
  assert_int_equal(s->origin, 0);
  return kdc_sharding_str(m, s, buf, sizeof buf);
}

/* The key of the rule a lookup returns, "none", or "error: <message>". */
static const char *lookup(const kdc_layout *l, const char *path) {
  static char buf[512];
  int r;
  kdc_status st = kdc_layout_lookup(l, path, &r);
  if (st) {
    snprintf(buf, sizeof buf, "error: %s", kdc_status_message(st));
    kdc_status_free(st);
    return buf;
  }
  return r < 0 ? "none" : kdc_layout_rule_key(l, (size_t)r);
}

/* The sharding of tensor |path| as text, "none: {-,-}" when no rule applied,
 * or "error: <message>". */
static const char *resolve(const kdc_layout *l, const kdc_mesh *m, const char *path, int rank,
                           const int64_t *dims) {
  static char buf[512];
  kdc_sharding s;
  bool found;
  kdc_status st = kdc_layout_resolve(l, m, path, rank, dims, &s, &found);
  if (st) {
    snprintf(buf, sizeof buf, "error: %s", kdc_status_message(st));
    kdc_status_free(st);
    return buf;
  }
  assert_int_equal(s.rank, rank);
  snprintf(buf, sizeof buf, "%s%s", found ? "" : "none: ", spec(m, &s));
  return buf;
}

#define DIMS(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* ---- parsing -------------------------------------------------------------- */

static const char *guide =
    "{\"batch_dim_name\": \"data\",\n"
    " \"layout_map\": {\n"
    "   \"d1/kernel\": [null, \"model\"],\n"
    "   \"d1/bias\": [\"model\"],\n"
    "   \"d2/output\": [\"data\", null]}}\n";

static void test_parse_guide(void **state) {
  (void)state;
  kdc_layout *l = parse_ok(guide);
  assert_string_equal(kdc_layout_batch_dim_name(l), "data");
  assert_string_equal(kdc_layout_filename(l), "layout.json");
  assert_int_equal(kdc_layout_get_match(l), KDC_LAYOUT_MATCH_FULLMATCH);
  assert_int_equal(kdc_layout_rule_count(l), 3);
  assert_string_equal(kdc_layout_rule_key(l, 0), "d1/kernel");
  assert_string_equal(kdc_layout_rule_key(l, 1), "d1/bias");
  assert_string_equal(kdc_layout_rule_key(l, 2), "d2/output");
  kdc_mesh m = mesh("2x4", NULL);
  assert_null(kdc_layout_check(l, &m));
  kdc_layout_free(l);
}

static void test_parse_forms(void **state) {
  (void)state;
  /* keys in file order, not sorted or hashed */
  kdc_layout *l = parse_ok("{\"layout_map\": {\"z\": [], \"a\": [], \"m\": []}}");
  assert_string_equal(kdc_layout_rule_key(l, 0), "z");
  assert_string_equal(kdc_layout_rule_key(l, 2), "m");
  assert_null(kdc_layout_batch_dim_name(l));
  kdc_layout_free(l);
  /* device_mesh is ignored like Keras pops it; auto_shard_dataset accepted */
  l = parse_ok("{\"device_mesh\": {\"shape\": [2, 4], \"axis_names\": [\"data\", \"model\"]},"
               " \"auto_shard_dataset\": false, \"batch_dim_name\": null, \"match\": \"search\","
               " \"layout_map\": {}}");
  assert_int_equal(kdc_layout_get_match(l), KDC_LAYOUT_MATCH_SEARCH);
  assert_null(kdc_layout_batch_dim_name(l));
  assert_int_equal(kdc_layout_rule_count(l), 0);
  kdc_layout_set_match(l, KDC_LAYOUT_MATCH_FULLMATCH);
  assert_int_equal(kdc_layout_get_match(l), KDC_LAYOUT_MATCH_FULLMATCH);
  kdc_layout_free(l);
  /* the Keras 3.0-3.3 positional form */
  l = parse_ok("[null, {\"d1/kernel\": [null, \"model\"], \"d2/output\": [\"data\"]}, \"data\"]");
  assert_int_equal(kdc_layout_rule_count(l), 2);
  assert_string_equal(kdc_layout_rule_key(l, 1), "d2/output");
  assert_string_equal(kdc_layout_batch_dim_name(l), "data");
  kdc_layout_free(l);
  l = parse_ok("[{\"shape\": [8]}, {\"a\\\"b\": [\"model\"]}]");
  assert_string_equal(kdc_layout_rule_key(l, 0), "a\"b");
  kdc_layout_free(l);
  /* escapes in keys are decoded; strings with brackets do not confuse the scanner */
  l = parse_ok("{\"layout_map\": {\"x\\u002fk]}\": [\"m\"], \"\\\\d\": []}}");
  assert_string_equal(kdc_layout_rule_key(l, 0), "x/k]}");
  assert_string_equal(kdc_layout_rule_key(l, 1), "\\d");
  kdc_layout_free(l);
  kdc_layout_match mm;
  assert_true(kdc_layout_match_from_name("search", &mm));
  assert_int_equal(mm, KDC_LAYOUT_MATCH_SEARCH);
  assert_false(kdc_layout_match_from_name("match", &mm));
  assert_string_equal(kdc_layout_match_name(KDC_LAYOUT_MATCH_FULLMATCH), "fullmatch");
}

static void test_parse_errors(void **state) {
  (void)state;
  parse_err("{\"layout_map\": {\"d1/kernel\": [null, 3]}}",
            "layout.json: layout_map[\"d1/kernel\"][1]: expected an axis name or null, got 3");
  parse_err("{\"layout_map\": {\"d1/kernel\": [null, {\"a\": 1}]}}",
            "layout.json: layout_map[\"d1/kernel\"][1]: expected an axis name or null, got "
            "{\"a\":1}");
  parse_err("{\"layout_map\": {\"d1/kernel\": [[\"data\", \"model\"], null]}}",
            "layout.json: layout_map[\"d1/kernel\"][0]: a list of mesh axes for one dimension "
            "(JAX's multi-axis form) is not supported; Keras's TensorLayout rejects it too, got "
            "[\"data\",\"model\"]");
  parse_err("{\"layout_map\": {\"d1/bias\": \"model\"}}",
            "layout.json: layout_map[\"d1/bias\"]: expected an array of mesh axis names or "
            "nulls, got \"model\" (write [\"model\"])");
  parse_err("{\"layout_map\": {\"d1/bias\": null}}",
            "layout.json: layout_map[\"d1/bias\"]: expected an array of mesh axis names or "
            "nulls, got null");
  parse_err("{\"layout_map\": {\"x\": [null,null,null,null,null,null,null,null,null]}}",
            "layout.json: layout_map[\"x\"]: 9 entries; kdc tensors have at most 8 dims");
  parse_err("{\"layout_map\": {\n  \"d1/kernel\": [null, \"model\"],\n  \"d1/bias\": [],\n"
            "  \"d1/kernel\": [\"model\", null]}}",
            "layout.json: layout_map[\"d1/kernel\"]: duplicate key (lines 2 and 4); a Keras "
            "LayoutMap rejects a key that already exists");
  /* the same key spelled with an escape is still the same key */
  parse_err("{\"layout_map\": {\"a/b\": [], \"a\\/b\": []}}",
            "layout.json: layout_map[\"a/b\"]: duplicate key (lines 1 and 1); a Keras "
            "LayoutMap rejects a key that already exists");
  parse_err("{\"layout_map\": {},\n\"layout_map\": {}}",
            "layout.json: duplicate key \"layout_map\" (lines 1 and 2)");
  parse_err("{\"layout_map\": {}, \"layoutmap\": {}}",
            "layout.json:1: unknown key \"layoutmap\" (expected layout_map, batch_dim_name, "
            "match, device_mesh or auto_shard_dataset)");
  parse_err("{\"batch_dim_name\": \"data\"}",
            "layout.json: missing \"layout_map\" (Keras's ModelParallel requires one)");
  parse_err("{\"layout_map\": [1]}", "layout.json: layout_map: expected an object, got [1]");
  parse_err("{\"layout_map\": {}, \"batch_dim_name\": 0}",
            "layout.json: batch_dim_name: expected a mesh axis name or null, got 0");
  parse_err("{\"layout_map\": {}, \"match\": \"re.match\"}",
            "layout.json: match: expected \"fullmatch\" or \"search\", got \"re.match\"");
  parse_err("{\"layout_map\": {}, \"auto_shard_dataset\": 1}",
            "layout.json: auto_shard_dataset: expected true or false, got 1");
  parse_err("{\"layout_map\": {\n  \"a\": [],\n}}",
            "layout.json:3:1: invalid JSON: unexpected character");
  parse_err("{\"layout_map\": {", "layout.json:1:17: invalid JSON: unexpected end of data");
  parse_err("", "layout.json:1:1: invalid JSON: unexpected end of data");
  parse_err("{} {}", "layout.json:1:4: invalid JSON: unexpected character");
  parse_err("{\"layout_map\": {\"\xff\": []}}",
            "layout.json:1:18: invalid JSON: invalid utf-8 string");
  parse_err("{\"layout_map\": {\"a\\u0000b\": []}}",
            "layout.json:1: a key contains a NUL character (\\u0000)");
  /* json-c's strict mode takes single-quoted keys (not values); kdc does not */
  parse_err("{\"layout_map\": {\n'd1/kernel': []}}",
            "layout.json:2: invalid JSON: a key in single quotes: 'd1/kernel'");
  parse_err("{\"layout_map\": {\"d1/kernel\": ['model']}}",
            "layout.json:1:31: invalid JSON: unexpected character");
  parse_err("3",
            "layout.json: expected an object {\"layout_map\": {...}, \"batch_dim_name\": ...}");
  parse_err("[null]",
            "layout.json: a top-level array is the positional ModelParallel(device_mesh, "
            "layout_map, batch_dim_name) and needs 2 or 3 elements, got 1");
  parse_err("[null, []]", "layout.json: [1] (layout_map): expected an object, got []");
  parse_err("[null, {}, 7]",
            "layout.json: [2] (batch_dim_name): expected a mesh axis name or null, got 7");
}

static void test_load_file(void **state) {
  (void)state;
  char path[] = "/tmp/kdc_layout_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, guide, strlen(guide)), (ssize_t)strlen(guide));
  close(fd);
  kdc_layout *l = NULL;
  kdc_status st = kdc_layout_load(path, &l);
  if (st) fail_msg("%s", kdc_status_message(st));
  assert_string_equal(kdc_layout_filename(l), path);
  assert_int_equal(kdc_layout_rule_count(l), 3);
  kdc_layout_free(l);
  unlink(path);
  st = kdc_layout_load(path, &l);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_IO_ERROR);
  assert_non_null(strstr(kdc_status_message(st), "cannot open: No such file or directory"));
  assert_null(l);
  kdc_status_free(st);
}

/* ---- lookup --------------------------------------------------------------- */

/* keras/src/distribution/distribution_lib_test.py LayoutMapTest.test_get */
static void test_keras_lookup_table(void **state) {
  (void)state;
  kdc_layout *l = parse_ok("{\"layout_map\": {\"dense/kernel\": [null, \"model\"],"
                           " \"dense/bias\": [\"model\"], \".*dense.*kernel\": [\"data\", null],"
                           " \".*dense.*bias\": [\"data\"], \".*bias\": [\"model\"]}}");
  for (int mode = 0; mode < 2; mode++) {
    kdc_layout_set_match(l, mode ? KDC_LAYOUT_MATCH_SEARCH : KDC_LAYOUT_MATCH_FULLMATCH);
    assert_string_equal(lookup(l, "dense/kernel"), "dense/kernel");
    assert_string_equal(lookup(l, "dense_2/kernel"), ".*dense.*kernel");
    assert_string_equal(lookup(l, "dense_2/bias"),
                        "error: layout.json: variable \"dense_2/bias\" matches multiple layout "
                        "keys: \".*dense.*bias\", \".*bias\"");
    assert_string_equal(lookup(l, "conv2d/kernel"), "none");
    assert_string_equal(lookup(l, "conv2d/bias"), ".*bias");
  }
  kdc_layout_free(l);
}

static void test_fullmatch_vs_search(void **state) {
  (void)state;
  kdc_layout *l = parse_ok("{\"layout_map\": {\"d1/kernel\": [null, \"model\"],"
                           " \"dense.*kernel\": [null, \"model\"], \"d2/output\": [\"data\"]}}");
  /* Keras >= 3.14: a plain key is exact for a Functional model only */
  assert_string_equal(lookup(l, "d1/kernel"), "d1/kernel");
  assert_string_equal(lookup(l, "sequential/d1/kernel"), "none");
  assert_string_equal(lookup(l, "sequential/d2/output"), "none");
  assert_string_equal(lookup(l, "dense_1/kernel"), "dense.*kernel");
  assert_string_equal(lookup(l, "sequential/dense/kernel"), "none");
  assert_string_equal(lookup(l, "dense/kernel_1"), "none");
  /* Keras 3.0-3.13: re.search, substring matches */
  kdc_layout_set_match(l, KDC_LAYOUT_MATCH_SEARCH);
  assert_string_equal(lookup(l, "sequential/d1/kernel"), "d1/kernel");
  assert_string_equal(lookup(l, "sequential/d2/output"),
                      "d2/output");
  assert_string_equal(lookup(l, "sequential/dense/kernel"), "dense.*kernel");
  assert_string_equal(lookup(l, "dense/kernel_1"), "dense.*kernel");
  assert_string_equal(lookup(l, "d1/kernel/x"), "d1/kernel");
  /* "." in a plain key is a regex dot in both modes */
  assert_string_equal(lookup(l, "d1/kernel"), "d1/kernel");
  kdc_layout_free(l);
  /* the mode can come from the file */
  l = parse_ok("{\"match\": \"search\", \"layout_map\": {\"d1/kernel\": []}}");
  assert_string_equal(lookup(l, "sequential/d1/kernel"), "d1/kernel");
  kdc_layout_free(l);
  l = parse_ok("{\"layout_map\": {\"d1.kernel\": []}}");
  assert_string_equal(lookup(l, "d1/kernel"), "d1.kernel");
  kdc_layout_free(l);
}

/* Python re syntax that PCRE2 reads differently (docs/layout.md). */
static void test_python_regex_dialect(void **state) {
  (void)state;
  kdc_layout *l = parse_ok(
      "{\"match\": \"search\", \"layout_map\": {"
      "\"kernel\\\\Z\": [], "              /* \Z: end of string only */
      "\"^d{,2}9/b$\": [], "               /* {,n} is {0,n} in Python */
      "\"^x[[]y$\": [], "                  /* '[' in a class is a literal */
      "\"^\\\\u0071/k$\": [], "            /* \u0071 = q */
      "\"^(?P<l>e\\\\d)/(?P=l)$\": [], "   /* named groups */
      "\"^n1|^n1/w$\": [], "
      "\"^\\\\w+/gamma$\": []}}");         /* \w is Unicode-aware */
  assert_string_equal(lookup(l, "d1/kernel"), "kernel\\Z");
  assert_string_equal(lookup(l, "d1/kernel\n"), "none");
  assert_string_equal(lookup(l, "9/b"), "^d{,2}9/b$");
  assert_string_equal(lookup(l, "dd9/b"), "^d{,2}9/b$");
  assert_string_equal(lookup(l, "ddd9/b"), "none");
  assert_string_equal(lookup(l, "x[y"), "^x[[]y$");
  assert_string_equal(lookup(l, "q/k"), "^\\u0071/k$");
  assert_string_equal(lookup(l, "e1/e1"), "^(?P<l>e\\d)/(?P=l)$");
  assert_string_equal(lookup(l, "e1/e2"), "none");
  assert_string_equal(lookup(l, "couche_\xc3\xa9t\xc3\xa9/gamma"), "^\\w+/gamma$");
  kdc_layout_free(l);
  /* fullmatch backtracks into alternatives, as re.fullmatch does */
  l = parse_ok("{\"layout_map\": {\"d1|d1/kernel\": [], \"a\\\\Z|b\": []}}");
  assert_string_equal(lookup(l, "d1/kernel"), "d1|d1/kernel");
  assert_string_equal(lookup(l, "d1"), "d1|d1/kernel");
  assert_string_equal(lookup(l, "a"), "a\\Z|b");
  kdc_layout_free(l);
}

static void test_invalid_regex(void **state) {
  (void)state;
  kdc_layout *l = parse_ok("{\"layout_map\": {\"conv[1/kernel\": [], \"d1/kernel\": [],"
                           " \"\\\\u0064(\": []}}");
  /* exact hits never compile anything */
  assert_string_equal(lookup(l, "conv[1/kernel"), "conv[1/kernel");
  assert_string_equal(lookup(l, "d1/kernel"), "d1/kernel");
  /* any other lookup needs every key as a regex, as in Python */
  assert_string_equal(lookup(l, "d2/kernel"),
                      "error: layout.json: layout_map[\"conv[1/kernel\"]: the key is not a valid "
                      "regex: missing terminating ] for character class at offset 13 (needed for "
                      "variable \"d2/kernel\")");
  kdc_layout_free(l);
  /* offsets refer to the key as written, not to the PCRE2 rewrite */
  l = parse_ok("{\"layout_map\": {\"\\\\u0064(\": []}}");
  assert_string_equal(lookup(l, "d2/output"),
                      "error: layout.json: layout_map[\"\\\\u0064(\"]: the key is not a valid "
                      "regex: missing closing parenthesis at offset 7 (needed for layer output "
                      "\"d2/output\")");
  kdc_layout_free(l);
}

/* ---- resolution ----------------------------------------------------------- */

static void test_resolve_guide(void **state) {
  (void)state;
  kdc_layout *l = parse_ok(guide);
  kdc_mesh m = mesh("2x4", NULL);
  /* the Functional MLP of KERAS.md 2.3 */
  assert_string_equal(resolve(l, &m, "d1/kernel", DIMS(784, 200)), "{-,model}");
  assert_string_equal(resolve(l, &m, "d2/kernel", DIMS(200, 10)), "none: {-,-}");
  assert_string_equal(resolve(l, &m, "d2/bias", DIMS(10)), "none: {-}");
  assert_string_equal(resolve(l, &m, "d2/output", DIMS(64, 10)), "{data,-}");
  /* the mesh variants of the guide need no other change */
  kdc_mesh m81 = mesh("8x1", NULL), m18 = mesh("1x8", NULL);
  assert_string_equal(resolve(l, &m81, "d1/kernel", DIMS(784, 200)), "{-,model}");
  assert_string_equal(resolve(l, &m18, "d1/kernel", DIMS(784, 200)), "{-,model}");
  /* indivisible, with every number in the message */
  kdc_mesh m23 = mesh("2x3", NULL);
  assert_string_equal(resolve(l, &m23, "d1/kernel", DIMS(784, 200)),
                      "error: layout.json: layout_map[\"d1/kernel\"]: dim 1 of \"d1/kernel\" "
                      "(size 200) is not divisible by mesh axis \"model\" (size 3)");
  assert_string_equal(resolve(l, &m, "d2/output", DIMS(63, 10)),
                      "error: layout.json: layout_map[\"d2/output\"]: dim 0 of \"d2/output\" "
                      "(size 63) is not divisible by mesh axis \"data\" (size 2)");
  /* the layout is longer than the tensor: d1 has a bias of rank 1 here */
  assert_string_equal(resolve(l, &m, "d1/bias", DIMS(200)), "{model}");
  kdc_layout_free(l);
  l = parse_ok("{\"layout_map\": {\"d1/bias\": [null, \"model\"], \"x\": [\"model\"],"
               " \"s\": []}}");
  assert_string_equal(resolve(l, &m, "d1/bias", DIMS(200)),
                      "error: layout.json: layout_map[\"d1/bias\"]: 2 entries for variable "
                      "\"d1/bias\" of rank 1 (shape [200])");
  /* shorter: trailing dims replicated; rank 0 with [] */
  assert_string_equal(resolve(l, &m, "x", DIMS(8, 3, 5)), "{model,-,-}");
  assert_string_equal(resolve(l, &m, "s", 0, NULL), "{}");
  assert_string_equal(resolve(NULL, &m, "d1/kernel", DIMS(784, 200)), "none: {-,-}");
  kdc_layout_free(l);
}

static void test_resolve_mesh_errors(void **state) {
  (void)state;
  kdc_mesh m = mesh("2x4", NULL);
  kdc_layout *l = parse_ok("{\"layout_map\": {\"a\": [null, \"modle\"]}}");
  kdc_status st = kdc_layout_check(l, &m);
  assert_string_equal(kdc_status_message(st),
                      "layout.json: layout_map[\"a\"][1]: \"modle\" is not an axis of the mesh "
                      "(data=2, model=4)");
  kdc_status_free(st);
  assert_string_equal(resolve(l, &m, "a", DIMS(4, 4)),
                      "error: layout.json: layout_map[\"a\"][1]: \"modle\" is not an axis of the "
                      "mesh (data=2, model=4)");
  kdc_layout_free(l);
  l = parse_ok("{\"layout_map\": {\"a\": [\"model\", null, \"model\"]}}");
  assert_string_equal(resolve(l, &m, "a", DIMS(4, 4, 4)),
                      "error: layout.json: layout_map[\"a\"]: mesh axis \"model\" splits both dim "
                      "0 and dim 2; an axis can split only one dim of a tensor");
  st = kdc_layout_check(l, &m);
  assert_non_null(st);
  kdc_status_free(st);
  kdc_layout_free(l);
  l = parse_ok("{\"batch_dim_name\": \"batch\", \"layout_map\": {}}");
  st = kdc_layout_check(l, &m);
  assert_string_equal(kdc_status_message(st),
                      "layout.json: batch_dim_name: \"batch\" is not an axis of the mesh (data=2, "
                      "model=4)");
  kdc_status_free(st);
  kdc_layout_free(l);
  /* a multiple match is reported for outputs too */
  l = parse_ok("{\"layout_map\": {\".*output\": [], \"d2/.*\": []}}");
  assert_string_equal(resolve(l, &m, "d2/output", DIMS(4)),
                      "error: layout.json: layer output \"d2/output\" matches multiple layout "
                      "keys: \".*output\", \"d2/.*\"");
  kdc_layout_free(l);
}

/* keras-hub GemmaBackbone.get_layout_map (KERAS.md 5), model="model",
 * data="batch".  Shapes: Gemma 7B (16 heads, MHA, hidden 3072, head_dim 256,
 * ffw 24576, vocab 256000) and Gemma 2B (8 query heads, 1 KV head, hidden
 * 2048, ffw 16384). */
static const char *gemma =
    "{\"batch_dim_name\": \"batch\", \"layout_map\": {\n"
    "  \"token_embedding/embeddings\": [\"model\", \"batch\"],\n"
    "  \"decoder_block.*attention.*(query|key|value).kernel\": [\"model\", \"batch\", null],\n"
    "  \"decoder_block.*attention_output.kernel\": [\"model\", null, \"batch\"],\n"
    "  \"decoder_block.*ffw_gating.kernel\": [\"batch\", \"model\"],\n"
    "  \"decoder_block.*ffw_gating_2.kernel\": [\"batch\", \"model\"],\n"
    "  \"decoder_block.*ffw_linear.kernel\": [\"model\", \"batch\"]}}";

static void test_gemma(void **state) {
  (void)state;
  kdc_layout *l = parse_ok(gemma);
  kdc_mesh m = mesh("2x4", "batch,model");
  assert_null(kdc_layout_check(l, &m));
  assert_string_equal(resolve(l, &m, "token_embedding/embeddings", DIMS(256000, 3072)),
                      "{model,batch}");
  const char *qkv[] = {"query", "key", "value"};
  for (int i = 0; i < 3; i++) {
    char path[128];
    snprintf(path, sizeof path, "decoder_block_27/attention/%s/kernel", qkv[i]);
    assert_string_equal(resolve(l, &m, path, DIMS(16, 3072, 256)), "{model,batch,-}");
  }
  assert_string_equal(resolve(l, &m, "decoder_block_0/attention/attention_output/kernel",
                              DIMS(16, 256, 3072)),
                      "{model,-,batch}");
  /* ffw_gating.kernel does not fullmatch ffw_gating_2/kernel: no double match */
  assert_string_equal(lookup(l, "decoder_block_0/ffw_gating_2/kernel"),
                      "decoder_block.*ffw_gating_2.kernel");
  assert_string_equal(resolve(l, &m, "decoder_block_0/ffw_gating/kernel", DIMS(3072, 24576)),
                      "{batch,model}");
  assert_string_equal(resolve(l, &m, "decoder_block_0/ffw_gating_2/kernel", DIMS(3072, 24576)),
                      "{batch,model}");
  assert_string_equal(resolve(l, &m, "decoder_block_0/ffw_linear/kernel", DIMS(24576, 3072)),
                      "{model,batch}");
  assert_string_equal(resolve(l, &m, "decoder_block_0/pre_attention_norm/scale", DIMS(3072)),
                      "none: {-}");
  assert_string_equal(resolve(l, &m, "final_normalization/scale", DIMS(3072)), "none: {-}");
  assert_int_equal(kdc_layout_report_unmatched(l, stderr), 0);
  kdc_layout_free(l);

  /* keras-hub issue #1613: gemma_2b_en's single KV head on model=2 */
  l = parse_ok(gemma);
  kdc_mesh m12 = mesh("1x2", "batch,model");
  assert_string_equal(resolve(l, &m12, "decoder_block_0/attention/query/kernel",
                              DIMS(8, 2048, 256)),
                      "{model,batch,-}");
  assert_string_equal(
      resolve(l, &m12, "decoder_block_0/attention/key/kernel", DIMS(1, 2048, 256)),
      "error: layout.json: layout_map[\"decoder_block.*attention.*(query|key|value).kernel\"]: "
      "dim 0 of \"decoder_block_0/attention/key/kernel\" (size 1) is not divisible by mesh axis "
      "\"model\" (size 2)");
  kdc_layout_free(l);
}

/* keras-hub LlamaBackbone.get_layout_map, on Llama 3.2 1B shapes (hidden
 * 2048, 32 query heads, 8 KV heads, head_dim 64, ffw 8192, vocab 128256). */
static void test_llama(void **state) {
  (void)state;
  kdc_layout *l = parse_ok(
      "{\"batch_dim_name\": \"batch\", \"layout_map\": {\n"
      "  \"token_embedding/embeddings\": [\"model\", \"batch\"],\n"
      "  \"transformer_layer.*self_attention.*(query|key|value).kernel\": "
      "[\"model\", \"batch\", null],\n"
      "  \"transformer_layer.*attention_output.kernel\": [\"model\", null, \"batch\"],\n"
      "  \"transformer_layer.*feedforward_intermediate_dense.kernel\": [\"batch\", \"model\"],\n"
      "  \"transformer_layer.*feedforward_gate_dense.kernel\": [\"batch\", \"model\"],\n"
      "  \"transformer_layer.*feedforward_output_dense.kernel\": [\"model\", \"batch\"]}}");
  kdc_mesh m = mesh("2x4", "batch,model");
  assert_string_equal(resolve(l, &m, "token_embedding/embeddings", DIMS(128256, 2048)),
                      "{model,batch}");
  /* the rule copied from Gemma shards hidden on model and heads on batch
   * (keras-hub #2807); kdc applies it as written */
  assert_string_equal(resolve(l, &m, "transformer_layer_0/self_attention/query/kernel",
                              DIMS(2048, 32, 64)),
                      "{model,batch,-}");
  assert_string_equal(resolve(l, &m, "transformer_layer_15/self_attention/key/kernel",
                              DIMS(2048, 8, 64)),
                      "{model,batch,-}");
  assert_string_equal(resolve(l, &m, "transformer_layer_0/self_attention/attention_output/kernel",
                              DIMS(32, 64, 2048)),
                      "{model,-,batch}");
  assert_string_equal(resolve(l, &m, "transformer_layer_0/feedforward_gate_dense/kernel",
                              DIMS(2048, 8192)),
                      "{batch,model}");
  assert_string_equal(resolve(l, &m, "transformer_layer_0/feedforward_intermediate_dense/kernel",
                              DIMS(2048, 8192)),
                      "{batch,model}");
  assert_string_equal(resolve(l, &m, "transformer_layer_0/feedforward_output_dense/kernel",
                              DIMS(8192, 2048)),
                      "{model,batch}");
  assert_int_equal(kdc_layout_report_unmatched(l, stderr), 0);
  /* the GQA KV heads (8) on a batch axis of 16 (keras-hub #2807) */
  kdc_mesh m16 = mesh("16x1", "batch,model");
  assert_string_equal(resolve(l, &m16, "transformer_layer_0/self_attention/value/kernel",
                              DIMS(2048, 8, 64)),
                      "error: layout.json: "
                      "layout_map[\"transformer_layer.*self_attention.*(query|key|value).kernel\"]"
                      ": dim 1 of \"transformer_layer_0/self_attention/value/kernel\" (size 8) is "
                      "not divisible by mesh axis \"batch\" (size 16)");
  kdc_layout_free(l);
}

/* ---- data shardings ------------------------------------------------------- */

static const char *data(const kdc_layout *l, const kdc_mesh *m, int rank, const int64_t *dims) {
  static char buf[512];
  kdc_sharding s;
  kdc_status st = kdc_layout_data_sharding(l, m, "input_layer", rank, dims, &s);
  if (st) {
    snprintf(buf, sizeof buf, "error: %s", kdc_status_message(st));
    kdc_status_free(st);
    return buf;
  }
  snprintf(buf, sizeof buf, "%s", spec(m, &s));
  return buf;
}

static void test_data_sharding(void **state) {
  (void)state;
  kdc_mesh m = mesh("2x4", NULL), m1 = mesh("8", NULL), m3 = mesh("2x2x2", NULL);
  /* DataParallel (no layout): the batch over every device, major to minor */
  assert_string_equal(data(NULL, &m, DIMS(64, 28, 28, 1)), "{(data,model),-,-,-}");
  assert_string_equal(data(NULL, &m1, DIMS(64, 784)), "{data,-}");
  assert_string_equal(data(NULL, &m3, DIMS(16)), "{(data,model,axis2)}");
  assert_string_equal(data(NULL, &m, DIMS(12, 784)),
                      "error: input \"input_layer\": batch size 12 is not divisible by the 8 data "
                      "shards of all mesh axes (DataParallel); mesh data=2, model=4");
  /* ModelParallel: batch_dim_name, else the first axis */
  kdc_layout *l = parse_ok(guide);
  assert_string_equal(data(l, &m, DIMS(64, 784)), "{data,-}");
  assert_string_equal(data(l, &m, DIMS(3, 784)),
                      "error: layout.json: input \"input_layer\": batch size 3 is not divisible by "
                      "the 2 data shards of mesh axis \"data\"; mesh data=2, model=4");
  kdc_layout_free(l);
  l = parse_ok("{\"batch_dim_name\": \"model\", \"layout_map\": {}}");
  assert_string_equal(data(l, &m, DIMS(12, 784)), "{model,-}");
  kdc_layout_free(l);
  l = parse_ok("{\"layout_map\": {}}");
  kdc_mesh mb = mesh("4x2", "model,batch");
  assert_string_equal(data(l, &mb, DIMS(12, 784)), "{model,-}");
  assert_string_equal(data(l, &mb, DIMS(12)), "{model}");
  assert_string_equal(data(l, &mb, 0, NULL),
                      "error: input \"input_layer\" is a scalar: it has no batch dim to split");
  kdc_layout_free(l);
  l = parse_ok("{\"batch_dim_name\": \"batch\", \"layout_map\": {}}");
  assert_string_equal(data(l, &m, DIMS(8)),
                      "error: layout.json: batch_dim_name: \"batch\" is not an axis of the mesh "
                      "(data=2, model=4)");
  kdc_layout_free(l);
  kdc_mesh none;
  memset(&none, 0, sizeof none);
  assert_string_equal(data(NULL, &none, DIMS(7, 3)), "{-,-}");
  kdc_mesh big = mesh("1x1x1x1x2", NULL);
  assert_string_equal(data(NULL, &big, DIMS(8)),
                      "error: data parallelism over a 5-axis mesh: kdc splits one dim over at "
                      "most 4 axes (give a layout file with batch_dim_name)");
}

/* ---- unmatched rules ------------------------------------------------------ */

static void test_unmatched_warning(void **state) {
  (void)state;
  kdc_layout *l = parse_ok(guide);
  kdc_mesh m = mesh("2x4", NULL);
  /* the Functional MLP has no d1/bias (use_bias=False) */
  assert_string_equal(resolve(l, &m, "d1/kernel", DIMS(784, 200)), "{-,model}");
  assert_string_equal(resolve(l, &m, "d2/kernel", DIMS(200, 10)), "none: {-,-}");
  assert_string_equal(resolve(l, &m, "d2/bias", DIMS(10)), "none: {-}");
  assert_string_equal(resolve(l, &m, "d1/output", DIMS(64, 200)), "none: {-,-}");
  assert_string_equal(resolve(l, &m, "d2/output", DIMS(64, 10)), "{data,-}");
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  assert_int_equal(kdc_layout_report_unmatched(l, f), 1);
  fclose(f);
  assert_string_equal(out, "layout.json: warning: layout_map[\"d1/bias\"] matches no variable "
                           "or layer output\n");
  free(out);
  kdc_layout_free(l);
  /* a Sequential model under fullmatch: every plain key is silently dead in
   * Keras; kdc says so */
  l = parse_ok(guide);
  resolve(l, &m, "sequential/d1/kernel", DIMS(784, 200));
  resolve(l, &m, "sequential/d2/output", DIMS(64, 10));
  f = open_memstream(&out, &len);
  assert_int_equal(kdc_layout_report_unmatched(l, f), 3);
  fclose(f);
  assert_string_equal(out,
                      "layout.json: warning: layout_map[\"d1/kernel\"] matches no variable or "
                      "layer output\n"
                      "layout.json: warning: layout_map[\"d1/bias\"] matches no variable or "
                      "layer output\n"
                      "layout.json: warning: layout_map[\"d2/output\"] matches no variable or "
                      "layer output\n");
  free(out);
  kdc_layout_free(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_guide),
      cmocka_unit_test(test_parse_forms),
      cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_load_file),
      cmocka_unit_test(test_keras_lookup_table),
      cmocka_unit_test(test_fullmatch_vs_search),
      cmocka_unit_test(test_python_regex_dialect),
      cmocka_unit_test(test_invalid_regex),
      cmocka_unit_test(test_resolve_guide),
      cmocka_unit_test(test_resolve_mesh_errors),
      cmocka_unit_test(test_gemma),
      cmocka_unit_test(test_llama),
      cmocka_unit_test(test_data_sharding),
      cmocka_unit_test(test_unmatched_warning),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
