/*
 * test_http.c - remote files over HTTP (src/io/http.c): a real nginx on
 * loopback (started here on a free port, stopped at the end) serves
 * tests/data/formats/, and the npy:, csv:, wds: and tfrecord: readers read
 * it by URL; faults: 404 (an error naming the URL and the status), 500
 * then 200 (nginx's limit_req answering 500 to a request too soon after
 * another: retried with backoff), a connection closed mid-body (a small
 * server in this test, since nginx never does that on purpose: the rest
 * comes by a ranged GET), a server that always fails (retries spent).
 * Every sample arrives exactly once, or the pass fails naming the URL.
 *
 * nginx is a declared dependency (Makefile PACKAGES, `make deps`): when it
 * is missing the tests fail saying so, they do not skip.
 */
#include "test.h"
#include "test_util.h"

#include "io/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DIR SLUICE_SOURCE_DIR "/tests/data/formats"
#define NGINX "/usr/sbin/nginx"

typedef struct server {
  pid_t pid;
  int port;
  char dir[256];
} server;

/* nginx serving DIR at / and, rate-limited to 1 request per second with
 * status 500 beyond it, at /flaky/; and the test's own files (written to
 * s->dir/www) at /w/ and, rate-limited, at /flakyw/. */
static void nginx_start(server *s) {
  if (access(NGINX, X_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "%s is missing: the HTTP tests need nginx (apt-get install "
              "nginx, or make deps: it is in the Makefile's PACKAGES)",
              NGINX);
  snprintf(s->dir, sizeof s->dir, "/tmp/sluice-nginx-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(s->dir));
  s->port = test_free_port();
  char conf[512];
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
          s->dir, s->dir, s->dir, s->dir, s->port, DIR, DIR, s->dir, s->dir);
  snprintf(conf, sizeof conf, "%s/www", s->dir);
  ASSERT_EQ(mkdir(conf, 0755), 0);
  snprintf(conf, sizeof conf, "%s/nginx.conf", s->dir);
  fclose(f);
  char *argv[] = {NGINX, "-p", s->dir, "-c", conf, "-g", "daemon off;", NULL};
  s->pid = test_server_start("nginx", argv, s->port, true);
}

static void nginx_stop(server *s) {
  test_server_stop(s->pid, SIGQUIT);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
  ASSERT_EQ(system(cmd), 0);
}

static void same_as_local(const server *s, const char *tag, const char *file) {
  char url[512], local[512];
  snprintf(url, sizeof url, "%s:http://127.0.0.1:%d/%s", tag, s->port, file);
  snprintf(local, sizeof local, "%s:%s/%s", tag, DIR, file);
  sl_reader *a, *b;
  ASSERT_OK(sl_open(url, NULL, &a));
  ASSERT_OK(sl_open(local, NULL, &b));
  uint64_t na, nb;
  uint64_t ha = test_digest_all(a, &na), hb = test_digest_all(b, &nb);
  ASSERT_EQ(na, nb);
  ASSERT_TRUE(na > 0);
  ASSERT_TRUE(ha == hb);
}

TEST(http_every_format_reads_as_from_disk) {
  server s;
  nginx_start(&s);
  same_as_local(&s, "npy", "x.npy");
  same_as_local(&s, "npy", "pair_z.npz");
  same_as_local(&s, "csv", "table.csv");
  same_as_local(&s, "wds", "wds-000001.tar");
  same_as_local(&s, "tfrecord", "ex.tfrecord.gz");
  /* A bare URL is a URL, its tag from the extension. */
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x.npy", s.port);
  sl_reader *r;
  ASSERT_OK(sl_open(url, NULL, &r));
  sl_reader_destroy(r);
  /* Shards by brace pattern over 3 threads: every sample once. */
  snprintf(url, sizeof url, "wds:http://127.0.0.1:%d/wds-{000000..000002}.tar",
           s.port);
  const char *name = url;
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = 3;
  o.world = 1;
  ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
  uint64_t n;
  test_digest_all(r, &n);
  ASSERT_EQ(n, 12);
  nginx_stop(&s);
}

TEST(http_404_names_the_url_and_status) {
  server s;
  nginx_start(&s);
  char url[256], want[300];
  snprintf(url, sizeof url, "npy:http://127.0.0.1:%d/missing.npy", s.port);
  snprintf(want, sizeof want, "GET http://127.0.0.1:%d/missing.npy: HTTP 404",
           s.port);
  sl_reader *r = NULL;
  uint64_t req0, ret0, req1, ret1;
  sl__http_counts(&req0, &ret0);
  ASSERT_RC(sl_open(url, NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), want);
  sl__http_counts(&req1, &ret1);
  ASSERT_EQ(ret1 - ret0, 0); /* a 4xx is not retried */
  nginx_stop(&s);
}

TEST(http_500_then_200_is_retried) {
  server s;
  nginx_start(&s);
  setenv("SLUICE_HTTP_BACKOFF_MS", "300", 1);
  char url[256];
  snprintf(url, sizeof url, "npy:http://127.0.0.1:%d/flaky/x.npy", s.port);
  sl_reader *r;
  ASSERT_OK(sl_open(url, NULL, &r)); /* uses this second's one request */
  sl_reader_destroy(r);
  uint64_t req0, ret0, req1, ret1;
  sl__http_counts(&req0, &ret0);
  ASSERT_OK(sl_open(url, NULL, &r)); /* 500, then 200 after the backoff */
  sl__http_counts(&req1, &ret1);
  ASSERT_GE(ret1 - ret0, 1);
  uint64_t n;
  test_digest_all(r, &n);
  ASSERT_EQ(n, 5);
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  nginx_stop(&s);
}

/* --- a server that misbehaves on purpose --------------------------------- */

typedef struct bad_server {
  int fd, port;
  int mode; /* 0: cut the first body in half, serve ranges; 1: always 500;
               2: ignore ranges (always 200, the whole body); 3: serve
               ranges, with an ETag that changes at every request; 4: as 2,
               the first body cut in half */
  const unsigned char *body;
  size_t n;
  atomic_int served; /* requests answered or being answered (the server
                        thread's count, read by the test) */
  pthread_t tid;
} bad_server;

static void *bad_main(void *arg) {
  bad_server *b = arg;
  for (;;) {
    int c = accept(b->fd, NULL, NULL);
    if (c < 0) return NULL;
    char req[4096];
    ssize_t got = recv(c, req, sizeof req - 1, 0);
    req[got > 0 ? got : 0] = 0;
    char head[256];
    if (strstr(req, "GET /quit")) {
      close(c);
      return NULL;
    }
    /* Counted before the response goes out: a client that has read it may
     * check the count at once. */
    int k = atomic_fetch_add(&b->served, 1);
    if (b->mode >= 2) {
      const char *range = strstr(req, "Range: bytes=");
      size_t from = 0, to = b->n - 1;
      if (b->mode == 3 && range) {
        char *dash;
        from = (size_t)strtoull(range + 13, &dash, 10);
        if (*dash == '-' && dash[1] >= '0' && dash[1] <= '9')
          to = (size_t)strtoull(dash + 1, NULL, 10);
        if (to > b->n - 1) to = b->n - 1;
      }
      int hl =
          b->mode == 3 && range
              ? snprintf(head, sizeof head,
                         "HTTP/1.1 206 Partial Content\r\nETag: "
                         "\"v%d\"\r\nContent-Range: bytes %zu-%zu/%zu\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                         k, from, to, b->n, to - from + 1)
              : snprintf(head, sizeof head,
                         "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n",
                         b->n);
      send(c, head, (size_t)hl, MSG_NOSIGNAL);
      /* Mode 4 drops the first connection half way through the body. */
      size_t end = b->mode == 4 && k == 0 ? b->n / 2 : to + 1;
      send(c, b->body + from, end - from, MSG_NOSIGNAL);
    } else if (b->mode == 1) {
      const char *r = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: "
                      "0\r\nConnection: close\r\n\r\n";
      send(c, r, strlen(r), MSG_NOSIGNAL);
    } else {
      const char *range = strstr(req, "Range: bytes=");
      size_t from = range ? (size_t)atoll(range + 13) : 0;
      int hl = range ? snprintf(head, sizeof head,
                                "HTTP/1.1 206 Partial Content\r\nContent-"
                                "Range: bytes %zu-%zu/%zu\r\nContent-Length: "
                                "%zu\r\nConnection: close\r\n\r\n",
                                from, b->n - 1, b->n, b->n - from)
                     : snprintf(head, sizeof head,
                                "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
                                "Connection: close\r\n\r\n",
                                b->n);
      send(c, head, (size_t)hl, MSG_NOSIGNAL);
      /* The first response stops half way: the connection drops. */
      size_t end = k == 0 ? b->n / 2 : b->n;
      send(c, b->body + from, end - from, MSG_NOSIGNAL);
    }
    close(c);
  }
}

static void bad_start(bad_server *b) {
  b->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(b->fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t l = sizeof a;
  ASSERT_EQ(getsockname(b->fd, (struct sockaddr *)&a, &l), 0);
  b->port = ntohs(a.sin_port);
  ASSERT_EQ(listen(b->fd, 8), 0);
  ASSERT_EQ(pthread_create(&b->tid, NULL, bad_main, b), 0);
}

static void bad_stop(bad_server *b) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)b->port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
    send(fd, "GET /quit HTTP/1.1\r\n\r\n", 22, MSG_NOSIGNAL);
  close(fd);
  pthread_join(b->tid, NULL);
  close(b->fd);
}

TEST(http_connection_closed_mid_body_resumes_with_a_range) {
  static unsigned char body[20480];
  FILE *f = fopen(DIR "/wds-000002.tar", "rb");
  size_t n = fread(body, 1, sizeof body, f);
  fclose(f);
  bad_server b = {.mode = 0, .body = body, .n = n};
  bad_start(&b);
  setenv("SLUICE_HTTP_BACKOFF_MS", "1", 1);
  char url[256];
  snprintf(url, sizeof url, "wds:http://127.0.0.1:%d/wds-000002.tar", b.port);
  sl_reader *r, *local;
  ASSERT_OK(sl_open(url, NULL, &r));
  ASSERT_EQ(atomic_load(&b.served), 2);
  ASSERT_OK(sl_open("wds:" DIR "/wds-000002.tar", NULL, &local));
  uint64_t na, nb;
  ASSERT_TRUE(test_digest_all(r, &na) == test_digest_all(local, &nb));
  ASSERT_EQ(na, 4);
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  bad_stop(&b);
}

TEST(http_failing_server_fails_naming_url_after_retries) {
  bad_server b = {.mode = 1};
  bad_start(&b);
  setenv("SLUICE_HTTP_BACKOFF_MS", "1", 1);
  setenv("SLUICE_HTTP_RETRIES", "3", 1);
  char url[256], want[300];
  snprintf(url, sizeof url, "csv:http://127.0.0.1:%d/t.csv", b.port);
  snprintf(want, sizeof want,
           "GET http://127.0.0.1:%d/t.csv: HTTP 500 (retries spent)", b.port);
  sl_reader *r = NULL;
  ASSERT_RC(sl_open(url, NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), want);
  ASSERT_EQ(atomic_load(&b.served), 4); /* the request and 3 retries */
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  unsetenv("SLUICE_HTTP_RETRIES");
  bad_stop(&b);
}

/* --- ranged reads: SLR over URLs (src/io/source_http.c) ------------------ */

/* s->dir/www/<name>, served at /w/<name> and /flakyw/<name>. */
static const char *www(const server *s, const char *name) {
  static char p[4][512];
  static int k;
  char *r = p[k++ % 4];
  snprintf(r, sizeof p[0], "%s/www/%s", s->dir, name);
  return r;
}

static uint64_t file_size(const char *path) {
  struct stat st;
  ASSERT_EQ(stat(path, &st), 0);
  return (uint64_t)st.st_size;
}

/* Reads every sample of r (then destroys it), checking that field 0 runs
 * first, first + 1, ..., and returns how many there were. */
static int64_t expect_ids_from(sl_reader *r, int64_t first) {
  sl_sample *s;
  int rc;
  int64_t n = 0;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    ASSERT_EQ(test_sample_i64(s, 0), first + n);
    n++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  sl_reader_destroy(r);
  return n;
}

TEST(http_slr_reads_as_from_disk) {
  server s;
  nginx_start(&s);
  test_write_ids_slr(www(&s, "ids.slr"), 0, 3000, 64);
  char url[512], bare[512], local[600];
  snprintf(url, sizeof url, "slr:http://127.0.0.1:%d/w/ids.slr", s.port);
  snprintf(bare, sizeof bare, "http://127.0.0.1:%d/w/ids.slr", s.port);
  snprintf(local, sizeof local, "slr:%s", www(&s, "ids.slr"));
  sl_reader *a, *b, *c;
  ASSERT_OK(sl_open(url, NULL, &a));
  ASSERT_OK(sl_open(local, NULL, &b));
  ASSERT_OK(sl_open(bare, NULL, &c)); /* the tag from the extension */
  uint64_t len;
  ASSERT_OK(sl_reader_length(a, &len));
  ASSERT_EQ(len, 3000);
  uint64_t na, nb, nc;
  uint64_t ha = test_digest_all(a, &na), hb = test_digest_all(b, &nb),
           hc = test_digest_all(c, &nc);
  ASSERT_EQ(na, 3000);
  ASSERT_EQ(nb, 3000);
  ASSERT_EQ(nc, 3000);
  ASSERT_TRUE(ha == hb && hb == hc);
  ASSERT_OK(sl_open(url, NULL, &a));
  ASSERT_EQ(expect_ids_from(a, 0), 3000);
  nginx_stop(&s);
}

TEST(http_slr_reads_only_the_chunks_it_needs) {
  server s;
  nginx_start(&s);
  /* 600 chunks of 500 records: about 1 MB, whose index is a few KB. */
  test_write_ids_slr(www(&s, "big.slr"), 0, 300000, 500);
  uint64_t size = file_size(www(&s, "big.slr"));
  setenv("SLUICE_HTTP_READAHEAD", "16K", 1);
  char url[512];
  snprintf(url, sizeof url, "slr:http://127.0.0.1:%d/w/big.slr", s.port);
  uint64_t req0, ret0, req1, ret1, bytes0 = sl__http_bytes();
  sl__http_counts(&req0, &ret0);
  sl_reader *r;
  ASSERT_OK(sl_open(url, NULL, &r));
  /* The first 3 chunks' records. */
  for (int64_t i = 0; i < 1500; i++) {
    sl_sample *x;
    ASSERT_OK(sl_reader_next(r, &x));
    ASSERT_EQ(test_sample_i64(x, 0), i);
    sl_sample_release(x);
  }
  sl_reader_destroy(r);
  sl__http_counts(&req1, &ret1);
  uint64_t fetched = sl__http_bytes() - bytes0;
  printf("  %llu-byte file: %llu requests, %llu bytes fetched\n",
         (unsigned long long)size, (unsigned long long)(req1 - req0),
         (unsigned long long)fetched);
  ASSERT_TRUE(size > 900000);
  ASSERT_TRUE(fetched < size / 10);
  ASSERT_TRUE(req1 - req0 <= 8);
  ASSERT_EQ(ret1 - ret0, 0);
  unsetenv("SLUICE_HTTP_READAHEAD");
  nginx_stop(&s);
}

TEST(http_slr_404_names_the_url) {
  server s;
  nginx_start(&s);
  char url[256], want[300];
  snprintf(url, sizeof url, "slr:http://127.0.0.1:%d/w/missing.slr", s.port);
  snprintf(want, sizeof want, "GET http://127.0.0.1:%d/w/missing.slr: HTTP 404",
           s.port);
  sl_reader *r = NULL;
  uint64_t req0, ret0, req1, ret1;
  sl__http_counts(&req0, &ret0);
  ASSERT_RC(sl_open(url, NULL, &r), SL_EIO);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), want);
  sl__http_counts(&req1, &ret1);
  ASSERT_EQ(ret1 - ret0, 0);
  ASSERT_EQ(req1 - req0, 1);
  nginx_stop(&s);
}

