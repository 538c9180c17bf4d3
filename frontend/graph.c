/*
 * frontend/graph.c: Functional and Sequential model envelopes -> layer graph.
 *
 * Reads every layout KERAS.md section 3 describes:
 *  - Keras 3 dict nodes {"args", "kwargs"} with `__keras_tensor__` objects
 *    (keras_history [layer, node, tensor]) at any depth, merge list-args;
 *  - tf.keras 2 / TF.js nested-list nodes [[name, node, tensor, kwargs], ...]
 *    whose kwargs may hold tensors as 3-lists ({"value": ["x", 0, 0]});
 *  - Sequential as {"layers": [...]} or the legacy bare list, with or without
 *    an InputLayer entry (then the shape comes from the first layer's
 *    batch_input_shape, batch_shape, input_shape, or build_input_shape, or
 *    the input of a nested model that is the first layer);
 *  - input_layers/output_layers as a flat triple, a (nested) list or a dict
 *    of triples (dict keys in sorted order, as Keras' tree.flatten);
 *  - nested models as layers; their first call is node 1 (KERAS.md 3.1).
 * Nodes are then evaluated in dependency order (Keras' retry loop): a full
 * pass without progress is a located "loop or disconnected" error.
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

const char *kdc_fe_join(kdc_arena *a, const char *loc, const char *suffix) {
  if (!loc || !*loc) return kdc_arena_strdup(a, suffix);
  return kdc_arena_printf(a, "%s.%s", loc, suffix);
}

static bool is_model_class(const char *c) {
  return !strcmp(c, "Functional") || !strcmp(c, "Model") || !strcmp(c, "Sequential");
}

/* Index of the layer named |name|, or -1; layers added since the last call
 * are indexed first (the first of equal names wins, as a linear search). */
static int find_layer(kdc_keras_model *m, const char *name) {
  if (m->n_indexed > m->n_layers) {  /* layers were dropped: start again */
    kdc_strindex_free(&m->layer_index);
    m->n_indexed = 0;
  }
  for (; m->n_indexed < m->n_layers; m->n_indexed++)
    if (m->layers[m->n_indexed].name)
      kdc_strindex_add(&m->layer_index, m->layers[m->n_indexed].name, (uint32_t)m->n_indexed);
  return (int)kdc_strindex_get(&m->layer_index, name);
}

/* Keras-style snake_case of a class name, for layers without a name. */
static const char *auto_name(kdc_keras_model *m, const char *cls) {
  char base[128];
  size_t k = 0;
  for (const char *p = cls; *p && k + 2 < sizeof base; p++) {
    if (*p >= 'A' && *p <= 'Z') {
      if (p != cls && k && base[k - 1] != '_') base[k++] = '_';
      base[k++] = (char)(*p - 'A' + 'a');
    } else {
      base[k++] = *p;
    }
  }
  base[k] = 0;
  const char *n = kdc_arena_strdup(m->arena, base);
  for (int i = 1; find_layer(m, n) >= 0; i++) n = kdc_arena_printf(m->arena, "%s_%d", base, i);
  return n;
}

static const char *str_or_null(json_object *o) {
  return o && json_object_is_type(o, json_type_string) ? json_object_get_string(o) : NULL;
}

/* The error for a class_name kdc does not know (KERAS.md checklist). */
static kdc_status class_err(kdc_keras_model *m, json_object *entry, const char *lloc,
                            const char *cls, const char *name) {
  const char *mod = str_or_null(kdc_fe_get(entry, "module"));
  const char *reg = str_or_null(kdc_fe_get(entry, "registered_name"));
  const char *at = kdc_fe_join(m->arena, lloc, "class_name");
  if (!strcmp(cls, "Lambda") || !strcmp(cls, "TFOpLambda") || !strcmp(cls, "SlicingOpLambda"))
    return kdc_fe_err(m, KDC_UNSUPPORTED, at,
                      "%s layer \"%s\" holds Python code, which kdc cannot compile", cls, name);
  /* Keras 3 writes "module": null for a class registered outside a package
   * (register_keras_serializable in __main__); built-in classes always
   * name their module */
  json_object *mv = NULL;
  bool null_module = json_object_is_type(entry, json_type_object) &&
                     json_object_object_get_ex(entry, "module", &mv) && !mv;
  if ((reg && strchr(reg, '>')) || (mod && strncmp(mod, "keras", 5) && strncmp(mod, "tf_keras", 8)) ||
      (null_module && reg))
    return kdc_fe_err(m, KDC_UNSUPPORTED, at,
                      "custom layer class \"%s\" (%s \"%s\", layer \"%s\"): kdc reads only "
                      "built-in Keras layers",
                      cls, mod ? "module" : "registered_name", mod ? mod : reg, name);
  if (kdc_fe_is_op_module(mod))
    return kdc_fe_err(m, KDC_UNSUPPORTED, at,
                      "Keras operation \"%s\" (%s, node \"%s\") is not supported by kdc "
                      "(docs/frontend.md lists the keras.ops kdc lowers)", cls, mod, name);
  const kdc_layer_class *c = kdc_fe_find_class(cls);
  if (c && !c->infer)
    return kdc_fe_err(m, KDC_UNSUPPORTED, at,
                      "layer class \"%s\" is not supported by kdc%s%s (layer \"%s\")", cls,
                      c->why ? ": " : "", c->why ? c->why : "", name);
  return kdc_fe_err(m, KDC_INVALID_INPUT, at, "unknown layer class \"%s\" (layer \"%s\")", cls,
                    name);
}

