/*
 * http.c - whole objects over HTTP(S) with libcurl (http.h).
 *
 * One easy handle per thread (a pthread key frees it when the thread
 * ends), reset between requests but kept, so libcurl reuses its
 * connection to the same host.  A request is retried, after a backoff
 * that doubles from SLUICE_HTTP_BACKOFF_MS (default 100 ms) for at most
 * SLUICE_HTTP_RETRIES (default 5) retries, when the transfer fails (a
 * refused or dropped connection, a timeout, a body cut short) or the
 * status is 429 or 5xx; a body cut short is resumed with "Range:
 * bytes=GOT-" (a server answering 200 to it restarts from the first byte).
 * A 4xx other than 429 is the caller's error at once: SL_EIO naming the
 * URL and the status.
 *
 * libcurl is optional (CMakeLists.txt, Debian's libcurl4-openssl-dev):
 * without it SLUICE_HAVE_CURL is unset and every URL is SL_EUNSUPPORTED,
 * saying so.
 */
#include "io/http.h"

#include <stdatomic.h>
#include <stdlib.h>

bool sl__is_url(const char *path) {
  return path && (strncmp(path, "http://", 7) == 0 ||
                  strncmp(path, "https://", 8) == 0);
}

static atomic_uint_fast64_t g_requests, g_retries;

void sl__http_counts(uint64_t *requests, uint64_t *retries) {
  *requests = atomic_load(&g_requests);
  *retries = atomic_load(&g_retries);
}

#if SLUICE_HAVE_CURL
#include <curl/curl.h>
#include <pthread.h>
#include <time.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int g_init_rc;

static void free_handle(void *h) {
  curl_easy_cleanup(h);
}

static void init_once(void) {
  g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK &&
                      pthread_key_create(&g_key, free_handle) == 0
                  ? SL_OK
                  : SL_ENOMEM;
}

static CURL *thread_handle(void) {
  CURL *h = pthread_getspecific(g_key);
  if (!h) {
    h = curl_easy_init();
    if (h && pthread_setspecific(g_key, h) != 0) {
      curl_easy_cleanup(h);
      h = NULL;
    }
  }
  return h;
}

typedef struct body {
  unsigned char *p;
  size_t n, cap;
  bool oom;
} body;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud) {
  body *b = ud;
  size_t k = size * nmemb;
  if (b->n + k > b->cap) {
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + k)
      cap *= 2;
    unsigned char *p = sl__realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return 0; /* aborts the transfer */
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, ptr, k);
  b->n += k;
  return k;
}

static void free_body(void *ud, void *data) {
  (void)ud;
  sl__free(data);
}

static long env_long(const char *name, long dflt, long lo, long hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  return *end || x < lo || x > hi ? dflt : x;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static bool retryable(CURLcode c) {
  return c == CURLE_COULDNT_CONNECT || c == CURLE_RECV_ERROR ||
         c == CURLE_SEND_ERROR || c == CURLE_PARTIAL_FILE ||
         c == CURLE_OPERATION_TIMEDOUT || c == CURLE_GOT_NOTHING ||
         c == CURLE_COULDNT_RESOLVE_HOST;
}

int sl__http_get(const char *stage, const char *url, sl_buffer **out) {
  *out = NULL;
  pthread_once(&g_once, init_once);
  SL_RETURN_ERROR_IF(g_init_rc < 0, SL_ENOMEM, "%s: %s: libcurl init failed",
                     stage, url);
  CURL *h = thread_handle();
  SL_RETURN_ERROR_IF(!h, SL_ENOMEM, "%s: %s: cannot make a libcurl handle",
                     stage, url);
  long retries = env_long("SLUICE_HTTP_RETRIES", 5, 0, 100);
  long backoff = env_long("SLUICE_HTTP_BACKOFF_MS", 100, 0, 60000);
  body b = {0};
  int rc = SL_OK;
  char err[CURL_ERROR_SIZE];
  for (long attempt = 0;; attempt++) {
    curl_easy_reset(h);
    err[0] = 0;
    char range[64];
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    /* A stalled transfer (under 1 KB/s for 30 s) is a dropped one. */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
    size_t resume = b.n;
    if (resume) {
      snprintf(range, sizeof range, "%zu-", resume);
      curl_easy_setopt(h, CURLOPT_RANGE, range);
    }
    atomic_fetch_add(&g_requests, 1);
    CURLcode c = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (b.oom) {
      rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory after %zu bytes",
                        stage, url, b.n);
      break;
    }
    if (c == CURLE_OK && resume && status == 200) {
      /* The server ignored the range: the body is whole, from byte 0. */
      memmove(b.p, b.p + resume, b.n - resume);
      b.n -= resume;
    }
    if (c == CURLE_OK && (status == 200 || status == 206)) break;
    bool again = c == CURLE_OK ? status == 429 || status >= 500 : retryable(c);
    if (c == CURLE_OK && status != 200 && status != 206) b.n = resume;
    if (!again || attempt >= retries) {
      if (c == CURLE_OK)
        rc = sl_set_error(SL_EIO, "%s: GET %s: HTTP %ld%s", stage, url, status,
                          again ? " (retries spent)" : "");
      else
        rc = sl_set_error(SL_EIO, "%s: GET %s: %s%s", stage, url,
                          err[0] ? err : curl_easy_strerror(c),
                          again ? " (retries spent)" : "");
      break;
    }
    atomic_fetch_add(&g_retries, 1);
    sleep_ms(backoff << (attempt < 16 ? attempt : 16));
  }
  if (rc == SL_OK) {
    /* The body's memory becomes the buffer (sl__malloc(0) is unique). */
    if (!b.p) b.p = sl__malloc(0);
    *out = b.p ? sl_buffer_wrap(b.p, b.n, free_body, NULL) : NULL;
    if (*out) return SL_OK;
    rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, url);
  }
  sl__free(b.p);
  return rc;
}

#else /* !SLUICE_HAVE_CURL */

int sl__http_get(const char *stage, const char *url, sl_buffer **out) {
  *out = NULL;
  return sl_set_error(SL_EUNSUPPORTED,
                      "%s: %s: this libsluice was built without libcurl "
                      "(apt-get install libcurl4-openssl-dev, then rebuild)",
                      stage, url);
}

#endif
