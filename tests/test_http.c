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
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DIR SLUICE_SOURCE_DIR "/tests/data/formats"
#define NGINX "/usr/sbin/nginx"

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t l = sizeof a;
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&a, &l), 0);
  close(fd);
  return ntohs(a.sin_port);
}

static bool can_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

typedef struct server {
  pid_t pid;
  int port;
  char dir[256];
} server;

/* nginx serving DIR at / and, rate-limited to 1 request per second with
 * status 500 beyond it, at /flaky/. */
static void nginx_start(server *s) {
  if (access(NGINX, X_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "%s is missing: the HTTP tests need nginx (apt-get install "
              "nginx, or make deps: it is in the Makefile's PACKAGES)",
              NGINX);
  snprintf(s->dir, sizeof s->dir, "/tmp/sluice-nginx-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(s->dir));
  s->port = free_port();
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
          "  }\n"
          "}\n",
          geteuid() == 0 ? "user root;" : "", s->dir, s->dir, s->dir, s->dir,
          s->dir, s->dir, s->dir, s->dir, s->port, DIR, DIR);
  fclose(f);
  s->pid = fork();
  ASSERT_TRUE(s->pid >= 0);
  if (s->pid == 0) {
    execl(NGINX, "nginx", "-p", s->dir, "-c", conf, "-g", "daemon off;",
          (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 500 && !can_connect(s->port); i++)
    usleep(10000);
  if (!can_connect(s->port)) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    test_fail(__FILE__, __LINE__, "nginx did not start on port %d (see %s)",
              s->port, s->dir);
  }
}

static void nginx_stop(server *s) {
  kill(s->pid, SIGQUIT);
  int st;
  ASSERT_EQ(waitpid(s->pid, &st, 0), s->pid);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
  ASSERT_EQ(system(cmd), 0);
}

static uint64_t digest_all(sl_reader *r, uint64_t *n) {
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

static void same_as_local(const server *s, const char *tag, const char *file) {
  char url[512], local[512];
  snprintf(url, sizeof url, "%s:http://127.0.0.1:%d/%s", tag, s->port, file);
  snprintf(local, sizeof local, "%s:%s/%s", tag, DIR, file);
  sl_reader *a, *b;
  ASSERT_OK(sl_open(url, NULL, &a));
  ASSERT_OK(sl_open(local, NULL, &b));
  uint64_t na, nb;
  uint64_t ha = digest_all(a, &na), hb = digest_all(b, &nb);
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
  digest_all(r, &n);
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
  digest_all(r, &n);
  ASSERT_EQ(n, 5);
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  nginx_stop(&s);
}

/* --- a server that misbehaves on purpose --------------------------------- */

typedef struct bad_server {
  int fd, port;
  int mode; /* 0: cut the first body in half, serve ranges; 1: always 500 */
  const unsigned char *body;
  size_t n;
  atomic_int served; /* the server thread's count, read by the test */
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
    if (b->mode == 1) {
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
      size_t end = atomic_load(&b->served) == 0 ? b->n / 2 : b->n;
      send(c, b->body + from, end - from, MSG_NOSIGNAL);
    }
    atomic_fetch_add(&b->served, 1);
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
  ASSERT_TRUE(digest_all(r, &na) == digest_all(local, &nb));
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
