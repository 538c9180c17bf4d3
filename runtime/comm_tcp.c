/*
 * runtime/comm_tcp.c: the TCP transport of the process backend (comm.h
 * rt_net, comm_p2p.c) and its rendezvous, for processes started without
 * mpirun: `kdc run --coordinator HOST:PORT --num-processes N
 * --process-id I` (docs/processes.md).
 *
 * Rendezvous (bounded by the timeout, default the collective timeout):
 *   1. process 0 listens on HOST:PORT; every other process connects to it,
 *      retrying while nobody listens, opens its own listening socket on the
 *      local address of that connection (ephemeral port) and passes the
 *      handshake of tcp_hello.h: CHALLENGE in, HELLO {id, N, key = the
 *      plan's checksum, its port, MAC under the job token} out;
 *   2. process 0 serves every connection at once (meet): one that is not a
 *      member -- silent past the handshake deadline, foreign bytes, a bad
 *      MAC -- is dropped with a note and never stops the others; a member
 *      with a different N or plan, or an id taken twice, is an error
 *      naming that process -- on process 0 and, through a VERDICT, on
 *      every connected process; a process that has not connected at the
 *      deadline is named the same way.  Then it sends each its VERDICT
 *      and the TABLE of every process's address (as process 0 saw it) and
 *      port;
 *   3. process i connects to every process 0 < j < i and accepts one
 *      connection from every j > i (the same handshake and meet).
 * Then every pair of processes has one socket (TCP_NODELAY, non-blocking).
 *
 * Messages are frames: a 24-byte header {magic, kind, tag, aux, bytes}
 * and the payload.  Sends and receives are queued per peer in posting
 * order; wait() drives every queue with poll() until all are done: a
 * receive checks the header's tag and size against what was posted (a
 * mismatch is RT_NET_PROTOCOL), reads the payload straight into the
 * destination, and a peer that closes its socket (it died: the kernel
 * closes a killed process's sockets) fails the wait at once with
 * RT_NET_CLOSED naming it, not only at the timeout.  A failing process
 * sends an ABORT frame naming the process it blames, with that process's
 * exit status (aux) and error (payload), to every peer whose stream is at
 * a frame boundary, so the others report the real culprit and cause.
 * Byte order is the host's: every process of a job runs the same kdc on
 * the same kind of machine.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm.h"
#include "runtime/procs.h"
#include "runtime/tcp_hello.h"

enum { MAGIC = 0x4b444354u /* "KDCT" */, HDR = 24 };
enum { K_DATA = 1, K_ABORT = 2 };                     /* frame kinds */

typedef struct frame {
  uint32_t magic, kind;
  int32_t tag;
  uint32_t aux;
  uint64_t bytes;
} frame;
_Static_assert(sizeof(frame) == HDR, "frame header layout");

typedef struct msg {
  frame h;        /* sent, or expected */
  frame got;      /* a receive: the header that came */
  char *buf;
  int64_t dev;
  uint64_t done;  /* header + payload bytes moved */
} msg;

typedef struct queue {
  msg *m;
  size_t n, cap, head;
} queue;

typedef struct peer {
  int fd;
  queue sq, rq;
} peer;

typedef struct tcp_net {
  rt_net base;
  peer *peer;
} tcp_net;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int ms_left(double deadline, int most) {
  double ms = (deadline - now_s()) * 1e3;
  return ms <= 0 ? 0 : ms > most ? most : (int)ms + 1;
}

/* ---- messages -------------------------------------------------------------- */

static void tcp_post(rt_net *base, bool send, void *buf, uint64_t bytes, int peer_id, int tag,
                     int64_t dev) {
  tcp_net *t = (tcp_net *)base;
  queue *q = send ? &t->peer[peer_id].sq : &t->peer[peer_id].rq;
  KDC_GROW(q->m, q->cap, q->n + 1);
  q->m[q->n++] = (msg){{MAGIC, K_DATA, tag, 0, bytes}, {0, 0, 0, 0, 0}, buf, dev, 0};
}

