/*
 * runtime/place.c: a process's place in a job (docs/processes.md,
 * "Placement"), with the variables set by the test (no Slurm, no MPI):
 *   - hostlist: Slurm's compressed host lists expand as Slurm does
 *     (zero padding from the lower bound, several brackets, top-level
 *     commas), the first host is the coordinator's; malformed lists are
 *     errors naming the variable;
 *   - slurm: with SLURM_JOB_ID/NTASKS/PROCID/LOCALID/STEP_NODELIST set,
 *     nothing given: count, id, local rank from them, the coordinator from
 *     the first host and port job id % 4096 + 61440 (JAX's rule; checked
 *     against a value computed here), one local device per process
 *     (SLURM_LOCALID); JOB_NODELIST when the step's is missing;
 *     KDC_COORDINATOR_PORT replaces the port;
 *   - precedence: flags > KDC_* > the MPI launcher > Slurm > defaults, each
 *     value's source named; an incomplete Slurm environment is not Slurm;
 *   - tasks_per_node: Slurm's "2(x3),1" lists give the processes on this
 *     node (the default threads are cores / that), else every process;
 *   - device_ids: --local-device-ids / KDC_LOCAL_DEVICE_IDS parsing and errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/place.h"

static const char *const all_vars[] = {
    "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST", "KDC_COORDINATOR_ADDRESS", "KDC_COORDINATOR_PORT", "KDC_NUM_PROCESSES",
    "KDC_PROCESS_ID", "KDC_LOCAL_DEVICE_IDS", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "SLURM_NODEID",
    "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE", NULL};

static int clear_env(void **state) {
  (void)state;
  for (int i = 0; all_vars[i]; i++) unsetenv(all_vars[i]);
  return 0;
}

static void expect_hosts(const char *list, size_t total, const char *const *want) {
  char *hosts[16];
  size_t n = 0, t = 0;
  kdc_status st = kdc_rt_slurm_hostlist("L", list, hosts, 16, &n, &t);
  if (st) fail_msg("%s: %s", list, kdc_status_message(st));
  assert_int_equal(t, total);
  for (size_t i = 0; i < n; i++) {
    if (!want[i] || strcmp(hosts[i], want[i])) fail_msg("%s: host %zu is %s, want %s", list, i, hosts[i], want[i] ? want[i] : "(none)");
    free(hosts[i]);
  }
  assert_null(want[n]);
}

static void expect_bad(const char *list, const char *msg) {
  char *hosts[4];
  size_t n = 9, t = 0;
  kdc_status st = kdc_rt_slurm_hostlist("SLURM_STEP_NODELIST", list, hosts, 4, &n, &t);
  if (!st) fail_msg("%s: accepted", list);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  if (!strstr(kdc_status_message(st), msg) || !strstr(kdc_status_message(st), "SLURM_STEP_NODELIST"))
    fail_msg("%s: %s", list, kdc_status_message(st));
  assert_int_equal(n, 0);
  kdc_status_free(st);
}

static void test_hostlist(void **state) {
  (void)state;
  expect_hosts("node001", 1, (const char *[]){"node001", NULL});
  expect_hosts("node[01-04,07],gpu2", 6,
               (const char *[]){"node01", "node02", "node03", "node04", "node07", "gpu2", NULL});
  expect_hosts("n[08-11]", 4, (const char *[]){"n08", "n09", "n10", "n11", NULL});
  expect_hosts("n[8-11]", 4, (const char *[]){"n8", "n9", "n10", "n11", NULL});
  expect_hosts("rack[1-2]-n[1,3]", 4,
               (const char *[]){"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3", NULL});
  expect_hosts("a,b[5],c.example.org", 3, (const char *[]){"a", "b5", "c.example.org", NULL});
  expect_hosts("127.0.0.[1-2]", 2, (const char *[]){"127.0.0.1", "127.0.0.2", NULL});
  /* only the first |max| are returned, the total counts all */
  char *first = NULL;
  size_t n, t;
  assert_null(kdc_rt_slurm_hostlist("L", "x[100-999],y", &first, 1, &n, &t));
  assert_int_equal(n, 1);
  assert_int_equal(t, 901);
  assert_string_equal(first, "x100");
  free(first);
  expect_bad("node[01-04", "\"[\" without \"]\"");
  expect_bad("node01]", "\"]\" without \"[\"");
  expect_bad("node[4-2]", "range \"4-2\"");
  expect_bad("node[a-b]", "range \"a-b\"");
  expect_bad("node[1-]", "range \"1-\"");
  expect_bad("node[[1]]", "nested");
  expect_bad("a,,b", "empty host");
  expect_bad("", "empty host name");
}

static void set_slurm(const char *job, const char *ntasks, const char *procid, const char *localid,
                      const char *nodes) {
  setenv("SLURM_JOB_ID", job, 1);
  setenv("SLURM_NTASKS", ntasks, 1);
  setenv("SLURM_PROCID", procid, 1);
  setenv("SLURM_LOCALID", localid, 1);
  if (nodes) setenv("SLURM_STEP_NODELIST", nodes, 1);
}

