/* test_main.c - runs the TESTs of one test executable, under a watchdog. */
#include "test.h"

#include <signal.h>
#include <stdarg.h>
#include <unistd.h>

#define MAX_TESTS 512

static struct {
  const char *name;
  test_fn fn;
} g_tests[MAX_TESTS];
static int g_ntests;
static const char *g_current = "?";

void test_register(const char *name, test_fn fn) {
  if (g_ntests == MAX_TESTS) {
    fprintf(stderr, "too many tests\n");
    exit(2);
  }
  g_tests[g_ntests].name = name;
  g_tests[g_ntests].fn = fn;
  g_ntests++;
}

void test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "FAIL %s\n  %s:%d: ", g_current, file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  exit(1);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: watchdog expired, the test hung\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(3);
}

static void run(int i) {
  g_current = g_tests[i].name;
  sl_clear_error();
  g_tests[i].fn();
  printf("ok   %s\n", g_current);
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *t = getenv("SLUICE_TEST_TIMEOUT");
  unsigned timeout = t ? (unsigned)atoi(t) : 240;
  signal(SIGALRM, on_alarm);
  alarm(timeout);
  if (argc < 2) {
    for (int i = 0; i < g_ntests; i++)
      run(i);
    printf("%d tests passed\n", g_ntests);
    return 0;
  }
  if (strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < g_ntests; i++)
      printf("%s\n", g_tests[i].name);
    return 0;
  }
  for (int a = 1; a < argc; a++) {
    int found = 0;
    for (int i = 0; i < g_ntests; i++)
      if (strcmp(g_tests[i].name, argv[a]) == 0) {
        run(i);
        found = 1;
      }
    if (!found) {
      fprintf(stderr, "no test named '%s'\n", argv[a]);
      return 2;
    }
  }
  return 0;
}
