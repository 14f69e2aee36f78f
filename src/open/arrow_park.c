/*
 * arrow_park.c - Arrow streams parked for sl_open("arrow:NAME")
 * (sl_arrow_stream_park, include/sluice/arrow.h): a host (the Python
 * binding's sluice.from_arrow(obj, script=...)) hands a stream to the
 * pipeline script it runs by name.  The first park registers the format
 * tag "arrow" (sl_format_register), whose constructor takes the stream out
 * of the table and makes it a source (sl_reader_from_arrow_stream): each
 * parked stream opens once.  A fixed table of 64 slots under one mutex.
 */
#include "core/internal.h"

#include <pthread.h>

/* --- parked streams ------------------------------------------------------- */

#define PARK_SLOTS 64

static pthread_mutex_t g_park_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char name[64];
  struct ArrowArrayStream stream; /* release NULL: a free slot */
} g_park[PARK_SLOTS]; /* g_park_mu */

static bool good_park_name(const char *n) {
  size_t len = n ? strlen(n) : 0;
  if (len < 1 || len > 63) return false;
  for (size_t i = 0; i < len; i++) {
    char ch = n[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-'))
      return false;
  }
  return true;
}

static int park_find(const char *name) {
  for (int i = 0; i < PARK_SLOTS; i++)
    if (g_park[i].stream.release && strcmp(g_park[i].name, name) == 0)
      return i;
  return -1;
}

static int open_parked(void *ud, const char *name, const sl_open_opts *opts,
                       sl_reader **out);
static int g_tag_rc;
static void register_tag(void) {
  g_tag_rc = sl_format_register("arrow", open_parked, NULL);
}

int sl_arrow_stream_park(const char *name, struct ArrowArrayStream *stream) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (!stream || !stream->release)
    return sl_set_error(SL_EINVAL, "sl_arrow_stream_park: %s stream",
                        stream ? "a released" : "a NULL");
  struct ArrowArrayStream mine = *stream;
  stream->release = NULL;
  pthread_once(&once, register_tag);
  int rc = SL_OK;
  if (g_tag_rc < 0) {
    rc = sl_set_error(g_tag_rc, "sl_arrow_stream_park: cannot register the "
                      "format tag 'arrow'");
  } else if (!good_park_name(name)) {
    rc = sl_set_error(SL_EINVAL,
                      "sl_arrow_stream_park: bad name '%s' (1..63 bytes of "
                      "A-Z a-z 0-9 _ . -)",
                      name ? name : "(null)");
  } else {
    pthread_mutex_lock(&g_park_mu);
    int free_slot = -1;
    for (int i = PARK_SLOTS - 1; i >= 0; i--)
      if (!g_park[i].stream.release) free_slot = i;
    if (park_find(name) >= 0)
      rc = sl_set_error(SL_EINVAL,
                        "sl_arrow_stream_park: a stream is already parked "
                        "under '%s'",
                        name);
    else if (free_slot < 0)
      rc = sl_set_error(SL_ENOMEM,
                        "sl_arrow_stream_park: %d streams parked already",
                        PARK_SLOTS);
    else {
      snprintf(g_park[free_slot].name, sizeof g_park[0].name, "%s", name);
      g_park[free_slot].stream = mine;
    }
    pthread_mutex_unlock(&g_park_mu);
  }
  if (rc < 0) mine.release(&mine);
  return rc;
}

/* Takes the stream parked under `name` into *out (release NULL when none). */
static void park_take(const char *name, struct ArrowArrayStream *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&g_park_mu);
  int i = park_find(name);
  if (i >= 0) {
    *out = g_park[i].stream;
    g_park[i].stream.release = NULL;
  }
  pthread_mutex_unlock(&g_park_mu);
}

int sl_arrow_stream_unpark(const char *name) {
  if (!name) return 0;
  struct ArrowArrayStream st;
  park_take(name, &st);
  if (!st.release) return 0;
  st.release(&st);
  return 1;
}

/* The registry's "arrow" tag: the stream parked under `path`. */
static int open_parked(void *ud, const char *name, const sl_open_opts *opts,
                       sl_reader **out) {
  SL_UNUSED(ud);
  SL_UNUSED(opts);
  struct ArrowArrayStream st;
  park_take(name, &st);
  SL_RETURN_ERROR_IF(!st.release, SL_ENOTFOUND,
                     "arrow:%s: no Arrow stream is parked under that name "
                     "(each parked stream opens once; "
                     "sl_arrow_stream_park)",
                     name);
  char label[80];
  snprintf(label, sizeof label, "arrow:%s", name);
  sl_arrow_opts o = SL_ARROW_OPTS_INIT;
  o.name = label;
  return sl_reader_from_arrow_stream(&st, &o, out);
}
