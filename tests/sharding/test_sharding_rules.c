/*
 * The op rule table (passes/sharding_rules.c): the printed rule of every op
 * kind (SPMD ops get one need_replication factor per dim and side, operand
 * first; elementwise ops share one identity rule, checked on unary, binary and
 * ternary ops; every other op of ops.def appears below), written by
 * reasoning from the rules in the file comment.  Also the projections of
 * dim shardings onto factors and back for compound (reshape) dims.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sh_test.h"

static const char text[] =
    "module @rules {\n"
    "  mesh [data=2, model=4]\n"
    "  weight \"b\" : f32[6]\n"
    "  weight \"w\" : f32[6,4]\n"
    "  func @f {\n"
    "    %x = parameter 0 input \"x\" : f32[8,6]\n"
    "    %c = constant 0 : f32[8,6]\n"
    "    %io = iota dim=0 : f32[8,6]\n"
    "    %neg = neg %x : f32[8,6]\n"
    "    %add = add %x, %c : f32[8,6]\n"
    "    %p = compare lt %x, %c : bool[8,6]\n"
    "    %sel = select %p, %x, %c : f32[8,6]\n"
    "    %v = parameter 1 weight \"b\" : f32[6]\n"
    "    %b1 = broadcast_in_dim %v dims=[1] : f32[8,6]\n"
    "    %v1 = reshape %v : f32[1,6]\n"
    "    %b2 = broadcast_in_dim %v1 dims=[0,1] : f32[8,6]\n"
    "    %r1 = reshape %x : f32[48]\n"
    "    %r2 = reshape %x : f32[2,4,6]\n"
    "    %r3 = reshape %x : f32[4,12]\n"
    "    %s = parameter 2 input \"s\" : f32[2,3]\n"
    "    %r4 = reshape %s : f32[3,2]\n"
    "    %t = transpose %x perm=[1,0] : f32[6,8]\n"
    "    %sl = slice %x start=[0,1] limit=[8,5] stride=[1,1] : f32[8,4]\n"
    "    %z = constant 0 : f32[]\n"
    "    %pd = pad %x, %z low=[0,1] high=[0,0] interior=[0,0] : f32[8,7]\n"
    "    %cc = concatenate %x, %c dim=0 : f32[16,6]\n"
    "    %rs = reduce sum %x dims=[1] : f32[8]\n"
    "    %rm = reduce max %x dims=[0] : f32[6]\n"
    "    %w = parameter 3 weight \"w\" : f32[6,4]\n"
    "    %d = dot_general %x, %w lhs_contract=[1] rhs_contract=[0] : f32[8,4]\n"
    "    %bx = parameter 4 input \"bx\" : f32[2,8,6]\n"
    "    %by = parameter 5 input \"by\" : f32[2,6,4]\n"
    "    %bd = dot_general %bx, %by lhs_batch=[0] rhs_batch=[0] lhs_contract=[2] rhs_contract=[1]"
    " : f32[2,8,4]\n"
    "    %sc = sharding_constraint %x : f32[8,6] {data,?}\n"
    "    %ar = all_reduce [model] %x : f32[8,6]\n"
    "    %ag = all_gather [model] %x dim=1 : f32[8,24]\n"
    "    %rsc = reduce_scatter [data] %x dim=0 : f32[4,6]\n"
    "    %a2a = all_to_all [data] %x split=0 concat=1 : f32[4,12]\n"
    "    %cp = collective_permute [data] %x shift=1 : f32[8,6]\n"
    "    %ss = shard_slice [model] %ag dim=1 : f32[8,6]\n"
    "    %step = constant 3 : i64[]\n"
    "    %rng = rng_uniform %step seed=7 : f32[8,6]\n"
    "    %cx = parameter 6 input \"cx\" : f32[2,5,5,3]\n"
    "    %cw = parameter 7 input \"cw\" : f32[3,3,3,4]\n"
    "    %cv = convolution %cx, %cw stride=[1,1] pad_low=[1,1] pad_high=[1,1] lhs_dilation=[1,1]"
    " rhs_dilation=[1,1] groups=1 : f32[2,5,5,4]\n"
    "    %dw = parameter 8 input \"dw\" : f32[3,3,1,6]\n"
    "    %dc = convolution %cx, %dw stride=[1,1] pad_low=[1,1] pad_high=[1,1] lhs_dilation=[1,1]"
    " rhs_dilation=[1,1] groups=3 : f32[2,5,5,6]\n"
    "    %rw = reduce_window max %cx window=[1,2,2,1] stride=[1,2,2,1] pad_low=[0,0,0,0]"
    " pad_high=[0,1,1,0] dilation=[1,1,1,1] : f32[2,3,3,3]\n"
    "    %sas = select_and_scatter max %cx, %rw window=[1,2,2,1] stride=[1,2,2,1]"
    " pad_low=[0,0,0,0] pad_high=[0,1,1,0] dilation=[1,1,1,1] : f32[2,5,5,3]\n"
    "    %gi = parameter 9 input \"gi\" : i32[4,5]\n"
    "    %ga = gather %w, %gi : f32[4,5,4]\n"
    "    %sca = scatter_add %gi, %ga : f32[6,4]\n"
    "    %rev = reverse %x dims=[1] : f32[8,6]\n"
    "    %xs3 = parameter 10 input \"xs3\" : f32[3,8,6]\n"
    "    %scn = scan @cell %x, %xs3, %w length=3 carries=1 xs=1 : f32[3,8,6]\n"
    "    return %sel\n"
    "  }\n"
    "  func @cell {\n"
    "    %s = parameter 0 input \"s\" : f32[8,6]\n"
    "    %xt = parameter 1 input \"x_t\" : f32[8,6]\n"
    "    %cw = parameter 2 input \"w\" : f32[6,4]\n"
    "    %sn = add %s, %xt : f32[8,6]\n"
    "    return %sn, %sn\n"
    "  }\n"
    "}\n";

static const char *const want[] = {
    "()->([i,j]) {i=8,j=6}",                                       /* parameter */
    "()->([i,j]) {i=8,j=6}",                                       /* constant */
    "()->([i,j]) {i=8,j=6}",                                       /* iota */
    "([i,j])->([i,j]) {i=8,j=6} pass_through",                     /* neg */
    "([i,j],[i,j])->([i,j]) {i=8,j=6} pass_through",               /* add */
    "([i,j],[i,j])->([i,j]) {i=8,j=6} pass_through",               /* compare */
    "([i,j],[i,j],[i,j])->([i,j]) {i=8,j=6} pass_through",         /* select */
    "()->([i]) {i=6}",                                             /* parameter */
    "([j])->([i,j]) {i=8,j=6} broadcast",                          /* broadcast */
    "([i])->([_,i]) {i=6} pass_through",                           /* reshape [6]->[1,6] */
    "([_,j])->([i,j]) {i=8,j=6} broadcast",                        /* broadcast of 1 */
    "([i,j])->([ij]) {i=8,j=6}",                                   /* reshape merge */
    "([ij,k])->([i,j,k]) {i=2,j=4,k=6}",                           /* reshape split */
    "([ij,k])->([i,jk]) {i=4,j=2,k=6}",                            /* reshape gcd */
    "()->([i,j]) {i=2,j=3}",                                       /* parameter */
    "([i,k])->([j,l]) {i=2,j=3,k=3,l=2} need_replication={i,j,k,l}", /* reshape stuck */
    "([j,i])->([i,j]) {i=6,j=8} pass_through",                     /* transpose */
    "([i,j])->([i,k]) {i=8,j=6,k=4} need_replication={j,k}",       /* slice */
    "()->([]) {}",                                                 /* scalar constant */
    "([i,j],[])->([i,k]) {i=8,j=6,k=7} need_replication={j,k} pass_through", /* pad */
    "([i,j],[i,j])->([i,j]) {i=16,j=6} need_replication={i}",      /* concatenate */
    "([i,j])->([i]) {i=8,j=6} reduction={j}",                      /* reduce sum */
    "([i,j])->([j]) {i=8,j=6} need_replication={i}",               /* reduce max */
    "()->([i,j]) {i=6,j=4}",                                       /* parameter */
    "([i,k],[k,j])->([i,j]) {i=8,j=4,k=6} reduction={k}",          /* dot */
    "()->([i,j,k]) {i=2,j=8,k=6}",                                 /* parameter */
    "()->([i,j,k]) {i=2,j=6,k=4}",                                 /* parameter */
    "([i,j,l],[i,l,k])->([i,j,k]) {i=2,j=8,k=4,l=6} reduction={l}", /* batched dot */
    "([i,j])->([i,j]) {i=8,j=6} pass_through",                     /* sharding_constraint */
    "([i,k])->([j,l]) {i=8,j=8,k=6,l=6} need_replication={i,j,k,l}", /* all_reduce */
    "([i,k])->([j,l]) {i=8,j=8,k=6,l=24} need_replication={i,j,k,l}", /* all_gather */
    "([i,k])->([j,l]) {i=8,j=4,k=6,l=6} need_replication={i,j,k,l}", /* reduce_scatter */
    "([i,k])->([j,l]) {i=8,j=4,k=6,l=12} need_replication={i,j,k,l}", /* all_to_all */
    "([i,k])->([j,l]) {i=8,j=8,k=6,l=6} need_replication={i,j,k,l}", /* collective_permute */
    "([i,k])->([j,l]) {i=8,j=8,k=24,l=6} need_replication={i,j,k,l}", /* shard_slice */
    "()->([]) {}",                                                 /* scalar constant */
    "([])->([i,j]) {i=8,j=6}",                                     /* rng_uniform */
    "()->([i,j,k,l]) {i=2,j=5,k=5,l=3}",                           /* parameter */
    "()->([i,j,k,l]) {i=3,j=3,k=3,l=4}",                           /* parameter */
    "([i,l,n,k],[m,o,k,j])->([i,l,n,j]) {i=2,j=4,k=3,l=5,m=3,n=5,o=3} reduction={k} "
    "need_replication={m,o} halo={l,n}",                            /* convolution */
    "()->([i,j,k,l]) {i=3,j=3,k=1,l=6}",                           /* parameter */
    "([i,l,n,k],[m,o,_,j])->([i,l,n,j]) {i=2,j=6,k=3,l=5,m=3,n=5,o=3} "
    "need_replication={j,k,m,o} halo={l,n}",                        /* grouped convolution */
    "([i,j,l,n])->([i,k,m,n]) {i=2,j=5,k=3,l=5,m=3,n=3} need_replication={j,k,l,m}", /* r_w */
    "([i,j,m,p],[i,k,n,p])->([i,l,o,p]) {i=2,j=5,k=3,l=5,m=5,n=3,o=5,p=3} "
    "need_replication={j,k,l,m,n,o}",                               /* select_and_scatter */
    "()->([i,j]) {i=4,j=5}",                                       /* parameter */
    "([i,l],[j,k])->([j,k,l]) {i=6,j=4,k=5,l=4} reduction={i}",    /* gather */
    "([j,k],[j,k,l])->([i,l]) {i=6,j=4,k=5,l=4} reduction={j,k}",  /* scatter_add */
    "([i,j])->([i,k]) {i=8,j=6,k=6} need_replication={j,k}",       /* reverse */
    "()->([i,j,k]) {i=3,j=8,k=6}",                                 /* parameter */
    /* scan: the batch and the carry's features (j, the last dim of x, xs and
     * the result) pass; w's last dim is not 6, time dims need replication */
    "([i,j],[k,i,j],[l,m])->([n,i,j]) {i=8,j=6,k=3,l=6,m=4,n=3} need_replication={k,l,m,n}",
};

