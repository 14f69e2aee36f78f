/*
 * bench_image.c - image decoding throughput: sluice's image reader (the
 * parallel decode stage over TurboJPEG) with 1 and 2 threads against
 * libjpeg-turbo's own `djpeg` (libjpeg-turbo-progs) decoding the same
 * files, one process per file, 1 and 2 at a time.
 *
 * The files: N_FILES JPEGs of 1008 x 1008 RGB, quality 90, 4:2:0, made here
 * from a mosaic of 36 x 36 Fashion-MNIST images, each tile tinted
 * differently (so the chroma planes carry information).  Large images keep
 * djpeg's process start-up (measured separately on an 8 x 8 JPEG, and
 * reported) a small part of its time.  Both sides use the accurate integer
 * IDCT and fancy upsampling (the defaults of both), and both read the files
 * from the page cache (one untimed warm-up pass first).  djpeg writes its
 * PPM to /dev/null.
 *
 * Figures: images/s and encoded MB/s, the median of RUNS timed passes each,
 * with the CPU time per image and the CPUs kept busy (CPU time / wall
 * time): on a shared guest the wall-clock speed-up of 2 threads is at most
 * what the host gives, while CPU time per image shows whether the second
 * thread adds work (locks, copies, waiting) of its own.  djpeg's own 2-at-a-time / 1-at-a-time ratio, measured in the same run on
 * the same files, is the ceiling for sluice's 2-thread speed-up on a shared
 * machine (the same work, the CPUs the guest gives at that moment).
 *
 *   build/bench_image [N_FILES] [RUNS]     (defaults 32 and 5)
 */
#include "bench_util.h"

#include "../tests/image_fixture.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define SIDE 1008 /* 36 tiles of 28 */

static void die(const char *what) {
  fprintf(stderr, "bench_image: %s: %s\n", what, sl_last_error());
  exit(1);
}

/* Runs djpeg on files[i] for i in [0, n), `par` processes at a time. */
static void run_djpeg(char **files, int n, int par) {
  pid_t pids[8];
  int running = 0, next = 0;
  while (next < n || running > 0) {
    while (running < par && next < n) {
      char *argv[] = {"djpeg", "-outfile", "/dev/null", files[next], NULL};
      if (posix_spawnp(&pids[running], "djpeg", NULL, NULL, argv, environ) !=
          0) {
        fprintf(stderr, "bench_image: cannot run djpeg (apt-get install "
                        "libjpeg-turbo-progs)\n");
        exit(1);
      }
      running++;
      next++;
    }
    int st;
    pid_t done = wait(&st);
    if (done < 0) break;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "bench_image: djpeg failed\n");
      exit(1);
    }
    for (int i = 0; i < running; i++)
      if (pids[i] == done) {
        pids[i] = pids[--running];
        break;
      }
  }
}

/* CPU seconds (user + system) used by the waited-for children. */
static double children_cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_CHILDREN, &u);
  return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
         (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

static double sluice_pass(const char *dir, uint32_t threads, int expect) {
  sl_image_opts o = SL_IMAGE_OPTS_INIT;
  o.threads = threads;
  sl_reader *r;
  double t0 = now_s();
  if (sl_image_reader(dir, &o, &r) < 0) die("image reader");
  sl_sample *s;
  int n = 0, rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    n++;
    sl_sample_release(s);
  }
  if (rc != SL_EOF) die("decode");
  sl_reader_destroy(r);
  double dt = now_s() - t0;
  if (n != expect) {
    fprintf(stderr, "bench_image: %d images, expected %d\n", n, expect);
    exit(1);
  }
  return dt;
}

