/* --mesh / --axes parsing (frontend/mesh.c): good strings, and every error
 * message checked word for word. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/layout.h"

static void expect_mesh(const char *shape, const char *axes, int naxes, const int64_t *sizes,
                        const char *const *names) {
  kdc_mesh m;
  kdc_status st = kdc_mesh_parse(shape, axes, &m);
  if (st) fail_msg("%s: %s", shape, kdc_status_message(st));
  assert_int_equal(m.naxes, naxes);
  for (int i = 0; i < naxes; i++) {
    assert_int_equal(m.sizes[i], sizes[i]);
    assert_string_equal(m.names[i], names[i]);
  }
  for (int i = naxes; i < KDC_MAX_MESH_AXES; i++) {
    assert_int_equal(m.sizes[i], 0);
    assert_int_equal(m.names[i][0], '\0');
  }
}

static void expect_error(const char *shape, const char *axes, kdc_code code,
                         const char *message) {
  kdc_mesh m;
  memset(&m, 0x5a, sizeof m);
  kdc_status st = kdc_mesh_parse(shape, axes, &m);
  if (!st) fail_msg("\"%s\" / \"%s\" parsed", shape, axes ? axes : "(null)");
  assert_string_equal(kdc_status_message(st), message);
  assert_int_equal(kdc_status_code(st), code);
  kdc_status_free(st);
  assert_int_equal(m.naxes, 0); /* left zeroed */
  assert_int_equal(m.names[0][0], '\0');
}

static void test_default_names(void **state) {
  (void)state;
  expect_mesh("8", NULL, 1, (int64_t[]){8}, (const char *[]){"data"});
  expect_mesh("2x4", NULL, 2, (int64_t[]){2, 4}, (const char *[]){"data", "model"});
  expect_mesh("8x1", NULL, 2, (int64_t[]){8, 1}, (const char *[]){"data", "model"});
  expect_mesh("2x2x2", NULL, 3, (int64_t[]){2, 2, 2},
              (const char *[]){"data", "model", "axis2"});
  expect_mesh("1x1x1x1x1x1x1x2", NULL, 8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 2},
              (const char *[]){"data", "model", "axis2", "axis3", "axis4", "axis5", "axis6",
                               "axis7"});
  expect_mesh("02x4", NULL, 2, (int64_t[]){2, 4}, (const char *[]){"data", "model"});
  expect_mesh("4096", NULL, 1, (int64_t[]){4096}, (const char *[]){"data"});
  expect_mesh("64x64", NULL, 2, (int64_t[]){64, 64}, (const char *[]){"data", "model"});
}

static void test_named_axes(void **state) {
  (void)state;
  expect_mesh("2x4", "batch,model", 2, (int64_t[]){2, 4}, (const char *[]){"batch", "model"});
  expect_mesh("2x2x2", "a,b,c", 3, (int64_t[]){2, 2, 2}, (const char *[]){"a", "b", "c"});
  expect_mesh("8", "_x9", 1, (int64_t[]){8}, (const char *[]){"_x9"});
  expect_mesh("4", "abcdefghijklmnopqrstuvwxyz01234", 1, (int64_t[]){4},
              (const char *[]){"abcdefghijklmnopqrstuvwxyz01234"}); /* 31 bytes */
}

