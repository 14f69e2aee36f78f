/* test_shutdown.c - shutdown stress: threaded pipelines destroyed at random
 * points, many times in a row, under a watchdog.
 *
 * Each iteration builds, from a seeded random draw,
 *
 *   open_files(4 SLR files, 1-3 threads, shuffled or not, ordered or not)
 *     [-> prefetch(1-8)] -> Lua map or filter (1-3 worker states, ordered or
 *     not, small queues; identity, a new sample, a slow function, one that
 *     raises at a random sample, or a runaway one stopped by a deadline)
 *     [-> prefetch(1-8)] [-> batch(1-7)]
 *
 * then does one of: destroy at once (workers still starting); read k
 * samples and destroy; stop reading and wait a little (queues fill, workers
 * block in send) then destroy; read to the end or the error and destroy;
 * reset mid-pass, read a little and destroy.  Destroy must join every
 * thread and free everything (ASan checks, TSan checks the races) - and
 * must never hang: a watchdog thread aborts the process with the
 * iteration's description when one iteration runs longer than 30 s.  Under
 * ASan, LeakSanitizer runs after every iteration, so a leak names the
 * iteration (and its seed) that made it.
 *
 * SLUICE_SHUTDOWN_ITERATIONS overrides the count (default 1000);
 * SLUICE_SHUTDOWN_SEED the seed (default 1), printed for replay;
 * SLUICE_SHUTDOWN_FN=<name> (identity, times10, slow, even, boom_at,
 * runaway_at) gives every iteration that decorator, to stress one path.
 *
 * The Lua stages run against the test double tests/lua/sluice/worker.lua
 * (raw FFI), as in test_lua_stage.c. */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "script/lua_host.h"

#include <lauxlib.h>
#include <lualib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Seconds one iteration may take before the watchdog calls it a hang. */
static int g_hang_s = 30;
#define NFILES 4
#define PER_FILE 60

/* --- the watchdog ----------------------------------------------------------
 */

static atomic_long g_iter = -1;      /* the iteration running, -1: none */
static atomic_llong g_iter_start_ns; /* when it started */
static atomic_bool g_watch_stop;
static char g_desc[512]; /* the running iteration, described */
static pthread_mutex_t g_desc_mu = PTHREAD_MUTEX_INITIALIZER;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *watchdog(void *arg) {
  (void)arg;
  while (!atomic_load(&g_watch_stop)) {
    struct timespec nap = {0, 100 * 1000000};
    nanosleep(&nap, NULL);
    long it = atomic_load(&g_iter);
    if (it < 0) continue;
    long long ran = now_ns() - atomic_load(&g_iter_start_ns);
    if (ran > (long long)g_hang_s * 1000000000LL &&
        atomic_load(&g_iter) == it) {
      pthread_mutex_lock(&g_desc_mu);
      fprintf(stderr,
              "FAIL shutdown watchdog: iteration %ld has run %.1f s (more "
              "than %d s): hung\n  %s\n",
              it, (double)ran * 1e-9, g_hang_s, g_desc);
      fflush(stderr);
      abort(); /* a core dump / the sanitizer shows every thread */
    }
  }
  return NULL;
}

/* --- fixtures --------------------------------------------------------------
 */

#define TMP_TAG "shutdown"

static const char *g_files[NFILES];
static sl_schema *g_schema;

/* {i: i64, pad: u8[56]}: file f holds i = f * PER_FILE + k. */
static void make_files(void) {
  g_schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(g_schema, "i", SL_I64, 0, NULL));
  ASSERT_OK(sl_schema_add(g_schema, "pad", SL_U8, 1, (int64_t[]){56}));
  for (int f = 0; f < NFILES; f++) {
    char name[32];
    snprintf(name, sizeof name, "part-%d.slr", f);
    g_files[f] = test_tmppath_dup(TMP_TAG, name);
    sl_slr_writer_opts o = {1, 0, 7};
    sl_slr_writer *w;
    ASSERT_OK(sl_slr_writer_open(g_files[f], g_schema, &o, &w));
    for (int k = 0; k < PER_FILE; k++) {
      sl_sample *s = sl_sample_new(g_schema);
      int64_t *i;
      unsigned char *pad;
      ASSERT_OK(sl_sample_alloc(s, 0, 0, NULL, (void **)&i));
      ASSERT_OK(sl_sample_alloc(s, 1, 1, (int64_t[]){56}, (void **)&pad));
      *i = f * PER_FILE + k;
      memset(pad, k, 56);
      ASSERT_OK(sl_slr_writer_append(w, s));
      sl_sample_release(s);
    }
    ASSERT_OK(sl_slr_writer_close(w));
  }
}

