/*
 * runtime/place.c: the process's place in a job from flags, KDC_*
 * variables, an MPI launcher or Slurm, with where each value came from
 * (place.h, docs/processes.md).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kdc/arena.h"
#include "runtime/place.h"

#define BAD(...) KDC_ERR(KDC_INVALID_INPUT, __VA_ARGS__)

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* A non-negative integer variable: *out, or -1 when unset. */
static kdc_status env_int(const char *name, long max, int *out) {
  const char *v = env(name);
  *out = -1;
  if (!v) return NULL;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < 0 || x > max)
    return BAD("%s=\"%s\": expected an integer from 0 to %ld", name, v, max);
  *out = (int)x;
  return NULL;
}

/* ---- Slurm host lists --------------------------------------------------------- */

typedef struct hl {
  const char *what, *list;
  char **hosts;
  size_t max, n, total;
} hl;

static void hl_emit(hl *h, const char *host) {
  if (h->n < h->max) h->hosts[h->n++] = kdc_xstrdup(host);
  h->total++;
}

/* Expands |expr| (one host expression, no top-level comma) after |head|. */
static kdc_status hl_expand(hl *h, const char *head, const char *expr) {
  const char *lb = strchr(expr, '[');
  if (!lb) {
    if (strchr(expr, ']')) return BAD("%s=\"%s\": \"]\" without \"[\"", h->what, h->list);
    char *host = kdc_xmalloc(strlen(head) + strlen(expr) + 1);
    strcpy(host, head);
    strcat(host, expr);
    if (!*host) {
      free(host);
      return BAD("%s=\"%s\": an empty host name", h->what, h->list);
    }
    hl_emit(h, host);
    free(host);
    return NULL;
  }
  const char *rb = strchr(lb, ']');
  if (!rb) return BAD("%s=\"%s\": \"[\" without \"]\"", h->what, h->list);
  if (memchr(lb + 1, '[', (size_t)(rb - lb - 1)))
    return BAD("%s=\"%s\": nested \"[\"", h->what, h->list);
  size_t hl0 = strlen(head), pre = (size_t)(lb - expr);
  for (const char *r = lb + 1; r < rb;) {
    const char *comma = memchr(r, ',', (size_t)(rb - r));
    const char *end = comma ? comma : rb, *dash = memchr(r, '-', (size_t)(end - r));
    const char *hi_s = dash ? dash + 1 : r;
    size_t lo_len = (size_t)((dash ? dash : end) - r), hi_len = (size_t)(end - hi_s);
    bool ok = lo_len > 0 && hi_len > 0 && lo_len < 19 && hi_len < 19;
    for (size_t i = 0; ok && i < lo_len; i++) ok = isdigit((unsigned char)r[i]);
    for (size_t i = 0; ok && i < hi_len; i++) ok = isdigit((unsigned char)hi_s[i]);
    long long lo = ok ? strtoll(r, NULL, 10) : 0, hi = ok ? strtoll(hi_s, NULL, 10) : 0;
    if (!ok || hi < lo)
      return BAD("%s=\"%s\": range \"%.*s\": expected N or LO-HI (digits, LO <= HI)", h->what,
                 h->list, (int)(end - r), r);
    if (hi - lo >= 1 << 20) return BAD("%s=\"%s\": more than 2^20 hosts", h->what, h->list);
    int width = lo_len > 1 && r[0] == '0' ? (int)lo_len : 0;  /* zero padding */
    for (long long v = lo; v <= hi; v++) {
      if (h->total >= (size_t)1 << 20) return BAD("%s=\"%s\": more than 2^20 hosts", h->what, h->list);
      char *nh = kdc_xmalloc(hl0 + pre + 24);
      memcpy(nh, head, hl0);
      memcpy(nh + hl0, expr, pre);
      snprintf(nh + hl0 + pre, 24, "%0*lld", width, v);
      kdc_status st = hl_expand(h, nh, rb + 1);
      free(nh);
      KDC_RETURN_IF_ERROR(st);
    }
    r = comma ? comma + 1 : rb;
  }
  return NULL;
}

