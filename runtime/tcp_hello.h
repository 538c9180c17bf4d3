/*
 * runtime/tcp_hello.h: the handshake messages of the TCP rendezvous
 * (comm_tcp.c, docs/processes.md "Job token"), built and checked without
 * sockets so they can be fuzzed (tests/fuzz/fuzz_tcp_hello.c).
 *
 * Whoever accepts a connection (the coordinator, or process j for a
 * process i > j) speaks first:
 *   CHALLENGE  acceptor -> connector: a fresh 32-byte nonce Na;
 *   HELLO      connector -> acceptor: id, process count, plan checksum,
 *              listening port, its own nonce Nc, and
 *              MAC = HMAC-SHA256(token, "kdc hello" | Na | the fields);
 *   VERDICT    acceptor -> connector: OK or why the job ends, and
 *              MAC = HMAC-SHA256(token, "kdc verdict" | Nc | the fields);
 *   TABLE      coordinator -> process, after an OK: every process's
 *              address and port.
 * Both sides prove they hold the job token; the token never crosses the
 * wire and a recorded HELLO is useless on another connection (fresh
 * nonces).  Without a token (loopback only) the MAC key is empty: the MAC
 * then only checks the bytes, and the plan checksum is what identifies a
 * member.  Byte order is the host's, like the frames of comm_tcp.c.
 */
#ifndef KDC_RUNTIME_TCP_HELLO_H
#define KDC_RUNTIME_TCP_HELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
  RT_HS_MAGIC = 0x4b444354u, /* "KDCT" */
  RT_HS_PROTOCOL = 2,
  RT_HS_NONCE = 32,
  RT_HS_MAC = 32,
  RT_HS_CHALLENGE_BYTES = 16 + RT_HS_NONCE,
  RT_HS_HELLO_BYTES = 32 + RT_HS_NONCE + RT_HS_MAC,
  RT_HS_VERDICT_BYTES = 24 + RT_HS_MAC,
  RT_HS_HOST = 64,
  RT_HS_ADDRESS_BYTES = RT_HS_HOST + 8,
};

/* Verdicts: why the coordinator ends the job (RT_V_AUTH: only to the
 * connection that failed the token check; the job goes on). */
enum { RT_V_OK = 0, RT_V_PLAN, RT_V_COUNT, RT_V_ID, RT_V_MISSING, RT_V_AUTH, RT_V_COUNT_ };

/* What a parse found. */
typedef enum rt_hs_result {
  RT_HS_OK = 0,
  RT_HS_MORE,     /* a valid prefix: wait for more bytes */
  RT_HS_FOREIGN,  /* not a kdc handshake (another protocol, garbage) */
  RT_HS_VERSION,  /* a kdc handshake of another version */
  RT_HS_BAD,      /* a field out of range */
  RT_HS_AUTH,     /* the MAC does not match: another job token, or none */
} rt_hs_result;

typedef struct rt_hs_token {
  const uint8_t *bytes; /* NULL with len 0: no token */
  size_t len;
} rt_hs_token;

typedef struct rt_hs_hello {
  int32_t id, n;
  uint32_t port;
  uint64_t key; /* the plan's checksum */
  uint8_t nonce[RT_HS_NONCE];
} rt_hs_hello;

typedef struct rt_hs_verdict {
  uint32_t verdict;
  int32_t culprit, n;
} rt_hs_verdict;

typedef struct rt_hs_address {
  char host[RT_HS_HOST]; /* numeric, NUL-terminated */
  uint32_t port;         /* 1..65535 */
} rt_hs_address;

/* |nonce| from the kernel's random source (getrandom); false if none. */
bool rt_hs_nonce(uint8_t nonce[RT_HS_NONCE]);

void rt_hs_challenge_make(uint8_t out[RT_HS_CHALLENGE_BYTES], const uint8_t nonce[RT_HS_NONCE],
                          bool token);
rt_hs_result rt_hs_challenge_parse(const uint8_t *buf, size_t n, uint8_t nonce[RT_HS_NONCE]);

void rt_hs_hello_make(uint8_t out[RT_HS_HELLO_BYTES], const rt_hs_hello *h,
                      const uint8_t challenge[RT_HS_NONCE], rt_hs_token token);
/* |buf| holds the |n| bytes received so far (n may be short: RT_HS_MORE
 * while they could still be a HELLO, RT_HS_FOREIGN as soon as they cannot). */
rt_hs_result rt_hs_hello_parse(const uint8_t *buf, size_t n, const uint8_t challenge[RT_HS_NONCE],
                               rt_hs_token token, rt_hs_hello *out);

void rt_hs_verdict_make(uint8_t out[RT_HS_VERDICT_BYTES], const rt_hs_verdict *v,
                        const uint8_t hello_nonce[RT_HS_NONCE], rt_hs_token token);
/* RT_V_AUTH is accepted without a MAC (the acceptor could not check ours). */
rt_hs_result rt_hs_verdict_parse(const uint8_t *buf, size_t n,
                                 const uint8_t hello_nonce[RT_HS_NONCE], rt_hs_token token,
                                 rt_hs_verdict *out);

void rt_hs_address_make(uint8_t out[RT_HS_ADDRESS_BYTES], const rt_hs_address *a);
rt_hs_result rt_hs_address_parse(const uint8_t *buf, size_t n, rt_hs_address *out);

#endif
