/*
 * cli_util.c - the option parser, number parsing, error reporting and the
 * string output helpers shared by the subcommands of `sluice`.
 *
 * The parser is ours rather than getopt_long because the subcommands need
 * options after operands ("sluice cat f.slr --json") without GNU getopt's
 * argv permutation, and a uniform message for every kind of bad usage.
 */
#include "cli.h"
#include "core/internal.h"
#include "transport/output.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void cli_parser_init(cli_parser *p, int argc, char **argv, const char *cmd,
                     const char *synopsis, const cli_opt *opts) {
  p->argc = argc;
  p->argv = argv;
  p->i = 1;
  p->operands_only = false;
  p->cmd = cmd;
  p->synopsis = synopsis;
  p->opts = opts;
}

const char *cli_shown(const char *name, char *buf, size_t size) {
  sl__redact_urls(name, buf, size);
  return buf;
}

int cli_usage_error(const char *cmd, const char *synopsis, const char *fmt,
                    ...) {
  va_list ap;
  char msg[4096], shown[4096];
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "sluice: %s: %s", cmd, cli_shown(msg, shown, sizeof shown));
  fprintf(stderr, "\nUsage:\n%sRun 'sluice %s --help' for details.\n", synopsis,
          cmd);
  return CLI_USAGE;
}

const char *cli_summary_flush(void) {
  errno = 0;
  if (fflush(stdout) == 0 && !ferror(stdout)) return NULL;
  int e = errno;
  __fpurge(stdout);
  clearerr(stdout);
  return e ? strerror(e) : "write error";
}

int cli_fail(const char *cmd, int rc) {
  const char *msg = sl_last_error();
  fprintf(stderr, "sluice: %s: %s\n", cmd, *msg ? msg : sl_strerror(rc));
  return CLI_FAIL;
}

static const cli_opt *find_long(const cli_opt *o, const char *name,
                                size_t len) {
  for (; o->id; o++)
    if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
  return NULL;
}

static const cli_opt *find_short(const cli_opt *o, char c) {
  for (; o->id; o++)
    if (o->short_name && o->short_name == c) return o;
  return NULL;
}

int cli_next(cli_parser *p, const char **val) {
  *val = NULL;
  if (p->i >= p->argc) return CLI_ARG_END;
  const char *a = p->argv[p->i++];
  if (p->operands_only || a[0] != '-' || a[1] == 0) {
    *val = a; /* "-" alone is an operand (by convention: stdin/stdout) */
    return CLI_ARG_OPERAND;
  }
  if (strcmp(a, "--") == 0) {
    p->operands_only = true;
    return cli_next(p, val);
  }
  const cli_opt *o;
  const char *inline_val = NULL;
  if (a[1] == '-') {
    const char *eq = strchr(a + 2, '=');
    size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
    o = find_long(p->opts, a + 2, len);
    if (!o) {
      cli_usage_error(p->cmd, p->synopsis, "unknown option '%.*s'",
                      (int)(len + 2), a);
      return CLI_ARG_BAD;
    }
    if (eq && !o->has_arg) {
      cli_usage_error(p->cmd, p->synopsis, "option '--%s' takes no value",
                      o->name);
      return CLI_ARG_BAD;
    }
    if (eq) inline_val = eq + 1;
  } else {
    o = find_short(p->opts, a[1]);
    if (!o) {
      cli_usage_error(p->cmd, p->synopsis, "unknown option '-%c'", a[1]);
      return CLI_ARG_BAD;
    }
    if (a[2]) {
      if (!o->has_arg) {
        cli_usage_error(p->cmd, p->synopsis, "unknown option '%s'", a);
        return CLI_ARG_BAD;
      }
      inline_val = a + 2;
    }
  }
  if (o->has_arg) {
    if (!inline_val) {
      if (p->i >= p->argc) {
        cli_usage_error(p->cmd, p->synopsis, "option '%s' needs a value", a);
        return CLI_ARG_BAD;
      }
      inline_val = p->argv[p->i++];
    }
    *val = inline_val;
  }
  return o->id;
}

int cli_max_chunk_bytes(const char *cmd, const char *synopsis, const char *v,
                        uint64_t *out) {
  if (!cli_parse_u64(v, true, out) || *out < 1 || *out > ((uint64_t)4 << 30))
    return cli_usage_error(cmd, synopsis,
                           "--max-chunk-bytes wants 1..4G bytes (suffix K, M "
                           "or G), not '%s'",
                           v);
  return CLI_OK;
}

bool cli_parse_u64(const char *s, bool suffixes, uint64_t *out) {
  if (!s || !isdigit((unsigned char)s[0])) return false;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno == ERANGE) return false;
  uint64_t mul = 1;
  if (suffixes && *end) {
    switch (toupper((unsigned char)*end)) {
    case 'K':
      mul = 1ull << 10;
      break;
    case 'M':
      mul = 1ull << 20;
      break;
    case 'G':
      mul = 1ull << 30;
      break;
    default:
      return false;
    }
    end++;
    if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0 ||
        strcmp(end, "b") == 0)
      end += strlen(end);
  }
  if (*end) return false;
  if (v > UINT64_MAX / mul) return false;
  *out = (uint64_t)v * mul;
  return true;
}

