/*
 * test_http.c - remote files over HTTP (src/transport/http.c): a real nginx on
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

#include "transport/http.h"

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
#include <zlib.h>

#define DIR SLUICE_SOURCE_DIR "/tests/data/formats"

static void same_as_local(const test_nginx *s, const char *tag,
                          const char *file) {
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
  test_nginx s;
  test_nginx_start(&s, DIR);
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
  test_nginx_stop(&s);
}

TEST(http_404_names_the_url_and_status) {
  test_nginx s;
  test_nginx_start(&s, DIR);
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
  test_nginx_stop(&s);
}

TEST(http_500_then_200_is_retried) {
  test_nginx s;
  test_nginx_start(&s, DIR);
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
  test_nginx_stop(&s);
}

/* --- a server that misbehaves on purpose --------------------------------- */

typedef struct bad_server {
  int fd, port;
  int mode; /* 0: cut the first body in half, serve ranges (with an ETag);
               1: always 500; 2: ignore ranges (always 200, the whole body);
               3: serve ranges, with an ETag that changes at every request;
               4: as 2, the first body cut in half; 5: redirect (status,
               location); 6: two versions of one object (versioned); 7: a
               server that greets like FTP ("500") and closes */
  const unsigned char *body;
  size_t n;
  /* mode 5 */
  int status;
  char location[256];
  /* mode 6: `body` until request `switch_at`, then `body2` (n bytes too);
   * with an ETag and/or a Last-Modified per version when etag/lastmod;
   * honouring If-Range (a range asked of another version is answered 200
   * with the whole object) when if_range; the first body cut in half when
   * cut_first. */
  const unsigned char *body2;
  int switch_at;
  bool etag, lastmod, if_range, cut_first;
  atomic_int served; /* requests answered or being answered (the server
                        thread's count, read by the test) */
  pthread_mutex_t mu;  /* guards last_req */
  char last_req[4096]; /* the last request's text, as received */
  pthread_t tid;
} bad_server;

/* The text of the last request b received (a copy, for the test). */
static void last_request(bad_server *b, char *out, size_t cap) {
  pthread_mutex_lock(&b->mu);
  snprintf(out, cap, "%s", b->last_req);
  pthread_mutex_unlock(&b->mu);
}

/* The value of header `name` (with ": ") in request `req`, copied to out
 * (up to the line's end); false when absent. */
static bool req_header(const char *req, const char *name, char *out,
                       size_t cap) {
  const char *h = strstr(req, name);
  if (!h) return false;
  h += strlen(name);
  size_t k = strcspn(h, "\r\n");
  snprintf(out, cap, "%.*s", (int)k, h);
  return true;
}

/* Mode 6: request number k of one object in two versions. */
static void serve_versioned(bad_server *b, int c, const char *req, int k) {
  int v =
      k >= b->switch_at && b->body2 != b->body; /* same body: same version */
  const unsigned char *data = v ? b->body2 : b->body;
  const char *etag = v ? "\"vB\"" : "\"vA\"";
  const char *date =
      v ? "Sat, 28 Nov 2026 11:00:00 GMT" : "Sat, 28 Nov 2026 10:00:00 GMT";
  char range[64], ifr[128];
  bool ranged = req_header(req, "Range: bytes=", range, sizeof range);
  if (ranged && b->if_range && req_header(req, "If-Range: ", ifr, sizeof ifr))
    ranged = strcmp(ifr, b->etag ? etag : date) == 0;
  size_t from = 0, to = b->n - 1;
  if (ranged) {
    char *dash;
    from = (size_t)strtoull(range, &dash, 10);
    if (*dash == '-' && dash[1] >= '0' && dash[1] <= '9')
      to = (size_t)strtoull(dash + 1, NULL, 10);
    if (to > b->n - 1) to = b->n - 1;
  }
  char head[512];
  int hl = snprintf(head, sizeof head, "HTTP/1.1 %s\r\n",
                    ranged ? "206 Partial Content" : "200 OK");
  if (b->etag)
    hl += snprintf(head + hl, sizeof head - hl, "ETag: %s\r\n", etag);
  if (b->lastmod)
    hl += snprintf(head + hl, sizeof head - hl, "Last-Modified: %s\r\n", date);
  if (ranged)
    hl += snprintf(head + hl, sizeof head - hl,
                   "Content-Range: bytes %zu-%zu/%zu\r\n", from, to, b->n);
  hl += snprintf(head + hl, sizeof head - hl,
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                 to - from + 1);
  send(c, head, (size_t)hl, MSG_NOSIGNAL);
  size_t end = b->cut_first && k == 0 ? from + (to - from + 1) / 2 : to + 1;
  send(c, data + from, end - from, MSG_NOSIGNAL);
}

