/*
 * bench_formats.c - the readers of other programs' formats against those
 * programs' own readers on the same bytes (docs/PERFORMANCE.md, "Other
 * programs' formats"):
 *
 *   wds       sl_wds_open over S tar shards (1 and 2 threads), every
 *             member's bytes touched, vs `tar -xOf SHARD > /dev/null` for
 *             each shard (the bytes out of the archive, nothing parsed);
 *   http      the same shards through nginx on loopback vs from disk,
 *             and the ranged reads: an SLR file of the npy rows (chunks)
 *             and the .npy (rows) over http vs from disk;
 *   npy       the npy: reader over an N x D f32 .npy, each row's first
 *             element read, vs numpy.load(mmap_mode="r") iterating rows
 *             the same way (Debian's python3-numpy);
 *   tfrecord  the tfrecord: reader over N tf.train.Example records, raw
 *             and decoded (image:bytes,label:i64,x:f32[8]), vs
 *             tf.data.TFRecordDataset in batches of 1024 (its fast path:
 *             per-record Python iteration would measure the interpreter),
 *             raw and with tf.io.parse_example (AUTOTUNE parallelism),
 *             iterated in eager mode, from the peers' venv
 *             (bench/peers/setup) when it exists.
 *
 * The data are written here (deterministic bytes) into --dir (default a
 * fresh /tmp folder, removed at the end).  Each figure is the median of
 * --runs runs (default 3), after one warm-up run that fills the page
 * cache.  Output: one JSON object per line, then a table.
 *
 *   build/bench_formats [--runs R] [--dir DIR] [--mb M]
 */
