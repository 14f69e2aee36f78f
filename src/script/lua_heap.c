/*
 * lua_heap.c - a worker Lua state's heap under the pipeline's memory budget
 * (issue 27; lua_internal.h, "the heap of a worker state").
 *
 * What is charged: the state's heap (lua_gc's count, in bytes) above what
 * it held once made and fully collected (`base`: the sluice modules and the
 * rebuilt function, a fixed cost per thread like its stack, about half a
 * MiB), as the stage account's resident bytes (sync/budget.h): what the
 * function keeps between calls and the garbage its calls left.  After each
 * call the worker looks (two lua_gc counts, no lock) and moves the charge
 * when it changed by a quarter of a quantum - 1/64 of the budget, between
 * 16 KiB and 1 MiB - so the shared total is not touched at every call.
 *
 * When the growth does not fit the ledger (the budget is full: the other
 * stages wait, and this worker would wait at its next reservation), the
 * state is fully collected first, once it grew by a quantum since its last
 * collection (its own collector's or ours): the garbage is freed rather
 * than charged, and a state that has not grown by a quantum yet is charged
 * later (at most a quantum per state is ever uncounted).  What survives a
 * collection - data the function keeps - is charged without waiting (it
 * cannot be freed by waiting).  The collection also runs the finalizers of
 * the samples Lua let go, which frees their C memory.
 *
 * The C memory of the tensors the function makes (sl__lua_buffer_new) is
 * not in the heap's count: each stays referenced by its Lua object (or its
 * release block) until the collector finds that dead, long after the
 * sample holding it was handed on and released - a state making 16 KiB
 * documents in a few bytes of Lua garbage pins megabytes between cycles.
 * It is not charged here (the samples holding it are, downstream), but
 * once a state made 4 quanta of it since its last collection, it is
 * collected in full: what it pins stays under 4 quanta per worker.
 */
#include "script/lua_internal.h"
#include "sync/budget.h"

static uint64_t heap_bytes(lua_State *L) {
  return (uint64_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 +
         (uint64_t)lua_gc(L, LUA_GCCOUNTB, 0);
}

/* The step of a budget of `cap` bytes: cap / 64 within [16 KiB, 1 MiB]. */
static uint64_t quantum(uint64_t cap) {
  uint64_t q = cap / 64;
  return q < (16u << 10) ? (16u << 10) : q > (1u << 20) ? (1u << 20) : q;
}

void sl__lua_heap_start(lua_State *L, sl__lua_heap *h) {
  lua_gc(L, LUA_GCCOLLECT, 0);
  h->base = h->live = heap_bytes(L);
  h->charged = h->made = 0;
  (void)sl__lua_buffers_made(); /* before this state ran */
}

void sl__lua_heap_charge(lua_State *L, sl__lua_heap *h, sl__budget_acct *a) {
  if (!a) return;
  sl__budget *b = sl__budget_of(a);
  uint64_t q = quantum(sl__budget_cap(b));
  h->made += sl__lua_buffers_made();
  if (h->made >= 4 * q) { /* the tensors it made pin their C memory */
    lua_gc(L, LUA_GCCOLLECT, 0);
    h->live = heap_bytes(L);
    h->made = 0;
  }
  uint64_t heap = heap_bytes(L);
  if (heap < h->live) h->live = heap; /* its own collector ran */
  uint64_t want = heap > h->base ? heap - h->base : 0;
  if (want > h->charged) {
    uint64_t grow = want - h->charged;
    if (grow < q / 4) return;
    if (sl__budget_held(b) + grow > sl__budget_cap(b)) {
      if (heap < h->live + q) return; /* not a quantum of garbage yet */
      lua_gc(L, LUA_GCCOLLECT, 0);
      heap = h->live = heap_bytes(L);
      h->made = 0;
      want = heap > h->base ? heap - h->base : 0;
    }
  } else if (h->charged - want < q / 4 && want) {
    return;
  }
  sl__budget_resident(a, h->charged, want);
  h->charged = want;
}

void sl__lua_heap_release(sl__lua_heap *h, sl__budget_acct *a) {
  if (a && h->charged) sl__budget_resident(a, h->charged, 0);
  h->charged = 0;
}