static void *bad_main(void *arg) {
  bad_server *b = arg;
  for (;;) {
    int c = accept(b->fd, NULL, NULL);
    if (c < 0) return NULL;
    if (b->mode == 7) send(c, "500 not FTP\r\n", 13, MSG_NOSIGNAL);
    char req[4096];
    ssize_t got = recv(c, req, sizeof req - 1, 0);
    req[got > 0 ? got : 0] = 0;
    char head[512];
    if (strstr(req, "GET /quit")) {
      close(c);
      return NULL;
    }
    pthread_mutex_lock(&b->mu);
    memcpy(b->last_req, req, sizeof b->last_req);
    pthread_mutex_unlock(&b->mu);
    /* Counted before the response goes out: a client that has read it may
     * check the count at once. */
    int k = atomic_fetch_add(&b->served, 1);
    if (b->mode == 7) {
    } else if (b->mode == 5) {
      int hl = snprintf(head, sizeof head,
                        "HTTP/1.1 %d Elsewhere\r\nLocation: %s\r\n"
                        "Content-Length: 5\r\nConnection: close\r\n\r\n"
                        "moved",
                        b->status, b->location);
      send(c, head, (size_t)hl, MSG_NOSIGNAL);
    } else if (b->mode == 6) {
      serve_versioned(b, c, req, k);
    } else if (b->mode >= 2) {
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
                                "HTTP/1.1 206 Partial Content\r\nETag: "
                                "\"e0\"\r\nContent-Range: bytes %zu-%zu/%zu"
                                "\r\nContent-Length: %zu\r\nConnection: "
                                "close\r\n\r\n",
                                from, b->n - 1, b->n, b->n - from)
                     : snprintf(head, sizeof head,
                                "HTTP/1.1 200 OK\r\nETag: \"e0\"\r\n"
                                "Content-Length: %zu\r\nConnection: close"
                                "\r\n\r\n",
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
  ASSERT_EQ(pthread_mutex_init(&b->mu, NULL), 0);
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
  pthread_mutex_destroy(&b->mu);
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
  char req[4096];
  last_request(&b, req, sizeof req); /* the rest, of the same version */
  ASSERT_CONTAINS(req, "Range: bytes=");
  ASSERT_CONTAINS(req, "If-Range: \"e0\"");
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

/* --- ranged reads: SLR over URLs (src/transport/source_http.c) ------------------ */

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
  test_nginx s;
  test_nginx_start(&s, DIR);
  test_write_ids_slr(test_nginx_www(&s, "ids.slr"), 0, 3000, 64);
  char url[512], bare[512], local[600];
  snprintf(url, sizeof url, "slr:http://127.0.0.1:%d/w/ids.slr", s.port);
  snprintf(bare, sizeof bare, "http://127.0.0.1:%d/w/ids.slr", s.port);
  snprintf(local, sizeof local, "slr:%s", test_nginx_www(&s, "ids.slr"));
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
  test_nginx_stop(&s);
}

TEST(http_slr_reads_only_the_chunks_it_needs) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  /* 600 chunks of 500 records: about 1 MB, whose index is a few KB. */
  test_write_ids_slr(test_nginx_www(&s, "big.slr"), 0, 300000, 500);
  uint64_t size = file_size(test_nginx_www(&s, "big.slr"));
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
  test_nginx_stop(&s);
}

TEST(http_slr_404_names_the_url) {
  test_nginx s;
  test_nginx_start(&s, DIR);
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
  test_nginx_stop(&s);
}

TEST(http_slr_500_then_200_delivers_every_sample_once) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  /* Several read-ahead blocks, each a request that nginx answers 500 when
   * it comes within a second of the one before. */
  test_write_ids_slr(test_nginx_www(&s, "ids.slr"), 0, 4000, 500);
  uint64_t size = file_size(test_nginx_www(&s, "ids.slr"));
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
  test_nginx_stop(&s);
}

