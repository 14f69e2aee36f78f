/*
 * lua_reader.c - sl__lua_reader: a source written in Lua (Paddle's "reader
 * creator"), run by one thread in its own worker Lua state, prefetching into
 * a channel.
 *
 * Protocol (the prefetch.c pattern, with a Lua producer):
 *
 *   worker    At its first start the thread creates its state
 *             (sl__lua_worker_new), finds `sluice.worker` (the registry entry
 *             "sluice.worker", else require) and rebuilds fn with
 *             sl__lua_unship; the state and both registry references live
 *             until destroy.  Each pass: it = fn() (a fresh iterator, kept in
 *             the registry while the pass runs), then until `stop`:
 *               v = it()         error -> kill(ch, SL_ELUA, message), exit
 *               v == nil         close(ch) (EOF), exit
 *               worker.export(v, slot, schema)
 *                                error -> kill(ch, code, message), exit
 *               send(ch, *slot)  fails (aborted: the consumer is going
 *                                away) -> release the sample, exit
 *             Every call goes through sl__lua_pcall, so messages read
 *             "reader (<where>): <message + traceback>".  `schema` is the
 *             stage's; in the very first pass without a given schema the
 *             first row is exported with schema nil and its schema is used
 *             for the rows after it.  A row whose sample does not match is
 *             SL_ESHAPE "reader (<where>): row N: ..." (N from 0 each pass).
 *   consumer  Receives through a small cache (sl_channel_recv_many, as
 *             prefetch.c): the channel is FIFO and reports its end only once
 *             drained, so an error arrives after the rows before it.  The
 *             reader base makes EOF latched and errors sticky.
 *   stop      (reset, destroy) set `stop`, abort the channel (a blocked send
 *             wakes and fails), join.  `stop` is checked between rows; a
 *             thread inside a Lua call finishes that call first.
 *   reset     stop; drop the cache; reopen the channel; start the thread,
 *             which calls fn() again for a fresh iterator in the same state.
 *   destroy   stop; drop the cache; destroy the channel; close the state.
 *
 * Construction: with a schema, the thread starts and the constructor returns
 * at once.  Without one, the constructor waits for the first row: its schema
 * is the reader's (the row stays cached and is yielded first); if the pass
 * ends at once (EOF) the schema has no fields; if it fails, construction
 * fails with that error (no schema could be known).
 *
 * Shared fields and what protects them:
 *   ch: thread-safe by itself (the thread sends, closes, kills; the consumer
 *     receives, aborts, reopens).
 *   stop: atomic, written by the consumer, read by the thread.
 *   L, fn_ref, export_ref, slot, pass_schema: the thread's while it runs, the
 *     consumer's otherwise (pthread_create / join order them).
 *   schema, thread, running, cache, cache_pos, cache_len: consumer-only
 *     (schema is read by the thread only through pass_schema, copied before
 *     it starts).
 *   fn, env, where: immutable.
 */
#include "readers/reader_impl.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>
#include <pthread.h>

#define READER_CACHE 16

typedef struct lua_reader {
  sl__shipped *fn;
  sl__lua_env *env;
  const char *where;
  sl_schema *schema;      /* the reader's (retained); NULL until known */
  sl_schema *pass_schema; /* the thread's copy of `schema` (retained) */
  sl_channel *ch;
  atomic_bool stop;
  pthread_t thread;
  bool running;
  lua_State *L;
  int fn_ref, export_ref;
  sl_sample *slot;
  sl_sample *cache[READER_CACHE];
  int cache_pos, cache_len;
  sl__stage_counters stats; /* busy: the Lua rows; wait_down: blocked send */
} lua_reader;

/* --- the thread ----------------------------------------------------------- */

/* Checks row *s against `want`: same field names (in any order: *s is then
 * replaced by a sample in want's order), tensors that fit. */
static int check_row(const lua_reader *r, const sl_schema *want,
                     sl_sample **s, uint64_t row) {
  const sl__lua_check_words words = {.what = "reader",
                                     .where = r->where,
                                     .item = "row",
                                     .fields = "fields",
                                     .whose = "the reader's",
                                     .require_filled = false};
  return sl__lua_check_sample(want, s, row, &words);
}

