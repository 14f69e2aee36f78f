/*
 * cpus.c - how many CPUs this process may use: the affinity mask, lowered
 * to the container's CPU quota.
 *
 * A 2-CPU container on a 64-core host is 2 CPUs: sysconf's online count
 * would say 64, and a pipeline sized by it would start 32 times the threads
 * the quota runs, each waiting for the others' time slices.  The count is
 *
 *   min(CPUs in sched_getaffinity's mask,
 *       ceil(quota / period) of the cgroup CPU controller)
 *
 * where the quota is the smallest of the process's cgroup and its
 * ancestors: cgroup v2's `cpu.max` ("max 100000" or "200000 100000"), or
 * v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none).  The mask is
 * read at every call (taskset and sched_setaffinity change it at run
 * time); the quota once per process (reading it is a handful of files, and
 * a container's quota does not move under a running trainer).
 *
 * Memory.  sl__memory_limit is the physical memory lowered the same way to
 * the cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes): a
 * pipeline's memory budget defaults to a share of it (issue 27).  The two
 * controllers share one walker (cgroup_limit, a cg_kind per controller).
 *
 * Oversubscription.  A thread that spins waiting for another (the engine's
 * consumer, a channel's sender or receiver) gains when that other thread
 * runs on a second CPU, and loses twice when the CPUs are all taken: the
 * spin burns the time slice of a thread that had work (a trainer's step),
 * and the result it waits for arrives later.  sl__cpus_oversubscribed
 * compares the machine's runnable threads (/proc/loadavg's fourth field,
 * R of "R/T": the kernel's nr_running, the caller included) with its online
 * CPUs, and is cached for 10 ms (one open/read/close, about 5 us, at most
 * 100 times a second per process).
 */
#include "core/internal.h"
#include "core/stats.h"

#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ceil(quota / period) from cgroup v2's cpu.max in `dir`: 0 when the file
 * is absent, unreadable, "max" or malformed. */
static unsigned long long cpu_v2(const char *dir) {
  char file[PATH_MAX + 16];
  snprintf(file, sizeof file, "%s/cpu.max", dir);
  FILE *f = fopen(file, "r");
  if (!f) return 0;
  char q[32] = "";
  long long period = 0;
  int got = fscanf(f, "%31s %lld", q, &period);
  fclose(f);
  if (got != 2 || period <= 0 || !strcmp(q, "max")) return 0;
  char *end;
  long long quota = strtoll(q, &end, 10);
  if (*end || quota <= 0) return 0;
  return (unsigned long long)((quota + period - 1) / period);
}

/* One number from `dir`/`name`: 0 when absent or malformed. */
static long long read_ll(const char *dir, const char *name) {
  char file[PATH_MAX + 32];
  snprintf(file, sizeof file, "%s/%s", dir, name);
  FILE *f = fopen(file, "r");
  if (!f) return 0;
  long long v = 0;
  if (fscanf(f, "%lld", &v) != 1) v = 0;
  fclose(f);
  return v;
}

/* ceil(cfs_quota_us / cfs_period_us) in `dir`: 0 when none. */
static unsigned long long cpu_v1(const char *dir) {
  long long quota = read_ll(dir, "cpu.cfs_quota_us");
  long long period = read_ll(dir, "cpu.cfs_period_us");
  if (quota <= 0 || period <= 0) return 0;
  return (unsigned long long)((quota + period - 1) / period);
}

/* memory.max in `dir` (v2): bytes, 0 for "max" or none. */
static unsigned long long mem_v2(const char *dir) {
  long long v = read_ll(dir, "memory.max");
  return v > 0 ? (unsigned long long)v : 0;
}

/* memory.limit_in_bytes in `dir` (v1): bytes, 0 for none (v1 writes its
 * "unlimited" as a number near 2^63, rounded to pages). */
static unsigned long long mem_v1(const char *dir) {
  long long v = read_ll(dir, "memory.limit_in_bytes");
  return v > 0 && v < (1ll << 62) ? (unsigned long long)v : 0;
}

/* The smaller of two limits, 0 meaning none. */
static unsigned long long tighter(unsigned long long a, unsigned long long b) {
  return !a || (b && b < a) ? b : a;
}

/* A cgroup controller's limit: its files (v2, v1) and its v1 names. */
typedef struct cg_kind {
  unsigned long long (*v2)(const char *dir);
  unsigned long long (*v1)(const char *dir);
  const char *controller;     /* in /proc/self/cgroup's v1 lines */
  const char *const mounts[3]; /* where v1 mounts it under the root */
} cg_kind;

static const cg_kind k_cpu = {cpu_v2, cpu_v1, "cpu",
                              {"cpu", "cpu,cpuacct", "cpuacct,cpu"}};
static const cg_kind k_mem = {mem_v2, mem_v1, "memory", {"memory"}};

/* The limit along `path` (a cgroup path, "/a/b") under `base`: each level
 * from the cgroup up to `base` itself, the smallest. */
