"""The thread pool every CPU kernel library carries: libgomp's entry points, defined in the
translation unit with hidden visibility, so gcc's `#pragma omp parallel for` runs on it.

Why not libgomp's own teams: a region of libgomp ends only when every thread of its team has
arrived, and a thread the OS has not scheduled cannot arrive. With another process busy on one
of two cores, each of a model's kernels waited for its second thread's next time slice:
a MobileNetV3-style block took 21 ms against 1.3 ms on one thread (EPYC Zen 3, 2 vCPUs, the
test suite on both cores; onnxruntime 1.5 ms beside it). Here a region is cut into
`ITEMS_PER_THREAD` items per thread; gcc's static schedule gives each item (a logical thread
number) a contiguous range of iterations, and any thread, the caller included, claims items
until none is left. Each thread takes its own items first (the ranges a libgomp team would
give it, so data stays where it was written when every thread runs), then the others'. The
caller waits only for items other threads have claimed and are running, never for a thread
that has not come: one whose core is taken leaves its items to the others.

Workers spin on the region counter for `SPIN_NS` after their last item (a model's kernels follow
each other within microseconds), then sleep on a futex. A region inside a region, or one
started while another thread of the process runs a region of the same library, runs on its
caller alone. A forked child starts without workers and makes new ones.
"""
from __future__ import annotations

#: items a region is cut into, per thread
ITEMS_PER_THREAD = 2
#: how long an idle worker spins before it sleeps
SPIN_NS = 50_000
#: the most threads a region uses
MAX_THREADS = 64