/* Parses an InputLayer-like config's declared shape into |out|. */
static bool input_shape_of(kdc_keras_model *m, json_object *cfg, const char *cloc,
                           kdc_kshape *out, kdc_status *st) {
  static const char *full[] = {"batch_shape", "batch_input_shape", "batchInputShape"};
  static const char *part[] = {"shape", "input_shape", "inputShape"};
  *st = NULL;
  for (int i = 0; i < 3; i++) {
    json_object *v = kdc_fe_get(cfg, full[i]);
    if (kdc_fe_is_null(v)) continue;
    *st = kdc_fe_parse_shape(m, v, kdc_fe_join(m->arena, cloc, full[i]), out);
    return true;
  }
  for (int i = 0; i < 3; i++) {
    json_object *v = kdc_fe_get(cfg, part[i]);
    if (kdc_fe_is_null(v)) continue;
    kdc_kshape s;
    *st = kdc_fe_parse_shape(m, v, kdc_fe_join(m->arena, cloc, part[i]), &s);
    if (*st) return true;
    if (s.rank + 1 > KDC_MAX_RANK) {
      *st = kdc_fe_err(m, KDC_UNSUPPORTED, kdc_fe_join(m->arena, cloc, part[i]),
                       "rank %d exceeds kdc's maximum rank %d", s.rank + 1, (int)KDC_MAX_RANK);
      return true;
    }
    out->rank = s.rank + 1;
    out->dims[0] = -1;
    memcpy(out->dims + 1, s.dims, sizeof(int64_t) * (size_t)s.rank);
    return true;
  }
  return false;
}

/* Gives InputLayer |l| its single node with output |shape|. */
static void make_input_node(kdc_keras_model *m, kdc_keras_layer *l, const kdc_kshape *shape) {
  l->n_nodes = 1;
  l->nodes = kdc_arena_alloc(m->arena, sizeof(kdc_keras_node));
  l->nodes[0].n_out = 1;
  l->nodes[0].out = kdc_arena_memdup(m->arena, shape, sizeof *shape);
}

/* A layer's `dtype` (Keras 3: a string or a DTypePolicy / FloatDTypePolicy
 * object; tf.keras 2: a Policy object).  kdc computes in float32 whatever
 * float policy a layer names (docs/frontend.md, "Dtype policies");
 * quantized policies (int8/float8 kernels with scales) are refused, and so
 * is a name Keras does not know (Keras raises ValueError). */
static const char *const KNOWN_DTYPES[] = {
    "float32", "float16", "bfloat16", "float64", "mixed_float16", "mixed_bfloat16", "_infer",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "string"};

static kdc_status check_dtype_policy(kdc_keras_model *m, json_object *cfg, const char *lloc) {
  json_object *o = kdc_fe_get(cfg, "dtype");
  if (!o || kdc_fe_is_null(o)) return NULL;
  const char *at = kdc_fe_join(m->arena, lloc, "config.dtype"), *cn;
  const char *name = kdc_fe_dtype_name(o, &cn);
  if (!name)
    return kdc_fe_err(m, KDC_INVALID_INPUT, at, "expected a dtype name or a dtype policy object");
  if ((cn && strstr(cn, "Quantized")) || strstr(name, "_from_"))
    return kdc_fe_err(m, KDC_UNSUPPORTED, at,
                      "quantized dtype policy \"%s\" is not supported (kdc computes float32 "
                      "from float weights)", name);
  for (size_t i = 0; i < sizeof KNOWN_DTYPES / sizeof *KNOWN_DTYPES; i++)
    if (!strcmp(name, KNOWN_DTYPES[i])) return NULL;
  return kdc_fe_err(m, KDC_INVALID_INPUT, at, "unknown dtype policy \"%s\"", name);
}