/* Ends the pass with this thread's current error. */
static void kill_with_error(lua_reader *r, int rc) {
  if (sl_last_error_code() != rc || !sl_last_error()[0])
    sl_set_error(rc, "reader (%s): %s", r->where, sl_strerror(rc));
  char *msg = sl__error_dup();
  sl_channel_kill(r->ch, rc, msg);
  sl__free(msg);
}

/* One pass; returns when the pass ended or the thread was stopped. */
static void run_pass(lua_reader *r) {
  lua_State *L = r->L;
  lua_settop(L, 0);
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->fn_ref);
  int rc = sl__lua_pcall(L, 0, 1, "reader", r->where);
  if (rc < 0) {
    kill_with_error(r, rc);
    return;
  }
  if (!lua_isfunction(L, -1) && !lua_istable(L, -1) && !lua_isuserdata(L, -1)) {
    sl_set_error(SL_ELUA,
                 "reader (%s): the reader creator returned a %s, not an "
                 "iterator function",
                 r->where, luaL_typename(L, -1));
    kill_with_error(r, SL_ELUA);
    lua_settop(L, 0);
    return;
  }
  /* The iterator stays at stack index 1 for the whole pass. */
  for (uint64_t row = 0;; row++) {
    if (atomic_load_explicit(&r->stop, memory_order_relaxed)) break;
    uint64_t t0 = sl__stat_start();
    lua_settop(L, 1);
    lua_pushvalue(L, 1);
    rc = sl__lua_pcall(L, 0, 1, "reader", r->where);
    if (rc < 0) {
      kill_with_error(r, rc);
      break;
    }
    if (lua_isnil(L, -1)) {
      sl_channel_close(r->ch);
      break;
    }
    /* export(value, slot, schema) */
    int v = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->export_ref);
    lua_pushvalue(L, v);
    r->slot = NULL;
    sl__lua_push_ptr(L, &r->slot);
    if (r->pass_schema)
      sl__lua_push_ptr(L, r->pass_schema);
    else
      lua_pushnil(L);
    rc = sl__lua_pcall(L, 3, 0, "reader", r->where);
    sl_sample *s = r->slot;
    r->slot = NULL;
    if (rc < 0) {
      sl_sample_release(s);
      kill_with_error(r, rc);
      break;
    }
    if (!s) {
      sl_set_error(SL_ELUA, "reader (%s): row %llu: export made no sample",
                   r->where, (unsigned long long)row);
      kill_with_error(r, SL_ELUA);
      break;
    }
    if (r->pass_schema) {
      rc = check_row(r, r->pass_schema, &s, row);
      if (rc < 0) {
        sl_sample_release(s);
        kill_with_error(r, rc);
        break;
      }
    } else {
      r->pass_schema = sl_schema_retain((sl_schema *)sl_sample_schema(s));
    }
    sl__stat_since(&r->stats.busy_ns, t0);
    t0 = sl__stat_start();
    int sent = sl_channel_send(r->ch, s);
    sl__stat_since(&r->stats.wait_down_ns, t0);
    if (sent != SL_OK) {
      sl_sample_release(s); /* aborted: the consumer is going away */
      break;
    }
  }
  lua_settop(L, 0); /* drops the iterator */
}

static void *reader_main(void *arg) {
  lua_reader *r = arg;
#if defined(__linux__)
  (void)pthread_setname_np(pthread_self(), "sl-lua-reader");
#elif defined(__APPLE__)
  (void)pthread_setname_np("sl-lua-reader");
#endif
  if (!r->L) {
    int rc = sl__lua_worker_setup(r->env, r->fn, "reader", r->where, "export",
                                  &r->export_ref, &r->fn_ref, &r->L);
    if (rc < 0) {
      kill_with_error(r, rc);
      return NULL;
    }
  }
  run_pass(r);
  return NULL;
}

/* --- consumer side -------------------------------------------------------- */

static int start_thread(lua_reader *r) {
  atomic_store_explicit(&r->stop, false, memory_order_relaxed);
  sl_schema_release(r->pass_schema);
  r->pass_schema = sl_schema_retain(r->schema);
  int err = pthread_create(&r->thread, NULL, reader_main, r);
  if (err)
    return sl_set_error(SL_ENOMEM, "reader (%s): cannot start its thread: %s",
                        r->where, strerror(err));
  r->running = true;
  return SL_OK;
}

