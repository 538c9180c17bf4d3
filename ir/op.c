/* The op table generated from ir/ops.def: names, arities, flags. */
#include <assert.h>
#include <string.h>

#include "ir/ir.h"

static const char *const op_names[] = {
#define X(e, name, arity, flags) name,
#include "ir/ops.def"
#undef X
};
static const int op_arity[] = {
#define X(e, name, arity, flags) arity,
#include "ir/ops.def"
#undef X
};
static const unsigned op_flags[] = {
#define X(e, name, arity, flags) flags,
#include "ir/ops.def"
#undef X
};
static_assert(sizeof op_names / sizeof op_names[0] == KDC_OP_COUNT, "op table size");

const char *kdc_op_name(kdc_op op) { return (unsigned)op < KDC_OP_COUNT ? op_names[op] : "?"; }
int kdc_op_arity(kdc_op op) { return op_arity[op]; }
unsigned kdc_op_flags(kdc_op op) { return op_flags[op]; }

bool kdc_op_from_name(const char *s, kdc_op *out) {
  for (int i = 0; i < KDC_OP_COUNT; i++)
    if (strcmp(s, op_names[i]) == 0) {
      *out = (kdc_op)i;
      return true;
    }
  return false;
}