kdc_status kdc_rt_slurm_hostlist(const char *what, const char *list, char **hosts, size_t max,
                                 size_t *n, size_t *total) {
  hl h = {what, list, hosts, max, 0, 0};
  kdc_status st = NULL;
  size_t len = strlen(list);
  char *expr = kdc_xmalloc(len + 1);
  for (size_t i = 0; i <= len && !st;) {  /* top-level commas separate expressions */
    size_t j = i;
    int depth = 0;
    while (j < len && (list[j] != ',' || depth)) {
      depth += list[j] == '[' ? 1 : list[j] == ']' ? -1 : 0;
      j++;
    }
    memcpy(expr, list + i, j - i);
    expr[j - i] = 0;
    st = hl_expand(&h, "", expr);
    i = j + 1;
  }
  free(expr);
  if (!st && h.total == 0) st = BAD("%s=\"%s\": no host", what, list);
  if (st) {
    for (size_t i = 0; i < h.n; i++) free(hosts[i]);
    h.n = 0;
  }
  *n = h.n;
  *total = h.total;
  return st;
}

int kdc_rt_slurm_tasks_on_node(const char *list, int node) {
  long seen = 0;
  int found = -1;
  for (const char *c = list; *c;) {
    char *end;
    errno = 0;
    long tasks = isdigit((unsigned char)*c) ? strtol(c, &end, 10) : -1, times = 1;
    if (tasks < 0 || errno || tasks > 1 << 20) return -1;
    c = end;
    if (*c == '(') {  /* "(xN)" */
      if (c[1] != 'x' || !isdigit((unsigned char)c[2])) return -1;
      times = strtol(c + 2, &end, 10);
      if (*end != ')' || times < 1 || times > 1 << 20) return -1;
      c = end + 1;
    }
    if (node >= seen && node < seen + times) found = (int)tasks;
    seen += times;
    if (*c == ',' && c[1]) c++;
    else if (*c) return -1;
  }
  return found;  /* the whole list is checked first */
}

/* ---- device ids ----------------------------------------------------------------- */

kdc_status kdc_rt_parse_device_ids(const char *what, const char *s, int *ids, int *n) {
  *n = 0;
  for (const char *c = s;;) {
    char *end;
    errno = 0;
    long v = isdigit((unsigned char)*c) ? strtol(c, &end, 10) : -1;
    if (v < 0 || errno || v > 1 << 20 || (*end && *end != ','))
      return BAD("%s \"%s\": expected GPU ordinals like 0,1", what, s);
    for (int i = 0; i < *n; i++)
      if (ids[i] == (int)v) return BAD("%s \"%s\": GPU %ld twice", what, s, v);
    if (*n == KDC_RT_MAX_LOCAL_DEVICES)
      return BAD("%s \"%s\": more than %d GPUs", what, s, KDC_RT_MAX_LOCAL_DEVICES);
    ids[(*n)++] = (int)v;
    if (!*end) return NULL;
    c = end + 1;
  }
}

/* ---- resolution ----------------------------------------------------------------- */

static void from(char *dst, size_t n, const char *src) { snprintf(dst, n, "%s", src); }

/* The first value set of |vars| (NULL-terminated): its value and name. */
static kdc_status first_int(const char *const *vars, long max, int *out, const char **name) {
  for (int i = 0; vars[i]; i++) {
    KDC_RETURN_IF_ERROR(env_int(vars[i], max, out));
    if (*out >= 0) {
      *name = vars[i];
      return NULL;
    }
  }
  *name = NULL;
  return NULL;
}

static const char *const local_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                         "SLURM_LOCALID", NULL};

int kdc_rt_local_rank(const char **from) {
  int lr = -1;
  const char *name = NULL;
  kdc_status st = first_int(local_vars, 1 << 20, &lr, &name);
  kdc_status_free(st);  /* a malformed value: 0 here; kdc_rt_place_resolve reports it */
  if (from) *from = !st && lr >= 0 ? name : "default";
  return !st && lr >= 0 ? lr : 0;
}

static bool slurm_present(void) {
  return env("SLURM_JOB_ID") && env("SLURM_NTASKS") && env("SLURM_PROCID") &&
         env("SLURM_LOCALID") && (env("SLURM_STEP_NODELIST") || env("SLURM_JOB_NODELIST"));
}

