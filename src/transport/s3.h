/* s3.h - s3://bucket/key names (s3.c): where such a name is fetched from
 * and with which credentials.  The signing itself is libcurl's AWS SigV4
 * (http.c sets CURLOPT_AWS_SIGV4 from what this returns). */
#ifndef SLUICE_IO_S3_H
#define SLUICE_IO_S3_H

#include "core/internal.h"

/* Whether `path` starts with "s3://". */
bool sl__is_s3(const char *path);

/* What one s3:// name resolves to, from the environment at the call. */
typedef struct sl__s3_target {
  char *url;          /* the HTTP(S) URL of the object */
  char *userpwd;      /* "ACCESS_KEY_ID:SECRET_ACCESS_KEY" */
  char *token_header; /* "x-amz-security-token: ...", or NULL */
  char provider[96];  /* CURLOPT_AWS_SIGV4's "aws:amz:REGION:s3" */
} sl__s3_target;

/* Resolves `name` ("s3://BUCKET/KEY"): with SLUICE_S3_ENDPOINT set (e.g.
 * "http://127.0.0.1:9000") the URL is ENDPOINT/BUCKET/KEY (path style),
 * else https://BUCKET.s3.REGION.amazonaws.com/KEY (virtual-host style);
 * REGION is AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1.  The
 * credentials are AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, with
 * AWS_SESSION_TOKEN when set.  Returns SL_OK (free *t with
 * sl__s3_target_free), SL_EINVAL naming `name` (no bucket or key, or the
 * credential variables unset, naming them) or SL_ENOMEM.  `stage`
 * prefixes messages.  Thread-safe as far as getenv is. */
int sl__s3_target_make(const char *stage, const char *name, sl__s3_target *t);

/* Frees what sl__s3_target_make allocated; *t may be zeroed or freed. */
void sl__s3_target_free(sl__s3_target *t);

#endif
