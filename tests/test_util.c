/* test_util.c - the helpers of test_util.h. */
#include "test_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

/* --- scratch files ----------------------------------------------------------
 */

static char g_tmpdir[256];

static int remove_entry(const char *p, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

static void remove_tmpdir(void) {
  if (g_tmpdir[0]) nftw(g_tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

const char *test_tmpdir(const char *tag) {
  if (!g_tmpdir[0]) {
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/sluice-test-%s-XXXXXX", tag);
    ASSERT_NOT_NULL(mkdtemp(g_tmpdir));
    atexit(remove_tmpdir);
  }
  return g_tmpdir;
}

const char *test_tmppath(const char *tag, const char *name) {
  static char buf[TEST_TMPPATH_SLOTS][512];
  static int next;
  char *b = buf[next++ % TEST_TMPPATH_SLOTS];
  snprintf(b, sizeof buf[0], "%s/%s", test_tmpdir(tag), name);
  return b;
}

char *test_tmppath_dup(const char *tag, const char *name) {
  char *b = malloc(512);
  ASSERT_NOT_NULL(b);
  snprintf(b, 512, "%s/%s", test_tmpdir(tag), name);
  return b;
}

/* --- readers of int64 samples ----------------------------------------------
 */

int64_t test_sample_i64(const sl_sample *s, int i) {
  return *(const int64_t *)sl_sample_at_const(s, i)->data;
}

sl_reader *test_range_reader(int64_t n) {
  sl_reader *r;
  ASSERT_OK(sl_reader_range(n, &r));
  return r;
}

/* v -> {ids: i32[v % 50 + 1]}: documents of 1..50 tokens. */
static sl_schema *g_docs;
static int make_doc(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  int64_t v = test_sample_i64(in, 0), n = v % 50 + 1;
  sl_sample_release(in);
  sl_sample *s = sl_sample_new(g_docs);
  int32_t *ids = NULL;
  if (!s || sl_sample_alloc(s, 0, 1, &n, (void **)&ids) < 0) {
    sl_sample_release(s);
    return sl_set_error(SL_ENOMEM, "make_doc");
  }
  for (int64_t k = 0; k < n; k++)
    ids[k] = (int32_t)(v + k);
  *out = s;
  return SL_OK;
}

sl_reader *test_docs(sl_reader *src) {
  if (!g_docs) {
    int64_t any = -1;
    g_docs = sl_schema_new();
    ASSERT_OK(sl_schema_add(g_docs, "ids", SL_I32, 1, &any));
  }
  sl_parallel_opts po = SL_PARALLEL_OPTS_INIT;
  po.threads = 1;
  sl_reader *m = NULL;
  ASSERT_OK(sl_map_parallel(src, make_doc, NULL, NULL, g_docs, &po, &m));
  return m;
}

int test_drain_i64(sl_reader *r, int64_t *v, size_t cap, size_t *n) {
  *n = 0;
  for (;;) {
    sl_sample *s;
    int rc = sl_reader_next(r, &s);
    if (rc != SL_OK) return rc;
    if (*n == cap) test_fail(__FILE__, __LINE__, "more than %zu samples", cap);
    v[(*n)++] = test_sample_i64(s, 0);
    sl_sample_release(s);
  }
}

uint64_t test_length_checked(sl_reader *r) {
  uint64_t n = 12345;
  ASSERT_OK(sl_reader_length(r, &n));
  uint64_t got = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    got++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  if (got != n)
    test_fail(__FILE__, __LINE__,
              "%s: length %" PRIu64 " but a pass yielded %" PRIu64,
              sl_reader_name(r), n, got);
  ASSERT_OK(sl_reader_reset(r));
  return n;
}

void test_assert_i64_values(const int64_t *v, size_t n, const int64_t *want,
                            size_t m) {
  ASSERT_EQ(n, m);
  for (size_t i = 0; i < n; i++)
    if (v[i] != want[i])
      test_fail(__FILE__, __LINE__, "value %zu: %" PRId64 " != %" PRId64, i,
                v[i], want[i]);
}

void test_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(data, 1, n, f), n);
  ASSERT_EQ(fclose(f), 0);
}

char *test_read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  ASSERT_EQ(fseek(f, 0, SEEK_END), 0);
  long len = ftell(f);
  ASSERT_GE(len, 0);
  ASSERT_EQ(fseek(f, 0, SEEK_SET), 0);
  char *b = malloc((size_t)len + 1);
  ASSERT_NOT_NULL(b);
  ASSERT_EQ(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

void test_assert_file_is(const char *path, const void *data, size_t n,
                         const char *what) {
  size_t got = 0;
  char *now = test_read_file(path, &got);
  if (!now || got != n || memcmp(now, data, n) != 0)
    test_fail(__FILE__, __LINE__, "%s: %s is %s, not the old file", what,
              path, now ? "changed" : "gone");
  free(now);
}

int test_count_named(const char *dir, const char *part) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strstr(e->d_name, part)) n++;
  closedir(d);
  return n;
}

