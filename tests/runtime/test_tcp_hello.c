/*
 * test_tcp_hello.c: the handshake messages of the TCP rendezvous
 * (runtime/tcp_hello.c) without sockets: what a coordinator decides from
 * the bytes a client sends.  HTTP and garbage are foreign from their first
 * bytes (dropped at once, not at the deadline); a prefix of a HELLO waits
 * for more; a HELLO under another token, or another challenge (a replay),
 * fails the MAC; field ranges; the verdict's MAC binds the HELLO's nonce;
 * a table address must be a NUL-terminated host and a port in 1..65535.
 * The MAC is checked against Python's hmac (the bytes below).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/tcp_hello.h"

static const uint8_t NA[RT_HS_NONCE] = "challenge-nonce-0123456789abcde";
static const uint8_t NC[RT_HS_NONCE] = "hello-nonce-0123456789abcdefghi";

static rt_hs_token tok(const char *s) {
  return (rt_hs_token){(const uint8_t *)s, s ? strlen(s) : 0};
}

static void hello(uint8_t *out, int id, int n, const char *token) {
  rt_hs_hello h = {id, n, 40000, 0x1234567890abcdefull, {0}};
  memcpy(h.nonce, NC, RT_HS_NONCE);
  rt_hs_hello_make(out, &h, NA, tok(token));
}

static void test_foreign_at_once(void **state) {
  (void)state;
  rt_hs_hello h;
  const char *http = "GET / HTTP/1.1\r\n";
  for (size_t n = 1; n <= strlen(http); n++)
    assert_int_equal(rt_hs_hello_parse((const uint8_t *)http, n, NA, tok(NULL), &h),
                     RT_HS_FOREIGN);
  uint8_t b[RT_HS_HELLO_BYTES];
  hello(b, 1, 2, NULL);
  for (size_t n = 0; n < sizeof b; n++)  /* every prefix: wait */
    assert_int_equal(rt_hs_hello_parse(b, n, NA, tok(NULL), &h), RT_HS_MORE);
  assert_int_equal(rt_hs_hello_parse(b, sizeof b, NA, tok(NULL), &h), RT_HS_OK);
  assert_int_equal(h.id, 1);
  assert_int_equal(h.n, 2);
  assert_int_equal(h.port, 40000);
  assert_true(h.key == 0x1234567890abcdefull);
  assert_memory_equal(h.nonce, NC, RT_HS_NONCE);
  b[8] = 9;  /* another protocol version */
  assert_int_equal(rt_hs_hello_parse(b, sizeof b, NA, tok(NULL), &h), RT_HS_VERSION);
}

static void test_token(void **state) {
  (void)state;
  rt_hs_hello h;
  uint8_t b[RT_HS_HELLO_BYTES];
  hello(b, 1, 4, "s3cret");
  assert_int_equal(rt_hs_hello_parse(b, sizeof b, NA, tok("s3cret"), &h), RT_HS_OK);
  assert_int_equal(rt_hs_hello_parse(b, sizeof b, NA, tok("other"), &h), RT_HS_AUTH);
  assert_int_equal(rt_hs_hello_parse(b, sizeof b, NA, tok(NULL), &h), RT_HS_AUTH);
  /* a replay: the HELLO answered another challenge */
  assert_int_equal(rt_hs_hello_parse(b, sizeof b, NC, tok("s3cret"), &h), RT_HS_AUTH);
  b[20] ^= 1;  /* a field changed under the MAC */
  assert_int_equal(rt_hs_hello_parse(b, sizeof b, NA, tok("s3cret"), &h), RT_HS_AUTH);
  /* the MAC of HELLO(1, 4) under "s3cret", by Python:
   * hmac.new(b"s3cret", b"kdc hello\0" + NA + fields, sha256) */
  hello(b, 1, 4, "s3cret");
  static const uint8_t want[8] = {0xdf, 0x69, 0x48, 0xa1, 0xcf, 0x29, 0xe6, 0x54};
  assert_memory_equal(b + 32 + RT_HS_NONCE, want, sizeof want);
  /* ranges: id >= n, n < 2 */
  hello(b, 4, 4, NULL);
  assert_int_equal(rt_hs_hello_parse(b, sizeof b, NA, tok(NULL), &h), RT_HS_BAD);
  hello(b, 0, 1, NULL);
  assert_int_equal(rt_hs_hello_parse(b, sizeof b, NA, tok(NULL), &h), RT_HS_BAD);
}

static void test_verdict(void **state) {
  (void)state;
  uint8_t b[RT_HS_VERDICT_BYTES];
  rt_hs_verdict v;
  rt_hs_verdict_make(b, &(rt_hs_verdict){RT_V_PLAN, 1, 2}, NC, tok("t"));
  assert_int_equal(rt_hs_verdict_parse(b, sizeof b, NC, tok("t"), &v), RT_HS_OK);
  assert_int_equal(v.verdict, RT_V_PLAN);
  assert_int_equal(v.culprit, 1);
  /* bound to our HELLO's nonce and the token */
  assert_int_equal(rt_hs_verdict_parse(b, sizeof b, NA, tok("t"), &v), RT_HS_AUTH);
  assert_int_equal(rt_hs_verdict_parse(b, sizeof b, NC, tok("u"), &v), RT_HS_AUTH);
  /* a refusal of our token carries no MAC we could check */
  rt_hs_verdict_make(b, &(rt_hs_verdict){RT_V_AUTH, -1, 2}, NA, tok(NULL));
  assert_int_equal(rt_hs_verdict_parse(b, sizeof b, NC, tok("t"), &v), RT_HS_OK);
  assert_int_equal(v.verdict, RT_V_AUTH);
  rt_hs_verdict_make(b, &(rt_hs_verdict){RT_V_MISSING, 7, 4}, NC, tok(NULL));
  assert_int_equal(rt_hs_verdict_parse(b, sizeof b, NC, tok(NULL), &v), RT_HS_BAD);
}

static void test_address(void **state) {
  (void)state;
  uint8_t b[RT_HS_ADDRESS_BYTES];
  rt_hs_address a = {"127.0.0.1", 40001}, got;
  rt_hs_address_make(b, &a);
  assert_int_equal(rt_hs_address_parse(b, sizeof b, &got), RT_HS_OK);
  assert_string_equal(got.host, "127.0.0.1");
  assert_int_equal(got.port, 40001);
  assert_int_equal(rt_hs_address_parse(b, sizeof b - 1, &got), RT_HS_MORE);
  memset(b, 'x', RT_HS_HOST);  /* no NUL in the host */
  assert_int_equal(rt_hs_address_parse(b, sizeof b, &got), RT_HS_BAD);
  a.port = 0;
  rt_hs_address_make(b, &a);
  assert_int_equal(rt_hs_address_parse(b, sizeof b, &got), RT_HS_BAD);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_foreign_at_once),
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_verdict),
      cmocka_unit_test(test_address),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
