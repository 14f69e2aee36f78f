/*
 * error.c - error codes, their names and descriptions, and the thread-local
 * detail message that says what failed and where.
 */
#include "internal.h"

#include <stdarg.h>

#define SL_ERRMSG_MAX 1024

static _Thread_local char t_msg[SL_ERRMSG_MAX];
static _Thread_local int t_code;

const char *sl_strerror(int code) {
  switch (code) {
#define SL__ERR_DESC(name, val, desc)                                          \
  case SL_##name:                                                              \
    return desc;
    SL_ERRNO_MAP(SL__ERR_DESC)
#undef SL__ERR_DESC
  }
  return "unknown error";
}

const char *sl_err_name(int code) {
  switch (code) {
#define SL__ERR_NAME(name, val, desc)                                          \
  case SL_##name:                                                              \
    return "SL_" #name;
    SL_ERRNO_MAP(SL__ERR_NAME)
#undef SL__ERR_NAME
  }
  return "SL_UNKNOWN";
}

const char *sl_last_error(void) {
  return t_msg;
}

int sl_last_error_code(void) {
  return t_code;
}

void sl_clear_error(void) {
  t_msg[0] = '\0';
  t_code = SL_OK;
}

/* --- long messages ---------------------------------------------------------
 * The slot holds 1023 bytes.  A longer message (a deep path, a path wrapped
 * several times) loses its middle, not its end: the stage is at the start and
 * the reason at the end ("x: /very/long/...ong/path/f.slr: cannot open: No
 * such file or directory"), and a path cut in the middle still names its
 * file.  The full text is formatted into a heap buffer first; when that
 * allocation fails the message is cut at the end as snprintf does. */

#define SL_ELIDE_MARK "..."
#define SL_ELIDE_HEAD 320 /* bytes kept before the mark; the rest is tail */

static bool utf8_cont(char c) {
  return ((unsigned char)c & 0xC0) == 0x80;
}

/* Stores `full` (n bytes, n >= SL_ERRMSG_MAX) with its middle elided. */
static void store_elided(const char *full, size_t n) {
  const size_t mark = sizeof SL_ELIDE_MARK - 1;
  size_t head = SL_ELIDE_HEAD;
  size_t tail = SL_ERRMSG_MAX - 1 - head - mark;
  while (head > 0 && utf8_cont(full[head])) /* whole characters only */
    head--;
  size_t from = n - tail;
  while (from < n && utf8_cont(full[from]))
    from++;
  memcpy(t_msg, full, head);
  memcpy(t_msg + head, SL_ELIDE_MARK, mark);
  memcpy(t_msg + head + mark, full + from, n - from);
  t_msg[head + mark + (n - from)] = '\0';
}

/* --- credentials ----------------------------------------------------------
 * A URL may carry a user name and password ("https://USER:PASS@host/x",
 * SLUICE_S3_ENDPOINT's value); no message shows them.  Every "scheme://"
 * in a text has its authority (up to the first '/', '?', '#', space or
 * quote) searched for its last '@', and what comes before it is replaced
 * with three asterisks ("https://USER:PASS@host/x" is shown with "***@host/x"
 * after its scheme). */

size_t sl__redact_urls(const char *in, char *out, size_t cap) {
  size_t n = 0;
#define PUT(c)                                                                 \
  do {                                                                         \
    if (n + 1 < cap) out[n] = (c);                                             \
    n++;                                                                       \
  } while (0)
  const char *p = in;
  while (*p) {
    const char *sep = strstr(p, "://");
    const char *auth = sep ? sep + 3 : p + strlen(p);
    const char *at = NULL;
    if (sep) {
      size_t alen = strcspn(auth, "/?#\\ \t\r\n'\"<>`");
      for (size_t i = 0; i < alen; i++)
        if (auth[i] == '@') at = auth + i;
    }
    for (; p < auth; p++)
      PUT(*p);
    if (at) {
      PUT('*');
      PUT('*');
      PUT('*');
      p = at;
    }
  }
#undef PUT
  if (cap) out[n < cap ? n : cap - 1] = '\0';
  return n;
}

/* Formats into the slot, with URLs' credentials redacted, eliding the
 * middle of a message that does not fit (after the redaction, so that no
 * cut can hide a credential from it).  Consumes `ap`; its arguments may
 * point into the slot. */
static void store_v(const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  char small[SL_ERRMSG_MAX];
  char *full = small;
  int n = vsnprintf(small, sizeof small, fmt, ap);
  if (n >= (int)sizeof small) {
    full = sl__malloc((size_t)n + 1);
    if (full)
      vsnprintf(full, (size_t)n + 1, fmt, again);
    else
      full = small, n = (int)sizeof small - 1;
  }
  va_end(again);
  if (n < 0) {
    t_msg[0] = '\0';
    return;
  }
  char *text = full, *red = NULL;
  size_t len = (size_t)n;
  if (strstr(full, "://") && strchr(full, '@')) {
    len = sl__redact_urls(full, NULL, 0);
    red = sl__malloc(len + 1);
    if (red) {
      sl__redact_urls(full, red, len + 1);
      text = red;
    } else { /* no memory: redacted and cut at the end */
      sl__redact_urls(full, t_msg, sizeof t_msg);
      text = NULL;
    }
  }
  if (text && len < SL_ERRMSG_MAX)
    memcpy(t_msg, text, len + 1);
  else if (text)
    store_elided(text, len);
  sl__free(red);
  if (full != small) sl__free(full);
}

static void store(const char *fmt, ...) SL_PRINTF(1, 2);
static void store(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  store_v(fmt, ap);
  va_end(ap);
}

int sl_set_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  store_v(fmt, ap);
  va_end(ap);
  t_code = code;
  return code;
}

int sl__error_keep(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (t_code != code || !t_msg[0]) { /* no message of the callee's */
    store_v(fmt, ap);
    t_code = code;
  }
  va_end(ap);
  return code;
}

int sl_wrap_error(int code, const char *fmt, ...) {
  /* The old message is copied out first: the prefix's arguments may point
   * into it, and it is overwritten. */
  char old[SL_ERRMSG_MAX];
  memcpy(old, t_msg, sizeof old);
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  char small[SL_ERRMSG_MAX];
  char *prefix = small;
  int n = vsnprintf(small, sizeof small, fmt, ap);
  if (n >= (int)sizeof small) {
    char *big = sl__malloc((size_t)n + 1);
    if (big) {
      vsnprintf(big, (size_t)n + 1, fmt, again);
      prefix = big;
    }
  }
  va_end(again);
  va_end(ap);
  store("%s: %s", prefix, old[0] ? old : sl_strerror(code));
  if (prefix != small) sl__free(prefix);
  t_code = code;
  return code;
}

void sl__error_forget_code(void) {
  t_code = SL_OK;
}

char *sl__error_dup(void) {
  return sl__strdup(t_msg);
}
