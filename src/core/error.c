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

int sl_set_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_msg, sizeof t_msg, fmt, ap);
  va_end(ap);
  t_code = code;
  return code;
}

int sl_wrap_error(int code, const char *fmt, ...) {
  char prefix[SL_ERRMSG_MAX];
  char old[SL_ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, t_msg, sizeof old);
  if (old[0])
    snprintf(t_msg, sizeof t_msg, "%s: %s", prefix, old);
  else
    snprintf(t_msg, sizeof t_msg, "%s: %s", prefix, sl_strerror(code));
  t_code = code;
  return code;
}

void sl__error_forget_code(void) {
  t_code = SL_OK;
}

char *sl__error_dup(void) {
  return sl__strdup(t_msg);
}
