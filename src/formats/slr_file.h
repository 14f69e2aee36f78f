/* slr_file.h - internals of the SLR reader shared with the slr reader stage
 * and the tests. */
#ifndef SLUICE_SLR_FILE_H
#define SLUICE_SLR_FILE_H

#include "core/keep.h"
#include "formats/slr_format.h"
#include "transport/source.h"

#include <pthread.h>
#include <stdatomic.h>
#include <zstd.h>

/* Chunk size limits (docs/FORMAT.md, "Chunk size limits"; slr_reader.c
 * explains them): a file that records no limit may not claim a raw size
 * above SLR_RATIO_FREE that is more than SLR_MAX_RATIO times its stored
 * size; the metadata key of the recorded limit. */
#define SLR_RATIO_FREE ((uint64_t)16 << 20)
#define SLR_MAX_RATIO 1024
#define SLR_META_MAX_CHUNK_RAW "sluice.max_chunk_raw"

/* Opens an SLR file over any byte source (taken, also on failure). */
int sl__slr_open_source(sl__source *src, const sl_slr_open_opts *opts,
                        sl_slr_file **out);

/* The `slr` reader over records [first, first + count) of an open file
 * (taken, also on failure; count UINT64_MAX = to the end), as sl_slr_reader
 * makes over a path.  For readers over other byte sources: the fuzz targets
 * (memory) and the fault tests (failing sources).  SL_EINVAL when first is
 * beyond the records. */
int sl__slr_reader_from_file(sl_slr_file *f, uint64_t first, uint64_t count,
                             sl_reader **out);

/* One frame of a chunk: where its stored bytes lie in the file, its sizes
 * and CRC, and where its raw bytes go in the chunk's decoded payload. */
typedef struct slr_frame {
  uint64_t off, raw_off, stored, raw;
  uint32_t crc;
} slr_frame;

/* A chunk's frames (slr_frames.c).  A codec-1 chunk is one frame of all its
 * records (its payload CRC is the frame's). */
typedef struct slr_frame_table {
  uint32_t per;   /* records per frame (the last may have fewer) */
  uint32_t count; /* frames */
  uint32_t codec;
  slr_frame fr[];
} slr_frame_table;

/* A decoded chunk: the raw payload in a refcounted buffer and where its
 * records are.  Valid until the next load on the same file. */
typedef struct slr_chunk {
  uint64_t index; /* chunk number */
  uint32_t records;
  sl_buffer *raw;            /* retained by the file's cache */
  const unsigned char *ends; /* u32 end offsets (little-endian) */
  size_t body;               /* byte offset of the body in raw */
  const slr_frame_table *frames; /* codec 2: per-frame tables, else NULL */
} slr_chunk;

typedef struct slr_index_entry {
  uint64_t offset, first_record;
  uint32_t records, header_crc;
} slr_index_entry;

typedef struct slr_fetch_ctx slr_fetch_ctx;

/* What decodes frames (slr_frames.c): a zstd context and, for a file with
 * a dictionary, a window: a copy of the dictionary followed by room for one
 * frame, with a DDict that references that copy.  zstd then meets the
 * dictionary as the prefix of the frame it decodes, and copies matches into
 * it as matches within the frame (not through its separate-dictionary path:
 * about 1.2x faster on 4 KiB frames); the frame is copied out after. */
typedef struct slr_decoder {
  ZSTD_DCtx *dctx;
  unsigned char *win; /* dictionary copy + room (NULL until first use) */
  size_t room;        /* bytes after the dictionary */
  ZSTD_DDict *ddict;  /* references win */
} slr_decoder;

/* An open file (slr_reader.c; the frames and the fetch path of framed
 * files in slr_frames.c). */
