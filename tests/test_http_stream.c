/*
 * test_http_stream.c - WebDataset tar shards and plain TFRecord files read
 * over HTTP through the ranged byte source (src/transport/source_http.c) block by
 * block, not fetched whole: a real nginx on loopback (started here on a
 * free port, stopped at the end) serves tests/data/formats/ at / and the
 * test's own files at /w/.
 *
 * Checked: every sample equals the local file's (wds: one shard and
 * sl_wds_open over 1 and 2 threads; tfrecord: raw records and decoded
 * features; with a tiny read-ahead so that headers, long-name and pax
 * records and members straddle blocks); save/restore at several cuts over
 * URLs; the bytes fetched to read the first samples of a 20 MiB shard are
 * a small fraction of it (sl__http_bytes); a 404 and an object cut short
 * fail naming the URL.
 *
 * nginx is a declared dependency (Makefile PACKAGES): when it is missing
 * the tests fail saying so, they do not skip.
 */
#include "test.h"
#include "test_util.h"

#include "core/crc32c.h"
#include "transport/http.h"
#include "formats/tar.h"
#include "formats/tfrecord.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DIR SLUICE_SOURCE_DIR "/tests/data/formats"

/* The digests of every sample of r (then destroys it) into d[0..*n). */
static void digests(sl_reader *r, uint64_t *d, size_t cap, size_t *n) {
  *n = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    ASSERT_TRUE(*n < cap);
    d[(*n)++] = test_sample_digest(s);
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  sl_reader_destroy(r);
}

/* Readers a and b (taken) give the same samples, sample for sample. */
static size_t expect_same(sl_reader *a, sl_reader *b) {
  static uint64_t da[4096], db[4096];
  size_t na, nb;
  digests(a, da, 4096, &na);
  digests(b, db, 4096, &nb);
  ASSERT_EQ(na, nb);
  ASSERT_TRUE(na > 0);
  for (size_t i = 0; i < na; i++)
    if (da[i] != db[i]) test_fail(__FILE__, __LINE__, "sample %zu differs", i);
  return na;
}

static void same_as_local(const test_nginx *s, const char *tag,
                          const char *file) {
  char url[512], local[512];
  snprintf(url, sizeof url, "%s:http://127.0.0.1:%d/%s", tag, s->port, file);
  snprintf(local, sizeof local, "%s:%s/%s", tag, DIR, file);
  sl_reader *a, *b;
  ASSERT_OK(sl_open(url, NULL, &a));
  ASSERT_OK(sl_open(local, NULL, &b));
  expect_same(a, b);
}

static sl_reader *wds_open_threads(const char *name, uint32_t threads,
                                   int shuffle) {
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = threads;
  o.shuffle = shuffle;
  o.seed = 5;
  o.world = 1;
  sl_reader *r = NULL;
  ASSERT_OK(sl_wds_open(&name, 1, &o, &r));
  return r;
}

TEST(wds_shards_stream_as_from_disk) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  /* A read-ahead of 1 KiB: headers, GNU long names, pax records and
   * members cross block edges. */
  setenv("SLUICE_HTTP_READAHEAD", "1K", 1);
  const char *files[] = {"wds-000000.tar", "wds-000001.tar", "wds-000002.tar",
                         "wds-long.tar", "wds-pax.tar"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++)
    same_as_local(&s, "wds", files[i]);
  char url[256];
  snprintf(url, sizeof url, "wds:http://127.0.0.1:%d/wds-{000000..000002}.tar",
           s.port);
  for (uint32_t t = 1; t <= 2; t++)
    for (int sh = 0; sh <= 1; sh++)
      ASSERT_EQ(
          expect_same(wds_open_threads(url, t, sh),
                      wds_open_threads(DIR "/wds-{000000..000002}.tar", t, sh)),
          12);
  unsetenv("SLUICE_HTTP_READAHEAD");
  test_nginx_stop(&s);
}

static sl_reader *build_url(void *ud) {
  sl_reader *r = NULL;
  return sl_open((const char *)ud, NULL, &r) == SL_OK ? r : NULL;
}

typedef struct open_case {
  const char *name;
  uint32_t threads;
  int shuffle;
  bool repeated; /* under a repeat of 2 and a shuffle of 4 */
} open_case;

static sl_reader *build_wds_open(void *ud) {
  const open_case *c = ud;
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = c->threads;
  o.shuffle = c->shuffle;
  o.seed = 5;
  o.world = 1;
  sl_reader *r = NULL;
  if (sl_wds_open(&c->name, 1, &o, &r) != SL_OK) return NULL;
  if (c->repeated && (sl_multi_pass(r, 2, &r) != SL_OK ||
                      sl_shuffle(r, 4, 7, &r) != SL_OK))
    return NULL;
  return r;
}