static void test_bad_shapes(void **state) {
  (void)state;
  kdc_code E = KDC_INVALID_INPUT;
  expect_error("", NULL, E, "--mesh \"\": expected a positive integer at column 1");
  expect_error("2x", NULL, E, "--mesh \"2x\": expected a positive integer after 'x' at column 3");
  expect_error("2x4x", NULL, E,
               "--mesh \"2x4x\": expected a positive integer after 'x' at column 5");
  expect_error("x4", NULL, E, "--mesh \"x4\": expected a positive integer at column 1, got 'x'");
  expect_error("axb", NULL, E,
               "--mesh \"axb\": expected a positive integer at column 1, got 'a'");
  expect_error("-2", NULL, E, "--mesh \"-2\": expected a positive integer at column 1, got '-'");
  expect_error("+2", NULL, E, "--mesh \"+2\": expected a positive integer at column 1, got '+'");
  expect_error(" 2x4", NULL, E,
               "--mesh \" 2x4\": expected a positive integer at column 1, got ' '");
  expect_error("2x4 ", NULL, E,
               "--mesh \"2x4 \": expected 'x' between axis sizes at column 4, got ' '");
  expect_error("2x 4", NULL, E,
               "--mesh \"2x 4\": expected a positive integer after 'x' at column 3, got ' '");
  expect_error("2X4", NULL, E,
               "--mesh \"2X4\": expected a lowercase 'x' between axis sizes at column 2, got 'X'");
  expect_error("2*4", NULL, E,
               "--mesh \"2*4\": expected 'x' between axis sizes at column 2, got '*'");
  expect_error("2.5", NULL, E,
               "--mesh \"2.5\": expected 'x' between axis sizes at column 2, got '.'");
  expect_error("2xx4", NULL, E,
               "--mesh \"2xx4\": expected a positive integer after 'x' at column 3, got 'x'");
  /* kdc_status turns the tab into a space; the byte is still named */
  expect_error("2\tx4", NULL, E,
               "--mesh \"2 x4\": expected 'x' between axis sizes at column 2, got byte 0x09");
  expect_error("0x4", NULL, E,
               "--mesh \"0x4\": mesh axis size must be at least 1, got 0 at column 1");
  expect_error("2x00", NULL, E,
               "--mesh \"2x00\": mesh axis size must be at least 1, got 0 at column 3");
  expect_error("99999999999999999999999", NULL, E,
               "--mesh \"99999999999999999999999\": axis size at column 1 is larger than the "
               "4096 devices kdc supports");
  expect_error("2x4097", NULL, E,
               "--mesh \"2x4097\": axis size at column 3 is larger than the 4096 devices "
               "kdc supports");
  expect_error("64x65", NULL, E,
               "--mesh \"64x65\": the mesh has more than the 4096 devices kdc supports");
  expect_error("65536", NULL, E,  /* was an unlocated error in codegen */
               "--mesh \"65536\": axis size at column 1 is larger than the 4096 devices "
               "kdc supports");
  expect_error("1x1x1x1x1x1x1x1x1", NULL, KDC_UNSUPPORTED,
               "--mesh \"1x1x1x1x1x1x1x1x1\": more than 8 mesh axes");
}

static void test_bad_axes(void **state) {
  (void)state;
  kdc_code E = KDC_INVALID_INPUT;
  expect_error("2x4", "data", E, "--axes \"data\": 1 axis name for the 2-axis mesh \"2x4\"");
  expect_error("8", "data,model", E,
               "--axes \"data,model\": 2 axis names for the 1-axis mesh \"8\"");
  expect_error("2x4", "data,data", E,
               "--axes \"data,data\": axis name \"data\" is used twice (axes 0 and 1)");
  expect_error("2x4", "", E,
               "--axes \"\": expected an axis name (a letter or '_' first) at column 1");
  expect_error("2x4", "data,,model", E,
               "--axes \"data,,model\": expected an axis name (a letter or '_' first) at "
               "column 6, got ','");
  expect_error("2x4", "data,", E,
               "--axes \"data,\": expected an axis name (a letter or '_' first) at column 6");
  expect_error("2x4", "1a,b", E,
               "--axes \"1a,b\": expected an axis name (a letter or '_' first) at column 1, "
               "got '1'");
  expect_error("2x4", "data, model", E,
               "--axes \"data, model\": expected an axis name (a letter or '_' first) at column "
               "6, got ' '");
  expect_error("2x4", "data-x,model", E,
               "--axes \"data-x,model\": expected ',' between axis names at column 5, got '-'");
  expect_error("4", "abcdefghijklmnopqrstuvwxyz012345", E,
               "--axes \"abcdefghijklmnopqrstuvwxyz012345\": the axis name at column 1 is longer "
               "than 31 bytes");
  expect_error("2x2", "a,b,c,d,e,f,g,h,i", E,
               "--axes \"a,b,c,d,e,f,g,h,i\": 9 axis names for the 2-axis mesh \"2x2\"");
  /* the shape is checked before the names */
  expect_error("2x", "a,b", E, "--mesh \"2x\": expected a positive integer after 'x' at column 3");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_names),
      cmocka_unit_test(test_named_axes),
      cmocka_unit_test(test_bad_shapes),
      cmocka_unit_test(test_bad_axes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
