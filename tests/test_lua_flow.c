/* test_lua_flow.c - the Lua flow stages of src/script/lua_flow.c
 * (sl__lua_flow: flat_map, take_while, scan) from C: argument checks and
 * ownership (the upstream is taken on every failure: ASan finds a leak),
 * the three stages' output, lengths, thread counts, and the resume contract
 * (tests/test_util.h: test_resume_check) at many cuts, including a flat_map
 * restored into other thread counts.  The functions are a module written to
 * the test's scratch folder and shipped by name ("flowfns.copies"); the
 * worker states load the real sluice package from the source tree, which
 * reaches this executable's sl_* symbols through ffi.C (ENABLE_EXPORTS;
 * CMakeLists.txt links the whole static library into it, as for
 * test_resume_script). */
#include "test.h"
#include "test_util.h"

#include "core/crc32c.h"
#include "core/internal.h"
#include "script/lua_host.h"

static const char MODULE[] =
    "local M = {}\n"
    "function M.copies(s)\n" /* k copies of sample k */
    "  local t = {}\n"
    "  for j = 1, s.i do t[j] = s end\n"
    "  return t\n"
    "end\n"
    /* 0..3 rows drawn from ctx.rng (see flat_map_resumes_at_every_cut) */
    "function M.rows(s, ctx)\n"
    "  local t = {}\n"
    "  for j = 1, ctx.rng:random(0, 3) do\n"
    "    t[j] = {i = s.i * 10 + j}\n"
    "  end\n"
    "  return t\n"
    "end\n"
    "function M.below4(s) return s.i < 4 end\n"
    "function M.zero() return 0 end\n"
    "function M.sum(acc, s)\n"
    "  acc = acc + s.i\n"
    "  return acc, {i = acc}\n"
    "end\n"
    "function M.number(s) return 42 end\n"
    /* plain accumulators: a table of numbers, strings, booleans, tables */
    "function M.tinit()\n"
    "  return {n = 0, s = '', flags = {true, false}, deep = {a = {b = 1.5}}}\n"
    "end\n"
    "function M.tsum(acc, s)\n"
    "  acc.n = acc.n + s.i\n"
    "  acc.s = acc.s .. tostring(s.i % 10)\n"
    "  acc.flags[1] = not acc.flags[1]\n"
    "  acc.deep.a.b = acc.deep.a.b * 2\n"
    "  return acc, {i = acc.n * 1000 + #acc.s + (acc.flags[1] and 1 or 0)}\n"
    "end\n"
    /* not plain: a function inside */
    "function M.finit() return {f = function() end, n = 0} end\n"
    "function M.fsum(acc, s)\n"
    "  acc.n = acc.n + s.i\n"
    "  return acc, {i = acc.n}\n"
    "end\n"
    "return M\n";

static sl__lua_env *env(void) {
  static char path[4096];
  const char *dir = test_tmpdir("lua_flow");
  test_write_file(test_tmppath("lua_flow", "flowfns.lua"), MODULE,
                  sizeof MODULE - 1);
  snprintf(path, sizeof path,
           "%s/?.lua;" SLUICE_SOURCE_DIR "/lua/?.lua;" SLUICE_SOURCE_DIR
           "/lua/?/init.lua;;",
           dir);
  sl__lua_env *e = sl__lua_env_new(path, NULL);
  ASSERT_NOT_NULL(e);
  return e;
}

static sl__shipped *fn(const char *name, const char *what) {
  sl__shipped *f = NULL;
  ASSERT_OK(sl__shipped_new(what, NULL, NULL, 0, name, &f));
  return f;
}

/* The stage `kind` running flowfns.<name> over `up` (init: flowfns.zero
 * for scan). */