/* The process count and id of |p| and where they came from. */
static void expect_proc(const kdc_rt_place *p, const char *launcher, int n, const char *n_from,
                        int id, const char *id_from) {
  assert_string_equal(p->launcher, launcher);
  assert_int_equal(p->n, n);
  assert_string_equal(p->n_from, n_from);
  assert_int_equal(p->id, id);
  assert_string_equal(p->id_from, id_from);
}

static void test_slurm(void **state) {
  (void)state;
  set_slurm("123456", "8", "5", "1", "gpu[03-06],login1");
  setenv("SLURM_JOB_NODELIST", "other[1-9]", 1);  /* the step's list wins */
  kdc_rt_place p;
  assert_null(kdc_rt_place_resolve(NULL, &p));
  expect_proc(&p, "slurm", 8, "SLURM_NTASKS", 5, "SLURM_PROCID");
  assert_int_equal(p.local_rank, 1);
  assert_string_equal(p.local_rank_from, "SLURM_LOCALID");
  char want[64];
  snprintf(want, sizeof want, "gpu03:%d", 123456 % 4096 + (65535 - 4096 + 1));
  assert_string_equal(p.coordinator, want);
  assert_non_null(strstr(p.coordinator_from, "SLURM_STEP_NODELIST (first of 5 hosts)"));
  assert_non_null(strstr(p.coordinator_from, "SLURM_JOB_ID"));
  assert_int_equal(p.n_local_devices, 1);
  assert_int_equal(p.local_devices[0], 1);
  assert_true(p.local_devices_default);
  assert_non_null(strstr(p.devices_from, "SLURM_LOCALID"));
  /* no step list: the job's */
  unsetenv("SLURM_STEP_NODELIST");
  assert_null(kdc_rt_place_resolve(NULL, &p));
  assert_string_equal(p.coordinator, "other1:62016");  /* 123456 % 4096 = 576 */
  assert_non_null(strstr(p.coordinator_from, "SLURM_JOB_NODELIST (first of 9 hosts)"));
  /* KDC_COORDINATOR_PORT replaces the derived port */
  setenv("KDC_COORDINATOR_PORT", "7777", 1);
  assert_null(kdc_rt_place_resolve(NULL, &p));
  assert_string_equal(p.coordinator, "other1:7777");
  assert_non_null(strstr(p.coordinator_from, "KDC_COORDINATOR_PORT"));
  setenv("KDC_COORDINATOR_PORT", "70000", 1);
  kdc_status st = kdc_rt_place_resolve(NULL, &p);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "KDC_COORDINATOR_PORT=\"70000\""));
  kdc_status_free(st);
  unsetenv("KDC_COORDINATOR_PORT");
  /* a malformed node list is an error naming it */
  setenv("SLURM_JOB_NODELIST", "n[1-", 1);
  st = kdc_rt_place_resolve(NULL, &p);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "SLURM_JOB_NODELIST=\"n[1-\""));
  kdc_status_free(st);
  /* incomplete (no SLURM_LOCALID, as outside a step in some setups): not Slurm */
  setenv("SLURM_JOB_NODELIST", "n1", 1);
  unsetenv("SLURM_LOCALID");
  assert_null(kdc_rt_place_resolve(NULL, &p));
  expect_proc(&p, "none", 1, "default", 0, "default");
  assert_string_equal(p.coordinator, "");
  assert_int_equal(p.n_local_devices, 0);
}

