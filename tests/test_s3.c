/*
 * test_s3.c - s3://bucket/key names (src/transport/s3.c, src/transport/http.c): a small
 * S3-compatible server in Python's standard library (tests/http/
 * s3_server.py, started here on a free loopback port, killed at the end)
 * serves a scratch folder as bucket "bkt" and checks every request's AWS
 * SigV4 signature with its own implementation of the algorithm, so these
 * tests show that libcurl's signing, as http.c sets it up (region, service,
 * payload hash, session token), is what S3 verifies.  The readers read
 * npy, slr (by ranges) and wds objects through s3:// and must give what
 * they give from disk; a wrong secret is a 403 naming the name and the
 * URL; missing credentials name the variables.
 *
 * python3 is a declared dependency (Makefile PACKAGES): when it is missing
 * the tests fail saying so.
 */
#include "test.h"
#include "test_util.h"

#include "transport/http.h"
#include "transport/s3.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DIR SLUICE_SOURCE_DIR "/tests/data/formats"
#define SERVER SLUICE_SOURCE_DIR "/tests/http/s3_server.py"
#define PYTHON "/usr/bin/python3"
#define KEY_ID "AKIDSLUICETEST"
#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define TOKEN "session-token+/="
#define REGION "eu-west-3"

typedef struct server {
  pid_t pid;
  int port;
  const char *root; /* the bucket's folder */
} server;

static void copy_in(const char *root, const char *name) {
  char from[512], to[512];
  snprintf(from, sizeof from, "%s/%s", DIR, name);
  snprintf(to, sizeof to, "%s/%s", root, name);
  FILE *f = fopen(from, "rb");
  ASSERT_NOT_NULL(f);
  static unsigned char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  test_write_file(to, buf, n);
}

/* The server on a free port serving a scratch folder holding x.npy,
 * wds-000001.tar and ids.slr as bucket "bkt", and the environment that
 * points s3:// names at it with the right credentials. */
static void s3_start(server *s) {
  if (access(PYTHON, X_OK) != 0)
    test_fail(__FILE__, __LINE__,
              "%s is missing: the S3 tests need python3 (apt-get install "
              "python3, or make deps: it is in the Makefile's PACKAGES)",
              PYTHON);
  s->root = test_tmpdir("s3");
  copy_in(s->root, "x.npy");
  copy_in(s->root, "wds-000001.tar");
  test_write_ids_slr(test_tmppath("s3", "ids.slr"), 0, 100000, 500);
  s->port = test_free_port();
  char port[16];
  snprintf(port, sizeof port, "%d", s->port);
  char *argv[] = {PYTHON, SERVER, port,   (char *)s->root, "bkt",
                  KEY_ID, SECRET, REGION, TOKEN,           NULL};
  s->pid = test_server_start(SERVER, argv, s->port, false);
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d/", s->port);
  setenv("SLUICE_S3_ENDPOINT", endpoint, 1);
  setenv("AWS_ACCESS_KEY_ID", KEY_ID, 1);
  setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
  setenv("AWS_SESSION_TOKEN", TOKEN, 1);
  setenv("AWS_REGION", REGION, 1);
}

static void s3_stop(server *s) {
  test_server_stop(s->pid, SIGTERM);
}

static void same_as_local(const char *name, const char *local) {
  sl_reader *a, *b;
  ASSERT_OK(sl_open(name, NULL, &a));
  ASSERT_OK(sl_open(local, NULL, &b));
  uint64_t na, nb;
  uint64_t ha = test_digest_all(a, &na), hb = test_digest_all(b, &nb);
  ASSERT_EQ(na, nb);
  ASSERT_TRUE(na > 0);
  ASSERT_TRUE(ha == hb);
}

TEST(s3_reads_npy_slr_wds_as_from_disk) {
  server s;
  s3_start(&s);
  same_as_local("npy:s3://bkt/x.npy", "npy:" DIR "/x.npy");
  same_as_local("s3://bkt/wds-000001.tar", "wds:" DIR "/wds-000001.tar");
  char local[600];
  snprintf(local, sizeof local, "slr:%s/ids.slr", s.root);
  same_as_local("s3://bkt/ids.slr", local);
  same_as_local("slr:s3://bkt/ids.slr", local);
  /* By ranges: a few chunks of the SLR object cost a few blocks. */
  setenv("SLUICE_HTTP_READAHEAD", "8K", 1);
  struct stat st;
  ASSERT_EQ(stat(local + 4, &st), 0);
  uint64_t bytes0 = sl__http_bytes();
  sl_reader *r;
  ASSERT_OK(sl_open("s3://bkt/ids.slr", NULL, &r));
  for (int64_t i = 0; i < 1000; i++) {
    sl_sample *x;
    ASSERT_OK(sl_reader_next(r, &x));
    ASSERT_EQ(test_sample_i64(x, 0), i);
    sl_sample_release(x);
  }
  sl_reader_destroy(r);
  uint64_t fetched = sl__http_bytes() - bytes0;
  ASSERT_TRUE(fetched < (uint64_t)st.st_size / 4);
  unsetenv("SLUICE_HTTP_READAHEAD");
  /* An empty object: S3 answers its first range with 416. */
  test_write_file(test_tmppath("s3", "empty"), "", 0);
  sl__source *src;
  ASSERT_OK(sl__source_open_url("t", "s3://bkt/empty", &src));
  ASSERT_EQ(src->size, 0);
  ASSERT_STREQ(src->name, "s3://bkt/empty");
  sl__source_close(src);
  s3_stop(&s);
}