static sl_reader *build_url_slr(void *ud) {
  sl_reader *r;
  ASSERT_OK(sl_open(ud, NULL, &r));
  return r;
}

TEST(http_slr_save_and_restore) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  test_write_ids_slr(test_nginx_www(&s, "ids.slr"), 100, 700, 32);
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
  test_write_ids_slr(test_nginx_www(&s, "ids.slr"), 100, 701, 32);
  ASSERT_OK(sl_open(url, NULL, &r));
  ASSERT_TRUE(sl_reader_restore(r, st, stn) < 0);
  ASSERT_CONTAINS(sl_last_error(), "ids.slr");
  sl_free(st);
  sl_reader_destroy(r);
  unsetenv("SLUICE_HTTP_READAHEAD");
  test_nginx_stop(&s);
}

/* sl_open_files over URLs: the same samples in the same order for 1, 2 and
 * 4 threads, every record once. */
TEST(http_open_files_over_urls_for_any_thread_count) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  test_write_ids_slr(test_nginx_www(&s, "a.slr"), 0, 900, 50);
  test_write_ids_slr(test_nginx_www(&s, "b.slr"), 900, 700, 64);
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
  test_nginx_stop(&s);
}

/* The byte source itself: the size, the read-ahead block serving the reads
 * after it, reads past the end, an empty object (nginx answers its range
 * with an empty 200), the identity. */
TEST(http_url_source_reads_ahead_by_bytes) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  static unsigned char data[10000];
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (unsigned char)(i * 7 + i / 256);
  test_write_file(test_nginx_www(&s, "blob"), data, sizeof data);
  test_write_file(test_nginx_www(&s, "empty"), "", 0);
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
  test_write_file(test_nginx_www(&s, "blob"), data, sizeof data);
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
  test_nginx_stop(&s);
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

/* Opens `name` and reads it all: the open or a read must fail SL_EIO
 * "changed while read", naming `what`. */
static void expect_changed_while_read(const char *name, const char *what) {
  sl_reader *r = NULL;
  int rc = sl_open(name, NULL, &r);
  if (rc == SL_OK) {
    sl_sample *x;
    while ((rc = sl_reader_next(r, &x)) == SL_OK)
      sl_sample_release(x);
    sl_reader_destroy(r);
  }
  ASSERT_RC(rc, SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "changed while read");
  ASSERT_CONTAINS(sl_last_error(), what);
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
  expect_changed_while_read(url, "/ids2.slr");
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
  test_nginx s;
  test_nginx_start(&s, DIR);
  write_npy_i4(test_nginx_www(&s, "rows.npy"), 20000); /* 1.28 MB */
  uint64_t size = file_size(test_nginx_www(&s, "rows.npy"));
  setenv("SLUICE_HTTP_READAHEAD", "64K", 1);
  char url[256], local[600];
  snprintf(url, sizeof url, "npy:http://127.0.0.1:%d/w/rows.npy", s.port);
  snprintf(local, sizeof local, "npy:%s", test_nginx_www(&s, "rows.npy"));
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
  test_nginx_stop(&s);
}

TEST(http_npy_url_errors_name_the_url) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  /* A header that promises more rows than the object holds. */
  write_npy_i4(test_nginx_www(&s, "short.npy"), 100);
  FILE *f = fopen(test_nginx_www(&s, "short.npy"), "r+b");
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
  test_nginx_stop(&s);
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
  ASSERT_OK(sl__http_get("test", url, &got, NULL));
  ASSERT_EQ(atomic_load(&b.served), 2);
  ASSERT_EQ(sl_buffer_size(got), n);
  ASSERT_TRUE(memcmp(sl_buffer_data(got), body, n) == 0);
  sl_buffer_release(got);
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  bad_stop(&b);
  free(body);
}