/* Pass 1 for one entry: class, name, config, nested model. */
static kdc_status parse_layer(kdc_keras_model *m, json_object *entry, const char *lloc,
                              kdc_keras_layer *l) {
  if (!json_object_is_type(entry, json_type_object))
    return kdc_fe_err(m, KDC_INVALID_INPUT, lloc, "expected a layer object");
  const char *cls = str_or_null(kdc_fe_get(entry, "class_name"));
  if (!cls)
    return kdc_fe_err(m, KDC_INVALID_INPUT, kdc_fe_join(m->arena, lloc, "class_name"),
                      "expected the layer's class name (a string)");
  json_object *cfg = kdc_fe_get(entry, "config");
  if (!json_object_is_type(cfg, json_type_object) &&
      !(json_object_is_type(cfg, json_type_array) && !strcmp(cls, "Sequential")))
    return kdc_fe_err(m, KDC_INVALID_INPUT, kdc_fe_join(m->arena, lloc, "config"),
                      "expected the layer's config object");
  const char *name = m->sequential ? str_or_null(kdc_fe_get(cfg, "name"))
                                   : str_or_null(kdc_fe_get(entry, "name"));
  if (!name) name = m->sequential ? str_or_null(kdc_fe_get(entry, "name"))
                                  : str_or_null(kdc_fe_get(cfg, "name"));
  if (!name) name = auto_name(m, cls);
  if (find_layer(m, name) >= 0)
    return kdc_fe_err(m, KDC_INVALID_INPUT, lloc,
                      "layer name \"%s\" is used twice in model \"%s\"; Keras requires unique "
                      "names",
                      name, m->name);
  l->class_name = kdc_arena_strdup(m->arena, cls);
  l->name = kdc_arena_strdup(m->arena, name);
  l->loc = lloc;
  l->config = json_object_is_type(cfg, json_type_object) ? cfg : NULL;
  l->model = m;
  l->path = m->sequential ? kdc_arena_printf(m->arena, "%s/%s", m->name, name) : l->name;
  json_object *tr = kdc_fe_get(cfg, "trainable");
  l->trainable = m->trainable &&
                 (!tr || !json_object_is_type(tr, json_type_boolean) || json_object_get_boolean(tr));
  /* Keras operations share class names with layers (Add, Reshape, ...) */
  const char *module = str_or_null(kdc_fe_get(entry, "module"));
  l->cls = kdc_fe_is_op_module(module) ? kdc_fe_find_op_class(cls) : kdc_fe_find_class(cls);
  if (!l->cls && !module) l->cls = kdc_fe_find_op_class(cls);
  if (!l->cls || !l->cls->infer) return class_err(m, entry, lloc, cls, name);
  KDC_RETURN_IF_ERROR(check_dtype_policy(m, cfg, lloc));
  if (is_model_class(cls)) {
    kdc_keras_model *sub = kdc_arena_alloc(m->arena, sizeof *sub);
    sub->arena = m->arena;
    sub->parent = m;
    sub->format = m->format;
    sub->tk2_topology = m->tk2_topology;
    sub->trainable = l->trainable;
    l->sub = sub;
    KDC_RETURN_IF_ERROR(kdc_fe_parse_model(sub, entry, lloc));
  }
  return NULL;
}

/* ---- references ---------------------------------------------------------- */

typedef struct refbuf {
  kdc_keras_ref *r;
  const char **kwname;
  size_t n, cap, cap2;
} refbuf;

/* Resolves [name, node, tensor] at |at| into |out| (node index corrected). */
static kdc_status resolve(kdc_keras_model *m, json_object *triple, const char *at,
                          kdc_keras_ref *out) {
  const char *name = str_or_null(json_object_array_get_idx(triple, 0));
  json_object *jn = json_object_array_get_idx(triple, 1);
  json_object *jt = json_object_array_get_idx(triple, 2);
  if (!name || json_object_array_length(triple) < 3 || !json_object_is_type(jn, json_type_int) ||
      !json_object_is_type(jt, json_type_int))
    return kdc_fe_err(m, KDC_INVALID_INPUT, at,
                      "expected a tensor reference [layer_name, node_index, tensor_index]");
  int li = find_layer(m, name);
  if (li < 0)
    return kdc_fe_err(m, KDC_INVALID_INPUT, at, "unknown layer \"%s\" in model \"%s\"", name,
                      m->name);
  kdc_keras_layer *src = &m->layers[li];
  int node = json_object_get_int(jn), tensor = json_object_get_int(jt);
  /* A nested model starts with one built-in node (KERAS.md 3.1); Python
   * indexing makes -1 the last node, as in Keras' deserializer. */
  if (src->sub && (!src->sub->sequential || m->tk2_topology)) {
    node -= 1;
    if (node < 0) node += src->n_nodes;
  }
  if (node < 0 || node >= src->n_nodes || tensor < 0)
    return kdc_fe_err(m, KDC_INVALID_INPUT, at,
                      "layer \"%s\" has no node %d (it has %d) or tensor %d", name,
                      json_object_get_int(jn), src->n_nodes, tensor);
  out->layer = li;
  out->node = node;
  out->tensor = tensor;
  return NULL;
}

static kdc_status push_ref(kdc_keras_model *m, refbuf *b, json_object *triple, const char *at,
                           const char *kwname) {
  KDC_GROW(b->r, b->cap, b->n + 1);
  KDC_GROW(b->kwname, b->cap2, b->n + 1);
  b->kwname[b->n] = kwname;
  KDC_RETURN_IF_ERROR(resolve(m, triple, at, &b->r[b->n]));
  b->n++;
  return NULL;
}

/* Keras 3: every __keras_tensor__ under |v|, depth first, in order. */
static kdc_status walk_k3(kdc_keras_model *m, json_object *v, const char *at, refbuf *b,
                          const char *kwname) {
  if (json_object_is_type(v, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(v); i++)
      KDC_RETURN_IF_ERROR(walk_k3(m, json_object_array_get_idx(v, i),
                                  kdc_arena_printf(m->arena, "%s[%zu]", at, i), b, kwname));
    return NULL;
  }
  if (!json_object_is_type(v, json_type_object)) return NULL;
  const char *cls = str_or_null(kdc_fe_get(v, "class_name"));
  if (cls && !strcmp(cls, "__keras_tensor__")) {
    json_object *h = kdc_fe_get(kdc_fe_get(v, "config"), "keras_history");
    const char *hat = kdc_fe_join(m->arena, at, "config.keras_history");
    if (!json_object_is_type(h, json_type_array))
      return kdc_fe_err(m, KDC_INVALID_INPUT, hat, "expected [layer_name, node_index, tensor_index]");
    return push_ref(m, b, h, hat, kwname);
  }
  json_object_object_foreach(v, key, val) {
    KDC_RETURN_IF_ERROR(walk_k3(m, val, kdc_fe_join(m->arena, at, key), b, kwname));
  }
  return NULL;
}