int cli_utf8_len(const unsigned char *p, size_t n) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  int len;
  uint32_t cp, min;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, cp = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, cp = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0; /* continuation byte, overlong lead C0/C1, or F5..FF */
  }
  if ((size_t)len > n) return 0;
  for (int i = 1; i < len; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

void cli_json_string(FILE *o, const void *data, size_t n) {
  const unsigned char *p = data;
  putc('"', o);
  for (size_t i = 0; i < n;) {
    unsigned c = p[i];
    if (c == '"' || c == '\\') {
      putc('\\', o);
      putc((int)c, o);
      i++;
    } else if (c == '\n') {
      fputs("\\n", o), i++;
    } else if (c == '\t') {
      fputs("\\t", o), i++;
    } else if (c == '\r') {
      fputs("\\r", o), i++;
    } else if (c < 0x20 || c == 0x7F) {
      fprintf(o, "\\u%04x", c), i++;
    } else {
      int len = cli_utf8_len(p + i, n - i);
      if (len == 0) {
        fprintf(o, "\\u%04x", c); /* not UTF-8: the byte as U+00XX */
        i++;
      } else {
        fwrite(p + i, 1, (size_t)len, o);
        i += (size_t)len;
      }
    }
  }
  putc('"', o);
}

void cli_text_string(FILE *o, const void *data, size_t n, size_t max) {
  const unsigned char *p = data;
  size_t lim = n < max ? n : max;
  putc('"', o);
  for (size_t i = 0; i < lim;) {
    unsigned c = p[i];
    if (c == '"' || c == '\\') {
      putc('\\', o);
      putc((int)c, o);
      i++;
    } else if (c == '\n') {
      fputs("\\n", o), i++;
    } else if (c == '\t') {
      fputs("\\t", o), i++;
    } else if (c == '\r') {
      fputs("\\r", o), i++;
    } else if (c < 0x20 || c == 0x7F) {
      fprintf(o, "\\x%02x", c), i++;
    } else {
      int len = cli_utf8_len(p + i, n - i);
      if (len == 0 || i + (size_t)len > lim) {
        fprintf(o, "\\x%02x", c);
        i++;
      } else {
        fwrite(p + i, 1, (size_t)len, o);
        i += (size_t)len;
      }
    }
  }
  putc('"', o);
  if (lim < n) fputs("...", o);
}

const char *cli_human_bytes(uint64_t n, char *buf, size_t size) {
  static const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = (double)n;
  int u = 0;
  while (v >= 1000 && u < 5)
    v /= 1000, u++;
  if (u == 0)
    snprintf(buf, size, "%llu B", (unsigned long long)n);
  else
    snprintf(buf, size, "%.1f %s", v, units[u]);
  return buf;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- files ------------------------------------------------------------------
 */

uint32_t cli_crc32c(const void *data, size_t n) {
  static uint32_t table[256];
  static bool ready = false; /* the CLI is single-threaded */
  if (!ready) {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++)
        c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      table[i] = c;
    }
    ready = true;
  }
  const unsigned char *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++)
    c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

int cli_write_file_atomic(const char *path, const void *data, size_t n) {
  /* The output path of every writer (src/transport/output.h): a unique temporary
   * created O_EXCL | O_NOFOLLOW, synced, renamed, the folder synced. */
  sl__out_file *f;
  SL_FORWARD_IF_ERROR(sl__out_open("write", path, &f));
  int rc = sl__out_write(f, data, n);
  if (rc < 0) {
    sl__out_abort(f);
    return rc;
  }
  return sl__out_commit(f);
}

int cli_read_file(const char *path, size_t max, void **data, size_t *n) {
  *data = NULL;
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return sl_set_error(SL_EIO, "cannot open %s: %s", path, strerror(errno));
  size_t cap = 4096, len = 0;
  unsigned char *buf = malloc(cap);
  int rc = buf ? SL_OK : sl_set_error(SL_ENOMEM, "%s: out of memory", path);
  while (rc == SL_OK) {
    if (len == cap) {
      if (cap >= max) {
        rc = sl_set_error(SL_EINVAL, "%s: larger than %zu bytes", path, max);
        break;
      }
      unsigned char *b2 = realloc(buf, cap * 2);
      if (!b2) {
        rc = sl_set_error(SL_ENOMEM, "%s: out of memory", path);
        break;
      }
      buf = b2;
      cap *= 2;
    }
    size_t k = fread(buf + len, 1, cap - len, f);
    len += k;
    if (k == 0) {
      if (ferror(f))
        rc = sl_set_error(SL_EIO, "cannot read %s: %s", path, strerror(errno));
      break;
    }
  }
  fclose(f);
  if (rc != SL_OK) {
    free(buf);
    return rc;
  }
  *data = buf;
  *n = len;
  return SL_OK;
}
