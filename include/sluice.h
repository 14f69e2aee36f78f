/*
 * sluice.h - the one public header of sluice, a C runtime for the input
 * pipelines of machine-learning training.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *
 *  - Errors.  Functions returning `int` return SL_OK (0) on success or a
 *    negative SL_E* code.  On failure a detail message saying what failed and
 *    where is stored in a thread-local slot readable with sl_last_error().
 *    SL_EOF (end of data) is not an error and carries no message.
 *  - Ownership.  "Takes" means the callee now owns the reference it was given
 *    (the caller must not release it); "borrows" means the callee uses the
 *    object only during the call, or as documented, and the caller keeps its
 *    reference.  Objects returned through an out-parameter are owned by the
 *    caller unless the comment says "borrowed".
 *  - NULL.  Every *_destroy / *_release accepts NULL and does nothing.
 *  - Threads.  Refcounting (retain/release) is thread-safe everywhere.
 *    Immutable objects (a schema once attached to a reader or sample, a
 *    sample once published) may be read from any thread.  A reader is used by
 *    one thread at a time unless wrapped by sl_threaded; channels are fully
 *    thread-safe.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include "sluice/arrow.h"
#include "sluice/data.h"
#include "sluice/device.h"
#include "sluice/errors.h"
#include "sluice/image.h"
#include "sluice/open.h"
#include "sluice/pipeline.h"
#include "sluice/reader.h"
#include "sluice/stages.h"
#include "sluice/stats.h"

#endif /* SLUICE_H */
