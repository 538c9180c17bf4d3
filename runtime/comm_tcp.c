/*
 * runtime/comm_tcp.c: the TCP transport of the process backend (comm.h
 * rt_net, comm_p2p.c) and its rendezvous, for processes started without
 * mpirun: `kdc run --coordinator HOST:PORT --num-processes N
 * --process-id I` (docs/processes.md).
 *
 * Rendezvous (bounded by the timeout, default the collective timeout):
 *   1. process 0 listens on HOST:PORT; every other process connects to it,
 *      retrying while nobody listens, opens its own listening socket on the
 *      local address of that connection (ephemeral port) and sends a HELLO
 *      {id, N, key = the plan's checksum, its port};
 *   2. process 0 checks every HELLO: a different N or plan, an id out of
 *      range or twice, is an error naming that process -- on process 0 and,
 *      through a REJECT, on every connected process; a process that has not
 *      connected at the deadline is named the same way.  Then it sends each
 *      the TABLE of every process's address (as process 0 saw it) and port;
 *   3. process i connects to every process 0 < j < i and accepts one
 *      connection from every j > i (a peer HELLO says who it is).
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
 * sends an ABORT frame naming the process it blames to every peer whose
 * stream is at a frame boundary, so the others report the real culprit.
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

enum { MAGIC = 0x4b444354u /* "KDCT" */, VERSION = 1, HDR = 24, HOST_LEN = 64 };
enum { K_DATA = 1, K_ABORT = 2 };                     /* frame kinds */
enum { V_OK = 0, V_PLAN, V_COUNT, V_ID, V_MISSING };  /* rendezvous verdicts */

typedef struct frame {
  uint32_t magic, kind;
  int32_t tag;
  uint32_t aux;
  uint64_t bytes;
} frame;
_Static_assert(sizeof(frame) == HDR, "frame header layout");

typedef struct hello {
  uint32_t magic, version;
  int32_t id, n;
  uint64_t key;
  uint32_t port, pad;
} hello;

typedef struct verdict {
  uint32_t magic, verdict;
  int32_t culprit, n;
} verdict;

typedef struct address {
  char host[HOST_LEN];
  uint32_t port, pad;
} address;

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

/* A peer that ended the job first (an ABORT frame after what we already
 * expected from it, or peeked at the head of its stream) explains a closed connection or a timeout better: a
 * process that failed because of process X tells its peers about X. */
