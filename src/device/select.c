/*
 * select.c - device names: parsing "cpu" / "cuda" / "cuda:N" / "auto",
 * opening the engine a name asks for (with "auto"'s fallback to the host
 * engine, reported once per process), and the device accessors of tensors.
 */
#include "device/device.h"

#include <stdlib.h>

static const char DEVICE_FORMS[] =
    "\"cpu\", \"cuda\", \"cuda:N\" (N a device number) or \"auto\"";

int sl__device_parse(const char *stage, const char *name, sl__device_req *req,
                     int *device_id) {
  *device_id = 0;
  if (!name || strcmp(name, "auto") == 0) {
    *req = SL__DEV_AUTO;
    return SL_OK;
  }
  if (strcmp(name, "cpu") == 0) {
    *req = SL__DEV_CPU;
    return SL_OK;
  }
  if (strcmp(name, "cuda") == 0) {
    *req = SL__DEV_CUDA;
    return SL_OK;
  }
  if (strncmp(name, "cuda:", 5) == 0) {
    const char *p = name + 5;
    long v = 0;
    bool ok = *p != '\0';
    for (; ok && *p; p++) {
      if (*p < '0' || *p > '9' || v > 100000)
        ok = false;
      else
        v = v * 10 + (*p - '0');
    }
    SL_RETURN_ERROR_IF(!ok || v > 100000, SL_EINVAL,
                       "%s: bad device \"%s\": the device number after "
                       "\"cuda:\" must be a decimal integer >= 0",
                       stage, name);
    *req = SL__DEV_CUDA;
    *device_id = (int)v;
    return SL_OK;
  }
  return sl_set_error(SL_EINVAL, "%s: unknown device \"%s\": expected %s",
                      stage, name, DEVICE_FORMS);
}

static atomic_int fallbacks;

int sl__device_fallback_reset(void) {
  return atomic_exchange(&fallbacks, 0);
}

int sl__copy_open(const char *stage, const char *name, void *stream,
                  sl__copy_engine **out) {
  sl__device_req req;
  int id;
  const char *absent = NULL;
  *out = NULL;
  SL_FORWARD_IF_ERROR(sl__device_parse(stage, name, &req, &id));
  int rc;
  switch (req) {
  case SL__DEV_CPU:
    rc = sl__copy_host_open(out);
    return rc == SL_OK ? rc : sl_wrap_error(rc, "%s", stage);
  case SL__DEV_CUDA:
    rc = sl__copy_cuda_open(id, stream, out, &absent);
    return rc == SL_OK ? rc : sl_wrap_error(rc, "%s", stage);
  case SL__DEV_AUTO:
    break;
  }
  rc = sl__copy_cuda_open(0, stream, out, &absent);
  if (rc == SL_OK) return rc;
  if (rc == SL_ENOMEM) return sl_wrap_error(rc, "%s", stage);
  /* No usable CUDA: the host engine, said once per process so a loop of
   * pipelines does not flood stderr.  A machine without CUDA (no driver or
   * device, no runtime, a build without it) is told so plainly - the
   * runtime's own words for "no driver" are "CUDA driver version is
   * insufficient", which reads like an upgrade is due; device "cuda:0"
   * gives the CUDA error in full.  Other failures are given in full. */
  if (atomic_fetch_add(&fallbacks, 1) == 0) {
    if (absent)
      fprintf(stderr,
              "sluice: %s: device \"auto\": %s; using the host engine\n", stage,
              absent);
    else
      fprintf(stderr,
              "sluice: %s: device \"auto\": CUDA is not usable (%s); using "
              "the host engine\n",
              stage, sl_last_error());
  }
  rc = sl__copy_host_open(out);
  if (rc == SL_OK) sl_clear_error();
  return rc == SL_OK ? rc : sl_wrap_error(rc, "%s", stage);
}

/* --- public accessors ------------------------------------------------------
 */

sl_device_type sl_tensor_device(const sl_tensor *t, int *device_id) {
  return sl_buffer_device(t ? t->buf : NULL, device_id);
}

char *sl_device_describe(sl_device_type type, int device_id, char *buf,
                         size_t size) {
  if (!buf || !size) return buf;
  switch (type) {
  case SL_DEVICE_CPU:
    snprintf(buf, size, "cpu");
    break;
  case SL_DEVICE_CUDA:
    snprintf(buf, size, "cuda:%d", device_id);
    break;
  case SL_DEVICE_CUDA_HOST:
    snprintf(buf, size, "cuda_host");
    break;
  default:
    snprintf(buf, size, "unknown");
    break;
  }
  return buf;
}