/* Decorators, declared in a "consumer" state. */
static const char FNS[] =
    "local T = {}\n"
    "function T.identity(s) return s end\n"
    "function T.times10(s) return { i = s.i * 10 } end\n"
    "function T.slow(s)\n"
    "  local acc = 0\n"
    "  for k = 1, 20000 do acc = (acc * 31 + k + s.i) % 1000003 end\n"
    "  return s\n"
    "end\n"
    "function T.even(s) return s.i % 2 == 0 end\n"
    "function T.boom_at(n)\n"
    "  return function(s) if s.i == n then error('boom at ' .. n) end "
    "return s end\n"
    "end\n"
    "function T.runaway_at(n)\n"
    "  return function(s) if s.i == n then while true do end end "
    "return s end\n"
    "end\n"
    "return T\n";

static lua_State *g_decl;
static sl__lua_env *g_env;

static void close_lua(void) {
  if (g_decl) lua_close(g_decl);
  sl__lua_env_release(g_env);
  g_decl = NULL;
  g_env = NULL;
}

static void setup(void) {
  if (g_decl) return;
  make_files();
  g_decl = luaL_newstate();
  ASSERT_NOT_NULL(g_decl);
  luaL_openlibs(g_decl);
  if (luaL_loadbuffer(g_decl, FNS, sizeof FNS - 1, "@shutdown_fns.lua") != 0 ||
      lua_pcall(g_decl, 0, 1, 0) != 0)
    test_fail(__FILE__, __LINE__, "loading the functions: %s",
              lua_tostring(g_decl, -1));
  lua_setglobal(g_decl, "T");
  g_env = sl__lua_env_new(SLUICE_SOURCE_DIR "/tests/lua/?.lua", NULL);
  ASSERT_NOT_NULL(g_env);
  ASSERT_OK(sl__lua_env_set_preload(g_env, 0));
  atexit(close_lua);
}

/* Ships T[name], or T[name](arg) when arg >= 0. */
static sl__shipped *ship(const char *name, long arg) {
  lua_getglobal(g_decl, "T");
  lua_getfield(g_decl, -1, name);
  if (arg >= 0) {
    lua_pushnumber(g_decl, (lua_Number)arg);
    if (lua_pcall(g_decl, 1, 1, 0) != 0)
      test_fail(__FILE__, __LINE__, "T.%s(%ld): %s", name, arg,
                lua_tostring(g_decl, -1));
  }
  sl__shipped *f = NULL;
  ASSERT_OK(sl__lua_ship(g_decl, -1, "map", &f));
  lua_pop(g_decl, 2);
  return f;
}

