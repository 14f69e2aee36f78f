/*
 * http.c - objects and byte ranges over HTTP(S) with libcurl (http.h).
 *
 * One easy handle per thread (a pthread key frees it when the thread
 * ends), reset between requests but kept, so libcurl reuses its
 * connection to the same host.  Every request - a whole object or a range -
 * goes through one loop, fetch(): it is retried, after a backoff that
 * doubles from SLUICE_HTTP_BACKOFF_MS (default 100 ms) for at most
 * SLUICE_HTTP_RETRIES (default 5) retries, when the transfer fails (a
 * refused or dropped connection, a timeout, a body cut short) or the
 * status is 429 or 5xx; a body cut short is resumed with "Range:
 * bytes=GOT-END" (a server answering 200 to it restarts from the first
 * byte: the body is then the whole object).  A 4xx other than 429 is the
 * caller's error at once: SL_EIO naming the URL and the status (and S3's
 * error <Code> when the body has one).
 *
 * An s3:// name is resolved by s3.c to an HTTP(S) URL and credentials for
 * every request, and signed by libcurl (CURLOPT_AWS_SIGV4).
 *
 * libcurl is optional (CMakeLists.txt, Debian's libcurl4-openssl-dev):
 * without it SLUICE_HAVE_CURL is unset and every URL is SL_EUNSUPPORTED,
 * saying so.
 */
#include "io/http.h"
#include "io/s3.h"

#include <stdatomic.h>
#include <stdlib.h>

bool sl__is_url(const char *path) {
  return path && (strncmp(path, "http://", 7) == 0 ||
                  strncmp(path, "https://", 8) == 0 || sl__is_s3(path));
}

static atomic_uint_fast64_t g_requests, g_retries, g_bytes;

void sl__http_counts(uint64_t *requests, uint64_t *retries) {
  *requests = atomic_load(&g_requests);
  *retries = atomic_load(&g_retries);
}

uint64_t sl__http_bytes(void) {
  return atomic_load(&g_bytes);
}

#if SLUICE_HAVE_CURL
#include <curl/curl.h>
#include <pthread.h>
#include <strings.h>
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
  atomic_fetch_add(&g_bytes, k);
  return k;
}

/* The headers of one response that fetch() needs. */
typedef struct heads {
  uint64_t range_first, total; /* Content-Range; UINT64_MAX when absent */
  char etag[128];
} heads;

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  heads *h = ud;
  size_t n = size * nmemb;
  char line[256];
  size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
  memcpy(line, p, k);
  line[k] = 0;
  line[strcspn(line, "\r\n")] = 0;
  if (strncmp(line, "HTTP/", 5) == 0) { /* a new response (a redirect's) */
    h->range_first = h->total = UINT64_MAX;
    h->etag[0] = 0;
  } else if (strncasecmp(line, "Content-Range:", 14) == 0) {
    /* "bytes FIRST-LAST/TOTAL" or "bytes * /TOTAL" (416) */
    const char *v = line + 14;
    while (*v == ' ')
      v++;
    if (strncasecmp(v, "bytes ", 6) == 0) v += 6;
    if (*v >= '0' && *v <= '9') h->range_first = strtoull(v, NULL, 10);
    const char *slash = strchr(v, '/');
    if (slash && slash[1] >= '0' && slash[1] <= '9')
      h->total = strtoull(slash + 1, NULL, 10);
  } else if (strncasecmp(line, "ETag:", 5) == 0) {
    const char *v = line + 5;
    while (*v == ' ')
      v++;
    snprintf(h->etag, sizeof h->etag, "%s", v);
  }
  return n;
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

/* S3's error code in an XML error body ("<Code>NoSuchKey</Code>"), for
 * messages; "" when there is none. */