static void test_precedence(void **state) {
  (void)state;
  set_slurm("99", "4", "3", "3", "h[1-2]");
  kdc_rt_place p;
  /* KDC_* over Slurm */
  setenv("KDC_NUM_PROCESSES", "2", 1);
  setenv("KDC_PROCESS_ID", "1", 1);
  setenv("KDC_COORDINATOR_ADDRESS", "10.0.0.1:5000", 1);
  setenv("KDC_LOCAL_DEVICE_IDS", "2,3", 1);
  assert_null(kdc_rt_place_resolve(NULL, &p));
  expect_proc(&p, "slurm", 2, "KDC_NUM_PROCESSES", 1, "KDC_PROCESS_ID");
  assert_string_equal(p.coordinator, "10.0.0.1:5000");
  assert_string_equal(p.coordinator_from, "KDC_COORDINATOR_ADDRESS");
  assert_int_equal(p.n_local_devices, 2);
  assert_int_equal(p.local_devices[1], 3);
  assert_false(p.local_devices_default);
  assert_string_equal(p.devices_from, "KDC_LOCAL_DEVICE_IDS");
  /* flags over everything */
  kdc_rt_place_flags f = {"127.0.0.1:9", 3, 2, "0"};
  assert_null(kdc_rt_place_resolve(&f, &p));
  expect_proc(&p, "slurm", 3, "--num-processes", 2, "--process-id");
  assert_string_equal(p.coordinator, "127.0.0.1:9");
  assert_string_equal(p.coordinator_from, "--coordinator");
  assert_int_equal(p.n_local_devices, 1);
  assert_string_equal(p.devices_from, "--local-device-ids");
  /* the MPI launcher over Slurm (mpirun inside an allocation), no coordinator needed */
  unsetenv("KDC_NUM_PROCESSES"), unsetenv("KDC_PROCESS_ID"), unsetenv("KDC_COORDINATOR_ADDRESS");
  unsetenv("KDC_LOCAL_DEVICE_IDS");
  setenv("OMPI_COMM_WORLD_SIZE", "6", 1);
  setenv("OMPI_COMM_WORLD_RANK", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  assert_null(kdc_rt_place_resolve(NULL, &p));
  expect_proc(&p, "mpi", 6, "OMPI_COMM_WORLD_SIZE", 4, "OMPI_COMM_WORLD_RANK");
  assert_string_equal(p.coordinator, "");
  assert_int_equal(p.local_rank, 0);
  assert_string_equal(p.local_rank_from, "OMPI_COMM_WORLD_LOCAL_RANK");
  assert_int_equal(kdc_rt_local_rank(NULL), 0);
  /* a malformed value is an error naming the variable */
  setenv("SLURM_NTASKS", "4x", 1);
  kdc_status st = kdc_rt_place_resolve(NULL, &p);
  assert_non_null(st);
  assert_non_null(strstr(kdc_status_message(st), "SLURM_NTASKS=\"4x\""));
  kdc_status_free(st);
}

static void test_tasks_per_node(void **state) {
  (void)state;
  const char *l = "2(x3),1,4";
  static const int want[] = {2, 2, 2, 1, 4, -1};
  for (int i = 0; i < 6; i++) assert_int_equal(kdc_rt_slurm_tasks_on_node(l, i), want[i]);
  assert_int_equal(kdc_rt_slurm_tasks_on_node("8", 0), 8);
  static const char *const bad[] = {"", "2(3)", "2(x)", "2(x3", "a", "2,,1", "2;1", "2,", NULL};
  for (int i = 0; bad[i]; i++)
    if (kdc_rt_slurm_tasks_on_node(bad[i], 0) != -1) fail_msg("\"%s\" accepted", bad[i]);
  set_slurm("7", "7", "5", "0", "n[1-4]");
  setenv("SLURM_NODEID", "3", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x3),1", 1);
  kdc_rt_place p;
  assert_null(kdc_rt_place_resolve(NULL, &p));
  assert_int_equal(p.local_n, 1);
  assert_string_equal(p.local_n_from, "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID=3]");
  setenv("SLURM_NODEID", "0", 1);
  assert_null(kdc_rt_place_resolve(NULL, &p));
  assert_int_equal(p.local_n, 2);
  /* overridden count: Slurm's layout no longer describes the job */
  kdc_rt_place_flags f = {NULL, 2, 0, NULL};
  assert_null(kdc_rt_place_resolve(&f, &p));
  assert_int_equal(p.local_n, 2);
  assert_string_equal(p.local_n_from, "default: every process on this host");
  /* no layout: every process on this host */
  unsetenv("SLURM_STEP_TASKS_PER_NODE");
  assert_null(kdc_rt_place_resolve(NULL, &p));
  assert_int_equal(p.local_n, 7);
}

static void test_device_ids(void **state) {
  (void)state;
  int ids[KDC_RT_MAX_LOCAL_DEVICES], n;
  assert_null(kdc_rt_parse_device_ids("--local-device-ids", "0,1,7", ids, &n));
  assert_int_equal(n, 3);
  assert_int_equal(ids[2], 7);
  static const char *const bad[] = {"", "1,", ",1", "a", "-1", "1,1", "0;1", "1.5", NULL};
  for (int i = 0; bad[i]; i++) {
    kdc_status st = kdc_rt_parse_device_ids("--local-device-ids", bad[i], ids, &n);
    if (!st) fail_msg("\"%s\" accepted", bad[i]);
    assert_non_null(strstr(kdc_status_message(st), "--local-device-ids"));
    kdc_status_free(st);
  }
  kdc_rt_place_flags f = {NULL, -1, -1, "3,x"};
  kdc_rt_place p;
  kdc_status st = kdc_rt_place_resolve(&f, &p);
  assert_non_null(st);
  assert_int_equal(kdc_status_code(st), KDC_INVALID_INPUT);
  kdc_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_hostlist, clear_env),
      cmocka_unit_test_setup(test_slurm, clear_env),
      cmocka_unit_test_setup(test_precedence, clear_env),
      cmocka_unit_test_setup(test_tasks_per_node, clear_env),
      cmocka_unit_test_setup(test_device_ids, clear_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