/* --- one iteration -----------------------------------------------------------
 */

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t next_u64(rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int pick(rng *r, int n) {
  return (int)(next_u64(r) % (uint64_t)n);
}

enum { FN_IDENTITY, FN_TIMES10, FN_SLOW, FN_EVEN, FN_BOOM, FN_RUNAWAY, NFN };
static const char *const fn_names[NFN] = {"identity", "times10", "slow",
                                          "even",     "boom_at", "runaway_at"};

enum { END_NOW, END_AFTER_K, END_IDLE, END_DRAIN, END_RESET, NEND };
static const char *const end_names[NEND] = {"at once", "after k samples",
                                            "after idling", "after the end",
                                            "after a reset"};

static void nap_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Reads up to k samples; returns the count, stopping at the end or an
 * error (which must carry a message). */
static int64_t read_some(sl_reader *r, int64_t k) {
  int64_t n = 0;
  while (n < k) {
    sl_sample *s;
    int rc = sl_reader_next(r, &s);
    if (rc == SL_EOF) break;
    if (rc < 0) {
      if (!sl_last_error()[0])
        test_fail(__FILE__, __LINE__, "%s without a message", sl_err_name(rc));
      break;
    }
    sl_sample_release(s);
    n++;
  }
  return n;
}

static void iteration(long it, uint64_t seed) {
  rng r = {seed * 0x100000001B3ull + (uint64_t)it};
  int of_threads = 1 + pick(&r, 3), shuffle = pick(&r, 2),
      unordered = pick(&r, 2), pre1 = pick(&r, 3) ? 0 : 1 + pick(&r, 8);
  int fn = pick(&r, NFN), map_threads = 1 + pick(&r, 3),
      map_ordered = pick(&r, 2), queue = pick(&r, 2) ? 0 : 1 + pick(&r, 16);
  int pre2 = pick(&r, 2) ? 1 + pick(&r, 8) : 0,
      batch = pick(&r, 3) ? 0 : 1 + pick(&r, 7);
  int end = pick(&r, NEND);
  const char *force = getenv("SLUICE_SHUTDOWN_FN");
  for (int i = 0; force && i < NFN; i++)
    if (!strcmp(force, fn_names[i])) fn = i;
  long at = pick(&r, NFILES * PER_FILE);
  int64_t k = pick(&r, NFILES * PER_FILE + 20);
  long idle_us = pick(&r, 3000);
  pthread_mutex_lock(&g_desc_mu);
  snprintf(g_desc, sizeof g_desc,
           "open_files(threads %d, shuffle %d, unordered %d) prefetch(%d) "
           "%s %s(%ld) (threads %d, ordered %d, queue %d) prefetch(%d) "
           "batch(%d), destroyed %s (k %lld, idle %ld us)",
           of_threads, shuffle, unordered, pre1,
           fn == FN_EVEN ? "filter" : "map", fn_names[fn], at, map_threads,
           map_ordered, queue, pre2, batch, end_names[end], (long long)k,
           idle_us);
  pthread_mutex_unlock(&g_desc_mu);
  atomic_store(&g_iter_start_ns, now_ns());
  atomic_store(&g_iter, it);

  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
  o.threads = (uint32_t)of_threads;
  o.shuffle = shuffle;
  o.unordered = unordered;
  o.seed = seed;
  o.buffer = 1 + (uint32_t)pick(&r, 4);
  o.world = 1, o.rank = 0;
  sl_reader *p;
  ASSERT_OK(sl_open_files(g_files, NFILES, &o, &p));
  if (pre1) ASSERT_OK(sl_prefetch(p, (size_t)pre1, &p));
  sl__shipped *f =
      ship(fn_names[fn], fn == FN_BOOM || fn == FN_RUNAWAY ? at : -1);
  sl__lua_stage_opts lo = {.threads = map_threads,
                           .ordered = map_ordered,
                           .queue = (size_t)queue,
                           .deadline = fn == FN_RUNAWAY ? 0.05 : 0};
  int rc = sl__lua_stage(p, fn == FN_EVEN ? SL__LUA_FILTER : SL__LUA_MAP, f,
                         g_env, &lo, NULL, &p);
  sl__shipped_release(f);
  if (rc < 0)
    test_fail(__FILE__, __LINE__, "iteration %ld: lua stage: %s", it,
              sl_last_error());
  if (pre2) ASSERT_OK(sl_prefetch(p, (size_t)pre2, &p));
  if (batch) ASSERT_OK(sl_batch(p, (size_t)batch, NULL, &p));

  switch (end) {
  case END_NOW:
    break;
  case END_AFTER_K:
    read_some(p, k);
    break;
  case END_IDLE: /* queues fill, workers block in send */
    read_some(p, k % 8);
    nap_us(idle_us);
    break;
  case END_DRAIN:
    read_some(p, INT64_MAX);
    break;
  case END_RESET:
    read_some(p, k % 30);
    if (sl_reader_reset(p) == SL_OK) read_some(p, k % 7);
    break;
  }
  sl_reader_destroy(p);
  atomic_store(&g_iter, -1);
  /* Every thread is joined: anything unreachable now leaked in this
   * iteration, which is named so that it can be replayed. */
  if (test_leaked())
    test_fail(__FILE__, __LINE__, "iteration %ld leaked (seed %llu): %s", it,
              (unsigned long long)seed, g_desc);
}

TEST(destroy_at_random_points_never_hangs_or_leaks) {
  setup();
  const char *e = getenv("SLUICE_SHUTDOWN_ITERATIONS");
  long n = e ? atol(e) : 1000;
  e = getenv("SLUICE_SHUTDOWN_SEED");
  uint64_t seed = e ? strtoull(e, NULL, 10) : 1;
  /* The per-iteration watchdog replaces test_main.c's per-process alarm,
   * which a slow sanitizer build could outrun without any hang. */
  alarm(0);
  pthread_t wd;
  ASSERT_EQ(pthread_create(&wd, NULL, watchdog, NULL), 0);
  long long t0 = now_ns(), worst = 0;
  long worst_it = -1;
  for (long it = 0; it < n; it++) {
    long long s = now_ns();
    iteration(it, seed);
    if (now_ns() - s > worst) worst = now_ns() - s, worst_it = it;
  }
  atomic_store(&g_watch_stop, true);
  pthread_join(wd, NULL);
  printf("%ld iterations (seed %llu) in %.1f s; slowest: iteration %ld, "
         "%.3f s\n",
         n, (unsigned long long)seed, (double)(now_ns() - t0) * 1e-9, worst_it,
         (double)worst * 1e-9);
}

/* The watchdog itself fires: a child process plays an iteration that
 * never ends, with a 1 s limit, and must die of the watchdog's abort. */
TEST(watchdog_fires_on_a_hang) {
  fflush(stdout);
  pid_t pid = fork();
  ASSERT_TRUE(pid >= 0);
  if (pid == 0) {
    g_hang_s = 1;
    atomic_store(&g_watch_stop, false); /* a parent's earlier test set it */
    pthread_t wd;
    if (pthread_create(&wd, NULL, watchdog, NULL) != 0) _exit(2);
    snprintf(g_desc, sizeof g_desc, "a deliberate hang");
    atomic_store(&g_iter_start_ns, now_ns());
    atomic_store(&g_iter, 0);
    nap_us(20 * 1000000); /* "hangs" */
    _exit(0);             /* the watchdog did not fire */
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(WTERMSIG(status), SIGABRT);
}

/* --- a runaway call below other threaded stages (issue 19, failure 1) ------
 * A Lua map with a 60 s deadline runs away on its sixth sample; above it, a
 * stage with threads of its own (prefetch, a second Lua map, a C parallel
 * map, double_buffer) has a thread waiting on it.  Destroying or resetting
 * the top must not wait out the deadline: every stage of the chain is told
 * to stop before any thread is joined. */

enum { ABOVE_PREFETCH, ABOVE_MAP, ABOVE_C_MAP, ABOVE_DOUBLE_BUFFER, NABOVE };
static const char *const above_names[NABOVE] = {
    "prefetch", "a Lua map", "a C parallel map", "double_buffer"};

static int c_identity(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  *out = in;
  return SL_OK;
}

static sl_reader *runaway_under(int above) {
  setup();
  sl_reader *p = test_range_reader(1000);
  sl__shipped *f = ship("runaway_at", 5); /* not 0: construction maps it */
  sl__lua_stage_opts lo = {.threads = 1, .ordered = 1, .deadline = 60};
  ASSERT_OK(sl__lua_stage(p, SL__LUA_MAP, f, g_env, &lo, NULL, &p));
  sl__shipped_release(f);
  switch (above) {
  case ABOVE_PREFETCH:
    ASSERT_OK(sl_prefetch(p, 4, &p));
    break;
  case ABOVE_MAP: {
    sl__shipped *g = ship("identity", -1);
    sl__lua_stage_opts l2 = {.threads = 2, .ordered = 1};
    ASSERT_OK(sl__lua_stage(p, SL__LUA_MAP, g, g_env, &l2, NULL, &p));
    sl__shipped_release(g);
    break;
  }
  case ABOVE_C_MAP: {
    sl_parallel_opts po = SL_PARALLEL_OPTS_INIT;
    po.threads = 2;
    ASSERT_OK(sl_map_parallel(p, c_identity, NULL, NULL, NULL, &po, &p));
    break;
  }
  case ABOVE_DOUBLE_BUFFER: {
    ASSERT_OK(sl_batch(p, 2, NULL, &p));
    sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
    o.device = "cpu";
    ASSERT_OK(sl_double_buffer(p, &o, &p));
    break;
  }
  }
  nap_us(100 * 1000); /* the thread above now waits on the runaway call */
  return p;
}

TEST(destroy_is_prompt_with_a_runaway_map_below_threaded_stages) {
  for (int above = 0; above < NABOVE; above++) {
    sl_reader *p = runaway_under(above);
    long long t0 = now_ns();
    sl_reader_destroy(p);
    double s = (double)(now_ns() - t0) * 1e-9;
    printf("destroy under %s: %.3f s\n", above_names[above], s);
    if (s > 5)
      test_fail(__FILE__, __LINE__, "destroy under %s took %.1f s",
                above_names[above], s);
  }
}

TEST(reset_is_prompt_with_a_runaway_map_below_threaded_stages) {
  for (int above = 0; above < NABOVE; above++) {
    sl_reader *p = runaway_under(above);
    long long t0 = now_ns();
    (void)sl_reader_reset(p); /* the runaway sample runs away again: fine */
    double s = (double)(now_ns() - t0) * 1e-9;
    printf("reset under %s: %.3f s\n", above_names[above], s);
    if (s > 5)
      test_fail(__FILE__, __LINE__, "reset under %s took %.1f s",
                above_names[above], s);
    t0 = now_ns();
    sl_reader_destroy(p);
    s = (double)(now_ns() - t0) * 1e-9;
    if (s > 5)
      test_fail(__FILE__, __LINE__, "destroy after reset under %s took %.1f s",
                above_names[above], s);
  }
}
