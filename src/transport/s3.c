/*
 * s3.c - s3://BUCKET/KEY names mapped to HTTP(S) URLs and credentials
 * (s3.h).
 *
 * Protocol: the name is resolved afresh for every request, from the
 * environment (SLUICE_S3_ENDPOINT, AWS_REGION / AWS_DEFAULT_REGION,
 * AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), so a
 * credential rotated in the environment applies to the next request.  The
 * key is used as written: a key with characters that URLs reserve must be
 * percent-encoded by the caller, as S3 expects it in the request path.
 * Nothing here needs libcurl; http.c signs with what this returns.
 */
#include "transport/s3.h"

#include <stdarg.h>
#include <stdlib.h>

bool sl__is_s3(const char *path) {
  return path && strncmp(path, "s3://", 5) == 0;
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* A new string formatted like printf, or NULL when out of memory. */
static char *dup_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *s = sl__malloc((size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* Why `b` (n bytes) is not a bucket name by S3's rules, or NULL: 3 to 63
 * characters of lower-case letters, digits, '.' and '-', beginning and
 * ending with a letter or digit, no two adjacent periods, not an IPv4
 * address, none of S3's reserved prefixes and suffixes.  The bucket
 * becomes part of a host name (virtual-host style) or of a path: a name
 * with ':', '@', '#' or '/' in it could send the signed request elsewhere. */
static const char *bucket_fault(const char *b, size_t n) {
  if (n < 3 || n > 63) return "it must be 3 to 63 characters long";
  for (size_t i = 0; i < n; i++) {
    char c = b[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '-'))
      return "it may hold only lower-case letters, digits, '.' and '-'";
    if (c == '.' && i + 1 < n && b[i + 1] == '.')
      return "it may not hold two adjacent periods";
  }
  bool alnum_ends =
      b[0] != '.' && b[0] != '-' && b[n - 1] != '.' && b[n - 1] != '-';
  if (!alnum_ends) return "it must begin and end with a letter or a digit";
  int dots = 0;
  bool ip = true;
  for (size_t i = 0; i < n; i++) {
    if (b[i] == '.')
      dots++;
    else if (b[i] < '0' || b[i] > '9')
      ip = false;
  }
  if (ip && dots == 3) return "it may not be an IP address";
  static const char *prefix[] = {"xn--", "sthree-", "amzn-s3-demo-"};
  static const char *suffix[] = {"-s3alias", "--ol-s3", ".mrap", "--x-s3",
                                 "--table-s3"};
  for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++)
    if (strncmp(b, prefix[i], strlen(prefix[i])) == 0)
      return "it may not begin with a prefix S3 reserves";
  for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
    size_t k = strlen(suffix[i]);
    if (n >= k && strncmp(b + n - k, suffix[i], k) == 0)
      return "it may not end with a suffix S3 reserves";
  }
  return NULL;
}

void sl__s3_target_free(sl__s3_target *t) {
  if (!t) return;
  SL__FREE(t->url, t->userpwd, t->token_header);
  memset(t, 0, sizeof *t);
}

int sl__s3_target_make(const char *stage, const char *name, sl__s3_target *t) {
  memset(t, 0, sizeof *t);
  SL_RETURN_ERROR_IF(!sl__is_s3(name), SL_EINVAL,
                     "%s: '%s' is not an s3://BUCKET/KEY name", stage,
                     name ? name : "(null)");
  const char *bucket = name + 5, *slash = strchr(bucket, '/');
  SL_RETURN_ERROR_IF(!slash || slash == bucket || !slash[1], SL_EINVAL,
                     "%s: %s: an s3 name is s3://BUCKET/KEY, with a bucket "
                     "and a key",
                     stage, name);
  int blen = (int)(slash - bucket);
  const char *key = slash + 1;
  const char *fault = bucket_fault(bucket, (size_t)blen);
  SL_RETURN_ERROR_IF(fault, SL_EINVAL,
                     "%s: %s: the bucket is not an S3 bucket name: %s "
                     "(an s3 name is s3://BUCKET/KEY)",
                     stage, name, fault);
  size_t bad = strcspn(key, "#\r\n\t ");
  SL_RETURN_ERROR_IF(key[bad], SL_EINVAL,
                     "%s: %s: the key holds %s at byte %zu: percent-encode it "
                     "(S3 keys are used as written in the request's path)",
                     stage, name, key[bad] == '#' ? "'#'" : "white space", bad);
  const char *id = env("AWS_ACCESS_KEY_ID"),
             *secret = env("AWS_SECRET_ACCESS_KEY");
  SL_RETURN_ERROR_IF(!id || !secret, SL_EINVAL,
                     "%s: %s: no S3 credentials: set AWS_ACCESS_KEY_ID and "
                     "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for "
                     "temporary ones)%s",
                     stage, name,
                     !id && !secret ? ""
                     : !id          ? " (AWS_ACCESS_KEY_ID is unset)"
                                    : " (AWS_SECRET_ACCESS_KEY is unset)");
  const char *region = env("AWS_REGION");
  if (!region) region = env("AWS_DEFAULT_REGION");
  if (!region) region = "us-east-1";
  SL_RETURN_ERROR_IF(strlen(region) > 40 || strpbrk(region, ":/ "), SL_EINVAL,
                     "%s: %s: AWS region '%s' is not a region name", stage,
                     name, region);
  snprintf(t->provider, sizeof t->provider, "aws:amz:%s:s3", region);
  const char *endpoint = env("SLUICE_S3_ENDPOINT");
  if (endpoint) {
    size_t el = strlen(endpoint);
    while (el && endpoint[el - 1] == '/')
      el--;
    SL_RETURN_ERROR_IF(strncmp(endpoint, "http://", 7) != 0 &&
                           strncmp(endpoint, "https://", 8) != 0,
                       SL_EINVAL,
                       "%s: %s: SLUICE_S3_ENDPOINT '%s' is not an http:// or "
                       "https:// URL",
                       stage, name, endpoint);
    t->url = dup_printf("%.*s/%.*s/%s", (int)el, endpoint, blen, bucket, key);
  } else {
    t->url = dup_printf("https://%.*s.s3.%s.amazonaws.com/%s", blen, bucket,
                        region, key);
  }
  t->userpwd = dup_printf("%s:%s", id, secret);
  const char *token = env("AWS_SESSION_TOKEN");
  if (token) t->token_header = dup_printf("x-amz-security-token: %s", token);
  if (!t->url || !t->userpwd || (token && !t->token_header)) {
    sl__s3_target_free(t);
    return sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, name);
  }
  return SL_OK;
}