static bool is_tk2_triple(json_object *v) {
  return json_object_is_type(v, json_type_array) && json_object_array_length(v) >= 3 &&
         json_object_array_length(v) <= 4 &&
         json_object_is_type(json_object_array_get_idx(v, 0), json_type_string) &&
         json_object_is_type(json_object_array_get_idx(v, 1), json_type_int) &&
         json_object_is_type(json_object_array_get_idx(v, 2), json_type_int);
}

/* tf.keras 2: tensors inside a call's kwargs are 3-lists. */
static kdc_status walk_tk2_kwargs(kdc_keras_model *m, json_object *v, const char *at, refbuf *b,
                                  const char *kwname) {
  if (is_tk2_triple(v)) return push_ref(m, b, v, at, kwname);
  if (json_object_is_type(v, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(v); i++)
      KDC_RETURN_IF_ERROR(walk_tk2_kwargs(m, json_object_array_get_idx(v, i),
                                          kdc_arena_printf(m->arena, "%s[%zu]", at, i), b, kwname));
  }
  return NULL;
}

/* Arena copy of |n| bytes (|p| may be NULL when |n| is 0). */
static void *dup(kdc_keras_model *m, const void *p, size_t n) {
  void *d = kdc_arena_alloc(m->arena, n + sizeof(void *));
  if (n) memcpy(d, p, n);
  return d;
}

/* Pass 1 bis: sizes |l|'s node array from its inbound_nodes list. */
static void count_nodes(kdc_keras_model *m, json_object *entry, kdc_keras_layer *l) {
  if (!strcmp(l->class_name, "InputLayer")) return;
  json_object *nodes = kdc_fe_get(entry, "inbound_nodes");
  l->n_nodes = json_object_is_type(nodes, json_type_array) ? (int)json_object_array_length(nodes) : 0;
  l->nodes = kdc_arena_alloc(m->arena, sizeof(kdc_keras_node) * (size_t)(l->n_nodes + 1));
}

/* Pass 2 for one layer: its inbound nodes. */
static kdc_status parse_nodes(kdc_keras_model *m, json_object *entry, kdc_keras_layer *l) {
  if (!strcmp(l->class_name, "InputLayer")) return NULL; /* node made in pass 1 */
  const char *nloc = kdc_fe_join(m->arena, l->loc, "inbound_nodes");
  json_object *nodes = kdc_fe_get(entry, "inbound_nodes");
  if (kdc_fe_is_null(nodes)) return NULL;
  if (!json_object_is_type(nodes, json_type_array))
    return kdc_fe_err(m, KDC_INVALID_INPUT, nloc, "expected a list of nodes");
  /* l->nodes was sized in pass 1 (count_nodes), so references to layers
   * listed later can be checked. */
  for (int j = 0; j < l->n_nodes; j++) {
    json_object *nd = json_object_array_get_idx(nodes, (size_t)j);
    const char *at = kdc_arena_printf(m->arena, "%s[%d]", nloc, j);
    refbuf pos = {0}, kw = {0};
    kdc_status st = NULL;
    kdc_keras_node *node = &l->nodes[j];
    if (json_object_is_type(nd, json_type_object)) {
      node->args = kdc_fe_get(nd, "args");
      st = walk_k3(m, node->args, kdc_fe_join(m->arena, at, "args"), &pos, NULL);
      json_object *kwargs = kdc_fe_get(nd, "kwargs");
      node->kwargs = kwargs;
      if (!st && json_object_is_type(kwargs, json_type_object)) {
        json_object_object_foreach(kwargs, key, val) {
          st = walk_k3(m, val, kdc_fe_join(m->arena, at, kdc_arena_printf(m->arena, "kwargs.%s", key)),
                       &kw, kdc_arena_strdup(m->arena, key));
          if (st) break;
        }
      }
    } else if (json_object_is_type(nd, json_type_array)) {
      for (size_t e = 0; !st && e < json_object_array_length(nd); e++) {
        json_object *ent = json_object_array_get_idx(nd, e);
        const char *eat = kdc_arena_printf(m->arena, "%s[%zu]", at, e);
        if (!is_tk2_triple(ent)) {
          st = kdc_fe_err(m, KDC_INVALID_INPUT, eat,
                          "expected [layer_name, node_index, tensor_index, kwargs]");
          break;
        }
        st = push_ref(m, &pos, ent, eat, NULL);
        json_object *kwargs = json_object_array_get_idx(ent, 3);
        if (!st && json_object_is_type(kwargs, json_type_object)) {
          if (!node->kwargs) node->kwargs = kwargs;
          json_object_object_foreach(kwargs, key, val) {
            st = walk_tk2_kwargs(m, val, kdc_arena_printf(m->arena, "%s[3].%s", eat, key), &kw,
                                 kdc_arena_strdup(m->arena, key));
            if (st) break;
          }
        }
      }
    } else {
      st = kdc_fe_err(m, KDC_INVALID_INPUT, at,
                      "expected a node ({\"args\", \"kwargs\"} or a list of inputs)");
    }
    if (!st && pos.n == 0 && kw.n == 0)
      st = kdc_fe_err(m, KDC_INVALID_INPUT, at, "the call of layer \"%s\" has no input tensor",
                      l->name);
    if (!st) {
      node->n_in = (int)pos.n;
      node->in = dup(m, pos.r, sizeof(kdc_keras_ref) * pos.n);
      node->n_kw = (int)kw.n;
      node->kw = dup(m, kw.r, sizeof(kdc_keras_ref) * kw.n);
      node->kw_names = dup(m, kw.kwname, sizeof(char *) * kw.n);
    }
    free(pos.r), free(pos.kwname), free(kw.r), free(kw.kwname);
    KDC_RETURN_IF_ERROR(st);
  }
  return NULL;
}