TEST(http_slr_500_then_200_delivers_every_sample_once) {
  server s;
  nginx_start(&s);
  /* Several read-ahead blocks, each a request that nginx answers 500 when
   * it comes within a second of the one before. */
  test_write_ids_slr(www(&s, "ids.slr"), 0, 4000, 500);
  uint64_t size = file_size(www(&s, "ids.slr"));
  setenv("SLUICE_HTTP_BACKOFF_MS", "250", 1);
  char ra[32];
  snprintf(ra, sizeof ra, "%llu", (unsigned long long)(size / 3 + 1));
  setenv("SLUICE_HTTP_READAHEAD", ra, 1);
  char url[256];
  snprintf(url, sizeof url, "slr:http://127.0.0.1:%d/flakyw/ids.slr", s.port);
  uint64_t req0, ret0, req1, ret1;
  sl__http_counts(&req0, &ret0);
  sl_reader *r;
  ASSERT_OK(sl_open(url, NULL, &r));
  ASSERT_EQ(expect_ids_from(r, 0), 4000);
  sl__http_counts(&req1, &ret1);
  ASSERT_GE(ret1 - ret0, 1);
  ASSERT_GE(req1 - req0 - (ret1 - ret0), 3); /* distinct blocks */
  unsetenv("SLUICE_HTTP_READAHEAD");
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  nginx_stop(&s);
}

