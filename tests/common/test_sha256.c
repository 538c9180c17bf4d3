/*
 * test_sha256.c: SHA-256 against the FIPS 180-2 examples (and the empty
 * string), HMAC-SHA256 against RFC 4231 test cases 1, 2 and 6 (a key
 * longer than the block); every digest also checked with Python's hashlib
 * and hmac.  Streaming in pieces of every size gives the same digest.
 */
#include "test_util.h"

static void hex(const uint8_t *d, char *out) {
  for (int i = 0; i < KDC_SHA256_BYTES; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void sha(const void *p, size_t n, char *out) {
  kdc_sha256 s;
  uint8_t d[KDC_SHA256_BYTES];
  kdc_sha256_init(&s);
  kdc_sha256_update(&s, p, n);
  kdc_sha256_final(&s, d);
  hex(d, out);
}

static void test_sha256_vectors(void **state TU_UNUSED) {
  char h[65];
  sha("", 0, h);
  assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  sha("abc", 3, h);
  assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  /* 56: 2 blocks of padding */
  sha(m, strlen(m), h);
  assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  char *a = malloc(1000000);
  memset(a, 'a', 1000000);
  sha(a, 1000000, h);
  assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* the same million bytes in pieces of 1..127 bytes */
  kdc_sha256 s;
  uint8_t d[KDC_SHA256_BYTES];
  kdc_sha256_init(&s);
  for (size_t at = 0, k = 1; at < 1000000; at += k, k = k % 127 + 1)
    kdc_sha256_update(&s, a + at, at + k > 1000000 ? 1000000 - at : k);
  kdc_sha256_final(&s, d);
  hex(d, h);
  assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(a);
}

static void hmac(const void *key, size_t kn, const char *msg, char *out) {
  kdc_hmac_sha256 m;
  uint8_t d[KDC_SHA256_BYTES];
  kdc_hmac_sha256_init(&m, key, kn);
  kdc_hmac_sha256_update(&m, msg, strlen(msg));
  kdc_hmac_sha256_final(&m, d);
  hex(d, out);
}

static void test_hmac_rfc4231(void **state TU_UNUSED) {
  char h[65];
  uint8_t k[131];
  memset(k, 0x0b, 20);
  hmac(k, 20, "Hi There", h);
  assert_string_equal(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  hmac("Jefe", 4, "what do ya want for nothing?", h);
  assert_string_equal(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  memset(k, 0xaa, 131);
  hmac(k, 131, "Test Using Larger Than Block-Size Key - Hash Key First", h);
  assert_string_equal(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  assert_true(kdc_bytes_equal_ct("abcd", "abcd", 4));
  assert_false(kdc_bytes_equal_ct("abcd", "abce", 4));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_vectors),
      cmocka_unit_test(test_hmac_rfc4231),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