static void error_code(const body *b, size_t from, char *out, size_t cap) {
  out[0] = 0;
  if (b->n <= from || b->n - from > 65536) return;
  char *txt = sl__malloc(b->n - from + 1);
  if (!txt) return;
  memcpy(txt, b->p + from, b->n - from);
  txt[b->n - from] = 0;
  const char *c = strstr(txt, "<Code>");
  const char *e = c ? strstr(c, "</Code>") : NULL;
  if (c && e && e - c - 6 < 64)
    snprintf(out, cap, ": %.*s", (int)(e - c - 6), c + 6);
  sl__free(txt);
}

/*
 * The one request loop.  Fetches bytes [from, to] (to = UINT64_MAX: to the
 * end; from = 0 and to = UINT64_MAX send no Range at first) of `name` into
 * b, which must start empty.  On SL_OK, m->whole says that b holds the
 * whole object from byte 0 (a 200), else b holds bytes from `from` (a 206),
 * or nothing (416).  `name` is what messages say: the s3:// name, with the
 * URL it maps to.
 */
static int fetch(const char *stage, const char *name, uint64_t from,
                 uint64_t to, body *b, sl__http_meta *m) {
  memset(m, 0, sizeof *m);
  m->total = UINT64_MAX;
  m->filetime = -1;
  pthread_once(&g_once, init_once);
  SL_RETURN_ERROR_IF(g_init_rc < 0, SL_ENOMEM, "%s: %s: libcurl init failed",
                     stage, name);
  CURL *h = thread_handle();
  SL_RETURN_ERROR_IF(!h, SL_ENOMEM, "%s: %s: cannot make a libcurl handle",
                     stage, name);
  sl__s3_target s3 = {0};
  bool is_s3 = sl__is_s3(name);
  if (is_s3) SL_FORWARD_IF_ERROR(sl__s3_target_make(stage, name, &s3));
  const char *url = is_s3 ? s3.url : name;
  char what[1200];
  if (is_s3)
    snprintf(what, sizeof what, "%s (%s)", name, url);
  else
    snprintf(what, sizeof what, "%s", name);
  /* S3 wants the payload's hash in a header of its own; a GET's payload is
   * empty.  libcurl signs the headers given here with host and x-amz-date
   * (and takes the payload hash from this one). */
  struct curl_slist *hdrs = NULL;
  if (is_s3) {
    struct curl_slist *h1 = curl_slist_append(
        NULL,
        "x-amz-content-sha256: "
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hdrs = h1 && s3.token_header ? curl_slist_append(h1, s3.token_header) : h1;
    if (!hdrs) {
      curl_slist_free_all(h1);
      sl__s3_target_free(&s3);
      return sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, name);
    }
  }
  long retries = env_long("SLUICE_HTTP_RETRIES", 5, 0, 100);
  long backoff = env_long("SLUICE_HTTP_BACKOFF_MS", 100, 0, 60000);
  uint64_t base = from; /* the object offset of b->p[0] */
  int rc = SL_OK;
  char err[CURL_ERROR_SIZE];
  for (long attempt = 0;; attempt++) {
    curl_easy_reset(h);
    err[0] = 0;
    heads hd = {UINT64_MAX, UINT64_MAX, {0}};
    char range[64];
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hd);
    curl_easy_setopt(h, CURLOPT_FILETIME, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    /* A stalled transfer (under 1 KB/s for 30 s) is a dropped one. */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
    if (is_s3) {
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s3.provider);
      curl_easy_setopt(h, CURLOPT_USERPWD, s3.userpwd);
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    }
    size_t resume = b->n;
    uint64_t at = base + resume;
    bool ranged = at > 0 || to != UINT64_MAX;
    if (ranged) {
      if (to == UINT64_MAX)
        snprintf(range, sizeof range, "%llu-", (unsigned long long)at);
      else
        snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)at,
                 (unsigned long long)to);
      curl_easy_setopt(h, CURLOPT_RANGE, range);
    }
    atomic_fetch_add(&g_requests, 1);
    CURLcode c = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (b->oom) {
      rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory after %zu bytes",
                        stage, what, b->n);
      break;
    }
    if (status == 206 && hd.range_first != at) {
      rc = sl_set_error(SL_EIO,
                        "%s: GET %s: asked for bytes from %llu, the server "
                        "sent bytes from %llu",
                        stage, what, (unsigned long long)at,
                        (unsigned long long)hd.range_first);
      break;
    }
    if (status == 200 && at > 0) {
      /* The server ignored the range: the new bytes (all of them, or as many
       * as came before the connection dropped) are the object's from byte 0,
       * and what came before them is dropped. */
      if (resume) memmove(b->p, b->p + resume, b->n - resume);
      b->n -= resume;
      base = 0;
    }
    bool done = c == CURLE_OK &&
                (status == 200 || status == 206 || (status == 416 && !resume));
    if (done) {
      if (status == 200) { /* the whole object, from byte 0 */
        m->whole = true;
        m->total = b->n;
      } else {
        m->total = hd.total;
        if (status == 416) b->n = 0;
      }
      m->status = status;
      snprintf(m->etag, sizeof m->etag, "%s", hd.etag);
      curl_off_t ft = -1;
      if (curl_easy_getinfo(h, CURLINFO_FILETIME_T, &ft) == CURLE_OK)
        m->filetime = (int64_t)ft;
      break;
    }
    bool again = c == CURLE_OK ? status == 429 || status >= 500 : retryable(c);
    char code[80] = "";
    if (c == CURLE_OK) error_code(b, resume, code, sizeof code);
    /* An error page (whole or cut short) is not the object. */
    if (status != 200 && status != 206) b->n = resume;
    if (!again || attempt >= retries) {
      if (c == CURLE_OK)
        rc = sl_set_error(SL_EIO, "%s: GET %s: HTTP %ld%s%s", stage, what,
                          status, code, again ? " (retries spent)" : "");
      else
        rc = sl_set_error(SL_EIO, "%s: GET %s: %s%s", stage, what,
                          err[0] ? err : curl_easy_strerror(c),
                          again ? " (retries spent)" : "");
      break;
    }
    atomic_fetch_add(&g_retries, 1);
    sleep_ms(backoff << (attempt < 16 ? attempt : 16));
  }
  curl_slist_free_all(hdrs);
  sl__s3_target_free(&s3);
  return rc;
}