static sl_reader *build_url_slr(void *ud) {
  sl_reader *r;
  ASSERT_OK(sl_open(ud, NULL, &r));
  return r;
}

TEST(http_slr_save_and_restore) {
  server s;
  nginx_start(&s);
  test_write_ids_slr(www(&s, "ids.slr"), 100, 700, 32);
  setenv("SLUICE_HTTP_READAHEAD", "2048", 1);
  char url[256];
  snprintf(url, sizeof url, "slr:http://127.0.0.1:%d/w/ids.slr", s.port);
  static const uint64_t cuts[] = {0, 1, 31, 32, 333, 699, 700, 701, 1399};
  test_resume_check(build_url_slr, url, 2, cuts, sizeof cuts / sizeof *cuts, 0);
  /* A state of the object is refused once the object is rewritten. */
  sl_reader *r;
  ASSERT_OK(sl_open(url, NULL, &r));
  sl_sample *x;
  ASSERT_OK(sl_reader_next(r, &x));
  sl_sample_release(x);
  void *st;
  size_t stn;
  ASSERT_OK(sl_reader_save(r, &st, &stn));
  sl_reader_destroy(r);
  sleep(1); /* a new Last-Modified second, so a new ETag */
  test_write_ids_slr(www(&s, "ids.slr"), 100, 701, 32);
  ASSERT_OK(sl_open(url, NULL, &r));
  ASSERT_TRUE(sl_reader_restore(r, st, stn) < 0);
  ASSERT_CONTAINS(sl_last_error(), "ids.slr");
  sl_free(st);
  sl_reader_destroy(r);
  unsetenv("SLUICE_HTTP_READAHEAD");
  nginx_stop(&s);
}