static void stop_thread(lua_reader *r) {
  if (!r->running) return;
  atomic_store_explicit(&r->stop, true, memory_order_relaxed);
  sl_channel_abort(r->ch, SL_EKILLED, "reader: stopped");
  pthread_join(r->thread, NULL);
  r->running = false;
}

static void drop_cache(lua_reader *r) {
  while (r->cache_pos < r->cache_len)
    sl_sample_release(r->cache[r->cache_pos++]);
  r->cache_pos = r->cache_len = 0;
}

static int reader_next(void *state, sl_sample **out) {
  lua_reader *r = state;
  if (r->cache_pos == r->cache_len) {
    int n = sl_channel_recv_many(r->ch, r->cache, READER_CACHE);
    if (n <= 0) return n; /* SL_EOF, or the kill code with its message */
    r->cache_pos = 0;
    r->cache_len = n;
  }
  *out = r->cache[r->cache_pos++];
  return SL_OK;
}

static int reader_reset(void *state) {
  lua_reader *r = state;
  stop_thread(r);
  drop_cache(r);
  sl_channel_reopen(r->ch);
  return start_thread(r);
}

static void reader_destroy(void *state) {
  lua_reader *r = state;
  if (!r) return;
  if (r->ch) {
    stop_thread(r);
    drop_cache(r);
    sl_channel_destroy(r->ch);
  }
  if (r->L) lua_close(r->L);
  sl_schema_release(r->pass_schema);
  sl_schema_release(r->schema);
  sl__shipped_release(r->fn);
  sl__lua_env_release(r->env);
  sl__free(r);
}

static const sl_reader_vtable reader_vt = {"reader", reader_next, reader_reset,
                                           reader_destroy};

int sl__lua_reader(sl__shipped *fn, sl__lua_env *env, size_t buffer,
                   sl_schema *schema, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "reader: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!fn || !env, SL_EINVAL, "reader: NULL %s",
                     !fn ? "function" : "environment");
  SL_RETURN_ERROR_IF(buffer == 0, SL_EINVAL,
                     "reader (%s): buffer size must be >= 1",
                     sl__shipped_where(fn));
  lua_reader *r = sl__calloc(1, sizeof *r);
  SL_RETURN_ERROR_IF(!r, SL_ENOMEM, "reader: cannot allocate");
  atomic_init(&r->stop, false);
  r->fn = sl__shipped_retain(fn);
  r->env = sl__lua_env_retain(env);
  r->where = sl__shipped_where(fn);
  if (schema) {
    sl_schema_freeze(schema);
    r->schema = sl_schema_retain(schema);
  }
  r->ch = sl_channel_new(buffer, 0);
  if (!r->ch) {
    int rc = sl_wrap_error(sl_last_error_code(), "reader (%s)", r->where);
    reader_destroy(r);
    return rc;
  }
  int rc = start_thread(r);
  if (rc < 0) {
    reader_destroy(r);
    return rc;
  }
  if (!r->schema) {
    int n = sl_channel_recv_many(r->ch, r->cache, READER_CACHE);
    if (n > 0) {
      r->cache_len = n;
      r->schema = sl_schema_retain((sl_schema *)sl_sample_schema(r->cache[0]));
    } else if (n == SL_EOF) {
      /* An empty first pass: the reader has no fields.  Later passes must
       * stay empty too (any row fails the schema check). */
      r->schema = sl_schema_new();
      if (!r->schema) {
        reader_destroy(r);
        return sl_set_error(SL_ENOMEM, "reader (%s): cannot allocate a schema",
                            r->where);
      }
      sl_schema_freeze(r->schema);
      /* The channel stays closed: the first next() sees EOF again. */
    } else {
      char *msg = sl__error_dup();
      reader_destroy(r);
      rc = sl_set_error(n, "%s", msg ? msg : sl_strerror(n));
      sl__free(msg);
      return rc;
    }
  }
  r->stats.threads = 1;
  rc = sl__reader_make(&reader_vt, r, r->schema, out);
  if (rc == SL_OK) sl__reader_link(*out, NULL, 0, &r->stats);
  return rc;
}
