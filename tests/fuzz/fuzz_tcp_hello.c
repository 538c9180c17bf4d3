/* tests/fuzz/fuzz_tcp_hello.c: the handshake messages of the TCP
 * rendezvous (runtime/tcp_hello.c), as received from any client: byte 0
 * picks the message (challenge, HELLO, verdict, table address) and whether
 * a job token is in use, the rest is what came (any length: a prefix must
 * be told apart from garbage).  A valid MAC cannot be guessed, so every
 * input is parsed twice: as it is, and with its MAC re-made over its bytes,
 * so the field checks behind the MAC are fuzzed too.  A message that
 * parses must build back to the same bytes. */
#include "runtime/tcp_hello.h"
#include "tests/fuzz/fuzz.h"

static const uint8_t NONCE[RT_HS_NONCE] = "0123456789abcdef0123456789abcde";

static void check(int kind, const uint8_t *b, size_t n, rt_hs_token tok) {
  uint8_t out[RT_HS_HELLO_BYTES];
  switch (kind) {
  case 0: {
    uint8_t nonce[RT_HS_NONCE];
    if (rt_hs_challenge_parse(b, n, nonce) == RT_HS_OK) {
      rt_hs_challenge_make(out, nonce, b[12] != 0);
      if (memcmp(out, b, RT_HS_CHALLENGE_BYTES)) abort();
    }
    break;
  }
  case 1: {
    rt_hs_hello h;
    if (rt_hs_hello_parse(b, n, NONCE, tok, &h) == RT_HS_OK) {
      rt_hs_hello_make(out, &h, NONCE, tok);
      if (memcmp(out, b, RT_HS_HELLO_BYTES)) abort();
    }
    break;
  }
  case 2: {
    rt_hs_verdict v;
    if (rt_hs_verdict_parse(b, n, NONCE, tok, &v) == RT_HS_OK && v.verdict != RT_V_AUTH) {
      rt_hs_verdict_make(out, &v, NONCE, tok);
      if (memcmp(out, b, RT_HS_VERDICT_BYTES)) abort();
    }
    break;
  }
  default: {
    rt_hs_address a;
    if (rt_hs_address_parse(b, n, &a) == RT_HS_OK && strlen(a.host) >= RT_HS_HOST) abort();
    break;
  }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int kind = data[0] & 3;
  rt_hs_token tok = {(const uint8_t *)"fuzz-token", data[0] & 4 ? 10 : 0};
  uint8_t *b = malloc(size);  /* exact size: ASan sees any read past the input */
  if (!b) abort();
  memcpy(b, data + 1, size - 1);
  size_t n = size - 1;
  check(kind, b, n, tok);
  /* the same bytes with a valid MAC */
  if (kind == 1 && n >= RT_HS_HELLO_BYTES) {
    rt_hs_hello h;
    memcpy(&h.id, b + 12, 4), memcpy(&h.n, b + 16, 4), memcpy(&h.port, b + 20, 4);
    memcpy(&h.key, b + 24, 8), memcpy(h.nonce, b + 32, RT_HS_NONCE);
    uint8_t head[12];
    memcpy(head, b, 12);
    rt_hs_hello_make(b, &h, NONCE, tok);
    memcpy(b, head, 12);  /* keep the fuzzed magic, kind and version */
    check(kind, b, n, tok);
  } else if (kind == 2 && n >= RT_HS_VERDICT_BYTES) {
    rt_hs_verdict v;
    memcpy(&v.verdict, b + 12, 4), memcpy(&v.culprit, b + 16, 4), memcpy(&v.n, b + 20, 4);
    uint8_t head[12];
    memcpy(head, b, 12);
    rt_hs_verdict_make(b, &v, NONCE, tok);
    memcpy(b, head, 12);
    check(kind, b, n, tok);
  }
  free(b);
  return 0;
}