TEST(wds_over_http_resumes_exactly) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  setenv("SLUICE_HTTP_READAHEAD", "2K", 1);
  static const uint64_t cuts[] = {0, 1, 2, 3, 4, 5, 9, 11, 12, 13, 20, 35};
  char one[256], many[256];
  snprintf(one, sizeof one, "wds:http://127.0.0.1:%d/wds-000002.tar", s.port);
  test_resume_check(build_url, one, 3, cuts, 8, 0);
  snprintf(many, sizeof many,
           "wds:http://127.0.0.1:%d/wds-{000000..000002}.tar", s.port);
  for (uint32_t t = 1; t <= 2; t++) {
    open_case a = {many, t, 0, false}, b = {many, t, 1, false};
    test_resume_check(build_wds_open, &a, 3, cuts, 12, 0);
    test_resume_check(build_wds_open, &b, 3, cuts, 12, 0);
    /* saved in its pass before (a repeat reset it, the shuffle above
     * still holds its samples): that pass re-read, in that pass's order */
    b.repeated = true;
    test_resume_check(build_wds_open, &b, 2, cuts, 12, 0);
  }
  unsetenv("SLUICE_HTTP_READAHEAD");
  test_nginx_stop(&s);
}

TEST(tfrecord_streams_as_from_disk) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  setenv("SLUICE_HTTP_READAHEAD", "64", 1);
  same_as_local(&s, "tfrecord", "ex.tfrecord");
  same_as_local(&s, "tfrecord", "ex.tfrecord.gz"); /* still fetched whole */
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/ex.tfrecord", s.port);
  sl_tfrecord_opts o = SL_TFRECORD_OPTS_INIT;
  o.features = "image:bytes,label:i64,x:f32[3]";
  sl_reader *a = NULL, *b = NULL;
  if (sl__tf_can_decode()) {
    ASSERT_OK(sl_tfrecord_reader(url, &o, &a));
    ASSERT_OK(sl_tfrecord_reader(DIR "/ex.tfrecord", &o, &b));
    expect_same(a, b);
  } else {
    ASSERT_RC(sl_tfrecord_reader(url, &o, &a), SL_EUNSUPPORTED);
  }
  /* A damaged record is found over a URL as on disk. */
  snprintf(url, sizeof url, "tfrecord:http://127.0.0.1:%d/badcrc.tfrecord",
           s.port);
  ASSERT_OK(sl_open(url, NULL, &a));
  sl_sample *x;
  int rc;
  while ((rc = sl_reader_next(a, &x)) == SL_OK)
    sl_sample_release(x);
  ASSERT_RC(rc, SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "badcrc.tfrecord");
  ASSERT_CONTAINS(sl_last_error(), "CRC does not match");
  sl_reader_destroy(a);
  /* Save and restore over the URL. */
  static const uint64_t cuts[] = {0, 1, 2, 3, 5, 7, 10};
  snprintf(url, sizeof url, "tfrecord:http://127.0.0.1:%d/ex.tfrecord", s.port);
  test_resume_check(build_url, url, 3, cuts, 7, 0);
  unsetenv("SLUICE_HTTP_READAHEAD");
  test_nginx_stop(&s);
}

/* The bytes of member / record i of the big files: a pattern of i. */
static void fill_pattern(unsigned char *p, size_t n, size_t i) {
  for (size_t k = 0; k < n; k++)
    p[k] = (unsigned char)(k * 7 + i * 13 + (k >> 9));
}

#define BIG_N 160
#define BIG_MEMBER ((size_t)128 << 10) /* 160 x 128 KiB: 20 MiB */