static unsigned long long along(const char *base, const char *path,
                                unsigned long long (*limit)(const char *)) {
  char dir[PATH_MAX];
  int n = snprintf(dir, sizeof dir, "%s%s", base, path);
  if (n < 0 || (size_t)n >= sizeof dir) return 0;
  size_t keep = strlen(base);
  unsigned long long best = 0;
  for (;;) {
    while (n > (int)keep && dir[n - 1] == '/') dir[--n] = '\0';
    best = tighter(best, limit(dir));
    if (n <= (int)keep) return best;
    char *slash = strrchr(dir + keep, '/');
    if (!slash) return best;
    n = (int)(slash - dir);
    dir[n] = '\0';
  }
}

/* True when the comma-separated controller list `list` names `name`. */
static bool names(const char *list, size_t len, const char *name) {
  size_t k = strlen(name);
  for (size_t i = 0; i < len;) {
    size_t j = i;
    while (j < len && list[j] != ',') j++;
    if (j - i == k && !memcmp(list + i, name, k)) return true;
    i = j + 1;
  }
  return false;
}

/* The tightest limit of controller `k` for the cgroups `proc_cgroup` lists
 * under `root`; 0 when there is none. */
static unsigned long long cgroup_limit(const char *proc_cgroup,
                                       const char *root, const cg_kind *k) {
  FILE *f = fopen(proc_cgroup, "r");
  if (!f) return 0;
  char line[PATH_MAX + 64];
  unsigned long long best = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    /* "ID:CONTROLLERS:PATH"; v2 is "0::PATH". */
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2 || c2[1] != '/') continue;
    const char *path = c2 + 1;
    char base[PATH_MAX];
    if (c2 == c1 + 1) { /* v2: the unified hierarchy */
      best = tighter(best, along(root, path, k->v2));
      snprintf(base, sizeof base, "%s/unified", root);
      best = tighter(best, along(base, path, k->v2));
    } else if (names(c1 + 1, (size_t)(c2 - c1 - 1), k->controller)) {
      /* v1: a container sees its own cgroup at the mount's root while
       * /proc names the host's path; `along` reads both. */
      for (size_t i = 0; i < 3 && k->mounts[i]; i++) {
        snprintf(base, sizeof base, "%s/%s", root, k->mounts[i]);
        best = tighter(best, along(base, path, k->v1));
      }
    }
  }
  fclose(f);
  return best;
}

long sl__cgroup_cpu_limit(const char *proc_cgroup, const char *root) {
  return (long)cgroup_limit(proc_cgroup, root, &k_cpu);
}

unsigned long long sl__cgroup_memory_limit(const char *proc_cgroup,
                                           const char *root) {
  return cgroup_limit(proc_cgroup, root, &k_mem);
}

unsigned long long sl__memory_limit(void) {
  static _Atomic unsigned long long limit;
  unsigned long long m = atomic_load_explicit(&limit, memory_order_relaxed);
  if (m) return m;
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  m = pages > 0 && size > 0 ? (unsigned long long)pages * (unsigned long long)size
                            : 0;
  m = tighter(m, sl__cgroup_memory_limit("/proc/self/cgroup",
                                         "/sys/fs/cgroup"));
  if (!m) m = 1ull << 30; /* nothing readable: a modest guess */
  atomic_store_explicit(&limit, m, memory_order_relaxed);
  return m;
}

static long quota_cpus; /* 0: no quota; written once under `once` */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_quota(void) {
  quota_cpus = sl__cgroup_cpu_limit("/proc/self/cgroup", "/sys/fs/cgroup");
}

long sl__cpu_count(void) {
  long n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
  pthread_once(&once, read_quota);
  n = (long)tighter(n > 0 ? (unsigned long long)n : 0,
                    (unsigned long long)quota_cpus);
  return n > 0 ? n : 1;
}

long sl__runnable_threads(const char *loadavg) {
  int fd = open(loadavg, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  /* "0.52 0.61 0.70 3/412 91234": the fourth field, up to its '/' */
  const char *p = buf;
  for (int field = 0; field < 3; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  char *end;
  long r = strtol(p, &end, 10);
  return end != p && *end == '/' && r >= 0 ? r : -1;
}

#define PROBE_NS 10000000ull /* the cached answer's life */

static const char *_Atomic probe_path;
static _Atomic uint64_t probe_at; /* sl__now_ns of the last read; 0: none */
static atomic_bool probe_busy;

void sl__cpus_probe_path(const char *loadavg) {
  atomic_store(&probe_path, loadavg);
  atomic_store(&probe_at, 0);
}

bool sl__cpus_oversubscribed(void) {
  uint64_t now = sl__now_ns();
  uint64_t at = atomic_load_explicit(&probe_at, memory_order_relaxed);
  if (at && now - at < PROBE_NS)
    return atomic_load_explicit(&probe_busy, memory_order_relaxed);
  /* One thread reads; the others keep the old answer meanwhile. */
  if (!atomic_compare_exchange_strong(&probe_at, &at, now ? now : 1))
    return atomic_load_explicit(&probe_busy, memory_order_relaxed);
  const char *path = atomic_load(&probe_path);
  long r = sl__runnable_threads(path ? path : "/proc/loadavg");
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  bool busy = r >= 0 && online > 0 && r > online;
  atomic_store_explicit(&probe_busy, busy, memory_order_relaxed);
  return busy;
}