/* sl_open_files over URLs: the same samples in the same order for 1, 2 and
 * 4 threads, every record once. */
TEST(http_open_files_over_urls_for_any_thread_count) {
  server s;
  nginx_start(&s);
  test_write_ids_slr(www(&s, "a.slr"), 0, 900, 50);
  test_write_ids_slr(www(&s, "b.slr"), 900, 700, 64);
  setenv("SLUICE_HTTP_READAHEAD", "4K", 1);
  char a[256], b[256];
  snprintf(a, sizeof a, "http://127.0.0.1:%d/w/a.slr", s.port);
  snprintf(b, sizeof b, "slr:http://127.0.0.1:%d/w/b.slr", s.port);
  const char *names[] = {a, b};
  for (uint32_t t = 1; t <= 4; t *= 2) {
    sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
    o.threads = t;
    o.rank = 0;
    o.world = 1;
    sl_reader *r;
    ASSERT_OK(sl_open_files(names, 2, &o, &r));
    uint64_t len;
    ASSERT_OK(sl_reader_length(r, &len));
    ASSERT_EQ(len, 1600);
    ASSERT_EQ(expect_ids_from(r, 0), 1600);
  }
  unsetenv("SLUICE_HTTP_READAHEAD");
  nginx_stop(&s);
}