/* Moves what the socket takes of the head send; false when the peer is gone. */
static bool pump_send(peer *pe) {
  while (pe->sq.head < pe->sq.n) {
    msg *m = &pe->sq.m[pe->sq.head];
    struct iovec iov[2];
    int k = 0;
    if (m->done < HDR) iov[k++] = (struct iovec){(char *)&m->h + m->done, HDR - m->done};
    uint64_t pd = m->done < HDR ? 0 : m->done - HDR;
    if (pd < m->h.bytes) iov[k++] = (struct iovec){m->buf + pd, m->h.bytes - pd};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
    ssize_t w = sendmsg(pe->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    m->done += (uint64_t)w;
    if (m->done < HDR + m->h.bytes) return true;
    pe->sq.head++;
  }
  return true;
}

/* Reads what is there for the head receive: RT_NET_OK (progress or none),
 * else the failure. */
static rt_net_fail pump_recv(peer *pe, rt_net_miss *out) {
  while (pe->rq.head < pe->rq.n) {
    msg *m = &pe->rq.m[pe->rq.head];
    ssize_t r;
    if (m->done < HDR) {
      const frame *want = &m->h, *got = &m->got;
      r = recv(pe->fd, (char *)&m->got + m->done, HDR - m->done, MSG_DONTWAIT);
      if (r > 0 && m->done + (uint64_t)r == HDR) {
        if (got->magic == MAGIC && got->kind == K_ABORT) {
          out->culprit = got->tag;
          return RT_NET_ABORTED;
        }
        if (got->magic != MAGIC || got->kind != K_DATA || got->tag != want->tag ||
            got->bytes != want->bytes)
          return RT_NET_PROTOCOL;
      }
    } else {
      uint64_t pd = m->done - HDR;
      r = recv(pe->fd, m->buf + pd, m->h.bytes - pd, MSG_DONTWAIT);
    }
    if (r == 0) return RT_NET_CLOSED;
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return RT_NET_OK;
      return RT_NET_CLOSED;
    }
    m->done += (uint64_t)r;
    if (m->done == HDR + m->h.bytes) pe->rq.head++;
  }
  return RT_NET_OK;
}

static void clear(queue *q) { q->n = q->head = 0; }

static bool fail(tcp_net *t, int p, rt_net_fail f, bool send, rt_net_miss *out) {
  queue *rq = &t->peer[p].rq;
  out->fail = f;
  out->peer = p;
  out->send = send;
  out->dev = !send && rq->head < rq->n ? rq->m[rq->head].dev : -1;
  if (f != RT_NET_ABORTED) out->culprit = -1;
  return false;
}

static int io_full(int fd, void *buf, size_t n, bool send_, double deadline);

/* After an ABORT header |f| from |pe|: its payload, the culprit's error
 * (best effort, briefly: the peer wrote it with the header). */
static void read_why(tcp_net *t, peer *pe, const frame *f) {
  char buf[RT_NET_WHY];
  size_t n = f->bytes < sizeof buf - 1 ? (size_t)f->bytes : 0;
  if (n && io_full(pe->fd, buf, n, false, now_s() + 0.5)) return;
  buf[n] = 0;
  t->base.abort_code = f->aux > 0 && f->aux < 256 ? (int)f->aux : 3;
  memcpy(t->base.abort_why, buf, n + 1);
}

/* A peer that ended the job first (an ABORT frame after what we already
 * expected from it, or peeked at the head of its stream) explains a closed connection or a timeout better: a
 * process that failed because of process X tells its peers about X. */
static void prefer_abort(tcp_net *t, rt_net_miss *out) {
  for (int p = 0; p < t->base.n; p++) {
    peer *pe = &t->peer[p];
    if (p == t->base.id || pe->fd < 0) continue;
    rt_net_miss m = {RT_NET_OK, p, -1, false, -1};  /* read what came, frames finish */
    if (pump_recv(pe, &m) == RT_NET_ABORTED) {
      read_why(t, pe, &pe->rq.m[pe->rq.head].got);
      *out = (rt_net_miss){RT_NET_ABORTED, p, -1, false, m.culprit};
      return;
    }
    if (pe->rq.head < pe->rq.n && pe->rq.m[pe->rq.head].done > 0) continue;  /* mid-frame */
    frame f;
    if (recv(pe->fd, &f, sizeof f, MSG_PEEK | MSG_DONTWAIT) == (ssize_t)sizeof f &&
        f.magic == MAGIC && f.kind == K_ABORT) {
      recv(pe->fd, &f, sizeof f, MSG_DONTWAIT);  /* the header: the error follows */
      read_why(t, pe, &f);
      *out = (rt_net_miss){RT_NET_ABORTED, p, -1, false, f.tag};
      return;
    }
  }
}