/* input_layers / output_layers: a triple, a list or a dict of them. */
static kdc_status parse_io(kdc_keras_model *m, json_object *v, const char *at, refbuf *b) {
  if (json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0 &&
      json_object_is_type(json_object_array_get_idx(v, 0), json_type_string))
    return push_ref(m, b, v, at, NULL);
  if (json_object_is_type(v, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(v); i++)
      KDC_RETURN_IF_ERROR(parse_io(m, json_object_array_get_idx(v, i),
                                   kdc_arena_printf(m->arena, "%s[%zu]", at, i), b));
    return NULL;
  }
  if (json_object_is_type(v, json_type_object)) {
    /* Keras flattens dicts in sorted key order. */
    size_t n = (size_t)json_object_object_length(v), k = 0;
    const char **keys = kdc_xcalloc(n + 1, sizeof(char *));
    json_object_object_foreach(v, key, val) {
      (void)val;
      keys[k++] = key;
    }
    for (size_t i = 1; i < n; i++)
      for (size_t j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
        const char *t = keys[j];
        keys[j] = keys[j - 1];
        keys[j - 1] = t;
      }
    kdc_status st = NULL;
    for (size_t i = 0; i < n && !st; i++)
      st = parse_io(m, kdc_fe_get(v, keys[i]), kdc_fe_join(m->arena, at, keys[i]), b);
    free(keys);
    return st;
  }
  return kdc_fe_err(m, KDC_INVALID_INPUT, at,
                    "expected [layer_name, node_index, tensor_index] or a list of them");
}

/* ---- model envelopes ----------------------------------------------------- */

/* The input shape of a nested model |e| (Sequential, Functional or Model)
 * that is the first layer of a Sequential without an InputLayer: Keras
 * builds the outer model on the nested model's own input (a legacy
 * Sequential's first layer may be a Sequential).  |loc| locates |e|. */
static bool nested_input_shape(kdc_keras_model *m, json_object *e, const char *loc,
                               kdc_kshape *out, kdc_status *st, int depth) {
  const char *cls = str_or_null(kdc_fe_get(e, "class_name"));
  json_object *cfg = kdc_fe_get(e, "config");
  const char *cloc = kdc_fe_join(m->arena, loc, "config");
  *st = NULL;
  if (!cls || depth > 32) return false;
  bool bare = json_object_is_type(cfg, json_type_array); /* legacy Sequential */
  json_object *layers = bare ? cfg : kdc_fe_get(cfg, "layers");
  const char *lloc = bare ? cloc : kdc_fe_join(m->arena, cloc, "layers");
  if (!json_object_is_type(layers, json_type_array) || json_object_array_length(layers) == 0)
    return false;
  size_t pick = 0;
  if (strcmp(cls, "Sequential")) { /* Functional / Model: its first input layer */
    if (strcmp(cls, "Functional") && strcmp(cls, "Model")) return false;
    json_object *il = kdc_fe_get(cfg, "input_layers");
    while (json_object_is_type(il, json_type_array) && json_object_array_length(il) > 0 &&
           !json_object_is_type(json_object_array_get_idx(il, 0), json_type_string))
      il = json_object_array_get_idx(il, 0);
    const char *name = json_object_is_type(il, json_type_array)
                           ? str_or_null(json_object_array_get_idx(il, 0)) : NULL;
    bool hit = false;
    for (size_t i = 0; name && i < json_object_array_length(layers) && !hit; i++) {
      json_object *li = json_object_array_get_idx(layers, i);
      const char *ln = str_or_null(kdc_fe_get(li, "name"));
      if (!ln) ln = str_or_null(kdc_fe_get(kdc_fe_get(li, "config"), "name"));
      if (ln && !strcmp(ln, name)) pick = i, hit = true;
    }
    if (!hit) return false;
  }
  json_object *first = json_object_array_get_idx(layers, pick);
  const char *floc = kdc_arena_printf(m->arena, "%s[%zu]", lloc, pick);
  const char *fcloc = kdc_fe_join(m->arena, floc, "config");
  if (input_shape_of(m, kdc_fe_get(first, "config"), fcloc, out, st)) return true;
  if (!strcmp(cls, "Sequential") && !kdc_fe_is_null(kdc_fe_get(cfg, "build_input_shape"))) {
    *st = kdc_fe_parse_shape(m, kdc_fe_get(cfg, "build_input_shape"),
                             kdc_fe_join(m->arena, cloc, "build_input_shape"), out);
    return true;
  }
  return nested_input_shape(m, first, floc, out, st, depth + 1);
}

