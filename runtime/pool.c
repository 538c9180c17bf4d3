/*
 * runtime/pool.c: a small persistent thread pool running one job at a time,
 * a job being |n_tasks| independent tasks (a kernel's row chunks on every
 * device, one device's run of steps, a collective's pieces).
 *
 * n_threads - 1 workers are started once, at plan load; the calling thread
 * is the n-th.  Threads claim tasks with a compare-and-swap on one word
 * packing (job generation, task count, next task), so a late worker costs
 * nothing (the others take its tasks) and a worker still leaving an old job
 * can never claim, or skip, a task of the next one.  rt_pool_run returns
 * when every task is done; nothing is allocated per job.
 *
 * Idle workers spin briefly (a kernel step is usually followed by another
 * within microseconds) and then sleep on a condition variable; the caller
 * waiting for the last tasks of a job spins as briefly, then yields (on a
 * loaded machine the thread holding the task may be preempted).  Never more
 * runnable threads than cores (docs/runtime.md, "Threads").
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kdc/fpenv.h"
#include "runtime/runtime.h"

enum { SPIN = 4000 };

struct rt_pool {
  int n_workers;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t wake;
  atomic_uint_fast64_t generation;  /* bumped per job */
  atomic_bool stop;
  /* the current job */
  rt_task_fn fn;
  void *ctx;
  uint64_t jobs;                     /* caller-side job counter */
  atomic_uint_fast64_t claim;        /* gen:32 | tasks:16 | next task:16 */
  atomic_int_fast64_t done;          /* tasks finished */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Claims and runs tasks of job |gen| until none is left. */
static void work(rt_pool *p, uint64_t gen) {
  uint64_t v = atomic_load_explicit(&p->claim, memory_order_acquire);
  for (;;) {
    if ((v >> 32) != (gen & 0xffffffffu)) return;  /* another job now */
    int64_t tasks = (int64_t)(v >> 16 & 0xffff), c = (int64_t)(v & 0xffff);
    if (c >= tasks) return;
    if (!atomic_compare_exchange_weak_explicit(&p->claim, &v, v + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    p->fn(p->ctx, c);
    atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
    v = atomic_load_explicit(&p->claim, memory_order_acquire);
  }
}

static void *worker(void *arg) {
  rt_pool *p = arg;
  uint64_t seen = 0;
  kdc_fp_flush_enter(); /* the executor's mode (kdc/fpenv.h), for the thread's life */
  for (;;) {
    uint64_t g;
    int spins = 0;
    while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
           !atomic_load(&p->stop)) {
      if (++spins < SPIN) {
        cpu_relax();
        continue;
      }
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = g;
    work(p, g);
  }
}

kdc_status rt_pool_create(int n_threads, rt_pool **out) {
  rt_pool *p = kdc_xcalloc(1, sizeof *p);
  p->n_workers = n_threads > 1 ? n_threads - 1 : 0;
  p->threads = kdc_xcalloc((size_t)p->n_workers + 1, sizeof *p->threads);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  atomic_init(&p->generation, 0);
  atomic_init(&p->stop, false);
  atomic_init(&p->claim, 0);
  atomic_init(&p->done, 0);
  for (int i = 0; i < p->n_workers; i++)
    if (pthread_create(&p->threads[i], NULL, worker, p)) {
      p->n_workers = i;
      rt_pool_destroy(p);
      return KDC_ERR(KDC_UNAVAILABLE, "runtime: cannot start thread %d of %d", i + 1, n_threads);
    }
  *out = p;
  return NULL;
}

void rt_pool_destroy(rt_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n_workers; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->wake);
  free(p->threads);
  free(p);
}

void rt_pool_run(rt_pool *p, rt_task_fn fn, void *ctx, int64_t n_tasks) {
  KDC_ASSERT(n_tasks <= RT_POOL_MAX_TASKS);
  if (p->n_workers == 0 || n_tasks <= 1) {
    for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t);
    return;
  }
  uint64_t gen = ++p->jobs;
  p->fn = fn, p->ctx = ctx;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  atomic_store_explicit(&p->claim, (gen & 0xffffffffu) << 32 | (uint64_t)n_tasks << 16,
                        memory_order_release);
  pthread_mutex_lock(&p->mu);  /* pairs with the sleeping workers' check */
  atomic_store_explicit(&p->generation, gen, memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  work(p, gen);
  /* Wait for the tasks other threads hold: spin briefly, then yield, so
   * that on an oversubscribed machine a preempted worker gets the core back
   * instead of the caller burning its whole time slice. */
  for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks; spins++) {
    if (spins < SPIN) cpu_relax();
    else sched_yield();
  }
}