#include "bench_util.h"
#include "core/crc32c.h"
#include "core/bytes.h"
#include "formats/tar.h"
#include "formats/tfrecord.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(expr)                                                            \
  do {                                                                         \
    int rc_ = (expr);                                                          \
    if (rc_ < 0) {                                                             \
      fprintf(stderr, "bench_formats: %s: %s\n", #expr, sl_last_error());      \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static int g_runs = 3;
static char g_dir[256];
static int g_mb = 128; /* of tar shards */

enum { SHARDS = 4, MEMBER = 64 << 10, NPY_D = 64, TF_IMG = 512 };

/* --- data ------------------------------------------------------------------
 */

static void fill(unsigned char *p, size_t n, uint64_t *st) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = bench_splitmix64(st);
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

static int g_per_shard;

static void write_shards(void) {
  g_per_shard = (int)(((size_t)g_mb << 20) / SHARDS / MEMBER);
  unsigned char *buf = malloc(MEMBER);
  uint64_t st = BENCH_RNG_SEED;
  for (int s = 0; s < SHARDS; s++) {
    char path[512];
    snprintf(path, sizeof path, "%s/shard-%06d.tar", g_dir, s);
    sl__out_file *f;
    CHECK(sl__out_open("bench", path, &f));
    for (int i = 0; i < g_per_shard; i++) {
      char name[64], cls[16];
      fill(buf, MEMBER, &st);
      snprintf(name, sizeof name, "%08d.jpg", s * g_per_shard + i);
      CHECK(sl__tar_write_member(f, name, buf, MEMBER));
      int cl = snprintf(cls, sizeof cls, "%d", i % 10);
      snprintf(name, sizeof name, "%08d.cls", s * g_per_shard + i);
      CHECK(sl__tar_write_member(f, name, cls, (size_t)cl));
    }
    CHECK(sl__tar_write_end(f));
    CHECK(sl__out_commit(f));
  }
  free(buf);
}

static int64_t g_npy_n;

static void write_npy(void) {
  g_npy_n = ((int64_t)g_mb << 20) / 2 / (NPY_D * 4);
  char path[512], head[128];
  snprintf(path, sizeof path, "%s/x.npy", g_dir);
  FILE *f = fopen(path, "wb");
  int hl = snprintf(head, sizeof head,
                    "{'descr': '<f4', 'fortran_order': False, 'shape': "
                    "(%lld, %d), }",
                    (long long)g_npy_n, NPY_D);
  int total = ((10 + hl + 1 + 63) / 64) * 64;
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  unsigned char l[2] = {(unsigned char)(total - 10),
                        (unsigned char)((total - 10) >> 8)};
  fwrite(l, 1, 2, f);
  fwrite(head, 1, (size_t)hl, f);
  for (int i = 10 + hl; i < total - 1; i++)
    fputc(' ', f);
  fputc('\n', f);
  float row[NPY_D];
  uint64_t st = BENCH_RNG_SEED;
  for (int64_t i = 0; i < g_npy_n; i++) {
    bench_features(row, NPY_D, i, &st);
    fwrite(row, sizeof row, 1, f);
  }
  fclose(f);
}

/* The npy rows again as an SLR file (x f32[64], the writer's default
 * chunks): what the ranged HTTP reads (source_http.c) fetch by chunk. */
static void write_slr(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/x.slr", g_dir);
  sl_schema *sc = sl_schema_new();
  int64_t dim = NPY_D;
  CHECK(sl_schema_add(sc, "x", SL_F32, 1, &dim));
  sl_slr_writer *w;
  CHECK(sl_slr_writer_open(path, sc, NULL, &w));
  uint64_t st = BENCH_RNG_SEED;
  for (int64_t i = 0; i < g_npy_n; i++) {
    sl_sample *smp = sl_sample_new(sc);
    float *row;
    CHECK(sl_sample_alloc(smp, 0, 1, &dim, (void **)&row));
    bench_features(row, NPY_D, i, &st);
    CHECK(sl_slr_writer_append(w, smp));
    sl_sample_release(smp);
  }
  CHECK(sl_slr_writer_close(w));
  sl_schema_release(sc);
}

/* Protobuf wire format, for the bench's own Examples. */
static size_t varint(unsigned char *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (unsigned char)v;
  return n;
}
static size_t ld(unsigned char *p, int field, const void *d, size_t n) {
  size_t k = varint(p, (uint64_t)field << 3 | 2);
  k += varint(p + k, n);
  memmove(p + k, d, n);
  return k + n;
}
/* map entry {key, value: Feature{kind field: list{value...}}} */
static size_t entry(unsigned char *p, const char *key, int kind,
                    const unsigned char *list, size_t ln) {
  unsigned char feat[2048], val[2048], e[2048];
  size_t fl = ld(feat, kind, list, ln);
  size_t vl = ld(val, 1, (const unsigned char *)key, strlen(key));
  vl += ld(val + vl, 2, feat, fl);
  size_t el = ld(e, 1, val, vl);
  memcpy(p, e, el);
  return el;
}

static int64_t g_tf_n;

static void write_tfrecord(void) {
  g_tf_n = ((int64_t)g_mb << 20) / 2 / (TF_IMG + 100);
  char path[512];
  snprintf(path, sizeof path, "%s/ex.tfrecord", g_dir);
  FILE *f = fopen(path, "wb");
  uint64_t st = BENCH_RNG_SEED;
  for (int64_t i = 0; i < g_tf_n; i++) {
    unsigned char img[TF_IMG], list[1024], feats[4096], ex[4096];
    fill(img, sizeof img, &st);
    size_t fs = 0, l;
    l = ld(list, 1, img, sizeof img); /* BytesList.value */
    fs += entry(feats + fs, "image", 1, list, l);
    unsigned char iv[16];
    size_t ivl = varint(iv, (uint64_t)(i % 1000));
    l = ld(list, 1, iv, ivl); /* Int64List.value, packed */
    fs += entry(feats + fs, "label", 3, list, l);
    float x[8];
    bench_features(x, 8, i, &st);
    l = ld(list, 1, x, sizeof x); /* FloatList.value, packed */
    fs += entry(feats + fs, "x", 2, list, l);
    unsigned char fsw[4096];
    size_t fw = ld(fsw, 1, feats, fs); /* Example.features */
    memcpy(ex, fsw, fw);
    unsigned char h[12];
    sl__put64(h, fw);
    sl__put32(h + 8, sl__tfrecord_mask(sl__crc32c(0, h, 8)));
    unsigned char t[4];
    sl__put32(t, sl__tfrecord_mask(sl__crc32c(0, ex, fw)));
    fwrite(h, 1, 12, f);
    fwrite(ex, 1, fw, f);
    fwrite(t, 1, 4, f);
  }
  fclose(f);
}

/* --- measuring -------------------------------------------------------------
 */

static volatile uint64_t g_sink;

/* Reads r to its end, touching every byte of every field; bytes read. */
static uint64_t drain(sl_reader *r, uint64_t *samples) {
  uint64_t bytes = 0, n = 0, acc = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    for (int i = 0; i < sl_sample_nfields(s); i++) {
      const sl_tensor *t = sl_sample_at_const(s, i);
      const unsigned char *p = t->data;
      for (size_t k = 0; k < t->nbytes; k += 64)
        acc += p[k];
      bytes += t->nbytes;
    }
    n++;
    sl_sample_release(s);
  }
  CHECK(rc == SL_EOF ? SL_OK : rc);
  g_sink += acc;
  *samples = n;
  return bytes;
}

typedef struct result {
  double s;       /* median seconds */
  uint64_t bytes; /* per run */
  uint64_t n;
} result;

typedef sl_reader *(*open_fn)(const void *ud);

static result time_reader(open_fn open, const void *ud) {
  double t[16];
  result r = {0};
  for (int i = -1; i < g_runs; i++) {
    sl_reader *rd = open(ud);
    double t0 = now_s();
    r.bytes = drain(rd, &r.n);
    if (i >= 0) t[i] = now_s() - t0;
    sl_reader_destroy(rd);
  }
  r.s = median(t, g_runs);
  return r;
}

/* Runs `cmd` (sh -c) R times after a warm-up; the median seconds, or the
 * seconds it printed on its last line when `self_timed`. */
static double time_cmd(const char *cmd, bool self_timed, bool *ok) {
  double t[16];
  *ok = true;
  for (int i = -1; i < g_runs; i++) {
    double t0 = now_s();
    FILE *p = popen(cmd, "r");
    char line[256] = "", last[256] = "";
    while (p && fgets(line, sizeof line, p))
      snprintf(last, sizeof last, "%s", line);
    int st = p ? pclose(p) : -1;
    if (st != 0) {
      *ok = false;
      return 0;
    }
    if (i >= 0) t[i] = self_timed ? atof(last) : now_s() - t0;
  }
  return median(t, g_runs);
}

static sl_reader *open_wds(const void *ud) {
  const int *threads = ud;
  char name[600];
  snprintf(name, sizeof name, "%s/shard-{000000..%06d}.tar", g_dir, SHARDS - 1);
  const char *n = name;
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = (uint32_t)*threads;
  o.world = 1;
  sl_reader *r;
  CHECK(sl_wds_open(&n, 1, &o, &r));
  return r;
}

static int g_port;

static sl_reader *open_wds_http(const void *ud) {
  const int *threads = ud;
  char name[600];
  snprintf(name, sizeof name,
           "wds:http://127.0.0.1:%d/shard-{000000..%06d}.tar", g_port,
           SHARDS - 1);
  const char *n = name;
  sl_wds_opts o = SL_WDS_OPTS_INIT;
  o.threads = (uint32_t)*threads;
  o.world = 1;
  sl_reader *r;
  CHECK(sl_wds_open(&n, 1, &o, &r));
  return r;
}

static sl_reader *open_name(const void *ud) {
  sl_reader *r;
  CHECK(sl_open((const char *)ud, NULL, &r));
  return r;
}

static sl_reader *open_tf_decoded(const void *ud) {
  sl_tfrecord_opts o = SL_TFRECORD_OPTS_INIT;
  o.features = "image:bytes,label:i64,x:f32[8]";
  sl_reader *r;
  CHECK(sl_tfrecord_reader((const char *)ud, &o, &r));
  return r;
}

/* npy: rows with their first element read (numpy does the same). */
static result time_npy(const char *path) {
  double t[16];
  result res = {0};
  for (int i = -1; i < g_runs; i++) {
    sl_reader *r;
    CHECK(sl_npy_reader(path, NULL, &r));
    double t0 = now_s(), acc = 0;
    sl_sample *s;
    uint64_t n = 0;
    while (sl_reader_next(r, &s) == SL_OK) {
      acc += ((const float *)sl_sample_at_const(s, 0)->data)[0];
      n++;
      sl_sample_release(s);
    }
    if (i >= 0) t[i] = now_s() - t0;
    g_sink += (uint64_t)acc;
    res.n = n;
    sl_reader_destroy(r);
  }
  res.s = median(t, g_runs);
  return res;
}

static void emit(const char *bench, const char *who, double s, uint64_t bytes,
                 uint64_t n) {
  printf("{\"bench\":\"formats\",\"case\":\"%s\",\"reader\":\"%s\","
         "\"seconds\":%.4f,\"MB_per_s\":%.1f,\"samples_per_s\":%.0f}\n",
         bench, who, s, s > 0 ? (double)bytes / 1e6 / s : 0,
         s > 0 ? (double)n / s : 0);
  fflush(stdout);
}

static pid_t nginx_start(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bind(fd, (struct sockaddr *)&a, sizeof a);
  socklen_t l = sizeof a;
  getsockname(fd, (struct sockaddr *)&a, &l);
  close(fd);
  g_port = ntohs(a.sin_port);
  char conf[512];
  snprintf(conf, sizeof conf, "%s/nginx.conf", g_dir);
  FILE *f = fopen(conf, "w");
  fprintf(f,
          "%s\nworker_processes 1;\npid %s/nginx.pid;\n"
          "error_log %s/error.log;\nevents { worker_connections 64; }\n"
          "http { access_log off; sendfile on;\n"
          "  client_body_temp_path %s; proxy_temp_path %s;\n"
          "  fastcgi_temp_path %s; uwsgi_temp_path %s; scgi_temp_path %s;\n"
          "  server { listen 127.0.0.1:%d; location / { root %s; } } }\n",
          geteuid() == 0 ? "user root;" : "", g_dir, g_dir, g_dir, g_dir, g_dir,
          g_dir, g_dir, g_port, g_dir);
  fclose(f);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/usr/sbin/nginx", "nginx", "-p", g_dir, "-c", conf, "-g",
          "daemon off;", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 500; i++) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons((uint16_t)g_port);
    bool up = connect(c, (struct sockaddr *)&a, sizeof a) == 0;
    close(c);
    if (up) return pid;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--runs") == 0) g_runs = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--dir") == 0)
      snprintf(g_dir, sizeof g_dir, "%s", argv[i + 1]);
    if (strcmp(argv[i], "--mb") == 0) g_mb = atoi(argv[i + 1]);
  }
  if (g_runs < 1 || g_runs > 15) g_runs = 3;
  bool own_dir = !g_dir[0];
  if (own_dir) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sluice-bench-formats-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
  }
  write_shards();
  write_npy();
  write_slr();
  write_tfrecord();

  /* wds vs tar -xO */
  result w1, w2;
  int one = 1, two = 2;
  w1 = time_reader(open_wds, &one);
  w2 = time_reader(open_wds, &two);
  emit("wds", "sluice wds, 1 thread", w1.s, w1.bytes, w1.n);
  emit("wds", "sluice wds, 2 threads", w2.s, w2.bytes, w2.n);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "for f in %s/shard-*.tar; do tar -xOf \"$f\" > /dev/null || exit "
           "1; done",
           g_dir);
  bool ok;
  double tar_s = time_cmd(cmd, false, &ok);
  if (ok) emit("wds", "tar -xO > /dev/null", tar_s, w1.bytes, w1.n);

  /* http vs disk */
  pid_t ng = access("/usr/sbin/nginx", X_OK) == 0 ? nginx_start() : -1;
  if (ng > 0) {
    result h1 = time_reader(open_wds_http, &one);
    result h2 = time_reader(open_wds_http, &two);
    emit("http", "sluice wds over http, 1 thread", h1.s, h1.bytes, h1.n);
    emit("http", "sluice wds over http, 2 threads", h2.s, h2.bytes, h2.n);
    emit("http", "sluice wds from disk, 1 thread", w1.s, w1.bytes, w1.n);
    /* Ranged reads: an SLR file's chunks, an .npy file's rows. */
    char url[600], disk[600];
    snprintf(url, sizeof url, "slr:http://127.0.0.1:%d/x.slr", g_port);
    snprintf(disk, sizeof disk, "%s/x.slr", g_dir);
    result su = time_reader(open_name, url);
    result sd = time_reader(open_name, disk);
    emit("http", "sluice slr over http (ranged chunks)", su.s, su.bytes, su.n);
    emit("http", "sluice slr from disk", sd.s, sd.bytes, sd.n);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/x.npy", g_port);
    snprintf(disk, sizeof disk, "%s/x.npy", g_dir);
    result nu = time_npy(url);
    result nd = time_npy(disk);
    uint64_t nb = (uint64_t)g_npy_n * NPY_D * 4;
    emit("http", "sluice npy over http (ranged rows)", nu.s, nb, nu.n);
    emit("http", "sluice npy from disk", nd.s, nb, nd.n);
    kill(ng, SIGQUIT);
    waitpid(ng, NULL, 0);
  } else {
    fprintf(stderr, "bench_formats: nginx not started: no http figures\n");
  }

  /* npy vs numpy mmap */
  char path[600];
  snprintf(path, sizeof path, "%s/x.npy", g_dir);
  result np = time_npy(path);
  emit("npy", "sluice npy", np.s, (uint64_t)g_npy_n * NPY_D * 4, np.n);
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c \"import numpy as np, time\n"
           "a = np.load('%s', mmap_mode='r')\nt = time.perf_counter()\n"
           "acc = 0.0\nfor row in a:\n    acc += row[0]\n"
           "print(time.perf_counter() - t)\"",
           path);
  double numpy_s = time_cmd(cmd, true, &ok);
  if (ok)
    emit("npy", "numpy.load(mmap_mode='r') rows", numpy_s,
         (uint64_t)g_npy_n * NPY_D * 4, (uint64_t)g_npy_n);

  /* tfrecord vs tf.data */
  snprintf(path, sizeof path, "%s/ex.tfrecord", g_dir);
  char tagged[700];
  snprintf(tagged, sizeof tagged, "tfrecord:%s", path);
  result tr = time_reader(open_name, tagged);
  result td = time_reader(open_tf_decoded, path);
  emit("tfrecord", "sluice tfrecord, raw", tr.s, tr.bytes, tr.n);
  emit("tfrecord", "sluice tfrecord, decoded", td.s, td.bytes, td.n);
  const char *home = getenv("HOME");
  char py[512];
  snprintf(py, sizeof py, "%s/%s",
           getenv("SLUICE_PEERS_VENV") ? getenv("SLUICE_PEERS_VENV")
                                       : (home ? home : "/root"),
           getenv("SLUICE_PEERS_VENV") ? "bin/python"
                                       : ".cache/sluice/peers-venv/bin/python");
  if (access(py, X_OK) == 0) {
    for (int parsed = 0; parsed < 2; parsed++) {
      snprintf(cmd, sizeof cmd,
               "TF_CPP_MIN_LOG_LEVEL=3 %s -c \"import time, tensorflow as tf\n"
               "spec = {'image': tf.io.FixedLenFeature([], tf.string),"
               " 'label': tf.io.FixedLenFeature([], tf.int64),"
               " 'x': tf.io.FixedLenFeature([8], tf.float32)}\n"
               "ds = tf.data.TFRecordDataset('%s', buffer_size=1 << 20)"
               ".batch(1024)\n%s"
               "ds = ds.prefetch(tf.data.AUTOTUNE)\n"
               "t = time.perf_counter()\nn = 0\n"
               "for b in ds:\n    n += 1\n"
               "print(time.perf_counter() - t)\" 2>/dev/null",
               py, path,
               parsed ? "ds = ds.map(lambda r: tf.io.parse_example(r, spec), "
                        "num_parallel_calls=tf.data.AUTOTUNE)\n"
                      : "");
      double s = time_cmd(cmd, true, &ok);
      if (ok)
        emit("tfrecord",
             parsed ? "tf.data.TFRecordDataset .batch(1024) + parse_example"
                    : "tf.data.TFRecordDataset .batch(1024), raw",
             s, parsed ? td.bytes : tr.bytes, tr.n);
    }
  } else {
    fprintf(stderr,
            "bench_formats: no peers venv (%s): no tf.data figures "
            "(bench/peers/setup makes it)\n",
            py);
  }
  if (own_dir) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) return 1;
  }
  return 0;
}
