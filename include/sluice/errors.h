/*
 * sluice/errors.h - version, the SL_API mark and errors (SL_E*, the thread's
 * detail message).  Part of sluice.h: include <sluice.h>, whose opening
 * comment states the conventions that hold here.
 */
#ifndef SLUICE_API_ERRORS_H
#define SLUICE_API_ERRORS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SLUICE_BUILDING) && defined(__GNUC__)
#define SL_API __attribute__((visibility("default")))
#else
#define SL_API
#endif

#if defined(__GNUC__)
#define SL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SL_PRINTF(f, a)
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

#define SL_VERSION_MAJOR 0
#define SL_VERSION_MINOR 1
#define SL_VERSION_PATCH 0
#define SL_VERSION_NUMBER                                                      \
  (SL_VERSION_MAJOR * 10000 + SL_VERSION_MINOR * 100 + SL_VERSION_PATCH)
#define SL_VERSION_STRING "0.1.0"

/* The version of the library actually linked, as "MAJOR.MINOR.PATCH".
 * Returns a static string.  Thread-safe. */
SL_API const char *sl_version(void);
/* SL_VERSION_NUMBER of the linked library.  Thread-safe. */
SL_API int sl_version_number(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* X(NAME, value, description).  Values are stable across versions. */
#define SL_ERRNO_MAP(X)                                                        \
  X(OK, 0, "success")                                                          \
  X(EOF, -1, "end of data")                                                    \
  X(ENOMEM, -2, "out of memory")                                               \
  X(EINVAL, -3, "invalid argument")                                            \
  X(EIO, -4, "I/O error")                                                      \
  X(ECORRUPT, -5, "corrupt data")                                              \
  X(ESHAPE, -6, "dtype or shape mismatch")                                     \
  X(ECLOSED, -7, "closed")                                                     \
  X(EKILLED, -8, "killed")                                                     \
  X(EUNSUPPORTED, -9, "unsupported operation")                                 \
  X(ELUA, -10, "Lua error")                                                    \
  X(ECUDA, -11, "CUDA error")                                                  \
  X(EAGAIN, -12, "resource temporarily unavailable")                           \
  X(ENOTFOUND, -13, "not found")                                               \
  X(ESTATE, -14, "operation not valid in the current state")                   \
  X(ELENGTH, -15, "length mismatch")

typedef enum sl_errno {
#define SL__ERR_ENUM(name, val, desc) SL_##name = (val),
  SL_ERRNO_MAP(SL__ERR_ENUM)
#undef SL__ERR_ENUM
} sl_errno;

/* A static description of `code` ("end of data", ...); "unknown error" for a
 * code not in SL_ERRNO_MAP.  Thread-safe. */
SL_API const char *sl_strerror(int code);
/* The static name of `code` ("SL_EOF", "SL_EINVAL", ...); "SL_UNKNOWN" for a
 * code not in the map.  Thread-safe. */
SL_API const char *sl_err_name(int code);

/* The detail message of the last error raised on the calling thread (what and
 * where), or "" if none.  The pointer is valid until the next sluice call on
 * this thread.  Thread-safe (the slot is thread-local). */
SL_API const char *sl_last_error(void);
/* The code that accompanied the last detail message on this thread, or SL_OK.
 */
SL_API int sl_last_error_code(void);

/* Sets the calling thread's detail message to the formatted text and returns
 * `code`, so custom readers and callbacks can write
 * `return sl_set_error(SL_EINVAL, "my_reader: bad row %d", i);`.
 * A message longer than 1023 bytes loses its middle, not its end: its first
 * 320 bytes, "...", then its end (the reason), so a long path cannot push
 * the reason out.  Thread-safe. */
SL_API int sl_set_error(int code, const char *fmt, ...) SL_PRINTF(2, 3);
/* Like sl_set_error, prepending "<what>: " to the current detail message; used
 * to add context while an error travels up.  Returns `code`. */
SL_API int sl_wrap_error(int code, const char *fmt, ...) SL_PRINTF(2, 3);
/* Clears the calling thread's detail message. */
SL_API void sl_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_ERRORS_H */
