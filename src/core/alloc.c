/*
 * alloc.c - the library's allocator entry points and the fault-injection
 * hook used by the reliability tests (fail the N-th allocation).
 */
#include "internal.h"

#include <stdlib.h>

/* Remaining successful allocations before failures start; < 0 = never fail.
 * Relaxed atomics: the hook is for single-threaded fault loops, the atomics
 * only keep multi-threaded runs free of data races. */
static atomic_long g_fail_after = -1;
static atomic_long g_count = 0;
/* The largest single request since the last sl__alloc_largest call: the
 * memory-limit tests check that hostile sizes are refused before anything of
 * their size is asked for. */
static atomic_size_t g_largest = 0;

size_t sl__alloc_largest(void) {
  return atomic_exchange_explicit(&g_largest, 0, memory_order_relaxed);
}

static void note_size(size_t size) {
  size_t cur = atomic_load_explicit(&g_largest, memory_order_relaxed);
  while (size > cur &&
         !atomic_compare_exchange_weak_explicit(&g_largest, &cur, size,
                                                memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

long sl__alloc_fail_after(long n) {
  long made = atomic_exchange_explicit(&g_count, 0, memory_order_relaxed);
  atomic_store_explicit(&g_fail_after, n, memory_order_relaxed);
  return made;
}

static bool should_fail(void) {
  atomic_fetch_add_explicit(&g_count, 1, memory_order_relaxed);
  long left = atomic_load_explicit(&g_fail_after, memory_order_relaxed);
  if (left < 0) return false;
  if (left == 0) return true;
  atomic_fetch_sub_explicit(&g_fail_after, 1, memory_order_relaxed);
  return false;
}

void *sl__malloc(size_t size) {
  note_size(size);
  if (should_fail()) return NULL;
  return malloc(size ? size : 1);
}

void *sl__calloc(size_t n, size_t size) {
  note_size(size && n > SIZE_MAX / size ? SIZE_MAX : n * size);
  if (should_fail()) return NULL;
  if (n == 0 || size == 0) return calloc(1, 1);
  return calloc(n, size);
}

void *sl__realloc(void *p, size_t size) {
  note_size(size);
  if (should_fail()) return NULL;
  return realloc(p, size ? size : 1);
}

void *sl__aligned_alloc(size_t align, size_t size) {
  note_size(size);
  if (should_fail()) return NULL;
  void *p = NULL;
  if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
  return p;
}

void sl__free(void *p) {
  free(p);
}

void sl__free_n(void *const *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    sl__free(p[i]);
}

char *sl__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = sl__malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}
