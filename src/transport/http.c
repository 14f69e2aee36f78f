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
 * status is 429 or 5xx.  A 4xx other than 429 is the caller's error at
 * once: SL_EIO naming the URL and the status (and S3's error <Code> when
 * the body has one).
 *
 * Versions.  Every data response's identity (ETag, Last-Modified, size:
 * sl__http_ident) is compared with the one expected - the caller's, or
 * the first response's - and a change is SL_EIO "changed while read".  A
 * body cut short is resumed with "Range: bytes=GOT-END" and "If-Range:
 * VALIDATOR" (a strong ETag, else Last-Modified), so that a server whose
 * object changed answers 200 with the new version instead of a range of
 * it; a 200 whose identity is not the expected one is the change, named.
 * A 200 with the same identity is a server that ignores ranges: its body
 * is the whole object, which replaces what came before.  Without any
 * validator the bytes already received cannot be shown to belong with the
 * rest: the request starts again from its first byte.
 *
 * Redirects are followed here, not by libcurl (at most 10): only to
 * http:// and https:// URLs, and the credentials (S3's signature and
 * session token header, a URL's user:password) go only to the scheme, host
 * and port of the original URL - another origin gets a plain GET.
 *
 * An s3:// name is resolved by s3.c to an HTTP(S) URL and credentials for
 * every request, and signed by libcurl (CURLOPT_AWS_SIGV4).
 *
 * Messages name URLs as written; the error slot redacts a URL's
 * user:password (error.c, sl__redact_urls).
 *
 * libcurl is optional (CMakeLists.txt, Debian's libcurl4-openssl-dev):
 * without it SLUICE_HAVE_CURL is unset and every URL is SL_EUNSUPPORTED,
 * saying so.
 */
#include "transport/http.h"
#include "transport/s3.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_uint_fast64_t g_requests, g_retries, g_bytes;

void sl__http_counts(uint64_t *requests, uint64_t *retries) {
  *requests = atomic_load(&g_requests);
  *retries = atomic_load(&g_retries);
}

uint64_t sl__http_bytes(void) {
  return atomic_load(&g_bytes);
}

void sl__http_ident_unknown(sl__http_ident *id) {
  memset(id, 0, sizeof *id);
  id->filetime = -1;
  id->size = UINT64_MAX;
}

bool sl__http_ident_known(const sl__http_ident *id) {
  return id->etag[0] || id->modified[0];
}

/* Whether two Last-Modified values differ: by their times when both
 * parsed, else by their text. */
static bool modified_differs(const sl__http_ident *a, const sl__http_ident *b) {
  if (a->filetime >= 0 && b->filetime >= 0) return a->filetime != b->filetime;
  return strcmp(a->modified, b->modified) != 0;
}

sl__ident_cmp sl__http_ident_compare(const sl__http_ident *was,
                                     const sl__http_ident *now, char *why,
                                     size_t cap) {
  char dummy[8];
  if (!why) {
    why = dummy;
    cap = sizeof dummy;
  }
  if (was->etag[0] && now->etag[0] && strcmp(was->etag, now->etag) != 0) {
    snprintf(why, cap, "ETag %s before, now %s", was->etag, now->etag);
    return SL__IDENT_CHANGED;
  }
  if (was->modified[0] && now->modified[0] && modified_differs(was, now)) {
    snprintf(why, cap, "Last-Modified '%s' before, now '%s'", was->modified,
             now->modified);
    return SL__IDENT_CHANGED;
  }
  if (was->size != UINT64_MAX && now->size != UINT64_MAX &&
      was->size != now->size) {
    snprintf(why, cap, "%llu bytes before, now %llu",
             (unsigned long long)was->size, (unsigned long long)now->size);
    return SL__IDENT_CHANGED;
  }
  bool shared =
      (was->etag[0] && now->etag[0]) || (was->modified[0] && now->modified[0]);
  return shared ? SL__IDENT_SAME : SL__IDENT_UNKNOWN;
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

void sl__http_ident_file_id(const sl__http_ident *id, const char *url,
                            sl__file_id *out) {
  out->dev = id->etag[0] ? fnv1a(id->etag) : 0;
  out->ino = fnv1a(url);
  out->size = id->size;
  out->mtime_s = id->modified[0] ? id->filetime : -1;
  out->mtime_ns = sl__http_ident_known(id) ? 0 : -1;
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
  uint64_t length;             /* Content-Length; UINT64_MAX when absent */
  char etag[128];
  char modified[64];
} heads;

static void heads_clear(heads *h) {
  h->range_first = h->total = h->length = UINT64_MAX;
  h->etag[0] = h->modified[0] = 0;
}

/* The value of header `name` (with its colon) in `line`, or NULL. */
static const char *header_value(const char *line, const char *name) {
  size_t k = strlen(name);
  if (strncasecmp(line, name, k) != 0) return NULL;
  line += k;
  while (*line == ' ' || *line == '\t')
    line++;
  return line;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  heads *h = ud;
  size_t n = size * nmemb;
  char line[256];
  size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
  memcpy(line, p, k);
  line[k] = 0;
  line[strcspn(line, "\r\n")] = 0;
  const char *v;
  if (strncmp(line, "HTTP/", 5) == 0) { /* a new response */
    heads_clear(h);
  } else if ((v = header_value(line, "Content-Range:"))) {
    /* "bytes FIRST-LAST/TOTAL" or "bytes * /TOTAL" (416) */
    if (strncasecmp(v, "bytes ", 6) == 0) v += 6;
    if (*v >= '0' && *v <= '9') h->range_first = strtoull(v, NULL, 10);
    const char *slash = strchr(v, '/');
    if (slash && slash[1] >= '0' && slash[1] <= '9')
      h->total = strtoull(slash + 1, NULL, 10);
  } else if ((v = header_value(line, "Content-Length:"))) {
    if (*v >= '0' && *v <= '9') h->length = strtoull(v, NULL, 10);
  } else if ((v = header_value(line, "ETag:"))) {
    snprintf(h->etag, sizeof h->etag, "%s", v);
  } else if ((v = header_value(line, "Last-Modified:"))) {
    snprintf(h->modified, sizeof h->modified, "%s", v);
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

/* A URL's origin for the credentials rule: "scheme://host:port" in lower
 * case (the port made explicit), or false when the URL does not parse. */
static bool origin_of(const char *url, char *out, size_t cap) {
  CURLU *u = curl_url();
  if (!u) return false;
  char *scheme = NULL, *host = NULL, *port = NULL;
  bool ok =
      curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
  if (ok) {
    snprintf(out, cap, "%s://%s:%s", scheme, host, port);
    for (char *c = out; *c; c++)
      if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  return ok;
}

/* The request headers of one attempt: S3's payload hash and session token
 * (to the original origin only) and If-Range.  *oom on failure. */
static struct curl_slist *request_headers(const sl__s3_target *s3, bool creds,
                                          const char *if_range, bool *oom) {
  struct curl_slist *l = NULL, *t;
  const char *add[3] = {NULL, NULL, if_range};
  if (s3->url && creds) {
    /* S3 wants the payload's hash in a header of its own; a GET's payload
     * is empty.  libcurl signs these with host and x-amz-date. */
    add[0] = "x-amz-content-sha256: "
             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    add[1] = s3->token_header;
  }
  for (int i = 0; i < 3; i++) {
    if (!add[i]) continue;
    if (!(t = curl_slist_append(l, add[i]))) {
      curl_slist_free_all(l);
      *oom = true;
      return NULL;
    }
    l = t;
  }
  return l;
}

/* The identity a response's headers give (size: Content-Range's total, or
 * a 200's Content-Length). */
static void response_ident(const heads *hd, long status, sl__http_ident *id) {
  sl__http_ident_unknown(id);
  snprintf(id->etag, sizeof id->etag, "%s", hd->etag);
  snprintf(id->modified, sizeof id->modified, "%s", hd->modified);
  if (hd->modified[0]) {
    time_t t = curl_getdate(hd->modified, NULL);
    id->filetime = t < 0 ? -1 : (int64_t)t;
  }
  id->size = status == 200 ? hd->length : hd->total;
}

/*
 * The one request loop.  Fetches bytes [from, to] (to = UINT64_MAX: to the
 * end; from = 0 and to = UINT64_MAX send no Range at first) of `name` into
 * b, which must start empty.  With `expect`, every answer must be that
 * version of the object; without, the first answer's identity is the one
 * every later answer (a resumed body's) must have.  On SL_OK, m->whole
 * says that b holds the whole object from byte 0 (a 200), else b holds
 * bytes from `from` (a 206), or nothing (416).  `name` is what messages
 * say: the s3:// name, with the URL it maps to.
 */
static int fetch(const char *stage, const char *name, uint64_t from,
                 uint64_t to, const sl__http_ident *expect, body *b,
                 sl__http_meta *m) {
  memset(m, 0, sizeof *m);
  sl__http_ident_unknown(&m->id);
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
  char origin[600], hop_origin[600];
  bool have_origin = origin_of(url, origin, sizeof origin);
  sl__http_ident want; /* the version every answer must be */
  if (expect)
    want = *expect;
  else
    sl__http_ident_unknown(&want);
  bool have_want = expect != NULL;
  long retries = env_long("SLUICE_HTTP_RETRIES", 5, 0, 100);
  long backoff = env_long("SLUICE_HTTP_BACKOFF_MS", 100, 0, 60000);
  uint64_t base = from; /* the object offset of b->p[0] */
  int rc = SL_OK;
  char err[CURL_ERROR_SIZE];
  char *hop = NULL; /* a redirect's target, requested instead of url */
  int hops = 0;
  long attempt = 0;
  for (;;) {
    /* Bytes already here belong with the rest only if a validator says
     * that the rest is of their version; else start again. */
    if (b->n && !sl__http_ident_known(&want)) {
      b->n = 0;
      base = from;
    }
    size_t resume = b->n;
    uint64_t at = base + resume;
    bool ranged = at > 0 || to != UINT64_MAX;
    bool creds =
        !hop || (have_origin && origin_of(hop, hop_origin, sizeof hop_origin) &&
                 strcmp(origin, hop_origin) == 0);
    char if_range[220] = "";
    if (ranged && sl__http_ident_known(&want)) {
      /* A weak ETag may not be used in If-Range (RFC 9110 13.1.5). */
      const char *v = want.etag[0] && strncmp(want.etag, "W/", 2) != 0
                          ? want.etag
                          : want.modified;
      if (*v) snprintf(if_range, sizeof if_range, "If-Range: %s", v);
    }
    bool oom = false;
    struct curl_slist *hdrs =
        request_headers(&s3, creds, if_range[0] ? if_range : NULL, &oom);
    if (oom) {
      rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, what);
      break;
    }
    curl_easy_reset(h);
    err[0] = 0;
    heads hd;
    heads_clear(&hd);
    char range[64];
    curl_easy_setopt(h, CURLOPT_URL, hop ? hop : url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hd);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L); /* followed below */
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS,
                     (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    /* A stalled transfer (under 1 KB/s for 30 s) is a dropped one. */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
    if (is_s3 && creds) {
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s3.provider);
      curl_easy_setopt(h, CURLOPT_USERPWD, s3.userpwd);
    }
    if (hdrs) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
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
    curl_slist_free_all(hdrs);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (b->oom) {
      rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory after %zu bytes",
                        stage, what, b->n);
      break;
    }
    if (c == CURLE_OK && status >= 300 && status < 400) { /* a redirect */
      b->n = resume; /* its body is not the object */
      char *loc = NULL;
      curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &loc);
      if (!loc) {
        rc = sl_set_error(SL_EIO, "%s: GET %s: HTTP %ld without a Location",
                          stage, what, status);
        break;
      }
      if (strncasecmp(loc, "http://", 7) != 0 &&
          strncasecmp(loc, "https://", 8) != 0) {
        rc = sl_set_error(SL_EIO,
                          "%s: GET %s: HTTP %ld redirects to %s: only "
                          "http:// and https:// redirects are followed",
                          stage, what, status, loc);
        break;
      }
      char *next = ++hops > 10 ? NULL : sl__strdup(loc);
      if (!next) {
        rc = hops > 10 ? sl_set_error(SL_EIO,
                                      "%s: GET %s: more than 10 redirects "
                                      "(the last to %s)",
                                      stage, what, loc)
                       : sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage,
                                      what);
        break;
      }
      sl__free(hop);
      hop = next;
      continue;
    }
    sl__http_ident got;
    response_ident(&hd, status, &got);
    if (status == 200 && c == CURLE_OK) got.size = b->n - resume;
    if (status == 200 || status == 206) {
      char why[400];
      sl__ident_cmp cmp = sl__http_ident_compare(&want, &got, why, sizeof why);
      if (have_want && sl__http_ident_known(&want) && cmp != SL__IDENT_SAME) {
        if (cmp == SL__IDENT_CHANGED)
          rc = sl_set_error(SL_EIO,
                            "%s: GET %s: the object changed while read (%s)",
                            stage, what, why);
        else
          rc = sl_set_error(SL_EIO,
                            "%s: GET %s: the object changed while read or "
                            "cannot be told apart: the answer (HTTP %ld) "
                            "carries no validator of the version asked for "
                            "(%s%s)",
                            stage, what, status,
                            want.etag[0] ? "ETag " : "Last-Modified ",
                            want.etag[0] ? want.etag : want.modified);
        break;
      }
      if (!have_want || !sl__http_ident_known(&want)) {
        want = got;
        have_want = true;
      }
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
      /* The server ignored the range (the same version: checked above):
       * the new bytes (all of them, or as many as came before the
       * connection dropped) are the object's from byte 0, and what came
       * before them is dropped. */
      if (resume) memmove(b->p, b->p + resume, b->n - resume);
      b->n -= resume;
      base = 0;
    }
    bool done = c == CURLE_OK &&
                (status == 200 || status == 206 || (status == 416 && !resume));
    if (done) {
      m->id = got;
      if (status == 200) { /* the whole object, from byte 0 */
        m->whole = true;
        m->id.size = b->n;
      } else if (status == 416) {
        b->n = 0;
      }
      m->status = status;
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
    attempt++;
    sl__free(hop); /* a retry starts at the original URL */
    hop = NULL;
    hops = 0;
  }
  sl__free(hop);
  sl__s3_target_free(&s3);
  return rc;
}

static void free_body(void *ud, void *data) {
  (void)ud;
  sl__free(data);
}

int sl__http_get(const char *stage, const char *url, sl_buffer **out,
                 sl__http_ident *ident) {
  *out = NULL;
  body b = {0};
  sl__http_meta m;
  int rc = fetch(stage, url, 0, UINT64_MAX, NULL, &b, &m);
  if (rc == SL_OK) {
    if (ident) *ident = m.id;
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
                       uint64_t to, const sl__http_ident *expect,
                       unsigned char **out, size_t *n, sl__http_meta *meta) {
  *out = NULL;
  *n = 0;
  SL_RETURN_ERROR_IF(to < from, SL_EINVAL, "%s: %s: empty range %llu-%llu",
                     stage, url, (unsigned long long)from,
                     (unsigned long long)to);
  body b = {0};
  int rc = fetch(stage, url, from, to, expect, &b, meta);
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

int sl__http_get(const char *stage, const char *url, sl_buffer **out,
                 sl__http_ident *ident) {
  *out = NULL;
  if (ident) sl__http_ident_unknown(ident);
  return no_curl(stage, url);
}

int sl__http_get_range(const char *stage, const char *url, uint64_t from,
                       uint64_t to, const sl__http_ident *expect,
                       unsigned char **out, size_t *n, sl__http_meta *meta) {
  (void)from;
  (void)to;
  (void)expect;
  *out = NULL;
  *n = 0;
  memset(meta, 0, sizeof *meta);
  sl__http_ident_unknown(&meta->id);
  return no_curl(stage, url);
}

#endif