static bool tcp_wait(rt_net *base, double timeout_s, rt_net_miss *out) {
  tcp_net *t = (tcp_net *)base;
  int n = base->n;
  double deadline = now_s() + timeout_s;
  struct pollfd *fds = kdc_xcalloc((size_t)n, sizeof *fds);
  int *who = kdc_xcalloc((size_t)n, sizeof *who);
  bool ok = true;
  for (;;) {
    int k = 0;
    for (int p = 0; p < n && ok; p++) {
      peer *pe = &t->peer[p];
      if (p == base->id) continue;
      if (!pump_send(pe)) ok = fail(t, p, RT_NET_CLOSED, true, out);
      rt_net_fail f = ok ? pump_recv(pe, out) : RT_NET_OK;
      if (f == RT_NET_ABORTED) read_why(t, pe, &pe->rq.m[pe->rq.head].got);
      if (f) ok = fail(t, p, f, false, out);
      short ev = (short)((pe->sq.head < pe->sq.n ? POLLOUT : 0) |
                         (pe->rq.head < pe->rq.n ? POLLIN : 0));
      if (ev) fds[k] = (struct pollfd){pe->fd, ev, 0}, who[k++] = p;
    }
    if (!ok || k == 0) break;
    int left = ms_left(deadline, 200);
    if (left == 0) {  /* a pending receive names its device; else a send */
      int p = who[0];
      for (int i = 0; i < k; i++)
        if (fds[i].events & POLLIN) {
          p = who[i];
          break;
        }
      ok = fail(t, p, RT_NET_TIMEOUT, !(t->peer[p].rq.head < t->peer[p].rq.n), out);
      break;
    }
    poll(fds, (nfds_t)k, left);
  }
  free(fds);
  free(who);
  if (!ok && (out->fail == RT_NET_CLOSED || out->fail == RT_NET_TIMEOUT)) prefer_abort(t, out);
  if (ok)
    for (int p = 0; p < n; p++) clear(&t->peer[p].sq), clear(&t->peer[p].rq);
  return ok;
}

/* The peers must find the ABORT at a frame boundary: a frame half sent is
 * completed first, with zeros (its data is lost anyway: the job is over).
 * The ABORT carries the culprit's exit status (aux) and error (payload). */
static void tcp_abort(rt_net *base, int culprit, int code, const char *why) {
  tcp_net *t = (tcp_net *)base;
  size_t wn = why ? strnlen(why, RT_NET_WHY - 1) : 0;
  frame f = {MAGIC, K_ABORT, culprit, (uint32_t)code, wn};
  static char zeros[65536];
  double deadline = now_s() + 1;
  for (int p = 0; p < base->n; p++) {
    peer *pe = &t->peer[p];
    if (p == base->id || pe->fd < 0) continue;
    if (pe->sq.head < pe->sq.n && pe->sq.m[pe->sq.head].done > 0) {
      msg *m = &pe->sq.m[pe->sq.head];
      if (m->done < HDR && io_full(pe->fd, (char *)&m->h + m->done, HDR - m->done, true, deadline))
        continue;
      for (uint64_t left = HDR + m->h.bytes - (m->done > HDR ? m->done : HDR); left > 0;) {
        size_t k = left < sizeof zeros ? (size_t)left : sizeof zeros;
        if (io_full(pe->fd, zeros, k, true, deadline)) break;
        left -= k;
      }
    }
    if (!io_full(pe->fd, &f, sizeof f, true, deadline) && wn)
      io_full(pe->fd, (void *)why, wn, true, deadline);
  }
}

static void tcp_destroy(rt_net *base) {
  tcp_net *t = (tcp_net *)base;
  for (int p = 0; p < base->n; p++) {
    if (t->peer[p].fd >= 0) close(t->peer[p].fd);
    free(t->peer[p].sq.m), free(t->peer[p].rq.m);
  }
  free(t->peer);
  free(t);
}

static const rt_net_vtable tcp_vtable = {
    .destroy = tcp_destroy,
    .post = tcp_post,
    .wait = tcp_wait,
    .abort = tcp_abort,
};

/* ---- rendezvous ------------------------------------------------------------------ */

/* All |n| bytes through |fd| (non-blocking) by |deadline|: 0, or -1 when
 * the peer closed, -2 at the deadline. */
static int io_full(int fd, void *buf, size_t n, bool send_, double deadline) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = send_ ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                      : recv(fd, (char *)buf + done, n - done, 0);
    if (r > 0) {
      done += (size_t)r;
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return -1;
    struct pollfd pf = {fd, send_ ? POLLOUT : POLLIN, 0};
    int left = ms_left(deadline, 200);
    if (left == 0) return -2;
    poll(&pf, 1, left);
  }
  return 0;
}

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* "HOST:PORT" or "[V6]:PORT" -> host and port strings. */
static kdc_status split_address(const char *a, char *host, size_t hn, char *port, size_t pn) {
  const char *colon = strrchr(a, ':');
  const char *h = a, *he = colon;
  if (a[0] == '[') {
    h = a + 1;
    he = strchr(a, ']');
    if (!he || he[1] != ':') colon = NULL;
  }
  if (!colon || colon == a || !colon[1] || (size_t)(he - h) >= hn || strlen(colon + 1) >= pn)
    return KDC_ERR(KDC_INVALID_INPUT, "--coordinator \"%s\": expected HOST:PORT", a);
  memcpy(host, h, (size_t)(he - h));
  host[he - h] = 0;
  strcpy(port, colon + 1);
  /* getaddrinfo takes "99999" and binds port 99999 mod 65536: process 0 then
   * waits the whole timeout for peers that connect elsewhere. */
  char *end = NULL;
  errno = 0;
  long v = strtol(port, &end, 10);
  if (errno || *end || port[0] < '0' || port[0] > '9' || v < 1 || v > 65535)
    return KDC_ERR(KDC_INVALID_INPUT, "--coordinator \"%s\": port \"%s\" is not a number from 1 to 65535",
                   a, port);
  return NULL;
}