static void write_big_tar(const char *path) {
  sl__out_file *f;
  ASSERT_OK(sl__out_open("test", path, &f));
  unsigned char *b = malloc(BIG_MEMBER);
  ASSERT_NOT_NULL(b);
  for (size_t i = 0; i < BIG_N; i++) {
    char name[64];
    fill_pattern(b, BIG_MEMBER, i);
    snprintf(name, sizeof name, "s%05zu.bin", i);
    ASSERT_OK(sl__tar_write_member(f, name, b, BIG_MEMBER));
    snprintf(name, sizeof name, "s%05zu.cls", i);
    char cls[16];
    int cl = snprintf(cls, sizeof cls, "%zu", i);
    ASSERT_OK(sl__tar_write_member(f, name, cls, (size_t)cl));
  }
  ASSERT_OK(sl__tar_write_end(f));
  free(b);
  ASSERT_OK(sl__out_commit(f));
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static void write_big_tfrecord(const char *path) {
  FILE *f = fopen(path, "wb");
  ASSERT_NOT_NULL(f);
  unsigned char *b = malloc(BIG_MEMBER);
  ASSERT_NOT_NULL(b);
  for (size_t i = 0; i < BIG_N; i++) {
    unsigned char h[12], c[4];
    uint64_t l = BIG_MEMBER;
    for (int k = 0; k < 8; k++)
      h[k] = (unsigned char)(l >> (8 * k));
    put32(h + 8, sl__tfrecord_mask(sl__crc32c(0, h, 8)));
    fill_pattern(b, BIG_MEMBER, i);
    put32(c, sl__tfrecord_mask(sl__crc32c(0, b, BIG_MEMBER)));
    ASSERT_EQ(fwrite(h, 1, 12, f), 12);
    ASSERT_EQ(fwrite(b, 1, BIG_MEMBER, f), BIG_MEMBER);
    ASSERT_EQ(fwrite(c, 1, 4, f), 4);
  }
  free(b);
  ASSERT_EQ(fclose(f), 0);
}

static uint64_t file_size(const char *path) {
  struct stat st;
  ASSERT_EQ(stat(path, &st), 0);
  return (uint64_t)st.st_size;
}

/* Opens url, reads its first 3 samples, checks that the bytes fetched are
 * far below the file's size, then reads the rest and compares everything
 * with the local file. */
static void reads_a_little(const char *url, const char *local, uint64_t size) {
  uint64_t b0 = sl__http_bytes();
  sl_reader *r, *l;
  ASSERT_OK(sl_open(url, NULL, &r));
  ASSERT_OK(sl_open(local, NULL, &l));
  for (int i = 0; i < 3; i++) {
    sl_sample *a, *b;
    ASSERT_OK(sl_reader_next(r, &a));
    ASSERT_OK(sl_reader_next(l, &b));
    ASSERT_TRUE(test_sample_digest(a) == test_sample_digest(b));
    sl_sample_release(a);
    sl_sample_release(b);
  }
  uint64_t got = sl__http_bytes() - b0;
  printf("  %s: %llu of %llu bytes fetched for 3 samples\n", url,
         (unsigned long long)got, (unsigned long long)size);
  ASSERT_TRUE(size >= (uint64_t)BIG_N * BIG_MEMBER);
  ASSERT_TRUE(got < ((uint64_t)1 << 20)); /* 20 MiB file: under 1 MiB */
  ASSERT_TRUE(got >= 3 * BIG_MEMBER);
  ASSERT_EQ(expect_same(r, l), BIG_N - 3);
  uint64_t all = sl__http_bytes() - b0;
  printf("  %s: %llu bytes fetched for the whole pass\n", url,
         (unsigned long long)all);
  ASSERT_TRUE(all >= size);
  ASSERT_TRUE(all < size + size / 16); /* each byte fetched about once */
}

/* sl_wds_open over `url` (1 thread): a state saved after 150 samples,
 * restored into a fresh reader, walks 150 samples' headers alone (one
 * read-ahead block each at most), then gives sample 150 as `local` does. */
static void restore_reads_headers(const char *url, const char *local,
                                  uint64_t size) {
  sl_reader *r = wds_open_threads(url, 1, 0);
  sl_sample *x;
  for (int i = 0; i < 150; i++) {
    ASSERT_OK(sl_reader_next(r, &x));
    sl_sample_release(x);
  }
  void *st;
  size_t stn;
  ASSERT_OK(sl_reader_save(r, &st, &stn));
  sl_reader_destroy(r);
  r = wds_open_threads(url, 1, 0);
  uint64_t b0 = sl__http_bytes();
  ASSERT_OK(sl_reader_restore(r, st, stn));
  ASSERT_OK(sl_reader_next(r, &x));
  uint64_t got = sl__http_bytes() - b0;
  printf("  restore to sample 150 of %d: %llu of %llu bytes fetched\n", BIG_N,
         (unsigned long long)got, (unsigned long long)size);
  ASSERT_TRUE(got < size / 4);
  sl_reader *l = wds_open_threads(local, 1, 0);
  sl_sample *y = NULL;
  for (int i = 0; i <= 150; i++) {
    sl_sample_release(y);
    ASSERT_OK(sl_reader_next(l, &y));
  }
  ASSERT_TRUE(test_sample_digest(x) == test_sample_digest(y));
  sl_sample_release(x);
  sl_sample_release(y);
  sl_reader_destroy(l);
  sl_reader_destroy(r);
  sl_free(st);
}

TEST(large_shard_fetches_only_what_it_reads) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  setenv("SLUICE_HTTP_READAHEAD", "64K", 1);
  write_big_tar(test_nginx_www(&s, "big.tar"));
  write_big_tfrecord(test_nginx_www(&s, "big.tfrecord"));
  char url[256], local[600];
  snprintf(url, sizeof url, "wds:http://127.0.0.1:%d/w/big.tar", s.port);
  snprintf(local, sizeof local, "wds:%s", test_nginx_www(&s, "big.tar"));
  reads_a_little(url, local, file_size(test_nginx_www(&s, "big.tar")));
  snprintf(url, sizeof url, "tfrecord:http://127.0.0.1:%d/w/big.tfrecord",
           s.port);
  snprintf(local, sizeof local, "tfrecord:%s",
           test_nginx_www(&s, "big.tfrecord"));
  reads_a_little(url, local, file_size(test_nginx_www(&s, "big.tfrecord")));
  /* A restore deep into the big shard walks headers only. */
  setenv("SLUICE_HTTP_READAHEAD", "16K", 1);
  snprintf(url, sizeof url, "wds:http://127.0.0.1:%d/w/big.tar", s.port);
  snprintf(local, sizeof local, "wds:%s", test_nginx_www(&s, "big.tar"));
  restore_reads_headers(url, local, file_size(test_nginx_www(&s, "big.tar")));
  unsetenv("SLUICE_HTTP_READAHEAD");
  test_nginx_stop(&s);
}