static int flow_init(sl_reader *up, sl__lua_flow_kind kind, const char *name,
                     const char *init_name, int threads, sl_reader **out) {
  static const char *const what[] = {"flat_map", "take_while", "scan"};
  char full[64];
  snprintf(full, sizeof full, "flowfns.%s", name);
  sl__shipped *f = fn(full, what[kind]);
  snprintf(full, sizeof full, "flowfns.%s", init_name ? init_name : "zero");
  sl__shipped *init = kind == SL__LUA_SCAN ? fn(full, "scan") : NULL;
  sl__lua_env *e = env();
  sl__lua_stage_opts o = {.threads = threads, .ordered = 1, .seed = 5};
  int rc = sl__lua_flow(up, kind, f, init, e, &o, NULL, out);
  sl__shipped_release(f);
  sl__shipped_release(init);
  sl__lua_env_release(e);
  return rc;
}

static int flow(sl_reader *up, sl__lua_flow_kind kind, const char *name,
                int threads, sl_reader **out) {
  return flow_init(up, kind, name, NULL, threads, out);
}

TEST(bad_arguments_take_the_upstream) {
  sl__shipped *f = fn("flowfns.copies", "flat_map");
  sl__shipped *init = fn("flowfns.zero", "scan");
  sl__lua_env *e = sl__lua_env_new(NULL, NULL);
  sl__lua_stage_opts o = {.threads = 1, .ordered = 1};
  sl_reader *r = (sl_reader *)1;
  ASSERT_RC(sl__lua_flow(test_range_reader(3), SL__LUA_FLAT_MAP, f, NULL, e, &o,
                         NULL, NULL),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "flat_map: NULL out pointer");
  ASSERT_RC(sl__lua_flow(NULL, SL__LUA_FLAT_MAP, f, NULL, e, &o, NULL, &r),
            SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "flat_map: NULL upstream reader");
  ASSERT_RC(sl__lua_flow(test_range_reader(3), SL__LUA_TAKE_WHILE, NULL, NULL,
                         e, &o, NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "take_while: NULL function");
  ASSERT_RC(sl__lua_flow(test_range_reader(3), (sl__lua_flow_kind)7, f, NULL, e,
                         &o, NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "unknown kind");
  ASSERT_RC(sl__lua_flow(test_range_reader(3), SL__LUA_SCAN, f, NULL, e, &o,
                         NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "scan: an init function is scan's only");
  ASSERT_RC(sl__lua_flow(test_range_reader(3), SL__LUA_FLAT_MAP, f, init, e, &o,
                         NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "flat_map: an init function");
  sl_reader *up = test_range_reader(3);
  sl_schema *s = (sl_schema *)sl_reader_schema(up);
  sl_schema_retain(s);
  ASSERT_RC(sl__lua_flow(up, SL__LUA_TAKE_WHILE, f, NULL, e, &o, s, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "take_while has no schema option");
  sl_schema_release(s);
  o.deadline = -1;
  ASSERT_RC(sl__lua_flow(test_range_reader(3), SL__LUA_FLAT_MAP, f, NULL, e, &o,
                         NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(),
                  "flat_map (flowfns.copies): option 'deadline'");
  o.deadline = 0;
  o.epoch = (uint64_t)1 << 53;
  ASSERT_RC(sl__lua_flow(test_range_reader(3), SL__LUA_SCAN, f, init, e, &o,
                         NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "scan (flowfns.copies): option 'epoch'");
  o.epoch = 0;
  o.threads = 0;
  ASSERT_RC(sl__lua_flow(test_range_reader(3), SL__LUA_FLAT_MAP, f, NULL, e, &o,
                         NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "threads");
  ASSERT_NULL(r);
  sl__lua_env_release(e);
  sl__shipped_release(init);
  sl__shipped_release(f);
}

TEST(flat_map_copies_for_1_2_4_threads) {
  for (int threads = 1; threads <= 4; threads *= 2) {
    sl_reader *r = NULL;
    ASSERT_OK(
        flow(test_range_reader(5), SL__LUA_FLAT_MAP, "copies", threads, &r));
    uint64_t n = 0;
    ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_last_error(), "flat_map");
    for (int pass = 0; pass < 2; pass++) {
      EXPECT(r, SL_EOF, 1, 2, 2, 3, 3, 3, 4, 4, 4, 4);
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
}

TEST(flat_map_error_names_the_stage_and_sample) {
  sl_reader *r = NULL;
  ASSERT_OK(flow(test_range_reader(5), SL__LUA_FLAT_MAP, "number", 2, &r));
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
  ASSERT_CONTAINS(sl_last_error(), "flat_map (flowfns.number): sample 0: "
                                   "flat_map function returned a number");
  sl_reader_destroy(r);
}

TEST(take_while_and_scan) {
  sl_reader *r = NULL;
  ASSERT_OK(flow(test_range_reader(10), SL__LUA_TAKE_WHILE, "below4", 1, &r));
  uint64_t n = 0;
  ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
  EXPECT(r, SL_EOF, 0, 1, 2, 3);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 2, 3);
  sl_reader_destroy(r);
  ASSERT_OK(flow(test_range_reader(6), SL__LUA_SCAN, "sum", 1, &r));
  ASSERT_EQ(test_length_checked(r), 6);
  EXPECT(r, SL_EOF, 0, 1, 3, 6, 10, 15);
  ASSERT_OK(sl_reader_reset(r));
  EXPECT(r, SL_EOF, 0, 1, 3, 6, 10, 15);
  sl_reader_destroy(r);
}

typedef struct build_args {
  sl__lua_flow_kind kind;
  const char *name;
  int threads;
  int64_t n;
  bool prefetch;
} build_args;

static sl_reader *build(void *ud) {
  const build_args *a = ud;
  sl_reader *r = NULL;
  ASSERT_OK(flow(test_range_reader(a->n), a->kind, a->name, a->threads, &r));
  if (a->prefetch) ASSERT_OK(sl_prefetch(r, 7, &r));
  return r;
}

static const uint64_t CUTS[] = {0, 1, 2, 3, 5, 8, 13, 21, 34, 40, 55, 89};

/* flowfns.rows draws 0..3 rows per item from ctx.rng, so a restore that
 * numbered the items or the passes otherwise would give other counts.
 * This test found a LuaJIT bug (about 1 run in 40 under load): Debian's
 * LuaJIT folds (x & k) >> s into (x >> s) & k' with k' computed in 32 bits
 * (LuaJIT issue #1079), so a trace with a constant bound made
 * ctx.rng:random(0, 3) return 4; sluice/rng.lua avoids the pattern and
 * spec/31-rng_jit_spec.lua pins it. */
TEST(flat_map_resumes_at_every_cut) {
  for (int threads = 1; threads <= 4; threads *= 2) {
    build_args a = {SL__LUA_FLAT_MAP, "rows", threads, 20, false};
    test_resume_check(build, &a, 2, CUTS, sizeof CUTS / sizeof *CUTS, 0);
    a.prefetch = true; /* saves behind what the stage delivered */
    test_resume_check(build, &a, 2, CUTS, sizeof CUTS / sizeof *CUTS, 0);
  }
}

TEST(take_while_and_scan_resume_at_every_cut) {
  build_args a = {SL__LUA_TAKE_WHILE, "below4", 1, 10, false};
  test_resume_check(build, &a, 3, CUTS, sizeof CUTS / sizeof *CUTS, 0);
  build_args b = {SL__LUA_SCAN, "sum", 1, 12, false};
  test_resume_check(build, &b, 2, CUTS, sizeof CUTS / sizeof *CUTS, 0);
  /* behind a prefetch, let it fill before each save (as below: a save
   * while it still pulls can find the stage one step further than the
   * next save; both restore, the check wants two equal saves - seen under
   * TSan on a loaded machine) */
  test_resume_settle_us = 300000;
  a.prefetch = true;
  test_resume_check(build, &a, 3, CUTS, sizeof CUTS / sizeof *CUTS, 0);
  b.prefetch = true;
  test_resume_check(build, &b, 2, CUTS, sizeof CUTS / sizeof *CUTS, 0);
  test_resume_settle_us = 0;
}

/* A plain accumulator (a table of numbers, strings, booleans and tables)
 * is in the state: every cut restores exactly, with and without a prefetch
 * above (a save behind), and the restore reads no upstream sample again.
 * One with a function inside keeps the replay, exactly too. */
typedef struct scan_args {
  const char *name, *init; /* flowfns.<name>, flowfns.<init> */
  int64_t n;
  bool prefetch;
} scan_args;

static uint64_t pulled; /* samples the scan took from upstream */

static int counting(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  pulled++;
  *out = in;
  return SL_OK;
}

/* range(n) -> counting -> scan [-> prefetch(7)] */
static sl_reader *build_scan(void *ud) {
  const scan_args *a = ud;
  sl_reader *r = test_range_reader(a->n);
  ASSERT_OK(sl_map(r, counting, NULL, NULL, NULL, &r));
  ASSERT_OK(flow_init(r, SL__LUA_SCAN, a->name, a->init, 1, &r));
  if (a->prefetch) ASSERT_OK(sl_prefetch(r, 7, &r));
  return r;
}

TEST(scan_saves_a_plain_accumulator_and_replays_no_pass) {
  for (int pre = 0; pre < 2; pre++) {
    /* behind a prefetch, let it fill before each save: a save while it
     * still pulls can find the scan one step further than the next save
     * (both restore; the check wants two equal saves) */
    test_resume_settle_us = pre ? 300000 : 0;
    scan_args a = {"tsum", "tinit", 40, pre != 0};
    test_resume_check(build_scan, &a, 2, CUTS, sizeof CUTS / sizeof *CUTS, 0);
    scan_args f = {"fsum", "finit", 40, pre != 0};
    test_resume_check(build_scan, &f, 2, CUTS, sizeof CUTS / sizeof *CUTS, 0);
  }
  test_resume_settle_us = 0;
  scan_args a = {"tsum", "tinit", 1000, false};
  for (uint64_t cut = 1; cut < 1000; cut += 333) {
    sl_reader *r = build_scan(&a);
    size_t len = 0;
    void *st = test_save_after(r, cut, &len);
    sl_reader_destroy(r);
    r = build_scan(&a);
    uint64_t before = pulled; /* the constructor's first step */
    ASSERT_OK(sl_reader_restore(r, st, len));
    ASSERT_EQ(pulled, before); /* the replay read `cut` samples again */
    /* a cut accumulator, and one that is not an encoding, are refused */
    unsigned char *bad = malloc(len);
    for (int how = 0; how < 2; how++) {
      memcpy(bad, st, len);
      /* the accumulator's table opens with 'T' (the only one in the state
       * after the scan record's three words) */
      unsigned char *t = memchr(bad, 'T', len);
      while (t && !(t[-1] == 0 && t + 1 < bad + len))
        t = memchr(t + 1, 'T', (size_t)(bad + len - t - 1));
      ASSERT_NOT_NULL(t);
      *t = how ? 'Q' : 'T';
      if (!how) t[1] = 'Z';
      uint32_t c = sl__crc32c(0, bad, len - 4);
      for (int b = 0; b < 4; b++)
        bad[len - 4 + b] = (unsigned char)(c >> (8 * b));
      sl_reader *q = build_scan(&a);
      ASSERT_RC(sl_reader_restore(q, bad, len), SL_ECORRUPT);
      ASSERT_CONTAINS(sl_last_error(), "scan (flowfns.tsum)");
      sl_reader_destroy(q);
    }
    free(bad);
    sl_free(st);
    sl_reader_destroy(r);
  }
}

TEST(destroy_mid_pass) {
  for (int k = 0; k < 20; k++) {
    sl_reader *r = NULL;
    ASSERT_OK(flow(test_range_reader(1000), SL__LUA_FLAT_MAP, "copies",
                   1 + k % 3, &r));
    sl_sample *s = NULL;
    for (int j = 0; j < k; j++) {
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    sl_reader_destroy(r);
  }
}