kdc_status kdc_rt_procs_check_address(const char *coordinator) {
  char host[256], port[32];
  return split_address(coordinator, host, sizeof host, port, sizeof port);
}

static kdc_status resolve(const char *host, const char *port, bool passive, struct addrinfo **out) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = passive ? AI_PASSIVE : 0};
  int rc = getaddrinfo(host, port, &hints, out);
  if (rc)
    return KDC_ERR(KDC_INVALID_INPUT, "coordinator %s:%s: %s", host, port, gai_strerror(rc));
  return NULL;
}

static kdc_status listen_on(const struct addrinfo *ai, const char *what, int backlog, int *out) {
  int err = 0;
  for (; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0) continue;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
      *out = fd;
      return NULL;
    }
    err = errno;
    close(fd);
  }
  return KDC_ERR(KDC_UNAVAILABLE, "%s: cannot listen: %s", what, strerror(err));
}

/* Connects to |host|:|port|, retrying while nobody listens, by |deadline|. */
static int connect_retry(const char *host, const char *port, double deadline) {
  for (;;) {
    struct addrinfo *ai = NULL;
    if (resolve(host, port, false, &ai)) return -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      int rc = connect(fd, a->ai_addr, a->ai_addrlen), err = rc ? errno : 0;
      if (rc && err == EINPROGRESS) {
        struct pollfd pf = {fd, POLLOUT, 0};
        socklen_t len = sizeof err;
        if (poll(&pf, 1, ms_left(deadline, 1000)) == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        else err = ETIMEDOUT;
      }
      if (!err) {
        freeaddrinfo(ai);
        tune(fd);
        return fd;
      }
      close(fd);
    }
    freeaddrinfo(ai);
    if (ms_left(deadline, 50) == 0) return -2;
    nanosleep(&(struct timespec){0, 50000000}, NULL);
  }
}

static const char *verdict_str(uint32_t v) {
  switch (v) {
  case RT_V_PLAN: return "runs a different plan (checksum)";
  case RT_V_COUNT: return "was started with a different --num-processes";
  case RT_V_ID: return "has a process id out of range or already taken";
  default: return "did not connect in time";
  }
}

/* The per-connection handshake deadline: a connection that has not said a
 * whole HELLO by then is dropped (it holds nothing: the others still meet). */
enum { HS_MAX_S = 10, MAX_PENDING = 32, MAX_NOTES = 8 };

typedef struct rdv {
  tcp_net *t;
  int n, id;
  uint64_t key;
  rt_hs_token token;
  const char *where;  /* the coordinator address, for messages */
  double deadline, timeout_s;
  uint8_t (*nonce)[RT_HS_NONCE];  /* per process: the nonce of its HELLO to us */
  rt_hs_address *table;           /* process 0: every process's address */
  int notes;                      /* dropped connections reported */
} rdv;

typedef struct pending {
  int fd;
  double deadline;
  size_t got;
  uint8_t challenge[RT_HS_NONCE];
  uint8_t buf[RT_HS_HELLO_BYTES];
  char host[RT_HS_HOST];
} pending;

/* Drops a connection that is not (or not yet) a member, with a note. */
static void drop(rdv *r, pending *pc, const char *why) {
  close(pc->fd);
  pc->fd = -1;
  char who[300];
  if (r->id == 0) snprintf(who, sizeof who, "coordinator %s", r->where);
  else snprintf(who, sizeof who, "process %d (rank %d)", r->id, r->id);
  if (r->notes++ < MAX_NOTES)
    fprintf(stderr, "kdc: note: %s: dropped a connection from %s: %s%s\n", who, pc->host, why,
            r->notes == MAX_NOTES ? " (further ones are not reported)" : "");
}

static bool send_now(int fd, const void *buf, size_t n) {
  return io_full(fd, (void *)buf, n, true, now_s() + 1) == 0;
}

static void send_verdict(rdv *r, int fd, uint32_t v, int culprit, const uint8_t *nonce) {
  static const uint8_t zero[RT_HS_NONCE];
  uint8_t m[RT_HS_VERDICT_BYTES];
  rt_hs_verdict vd = {v, culprit, r->n};
  rt_hs_verdict_make(m, &vd, nonce ? nonce : zero, r->token);
  send_now(fd, m, sizeof m);
}