int main(int argc, char **argv) {
  int nfiles = argc > 1 ? atoi(argv[1]) : 32;
  int runs = argc > 2 ? atoi(argv[2]) : 5;
  if (nfiles < 1 || runs < 1 || runs > 99) {
    fprintf(stderr, "usage: %s [N_FILES] [RUNS]\n", argv[0]);
    return 2;
  }
  fix_fmnist f;
  if (fix_fmnist_load(FIX_FMNIST_DIR, 36 * 36, &f) < 0) return 1;
  char dir[] = "/tmp/sluice-bench-image-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char sub[64];
  snprintf(sub, sizeof sub, "%s/img", dir);
  mkdir(sub, 0777);
  uint8_t *rgb = malloc((size_t)SIDE * SIDE * 3);
  char **files = calloc((size_t)nfiles, sizeof *files);
  double enc_bytes = 0;
  for (int k = 0; k < nfiles; k++) {
    for (int ty = 0; ty < 36; ty++)
      for (int tx = 0; tx < 36; tx++) {
        const uint8_t *img =
            f.pixels + (size_t)((ty * 36 + tx + k * 7) % (36 * 36)) * 784;
        int tint = (ty * 36 + tx + k) % 6;
        for (int y = 0; y < 28; y++)
          for (int x = 0; x < 28; x++) {
            uint8_t v = img[y * 28 + x];
            uint8_t *p = rgb + (((size_t)ty * 28 + y) * SIDE + tx * 28 + x) * 3;
            p[0] = (uint8_t)(tint & 1 ? v : v / 2);
            p[1] = (uint8_t)(tint & 2 ? v : 255 - v);
            p[2] = (uint8_t)(tint & 4 ? v / 3 : v);
          }
      }
    size_t n;
    tjhandle tj = tjInitCompress();
    unsigned char *buf = NULL;
    unsigned long len = 0;
    if (tjCompress2(tj, rgb, SIDE, 0, SIDE, TJPF_RGB, &buf, &len, TJSAMP_420,
                    90, 0) < 0)
      return 1;
    tjDestroy(tj);
    n = len;
    char p[128];
    snprintf(p, sizeof p, "%s/%03d.jpg", sub, k);
    if (fix_write(p, buf, n) < 0) return 1;
    tjFree(buf);
    files[k] = strdup(p);
    enc_bytes += (double)n;
  }
  /* A tiny JPEG: djpeg's cost per process that is not decoding. */
  uint8_t tiny[8 * 8 * 3] = {0};
  size_t tn = 0;
  void *tb = fix_jpeg_encode(tiny, 8, 8, 3, 90, &tn);
  char tiny_path[128];
  snprintf(tiny_path, sizeof tiny_path, "%s/tiny.jpg", dir);
  fix_write(tiny_path, tb, tn);
  free(tb);
  char **tiny_files = calloc((size_t)nfiles, sizeof *tiny_files);
  for (int k = 0; k < nfiles; k++)
    tiny_files[k] = tiny_path;

  printf("bench_image: %d JPEGs of %dx%d RGB (q90, 4:2:0), %.1f MB encoded, "
         "%.1f MB decoded; median of %d runs\n",
         nfiles, SIDE, SIDE, enc_bytes / 1e6,
         (double)nfiles * SIDE * SIDE * 3 / 1e6, runs);
  /* Warm-up: page cache, both decoders' code. */
  sluice_pass(sub, 2, nfiles);
  run_djpeg(files, nfiles, 2);

  /* Wall time per pass, and the CPU time it used (this process for
   * sluice, the djpeg children for djpeg). */
  double t[5][99], c[5][99];
  for (int r = 0; r < runs; r++) {
    for (int i = 0; i < 5; i++) {
      double c0 = i < 2 ? cpu_s() : children_cpu_s(), t0 = now_s();
      if (i < 2)
        sluice_pass(sub, (uint32_t)i + 1, nfiles);
      else
        run_djpeg(i == 4 ? tiny_files : files, nfiles, i == 3 ? 2 : 1);
      t[i][r] = now_s() - t0;
      c[i][r] = (i < 2 ? cpu_s() : children_cpu_s()) - c0;
    }
  }
  const char *names[5] = {
      "sluice image reader, 1 thread", "sluice image reader, 2 threads",
      "djpeg, 1 process at a time", "djpeg, 2 processes at a time",
      "djpeg start-up only (8x8 file)"};
  double med[5];
  printf("%-34s %10s %10s %10s %12s %10s\n", "", "images/s", "MB/s",
         "ms/image", "CPU ms/image", "CPUs busy");
  for (int i = 0; i < 5; i++) {
    med[i] = median(t[i], runs);
    double busy[99];
    for (int r = 0; r < runs; r++)
      busy[r] = c[i][r] / t[i][r];
    double cpu = median(c[i], runs);
    printf("%-34s %10.1f %10.1f %10.2f %12.2f %10.2f\n", names[i],
           nfiles / med[i], i == 4 ? 0.0 : enc_bytes / 1e6 / med[i],
           med[i] * 1e3 / nfiles, cpu * 1e3 / nfiles, median(busy, runs));
  }
  double djpeg_decode = med[2] - med[4];
  printf("djpeg decode alone (start-up subtracted): %.1f images/s\n",
         nfiles / djpeg_decode);
  printf("ratios: sluice 1 thread / djpeg = %.2f (%.2f against djpeg "
         "without start-up); 2 threads / 1 thread = %.2f; djpeg 2 / 1 at a "
         "time = %.2f\n",
         med[2] / med[0], djpeg_decode / med[0], med[0] / med[1],
         med[2] / med[3]);

  for (int k = 0; k < nfiles; k++) {
    unlink(files[k]);
    free(files[k]);
  }
  unlink(tiny_path);
  rmdir(sub);
  rmdir(dir);
  free(files);
  free(tiny_files);
  free(rgb);
  fix_fmnist_free(&f);
  return 0;
}
