/*
 * bench_slr_frames.c - framed SLR chunks with a zstd dictionary (issue 28,
 * docs/PERFORMANCE.md "Small frames with a dictionary"): compression ratio,
 * sequential decode rate and the time of one random record read.
 *
 *   bench_slr_frames (--slr FILE | --stanzas FILE) [--out DIR] [--runs N]
 *                    [--level L] [--frame-level L] [--frame-records N]
 *                    [--dict-size B] [--dict-sample B] [--compact 0|1]
 *                    [--fetches N]
 *
 * The records come from an SLR file (e.g. build/data/train.slr, Fashion-
 * MNIST's 785-byte records) or from a text file split at blank lines, one
 * record {text: bytes} per paragraph (`apt-cache dumpavail`: one Debian
 * package description per record, ~0.8 KB).  They are written three times
 * under --out (default /tmp): whole 1 MiB chunks (SLR 1.0), frames of about
 * 4 KiB without a dictionary, and the same frames with a dictionary trained
 * in-process (sl_slr_writer_set_frames, SL_SLR_DICT_AUTO); --compact 1
 * writes both framed files as compact framed chunks (codec 3).  --level
 * sets the zstd level of the whole-chunk file (default 3), --frame-level
 * that of both framed files (default: --level when given, else
 * SL_SLR_DICT_LEVEL, the writer's default for a file with a dictionary).
 * Then:
 *
 *   ratio        the whole-chunk file's raw payload bytes / each file's size
 *                (frame tables, zstd frame headers and the dictionary
 *                counted); targets: dict >= 0.9 x whole, >= 1.4 x no-dict
 *   seq rec/s    every record through sl_slr_reader, 1 thread, median of
 *                --runs; target: framed >= 0.9 x whole
 *   fetch us     sl_slr_fetch of --fetches records drawn at random (a
 *                frame cache of 4 over thousands of frames: cold), the file
 *                in the page cache; target <= 3 us
 *
 * JSON lines on stdout, a table on stderr.
 */
#define BENCH_NAME "bench_slr_frames"
#include "bench_util.h"
#include "sluice.h"

#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

static const char *g_out = "/tmp";

/* Every record of the input, in order, as samples (retained). */
typedef struct input {
  sl_schema *schema;
  sl_sample **rec;
  size_t n, cap;
} input;

static void push(input *in, sl_sample *s) {
  if (in->n == in->cap) {
    in->cap = in->cap ? in->cap * 2 : 1024;
    in->rec = realloc(in->rec, in->cap * sizeof *in->rec);
    if (!in->rec) abort();
  }
  in->rec[in->n++] = s;
}

static void load_slr(input *in, const char *path) {
  sl_reader *r;
  CHECK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &r));
  in->schema = sl_schema_retain((sl_schema *)sl_reader_schema(r));
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK)
    push(in, s);
  if (rc != SL_EOF) CHECK(rc);
  sl_reader_destroy(r);
}

static void load_stanzas(input *in, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  in->schema = sl_schema_new();
  CHECK(sl_schema_add(in->schema, "text", SL_BYTES, 1,
                      (int64_t[]){SL_DIM_VAR}));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  char line[65536];
  for (bool more = true; more;) {
    more = fgets(line, sizeof line, f) != NULL;
    size_t l = more ? strlen(line) : 0;
    if (!more || (l == 1 && line[0] == '\n')) {
      if (len) {
        sl_sample *s = sl_sample_new(in->schema);
        void *p;
        int64_t n = (int64_t)len;
        CHECK(sl_sample_alloc(s, 0, 1, &n, &p));
        memcpy(p, buf, len);
        push(in, s);
      }
      len = 0;
      continue;
    }
    if (len + l > cap) {
      cap = (len + l) * 2;
      buf = realloc(buf, cap);
      if (!buf) abort();
    }
    memcpy(buf + len, line, l);
    len += l;
  }
  free(buf);
  fclose(f);
}

static uint64_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Writes every record to path; returns seconds. */
static double write_file(const input *in, const char *path, int level,
                         const sl_slr_frame_opts *fo) {
  double t0 = now_s();
  sl_slr_writer *w;
  sl_slr_writer_opts o = {.level = level};
  CHECK(sl_slr_writer_open(path, in->schema, &o, &w));
  if (fo) CHECK(sl_slr_writer_set_frames(w, fo));
  for (size_t i = 0; i < in->n; i++)
    CHECK(sl_slr_writer_append(w, in->rec[i]));
  CHECK(sl_slr_writer_close(w));
  return now_s() - t0;
}

/* Sum of the chunks' raw sizes. */
static uint64_t raw_bytes(const char *path) {
  sl_slr_file *f;
  CHECK(sl_slr_open(path, NULL, &f));
  uint64_t raw = 0;
  for (uint64_t c = 0; c < sl_slr_chunks(f); c++) {
    sl_slr_chunk_info ci;
    CHECK(sl_slr_chunk_info_get(f, c, &ci));
    raw += ci.raw_size;
  }
  sl_slr_close(f);
  return raw;
}