/* Copies the first `keep` bytes of DIR/file to www/as. */
static void write_cut(const test_nginx *s, const char *file, const char *as,
                      size_t keep) {
  char src[512];
  snprintf(src, sizeof src, "%s/%s", DIR, file);
  FILE *f = fopen(src, "rb");
  ASSERT_NOT_NULL(f);
  static unsigned char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  ASSERT_TRUE(n > keep);
  FILE *g = fopen(test_nginx_www(s, as), "wb");
  ASSERT_NOT_NULL(g);
  ASSERT_EQ(fwrite(buf, 1, keep, g), keep);
  ASSERT_EQ(fclose(g), 0);
}

/* Reads url to its end: the error it ends with. */
static int read_to_error(const char *url) {
  sl_reader *r;
  int rc = sl_open(url, NULL, &r);
  if (rc < 0) return rc;
  sl_sample *x;
  while ((rc = sl_reader_next(r, &x)) == SL_OK)
    sl_sample_release(x);
  sl_reader_destroy(r);
  return rc;
}

TEST(missing_and_cut_short_objects_fail_naming_the_url) {
  test_nginx s;
  test_nginx_start(&s, DIR);
  setenv("SLUICE_HTTP_READAHEAD", "1K", 1);
  char url[256], want[256];
  const char *tags[] = {"wds", "tfrecord"};
  for (int i = 0; i < 2; i++) {
    snprintf(url, sizeof url, "%s:http://127.0.0.1:%d/w/missing", tags[i],
             s.port);
    snprintf(want, sizeof want, "http://127.0.0.1:%d/w/missing: HTTP 404",
             s.port);
    sl_reader *r = NULL;
    ASSERT_RC(sl_open(url, NULL, &r), SL_EIO);
    ASSERT_CONTAINS(sl_last_error(), want);
  }
  /* A shard cut in the middle of a member (its 5th of 12: the first sample
   * reads, the second fails). */
  write_cut(&s, "wds-000001.tar", "cut.tar", 5000);
  snprintf(url, sizeof url, "wds:http://127.0.0.1:%d/w/cut.tar", s.port);
  snprintf(want, sizeof want, "http://127.0.0.1:%d/w/cut.tar", s.port);
  ASSERT_RC(read_to_error(url), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), want);
  ASSERT_CONTAINS(sl_last_error(), "cut short");
  write_cut(&s, "ex.tfrecord", "cut.tfrecord", 469);
  snprintf(url, sizeof url, "tfrecord:http://127.0.0.1:%d/w/cut.tfrecord",
           s.port);
  snprintf(want, sizeof want, "http://127.0.0.1:%d/w/cut.tfrecord", s.port);
  ASSERT_RC(read_to_error(url), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), want);
  /* An empty object: no samples, as an empty local file. */
  FILE *e = fopen(test_nginx_www(&s, "empty.tfrecord"), "wb");
  ASSERT_NOT_NULL(e);
  fclose(e);
  snprintf(url, sizeof url, "tfrecord:http://127.0.0.1:%d/w/empty.tfrecord",
           s.port);
  sl_reader *r;
  ASSERT_OK(sl_open(url, NULL, &r));
  sl_sample *x;
  ASSERT_RC(sl_reader_next(r, &x), SL_EOF);
  sl_reader_destroy(r);
  unsetenv("SLUICE_HTTP_READAHEAD");
  test_nginx_stop(&s);
}

