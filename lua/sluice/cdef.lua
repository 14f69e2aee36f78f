-- sluice.cdef: the part of include/sluice.h the Lua layer calls through the
-- LuaJIT FFI, and the library namespace to call it through.
--
-- The declarations are copied from sluice.h (same names, same types, same
-- struct layouts); keep them in step with the header.  Types with a body
-- (enums, structs) are declared only when not already known, because LuaJIT
-- refuses to redefine them and another module of the same Lua state (a C
-- trainer's own cdef, a spec) may have declared them first.  Function
-- declarations may be repeated freely.
--
-- The FFI is Lua's only bridge to C (docs/ARCHITECTURE.md).  Returns the
-- namespace holding the sl_* symbols, found in this order (docs/LUA.md,
-- "Finding libsluice"):
--   1. ffi.C when the process already exports them (a C trainer linking
--      libsluice, the `sluice` command, a test executable, a worker state
--      inside any of them): never a second copy of the library in one
--      process (it would have its own thread-local error slots, and readers
--      made by one copy would be freed by the other);
--   2. ffi.load(os.getenv "SLUICE_LIBRARY") when that variable is set (an
--      explicit choice: failing to load it is an error, not a fallback);
--   3. ffi.load(require "sluice.library"): a file CMake generates next to
--      the Lua modules - in a build tree, <build>/lua/sluice/library.lua
--      returns the absolute path of the built libsluice; in an installed
--      tree it returns the libsluice of its own prefix, from a path
--      relative to its own location (debug.getinfo), so a prefix can move;
--   4. ffi.load("sluice"), found by the dynamic linker's usual search.
local ffi = require "ffi"

local function declare(probe, decl)
  if not pcall(ffi.typeof, probe) then
    ffi.cdef(decl)
  end
end

declare("sl_dtype", [[
typedef enum sl_dtype {
  SL_DTYPE_INVALID = 0,
  SL_BOOL, SL_U8, SL_I8, SL_U16, SL_I16, SL_U32, SL_I32, SL_U64, SL_I64,
  SL_F16, SL_BF16, SL_F32, SL_F64, SL_BYTES,
  SL_DTYPE_COUNT
} sl_dtype;
]])

ffi.cdef [[
typedef struct sl_buffer sl_buffer;
typedef struct sl_schema sl_schema;
typedef struct sl_sample sl_sample;
typedef struct sl_reader sl_reader;
typedef struct sl_slr_writer sl_slr_writer;
]]

declare("sl_tensor", [[
typedef struct sl_tensor {
  sl_dtype dtype;
  int32_t rank;
  int64_t shape[8];
  void *data;
  size_t nbytes;
  sl_buffer *buf;
  const int64_t *lod;
  int64_t lod_len;
  sl_buffer *lod_buf;
} sl_tensor;
]])

declare("sl_batch_opts", [[
typedef struct sl_batch_opts {
  int drop_last;
  int pad;
  int lod;
} sl_batch_opts;
]])

declare("sl_corrupt_policy", [[
typedef enum sl_corrupt_policy {
  SL_CORRUPT_FAIL = 0,
  SL_CORRUPT_SKIP_CHUNK = 1
} sl_corrupt_policy;
]])

declare("sl_slr_open_opts", [[
typedef struct sl_slr_open_opts {
  sl_corrupt_policy policy;
  uint32_t max_bad_chunks;
  uint64_t max_chunk_bytes;
} sl_slr_open_opts;
]])

declare("sl_slr_writer_opts", [[
typedef struct sl_slr_writer_opts {
  int level;
  size_t chunk_bytes;
  uint32_t records_per_chunk;
} sl_slr_writer_opts;
]])

declare("sl_image_opts", [[
typedef enum sl_resize_filter {
  SL_RESIZE_NONE = 0,
  SL_RESIZE_NEAREST = 1,
  SL_RESIZE_BILINEAR = 2
} sl_resize_filter;
typedef struct sl_image_shape {
  int channels;
  uint32_t height, width;
  sl_resize_filter resize;
} sl_image_shape;
typedef struct sl_image_opts {
  size_t size;
  sl_image_shape shape;
  const char *field;
  uint32_t threads;
  uint32_t window;
  int unordered;
  sl_corrupt_policy policy;
  uint32_t max_bad;
} sl_image_opts;
typedef struct sl_crop_flip_opts {
  size_t size;
  const char *field;
  uint32_t height, width;
  int flip;
  uint64_t seed;
  uint64_t epoch;
} sl_crop_flip_opts;
]])

declare("sl_open_opts", [[
typedef struct sl_open_opts {
  size_t size;
  sl_slr_open_opts slr;
  const char *labels;
  int text_mmap;
  const char *parser;
  const char *parser_options;
  const struct sl_image_opts *image;
  const struct sl_tokens_opts *tokens;
  const struct sl_npy_opts *npy;
  const struct sl_csv_opts *csv;
  const struct sl_tfrecord_opts *tfrecord;
  const struct sl_wds_opts *wds;
} sl_open_opts;
]])

-- sluice.open's options for WebDataset shards (sl_open_opts.wds).
declare("sl_wds_opts", [[
typedef struct sl_wds_opts {
  size_t size;
  uint32_t threads;
  int shuffle;
  uint64_t seed;
  int rank, world;
  size_t buffer;
  int remainder; /* sl_shard_policy */
  const char *fields;
  int missing;
} sl_wds_opts;
]])

-- The options of tags npy, csv and tfrecord (docs/FORMATS.md).
declare("sl_npy_opts", [[
typedef struct sl_npy_opts {
  size_t size;
  const char *field;
} sl_npy_opts;
]])
declare("sl_csv_opts", [[
typedef struct sl_csv_opts {
  size_t size;
  const char *columns;
  char delimiter;
  int no_header;
} sl_csv_opts;
]])
declare("sl_tfrecord_opts", [[
typedef struct sl_tfrecord_opts {
  size_t size;
  const char *features;
  int compression;
} sl_tfrecord_opts;
]])

declare("sl_shard_policy", [[
typedef enum sl_shard_policy {
  SL_SHARD_PAD = 0,
  SL_SHARD_DROP = 1,
  SL_SHARD_UNEVEN = 2
} sl_shard_policy;
]])

declare("sl_open_files_opts", [[
typedef struct sl_open_files_opts {
  size_t size;
  sl_slr_open_opts slr;
  uint32_t threads;
  uint32_t buffer;
  int unordered;
  int shuffle;
  uint64_t seed;
  uint64_t epoch;
  uint32_t window;
  int rank, world;
  sl_shard_policy remainder;
} sl_open_files_opts;
]])

ffi.cdef [[
const char *sl_version(void);
int sl_version_number(void);

const char *sl_strerror(int code);
const char *sl_err_name(int code);
const char *sl_last_error(void);
int sl_last_error_code(void);
void sl_clear_error(void);

size_t sl_dtype_size(sl_dtype dt);
const char *sl_dtype_name(sl_dtype dt);
sl_dtype sl_dtype_from_name(const char *name);

sl_buffer *sl_buffer_new(size_t size);
sl_buffer *sl_buffer_new_zero(size_t size);
void *sl_buffer_data(const sl_buffer *b);
size_t sl_buffer_size(const sl_buffer *b);
sl_buffer *sl_buffer_retain(sl_buffer *b);
void sl_buffer_release(sl_buffer *b);

int sl_tensor_alloc(sl_tensor *t, sl_dtype dtype, int rank,
                    const int64_t *shape);
int sl_tensor_view(sl_tensor *t, sl_dtype dtype, int rank,
                   const int64_t *shape, sl_buffer *buf, size_t offset);
int sl_tensor_set_lod(sl_tensor *t, sl_buffer *lod_buf, const int64_t *lod,
                      int64_t lod_len);
void sl_tensor_copy_ref(sl_tensor *dst, const sl_tensor *src);
void sl_tensor_clear(sl_tensor *t);
char *sl_tensor_describe(const sl_tensor *t, char *buf, size_t size);

sl_schema *sl_schema_new(void);
int sl_schema_add(sl_schema *s, const char *name, sl_dtype dtype, int rank,
                  const int64_t *shape);
int sl_schema_set_meta(sl_schema *s, const char *key, const char *value);
const char *sl_schema_meta(const sl_schema *s, const char *key);
int sl_schema_meta_count(const sl_schema *s);
int sl_schema_meta_at(const sl_schema *s, int i, const char **key,
                      const char **value);
void sl_schema_freeze(sl_schema *s);
int sl_schema_nfields(const sl_schema *s);
int sl_schema_find(const sl_schema *s, const char *name);
const char *sl_schema_field_name(const sl_schema *s, int i);
sl_dtype sl_schema_field_dtype(const sl_schema *s, int i);
int sl_schema_field_rank(const sl_schema *s, int i);
const int64_t *sl_schema_field_shape(const sl_schema *s, int i);
int sl_schema_equal(const sl_schema *a, const sl_schema *b);
char *sl_schema_describe(const sl_schema *s, char *buf, size_t size);
sl_schema *sl_schema_retain(sl_schema *s);
void sl_schema_release(sl_schema *s);

sl_sample *sl_sample_new(sl_schema *schema);
sl_sample *sl_sample_retain(sl_sample *s);
void sl_sample_release(sl_sample *s);
int sl_sample_refcount(const sl_sample *s);
const sl_schema *sl_sample_schema(const sl_sample *s);
int sl_sample_nfields(const sl_sample *s);
sl_tensor *sl_sample_at(sl_sample *s, int i);
int sl_sample_set(sl_sample *s, int i, const sl_tensor *t);
int sl_sample_set_move(sl_sample *s, int i, sl_tensor *t);
size_t sl_sample_nbytes(const sl_sample *s);

int sl_reader_next(sl_reader *r, sl_sample **out);
int sl_reader_has_next(sl_reader *r);
int sl_reader_reset(sl_reader *r);
const sl_schema *sl_reader_schema(const sl_reader *r);
const char *sl_reader_name(const sl_reader *r);
int sl_reader_length(const sl_reader *r, uint64_t *n);
void sl_reader_destroy(sl_reader *r);

int sl_reader_from_array(sl_sample *const *samples, size_t n,
                         sl_schema *schema, sl_reader **out);
int sl_reader_range(int64_t n, sl_reader **out);

int sl_shuffle(sl_reader *up, size_t buffer_size, uint64_t seed,
               sl_reader **out);
int sl_batch(sl_reader *up, size_t n, const sl_batch_opts *opts,
             sl_reader **out);
int sl_multi_pass(sl_reader *up, uint64_t k, sl_reader **out);
int sl_take(sl_reader *up, uint64_t n, sl_reader **out);
int sl_skip(sl_reader *up, uint64_t n, sl_reader **out);
int sl_chain(sl_reader **readers, size_t n, sl_reader **out);
int sl_zip(sl_reader **readers, size_t n, int truncate, sl_reader **out);
int sl_cache(sl_reader *up, sl_reader **out);
int sl_repeat_first(sl_reader *up, uint64_t n, sl_reader **out);
int sl_prefetch(sl_reader *up, size_t n, sl_reader **out);
typedef struct sl_prefetch_auto_opts {
  size_t size;
  uint64_t max_bytes;
  uint32_t max_depth;
} sl_prefetch_auto_opts;
int sl_prefetch_auto(sl_reader *up, const sl_prefetch_auto_opts *opts,
                     sl_reader **out);
int sl_decode_image(sl_reader *up, const sl_image_opts *opts,
                    sl_reader **out);
int sl_random_crop_flip(sl_reader *up, const sl_crop_flip_opts *opts,
                        sl_reader **out);

int sl_slr_writer_open(const char *path, sl_schema *schema,
                       const sl_slr_writer_opts *opts, sl_slr_writer **out);
int sl_slr_writer_append(sl_slr_writer *w, const sl_sample *s);
uint64_t sl_slr_writer_records(const sl_slr_writer *w);
int sl_slr_writer_close(sl_slr_writer *w);
void sl_slr_writer_abort(sl_slr_writer *w);

int sl_open(const char *name, const sl_open_opts *opts, sl_reader **out);
int sl_open_files(const char *const *names, size_t n,
                  const sl_open_files_opts *opts, sl_reader **out);
int sl_shard_env(int *rank, int *world);
uint64_t sl_shard_count(uint64_t n, int rank, int world,
                        sl_shard_policy policy);

int sl_slr_reader(const char *path, const sl_slr_open_opts *opts,
                  uint64_t first, uint64_t count, sl_reader **out);
int sl_slr_reader_chunks(const char *path, const sl_slr_open_opts *opts,
                         uint64_t first_chunk, uint64_t nchunks,
                         sl_reader **out);

typedef struct sl_stage_stats {
  const char *name;
  int depth;
  int downstream;
  int threads;
  uint64_t samples_in;
  uint64_t samples_out;
  double next_s;
  double busy_s;
  double wait_up_s;
  double wait_down_s;
  uint64_t errors_ignored;
  uint64_t queue_depth;
  char last_error[256];
} sl_stage_stats;
void sl_stats_enable(int on);
int sl_stats_enabled(void);
int sl_reader_stats(const sl_reader *r, sl_stage_stats *out, size_t cap,
                    size_t *count);
int sl_stats_limiting(const sl_stage_stats *stats, size_t n, double wall_s);
int sl_stats_format(const sl_stage_stats *stats, size_t n, double wall_s,
                    char *buf, size_t cap);
]]

-- Saving and restoring a position (Pipeline:state / Pipeline:restore,
-- docs/RESUME.md).
ffi.cdef [[
int sl_reader_save(sl_reader *r, void **state, size_t *len);
int sl_reader_restore(sl_reader *r, const void *state, size_t len);
void sl_free(void *p);
]]

-- Language-model data (sluice.open "tokens:", :window, :pack, :padded_batch,
-- :bucket_batch, sluice.mix; docs/TEXT.md).
declare("sl_tokens_opts", [[
typedef struct sl_tokens_opts {
  size_t size;
  int64_t seq_len;
  int shuffle;
  uint64_t seed;
  int rank;
  int world;
  uint64_t block;
  int batch;
} sl_tokens_opts;
]])
declare("sl_pack_opts", [[
typedef struct sl_pack_opts {
  size_t size;
  int64_t seq_len;
  const char *const *fields;
  size_t nfields;
  int has_eos;
  int64_t eos;
  int64_t pad;
  size_t lookahead;
  int truncate;
} sl_pack_opts;
]])
declare("sl_pad_value", [[
typedef struct sl_pad_value {
  const char *field;
  double value;
} sl_pad_value;
]])
declare("sl_padded_batch_opts", [[
typedef struct sl_padded_batch_opts {
  size_t size;
  int64_t to;
  const sl_pad_value *pad;
  size_t npad;
  int drop_remainder;
} sl_padded_batch_opts;
]])
declare("sl_bucket_batch_opts", [[
typedef struct sl_bucket_batch_opts {
  size_t size;
  const char *length;
  const int64_t *boundaries;
  size_t nboundaries;
  const size_t *batch_sizes;
  const sl_pad_value *pad;
  size_t npad;
  int pad_to_bucket;
  int drop_remainder;
} sl_bucket_batch_opts;
]])
declare("sl_mix_opts", [[
typedef struct sl_mix_opts {
  size_t size;
  const double *weights;
  uint64_t seed;
  int stop;
  int keep_order;
} sl_mix_opts;
]])
ffi.cdef [[
int sl_tokens_reader(const char *const *paths, size_t n,
                     const sl_tokens_opts *opts, sl_reader **out);
int sl_tokens_open(const char *name, const sl_tokens_opts *opts,
                   sl_reader **out);
int sl_window(sl_reader *up, const char *field, size_t size, size_t stride,
              int drop_remainder, sl_reader **out);
int sl_pack(sl_reader *up, const sl_pack_opts *opts, sl_reader **out);
int sl_pack_stats(const sl_reader *r, uint64_t *rows, uint64_t *tokens,
                  double *efficiency);
int sl_padded_batch(sl_reader *up, size_t n, const sl_padded_batch_opts *opts,
                    sl_reader **out);
int sl_bucket_batch(sl_reader *up, const sl_bucket_batch_opts *opts,
                    sl_reader **out);
int sl_mix(sl_reader **readers, size_t n, const sl_mix_opts *opts,
           sl_reader **out);
int sl_mix_counts(const sl_reader *r, uint64_t *counts, size_t cap,
                  size_t *n);
]]

-- Reshaping and distributing (:unbatch, :rebatch, sluice.interleave,
-- :shard; src/readers/unbatch.c, interleave.c, shard.c).
declare("sl_interleave_opts", [[
typedef struct sl_interleave_opts {
  size_t size;
  uint32_t cycle;
  uint32_t threads;
  uint64_t block;
} sl_interleave_opts;
]])
declare("sl_shard_opts", [[
typedef struct sl_shard_opts {
  size_t size;
  sl_shard_policy remainder;
} sl_shard_opts;
]])
ffi.cdef [[
int sl_unbatch(sl_reader *up, const char *const *lod, size_t nlod,
               sl_reader **out);
int sl_rebatch(sl_reader *up, size_t n, const sl_batch_opts *opts,
               const char *const *lod, size_t nlod, sl_reader **out);
int sl_interleave(sl_reader **readers, size_t n,
                  const sl_interleave_opts *opts, sl_reader **out);
int sl_interleave_open(const char *const *names, size_t n,
                       const sl_interleave_opts *opts, sl_reader **out);
int sl_shard(sl_reader *up, int world, int rank, const sl_shard_opts *opts,
             sl_reader **out);
int sl_schema_field_is_var(const sl_schema *s, int i);
]]

-- Samplers and splits (:weighted_sample, :subset, sluice.random_split;
-- src/readers/sampler.c).
declare("sl_weighted_sample_opts", [[
typedef struct sl_weighted_sample_opts {
  size_t size;
  uint64_t num_samples;
  int without_replacement;
  uint64_t seed;
} sl_weighted_sample_opts;
]])
ffi.cdef [[
int sl_weighted_sample(sl_reader *up, const double *weights, size_t n_weights,
                       const sl_weighted_sample_opts *opts, sl_reader **out);
int sl_subset(sl_reader *up, const uint64_t *indices, size_t n,
              sl_reader **out);
int sl_random_split(sl_reader *up, const double *sizes, size_t k,
                    uint64_t seed, sl_reader **out);
]]

-- Internal, exported for this module (src/script/lua_host.h): what the
-- samples a Lua state sees pin (Pipeline:next), and compact copies
-- (sluice.clone).
declare("sl__lua_pins", [[
typedef struct sl__lua_pins {
  const void *last[8];
  unsigned next;
  double *total;
} sl__lua_pins;
]])
ffi.cdef [[
size_t sl__lua_sample_account(const sl_sample *s, sl__lua_pins *pins);
sl_sample *sl__lua_sample_clone(const sl_sample *s);
sl_buffer *sl__lua_buffer_new(size_t size, int zero);
]]

-- Internal, exported for the facade (src/script/lua_host.h): shipped
-- functions (the bytes of sluice.ship), worker environments and the stages
-- that run Lua code in worker states.
ffi.cdef [[
typedef struct sl__shipped sl__shipped;
typedef struct sl__lua_env sl__lua_env;
]]
declare("sl__lua_kind", [[
typedef enum sl__lua_kind {
  SL__LUA_MAP,
  SL__LUA_FILTER,
  SL__LUA_PARSE
} sl__lua_kind;
]])
declare("sl__lua_stage_opts", [[
typedef struct sl__lua_stage_opts {
  int threads;
  int ordered;
  size_t queue;
  double deadline;
  uint64_t seed;
  uint64_t epoch;
  uint64_t ignore_errors;
} sl__lua_stage_opts;
]])
ffi.cdef [[
int sl__shipped_new(const char *what, const char *where, const void *data,
                    size_t size, const char *name, sl__shipped **out);
void sl__shipped_release(sl__shipped *f);
sl__lua_env *sl__lua_env_new(const char *path, const char *cpath);
void sl__lua_env_release(sl__lua_env *e);
int sl__lua_stage(sl_reader *up, sl__lua_kind kind, sl__shipped *fn,
                  sl__lua_env *env, const sl__lua_stage_opts *opts,
                  sl_schema *schema, sl_reader **out);
int sl__lua_reader(sl__shipped *fn, sl__lua_env *env, size_t buffer,
                   sl_schema *schema, sl_reader **out);
]]
-- The Lua flow stages (src/script/lua_flow.c): flat_map, take_while, scan.
declare("sl__lua_flow_kind", [[
typedef enum sl__lua_flow_kind {
  SL__LUA_FLAT_MAP,
  SL__LUA_TAKE_WHILE,
  SL__LUA_SCAN
} sl__lua_flow_kind;
]])
ffi.cdef [[
int sl__lua_flow(sl_reader *up, sl__lua_flow_kind kind, sl__shipped *fn,
                 sl__shipped *init, sl__lua_env *env,
                 const sl__lua_stage_opts *opts, sl_schema *schema,
                 sl_reader **out);
]]

if pcall(function() return ffi.C.sl_version end) then
  return ffi.C
end

local explicit = os.getenv("SLUICE_LIBRARY")
if explicit and explicit ~= "" then
  local ok, lib = pcall(ffi.load, explicit)
  if not ok then
    error("sluice: cannot load SLUICE_LIBRARY=" .. explicit .. ": "
          .. tostring(lib), 0)
  end
  return lib
end

-- sluice.library returns the path (it resolves its own relative path).
local tried = {}
local found, path = pcall(require, "sluice.library")
if found and type(path) == "string" then
  local ok, lib = pcall(ffi.load, path)
  if ok then return lib end
  tried[#tried + 1] = tostring(lib)
else
  tried[#tried + 1] = "sluice.library did not load (" .. tostring(path) .. ")"
end

local ok, lib = pcall(ffi.load, "sluice")
if ok then
  return lib
end
tried[#tried + 1] = tostring(lib)
error("sluice: cannot find libsluice: the process does not export it, "
      .. "SLUICE_LIBRARY is not set, and " .. table.concat(tried, "; "), 0)
