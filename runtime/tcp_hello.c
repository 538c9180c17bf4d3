/*
 * runtime/tcp_hello.c: the handshake messages of the TCP rendezvous
 * (tcp_hello.h): building them, and checking received bytes -- every field,
 * the MAC -- without sockets.
 */
#include "runtime/tcp_hello.h"

#include <string.h>
#include <sys/random.h>

#include "common/io.h"

enum { K_CHALLENGE = 0x101, K_HELLO = 0x102, K_VERDICT = 0x103 };

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

bool rt_hs_nonce(uint8_t nonce[RT_HS_NONCE]) {
  size_t got = 0;
  while (got < RT_HS_NONCE) {
    ssize_t r = getrandom(nonce + got, RT_HS_NONCE - got, 0);
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

/* HMAC(token, label | nonce | fields) */
static void mac(uint8_t out[RT_HS_MAC], rt_hs_token t, const char *label,
                const uint8_t nonce[RT_HS_NONCE], const uint8_t *fields, size_t n) {
  kdc_hmac_sha256 m;
  kdc_hmac_sha256_init(&m, t.bytes, t.len);
  kdc_hmac_sha256_update(&m, label, strlen(label) + 1);
  kdc_hmac_sha256_update(&m, nonce, RT_HS_NONCE);
  kdc_hmac_sha256_update(&m, fields, n);
  kdc_hmac_sha256_final(&m, out);
}

/* Every message starts with the magic, its kind and the protocol version. */
static void put_head(uint8_t *out, uint32_t kind) {
  put32(out, RT_HS_MAGIC);
  put32(out + 4, kind);
  put32(out + 8, RT_HS_PROTOCOL);
}

/* The magic, kind and version of a message's first 12 bytes, as far as
 * they have come. */
static rt_hs_result head(const uint8_t *buf, size_t n, uint32_t kind) {
  uint8_t want[12];
  put_head(want, kind);
  size_t k = n < 8 ? n : 8;
  if (memcmp(buf, want, k)) return RT_HS_FOREIGN;
  if (n < 12) return RT_HS_MORE;
  return get32(buf + 8) == RT_HS_PROTOCOL ? RT_HS_OK : RT_HS_VERSION;
}

void rt_hs_challenge_make(uint8_t out[RT_HS_CHALLENGE_BYTES], const uint8_t nonce[RT_HS_NONCE],
                          bool token) {
  put_head(out, K_CHALLENGE);
  put32(out + 12, token ? 1 : 0);
  memcpy(out + 16, nonce, RT_HS_NONCE);
}

rt_hs_result rt_hs_challenge_parse(const uint8_t *buf, size_t n, uint8_t nonce[RT_HS_NONCE]) {
  rt_hs_result r = head(buf, n, K_CHALLENGE);
  if (r != RT_HS_OK) return r;
  if (n < RT_HS_CHALLENGE_BYTES) return RT_HS_MORE;
  if (get32(buf + 12) > 1) return RT_HS_BAD;
  memcpy(nonce, buf + 16, RT_HS_NONCE);
  return RT_HS_OK;
}

void rt_hs_hello_make(uint8_t out[RT_HS_HELLO_BYTES], const rt_hs_hello *h,
                      const uint8_t challenge[RT_HS_NONCE], rt_hs_token token) {
  put_head(out, K_HELLO);
  put32(out + 12, (uint32_t)h->id);
  put32(out + 16, (uint32_t)h->n);
  put32(out + 20, h->port);
  put64(out + 24, h->key);
  memcpy(out + 32, h->nonce, RT_HS_NONCE);
  mac(out + 32 + RT_HS_NONCE, token, "kdc hello", challenge, out, 32 + RT_HS_NONCE);
}

rt_hs_result rt_hs_hello_parse(const uint8_t *buf, size_t n, const uint8_t challenge[RT_HS_NONCE],
                               rt_hs_token token, rt_hs_hello *out) {
  rt_hs_result r = head(buf, n, K_HELLO);
  if (r != RT_HS_OK) return r;
  if (n < RT_HS_HELLO_BYTES) return RT_HS_MORE;
  uint8_t want[RT_HS_MAC];
  mac(want, token, "kdc hello", challenge, buf, 32 + RT_HS_NONCE);
  if (!kdc_bytes_equal_ct(want, buf + 32 + RT_HS_NONCE, RT_HS_MAC)) return RT_HS_AUTH;
  out->id = (int32_t)get32(buf + 12);
  out->n = (int32_t)get32(buf + 16);
  out->port = get32(buf + 20);
  out->key = get64(buf + 24);
  memcpy(out->nonce, buf + 32, RT_HS_NONCE);
  if (out->n < 2 || out->id < 0 || out->id >= out->n || out->port > 65535) return RT_HS_BAD;
  return RT_HS_OK;
}

void rt_hs_verdict_make(uint8_t out[RT_HS_VERDICT_BYTES], const rt_hs_verdict *v,
                        const uint8_t hello_nonce[RT_HS_NONCE], rt_hs_token token) {
  put_head(out, K_VERDICT);
  put32(out + 12, v->verdict);
  put32(out + 16, (uint32_t)v->culprit);
  put32(out + 20, (uint32_t)v->n);
  mac(out + 24, token, "kdc verdict", hello_nonce, out, 24);
}

rt_hs_result rt_hs_verdict_parse(const uint8_t *buf, size_t n,
                                 const uint8_t hello_nonce[RT_HS_NONCE], rt_hs_token token,
                                 rt_hs_verdict *out) {
  rt_hs_result r = head(buf, n, K_VERDICT);
  if (r != RT_HS_OK) return r;
  if (n < RT_HS_VERDICT_BYTES) return RT_HS_MORE;
  out->verdict = get32(buf + 12);
  out->culprit = (int32_t)get32(buf + 16);
  out->n = (int32_t)get32(buf + 20);
  if (out->verdict >= RT_V_COUNT_) return RT_HS_BAD;
  if (out->verdict == RT_V_AUTH) return RT_HS_OK;
  uint8_t want[RT_HS_MAC];
  mac(want, token, "kdc verdict", hello_nonce, buf, 24);
  if (!kdc_bytes_equal_ct(want, buf + 24, RT_HS_MAC)) return RT_HS_AUTH;
  if (out->n < 2 || (out->verdict != RT_V_OK && (out->culprit < 0 || out->culprit >= out->n)))
    return RT_HS_BAD;
  return RT_HS_OK;
}

void rt_hs_address_make(uint8_t out[RT_HS_ADDRESS_BYTES], const rt_hs_address *a) {
  memset(out, 0, RT_HS_ADDRESS_BYTES);
  memcpy(out, a->host, strnlen(a->host, RT_HS_HOST - 1));
  put32(out + RT_HS_HOST, a->port);
}

rt_hs_result rt_hs_address_parse(const uint8_t *buf, size_t n, rt_hs_address *out) {
  if (n < RT_HS_ADDRESS_BYTES) return RT_HS_MORE;
  size_t len = strnlen((const char *)buf, RT_HS_HOST);
  if (len == 0 || len == RT_HS_HOST) return RT_HS_BAD;
  memcpy(out->host, buf, len + 1);
  out->port = get32(buf + RT_HS_HOST);
  if (out->port < 1 || out->port > 65535 || get32(buf + RT_HS_HOST + 4)) return RT_HS_BAD;
  return RT_HS_OK;
}