/* --- versions: one object read whole or by ranges must be one version ---- */

/* Two versions of a `n`-byte object: A holds bytes 'a' + i % 20, B 'A' +
 * i % 20 (caller frees). */
static void two_versions(size_t n, unsigned char **a, unsigned char **b) {
  *a = malloc(n);
  *b = malloc(n);
  for (size_t i = 0; i < n; i++) {
    (*a)[i] = (unsigned char)('a' + i % 20);
    (*b)[i] = (unsigned char)('A' + i % 20);
  }
}

/* A body cut short, then replaced before the resume: the resumed GET
 * carries If-Range, and an answer of the new version - a range of it (a
 * server that ignores If-Range) or the whole of it (a 200, a server that
 * honours it) - fails naming the URL; no buffer mixes the versions. */
TEST(http_resumed_body_of_another_version_fails) {
  unsigned char *va, *vb;
  two_versions(20000, &va, &vb);
  setenv("SLUICE_HTTP_BACKOFF_MS", "1", 1);
  for (int validators = 0; validators < 3; validators++) {
    for (int honour = 0; honour < 2; honour++) {
      bad_server b = {.mode = 6,
                      .body = va,
                      .body2 = vb,
                      .n = 20000,
                      .switch_at = 1,
                      .cut_first = true,
                      .etag = validators != 1,
                      .lastmod = validators != 0,
                      .if_range = honour};
      bad_start(&b);
      char url[256];
      snprintf(url, sizeof url, "http://127.0.0.1:%d/obj.bin", b.port);
      sl_buffer *got = NULL;
      ASSERT_RC(sl__http_get("test", url, &got, NULL), SL_EIO);
      ASSERT_NULL(got);
      ASSERT_CONTAINS(sl_last_error(), "changed while read");
      ASSERT_CONTAINS(sl_last_error(), url);
      ASSERT_CONTAINS(sl_last_error(),
                      validators == 1 ? "Last-Modified" : "ETag \"vA\"");
      char req[4096];
      last_request(&b, req, sizeof req);
      ASSERT_CONTAINS(req, "Range: bytes=10000-");
      ASSERT_CONTAINS(req, validators == 1
                               ? "If-Range: Sat, 28 Nov 2026 10:00:00 GMT"
                               : "If-Range: \"vA\"");
      ASSERT_EQ(atomic_load(&b.served), 2);
      bad_stop(&b);
    }
  }
  /* The same version cut and resumed: one request more, every byte once. */
  bad_server b = {.mode = 6,
                  .body = va,
                  .body2 = va,
                  .n = 20000,
                  .switch_at = 1,
                  .cut_first = true,
                  .lastmod = true,
                  .if_range = true};
  bad_start(&b);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/obj.bin", b.port);
  sl_buffer *got;
  sl__http_ident id;
  ASSERT_OK(sl__http_get("test", url, &got, &id));
  ASSERT_EQ(atomic_load(&b.served), 2);
  ASSERT_EQ(sl_buffer_size(got), 20000);
  ASSERT_TRUE(memcmp(sl_buffer_data(got), va, 20000) == 0);
  ASSERT_STREQ(id.modified, "Sat, 28 Nov 2026 10:00:00 GMT");
  ASSERT_EQ(id.filetime, 1795860000);
  ASSERT_EQ(id.size, 20000);
  sl_buffer_release(got);
  bad_stop(&b);
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  free(va);
  free(vb);
}

/* The case: a CSV over HTTP cut mid-body and replaced; the reader
 * must not read rows of version A, then rows of version B. */
