/*
 * replay_main.c - runs a fuzz target without libFuzzer: every file named on
 * the command line, or found (sorted, not recursively) in a directory named
 * there, is passed once to LLVMFuzzerTestOneInput.  The normal build links
 * each fuzz/fuzz_<name>.c with this file and CTest runs it over
 * fuzz/corpus/<name>/ as the test fuzz.<name>, so the corpus - seeds and
 * every input that once found a bug - is replayed by `make test`, and under
 * ASan/UBSan by `make asan`.  A finding aborts, failing the test.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long g_inputs;

static void run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    exit(2);
  }
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      fprintf(stderr, "replay: out of memory reading %s\n", path);
      exit(2);
    }
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    cap *= 2;
    buf = realloc(buf, cap);
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    fprintf(stderr, "replay: cannot read %s\n", path);
    exit(2);
  }
  /* libFuzzer hands the target a buffer of exactly the input's size, so an
   * over-read is caught by ASan: do the same. */
  unsigned char *exact = malloc(n ? n : 1);
  if (!exact) exit(2);
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  g_inputs++;
}

static int not_hidden(const struct dirent *e) {
  return e->d_name[0] != '.';
}

static void run_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s does not exist\n", path);
    exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    run_file(path);
    return;
  }
  struct dirent **names;
  int n = scandir(path, &names, not_hidden, alphasort);
  if (n < 0) {
    fprintf(stderr, "replay: cannot list %s\n", path);
    exit(2);
  }
  for (int i = 0; i < n; i++) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
    if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) run_file(full);
    free(names[i]);
  }
  free(names);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; i++)
    run_path(argv[i]);
  printf("replayed %ld inputs\n", g_inputs);
  /* An empty corpus would make the test pass while checking nothing. */
  return g_inputs > 0 ? 0 : 1;
}
