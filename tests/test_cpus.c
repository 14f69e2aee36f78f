/* test_cpus.c - the CPUs a pipeline may use (src/core/cpus.c): the
 * affinity mask (taskset), lowered to the cgroup v2 / v1 CPU quota of the
 * process's cgroup and its ancestors (a 2-CPU container on a many-core host
 * is 2 CPUs).  The cgroup files are fixtures in a scratch directory. */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes `text` to <scratch>/<rel>, making its folders. */
static void put(const char *rel, const char *text) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", test_tmpdir("cpus"), rel);
  for (char *p = path + strlen(test_tmpdir("cpus")) + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    ASSERT_TRUE(mkdir(path, 0755) == 0 || errno == EEXIST);
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  ASSERT_EQ(fclose(f), 0);
}

/* The fixture root <scratch>/<root_rel> and its /proc/self/cgroup. */
typedef struct fixture {
  char root[1024], proc[1100];
} fixture;

static fixture at(const char *root_rel) {
  fixture f;
  snprintf(f.root, sizeof f.root, "%s/%s", test_tmpdir("cpus"), root_rel);
  snprintf(f.proc, sizeof f.proc, "%s/cgroup", f.root);
  return f;
}

static long limit(const char *root_rel) {
  fixture f = at(root_rel);
  return sl__cgroup_cpu_limit(f.proc, f.root);
}

TEST(v2_quota_rounds_up) {
  put("a/cgroup", "0::/job\n");
  put("a/job/cpu.max", "150000 100000\n");
  ASSERT_EQ(limit("a"), 2);
  put("a/job/cpu.max", "200000 100000\n");
  ASSERT_EQ(limit("a"), 2);
  put("a/job/cpu.max", "50000 100000\n");
  ASSERT_EQ(limit("a"), 1);
}

TEST(v2_max_means_no_quota) {
  put("b/cgroup", "0::/job\n");
  put("b/job/cpu.max", "max 100000\n");
  ASSERT_EQ(limit("b"), 0);
}

TEST(v2_the_tightest_ancestor_wins) {
  /* The job's own cgroup allows 8, its parent 3, the root none. */
  put("c/cgroup", "0::/slice/job\n");
  put("c/cpu.max", "max 100000\n");
  put("c/slice/cpu.max", "300000 100000\n");
  put("c/slice/job/cpu.max", "800000 100000\n");
  ASSERT_EQ(limit("c"), 3);
}

TEST(v2_inside_a_namespace_reads_the_root) {
  /* A container with its own cgroup namespace sees "0::/" and its quota
   * at the hierarchy's root. */
  put("d/cgroup", "0::/\n");
  put("d/cpu.max", "200000 100000\n");
  ASSERT_EQ(limit("d"), 2);
}