TEST(http_csv_of_two_versions_is_refused) {
  char a[20000], b2[20000];
  size_t na = 0, nb = 0;
  for (int i = 0; i < 1000; i++) {
    na += (size_t)snprintf(a + na, sizeof a - na, "A,%05d\n", i);
    nb += (size_t)snprintf(b2 + nb, sizeof b2 - nb, "B,%05d\n", i);
  }
  ASSERT_EQ(na, nb);
  setenv("SLUICE_HTTP_BACKOFF_MS", "1", 1);
  bad_server b = {.mode = 6,
                  .body = (unsigned char *)a,
                  .body2 = (unsigned char *)b2,
                  .n = na,
                  .switch_at = 1,
                  .cut_first = true,
                  .etag = true};
  bad_start(&b);
  char url[256];
  snprintf(url, sizeof url, "csv:http://127.0.0.1:%d/t.csv", b.port);
  expect_changed_while_read(url, "/t.csv"); /* no mixed table comes out */
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  bad_stop(&b);
}

/* Without any validator the bytes received cannot be shown to belong with
 * the rest: a cut body is fetched again from byte 0 (no Range), and what
 * comes is one version - the new one - whole. */
TEST(http_cut_body_without_validators_restarts_whole) {
  unsigned char *va, *vb;
  two_versions(20000, &va, &vb);
  setenv("SLUICE_HTTP_BACKOFF_MS", "1", 1);
  bad_server b = {.mode = 6,
                  .body = va,
                  .body2 = vb,
                  .n = 20000,
                  .switch_at = 1,
                  .cut_first = true};
  bad_start(&b);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/obj.bin", b.port);
  sl_buffer *got;
  sl__http_ident id;
  ASSERT_OK(sl__http_get("test", url, &got, &id));
  ASSERT_EQ(atomic_load(&b.served), 2);
  char req[4096];
  last_request(&b, req, sizeof req);
  ASSERT_TRUE(strstr(req, "Range:") == NULL);
  ASSERT_EQ(sl_buffer_size(got), 20000);
  ASSERT_TRUE(memcmp(sl_buffer_data(got), vb, 20000) == 0);
  ASSERT_TRUE(!sl__http_ident_known(&id));
  sl__file_id fid;
  sl__http_ident_file_id(&id, url, &fid);
  ASSERT_EQ(fid.mtime_ns, -1); /* an identity that proves nothing */
  sl_buffer_release(got);
  bad_stop(&b);
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
  free(va);
  free(vb);
}

/* Read by ranges (source_http.c): an object replaced between two ranges
 * fails "changed while read", whichever validator the server sends (only
 * Last-Modified: the size is the same) and whether it honours If-Range
 * (a 200 of the new version) or not (a 206 of it). */
TEST(http_ranged_reads_of_a_replaced_object_fail) {
  unsigned char *va, *vb;
  two_versions(20000, &va, &vb);
  setenv("SLUICE_HTTP_READAHEAD", "1000", 1);
  for (int validators = 0; validators < 3; validators++) {
    for (int honour = 0; honour < 2; honour++) {
      bad_server b = {.mode = 6,
                      .body = va,
                      .body2 = vb,
                      .n = 20000,
                      .switch_at = 1,
                      .etag = validators != 1,
                      .lastmod = validators != 0,
                      .if_range = honour};
      bad_start(&b);
      char url[256];
      snprintf(url, sizeof url, "http://127.0.0.1:%d/obj.bin", b.port);
      sl__source *src;
      ASSERT_OK(sl__source_open_url("test", url, &src));
      sl__http_ident id;
      ASSERT_OK(sl__source_url_ident(src, &id));
      ASSERT_TRUE(sl__http_ident_known(&id));
      ASSERT_EQ(id.size, 20000);
      unsigned char got[100];
      ASSERT_OK(src->read_at(src, 0, got, 100));
      ASSERT_TRUE(memcmp(got, va, 100) == 0);
      ASSERT_RC(src->read_at(src, 15000, got, 100), SL_EIO);
      ASSERT_CONTAINS(sl_last_error(), "changed while read");
      ASSERT_CONTAINS(sl_last_error(), url);
      char req[4096];
      last_request(&b, req, sizeof req);
      ASSERT_CONTAINS(req, "If-Range: ");
      sl__source_close(src);
      bad_stop(&b);
    }
  }
  /* No validator at all: the object is fetched whole at open, one
   * version, and every read is served from it. */
  bad_server b = {
      .mode = 6, .body = va, .body2 = vb, .n = 20000, .switch_at = 1};
  bad_start(&b);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/obj.bin", b.port);
  sl__source *src;
  ASSERT_OK(sl__source_open_url("test", url, &src));
  static unsigned char all[20000];
  for (size_t off = 0; off < 20000; off += 500)
    ASSERT_OK(src->read_at(src, off, all + off, 500));
  ASSERT_TRUE(memcmp(all, vb, 20000) == 0);
  ASSERT_EQ(atomic_load(&b.served), 2);
  ASSERT_EQ(src->id.mtime_ns, -1);
  sl__source_close(src);
  bad_stop(&b);
  ASSERT_RC(sl__source_url_ident(NULL, &(sl__http_ident){0}), SL_EINVAL);
  unsetenv("SLUICE_HTTP_READAHEAD");
  free(va);
  free(vb);
}