static kdc_status parse_sequential(kdc_keras_model *m, json_object *cfg, const char *cloc) {
  json_object *layers = cfg;
  const char *lloc = cloc;
  if (json_object_is_type(cfg, json_type_object)) {
    layers = kdc_fe_get(cfg, "layers");
    lloc = kdc_fe_join(m->arena, cloc, "layers");
  }
  if (!json_object_is_type(layers, json_type_array))
    return kdc_fe_err(m, KDC_INVALID_INPUT, lloc, "expected the list of layers");
  size_t n = json_object_array_length(layers);
  if (n == 0) return kdc_fe_err(m, KDC_INVALID_INPUT, lloc, "the Sequential model has no layers");
  m->layers = kdc_arena_alloc(m->arena, sizeof(kdc_keras_layer) * (n + 1));
  json_object *first = json_object_array_get_idx(layers, 0);
  const char *first_cls = str_or_null(kdc_fe_get(first, "class_name"));
  bool has_input = first_cls && !strcmp(first_cls, "InputLayer");
  if (!has_input) {
    /* Synthesize the InputLayer Keras builds from the first layer's shape. */
    kdc_kshape s;
    kdc_status st = NULL;
    json_object *fcfg = kdc_fe_get(first, "config");
    const char *floc = kdc_arena_printf(m->arena, "%s[0].config", lloc);
    bool found = input_shape_of(m, fcfg, floc, &s, &st);
    if (!found && !kdc_fe_is_null(kdc_fe_get(cfg, "build_input_shape"))) {
      found = true;
      st = kdc_fe_parse_shape(m, kdc_fe_get(cfg, "build_input_shape"),
                              kdc_fe_join(m->arena, cloc, "build_input_shape"), &s);
    }
    json_object *bc = kdc_fe_get(kdc_fe_get(first, "build_config"), "input_shape");
    if (!found && !kdc_fe_is_null(bc)) {
      found = true;
      st = kdc_fe_parse_shape(m, bc, kdc_arena_printf(m->arena, "%s[0].build_config.input_shape", lloc), &s);
    }
    if (!found && !st)
      found = nested_input_shape(m, first, kdc_arena_printf(m->arena, "%s[0]", lloc), &s, &st, 0);
    KDC_RETURN_IF_ERROR(st);
    if (!found)
      return kdc_fe_err(m, KDC_INVALID_INPUT, kdc_arena_printf(m->arena, "%s[0]", lloc),
                        "the Sequential model has no input shape: no InputLayer, no "
                        "batch_input_shape on its first layer and no build_input_shape");
    kdc_keras_layer *in = &m->layers[0];
    const char *fname = str_or_null(kdc_fe_get(fcfg, "name"));
    in->class_name = "InputLayer";
    in->name = m->format == KDC_KERAS_K3 || !fname ? auto_name(m, "InputLayer")
                                                   : kdc_arena_printf(m->arena, "%s_input", fname);
    in->loc = kdc_arena_printf(m->arena, "%s[0]", lloc);
    in->path = in->name;
    in->model = m;
    in->trainable = m->trainable;
    in->cls = kdc_fe_find_class("InputLayer");
    make_input_node(m, in, &s);
    m->n_layers = 1;
  }
  for (size_t i = 0; i < n; i++) {
    kdc_keras_layer *l = &m->layers[m->n_layers];
    json_object *entry = json_object_array_get_idx(layers, i);
    KDC_RETURN_IF_ERROR(parse_layer(m, entry, kdc_arena_printf(m->arena, "%s[%zu]", lloc, i), l));
    m->n_layers++;
    if (!strcmp(l->class_name, "InputLayer")) {
      if (i != 0)
        return kdc_fe_err(m, KDC_INVALID_INPUT, l->loc,
                          "an InputLayer may only be the first layer of a Sequential model");
      kdc_kshape s;
      kdc_status st = NULL;
      if (!input_shape_of(m, l->config, kdc_fe_join(m->arena, l->loc, "config"), &s, &st))
        return kdc_fe_err(m, KDC_INVALID_INPUT, kdc_fe_join(m->arena, l->loc, "config"),
                          "expected batch_shape or batch_input_shape");
      KDC_RETURN_IF_ERROR(st);
      make_input_node(m, l, &s);
      continue;
    }
    l->n_nodes = 1;
    l->nodes = kdc_arena_alloc(m->arena, sizeof(kdc_keras_node));
    l->nodes[0].n_in = 1;
    l->nodes[0].in = kdc_arena_alloc(m->arena, sizeof(kdc_keras_ref));
    l->nodes[0].in[0] = (kdc_keras_ref){m->n_layers - 2, 0, 0};
  }
  m->n_inputs = m->n_outputs = 1;
  m->inputs = kdc_arena_alloc(m->arena, sizeof(kdc_keras_ref));
  m->outputs = kdc_arena_alloc(m->arena, sizeof(kdc_keras_ref));
  m->outputs[0].layer = m->n_layers - 1;
  return NULL;
}

