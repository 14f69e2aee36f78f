/* gzip_stream.h - a gzip file read forward as one stream of bytes through a
 * byte source (source.h: a local file by pread, a URL by ranged GETs), for
 * the tfrecord: reader's GZIP files (tfrecord_reader.c) and its fuzz
 * target.
 *
 * The stream is inflated as it is read: compressed bytes come in blocks of
 * a fixed size and the caller takes the inflated bytes in pieces of its
 * choosing, so memory never depends on what the file claims or inflates
 * to.  Members follow one another as gzip -d reads them (a concatenation
 * of gzip files is one stream; pigz and `cat a.gz b.gz` write such files);
 * bytes after the last member that are not another member are an error,
 * not silently ignored. */
#ifndef SLUICE_IO_GZIP_STREAM_H
#define SLUICE_IO_GZIP_STREAM_H

#include "core/internal.h"
#include "transport/source.h"

typedef struct sl__gz sl__gz;

/* Starts reading the gzip stream of `src`, which it takes (closed with the
 * stream, or here on failure).  The source's name names it in messages.
 * SL_OK or SL_ENOMEM. */
int sl__gz_open(sl__source *src, sl__gz **out);

/* Reads up to n bytes from the stream's position into buf: *got < n only
 * at the stream's end.  SL_ECORRUPT naming the source, the compressed
 * offset and what is wrong (not gzip, bad deflate data, a CRC-32 or length
 * trailer that does not match, the stream cut short inside a member,
 * trailing bytes that are not a gzip member); SL_EIO from the source
 * (naming it); SL_ENOMEM.  After an error the stream stays failed (each
 * read repeats the error) until sl__gz_rewind. */
int sl__gz_read(sl__gz *g, void *buf, size_t n, size_t *got);

/* Passes over n bytes (inflated, not kept): *got < n only at the end.
 * Errors as sl__gz_read. */
int sl__gz_skip(sl__gz *g, uint64_t n, uint64_t *got);

/* Back to the stream's first byte. */
void sl__gz_rewind(sl__gz *g);

void sl__gz_close(sl__gz *g);

/* The bytes the stream holds now: its input block, zlib's state and
 * window, and its source's (sl__source_held: a URL's read-ahead).  For the
 * memory budget's resident charge of the reader (tfrecord_reader.c);
 * 0 for NULL. */
uint64_t sl__gz_held(const sl__gz *g);

#endif