void test_write_gz(const char *path, const void *data, size_t n) {
  gzFile g = gzopen(path, "wb");
  ASSERT_TRUE(g != NULL);
  ASSERT_EQ(gzwrite(g, data, (unsigned)n), (int)n);
  ASSERT_EQ(gzclose(g), Z_OK);
}

size_t test_idx_header(unsigned char *h, unsigned type, int rank,
                       const uint32_t *dims) {
  h[0] = 0, h[1] = 0, h[2] = (unsigned char)type, h[3] = (unsigned char)rank;
  for (int d = 0; d < rank; d++) {
    h[4 + 4 * d] = (unsigned char)(dims[d] >> 24);
    h[5 + 4 * d] = (unsigned char)(dims[d] >> 16);
    h[6 + 4 * d] = (unsigned char)(dims[d] >> 8);
    h[7 + 4 * d] = (unsigned char)dims[d];
  }
  return 4 + 4 * (size_t)rank;
}

void test_touch_later(const char *path, int seconds) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    test_fail(__FILE__, __LINE__, "stat %s: %s", path, strerror(errno));
  struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
  ts[1].tv_sec += seconds;
  if (utimensat(AT_FDCWD, path, ts, 0) != 0)
    test_fail(__FILE__, __LINE__, "utimensat %s: %s", path, strerror(errno));
}

void test_sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
  nanosleep(&ts, NULL);
}

double test_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void test_same_next(sl_reader *a, sl_reader *b, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    sl_sample *x, *y;
    ASSERT_OK(sl_reader_next(a, &x));
    ASSERT_OK(sl_reader_next(b, &y));
    ASSERT_EQ(test_sample_digest(x), test_sample_digest(y));
    sl_sample_release(x);
    sl_sample_release(y);
  }
}

void test_write_ids_slr(const char *path, int64_t first, int64_t n,
                        uint32_t per_chunk) {
  sl_schema *s = sl_schema_new();
  ASSERT_OK(sl_schema_add(s, "id", SL_I64, 0, NULL));
  sl_slr_writer *w;
  sl_slr_writer_opts o = {1, 0, per_chunk};
  ASSERT_OK(sl_slr_writer_open(path, s, &o, &w));
  for (int64_t i = 0; i < n; i++) {
    sl_sample *r = sl_sample_new(s);
    int64_t *v;
    ASSERT_OK(sl_sample_alloc(r, 0, 0, NULL, (void **)&v));
    *v = first + i;
    ASSERT_OK(sl_slr_writer_append(w, r));
    sl_sample_release(r);
  }
  ASSERT_OK(sl_slr_writer_close(w));
  sl_schema_release(s);
}