TEST(v1_cfs_quota) {
  put("e/cgroup", "4:memory:/x\n2:cpuacct:/\n1:cpu:/docker/abc\n");
  put("e/cpu/docker/abc/cpu.cfs_quota_us", "250000\n");
  put("e/cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  ASSERT_EQ(limit("e"), 3);
  /* -1 is no quota. */
  put("e/cpu/docker/abc/cpu.cfs_quota_us", "-1\n");
  ASSERT_EQ(limit("e"), 0);
}

TEST(v1_container_sees_its_cgroup_at_the_mount) {
  /* /proc names the host's path; the mount shows the container's own. */
  put("f/cgroup", "3:cpu,cpuacct:/docker/abc\n");
  put("f/cpu,cpuacct/cpu.cfs_quota_us", "200000\n");
  put("f/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  ASSERT_EQ(limit("f"), 2);
}

TEST(malformed_or_missing_files_mean_no_quota) {
  ASSERT_EQ(limit("none"), 0); /* no /proc file at all */
  put("g/cgroup", "garbage\n0::relative\n1:cpuset:/\n");
  ASSERT_EQ(limit("g"), 0);
  put("h/cgroup", "0::/job\n");
  put("h/job/cpu.max", "lots 100000\n");
  ASSERT_EQ(limit("h"), 0);
  put("h/job/cpu.max", "100000 0\n");
  ASSERT_EQ(limit("h"), 0);
  put("h/job/cpu.max", "");
  ASSERT_EQ(limit("h"), 0);
  /* "cpuset" is not the cpu controller. */
  put("i/cgroup", "1:cpuset:/\n");
  put("i/cpuset/cpu.cfs_quota_us", "100000\n");
  put("i/cpuset/cpu.cfs_period_us", "100000\n");
  ASSERT_EQ(limit("i"), 0);
}

TEST(the_affinity_mask_bounds_the_count) {
  /* As `taskset -c 0` would: this thread may run on one CPU only. */
  cpu_set_t all, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  const long before = sl__cpu_count();
  ASSERT_GE(before, 1);
  ASSERT_LE(before, CPU_COUNT(&all));
  int first = 0;
  while (!CPU_ISSET(first, &all)) first++;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  ASSERT_EQ(sl__cpu_count(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
  ASSERT_EQ(sl__cpu_count(), before);
  /* The advice that follows from it: 4 x the CPUs, at least 8. */
  ASSERT_EQ(sl__thread_advised(), before * 4 < 8 ? 8 : before * 4);
}

/* --- the memory the process may use (issue 27: the budget's default) -- */

static unsigned long long mem_limit(const char *root_rel) {
  fixture f = at(root_rel);
  return sl__cgroup_memory_limit(f.proc, f.root);
}

TEST(v2_memory_max_the_tightest_ancestor_wins) {
  put("ma/cgroup", "0::/slice/job\n");
  put("ma/memory.max", "max\n");
  put("ma/slice/memory.max", "3221225472\n");
  put("ma/slice/job/memory.max", "8589934592\n");
  ASSERT_EQ(mem_limit("ma"), 3221225472ull);
  put("ma/slice/memory.max", "max\n");
  ASSERT_EQ(mem_limit("ma"), 8589934592ull);
  put("ma/slice/job/memory.max", "max\n");
  ASSERT_EQ(mem_limit("ma"), 0);
}

TEST(v1_memory_limit_in_bytes) {
  put("mb/cgroup", "5:cpu:/x\n4:memory:/docker/abc\n");
  put("mb/memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
  ASSERT_EQ(mem_limit("mb"), 2147483648ull);
  /* v1's "no limit" is a huge page-rounded number: none. */
  put("mb/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  ASSERT_EQ(mem_limit("mb"), 0);
  /* malformed, or another controller: none */
  put("mb/memory/docker/abc/memory.limit_in_bytes", "lots\n");
  ASSERT_EQ(mem_limit("mb"), 0);
  put("mc/cgroup", "4:memoryx:/\n");
  put("mc/memoryx/memory.limit_in_bytes", "1000\n");
  ASSERT_EQ(mem_limit("mc"), 0);
  ASSERT_EQ(mem_limit("none"), 0);
}

TEST(the_memory_limit_is_at_most_the_physical_memory) {
  unsigned long long phys = (unsigned long long)sysconf(_SC_PHYS_PAGES) *
                            (unsigned long long)sysconf(_SC_PAGESIZE);
  unsigned long long m = sl__memory_limit();
  ASSERT_TRUE(m > 0);
  ASSERT_TRUE(m <= phys);
}

/* --- whether a spin would take a CPU from another thread (issue 26) ---- */

TEST(runnable_threads_come_from_loadavgs_fourth_field) {
  put("l/loadavg", "0.52 0.61 0.70 3/412 91234\n");
  char path[1024];
  snprintf(path, sizeof path, "%s/l/loadavg", test_tmpdir("cpus"));
  ASSERT_EQ(sl__runnable_threads(path), 3);
  put("l/loadavg", "12.00 9.00 4.00 117/2048 7\n");
  ASSERT_EQ(sl__runnable_threads(path), 117);
  /* unreadable or malformed: unknown (-1), and no spin is refused by it */
  put("l/loadavg", "0.52 0.61 0.70\n");
  ASSERT_EQ(sl__runnable_threads(path), -1);
  put("l/loadavg", "0.52 0.61 0.70 x/412 1\n");
  ASSERT_EQ(sl__runnable_threads(path), -1);
  snprintf(path, sizeof path, "%s/l/none", test_tmpdir("cpus"));
  ASSERT_EQ(sl__runnable_threads(path), -1);
}

TEST(a_fake_loadavg_decides_oversubscription_at_once) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  char text[128], path[1024];
  snprintf(path, sizeof path, "%s/m/loadavg", test_tmpdir("cpus"));
  snprintf(text, sizeof text, "1.0 1.0 1.0 %ld/300 1\n", online + 1);
  put("m/loadavg", text);
  sl__cpus_probe_path(path); /* also forgets the cached answer */
  ASSERT_TRUE(sl__cpus_oversubscribed());
  snprintf(text, sizeof text, "1.0 1.0 1.0 %ld/300 1\n", online);
  put("m/loadavg", text);
  sl__cpus_probe_path(path);
  ASSERT_TRUE(!sl__cpus_oversubscribed());
  sl__cpus_probe_path(NULL); /* back to /proc/loadavg */
}

static atomic_bool hog_stop;

static void *hog(void *arg) {
  (void)arg;
  volatile unsigned long x = 0;
  while (!atomic_load_explicit(&hog_stop, memory_order_relaxed)) x++;
  return NULL;
}

/* The real probe: with twice the online CPUs plus one busy loops running,
 * the machine has more runnable threads than CPUs, and the probe says so
 * within its 10 ms refresh (polled for up to 2 s: the loops must first be
 * scheduled). */
TEST(busy_loops_on_every_cpu_make_the_machine_oversubscribed) {
  if (sl__runnable_threads("/proc/loadavg") < 0) {
    TEST_SKIP("no /proc/loadavg");
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  int n = (int)SL_MIN(online * 2 + 1, 64);
  pthread_t t[64];
  atomic_store(&hog_stop, false);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, hog, NULL), 0);
  bool seen = false;
  for (int i = 0; i < 200 && !seen; i++) {
    seen = sl__cpus_oversubscribed();
    if (!seen) usleep(10000);
  }
  atomic_store(&hog_stop, true);
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
  ASSERT_TRUE(seen);
}