RUNTIME = r"""
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AS_ITEMS_PER_THREAD %(items)d
#define AS_MAX_THREADS %(max_threads)d
#define AS_SPIN_NS %(spin_ns)dLL
#if defined(__x86_64__) || defined(__i386__)
#define AS_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define AS_RELAX() __asm__ volatile("yield")
#else
#define AS_RELAX() ((void)0)
#endif

static struct {
  pthread_mutex_t lock;              /* held by the thread running a region */
  pthread_t workers[AS_MAX_THREADS]; /* [0] unused: the caller */
  int started;                       /* threads running, the caller counted */
  int threads;                       /* omp_set_num_threads; 0: not yet known */
  /* the region, a seqlock: seq is odd while it is written, 2 g while region g runs */
  _Atomic unsigned long long seq;
  void (*_Atomic fn)(void*);
  void* _Atomic data;
  _Atomic int items;
  _Atomic int done;                  /* items of the region finished */
  _Atomic unsigned int wake;         /* futex word, bumped with each region */
  _Atomic int sleepers;
  _Atomic int stop;
  _Atomic unsigned long long taken[AS_MAX_THREADS * AS_ITEMS_PER_THREAD];  /* the region that claimed each item */
} as_pool = { .lock = PTHREAD_MUTEX_INITIALIZER };

static __thread int as_item = 0, as_team = 1, as_inside = 0;

__attribute__((visibility("hidden"))) int omp_get_thread_num(void) { return as_item; }
__attribute__((visibility("hidden"))) int omp_get_num_threads(void) { return as_team; }
__attribute__((visibility("hidden"))) void omp_set_num_threads(int n) {
  as_pool.threads = n < 1 ? 1 : n > AS_MAX_THREADS ? AS_MAX_THREADS : n;
}

/* OMP_NUM_THREADS, else the CPUs this process may run on, as libgomp counts them */
static int as_default_threads(void) {
  const char* env = getenv("OMP_NUM_THREADS");
  int n = env ? atoi(env) : 0;
  cpu_set_t set;
  if (n < 1) n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > AS_MAX_THREADS ? AS_MAX_THREADS : n;
}

static long long as_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Runs the items of region g this thread can claim, from `first` on: a claim succeeds only
   for an item no thread has claimed in g, and every item of a region that is over has been. */
static void as_run_items(unsigned long long g, void (*fn)(void*), void* data, int items, int first) {
  int saved_item = as_item, saved_team = as_team, saved_inside = as_inside;
  as_team = items;
  as_inside = 1;
  for (int k = 0; k < items; ++k) {
    int i = (first + k) %% items;
    unsigned long long cur = atomic_load_explicit(&as_pool.taken[i], memory_order_relaxed);
    if (cur >= g || !atomic_compare_exchange_strong(&as_pool.taken[i], &cur, g)) continue;
    as_item = i;
    fn(data);
    atomic_fetch_add_explicit(&as_pool.done, 1, memory_order_release);
  }
  as_item = saved_item;
  as_team = saved_team;
  as_inside = saved_inside;
}

static void* as_worker(void* arg) {
  int index = (int)(long)arg;
  unsigned long long seen = atomic_load(&as_pool.seq);
  long long spin_until = as_now_ns() + AS_SPIN_NS;
  for (int n = 0;; ++n) {
    if (atomic_load_explicit(&as_pool.stop, memory_order_relaxed)) return NULL;
    unsigned long long s = atomic_load_explicit(&as_pool.seq, memory_order_acquire);
    if (s != seen && !(s & 1)) {
      void (*fn)(void*) = atomic_load_explicit(&as_pool.fn, memory_order_relaxed);
      void* data = atomic_load_explicit(&as_pool.data, memory_order_relaxed);
      int items = atomic_load_explicit(&as_pool.items, memory_order_relaxed);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&as_pool.seq, memory_order_relaxed) == s) {
        seen = s;
        as_run_items(s / 2, fn, data, items, index * AS_ITEMS_PER_THREAD %% items);
        spin_until = as_now_ns() + AS_SPIN_NS;
      }
      continue;
    }
    if ((n & 255) == 255 && as_now_ns() > spin_until) {
      unsigned int w = atomic_load(&as_pool.wake);
      atomic_fetch_add(&as_pool.sleepers, 1);
      if (atomic_load(&as_pool.seq) == seen && !atomic_load(&as_pool.stop))
        syscall(SYS_futex, &as_pool.wake, FUTEX_WAIT_PRIVATE, w, NULL, NULL, 0);
      atomic_fetch_sub(&as_pool.sleepers, 1);
      spin_until = as_now_ns() + AS_SPIN_NS;
    }
    AS_RELAX();
  }
}

static void as_wake_workers(void) {
  atomic_fetch_add(&as_pool.wake, 1);
  if (atomic_load(&as_pool.sleepers) > 0)
    syscall(SYS_futex, &as_pool.wake, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void as_forked_child(void) {
  pthread_mutex_init(&as_pool.lock, NULL);
  as_pool.started = 0;
}

__attribute__((constructor)) static void as_pool_init(void) { pthread_atfork(NULL, NULL, as_forked_child); }

__attribute__((destructor)) static void as_pool_fini(void) {
  atomic_store(&as_pool.stop, 1);
  as_wake_workers();
  for (int i = 1; i < as_pool.started; ++i) pthread_join(as_pool.workers[i], NULL);
  as_pool.started = 0;
}

/* Runs fn on the caller alone, as a team of one. */
static void as_run_alone(void (*fn)(void*), void* data) {
  int saved_item = as_item, saved_team = as_team, saved_inside = as_inside;
  as_item = 0;
  as_team = 1;
  as_inside = 1;
  fn(data);
  as_item = saved_item;
  as_team = saved_team;
  as_inside = saved_inside;
}

__attribute__((visibility("hidden"))) void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads,
                                                         unsigned flags) {
  (void)flags;
  if (as_pool.threads == 0) as_pool.threads = as_default_threads();
  int threads = num_threads && (int)num_threads < as_pool.threads ? (int)num_threads : as_pool.threads;
  if (threads <= 1 || as_inside || pthread_mutex_trylock(&as_pool.lock) != 0) {
    as_run_alone(fn, data);
    return;
  }
  if (as_pool.started == 0) as_pool.started = 1;
  while (as_pool.started < threads &&
         pthread_create(&as_pool.workers[as_pool.started], NULL, as_worker, (void*)(long)as_pool.started) == 0)
    ++as_pool.started;
  int items = threads * AS_ITEMS_PER_THREAD;
  unsigned long long s = atomic_load_explicit(&as_pool.seq, memory_order_relaxed);
  atomic_store(&as_pool.seq, s + 1);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&as_pool.fn, fn, memory_order_relaxed);
  atomic_store_explicit(&as_pool.data, data, memory_order_relaxed);
  atomic_store_explicit(&as_pool.items, items, memory_order_relaxed);
  atomic_store_explicit(&as_pool.done, 0, memory_order_relaxed);
  atomic_store(&as_pool.seq, s + 2);
  as_wake_workers();
  as_run_items((s + 2) / 2, fn, data, items, 0);
  while (atomic_load_explicit(&as_pool.done, memory_order_acquire) < items) AS_RELAX();
  pthread_mutex_unlock(&as_pool.lock);
}
"""


def runtime_source() -> str:
    """The pool's C source, for the head of a CPU translation unit."""
    return RUNTIME % {"items": ITEMS_PER_THREAD, "max_threads": MAX_THREADS, "spin_ns": SPIN_NS}