static kdc_status parse_functional(kdc_keras_model *m, json_object *cfg, const char *cloc) {
  const char *lloc = kdc_fe_join(m->arena, cloc, "layers");
  json_object *layers = kdc_fe_get(cfg, "layers");
  if (!json_object_is_type(layers, json_type_array))
    return kdc_fe_err(m, KDC_INVALID_INPUT, lloc, "expected the list of layers");
  size_t n = json_object_array_length(layers);
  m->layers = kdc_arena_alloc(m->arena, sizeof(kdc_keras_layer) * (n + 1));
  for (size_t i = 0; i < n; i++) {
    kdc_keras_layer *l = &m->layers[i];
    KDC_RETURN_IF_ERROR(parse_layer(m, json_object_array_get_idx(layers, i),
                                    kdc_arena_printf(m->arena, "%s[%zu]", lloc, i), l));
    m->n_layers++;
    if (!strcmp(l->class_name, "InputLayer")) {
      kdc_kshape s;
      kdc_status st = NULL;
      if (!input_shape_of(m, l->config, kdc_fe_join(m->arena, l->loc, "config"), &s, &st))
        return kdc_fe_err(m, KDC_INVALID_INPUT, kdc_fe_join(m->arena, l->loc, "config"),
                          "expected batch_shape or batch_input_shape");
      KDC_RETURN_IF_ERROR(st);
      make_input_node(m, l, &s);
    }
    count_nodes(m, json_object_array_get_idx(layers, i), l);
  }
  for (size_t i = 0; i < n; i++)
    KDC_RETURN_IF_ERROR(parse_nodes(m, json_object_array_get_idx(layers, i), &m->layers[i]));
  refbuf in = {0}, out = {0};
  const char *iat = kdc_fe_join(m->arena, cloc, "input_layers");
  const char *oat = kdc_fe_join(m->arena, cloc, "output_layers");
  kdc_status st = parse_io(m, kdc_fe_get(cfg, "input_layers"), iat, &in);
  if (!st) st = parse_io(m, kdc_fe_get(cfg, "output_layers"), oat, &out);
  if (!st && in.n == 0) st = kdc_fe_err(m, KDC_INVALID_INPUT, iat, "the model has no input");
  if (!st && out.n == 0) st = kdc_fe_err(m, KDC_INVALID_INPUT, oat, "the model has no output");
  for (size_t i = 0; !st && i < in.n; i++)
    if (strcmp(m->layers[in.r[i].layer].class_name, "InputLayer"))
      st = kdc_fe_err(m, KDC_INVALID_INPUT, kdc_arena_printf(m->arena, "%s[%zu]", iat, i),
                      "model input \"%s\" is not an InputLayer", m->layers[in.r[i].layer].name);
  if (!st) {
    m->n_inputs = (int)in.n;
    m->inputs = dup(m, in.r, sizeof(kdc_keras_ref) * in.n);
    m->n_outputs = (int)out.n;
    m->outputs = dup(m, out.r, sizeof(kdc_keras_ref) * out.n);
  }
  free(in.r), free(in.kwname), free(out.r), free(out.kwname);
  return st;
}

/* ---- shape inference driver ---------------------------------------------- */

static kdc_status run_node(kdc_keras_model *m, kdc_keras_layer *l, int j) {
  kdc_keras_node *node = &l->nodes[j];
  kdc_kshape in[64], kw[16];
  kdc_kshape *pin = node->n_in <= 64 ? in : kdc_xcalloc((size_t)node->n_in, sizeof *pin);
  if (node->n_kw > 16)
    return kdc_fe_layer_err(l, KDC_UNSUPPORTED, "too many tensor keyword arguments (%d)", node->n_kw);
  for (int k = 0; k < node->n_in + node->n_kw; k++) {
    kdc_keras_ref r = k < node->n_in ? node->in[k] : node->kw[k - node->n_in];
    kdc_keras_node *src = &m->layers[r.layer].nodes[r.node];
    if (r.tensor >= src->n_out) {
      if (pin != in) free(pin);
      return kdc_fe_layer_err(l, KDC_INVALID_INPUT,
                              "input %d refers to tensor %d of layer \"%s\", which has %d output(s)",
                              k, r.tensor, m->layers[r.layer].name, src->n_out);
    }
    if (k < node->n_in)
      pin[k] = src->out[r.tensor];
    else
      kw[k - node->n_in] = src->out[r.tensor];
  }
  kdc_infer_args a = {m, l, node, j, pin, kw};
  kdc_status st = l->cls->infer(&a);
  if (pin != in) free(pin);
  /* every shape after this one is computed from it: keep products in range */
  for (int i = 0; !st && i < node->n_out; i++) {
    int64_t numel;
    char b[160];
    if (!kdc_kshape_known_numel(&node->out[i], &numel))
      st = kdc_fe_layer_err(l, KDC_INVALID_INPUT, "output %d of shape %s has more than 2^40 elements "
                            "(kdc's limit per tensor)", i, kdc_kshape_str(&node->out[i], b, sizeof b));
  }
  return st;
}

static bool ready(const kdc_keras_model *m, const kdc_keras_node *node) {
  for (int k = 0; k < node->n_in + node->n_kw; k++) {
    kdc_keras_ref r = k < node->n_in ? node->in[k] : node->kw[k - node->n_in];
    if (!m->layers[r.layer].nodes[r.node].done) return false;
  }
  return true;
}