int test_i64_sample(const sl_schema *schema, int64_t v, sl_sample **out) {
  sl_sample *s = sl_sample_new((sl_schema *)schema);
  if (!s) return SL_ENOMEM;
  void *data;
  int rc = sl_sample_alloc(s, 0, 0, NULL, &data);
  if (rc < 0) {
    sl_sample_release(s);
    return rc;
  }
  *(int64_t *)data = v;
  *out = s;
  return SL_OK;
}

bool test_leaked(void) {
#if defined(__SANITIZE_ADDRESS__)
  return __lsan_do_recoverable_leak_check() != 0;
#else
  return false;
#endif
}

int test_temporaries_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[4096], prefix[512];
  if (slash) {
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (!dir[0]) snprintf(dir, sizeof dir, "/");
  } else {
    snprintf(dir, sizeof dir, ".");
  }
  snprintf(prefix, sizeof prefix, "%s.tmp-", slash ? slash + 1 : path);
  DIR *d = opendir(dir);
  if (!d) test_fail(__FILE__, __LINE__, "cannot list %s", dir);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  closedir(d);
  return n;
}

uint64_t test_sample_digest(const sl_sample *s) {
  uint64_t h = 1469598103934665603ull;
#define MIX(p, n)                                                              \
  do {                                                                         \
    const unsigned char *b_ = (const unsigned char *)(p);                      \
    for (size_t i_ = 0; i_ < (size_t)(n); i_++) {                              \
      h ^= b_[i_];                                                             \
      h *= 1099511628211ull;                                                   \
    }                                                                          \
  } while (0)
  int nf = sl_sample_nfields(s);
  for (int i = 0; i < nf; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    MIX(&t->dtype, sizeof t->dtype);
    MIX(&t->rank, sizeof t->rank);
    MIX(t->shape, sizeof t->shape[0] * (size_t)t->rank);
    if (t->nbytes) MIX(t->data, t->nbytes);
    MIX(&t->lod_len, sizeof t->lod_len);
    if (t->lod_len) MIX(t->lod, sizeof *t->lod * (size_t)t->lod_len);
  }
#undef MIX
  return h;
}

/* A pass end in a recorded run. */
#define RESUME_PASS_END 0ull

typedef struct run_log {
  uint64_t *v;
  size_t n, cap;
} run_log;

static void log_push(run_log *l, uint64_t v) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 256;
    l->v = realloc(l->v, l->cap * sizeof *l->v);
    if (!l->v) test_fail(__FILE__, __LINE__, "out of memory");
  }
  l->v[l->n++] = v;
}

/* Reads from r until `passes` pass ends were logged (counting `done`
 * already) or `limit` samples were read. */
static void run_into(sl_reader *r, run_log *l, int passes, int done,
                     uint64_t limit) {
  uint64_t got = 0;
  while (done < passes && got < limit) {
    sl_sample *s = NULL;
    int rc = sl_reader_next(r, &s);
    if (rc == SL_EOF) {
      log_push(l, RESUME_PASS_END);
      if (++done < passes && sl_reader_reset(r) != SL_OK)
        test_fail(__FILE__, __LINE__, "reset: %s", sl_last_error());
      continue;
    }
    if (rc != SL_OK)
      test_fail(__FILE__, __LINE__, "next: %s: %s", sl_err_name(rc),
                sl_last_error());
    uint64_t d = test_sample_digest(s);
    log_push(l, d == RESUME_PASS_END ? 1 : d);
    sl_sample_release(s);
    got++;
  }
}

static int ends_in(const run_log *l) {
  int n = 0;
  for (size_t i = 0; i < l->n; i++)
    n += l->v[i] == RESUME_PASS_END;
  return n;
}

long test_resume_settle_us;

size_t test_cuts_after_ends(uint64_t *cuts, size_t cap, uint64_t pass_len,
                            int ends, uint64_t span, uint64_t step) {
  size_t n = 0;
  for (uint64_t p = 1; p <= (uint64_t)ends; p++)
    for (uint64_t d = 0; d <= span && n < cap; d += step)
      cuts[n++] = p * pass_len + d;
  if (n < cap) cuts[n++] = (uint64_t)(ends + 1) * pass_len - 1;
  return n;
}