/* Process 0: tells every connected process |v| about |culprit|. */
static void reject_all(rdv *r, uint32_t v, int culprit) {
  for (int p = 1; p < r->n; p++)
    if (r->t->peer[p].fd >= 0) send_verdict(r, r->t->peer[p].fd, v, culprit, r->nonce[p]);
}

/* A HELLO that passed the token check.  Process 0: the job's checks (a
 * real member that does not fit ends the job, naming it); process i: the
 * higher id it expects.  Returns the job's error, or NULL (*|keep|: a
 * member now). */
static kdc_status admit(rdv *r, pending *pc, const rt_hs_hello *h, bool *keep) {
  *keep = false;
  if (r->id > 0) {
    if (h->key != r->key || h->n != r->n || h->id <= r->id || r->t->peer[h->id].fd >= 0) {
      drop(r, pc, "a HELLO that does not fit this job");
      return NULL;
    }
  } else {
    uint32_t v = h->key != r->key                        ? RT_V_PLAN
                 : h->n != r->n                          ? RT_V_COUNT
                 : h->id < 1 || r->t->peer[h->id].fd >= 0 ? RT_V_ID
                                                          : RT_V_OK;
    if (v != RT_V_OK) {
      send_verdict(r, pc->fd, v, h->id, h->nonce);
      reject_all(r, v, h->id);
      close(pc->fd);
      pc->fd = -1;
      if (v == RT_V_COUNT)
        return KDC_ERR(KDC_INVALID_INPUT, "coordinator %s: process %d (rank %d) says %d "
                       "processes, this one %d", r->where, h->id, h->id, h->n, r->n);
      return KDC_ERR(KDC_INVALID_INPUT, "coordinator %s: process %d (rank %d) %s%s", r->where,
                     h->id, h->id, verdict_str(v), v == RT_V_PLAN ? " than process 0: every "
                     "process must run the same plan.bin" : "");
    }
    snprintf(r->table[h->id].host, RT_HS_HOST, "%s", pc->host);
    r->table[h->id].port = h->port;
  }
  if (r->id > 0) send_verdict(r, pc->fd, RT_V_OK, -1, h->nonce);
  memcpy(r->nonce[h->id], h->nonce, RT_HS_NONCE);
  r->t->peer[h->id].fd = pc->fd;
  pc->fd = -1;
  *keep = true;
  return NULL;
}

/* Reads what came on a pending connection and acts on a whole HELLO. */
static kdc_status hear(rdv *r, pending *pc, int *arrived) {
  ssize_t k = recv(pc->fd, pc->buf + pc->got, sizeof pc->buf - pc->got, MSG_DONTWAIT);
  if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    drop(r, pc, "it closed before a whole HELLO");
    return NULL;
  }
  if (k < 0) return NULL;
  pc->got += (size_t)k;
  rt_hs_hello h;
  switch (rt_hs_hello_parse(pc->buf, pc->got, pc->challenge, r->token, &h)) {
  case RT_HS_MORE: return NULL;
  case RT_HS_FOREIGN: drop(r, pc, "not a kdc process"); return NULL;
  case RT_HS_VERSION: drop(r, pc, "a kdc of another version"); return NULL;
  case RT_HS_BAD: drop(r, pc, "a malformed HELLO"); return NULL;
  case RT_HS_AUTH:
    send_verdict(r, pc->fd, RT_V_AUTH, -1, NULL);
    drop(r, pc, r->token.len ? "it does not hold this job's token" :
         "it uses a job token, this process none");
    return NULL;
  case RT_HS_OK: break;
  }
  bool keep;
  kdc_status st = admit(r, pc, &h, &keep);
  if (keep) ++*arrived;
  return st;
}

/* Accepts connections on |lfd| until every process of [lo, r->n) but
 * this one has passed the handshake, or the deadline.  Connections that do
 * not (silent, foreign, without the token) are dropped one by one; they
 * never stop the others. */
