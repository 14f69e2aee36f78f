/*
 * output.h - the one path every packer writes its outputs through
 * (output.c): the SLR writer and its shard sink, `pack tokens`, `pack
 * images --format wds`, and any future packer.
 *
 * An output file is written under a unique temporary name next to it
 * ("NAME.tmp-PID-XXXXXX", created O_EXCL | O_NOFOLLOW: an existing file or
 * a planted symbolic link is never opened), registered in a table a signal
 * handler can walk, and renamed to NAME only when complete and synced.  An
 * output set is the K files of one pack run: their names are checked
 * against the run's inputs (the same file, through links, is refused) and
 * against existing folders before anything is written, missing folders are
 * created (and removed again on failure), and the files are renamed only
 * once every one is complete, with the asynchronous signals held during
 * the renames.  Readers tell two runs' files apart by a set identity the
 * format records (sl__new_set_id); the formats say where.
 */
#ifndef SLUICE_IO_OUTPUT_H
#define SLUICE_IO_OUTPUT_H

#include "core/internal.h"

#include <signal.h>

/* --- set identity ---------------------------------------------------------
 */
#define SL__SET_ID_LEN 32
/* A new random set id (32 lowercase hex digits and a NUL). */
void sl__new_set_id(char out[SL__SET_ID_LEN + 1]);
/* n random bytes (getrandom; a clock-seeded fallback, never fails). */
void sl__random_bytes(void *buf, size_t n);

/* --- one output file ------------------------------------------------------
 */
typedef struct sl__out_file sl__out_file;

/* Creates the temporary file of output `path` (mode 0666 less the umask,
 * as a plain create)
 * and registers it for sl__out_remove_temps.  The folder must exist.
 * `what` ("slr writer", "pack tokens") prefixes the messages.  SL_OK,
 * SL_EIO (naming the temporary name) or SL_ENOMEM. */
SL_API int sl__out_open(const char *what, const char *path, sl__out_file **f);
/* Writes n bytes at the end (looping over short writes and EINTR; the
 * write fault hook of io_faults.h applies).  SL_EIO names the temporary
 * file and the offset; after a failure every later write fails. */
SL_API int sl__out_write(sl__out_file *f, const void *p, size_t n);
/* Bytes written so far. */
uint64_t sl__out_bytes(const sl__out_file *f);
/* The final name and the temporary name. */
const char *sl__out_name(const sl__out_file *f);
const char *sl__out_temp_name(const sl__out_file *f);
/* Syncs and closes the file: complete under its temporary name.  On
 * failure the temporary file is removed.  Idempotent. */
int sl__out_finish(sl__out_file *f);
/* Finishes if needed, renames to the final name, syncs the folder, frees
 * `f` (also on failure, the temporary file then removed). */
SL_API int sl__out_commit(sl__out_file *f);
/* Removes the temporary file and frees `f`.  NULL-safe. */
SL_API void sl__out_abort(sl__out_file *f);

/* Removes every temporary file of the process (and every folder an output
 * set created that is empty again): async-signal-safe (unlink and rmdir
 * only), for signal handlers. */
SL_API void sl__out_remove_temps(void);

/* --- a set of outputs: one pack run ---------------------------------------
 */
typedef struct sl__out_set sl__out_set;

/* Opens the k outputs `names` of one run.  Before anything is created,
 * every name is checked: one that is one of the `n_inputs` files `inputs`
 * (same device and inode, links followed) or an existing folder is
 * refused (SL_EINVAL), as is a name given twice; then the missing folders
 * are made.  Each temporary file is created when first asked for
 * (sl__out_set_file), so a writer that fills the files one at a time and
 * finishes each (sl__out_finish closes it) holds one descriptor. */
int sl__out_set_open(const char *what, const char *const *names, uint32_t k,
                     const char *const *inputs, size_t n_inputs,
                     sl__out_set **set);
/* Output i (0 <= i < k), owned by the set; its temporary file is created
 * on the first call.  NULL with the error set when it cannot be. */
sl__out_file *sl__out_set_file(sl__out_set *set, uint32_t i);
/* Total bytes written to the set's files. */
uint64_t sl__out_set_bytes(const sl__out_set *set);
/* Finishes every file: written and synced under its temporary name (a
 * file never asked for is created empty; on failure, abort the set).
 * Idempotent. */
int sl__out_set_finish(sl__out_set *set);
/* Finishes every file (sl__out_set_finish), then renames them all with the
 * catchable asynchronous signals held.  Until the first rename any failure
 * removes every temporary file and made folder, leaving the outputs as they
 * were; a rename that fails after others succeeded cannot take those back (the
 * message names them; the set identity tells readers).  Frees the set.
 * NULL-safe. */
int sl__out_set_commit(sl__out_set *set);
/* Removes every temporary file and made folder and frees the set. */
void sl__out_set_abort(sl__out_set *set);

/* --- signals of a packing command -----------------------------------------
 */
#define SL__OUT_NSIGS 12
typedef struct sl__out_signals {
  struct sigaction old[SL__OUT_NSIGS];
} sl__out_signals;

/* Installs the packing commands' handlers (not over a signal the caller
 * ignores, as nohup does), saving the old ones: SIGINT, SIGTERM and SIGHUP
 * set the returned flag (the packers check it and stop, removing their
 * temporary files); a second one, or SIGPIPE, SIGALRM, SIGXFSZ, SIGQUIT,
 * SIGUSR1, SIGUSR2, SIGVTALRM, SIGPROF or SIGXCPU, removes every temporary
 * file (sl__out_remove_temps) and ends the process by that signal.  The
 * flag holds the signal's number. */
SL_API const volatile sig_atomic_t *
sl__out_signals_catch(sl__out_signals *save);
SL_API void sl__out_signals_restore(const sl__out_signals *save);

#endif
