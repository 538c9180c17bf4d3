/*
 * `kdc devices [--json]`: what this kdc can run on (like jax.devices() /
 * keras.distribution.list_devices()): the CPU cores and the virtual meshes
 * one process runs, the GPUs the CUDA driver sees (ordinal, name, compute
 * capability, memory) or why none, and this process's place in a job with
 * where each value came from (runtime/place.h; the placement flags of `kdc
 * run` are taken too, so `kdc devices --process-id 1` shows their effect).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cuda/cuda_rt.h"
#include "runtime/place.h"
#include "runtime/program.h"
#include "tools/cli.h"
#include "tools/run_place.h"

/* The GPUs a process of |pl| uses for one device per process, or for its
 * explicit local device ids: count in *|n| (0 with |why| when none). */
static void used_gpus(const kdc_rt_place *pl, const kdc_rt_gpus *g, int *ord, int *n, char *why,
                      size_t wn) {
  bool explicit_ids = pl->n_local_devices && !pl->local_devices_default;
  int k = explicit_ids ? pl->n_local_devices : 1;
  *n = 0;
  why[0] = 0;
  if (!g->n) {
    snprintf(why, wn, "no GPU");
    return;
  }
  kdc_status st = kdc_rt_gpu_ordinals("devices", pl->id, explicit_ids ? pl->local_devices : NULL,
                                      explicit_ids ? pl->n_local_devices : 0, pl->devices_from,
                                      pl->local_rank, k, g->n, ord);
  if (st) {
    snprintf(why, wn, "%s", kdc_status_message(st) + strlen("devices: "));
    kdc_status_free(st);
    return;
  }
  *n = k;
}

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
    else putchar(*s);
  }
  putchar('"');
}

static void print_json(long cores, const kdc_rt_gpus *g, const kdc_rt_place *pl, const int *ord,
                       int n_used, const char *why_used) {
  printf("{\"cpu\": {\"cores\": %ld, \"virtual_mesh\": {\"max_devices\": %d, \"max_axes\": %d}},\n",
         cores, KDC_PROG_MAX_DEVICES, KDC_PROG_MAX_AXES);
  printf(" \"gpus\": [");
  for (int i = 0; i < g->n; i++) {
    printf("%s{\"ordinal\": %d, \"name\": ", i ? ", " : "", g->gpu[i].ordinal);
    json_str(g->gpu[i].name);
    printf(", \"compute_capability\": \"%d.%d\", \"memory_bytes\": %" PRIu64 "}",
           g->gpu[i].cc_major, g->gpu[i].cc_minor, g->gpu[i].memory_bytes);
  }
  printf("],\n \"gpus_why_none\": ");
  if (g->n) printf("null");
  else json_str(g->why);
  printf(",\n \"process\": {");
  kdc_rt_place_print_json(pl, stdout);
  printf(", \"uses_gpus\": [");
  for (int i = 0; i < n_used; i++) printf("%s%d", i ? ", " : "", ord[i]);
  printf("], \"uses_gpus_why_none\": ");
  if (n_used) printf("null");
  else json_str(why_used);
  printf("}}\n");
}

static void print_text(long cores, const kdc_rt_gpus *g, const kdc_rt_place *pl, const int *ord,
                       int n_used, const char *why_used) {
  printf("CPU: %ld cores\n", cores);
  printf("  virtual meshes: any mesh of up to %d devices on up to %d axes runs in one process\n"
         "  (--mesh 8, 2x4, ...); with more devices than threads each device is one task\n",
         KDC_PROG_MAX_DEVICES, KDC_PROG_MAX_AXES);
  if (!g->n) {
    printf("GPUs: none: %s\n", g->why);
  } else {
    printf("GPUs: %d\n", g->n);
    for (int i = 0; i < g->n; i++)
      printf("  %d  %-32s sm_%d%d  %.1f GiB\n", g->gpu[i].ordinal, g->gpu[i].name,
             g->gpu[i].cc_major, g->gpu[i].cc_minor,
             (double)g->gpu[i].memory_bytes / (1024.0 * 1024 * 1024));
    if (*g->why) printf("  (%s)\n", g->why);
  }
  printf("this process:\n");
  kdc_rt_place_print(pl, stdout);
  if (n_used) {
    printf("  uses GPUs         ");
    for (int i = 0; i < n_used; i++) printf("%s%d", i ? "," : "", ord[i]);
    printf("%s\n", pl->n_local_devices && !pl->local_devices_default
                       ? "" : "  (one device per process; a plan placing k devices on each "
                              "process uses local rank x k + i)");
  } else {
    printf("  uses GPUs         - (%s)\n", why_used);
  }
}

int kdc_cmd_devices(int argc, char **argv) {
  cli_args a = {argc, argv, 0};
  bool json = false;
  kdc_run_options flags;  /* only its placement fields (run_place_flag) */
  kdc_run_options_init(&flags);
  kdc_status st = NULL;
  while (a.i < a.argc && !st) {
    if (cli_flag(&a, "--json")) json = true;
    else if (!run_place_flag(&a, &flags, &st)) st = cli_unknown(&a);
  }
  kdc_rt_place pl;
  kdc_rt_place_flags fl = {flags.coordinator, flags.num_processes, flags.process_id,
                           flags.local_device_ids};
  if (!st) st = kdc_rt_place_resolve(&fl, &pl);
  if (st) return cli_fail(st);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  kdc_rt_gpus g;
  kdc_rt_gpus_query(&g);
  int ord[KDC_RT_MAX_LOCAL_DEVICES], n_used;
  char why[700];
  used_gpus(&pl, &g, ord, &n_used, why, sizeof why);
  if (json) print_json(cores, &g, &pl, ord, n_used, why);
  else print_text(cores, &g, &pl, ord, n_used, why);
  return 0;
}