/* --- redirects ------------------------------------------------------------ */

/* Only http(s) redirects are followed, at most 10. */
TEST(http_redirects_only_to_http_and_not_forever) {
  bad_server ftp = {.mode = 7};
  bad_start(&ftp);
  bad_server r = {.mode = 5, .status = 302};
  snprintf(r.location, sizeof r.location, "ftp://127.0.0.1:%d/x.npy", ftp.port);
  bad_start(&r);
  setenv("SLUICE_HTTP_BACKOFF_MS", "1", 1);
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x.npy", r.port);
  sl_buffer *got = NULL;
  ASSERT_RC(sl__http_get("test", url, &got, NULL), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), url);
  ASSERT_CONTAINS(sl_last_error(), "HTTP 302 redirects to ftp://");
  ASSERT_CONTAINS(sl_last_error(), "only http:// and https:// redirects");
  ASSERT_EQ(atomic_load(&ftp.served), 0);
  bad_stop(&r);
  bad_stop(&ftp);
  /* A redirect to itself (a relative Location: the same origin). */
  bad_server loop = {.mode = 5, .status = 307, .location = "/again"};
  bad_start(&loop);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x.npy", loop.port);
  ASSERT_RC(sl__http_get("test", url, &got, NULL), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "more than 10 redirects");
  ASSERT_EQ(atomic_load(&loop.served), 11);
  bad_stop(&loop);
  unsetenv("SLUICE_HTTP_BACKOFF_MS");
}

/* An s3:// request redirected to another host:port gets there without the
 * signature and without the session token; the object still comes. */
TEST(http_redirect_keeps_credentials_at_home) {
  unsigned char *va, *vb;
  two_versions(5000, &va, &vb);
  bad_server away = {.mode = 6,
                     .body = va,
                     .body2 = va,
                     .n = 5000,
                     .switch_at = 1 << 30,
                     .etag = true};
  bad_start(&away);
  bad_server home = {.mode = 5, .status = 307};
  snprintf(home.location, sizeof home.location,
           "http://127.0.0.1:%d/bkt/obj.bin", away.port);
  bad_start(&home);
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", home.port);
  setenv("SLUICE_S3_ENDPOINT", endpoint, 1);
  setenv("AWS_ACCESS_KEY_ID", "AKIDREDIRECT", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "secret-of-home", 1);
  setenv("AWS_SESSION_TOKEN", "token-of-home", 1);
  sl_buffer *got;
  ASSERT_OK(sl__http_get("test", "s3://bkt/obj.bin", &got, NULL));
  ASSERT_EQ(sl_buffer_size(got), 5000);
  ASSERT_TRUE(memcmp(sl_buffer_data(got), va, 5000) == 0);
  sl_buffer_release(got);
  char req[4096];
  last_request(&home, req, sizeof req);
  ASSERT_CONTAINS(req, "x-amz-security-token: token-of-home");
  ASSERT_CONTAINS(req, "Authorization: AWS4-HMAC-SHA256");
  last_request(&away, req, sizeof req);
  ASSERT_CONTAINS(req, "GET /bkt/obj.bin");
  ASSERT_TRUE(strstr(req, "token-of-home") == NULL);
  ASSERT_TRUE(strstr(req, "AKIDREDIRECT") == NULL);
  ASSERT_TRUE(strstr(req, "Authorization") == NULL);
  ASSERT_TRUE(strstr(req, "x-amz-") == NULL);
  /* A plain URL's user:password stays home too. */
  char url[256];
  snprintf(url, sizeof url, "http://alice:pw-of-home@127.0.0.1:%d/obj.bin",
           home.port);
  ASSERT_OK(sl__http_get("test", url, &got, NULL));
  sl_buffer_release(got);
  last_request(&home, req, sizeof req);
  ASSERT_CONTAINS(req, "Authorization: Basic");
  last_request(&away, req, sizeof req);
  ASSERT_TRUE(strstr(req, "Authorization") == NULL);
  unsetenv("SLUICE_S3_ENDPOINT");
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_SESSION_TOKEN");
  bad_stop(&home);
  bad_stop(&away);
  free(va);
  free(vb);
}