/* Records per second of one sequential pass, wall clock; per second of
 * the process's CPU time in *cpu_rps (what a loaded machine inflates
 * less). */
static double seq_rate(const char *path, double *cpu_rps) {
  sl_reader *r;
  CHECK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &r));
  double t0 = now_s(), c0 = cpu_s();
  uint64_t n = 0;
  sl_sample *s;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    n++;
    sl_sample_release(s);
  }
  double dt = now_s() - t0;
  *cpu_rps = (double)n / (cpu_s() - c0);
  if (rc != SL_EOF) CHECK(rc);
  sl_reader_destroy(r);
  return (double)n / dt;
}

/* Microseconds per sl_slr_fetch of a random record (sample released), wall
 * clock; the process's CPU microseconds per fetch in *cpu_us (what a busy
 * machine does not inflate). */
static double fetch_us(const char *path, int fetches, uint64_t seed,
                       double *cpu_us) {
  sl_slr_file *f;
  CHECK(sl_slr_open(path, NULL, &f));
  uint64_t n = sl_slr_records(f), st = seed;
  uint64_t *k = malloc((size_t)fetches * sizeof *k);
  for (int i = 0; i < fetches; i++)
    k[i] = bench_splitmix64(&st) % n;
  double t0 = now_s(), c0 = cpu_s();
  for (int i = 0; i < fetches; i++) {
    sl_sample *s;
    CHECK(sl_slr_fetch(f, k[i], &s));
    sl_sample_release(s);
  }
  double dt = now_s() - t0;
  *cpu_us = (cpu_s() - c0) * 1e6 / fetches;
  free(k);
  sl_slr_close(f);
  return dt * 1e6 / fetches;
}