static void free_body(void *ud, void *data) {
  (void)ud;
  sl__free(data);
}

int sl__http_get(const char *stage, const char *url, sl_buffer **out) {
  *out = NULL;
  body b = {0};
  sl__http_meta m;
  int rc = fetch(stage, url, 0, UINT64_MAX, &b, &m);
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

int sl__http_get_range(const char *stage, const char *url, uint64_t from,
                       uint64_t to, unsigned char **out, size_t *n,
                       sl__http_meta *meta) {
  *out = NULL;
  *n = 0;
  SL_RETURN_ERROR_IF(to < from, SL_EINVAL, "%s: %s: empty range %llu-%llu",
                     stage, url, (unsigned long long)from,
                     (unsigned long long)to);
  body b = {0};
  int rc = fetch(stage, url, from, to, &b, meta);
  if (rc == SL_OK) {
    if (!b.p) b.p = sl__malloc(0);
    if (b.p) {
      *out = b.p;
      *n = b.n;
      return SL_OK;
    }
    rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, url);
  }
  sl__free(b.p);
  return rc;
}

#else /* !SLUICE_HAVE_CURL */

static int no_curl(const char *stage, const char *url) {
  return sl_set_error(SL_EUNSUPPORTED,
                      "%s: %s: this libsluice was built without libcurl "
                      "(apt-get install libcurl4-openssl-dev, then rebuild)",
                      stage, url);
}

int sl__http_get(const char *stage, const char *url, sl_buffer **out) {
  *out = NULL;
  return no_curl(stage, url);
}

int sl__http_get_range(const char *stage, const char *url, uint64_t from,
                       uint64_t to, unsigned char **out, size_t *n,
                       sl__http_meta *meta) {
  (void)from;
  (void)to;
  *out = NULL;
  *n = 0;
  memset(meta, 0, sizeof *meta);
  return no_curl(stage, url);
}

#endif
