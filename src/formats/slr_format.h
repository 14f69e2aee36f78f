/*
 * slr_format.h - constants of the SLR format (docs/FORMAT.md) and the record
 * layout derived from a schema, shared by the writer and the reader.
 */
#ifndef SLUICE_SLR_FORMAT_H
#define SLUICE_SLR_FORMAT_H

#include "core/internal.h"
#include "core/bytes.h"

#define SLR_MAJOR 1
#define SLR_MINOR 0
#define SLR_HEADER_SIZE 32
#define SLR_CHUNK_HEADER_SIZE 40
#define SLR_FOOTER_SIZE 64
#define SLR_INDEX_ENTRY_SIZE 24
#define SLR_CODEC_ZSTD 1
/* Codec 2: a frame table, then independent zstd frames of frame_records
 * records each, compressed with the file's dictionary when it has one
 * (docs/FORMAT.md, "Framed chunks"). */
#define SLR_CODEC_ZSTD_FRAMES 2
/* Codec 3: codec 2 with a compact frame table (varint sizes) and frames
 * without zstd's magic number (docs/FORMAT.md, "Compact framed chunks"). */
#define SLR_CODEC_ZSTD_FRAMES_COMPACT 3
#define SLR_CODEC_IS_FRAMED(c)                                                 \
  ((c) == SLR_CODEC_ZSTD_FRAMES || (c) == SLR_CODEC_ZSTD_FRAMES_COMPACT)
/* Required feature bit 0: the file may hold codec-2 chunks and a dictionary
 * block (written as version 1.1). */
#define SLR_FEATURE_FRAMES 1u
#define SLR_MINOR_FRAMES 1
/* Required feature bit 3 (0x8): the file may hold codec-3 chunks (with
 * bit 0; still written as version 1.1: the bits say what a reader needs).
 * Bits 0x2 and 0x4 stay unassigned (the tests use them as unknown bits). */
#define SLR_FEATURE_COMPACT_FRAMES 8u
/* Feature bits known to this version. */
#define SLR_KNOWN_REQUIRED (SLR_FEATURE_FRAMES | SLR_FEATURE_COMPACT_FRAMES)
#define SLR_FRAME_TABLE_HEAD 8  /* u32 frame_records, u32 frame_count */
#define SLR_FRAME_ENTRY_SIZE 12 /* u32 stored, u32 raw, u32 crc32c */
/* Codec 3: u32 frame_records, u32 frame_count, u32 table bytes; entries of
 * varint stored, varint raw (LEB128, 1..5 bytes, < 2^32), u32 crc32c. */
#define SLR_COMPACT_TABLE_HEAD 12
#define SLR_COMPACT_ENTRY_MIN 6
#define SLR_COMPACT_ENTRY_MAX 14
#define SLR_DICT_HEAD 8         /* magic, block size */
/* Largest dictionary a writer stores or a reader accepts. */
#define SLR_MAX_DICT ((uint64_t)16 << 20)

extern const unsigned char sl__slr_magic[8];     /* file header */
extern const unsigned char sl__slr_end_magic[8]; /* footer */
#define SLR_CHUNK_MAGIC 0x4B434C53u              /* "SLCK" */
#define SLR_SCHEMA_MAGIC 0x43534C53u             /* "SLSC" */
#define SLR_INDEX_MAGIC 0x58494C53u              /* "SLIX" */
#define SLR_DICT_MAGIC 0x43444C53u               /* "SLDC" */

/* Largest dimension a record may declare (guards size arithmetic). */
#define SLR_MAX_DIM ((uint64_t)1 << 40)

/* Where each field of a record lives, computed once from the schema. */
typedef struct slr_field_layout {
  bool var;     /* has a -1 dimension */
  bool boolean; /* dtype bool: every byte must be 0 or 1 */
  int rank;
  int64_t shape[SL_MAX_RANK];
  int first_dim_slot; /* index of its first -1 dim in the dims block */
  size_t esize, align;
  size_t offset; /* fixed fields: byte offset in every record */
  size_t nbytes; /* fixed fields: data size */
} slr_field_layout;

typedef struct slr_layout {
  int nfields;
  int ndims;        /* V: -1 dimensions in the whole schema */
  size_t fixed_end; /* dims block + fixed fields: variable data starts here */
  slr_field_layout *f;
} slr_layout;

/* Computes the layout of `schema`.  SL_OK, SL_EINVAL (fixed part too large)
 * or SL_ENOMEM. */
int sl__slr_layout_init(slr_layout *l, const sl_schema *schema);
void sl__slr_layout_free(slr_layout *l);

/* Size of record `s` once encoded (including its padding to 8).  The sample
 * must already match the schema. */
size_t sl__slr_record_size(const slr_layout *l, const sl_sample *s);
/* Encodes `s` into `dst` (sl__slr_record_size bytes, zero padding written). */
void sl__slr_record_encode(const slr_layout *l, const sl_sample *s,
                           unsigned char *dst);
/* Checks a record of `len` bytes at `rec` (8-aligned) against the layout:
 * dims within limits, size equal to what the dims imply, alignment and
 * final padding zero, bool elements 0 or 1.  Returns SL_OK or
 * SL_ECORRUPT with a message (without the "where", which the caller adds). */
int sl__slr_record_check(const slr_layout *l, const unsigned char *rec,
                         uint64_t len);
/* Makes a sample of `schema` whose tensors view the record at byte `off` of
 * `buf` (already checked). */
int sl__slr_record_decode(const slr_layout *l, sl_schema *schema,
                          sl_buffer *buf, size_t off, sl_sample **out);

#endif