static kdc_status meet(rdv *r, int lfd, int lo) {
  pending pend[MAX_PENDING];
  int np = 0, arrived = 0, want = r->n - lo;
  double hs = r->timeout_s < HS_MAX_S ? r->timeout_s : HS_MAX_S;
  kdc_status st = NULL;
  while (arrived < want && !st) {
    struct pollfd fds[MAX_PENDING + 1];
    fds[0] = (struct pollfd){lfd, POLLIN, 0};
    double wake = r->deadline;
    for (int i = 0; i < np; i++) {
      fds[1 + i] = (struct pollfd){pend[i].fd, POLLIN, 0};
      if (pend[i].deadline < wake) wake = pend[i].deadline;
    }
    if (ms_left(r->deadline, 1) == 0) break;
    poll(fds, (nfds_t)np + 1, ms_left(wake, 200));
    for (int i = 0; i < np && !st; i++)
      if (fds[1 + i].revents) st = hear(r, &pend[i], &arrived);
    for (int i = 0; i < np; i++)
      if (pend[i].fd >= 0 && now_s() >= pend[i].deadline)
        drop(r, &pend[i], "no whole HELLO within the handshake deadline");
    int w = 0;  /* compact */
    for (int i = 0; i < np; i++)
      if (pend[i].fd >= 0) pend[w++] = pend[i];
    np = w;
    if (st) break;
    for (;;) {  /* every connection waiting in the backlog */
      struct sockaddr_storage sa;
      socklen_t len = sizeof sa;
      int fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      tune(fd);
      if (np == MAX_PENDING) {  /* the oldest makes room */
        drop(r, &pend[0], "too many connections waiting for their HELLO");
        memmove(pend, pend + 1, (MAX_PENDING - 1) * sizeof *pend);
        np--;
      }
      pending *pc = &pend[np];
      *pc = (pending){.fd = fd, .deadline = now_s() + hs};
      if (getnameinfo((struct sockaddr *)&sa, len, pc->host, RT_HS_HOST, NULL, 0, NI_NUMERICHOST))
        snprintf(pc->host, RT_HS_HOST, "?");
      uint8_t ch[RT_HS_CHALLENGE_BYTES];
      if (!rt_hs_nonce(pc->challenge)) {
        close(fd);
        st = KDC_ERR(KDC_INTERNAL, "rendezvous: no random bytes for a nonce (getrandom)");
        break;
      }
      rt_hs_challenge_make(ch, pc->challenge, r->token.len > 0);
      if (send(fd, ch, sizeof ch, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof ch) {
        close(fd);
        continue;
      }
      np++;
    }
  }
  for (int i = 0; i < np; i++) close(pend[i].fd);
  if (st || arrived == want) return st;
  int miss = lo;
  while (miss < r->n && (miss == r->id || r->t->peer[miss].fd >= 0)) miss++;
  if (r->id > 0)
    return KDC_ERR(KDC_UNAVAILABLE, "process %d (rank %d): process %d (rank %d) did not connect "
                   "within %g s", r->id, r->id, miss, miss, r->timeout_s);
  reject_all(r, RT_V_MISSING, miss);
  return KDC_ERR(KDC_UNAVAILABLE, "coordinator %s: process %d (rank %d) did not connect within "
                 "%g s (%d of %d processes arrived)", r->where, miss, miss, r->timeout_s,
                 arrived + 1, r->n);
}

static kdc_status coordinate(rdv *r, const char *host, const char *port) {
  struct addrinfo *ai = NULL;
  KDC_RETURN_IF_ERROR(resolve(host, port, true, &ai));
  int lfd = -1;
  kdc_status st = listen_on(ai, r->where, r->n + MAX_PENDING, &lfd);
  freeaddrinfo(ai);
  if (st) return st;
  st = meet(r, lfd, 1);
  close(lfd);
  if (st) return st;
  uint8_t *tab = kdc_xcalloc((size_t)r->n, RT_HS_ADDRESS_BYTES);
  for (int p = 0; p < r->n; p++)
    rt_hs_address_make(tab + (size_t)p * RT_HS_ADDRESS_BYTES, &r->table[p]);
  for (int p = 1; p < r->n && !st; p++) {
    uint8_t ok[RT_HS_VERDICT_BYTES];
    rt_hs_verdict_make(ok, &(rt_hs_verdict){RT_V_OK, -1, r->n}, r->nonce[p], r->token);
    if (io_full(r->t->peer[p].fd, ok, sizeof ok, true, r->deadline) ||
        io_full(r->t->peer[p].fd, tab, (size_t)r->n * RT_HS_ADDRESS_BYTES, true, r->deadline))
      st = KDC_ERR(KDC_UNAVAILABLE, "coordinator %s: process %d (rank %d) left during the "
                   "rendezvous", r->where, p, p);
  }
  free(tab);
  return st;
}

/* A listening socket on the local address of |c| (the address that reaches
 * the coordinator), for the processes of higher ids. */
static kdc_status listen_beside(rdv *r, int c, int *lfd, uint32_t *lport) {
  struct sockaddr_storage me;
  socklen_t len = sizeof me;
  getsockname(c, (struct sockaddr *)&me, &len);
  if (me.ss_family == AF_INET) ((struct sockaddr_in *)&me)->sin_port = 0;
  else ((struct sockaddr_in6 *)&me)->sin6_port = 0;
  struct addrinfo ai = {.ai_family = me.ss_family, .ai_socktype = SOCK_STREAM,
                        .ai_addr = (struct sockaddr *)&me, .ai_addrlen = len};
  KDC_RETURN_IF_ERROR(listen_on(&ai, "process listener", r->n + MAX_PENDING, lfd));
  len = sizeof me;
  getsockname(*lfd, (struct sockaddr *)&me, &len);
  *lport = ntohs(me.ss_family == AF_INET ? ((struct sockaddr_in *)&me)->sin_port
                                         : ((struct sockaddr_in6 *)&me)->sin6_port);
  return NULL;
}

/* Connects to |host|:|port| (|whom| for messages) and says HELLO after its
 * CHALLENGE, retrying while nobody listens or the connection is dropped
 * before the challenge (an acceptor with too many pending connections).
 * |lfd| non-NULL (joining the coordinator): first makes this process's
 * listening socket, whose port the HELLO carries.  *|fd| is the
 * connection, |nonce| the nonce of our HELLO (the verdict's MAC covers it). */
static kdc_status greet(rdv *r, const char *host, const char *port, int *lfd, const char *whom,
                        int *fd, uint8_t nonce[RT_HS_NONCE]) {
  *fd = -1;
  uint32_t lport = 0;
  for (;;) {
    int c = connect_retry(host, port, r->deadline);
    if (c < 0)
      return KDC_ERR(KDC_UNAVAILABLE, "process %d (rank %d): %s was not reachable within %g s",
                     r->id, r->id, whom, r->timeout_s);
    if (lfd && *lfd < 0) {
      kdc_status st = listen_beside(r, c, lfd, &lport);
      if (st) {
        close(c);
        return st;
      }
    }
    uint8_t ch[RT_HS_CHALLENGE_BYTES], challenge[RT_HS_NONCE];
    int rc = io_full(c, ch, sizeof ch, false, r->deadline);
    if (rc == -1 && ms_left(r->deadline, 50) > 0) {  /* dropped: try again */
      close(c);
      nanosleep(&(struct timespec){0, 50000000}, NULL);
      continue;
    }
    rt_hs_result hr = rc ? RT_HS_MORE : rt_hs_challenge_parse(ch, sizeof ch, challenge);
    if (hr != RT_HS_OK) {
      close(c);
      return KDC_ERR(rc ? KDC_UNAVAILABLE : KDC_INVALID_INPUT, "process %d (rank %d): %s %s",
                     r->id, r->id, whom, rc ? "did not start the handshake in time" :
                     hr == RT_HS_VERSION ? "is a kdc of another version" :
                     "is not a kdc process (no kdc handshake)");
    }
    if (!rt_hs_nonce(nonce)) {
      close(c);
      return KDC_ERR(KDC_INTERNAL, "rendezvous: no random bytes for a nonce (getrandom)");
    }
    rt_hs_hello h = {r->id, r->n, lport, r->key, {0}};
    memcpy(h.nonce, nonce, RT_HS_NONCE);
    uint8_t m[RT_HS_HELLO_BYTES];
    rt_hs_hello_make(m, &h, challenge, r->token);
    if (io_full(c, m, sizeof m, true, r->deadline)) {
      close(c);
      return KDC_ERR(KDC_UNAVAILABLE, "process %d (rank %d): %s closed the connection during "
                     "the handshake", r->id, r->id, whom);
    }
    *fd = c;
    return NULL;
  }
}

/* The verdict of |whom| on our HELLO (bounded by |deadline|). */
static kdc_status hear_verdict(rdv *r, int fd, const uint8_t nonce[RT_HS_NONCE], double deadline,
                               const char *whom) {
  uint8_t m[RT_HS_VERDICT_BYTES];
  rt_hs_verdict vd;
  if (io_full(fd, m, sizeof m, false, deadline))
    return KDC_ERR(KDC_UNAVAILABLE, "process %d (rank %d): %s did not complete the rendezvous "
                   "within %g s (is a process missing?)", r->id, r->id, whom, r->timeout_s);
  switch (rt_hs_verdict_parse(m, sizeof m, nonce, r->token, &vd)) {
  case RT_HS_OK: break;
  case RT_HS_AUTH:
    return KDC_ERR(KDC_INVALID_INPUT, "process %d (rank %d): %s failed the job token check: it "
                   "does not hold this job's token", r->id, r->id, whom);
  default:
    return KDC_ERR(KDC_INVALID_INPUT, "process %d (rank %d): %s sent a malformed verdict",
                   r->id, r->id, whom);
  }
  if (vd.verdict == RT_V_AUTH)
    return KDC_ERR(KDC_INVALID_INPUT, "process %d (rank %d): %s refused this process's job "
                   "token: every process of a job needs the same token (KDC_JOB_TOKEN, "
                   "KDC_JOB_TOKEN_FILE or --job-token-file), or none on loopback", r->id, r->id,
                   whom);
  if (vd.verdict != RT_V_OK)
    return KDC_ERR(vd.verdict == RT_V_MISSING ? KDC_UNAVAILABLE : KDC_INVALID_INPUT,
                   "process %d (rank %d): %s ended the job: process %d (rank %d) %s", r->id,
                   r->id, whom, vd.culprit, vd.culprit, verdict_str(vd.verdict));
  return NULL;
}

/* Process |id| > 0: joins through the coordinator, then connects the mesh. */
static kdc_status join(rdv *r, const char *host, const char *port) {
  char whom[320];
  snprintf(whom, sizeof whom, "the coordinator %s (process 0)", r->where);
  int fd = -1, lfd = -1;
  uint8_t nonce[RT_HS_NONCE];
  kdc_status st = greet(r, host, port, &lfd, whom, &fd, nonce);
  /* the coordinator answers by ITS deadline (it may have started later) */
  if (!st) {
    r->t->peer[0].fd = fd;
    st = hear_verdict(r, fd, nonce, r->deadline + r->timeout_s, whom);
  }
  uint8_t *tab = kdc_xcalloc((size_t)r->n, RT_HS_ADDRESS_BYTES);
  if (!st && io_full(fd, tab, (size_t)r->n * RT_HS_ADDRESS_BYTES, false, r->deadline))
    st = KDC_ERR(KDC_UNAVAILABLE, "process %d: the coordinator %s left during the rendezvous",
                 r->id, r->where);
  for (int j = 1; j < r->id && !st; j++) {  /* connect to the lower ids */
    rt_hs_address a;
    if (rt_hs_address_parse(tab + (size_t)j * RT_HS_ADDRESS_BYTES, RT_HS_ADDRESS_BYTES, &a)) {
      st = KDC_ERR(KDC_INVALID_INPUT, "process %d: the coordinator %s sent a malformed address "
                   "for process %d", r->id, r->where, j);
      break;
    }
    char ps[16], pwhom[128];
    snprintf(ps, sizeof ps, "%u", a.port);
    snprintf(pwhom, sizeof pwhom, "process %d (rank %d) at %s:%s", j, j, a.host, ps);
    int pf = -1;
    st = greet(r, a.host, ps, NULL, pwhom, &pf, nonce);
    if (!st) {
      r->t->peer[j].fd = pf;
      st = hear_verdict(r, pf, nonce, r->deadline, pwhom);
    }
  }
  free(tab);
  if (!st) st = meet(r, lfd, r->id + 1);  /* accept the higher ids */
  if (lfd >= 0) close(lfd);
  return st;
}

static bool loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) ||
           (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
  }
  return false;
}