int main(int argc, char **argv) {
  const char *slr = NULL, *stanzas = NULL;
  int runs = 5, level = 0, frame_level = -1, fetches = 200000;
  sl_slr_frame_opts dict = {.dict = SL_SLR_DICT_AUTO};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "%s: %s wants a value\n", BENCH_NAME, a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--slr"))
      slr = v;
    else if (!strcmp(a, "--stanzas"))
      stanzas = v;
    else if (!strcmp(a, "--out"))
      g_out = v;
    else if (!strcmp(a, "--runs"))
      runs = atoi(v);
    else if (!strcmp(a, "--level"))
      level = atoi(v);
    else if (!strcmp(a, "--frame-level"))
      frame_level = atoi(v);
    else if (!strcmp(a, "--fetches"))
      fetches = atoi(v);
    else if (!strcmp(a, "--frame-records"))
      dict.frame_records = (uint32_t)atoi(v);
    else if (!strcmp(a, "--dict-size"))
      dict.dict_max_bytes = (size_t)atol(v);
    else if (!strcmp(a, "--dict-sample"))
      dict.dict_sample_bytes = (size_t)atol(v);
    else if (!strcmp(a, "--compact"))
      dict.compact = atoi(v);
    else {
      fprintf(stderr, "%s: unknown option %s\n", BENCH_NAME, a);
      return 2;
    }
  }
  if (!slr == !stanzas || runs < 1 || fetches < 1) {
    fprintf(stderr,
            "usage: %s (--slr FILE | --stanzas FILE) [--out DIR] [--runs N] "
            "[--level L] [--frame-level L] [--frame-records N] [--dict-size B] "
            "[--dict-sample B] [--compact 0|1] [--fetches N]\n",
            BENCH_NAME);
    return 2;
  }
  input in = {0};
  if (slr)
    load_slr(&in, slr);
  else
    load_stanzas(&in, stanzas);
  const char *data = slr ? slr : stanzas;
  char whole[1024], plain[1024], framed[1024];
  snprintf(whole, sizeof whole, "%s/bench_frames_whole.slr", g_out);
  snprintf(plain, sizeof plain, "%s/bench_frames_nodict.slr", g_out);
  snprintf(framed, sizeof framed, "%s/bench_frames_dict.slr", g_out);
  /* Unless given, the writer's defaults: 3 for whole chunks, and for both
   * framed files the level of a file with a dictionary (the frames without
   * one at the same level, for a fair quotient). */
  if (frame_level < 0) frame_level = level ? level : SL_SLR_DICT_LEVEL;
  if (level == 0) level = 3;
  double tw = write_file(&in, whole, level, NULL);
  double td = write_file(&in, framed, frame_level, &dict);
  /* The same frame size without a dictionary. */
  sl_slr_file *f;
  CHECK(sl_slr_open(framed, NULL, &f));
  uint32_t per = 0, nfr = 0;
  CHECK(sl_slr_chunk_frames(f, 0, &per, &nfr));
  uint64_t dict_bytes = sl_slr_dict_size(f);
  sl_slr_close(f);
  sl_slr_frame_opts nodict = {.frame_records = per, .compact = dict.compact};
  double tp = write_file(&in, plain, frame_level, &nodict);
  uint64_t raw = raw_bytes(whole), record_bytes = 0;
  for (size_t i = 0; i < in.n; i++)
    for (int k = 0; k < sl_sample_nfields(in.rec[i]); k++)
      record_bytes += sl_sample_at_const(in.rec[i], k)->nbytes;
  double rw = (double)raw / (double)file_size(whole),
         rp = (double)raw / (double)file_size(plain),
         rd = (double)raw / (double)file_size(framed);
  double *sw = calloc((size_t)runs, sizeof *sw),
         *sd = calloc((size_t)runs, sizeof *sd),
         *fd = calloc((size_t)runs, sizeof *fd),
         *fw = calloc((size_t)runs, sizeof *fw),
         *fc = calloc((size_t)runs, sizeof *fc),
         *cw = calloc((size_t)runs, sizeof *cw),
         *cd = calloc((size_t)runs, sizeof *cd);
  double unused;
  for (int r = 0; r < runs; r++) { /* interleaved */
    sw[r] = seq_rate(whole, &cw[r]);
    sd[r] = seq_rate(framed, &cd[r]);
    fd[r] = fetch_us(framed, fetches, 1000 + (uint64_t)r, &fc[r]);
    fw[r] = fetch_us(whole, fetches / 100 + 1, 2000 + (uint64_t)r, &unused);
  }
  double msw = median(sw, runs), msd = median(sd, runs),
         mfd = median(fd, runs), mfw = median(fw, runs),
         mfc = median(fc, runs), mcw = median(cw, runs),
         mcd = median(cd, runs);
  printf("{\"bench\":\"slr_frames\",\"data\":\"%s\",\"records\":%zu,"
         "\"avg_record_bytes\":%.1f,\"level\":%d,\"frame_level\":%d,"
         "\"frame_records\":%u,"
         "\"compact\":%d,\"dict_bytes\":%llu,\"ratio_whole\":%.4f,\"ratio_frames\":%.4f,"
         "\"ratio_frames_dict\":%.4f,\"dict_vs_whole\":%.4f,"
         "\"dict_vs_frames\":%.4f,\"seq_whole_rps\":%.0f,"
         "\"seq_framed_rps\":%.0f,\"seq_framed_vs_whole\":%.4f,"
         "\"seq_whole_cpu_rps\":%.0f,\"seq_framed_cpu_rps\":%.0f,"
         "\"seq_framed_vs_whole_cpu\":%.4f,"
         "\"fetch_us\":%.3f,\"fetch_cpu_us\":%.3f,"
         "\"fetch_whole_chunk_us\":%.1f,"
         "\"write_whole_s\":%.2f,\"write_frames_s\":%.2f,"
         "\"write_dict_s\":%.2f,\"runs\":%d}\n",
         data, in.n, (double)record_bytes / (double)in.n, level, frame_level,
         per, dict.compact, (unsigned long long)dict_bytes, rw, rp, rd, rd / rw,
         rd / rp, msw, msd, msd / msw, mcw, mcd, mcd / mcw, mfd, mfc, mfw, tw,
         tp, td, runs);
  fprintf(stderr,
          "%s: %zu records of %.0f B, level %d (frames %d), %u per frame, "
          "dictionary "
          "%llu B\n"
          "  ratio        whole %.3f  frames %.3f  frames+dict %.3f  "
          "(dict/whole %.3f, dict/frames %.3f)\n"
          "  seq rec/s    whole %.0f  framed+dict %.0f  (%.3f); per CPU "
          "second %.0f, %.0f (%.3f)\n"
          "  fetch        %.2f us/record, %.2f us of CPU (whole-chunk file: "
          "%.1f us)\n"
          "  write s      whole %.2f  frames %.2f  frames+dict %.2f\n",
          data, in.n, (double)record_bytes / (double)in.n, level, frame_level,
          per, (unsigned long long)dict_bytes, rw, rp, rd, rd / rw, rd / rp, msw,
          msd, msd / msw, mcw, mcd, mcd / mcw, mfd, mfc, mfw, tw, tp, td);
  for (size_t i = 0; i < in.n; i++)
    sl_sample_release(in.rec[i]);
  free(in.rec);
  sl_schema_release(in.schema);
  free(sw);
  free(sd);
  free(fd);
  free(fw);
  free(fc);
  free(cw);
  free(cd);
  if (!getenv("BENCH_KEEP")) { /* BENCH_KEEP=1: for profiling */
    remove(whole);
    remove(plain);
    remove(framed);
  }
  return 0;
}
