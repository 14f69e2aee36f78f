/* sigbus_guard.h - reading a memory map of a file that may be truncated
 * under the reader.  Touching a mapped page past the file's current end
 * raises SIGBUS, which kills the process unless handled; a caller that
 * reads a map (source.h's `view`) runs the reading code through
 * sl__sigbus_guard, which turns a SIGBUS raised on its own thread during
 * the call into a return, so the caller reports the file as shrunk.
 *
 * The first call installs one process-wide SIGBUS handler (sigaction,
 * SA_SIGINFO | SA_NODEFER) that keeps the disposition it replaced: a SIGBUS
 * outside a guarded call, or on another thread, goes to that (the default:
 * the process dies as before). */
#ifndef SLUICE_SIGBUS_GUARD_H
#define SLUICE_SIGBUS_GUARD_H

#include <stdbool.h>

/* Calls fn(arg) and returns what it returns; when SIGBUS hits the calling
 * thread during the call, fn is abandoned where it stood (it must hold no
 * lock and own no allocation then: run only reads of the map and
 * computations on the caller's buffers through it), *faulted is set and 0
 * is returned.  Otherwise *faulted is false.  Calls nest.  Thread-safe;
 * the handler's install is once per process. */
int sl__sigbus_guard(int (*fn)(void *), void *arg, bool *faulted);

/* Whether the guard can work in this build: not under ThreadSanitizer,
 * whose runtime keeps SIGBUS from reaching the handler (the process dies
 * as without one); readers then use pread instead of a map. */
#if defined(__SANITIZE_THREAD__)
#define SL_SIGBUS_GUARD_WORKS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SL_SIGBUS_GUARD_WORKS 0
#endif
#endif
#ifndef SL_SIGBUS_GUARD_WORKS
#define SL_SIGBUS_GUARD_WORKS 1
#endif

#endif