/* --- credentials never in messages --------------------------------------- */

TEST(http_url_credentials_are_redacted_in_messages) {
  char out[256];
  static const char *cases[][2] = {
      {"npy: http://alice:s3cret@h:1/x.npy: refused",
       "npy: http://***@h:1/x.npy: refused"},
      {"a https://u@h/p and s3://b/k@v and ftp://x:y@z",
       "a https://***@h/p and s3://b/k@v and ftp://***@z"},
      {"'http://u:p@h' \"https://q:r@[::1]:8/x?y=@z\"",
       "'http://***@h' \"https://***@[::1]:8/x?y=@z\""},
      {"no url, user@example.com", "no url, user@example.com"},
      {"http://a:b@c@host/x", "http://***@host/x"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    size_t n = sl__redact_urls(cases[i][0], out, sizeof out);
    ASSERT_STREQ(out, cases[i][1]);
    ASSERT_EQ(n, strlen(cases[i][1]));
  }
  ASSERT_EQ(sl__redact_urls("http://a:b@h/", out, 5), 13);
  ASSERT_STREQ(out, "http");
  /* Every message: set, wrapped, and one too long for the slot whose
   * middle is elided (the redaction comes first). */
  sl_set_error(SL_EIO, "x: %s: gone", "https://bob:hunter2@h/o");
  ASSERT_STREQ(sl_last_error(), "x: https://***@h/o: gone");
  sl_wrap_error(SL_EIO, "outer http://eve:pw2@h/");
  ASSERT_TRUE(strstr(sl_last_error(), "pw2") == NULL);
  ASSERT_TRUE(strstr(sl_last_error(), "hunter2") == NULL);
  static char pad[3000];
  memset(pad, 'p', sizeof pad - 1);
  sl_set_error(SL_EIO, "%.300s http://carol:topsecret@h/%s", pad, pad);
  ASSERT_TRUE(strstr(sl_last_error(), "topsecret") == NULL);
  ASSERT_TRUE(strstr(sl_last_error(), "carol") == NULL);
  /* A reader's message, through the whole stack. */
  setenv("SLUICE_HTTP_RETRIES", "0", 1);
  int port = test_free_port();
  char url[256];
  snprintf(url, sizeof url, "npy:http://alice:s3cret@127.0.0.1:%d/x.npy", port);
  sl_reader *r = NULL;
  ASSERT_RC(sl_open(url, NULL, &r), SL_EIO);
  char want[128];
  snprintf(want, sizeof want, "http://***@127.0.0.1:%d/x.npy", port);
  ASSERT_CONTAINS(sl_last_error(), want);
  ASSERT_TRUE(strstr(sl_last_error(), "s3cret") == NULL);
  ASSERT_TRUE(strstr(sl_last_error(), "alice") == NULL);
  /* SLUICE_S3_ENDPOINT's, shown with the URL an s3:// name maps to. */
  snprintf(url, sizeof url, "http://ak:endpoint-pw@127.0.0.1:%d/", port);
  setenv("SLUICE_S3_ENDPOINT", url, 1);
  setenv("AWS_ACCESS_KEY_ID", "AK", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);
  ASSERT_RC(sl_open("npy:s3://bkt/x.npy", NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "s3://bkt/x.npy (http://***@127.0.0.1:");
  ASSERT_TRUE(strstr(sl_last_error(), "endpoint-pw") == NULL);
  setenv("SLUICE_S3_ENDPOINT", "ftp://ak:endpoint-pw@h/", 1);
  ASSERT_RC(sl_open("npy:s3://bkt/x.npy", NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "SLUICE_S3_ENDPOINT 'ftp://***@h/'");
  ASSERT_TRUE(strstr(sl_last_error(), "endpoint-pw") == NULL);
  unsetenv("SLUICE_S3_ENDPOINT");
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("SLUICE_HTTP_RETRIES");
}

/* --- GZIP TFRecord of several members ------------------------------------ */

/* Issue 24 item 5: over HTTP the whole object was inflated by one inflate
 * call, which stops at the end of the first gzip member: 3 records of 6,
 * no error.  Now local files and URLs share one streaming inflater
 * (gzip_stream.c) that reads every member; the URL is read by ranges. */
TEST(http_tfrecord_gzip_of_several_members_reads_every_record) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  unsigned char *b;
  size_t n;
  FILE *in = fopen(DIR "/ex.tfrecord", "rb");
  ASSERT_NOT_NULL(in);
  b = malloc(4096);
  n = fread(b, 1, 4096, in);
  fclose(in);
  /* gzopen's "a" mode appends a new member: records 0-2, then 3-5 (246 is
   * record 3's offset), then the same split inside a record */
  const char *names[] = {"m2.tfrecord.gz", "m3.tfrecord.gz"};
  const size_t cut[] = {246, 100};
  for (int i = 0; i < 2; i++) {
    const char *p = test_nginx_www(&s, names[i]);
    for (int part = 0; part < 2; part++) {
      gzFile g = gzopen(p, part ? "ab" : "wb");
      ASSERT_NOT_NULL(g);
      size_t from = part ? cut[i] : 0, len = part ? n - cut[i] : cut[i];
      ASSERT_EQ(gzwrite(g, b + from, (unsigned)len), (int)len);
      ASSERT_EQ(gzclose(g), Z_OK);
    }
  }
  free(b);
  sl_reader *r;
  ASSERT_OK(sl_open("tfrecord:" DIR "/ex.tfrecord", NULL, &r));
  uint64_t n0, h0 = test_digest_all(r, &n0);
  ASSERT_EQ(n0, 6);
  for (int i = 0; i < 2; i++) {
    char url[256];
    snprintf(url, sizeof url, "tfrecord:http://127.0.0.1:%d/w/%s", s.port,
             names[i]);
    ASSERT_OK(sl_open(url, NULL, &r));
    uint64_t k, h = test_digest_all(r, &k);
    ASSERT_EQ(k, 6);
    ASSERT_TRUE(h == h0);
  }
  /* Save and restore over the URL, across the member boundary. */
  static const uint64_t cuts[] = {0, 2, 3, 4, 6, 7, 11};
  char url[256];
  snprintf(url, sizeof url, "tfrecord:http://127.0.0.1:%d/w/%s", s.port,
           names[1]);
  test_resume_check(build_url_slr, url, 2, cuts, sizeof cuts / sizeof *cuts,
                    0);
  test_nginx_stop(&s);
}

/* Issue 24 item 8: a csv: URL rewritten at the same size since the save (a
 * new ETag and Last-Modified) is refused naming the URL, not resumed
 * mid-row; the untouched object restores.  Before, a URL's state held its
 * size alone. */
TEST(http_csv_restore_into_a_rewritten_object_is_refused) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  const char *p = test_nginx_www(&s, "rows.csv");
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
  test_nginx_stop(&s);
}
