/*
 * tokens_set.h - llm.c token shards as sluice writes them (import_tokens.c)
 * and the set identity the `tokens:` readers check (tokens_set.c).
 *
 * The header is 256 little-endian int32: magic 20240520, version 1, the
 * token count, then zeros that llm.c never reads.  sluice records there
 * the identity of the pack run that wrote the shard (docs/TEXT.md, "Token
 * shard sets"): at byte 512 the tag "sluice-set-v1" (16 bytes, NUL
 * padded), at 528 the set id (32 lowercase hex digits, the same in every
 * file of the run), at 560 the number of files of the run (u32), at 564
 * this file's index (u32: the training shards 0..K-1, the validation shard
 * K), at 568 the CRC-32C of bytes 512..567.
 */
#ifndef SLUICE_IO_TOKENS_SET_H
#define SLUICE_IO_TOKENS_SET_H

#include "core/internal.h"

#define SL__LLMC_MAGIC 20240520
#define SL__LLMC_HEADER_BYTES 1024

/* Writes the identity (id: 32 hex digits) into a 1024-byte header. */
void sl__tokens_set_put(unsigned char *header, const char *id, uint32_t size,
                        uint32_t index);

/* Refuses token files read together that mix two pack runs: files named
 * "PREFIX_NNNNNN.bin" or "PREFIX_val.bin" (the names `pack tokens`
 * gives) with the same PREFIX form a group; within a group every file
 * that has an identity must have the same set id, and a file without one
 * (an older shard) may not sit beside files with one.  Other names and
 * .npy files are not checked.  SL_OK, SL_ECORRUPT naming the odd file
 * (the first in the given order) and the file it disagrees with, SL_EIO
 * (a file that cannot be read), SL_ENOMEM.  `stage` prefixes the
 * message. */
int sl__tokens_set_check(const char *stage, const char *const *paths, size_t n);

#endif