kdc_status rt_net_tcp_connect(const char *coordinator, int n, int id, uint64_t key,
                              const void *token, size_t token_len, double timeout_s,
                              rt_net **out) {
  *out = NULL;
  char host[256], port[32];
  KDC_RETURN_IF_ERROR(split_address(coordinator, host, sizeof host, port, sizeof port));
  if (!token_len) {  /* beyond loopback, members must prove they belong to the job */
    struct addrinfo *ai = NULL;
    KDC_RETURN_IF_ERROR(resolve(host, port, id == 0, &ai));
    bool lo = true;
    for (struct addrinfo *a = ai; a; a = a->ai_next) lo = lo && loopback(a->ai_addr);
    freeaddrinfo(ai);
    if (!lo)
      return KDC_ERR(KDC_INVALID_INPUT, "--coordinator %s is not a loopback address: a job "
                     "beyond this host needs a job token (KDC_JOB_TOKEN, KDC_JOB_TOKEN_FILE or "
                     "--job-token-file; docs/processes.md)", coordinator);
  }
  tcp_net *t = kdc_xcalloc(1, sizeof *t);
  t->base = (rt_net){.vt = &tcp_vtable, .n = n, .id = id, .rank_word = "rank", .blame = -1};
  t->peer = kdc_xcalloc((size_t)n, sizeof *t->peer);
  for (int p = 0; p < n; p++) t->peer[p].fd = -1;
  rdv r = {t, n, id, key, {token, token_len}, coordinator, now_s() + timeout_s, timeout_s,
           kdc_xcalloc((size_t)n, RT_HS_NONCE),
           id == 0 ? kdc_xcalloc((size_t)n, sizeof(rt_hs_address)) : NULL, 0};
  kdc_status st = id == 0 ? coordinate(&r, host, port) : join(&r, host, port);
  free(r.nonce);
  free(r.table);
  if (st) {
    tcp_destroy(&t->base);
    return st;
  }
  *out = &t->base;
  return NULL;
}