struct sl_slr_file {
  sl__source *src;
  sl_slr_open_opts opts;
  sl_schema *schema;
  slr_layout layout;
  uint64_t records, nchunks, schema_off, index_off, footer_off;
  uint64_t chunks_end; /* where the chunks end: the dictionary or schema */
  slr_index_entry *index;
  slr_decoder dec; /* the sequential path's (whole-chunk loads, verify) */
  unsigned char *stored; /* reused buffer for compressed payloads */
  size_t stored_cap;
  uint64_t raw_limit;       /* largest raw chunk size accepted */
  uint64_t stored_limit;    /* largest stored size: zstd's bound of it */
  const char *limit_from;   /* where raw_limit comes from, for messages */
  bool ratio_bound;         /* no recorded limit: check the ratio too */
  slr_chunk cache;          /* the last chunk decoded (cache.raw != NULL) */
  slr_frame_table *cache_frames; /* its frame table (codec 2) */
  sl__buffer_pool *pool;    /* decoded chunk buffers, made on first need */
  uint64_t bad_chunks;      /* skipped over the file's life */
  uint64_t pass_bad_chunks; /* skipped this pass: what the cap limits */
  /* framed files (required feature SLR_FEATURE_FRAMES) */
  bool framed;
  bool compact;              /* may hold codec-3 chunks (feature 0x4) */
  uint64_t dict_size;        /* dictionary block bytes (0: none) */
  ZSTD_DDict *ddict;         /* digested at open: the dictionary loads */
  unsigned char *dict;       /* the dictionary (each decoder's window
                                starts with a copy) */
  size_t dict_len;
  /* sl_slr_fetch (every file) */
  _Atomic(slr_frame_table *) *tables; /* per chunk, read on first fetch */
  pthread_mutex_t fetch_mu;  /* guards the idle contexts */
  bool fetch_mu_ok;          /* fetch_mu was initialised */
  slr_fetch_ctx *idle;       /* fetch contexts not in use */
  /* what the fetch contexts hold (scratch, decoded frames, zstd contexts
   * and windows), for the memory budget: any thread */
  atomic_uint_least64_t fetch_bytes;
  /* decoded chunks kept for later fetches (sl__slr_keep): per chunk, its
   * frames decoded whole, published once; NULL: not kept (yet), or
   * SLR_KEPT_BUSY / SLR_KEPT_BAD (sl__slr_kept) */
  sl__keep *keep;
  bool (*keep_room)(void *ud, const sl__keep *k, uint64_t n);
  void *keep_ud;
  _Atomic(sl_buffer *) *kept;
  struct slr_region *region; /* where the next kept chunk goes (fetch_mu) */
  atomic_uint_least64_t fetch_decodes; /* frames sl_slr_fetch decoded */
};

/* Whether the file may hold framed chunks (required feature 0x1). */
static inline bool sl__slr_framed(const sl_slr_file *f) {
  return f->framed;
}