/* --- the walkers over a byte source, without a server -------------------- */

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ASSERT_NOT_NULL(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc(*n ? *n : 1);
  ASSERT_EQ(fread(p, 1, *n, f), *n);
  fclose(f);
  return p;
}

/* The tar walk of each fixture read through a file source (the URL path's
 * code, tar.c's at()) equals the walk of the bytes in memory: the same
 * members, names, offsets and sizes, and the same end.  Then every read
 * failing in turn (sl__source_faulty), and reads split short, give SL_EIO
 * naming the file or the same walk - never a crash or a leak. */
TEST(tar_walk_over_a_source_equals_the_walk_in_memory) {
  const char *files[] = {"wds-000000.tar", "wds-long.tar", "wds-pax.tar",
                         "wds-missing.tar"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", DIR, files[i]);
    size_t n;
    unsigned char *p = slurp(path, &n);
    for (long fail = -1; fail < 40; fail++) {
      sl__source *src, *f;
      ASSERT_OK(sl__source_open_file(path, &src));
      ASSERT_OK(
          sl__source_faulty(src, fail, fail == -1 ? 7 : 0, UINT64_MAX, &f));
      sl__tar a, b;
      sl__tar_init(&a, p, n);
      sl__tar_init_source(&b, f);
      int ra, rb;
      int members = 0;
      for (;;) {
        ra = sl__tar_next(&a, path);
        rb = sl__tar_next(&b, path);
        if (rb == SL_EIO) break;
        ASSERT_RC(rb, ra);
        if (ra != SL_OK) break;
        ASSERT_STREQ(b.name, a.name);
        ASSERT_EQ(b.header, a.header);
        ASSERT_EQ(b.data, a.data);
        ASSERT_EQ(b.size, a.size);
        members++;
      }
      if (rb == SL_EIO) {
        ASSERT_TRUE(fail >= 0);
        ASSERT_CONTAINS(sl_last_error(), files[i]);
      } else {
        ASSERT_RC(ra, SL_EOF);
        ASSERT_TRUE(members > 0);
      }
      sl__tar_fini(&a);
      sl__tar_fini(&b);
      sl__source_close(f);
    }
    free(p);
  }
}

/* TFRecord records through a file source equal the records in memory;
 * a skip walk (a restore) reaches the same offsets without reading data;
 * a failing read is SL_EIO. */
TEST(tfrecord_records_over_a_source_equal_the_records_in_memory) {
  const char *path = DIR "/ex.tfrecord";
  size_t n;
  unsigned char *p = slurp(path, &n);
  for (long fail = -1; fail < 12; fail++) {
    sl__source *src, *f;
    ASSERT_OK(sl__source_open_file(path, &src));
    ASSERT_OK(sl__source_faulty(src, fail, 0, UINT64_MAX, &f));
    uint64_t oa = 0, ob = 0, oc = 0, la, lb, lc;
    int ra, rb = SL_OK, rc, recs = 0;
    for (uint64_t k = 0;; k++) {
      const unsigned char *d;
      sl_buffer *rec, *none;
      ra = sl__tfrecord_next(p, n, &oa, &d, &la, path, k);
      rb = sl__tfrecord_read(f, &ob, &rec, &lb, false, path, k);
      if (rb == SL_EIO) break;
      ASSERT_RC(rb, ra);
      if (ra != SL_OK) break;
      ASSERT_EQ(lb, la);
      ASSERT_EQ(ob, oa);
      ASSERT_TRUE(memcmp(sl_buffer_data(rec), d, la) == 0);
      sl_buffer_release(rec);
      rc = sl__tfrecord_read(f, &oc, &none, &lc, true, path, k);
      if (rc == SL_EIO) {
        rb = rc;
        break;
      }
      ASSERT_OK(rc);
      ASSERT_TRUE(none == NULL);
      ASSERT_EQ(oc, oa);
      recs++;
    }
    if (rb == SL_EIO) {
      ASSERT_TRUE(fail >= 0);
      ASSERT_CONTAINS(sl_last_error(), "ex.tfrecord");
    } else {
      ASSERT_RC(ra, SL_EOF);
      ASSERT_EQ(recs, 6);
    }
    sl__source_close(f);
  }
  free(p);
}