void test_resume_check(test_build_fn build, void *ud, int passes,
                       const uint64_t *cuts, size_t ncuts,
                       size_t max_state_bytes) {
  if (!max_state_bytes) max_state_bytes = 64 * 1024;
  run_log ref = {0};
  sl_reader *r = build(ud);
  if (!r) test_fail(__FILE__, __LINE__, "build: %s", sl_last_error());
  run_into(r, &ref, passes, 0, UINT64_MAX);
  sl_reader_destroy(r);
  for (size_t c = 0; c < ncuts; c++) {
    run_log head = {0}, tail = {0};
    r = build(ud);
    run_into(r, &head, passes, 0, cuts[c]);
    if (test_resume_settle_us) test_sleep_us(test_resume_settle_us);
    void *st = NULL, *st2 = NULL;
    size_t len = 0, len2 = 0;
    if (sl_reader_save(r, &st, &len) != SL_OK)
      test_fail(__FILE__, __LINE__, "cut %llu: save: %s",
                (unsigned long long)cuts[c], sl_last_error());
    if (sl_reader_save(r, &st2, &len2) != SL_OK || len2 != len ||
        memcmp(st, st2, len) != 0)
      test_fail(__FILE__, __LINE__, "cut %llu: a second save differs",
                (unsigned long long)cuts[c]);
    if (len > max_state_bytes)
      test_fail(__FILE__, __LINE__, "cut %llu: state of %zu bytes > %zu",
                (unsigned long long)cuts[c], len, max_state_bytes);
    sl_free(st2);
    sl_reader_destroy(r);
    r = build(ud);
    if (sl_reader_restore(r, st, len) != SL_OK)
      test_fail(__FILE__, __LINE__, "cut %llu: restore: %s",
                (unsigned long long)cuts[c], sl_last_error());
    sl_free(st);
    int done = ends_in(&head);
    run_into(r, &tail, passes, done, UINT64_MAX);
    sl_reader_destroy(r);
    if (head.n + tail.n != ref.n)
      test_fail(__FILE__, __LINE__,
                "cut %llu: %zu before + %zu after the restore, the "
                "uninterrupted run had %zu (samples and pass ends)",
                (unsigned long long)cuts[c], head.n, tail.n, ref.n);
    for (size_t i = 0; i < ref.n; i++) {
      uint64_t got = i < head.n ? head.v[i] : tail.v[i - head.n];
      if (got != ref.v[i])
        test_fail(__FILE__, __LINE__,
                  "cut %llu: item %zu (%s the restore) is %016llx, the "
                  "uninterrupted run had %016llx",
                  (unsigned long long)cuts[c], i,
                  i < head.n ? "before" : "after", (unsigned long long)got,
                  (unsigned long long)ref.v[i]);
    }
    free(head.v);
    free(tail.v);
  }
  free(ref.v);
}

uint64_t test_child_peak_rss(void (*fn)(void *ud), void *ud) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  ASSERT_TRUE(pid >= 0);
  if (pid == 0) {
    fn(ud);
    fflush(stdout);
    _exit(0);
  }
  int status;
  struct rusage ru;
  pid_t w;
  while ((w = wait4(pid, &status, 0, &ru)) < 0 && errno == EINTR) {
  }
  ASSERT_EQ(w, pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    test_fail(__FILE__, __LINE__, "the child failed (%s %d)",
              WIFEXITED(status) ? "exit" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return (uint64_t)ru.ru_maxrss * 1024; /* Linux: kilobytes */
}

int test_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t l = sizeof a;
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &l), 0);
  close(fd);
  return ntohs(a.sin_port);
}

bool test_can_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