static kdc_status infer_all(kdc_keras_model *m) {
  size_t total = 0;
  for (int i = 0; i < m->n_layers; i++) total += (size_t)m->layers[i].n_nodes;
  m->order = kdc_arena_alloc(m->arena, sizeof(kdc_keras_ref) * (total + 1));
  bool progress = true;
  while (progress) {
    progress = false;
    for (int i = 0; i < m->n_layers; i++) {
      kdc_keras_layer *l = &m->layers[i];
      for (int j = 0; j < l->n_nodes; j++) {
        kdc_keras_node *node = &l->nodes[j];
        if (node->done || !ready(m, node)) continue;
        KDC_RETURN_IF_ERROR(run_node(m, l, j));
        node->done = true;
        node->tensor_base = m->n_tensors;
        m->n_tensors += node->n_out;
        m->order[m->n_order++] = (kdc_keras_ref){i, j, 0};
        progress = true;
      }
    }
  }
  for (int i = 0; i < m->n_layers; i++) {
    kdc_keras_layer *l = &m->layers[i];
    for (int j = 0; j < l->n_nodes; j++) {
      kdc_keras_node *node = &l->nodes[j];
      if (node->done) continue;
      for (int k = 0; k < node->n_in + node->n_kw; k++) {
        kdc_keras_ref r = k < node->n_in ? node->in[k] : node->kw[k - node->n_in];
        if (!m->layers[r.layer].nodes[r.node].done)
          return kdc_fe_err(m, KDC_INVALID_INPUT,
                            kdc_arena_printf(m->arena, "%s.inbound_nodes[%d]", l->loc, j),
                            "input \"%s\" (node %d) of layer \"%s\" is never computed: the "
                            "graph has a loop or a disconnected node",
                            m->layers[r.layer].name, r.node, l->name);
      }
    }
  }
  for (int k = 0; k < m->n_outputs; k++) {
    kdc_keras_ref r = m->outputs[k];
    if (r.tensor >= m->layers[r.layer].nodes[r.node].n_out)
      return kdc_fe_err(m, KDC_INVALID_INPUT, m->loc, "output %d refers to tensor %d of layer "
                        "\"%s\", which has fewer outputs", k, r.tensor, m->layers[r.layer].name);
  }
  return NULL;
}

static kdc_status parse_model(kdc_keras_model *m, json_object *env, const char *loc);

kdc_status kdc_fe_parse_model(kdc_keras_model *m, json_object *env, const char *loc) {
  kdc_status st = parse_model(m, env, loc);
  kdc_strindex_free(&m->layer_index);  /* names are looked up only while parsing */
  m->n_indexed = 0;
  return st;
}

static kdc_status parse_model(kdc_keras_model *m, json_object *env, const char *loc) {
  m->loc = loc;
  const char *cls = str_or_null(kdc_fe_get(env, "class_name"));
  const char *cat = kdc_fe_join(m->arena, loc, "class_name");
  if (!cls)
    return kdc_fe_err(m, KDC_INVALID_INPUT, cat,
                      "expected the model's class name (\"Functional\", \"Sequential\" or "
                      "\"Model\")");
  if (!is_model_class(cls))
    return kdc_fe_err(m, KDC_INVALID_INPUT, cat,
                      "expected a model class (\"Functional\", \"Sequential\" or \"Model\"), got "
                      "\"%s\"",
                      cls);
  m->class_name = kdc_arena_strdup(m->arena, cls);
  m->sequential = !strcmp(cls, "Sequential");
  json_object *cfg = kdc_fe_get(env, "config");
  const char *cloc = kdc_fe_join(m->arena, loc, "config");
  const char *name = str_or_null(kdc_fe_get(cfg, "name"));
  m->name = kdc_arena_strdup(m->arena, name ? name : (m->sequential ? "sequential" : "functional"));
  if (!m->parent) m->trainable = true;
  json_object *tr = kdc_fe_get(cfg, "trainable");
  if (tr && json_object_is_type(tr, json_type_boolean) && !json_object_get_boolean(tr))
    m->trainable = false;
  if (m->sequential) {
    if (!json_object_is_type(cfg, json_type_object) && !json_object_is_type(cfg, json_type_array))
      return kdc_fe_err(m, KDC_INVALID_INPUT, cloc, "expected the model's config");
    KDC_RETURN_IF_ERROR(parse_sequential(m, cfg, cloc));
  } else {
    if (!json_object_is_type(cfg, json_type_object))
      return kdc_fe_err(m, KDC_INVALID_INPUT, cloc, "expected the model's config object");
    KDC_RETURN_IF_ERROR(parse_functional(m, cfg, cloc));
  }
  if (!m->parent && m->load_opt) KDC_RETURN_IF_ERROR(kdc_fe_apply_input_shapes(m));
  return infer_all(m);
}

static void collect(kdc_keras_model *top, kdc_keras_model *m) {
  for (int i = 0; i < m->n_layers; i++) {
    kdc_keras_layer *l = &m->layers[i];
    if (l->sub) {
      collect(top, l->sub);
      continue;
    }
    for (int k = 0; k < l->n_vars; k++) {
      KDC_GROW(top->vars, top->cap_vars, (size_t)top->n_vars + 1);
      l->vars[k]->gid = top->n_vars;
      top->vars[top->n_vars++] = l->vars[k];
    }
  }
}

void kdc_fe_collect_vars(kdc_keras_model *top) {
  top->n_vars = 0;
  collect(top, top);
}