static void test_rule_table(void **state) {
  (void)state;
  kdc_module *m = NULL;
  kdc_status st = kdc_ir_parse_module(text, "rules.kir", &m);
  if (st) fail_msg("%s", kdc_status_message(st));
  st = kdc_ir_verify_module(m);
  if (st) fail_msg("%s", kdc_status_message(st));
  kdc_func *f = m->funcs[0];
  assert_int_equal(f->n_nodes, sizeof want / sizeof want[0]);
  bool seen[KDC_OP_COUNT] = {false};
  for (size_t v = 0; v < f->n_nodes; v++) {
    kdc_factor_rule r;
    assert_null(kdc_sharding_rule(f, (kdc_value_id)v, &r));
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    kdc_sharding_rule_print(mem, &r);
    fclose(mem);
    buf[strlen(buf) - 1] = 0; /* newline */
    if (strcmp(buf, want[v]) != 0)
      fail_msg("%%%zu %s:\n  got  %s\n  want %s", v, kdc_op_name(f->nodes[v].op), buf, want[v]);
    free(buf);
    seen[f->nodes[v].op] = true;
  }
  for (int op = 0; op < KDC_OP_COUNT; op++)
    if (!seen[op] && !(kdc_op_flags((kdc_op)op) & OPF_EW))
      fail_msg("op %s has no rule test", kdc_op_name((kdc_op)op));
  kdc_ir_module_destroy(m);
}