static void prefer_abort(tcp_net *t, rt_net_miss *out) {
  for (int p = 0; p < t->base.n; p++) {
    peer *pe = &t->peer[p];
    if (p == t->base.id || pe->fd < 0) continue;
    rt_net_miss m = {RT_NET_OK, p, -1, false, -1};  /* read what came, frames finish */
    if (pump_recv(pe, &m) == RT_NET_ABORTED) {
      *out = (rt_net_miss){RT_NET_ABORTED, p, -1, false, m.culprit};
      return;
    }
    if (pe->rq.head < pe->rq.n && pe->rq.m[pe->rq.head].done > 0) continue;  /* mid-frame */
    frame f;
    if (recv(pe->fd, &f, sizeof f, MSG_PEEK | MSG_DONTWAIT) == (ssize_t)sizeof f &&
        f.magic == MAGIC && f.kind == K_ABORT) {
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

static int io_full(int fd, void *buf, size_t n, bool send_, double deadline);

/* The peers must find the ABORT at a frame boundary: a frame half sent is
 * completed first, with zeros (its data is lost anyway: the job is over). */
static void tcp_abort(rt_net *base, int culprit) {
  tcp_net *t = (tcp_net *)base;
  frame f = {MAGIC, K_ABORT, culprit, 0, 0};
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
    io_full(pe->fd, &f, sizeof f, true, deadline);
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

/* Accepts one connection on |lfd| by |deadline|, or -1. */
static int accept_by(int lfd, double deadline, struct sockaddr_storage *sa) {
  for (;;) {
    socklen_t len = sizeof *sa;
    int fd = accept4(lfd, (struct sockaddr *)sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      tune(fd);
      return fd;
    }
    struct pollfd pf = {lfd, POLLIN, 0};
    int left = ms_left(deadline, 200);
    if (left == 0) return -1;
    poll(&pf, 1, left);
  }
}

static const char *verdict_str(uint32_t v) {
  switch (v) {
  case V_PLAN: return "runs a different plan (checksum)";
  case V_COUNT: return "was started with a different --num-processes";
  case V_ID: return "has a process id out of range or already taken";
  default: return "did not connect in time";
  }
}

typedef struct rdv {
  tcp_net *t;
  int n, id;
  uint64_t key;
  const char *where;  /* the coordinator address, for messages */
  double deadline, timeout_s;
} rdv;

/* Process 0: tells every connected process |v| about |culprit|. */
static void reject_all(rdv *r, uint32_t v, int culprit) {
  verdict vd = {MAGIC, v, culprit, r->n};
  for (int p = 1; p < r->n; p++)
    if (r->t->peer[p].fd >= 0) io_full(r->t->peer[p].fd, &vd, sizeof vd, true, now_s() + 1);
}

static kdc_status coordinate(rdv *r, const char *host, const char *port) {
  struct addrinfo *ai = NULL;
  KDC_RETURN_IF_ERROR(resolve(host, port, true, &ai));
  int lfd = -1;
  kdc_status st = listen_on(ai, r->where, r->n, &lfd);
  freeaddrinfo(ai);
  if (st) return st;
  address *table = kdc_xcalloc((size_t)r->n, sizeof *table);
  int extra[64], n_extra = 0;  /* connections refused before they could be placed */
  for (int got = 1; got < r->n && !st;) {
    struct sockaddr_storage sa;
    int fd = accept_by(lfd, r->deadline, &sa);
    hello h = {0};
    if (fd < 0 || io_full(fd, &h, sizeof h, false, r->deadline)) {
      if (fd >= 0) close(fd);
      if (fd >= 0 && ms_left(r->deadline, 1) > 0) continue;
      int miss = 1;
      while (miss < r->n && r->t->peer[miss].fd >= 0) miss++;
      reject_all(r, V_MISSING, miss);
      st = KDC_ERR(KDC_UNAVAILABLE, "coordinator %s: process %d (rank %d) did not connect "
                   "within %g s (%d of %d processes arrived)", r->where, miss, miss, r->timeout_s,
                   got, r->n);
      break;
    }
    uint32_t v = h.magic != MAGIC || h.version != VERSION ? V_PLAN
                 : h.key != r->key                         ? V_PLAN
                 : h.n != r->n                             ? V_COUNT
                 : h.id < 1 || h.id >= r->n || r->t->peer[h.id].fd >= 0 ? V_ID
                                                                         : V_OK;
    if (v != V_OK) {
      verdict vd = {MAGIC, v, h.id, r->n};
      io_full(fd, &vd, sizeof vd, true, now_s() + 1);
      reject_all(r, v, h.id);
      if (n_extra < 64) extra[n_extra++] = fd;
      else close(fd);
      if (v == V_COUNT)
        st = KDC_ERR(KDC_INVALID_INPUT, "coordinator %s: process %d (rank %d) says %d processes, "
                     "this one %d", r->where, h.id, h.id, h.n, r->n);
      else
        st = KDC_ERR(KDC_INVALID_INPUT, "coordinator %s: process %d (rank %d) %s%s", r->where,
                     h.id, h.id, verdict_str(v), v == V_PLAN ? " than process 0: every process "
                     "must run the same plan.bin" : "");
      break;
    }
    r->t->peer[h.id].fd = fd;
    getnameinfo((struct sockaddr *)&sa, sizeof sa, table[h.id].host, HOST_LEN, NULL, 0,
                NI_NUMERICHOST);
    table[h.id].port = h.port;
    got++;
  }
  if (!st) {
    verdict ok = {MAGIC, V_OK, -1, r->n};
    for (int p = 1; p < r->n && !st; p++)
      if (io_full(r->t->peer[p].fd, &ok, sizeof ok, true, r->deadline) ||
          io_full(r->t->peer[p].fd, table, (size_t)r->n * sizeof *table, true, r->deadline))
        st = KDC_ERR(KDC_UNAVAILABLE, "coordinator %s: process %d (rank %d) left during the "
                     "rendezvous", r->where, p, p);
  }
  for (int i = 0; i < n_extra; i++) close(extra[i]);
  free(table);
  close(lfd);
  return st;
}

/* Process |id| > 0: joins through the coordinator, then connects the mesh. */
static kdc_status join(rdv *r, const char *host, const char *port) {
  int fd = connect_retry(host, port, r->deadline);
  if (fd < 0)
    return KDC_ERR(KDC_UNAVAILABLE, "process %d (rank %d): the coordinator %s (process 0) was "
                   "not reachable within %g s", r->id, r->id, r->where, r->timeout_s);
  r->t->peer[0].fd = fd;
  /* my listening socket, on the address that reaches the coordinator */
  struct sockaddr_storage me;
  socklen_t len = sizeof me;
  getsockname(fd, (struct sockaddr *)&me, &len);
  if (me.ss_family == AF_INET) ((struct sockaddr_in *)&me)->sin_port = 0;
  else ((struct sockaddr_in6 *)&me)->sin6_port = 0;
  struct addrinfo ai = {.ai_family = me.ss_family, .ai_socktype = SOCK_STREAM,
                        .ai_addr = (struct sockaddr *)&me, .ai_addrlen = len};
  int lfd = -1;
  KDC_RETURN_IF_ERROR(listen_on(&ai, "process listener", r->n, &lfd));
  len = sizeof me;
  getsockname(lfd, (struct sockaddr *)&me, &len);
  uint32_t lport = ntohs(me.ss_family == AF_INET ? ((struct sockaddr_in *)&me)->sin_port
                                                 : ((struct sockaddr_in6 *)&me)->sin6_port);
  hello h = {MAGIC, VERSION, r->id, r->n, r->key, lport, 0};
  verdict vd = {0};
  kdc_status st = NULL;
  /* the coordinator answers by ITS deadline (it may have started later) */
  if (io_full(fd, &h, sizeof h, true, r->deadline) ||
      io_full(fd, &vd, sizeof vd, false, r->deadline + r->timeout_s))
    st = KDC_ERR(KDC_UNAVAILABLE, "process %d (rank %d): the coordinator %s (process 0) did not "
                 "complete the rendezvous within %g s (is a process missing?)", r->id, r->id,
                 r->where, r->timeout_s);
  else if (vd.magic != MAGIC)
    st = KDC_ERR(KDC_INVALID_INPUT, "process %d: %s is not a kdc coordinator", r->id, r->where);
  else if (vd.verdict != V_OK)
    st = KDC_ERR(vd.verdict == V_MISSING ? KDC_UNAVAILABLE : KDC_INVALID_INPUT,
                 "process %d (rank %d): the coordinator %s (process 0) ended the job: process %d "
                 "(rank %d) %s", r->id, r->id, r->where, vd.culprit, vd.culprit,
                 verdict_str(vd.verdict));
  address *table = kdc_xcalloc((size_t)r->n, sizeof *table);
  if (!st && io_full(fd, table, (size_t)r->n * sizeof *table, false, r->deadline))
    st = KDC_ERR(KDC_UNAVAILABLE, "process %d: the coordinator %s left during the rendezvous",
                 r->id, r->where);
  for (int j = 1; j < r->id && !st; j++) {  /* connect to the lower ids */
    char ps[16];
    table[j].host[HOST_LEN - 1] = 0;
    snprintf(ps, sizeof ps, "%u", table[j].port);
    int pf = connect_retry(table[j].host, ps, r->deadline);
    hello ph = {MAGIC, VERSION, r->id, r->n, r->key, 0, 0};
    if (pf < 0 || io_full(pf, &ph, sizeof ph, true, r->deadline)) {
      if (pf >= 0) close(pf);
      st = KDC_ERR(KDC_UNAVAILABLE, "process %d (rank %d): cannot connect to process %d (rank "
                   "%d) at %s:%s within %g s", r->id, r->id, j, j, table[j].host, ps, r->timeout_s);
      break;
    }
    r->t->peer[j].fd = pf;
  }
  for (int got = r->id + 1; got < r->n && !st; got++) {  /* accept the higher ids */
    struct sockaddr_storage sa;
    int pf = accept_by(lfd, r->deadline, &sa);
    hello ph = {0};
    if (pf < 0 || io_full(pf, &ph, sizeof ph, false, r->deadline) || ph.magic != MAGIC ||
        ph.key != r->key || ph.id <= r->id || ph.id >= r->n || r->t->peer[ph.id].fd >= 0) {
      if (pf >= 0) close(pf);
      int miss = r->id + 1;
      while (miss < r->n && r->t->peer[miss].fd >= 0) miss++;
      st = KDC_ERR(KDC_UNAVAILABLE, "process %d (rank %d): process %d (rank %d) did not connect "
                   "within %g s", r->id, r->id, miss, miss, r->timeout_s);
      break;
    }
    r->t->peer[ph.id].fd = pf;
  }
  free(table);
  close(lfd);
  return st;
}

kdc_status rt_net_tcp_connect(const char *coordinator, int n, int id, uint64_t key,
                              double timeout_s, rt_net **out) {
  *out = NULL;
  char host[256], port[32];
  KDC_RETURN_IF_ERROR(split_address(coordinator, host, sizeof host, port, sizeof port));
  tcp_net *t = kdc_xcalloc(1, sizeof *t);
  t->base = (rt_net){&tcp_vtable, n, id, "rank", -1};
  t->peer = kdc_xcalloc((size_t)n, sizeof *t->peer);
  for (int p = 0; p < n; p++) t->peer[p].fd = -1;
  rdv r = {t, n, id, key, coordinator, now_s() + timeout_s, timeout_s};
  kdc_status st = id == 0 ? coordinate(&r, host, port) : join(&r, host, port);
  if (st) {
    tcp_destroy(&t->base);
    return st;
  }
  *out = &t->base;
  return NULL;
}
