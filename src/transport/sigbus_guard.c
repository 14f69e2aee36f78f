/*
 * sigbus_guard.c - SIGBUS raised while reading a map becomes a return
 * (sigbus_guard.h).  A guarded call stores a jump buffer in a thread-local
 * pointer; the handler jumps there when it is set (the signal is
 * synchronous: it is delivered to the thread that touched the page), and
 * otherwise hands the signal to the disposition it replaced.  SA_NODEFER
 * leaves SIGBUS unblocked in the handler, so the jump (sigsetjmp without
 * the mask: no system call per guarded call) leaves the thread's mask as it
 * was.
 */
#include "transport/sigbus_guard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>

static struct sigaction g_old;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local sigjmp_buf *tl_env;

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  sigjmp_buf *env = tl_env;
  if (env) {
    tl_env = NULL;
    siglongjmp(*env, 1);
  }
  /* Not ours: what was there before. */
  if (g_old.sa_flags & SA_SIGINFO) {
    g_old.sa_sigaction(sig, si, uc);
  } else if (g_old.sa_handler != SIG_DFL && g_old.sa_handler != SIG_IGN) {
    g_old.sa_handler(sig);
  } else {
    /* The default: returning re-runs the faulting access, which now gets
     * the default action; a SIGBUS sent by kill() is raised again. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
    if (si && si->si_code <= 0) raise(SIGBUS);
  }
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &g_old);
}

int sl__sigbus_guard(int (*fn)(void *), void *arg, bool *faulted) {
  pthread_once(&g_once, install);
  sigjmp_buf env;
  sigjmp_buf *volatile prev = tl_env;
  *faulted = false;
  if (sigsetjmp(env, 0)) {
    tl_env = prev;
    *faulted = true;
    return 0;
  }
  tl_env = &env;
  int rc = fn(arg);
  tl_env = prev;
  return rc;
}