/* Compound dims: [8,6] -> [48] is ([i,j])->([ij]) with i=8, j=6. */
static void test_projection(void **state) {
  (void)state;
  kdc_module *m = NULL;
  assert_null(kdc_ir_parse_module(text, "rules.kir", &m));
  kdc_func *f = m->funcs[0];
  const kdc_mesh *mesh = &m->mesh;
  kdc_factor_rule r;
  assert_null(kdc_sharding_rule(f, 11, &r)); /* %r1 = reshape [8,6] -> [48] */
  kdc_factor_shardings fs;
  kdc_sharding s = sh_parse(mesh, "{(data,model)}"), o = kdc_sharding_replicated(2);
  /* result [48] split (data,model): data on i (8/2), model on i too (8/8 = 1) */
  assert_true(kdc_rule_project_in(mesh, &r, 1, &s, &fs));
  assert_int_equal(fs.n[0], 2);
  assert_int_equal(fs.n[1], 0);
  kdc_rule_project_out(mesh, &r, 0, &fs, &o);
  char buf[256];
  assert_string_equal(kdc_sharding_str(mesh, &o, buf, sizeof buf), "{(data,model),-}");
  /* operand {-,data}: j=6 gets data; on the result [ij] the major factor i is
   * unsplit, so nothing can be projected */
  s = sh_parse(mesh, "{-,data}");
  assert_true(kdc_rule_project_in(mesh, &r, 0, &s, &fs));
  assert_int_equal(fs.n[1], 1);
  o = kdc_sharding_replicated(1);
  kdc_rule_project_out(mesh, &r, 1, &fs, &o);
  assert_string_equal(kdc_sharding_str(mesh, &o, buf, sizeof buf), "{-}");
  /* model (4) does not divide j = 6: dropped */
  s = sh_parse(mesh, "{-,model}");
  assert_false(kdc_rule_project_in(mesh, &r, 0, &s, &fs));
  kdc_ir_module_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rule_table),
      cmocka_unit_test(test_projection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