TEST(s3_wrong_secret_is_403_naming_the_url) {
  server s;
  s3_start(&s);
  setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
  char want[256];
  snprintf(want, sizeof want,
           "npy: GET s3://bkt/x.npy (http://127.0.0.1:%d/bkt/x.npy): HTTP "
           "403: SignatureDoesNotMatch",
           s.port);
  uint64_t req0, ret0, req1, ret1;
  sl__http_counts(&req0, &ret0);
  sl_reader *r = NULL;
  ASSERT_RC(sl_open("npy:s3://bkt/x.npy", NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), want);
  ASSERT_RC(sl_open("slr:s3://bkt/ids.slr", NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "s3://bkt/ids.slr");
  ASSERT_CONTAINS(sl_last_error(), "HTTP 403: SignatureDoesNotMatch");
  sl__http_counts(&req1, &ret1);
  ASSERT_EQ(ret1 - ret0, 0); /* a 403 is not retried */
  /* Another key id, and the right secret without its session token. */
  setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
  setenv("AWS_ACCESS_KEY_ID", "AKIDOTHER", 1);
  ASSERT_RC(sl_open("npy:s3://bkt/x.npy", NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "HTTP 403: InvalidAccessKeyId");
  setenv("AWS_ACCESS_KEY_ID", KEY_ID, 1);
  unsetenv("AWS_SESSION_TOKEN");
  ASSERT_RC(sl_open("npy:s3://bkt/x.npy", NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "HTTP 403: InvalidToken");
  /* The signature covers the region. */
  setenv("AWS_SESSION_TOKEN", TOKEN, 1);
  setenv("AWS_REGION", "us-west-2", 1);
  ASSERT_RC(sl_open("npy:s3://bkt/x.npy", NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "HTTP 403");
  setenv("AWS_REGION", REGION, 1);
  ASSERT_OK(sl_open("npy:s3://bkt/x.npy", NULL, &r));
  sl_reader_destroy(r);
  s3_stop(&s);
}

TEST(s3_missing_key_is_404_naming_it) {
  server s;
  s3_start(&s);
  sl_reader *r = NULL;
  ASSERT_RC(sl_open("npy:s3://bkt/nope.npy", NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "s3://bkt/nope.npy");
  ASSERT_CONTAINS(sl_last_error(), "HTTP 404: NoSuchKey");
  ASSERT_RC(sl_open("slr:s3://other/ids.slr", NULL, &r), SL_EIO);
  ASSERT_CONTAINS(sl_last_error(), "HTTP 404: NoSuchBucket");
  s3_stop(&s);
}

TEST(s3_missing_credentials_name_the_variables) {
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  setenv("SLUICE_S3_ENDPOINT", "http://127.0.0.1:1", 1);
  sl_reader *r = NULL;
  ASSERT_RC(sl_open("npy:s3://bkt/x.npy", NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "s3://bkt/x.npy");
  ASSERT_CONTAINS(sl_last_error(), "AWS_ACCESS_KEY_ID");
  ASSERT_CONTAINS(sl_last_error(), "AWS_SECRET_ACCESS_KEY");
  ASSERT_RC(sl_open("slr:s3://bkt/x.slr", NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "no S3 credentials");
  setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
  ASSERT_RC(sl_open("s3://bkt/x.slr", NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "AWS_SECRET_ACCESS_KEY is unset");
  ASSERT_NULL(r);
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("SLUICE_S3_ENDPOINT");
}

TEST(s3_names_map_to_urls) {
  setenv("AWS_ACCESS_KEY_ID", "AK", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);
  unsetenv("AWS_SESSION_TOKEN");
  unsetenv("AWS_REGION");
  unsetenv("AWS_DEFAULT_REGION");
  unsetenv("SLUICE_S3_ENDPOINT");
  sl__s3_target t;
  ASSERT_OK(sl__s3_target_make("t", "s3://bkt/a/b.slr", &t));
  ASSERT_STREQ(t.url, "https://bkt.s3.us-east-1.amazonaws.com/a/b.slr");
  ASSERT_STREQ(t.provider, "aws:amz:us-east-1:s3");
  ASSERT_STREQ(t.userpwd, "AK:SK");
  ASSERT_NULL(t.token_header);
  sl__s3_target_free(&t);
  setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
  setenv("AWS_SESSION_TOKEN", "T", 1);
  ASSERT_OK(sl__s3_target_make("t", "s3://bkt/k", &t));
  ASSERT_STREQ(t.url, "https://bkt.s3.ap-south-1.amazonaws.com/k");
  ASSERT_STREQ(t.provider, "aws:amz:ap-south-1:s3");
  ASSERT_STREQ(t.token_header, "x-amz-security-token: T");
  sl__s3_target_free(&t);
  setenv("AWS_REGION", "eu-north-1", 1); /* AWS_REGION first */
  setenv("SLUICE_S3_ENDPOINT", "http://minio:9000//", 1);
  ASSERT_OK(sl__s3_target_make("t", "s3://bkt/d/k.npy", &t));
  ASSERT_STREQ(t.url, "http://minio:9000/bkt/d/k.npy");
  ASSERT_STREQ(t.provider, "aws:amz:eu-north-1:s3");
  sl__s3_target_free(&t);
  /* Bad names and endpoints, named. */
  static const char *bad[] = {"s3://", "s3://bkt", "s3://bkt/", "s3:///k"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ASSERT_RC(sl__s3_target_make("t", bad[i], &t), SL_EINVAL);
    ASSERT_CONTAINS(sl_last_error(), "s3://BUCKET/KEY");
    ASSERT_NULL(t.url);
  }
  sl_reader *r = NULL;
  ASSERT_RC(sl_open("npy:s3://bkt", NULL, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "npy: s3://bkt: an s3 name");
  setenv("SLUICE_S3_ENDPOINT", "minio:9000", 1);
  ASSERT_RC(sl__s3_target_make("t", "s3://bkt/k", &t), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "SLUICE_S3_ENDPOINT 'minio:9000'");
  ASSERT_TRUE(sl__is_url("s3://bkt/k") && sl__is_s3("s3://bkt/k"));
  ASSERT_TRUE(!sl__is_s3("http://x/y") && sl__is_url("http://x/y"));
  unsetenv("SLUICE_S3_ENDPOINT");
  unsetenv("AWS_REGION");
  unsetenv("AWS_DEFAULT_REGION");
  unsetenv("AWS_SESSION_TOKEN");
}

/* Bucket names by S3's rules: a name that is not one - an address with a
 * port and a fragment, user:password@, upper case, a dotted quad - is
 * refused before any request, so nothing signed goes to where it points. */
TEST(s3_bucket_names_are_checked) {
  setenv("AWS_ACCESS_KEY_ID", "AK", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);
  unsetenv("AWS_SESSION_TOKEN");
  unsetenv("SLUICE_S3_ENDPOINT");
  static const char *bad[] = {
      "s3://127.0.0.1:18443#/data.npy",
      "s3://u:p@bkt/k",
      "s3://192.168.5.4/k",
      "s3://Bkt/k",
      "s3://ab/k",
      "s3://a..b/k",
      "s3://-bkt/k",
      "s3://bkt-/k",
      "s3://bkt_1/k",
      "s3://xn--bkt/k",
      "s3://bkt-s3alias/k",
      "s3://host:80/k",
      "s3://evil.com#/k",
      "s3://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/"
      "k"};
  uint64_t req0, ret0, req1, ret1;
  sl__http_counts(&req0, &ret0);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sl__s3_target t;
    ASSERT_RC(sl__s3_target_make("t", bad[i], &t), SL_EINVAL);
    ASSERT_CONTAINS(sl_last_error(), "is not an S3 bucket name");
    ASSERT_NULL(t.url);
    sl_reader *r = NULL;
    char name[160];
    snprintf(name, sizeof name, "npy:%s", bad[i]);
    ASSERT_RC(sl_open(name, NULL, &r), SL_EINVAL);
    ASSERT_NULL(r);
  }
  sl__http_counts(&req1, &ret1);
  ASSERT_EQ(req1 - req0, 0); /* nothing was sent anywhere */
  ASSERT_TRUE(strstr(sl_last_error(), "u:p@") == NULL);
  /* A key with '#' would lose its end to the URL's fragment. */
  sl__s3_target t;
  ASSERT_RC(sl__s3_target_make("t", "s3://bkt/a#b", &t), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "percent-encode");
  static const char *good[] = {"s3://bkt/k", "s3://my.bucket-1/k", "s3://123/k",
                               "s3://a-b.c-d.e/x#"};
  for (size_t i = 0; i < 3; i++) {
    ASSERT_OK(sl__s3_target_make("t", good[i], &t));
    sl__s3_target_free(&t);
  }
  ASSERT_RC(sl__s3_target_make("t", good[3], &t), SL_EINVAL);
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
}