/* The byte source itself: the size, the read-ahead block serving the reads
 * after it, reads past the end, an empty object (nginx answers its range
 * with an empty 200), the identity. */
TEST(http_url_source_reads_ahead_by_bytes) {
  server s;
  nginx_start(&s);
  static unsigned char data[10000];
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (unsigned char)(i * 7 + i / 256);
  test_write_file(www(&s, "blob"), data, sizeof data);
  test_write_file(www(&s, "empty"), "", 0);
  setenv("SLUICE_HTTP_READAHEAD", "1000", 1);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/w/blob", s.port);
  uint64_t req0, ret0, req1, ret1;
  sl__http_counts(&req0, &ret0);
  sl__source *src;
  ASSERT_OK(sl__source_open_url("test", url, &src));
  ASSERT_EQ(src->size, sizeof data);
  ASSERT_EQ(src->id.size, sizeof data);
  ASSERT_TRUE(src->id.dev != 0); /* nginx sends an ETag */
  ASSERT_STREQ(src->name, url);
  unsigned char got[3000];
  ASSERT_OK(src->read_at(src, 0, got, 10));
  ASSERT_OK(src->read_at(src, 990, got + 10, 10));
  ASSERT_TRUE(memcmp(got, data, 10) == 0);
  ASSERT_TRUE(memcmp(got + 10, data + 990, 10) == 0);
  sl__http_counts(&req1, &ret1);
  ASSERT_EQ(req1 - req0, 1); /* the open's block served both */
  ASSERT_OK(src->read_at(src, 5000, got, 10));
  ASSERT_OK(src->read_at(src, 5500, got + 10, 10));
  sl__http_counts(&req1, &ret1);
  ASSERT_EQ(req1 - req0, 2);
  ASSERT_TRUE(memcmp(got, data + 5000, 10) == 0);
  ASSERT_TRUE(memcmp(got + 10, data + 5500, 10) == 0);
  ASSERT_OK(src->read_at(src, 4000, got, 3000)); /* larger than a block */
  ASSERT_TRUE(memcmp(got, data + 4000, 3000) == 0);
  ASSERT_OK(src->read_at(src, 9990, got, 10)); /* the last bytes */
  ASSERT_TRUE(memcmp(got, data + 9990, 10) == 0);
  ASSERT_RC(src->read_at(src, 9995, got, 10), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "past the end");
  ASSERT_CONTAINS(sl_last_error(), url);
  sl__file_id id = src->id;
  sl__source_close(src);
  /* The same object again: the same identity; rewritten: another. */
  ASSERT_OK(sl__source_open_url("test", url, &src));
  ASSERT_TRUE(sl__file_id_equal(&id, &src->id));
  sl__source_close(src);
  sleep(1);
  data[0] ^= 1;
  test_write_file(www(&s, "blob"), data, sizeof data);
  ASSERT_OK(sl__source_open_url("test", url, &src));
  ASSERT_TRUE(!sl__file_id_equal(&id, &src->id));
  sl__source_close(src);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/w/empty", s.port);
  ASSERT_OK(sl__source_open_url("test", url, &src));
  ASSERT_EQ(src->size, 0);
  ASSERT_OK(src->read_at(src, 0, got, 0));
  ASSERT_RC(src->read_at(src, 0, got, 1), SL_EIO);
  sl__source_close(src);
  unsetenv("SLUICE_HTTP_READAHEAD");
  nginx_stop(&s);
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ASSERT_NOT_NULL(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc(*n);
  ASSERT_EQ(fread(p, 1, *n, f), *n);
  fclose(f);
  return p;
}

TEST(http_server_without_ranges_is_read_whole_once) {
  const char *path = test_tmppath("http", "ids.slr");
  test_write_ids_slr(path, 0, 2000, 100);
  bad_server b = {.mode = 2};
  b.body = slurp(path, &b.n);
  bad_start(&b);
  setenv("SLUICE_HTTP_READAHEAD", "1K", 1);
  char url[256];
  snprintf(url, sizeof url, "slr:http://127.0.0.1:%d/ids.slr", b.port);
  sl_reader *r;
  ASSERT_OK(sl_open(url, NULL, &r));
  ASSERT_EQ(expect_ids_from(r, 0), 2000);
  ASSERT_EQ(atomic_load(&b.served), 1); /* the 200 was kept */
  unsetenv("SLUICE_HTTP_READAHEAD");
  bad_stop(&b);
  free((void *)b.body);
}

TEST(http_object_changed_while_read_fails_naming_it) {
  const char *path = test_tmppath("http", "ids2.slr");
  test_write_ids_slr(path, 0, 2000, 100);
  bad_server b = {.mode = 3};
  b.body = slurp(path, &b.n);
  bad_start(&b);
  setenv("SLUICE_HTTP_READAHEAD", "1K", 1);
  char url[256];
  snprintf(url, sizeof url, "slr:http://127.0.0.1:%d/ids2.slr", b.port);
  sl_reader *r = NULL;
  int rc = sl_open(url, NULL, &r);
  if (rc == SL_OK) {
    sl_sample *x;
    while ((rc = sl_reader_next(r, &x)) == SL_OK)
      sl_sample_release(x);
    sl_reader_destroy(r);
  }
  ASSERT_RC(rc, SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "changed while read");
  ASSERT_CONTAINS(sl_last_error(), "/ids2.slr");
  unsetenv("SLUICE_HTTP_READAHEAD");
  bad_stop(&b);
  free((void *)b.body);
}

/* --- npy rows by ranges --------------------------------------------------- */

/* A version-1 .npy of `rows` x 16 little-endian int32 at path, element
 * [i][j] = i * 16 + j. */
static void write_npy_i4(const char *path, int rows) {
  char dict[128];
  int dl = snprintf(dict, sizeof dict,
                    "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, "
                    "16), }",
                    rows);
  size_t hlen = 64 * ((10 + (size_t)dl + 1 + 63) / 64) - 10;
  size_t n = 10 + hlen + (size_t)rows * 64;
  unsigned char *p = malloc(n);
  memcpy(p, "\x93NUMPY\x01\x00", 8);
  p[8] = (unsigned char)(hlen & 255);
  p[9] = (unsigned char)(hlen >> 8);
  memset(p + 10, ' ', hlen);
  memcpy(p + 10, dict, (size_t)dl);
  p[10 + hlen - 1] = '\n';
  for (int i = 0; i < rows * 16; i++) {
    uint32_t v = (uint32_t)i;
    memcpy(p + 10 + hlen + 4 * (size_t)i, &v, 4);
  }
  test_write_file(path, p, n);
  free(p);
}

TEST(http_npy_reads_rows_by_ranges) {
  server s;
  nginx_start(&s);
  write_npy_i4(www(&s, "rows.npy"), 20000); /* 1.28 MB */
  uint64_t size = file_size(www(&s, "rows.npy"));
  setenv("SLUICE_HTTP_READAHEAD", "64K", 1);
  char url[256], local[600];
  snprintf(url, sizeof url, "npy:http://127.0.0.1:%d/w/rows.npy", s.port);
  snprintf(local, sizeof local, "npy:%s", www(&s, "rows.npy"));
  /* 100 rows cost the header's block and no more. */
  uint64_t req0, ret0, req1, ret1, bytes0 = sl__http_bytes();
  sl__http_counts(&req0, &ret0);
  sl_reader *r;
  ASSERT_OK(sl_open(url, NULL, &r));
  uint64_t len;
  ASSERT_OK(sl_reader_length(r, &len));
  ASSERT_EQ(len, 20000);
  for (int i = 0; i < 100; i++) {
    sl_sample *x;
    ASSERT_OK(sl_reader_next(r, &x));
    const sl_tensor *t = sl_sample_at_const(x, 0);
    ASSERT_EQ(t->rank, 1);
    ASSERT_EQ(t->shape[0], 16);
    const int32_t *v = sl_tensor_data(t);
    ASSERT_EQ(v[0], i * 16);
    ASSERT_EQ(v[15], i * 16 + 15);
    sl_sample_release(x);
  }
  sl_reader_destroy(r);
  sl__http_counts(&req1, &ret1);
  ASSERT_EQ(req1 - req0, 1);
  ASSERT_TRUE(sl__http_bytes() - bytes0 < size / 10);
  /* A whole pass equals the file's, at about one request per block. */
  sl__http_counts(&req0, &ret0);
  sl_reader *a, *b;
  ASSERT_OK(sl_open(url, NULL, &a));
  ASSERT_OK(sl_open(local, NULL, &b));
  uint64_t na, nb;
  ASSERT_TRUE(test_digest_all(a, &na) == test_digest_all(b, &nb));
  ASSERT_EQ(na, 20000);
  ASSERT_EQ(nb, 20000);
  sl__http_counts(&req1, &ret1);
  ASSERT_TRUE(req1 - req0 <= size / 65536 + 2);
  /* Save and restore at several cuts, over two passes. */
  static const uint64_t cuts[] = {0, 1, 1023, 1024, 19999, 20000, 20001};
  test_resume_check(build_url_slr, url, 2, cuts, sizeof cuts / sizeof *cuts, 0);
  unsetenv("SLUICE_HTTP_READAHEAD");
  nginx_stop(&s);
}

TEST(http_npy_url_errors_name_the_url) {
  server s;
  nginx_start(&s);
  /* A header that promises more rows than the object holds. */
  write_npy_i4(www(&s, "short.npy"), 100);
  FILE *f = fopen(www(&s, "short.npy"), "r+b");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(ftruncate(fileno(f), 10 + 118 + 64 * 50), 0);
  fclose(f);
  char url[256];
  snprintf(url, sizeof url, "npy:http://127.0.0.1:%d/w/short.npy", s.port);
  sl_reader *r = NULL;
  ASSERT_RC(sl_open(url, NULL, &r), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "/w/short.npy");
  ASSERT_CONTAINS(sl_last_error(), "6400 bytes of elements expected");
  snprintf(url, sizeof url, "npy:http://127.0.0.1:%d/w/none.npy", s.port);
  ASSERT_RC(sl_open(url, NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "/w/none.npy: HTTP 404");
  nginx_stop(&s);
}

/* A body cut short by a server that then ignores the resuming range: the
 * second answer is the whole object again, which replaces the first part. */
TEST(http_resume_answered_with_200_restarts_from_byte_0) {
  size_t n;
  unsigned char *body = slurp(DIR "/wds-000002.tar", &n);
  bad_server b = {.mode = 4, .body = body, .n = n};
  bad_start(&b);
  setenv("SLUICE_HTTP_BACKOFF_MS", "1", 1);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/wds-000002.tar", b.port);
  sl_buffer *got;
  ASSERT_OK(sl__http_get("test", url, &got));
  ASSERT_EQ(atomic_load(&b.served), 2);
  ASSERT_EQ(sl_buffer_size(got), n);
  ASSERT_TRUE(memcmp(sl_buffer_data(got), body, n) == 0);
  sl_buffer_release(got);
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  bad_stop(&b);
  free(body);
}

/* Issue 24 item 8: a csv: URL rewritten at the same size since the save (a
 * new ETag and Last-Modified) is refused naming the URL, not resumed
 * mid-row; the untouched object restores.  Before, a URL's state held its
 * size alone. */
TEST(http_csv_restore_into_a_rewritten_object_is_refused) {
  server s;
  nginx_start(&s);
  const char *p = www(&s, "rows.csv");
  char body[512];
  size_t n = (size_t)snprintf(body, sizeof body, "i,s\n");
  for (int i = 0; i < 10; i++)
    n += (size_t)snprintf(body + n, sizeof body - n, "%d,aaaa\n", i);
  test_write_file(p, body, n);
  char url[256];
  snprintf(url, sizeof url, "csv:http://127.0.0.1:%d/w/rows.csv", s.port);
  sl_reader *r;
  ASSERT_OK(sl_open(url, NULL, &r));
  for (int i = 0; i < 3; i++) {
    sl_sample *x;
    ASSERT_OK(sl_reader_next(r, &x));
    sl_sample_release(x);
  }
  void *st;
  size_t stn;
  ASSERT_OK(sl_reader_save(r, &st, &stn));
  sl_reader_destroy(r);
  ASSERT_OK(sl_open(url, NULL, &r));
  ASSERT_OK(sl_reader_restore(r, st, stn));
  sl_reader_destroy(r);
  for (size_t i = 0; i < n; i++) /* the same size, other bytes */
    if (body[i] == 'a') body[i] = 'b';
  test_write_file(p, body, n);
  test_touch_later(p, 2); /* another Last-Modified second, another ETag */
  ASSERT_OK(sl_open(url, NULL, &r));
  ASSERT_RC(sl_reader_restore(r, st, stn), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "rows.csv");
  ASSERT_CONTAINS(sl_last_error(), "changed since the state was saved");
  sl_free(st);
  sl_reader_destroy(r);
  nginx_stop(&s);
}