/* Slurm's coordinator: the node list's first host, the port from the job id. */
static kdc_status slurm_coordinator(kdc_rt_place *p) {
  const char *var = env("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  char *first = NULL;
  size_t n, total;
  KDC_RETURN_IF_ERROR(kdc_rt_slurm_hostlist(var, env(var), &first, 1, &n, &total));
  int port, job;
  const char *port_from = "KDC_COORDINATOR_PORT";
  kdc_status st = env_int("KDC_COORDINATOR_PORT", 65535, &port);
  if (!st && port == 0) st = BAD("KDC_COORDINATOR_PORT=\"0\": expected a port from 1 to 65535");
  if (!st && port < 0) {
    st = env_int("SLURM_JOB_ID", 0x7fffffff, &job);
    port = job % 4096 + 61440;  /* as JAX: the top 4096 ports, by job id */
    port_from = "SLURM_JOB_ID % 4096 + 61440";
  }
  if (!st) {
    snprintf(p->coordinator, sizeof p->coordinator, "%s:%d", first, port);
    snprintf(p->coordinator_from, sizeof p->coordinator_from, "%s (first of %zu hosts), port %s",
             var, total, port_from);
  }
  free(first);
  return st;
}

kdc_status kdc_rt_place_resolve(const kdc_rt_place_flags *f, kdc_rt_place *p) {
  memset(p, 0, sizeof *p);
  static const char *const mpi_n[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
  static const char *const mpi_id[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL};
  int kn, kid, mn, mid, sn, sid, lr;
  const char *mn_from, *mid_from, *lr_from;
  KDC_RETURN_IF_ERROR(env_int("KDC_NUM_PROCESSES", 1 << 20, &kn));
  KDC_RETURN_IF_ERROR(env_int("KDC_PROCESS_ID", 1 << 20, &kid));
  KDC_RETURN_IF_ERROR(first_int(mpi_n, 1 << 20, &mn, &mn_from));
  KDC_RETURN_IF_ERROR(first_int(mpi_id, 1 << 20, &mid, &mid_from));
  KDC_RETURN_IF_ERROR(first_int(local_vars, 1 << 20, &lr, &lr_from));
  bool slurm = slurm_present();
  sn = sid = -1;
  if (slurm) {
    KDC_RETURN_IF_ERROR(env_int("SLURM_NTASKS", 1 << 20, &sn));
    KDC_RETURN_IF_ERROR(env_int("SLURM_PROCID", 1 << 20, &sid));
  }
  bool mpi = mn > 0;
  p->launcher = mpi ? "mpi" : slurm ? "slurm" : "none";
  /* process count and id: flags, KDC_*, the MPI launcher, Slurm, default */
  struct { int flag, kdc, mpi, slurm, dflt; const char *fname, *kname, *mname, *sname; int *out;
           char *src; } v[2] = {
      {f ? f->n : -1, kn, mn, sn, 1, "--num-processes", "KDC_NUM_PROCESSES", mn_from,
       "SLURM_NTASKS", &p->n, p->n_from},
      {f ? f->id : -1, kid, mid, sid, 0, "--process-id", "KDC_PROCESS_ID", mid_from,
       "SLURM_PROCID", &p->id, p->id_from}};
  for (int i = 0; i < 2; i++) {
    const char *src = "default";
    int x = v[i].dflt;
    if (v[i].flag >= 0) x = v[i].flag, src = v[i].fname;
    else if (v[i].kdc >= 0) x = v[i].kdc, src = v[i].kname;
    else if (mpi && v[i].mpi >= 0) x = v[i].mpi, src = v[i].mname;
    else if (slurm && v[i].slurm >= 0) x = v[i].slurm, src = v[i].sname;
    *v[i].out = x;
    from(v[i].src, sizeof p->n_from, src);
  }
  /* the coordinator: flag, KDC_COORDINATOR_ADDRESS, Slurm (not needed under MPI) */
  if (f && f->coordinator && *f->coordinator) {
    snprintf(p->coordinator, sizeof p->coordinator, "%s", f->coordinator);
    from(p->coordinator_from, sizeof p->coordinator_from, "--coordinator");
  } else if (env("KDC_COORDINATOR_ADDRESS")) {
    snprintf(p->coordinator, sizeof p->coordinator, "%s", env("KDC_COORDINATOR_ADDRESS"));
    from(p->coordinator_from, sizeof p->coordinator_from, "KDC_COORDINATOR_ADDRESS");
  } else if (slurm && !mpi) {
    KDC_RETURN_IF_ERROR(slurm_coordinator(p));
  } else {
    from(p->coordinator_from, sizeof p->coordinator_from, mpi ? "none (MPI connects the "
         "processes)" : "none");
  }
  /* processes on this host: Open MPI's count, Slurm's tasks on this node, all */
  int ln, node;
  KDC_RETURN_IF_ERROR(env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1 << 20, &ln));
  KDC_RETURN_IF_ERROR(env_int("SLURM_NODEID", 1 << 20, &node));
  const char *tpn = env("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                                                     : "SLURM_TASKS_PER_NODE";
  int sl = slurm && node >= 0 && env(tpn) ? kdc_rt_slurm_tasks_on_node(env(tpn), node) : -1;
  if (mpi && ln > 0) {
    p->local_n = ln;
    from(p->local_n_from, sizeof p->local_n_from, "OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (!mpi && sl > 0 && p->n == sn) {  /* Slurm's own job, not overridden */
    p->local_n = sl;
    snprintf(p->local_n_from, sizeof p->local_n_from, "%s[SLURM_NODEID=%d]", tpn, node);
  } else {
    p->local_n = p->n;
    from(p->local_n_from, sizeof p->local_n_from, "default: every process on this host");
  }
  p->local_rank = lr >= 0 ? lr : 0;
  from(p->local_rank_from, sizeof p->local_rank_from, lr >= 0 ? lr_from : "default");
  /* local device ids: flag, KDC_LOCAL_DEVICE_IDS, Slurm's one per process */
  const char *ids = f && f->local_device_ids ? f->local_device_ids : NULL;
  const char *ids_from = "--local-device-ids";
  if (!ids && env("KDC_LOCAL_DEVICE_IDS")) ids = env("KDC_LOCAL_DEVICE_IDS"), ids_from = "KDC_LOCAL_DEVICE_IDS";
  if (ids) {
    KDC_RETURN_IF_ERROR(kdc_rt_parse_device_ids(ids_from, ids, p->local_devices,
                                                &p->n_local_devices));
    from(p->devices_from, sizeof p->devices_from, ids_from);
  } else if (slurm) {
    p->local_devices[0] = p->local_rank;
    p->n_local_devices = 1;
    p->local_devices_default = true;
    snprintf(p->devices_from, sizeof p->devices_from, "%s: one device per process, as JAX",
             lr_from ? lr_from : "SLURM_LOCALID");
  } else {
    from(p->devices_from, sizeof p->devices_from, "default: every GPU the rule gives");
  }
  return NULL;
}

/* ---- printing ----------------------------------------------------------------- */

static void device_list(const kdc_rt_place *p, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < p->n_local_devices && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "," : "", p->local_devices[i]);
}

void kdc_rt_place_print(const kdc_rt_place *p, FILE *out) {
  char ids[512];
  device_list(p, ids, sizeof ids);
  fprintf(out, "  launcher          %s\n", p->launcher);
  fprintf(out, "  processes         %-21d (from %s)\n", p->n, p->n_from);
  fprintf(out, "  process id        %-21d (from %s)\n", p->id, p->id_from);
  fprintf(out, "  coordinator       %-21s (from %s)\n", *p->coordinator ? p->coordinator : "-",
          p->coordinator_from);
  fprintf(out, "  local rank        %-21d (from %s)\n", p->local_rank, p->local_rank_from);
  fprintf(out, "  on this host      %-21d (from %s)\n", p->local_n, p->local_n_from);
  fprintf(out, "  local device ids  %-21s (from %s)\n", p->n_local_devices ? ids : "-",
          p->devices_from);
}

/* |s| as a JSON string (the values are names, hosts and numbers: only quotes
 * and backslashes and control characters need escaping). */
static void json_str(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(out, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(out, "\\u%04x", *s);
    else fputc(*s, out);
  }
  fputc('"', out);
}

/* ", \"NAME\": {\"value\": V, \"from\": FROM}" for an integer value. */
static void json_int_field(FILE *out, const char *name, int v, const char *from) {
  fprintf(out, ", \"%s\": {\"value\": %d, \"from\": ", name, v);
  json_str(out, from);
  fputc('}', out);
}

void kdc_rt_place_print_json(const kdc_rt_place *p, FILE *out) {
  fprintf(out, "\"launcher\": ");
  json_str(out, p->launcher);
  json_int_field(out, "processes", p->n, p->n_from);
  json_int_field(out, "process_id", p->id, p->id_from);
  fprintf(out, ", \"coordinator\": {\"value\": ");
  if (*p->coordinator) json_str(out, p->coordinator);
  else fprintf(out, "null");
  fprintf(out, ", \"from\": ");
  json_str(out, p->coordinator_from);
  fputc('}', out);
  json_int_field(out, "local_rank", p->local_rank, p->local_rank_from);
  json_int_field(out, "processes_on_host", p->local_n, p->local_n_from);
  fprintf(out, ", \"local_device_ids\": {\"value\": ");
  if (p->n_local_devices) {
    fputc('[', out);
    for (int i = 0; i < p->n_local_devices; i++) fprintf(out, "%s%d", i ? ", " : "", p->local_devices[i]);
    fputc(']', out);
  } else {
    fprintf(out, "null");
  }
  fprintf(out, ", \"from\": ");
  json_str(out, p->devices_from);
  fputc('}', out);
}