/* Sets SL_ECORRUPT "FILE: chunk C at offset O: <fmt...>" and returns it. */
int sl__slr_chunk_fail(sl_slr_file *f, uint64_t c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define CHUNK_FAIL(...) return sl__slr_chunk_fail(f, c, __VA_ARGS__)

/* Reads and checks chunk c's header against its index entry (CRC, magic,
 * sequence, count, codec, sizes against the limits and the file); returns
 * the stored and raw sizes, the payload CRC and the codec. */
int sl__slr_chunk_header(sl_slr_file *f, uint64_t c, uint64_t *stored,
                         uint64_t *raw, uint32_t *payload_crc,
                         uint32_t *codec);
/* Checks the record table and the records of one decoded unit of n records
 * (a codec-1 chunk, or frame `frame` of a framed chunk, UINT32_MAX for
 * none) whose first record is `first` of chunk c; *body is where the
 * records start.  SL_ECORRUPT naming file, chunk, frame and record. */
int sl__slr_check_records(sl_slr_file *f, uint64_t c, uint32_t frame,
                          uint32_t first, const unsigned char *raw,
                          uint64_t raw_size, uint32_t n, size_t *body);

/* --- slr_frames.c --------------------------------------------------------- */

/* The frame table of chunk c, whose header gave codec, stored and raw
 * sizes and payload CRC: a codec-1 chunk is one frame; a codec-2 table is
 * parsed and checked from the payload's first `avail` bytes at `p`.  *out
 * is a new table (sl__free).  SL_ECORRUPT naming file and chunk when a
 * count, size or the table's CRC is wrong.  When avail is short of the
 * table, SL_OK with *out NULL and *need the bytes it takes. */
int sl__slr_frame_table(sl_slr_file *f, uint64_t c, uint32_t codec,
                        const unsigned char *p, uint64_t avail,
                        uint64_t stored, uint64_t raw, uint32_t pcrc,
                        uint64_t *need, slr_frame_table **out);
/* At open: makes the per-chunk table slots and the fetch context pool. */
int sl__slr_frames_open(sl_slr_file *f);
/* Decodes frame i of chunk c (its stored bytes at src) into dst (t->fr[i].raw
 * bytes) with d, after its CRC and declared size, then checks its
 * records; *body as sl__slr_check_records. */
int sl__slr_frame_decode(sl_slr_file *f, uint64_t c, const slr_frame_table *t,
                         uint32_t i, slr_decoder *d, const unsigned char *src,
                         unsigned char *dst, size_t *body);
/* Makes d's zstd context (SL_ENOMEM), or frees what d holds. */
int sl__slr_decoder_init(sl_slr_file *f, slr_decoder *d);
void sl__slr_decoder_free(slr_decoder *d);
/* Frees the frame tables and fetch contexts of a file. */
void sl__slr_frames_free(sl_slr_file *f);
/* Record r of a decoded framed chunk (ch->frames) as a new sample. */
int sl__slr_framed_record(sl_slr_file *f, const slr_chunk *ch, uint32_t r,
                          sl_sample **out);

/* Loads and fully checks chunk c (reusing the cached decode when it is the
 * last one loaded).  On success *out points into the file's cache. */
int sl__slr_load_chunk(sl_slr_file *f, uint64_t c, const slr_chunk **out);
/* The memory the file holds to read (the memory budget, sync/budget.h):
 * sl__slr_held_bytes, the sequential path's - its compressed payload
 * buffer, its decoded chunk, the idle decoded buffers of its pool, its
 * zstd context and dictionary window - on the thread that loads chunks
 * (as sl__slr_load_chunk); the decoded chunk is counted whole, also while
 * samples made from it (counted by the stages that hold them) refer to it.
 * sl__slr_fetch_bytes: its fetch contexts' (sl_slr_fetch: scratch, the
 * decoded frames of the frame cache, zstd contexts and windows), any
 * thread. */
uint64_t sl__slr_held_bytes(sl_slr_file *f);
uint64_t sl__slr_fetch_bytes(const sl_slr_file *f);
/* An entry of f->kept besides a kept chunk: a thread is decoding the chunk
 * to keep it (the others read their frame meanwhile), or a frame of it
 * failed its checks (it is never kept; its records are read frame by
 * frame; a read error or no memory leaves NULL: tried again).
 * sl__slr_kept: whether an entry is a kept chunk. */
#define SLR_KEPT_BUSY ((sl_buffer *)(uintptr_t)1)
#define SLR_KEPT_BAD ((sl_buffer *)(uintptr_t)2)
static inline bool sl__slr_kept(const sl_buffer *b) {
  return (uintptr_t)b > (uintptr_t)SLR_KEPT_BAD;
}

/* Keeping decoded chunks (core/keep.h): from now on a fetch from a chunk
 * not kept decodes the whole chunk (every frame, into one buffer) and
 * keeps it while `k` allows its bytes and room(ud, k, n) says the n bytes
 * may be kept (the memory budget), and serves later fetches of its records
 * from it, in this pass and the next, with no fetch context; the kept
 * bytes count in sl__slr_fetch_bytes.  A chunk that is not kept (no room,
 * or one of its frames fails its checks) is read frame by frame as
 * before, so every record gets its own frame's verdict.  They are let go when the file is closed (their
 * bytes given back to k, which must outlive the file).  Call it before
 * any fetch runs, once (a second call does nothing).  SL_OK or SL_ENOMEM.
 * sl__slr_fetch_decodes: the frames (a whole chunk of a file without
 * frames is one) sl_slr_fetch decoded so far (tests, benchmarks). */
int sl__slr_keep(sl_slr_file *f, sl__keep *k,
                 bool (*room)(void *ud, const sl__keep *k, uint64_t n),
                 void *ud);
uint64_t sl__slr_fetch_decodes(const sl_slr_file *f);
/* Record r of a loaded chunk as a new sample. */
int sl__slr_chunk_record(sl_slr_file *f, const slr_chunk *ch, uint32_t r,
                         sl_sample **out);
/* Counts a skipped chunk; fails with SL_ECORRUPT once more than the cap
 * were skipped in this pass (the same bad chunks are met again every pass:
 * a cap over the file's life would fail epoch k of a run whose every pass
 * is within it). */
int sl__slr_count_bad(sl_slr_file *f);
/* Starts a pass: the cap counts from zero again. */
void sl__slr_pass_start(sl_slr_file *f);
/* Restoring a position (stages/state.h): the corrupt chunks this pass has
 * skipped so far, which the cap counts; and a fingerprint of the file's
 * contents (CRC32C of its index: every chunk's offset, records and header
 * CRC, which covers the payload's CRC), so a state names a rewritten file. */
void sl__slr_set_pass_bad(sl_slr_file *f, uint64_t n);
uint32_t sl__slr_fingerprint(const sl_slr_file *f);
/* The file's identity as opened (its source's: transport/source.h). */
const sl__file_id *sl__slr_file_id(const sl_slr_file *f);
sl_corrupt_policy sl__slr_policy(const sl_slr_file *f);
/* First record number and record count of chunk c (from the index). */
void sl__slr_chunk_span(const sl_slr_file *f, uint64_t c, uint64_t *first,
                        uint32_t *count);

#endif