pid_t test_server_start(const char *what, char *const argv[], int port,
                        bool quiet_stderr) {
  pid_t pid = fork();
  ASSERT_TRUE(pid >= 0);
  if (pid == 0) {
    /* A test that fails exits at once: the server must not outlive it, nor
     * hold its output open (CTest would wait for it). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    if (quiet_stderr) dup2(null, 2);
    execv(argv[0], argv);
    _exit(127);
  }
  for (int i = 0; i < 1000 && !test_can_connect(port); i++)
    usleep(10000);
  if (!test_can_connect(port)) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    test_fail(__FILE__, __LINE__, "%s did not start on port %d", what, port);
  }
  return pid;
}

void test_server_stop(pid_t pid, int sig) {
  kill(pid, sig);
  int st;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
}

#define NGINX "/usr/sbin/nginx"

void test_nginx_start(test_nginx *s, const char *root) {
  if (access(NGINX, X_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "%s is missing: the HTTP tests need nginx (apt-get install "
              "nginx, or make deps: it is in the Makefile's PACKAGES)",
              NGINX);
  snprintf(s->dir, sizeof s->dir, "/tmp/sluice-nginx-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(s->dir));
  s->port = test_free_port();
  char conf[512];
  snprintf(conf, sizeof conf, "%s/www", s->dir);
  ASSERT_EQ(mkdir(conf, 0755), 0);
  snprintf(conf, sizeof conf, "%s/nginx.conf", s->dir);
  FILE *f = fopen(conf, "w");
  ASSERT_NOT_NULL(f);
  fprintf(f,
          "%s\n"
          "worker_processes 1;\n"
          "pid %s/nginx.pid;\n"
          "error_log %s/error.log;\n"
          "events { worker_connections 64; }\n"
          "http {\n"
          "  access_log %s/access.log;\n"
          "  client_body_temp_path %s;\n"
          "  proxy_temp_path %s;\n"
          "  fastcgi_temp_path %s;\n"
          "  uwsgi_temp_path %s;\n"
          "  scgi_temp_path %s;\n"
          "  limit_req_zone $binary_remote_addr zone=flaky:1m rate=1r/s;\n"
          "  server {\n"
          "    listen 127.0.0.1:%d;\n"
          "    location / { root %s; }\n"
          "    location /flaky/ { limit_req zone=flaky; limit_req_status 500;"
          " alias %s/; }\n"
          "    location /w/ { alias %s/www/; }\n"
          "    location /flakyw/ { limit_req zone=flaky; limit_req_status 500;"
          " alias %s/www/; }\n"
          "  }\n"
          "}\n",
          geteuid() == 0 ? "user root;" : "", s->dir, s->dir, s->dir, s->dir,
          s->dir, s->dir, s->dir, s->dir, s->port, root, root, s->dir, s->dir);
  fclose(f);
  char *argv[] = {NGINX, "-p", s->dir, "-c", conf, "-g", "daemon off;", NULL};
  s->pid = test_server_start("nginx", argv, s->port, true);
}

void test_nginx_stop(test_nginx *s) {
  test_server_stop(s->pid, SIGQUIT);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
  ASSERT_EQ(system(cmd), 0);
}

const char *test_nginx_www(const test_nginx *s, const char *name) {
  static char p[4][512];
  static int k;
  char *r = p[k++ % 4];
  snprintf(r, sizeof p[0], "%s/www/%s", s->dir, name);
  return r;
}

void *test_save_after(sl_reader *r, uint64_t n, size_t *len) {
  for (uint64_t i = 0; i < n; i++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  void *st = NULL;
  ASSERT_OK(sl_reader_save(r, &st, len));
  return st;
}

uint64_t test_digest_all(sl_reader *r, uint64_t *n) {
  uint64_t h = 0;
  *n = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    h = h * 31 + test_sample_digest(s);
    (*n)++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  sl_reader_destroy(r);
  return h;
}
