/*
 * layouts.c - the C side of spec/20-layouts_spec.lua (built as
 * sluice_test_layouts): the size and alignment of every struct of
 * include/sluice.h, of the internal ones the Lua layer declares
 * (sl__lua_pins, sl__lua_stage_opts) and of DLPack's DLManagedTensor
 * (lua/sluice/device.lua), and the offset of each of their fields, as lines
 *
 *   struct NAME SIZE ALIGN
 *   field NAME FIELD OFFSET      (FIELD may be a path: dl_tensor.device)
 *
 * The spec compares them with ffi.sizeof/alignof/offsetof of the structs
 * the Lua sources declare, and checks that every struct and field of
 * sluice.h is listed here: a struct added to the header needs its lines.
 */
#include "sluice.h"

#include "script/lua_host.h"

#include <dlpack/dlpack.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#define S(T) printf("struct %s %zu %zu\n", #T, sizeof(T), alignof(T))
#define F(T, f) printf("field %s %s %zu\n", #T, #f, offsetof(T, f))
/* The same for a struct with no typedef (Arrow's C Data Interface). */
#define SS(T)                                                                  \
  printf("struct %s %zu %zu\n", #T, sizeof(struct T), alignof(struct T))
#define FS(T, f) printf("field %s %s %zu\n", #T, #f, offsetof(struct T, f))

int main(void) {
  S(sl_tensor);
  F(sl_tensor, dtype);
  F(sl_tensor, rank);
  F(sl_tensor, shape);
  F(sl_tensor, data);
  F(sl_tensor, nbytes);
  F(sl_tensor, buf);
  F(sl_tensor, lod);
  F(sl_tensor, lod_len);
  F(sl_tensor, lod_buf);

  S(sl_reader_vtable);
  F(sl_reader_vtable, name);
  F(sl_reader_vtable, next);
  F(sl_reader_vtable, reset);
  F(sl_reader_vtable, destroy);

  S(sl_batch_opts);
  F(sl_batch_opts, drop_last);
  F(sl_batch_opts, pad);
  F(sl_batch_opts, lod);
  F(sl_batch_opts, no_fuse);

  S(sl_parallel_opts);
  F(sl_parallel_opts, size);
  F(sl_parallel_opts, threads);
  F(sl_parallel_opts, unordered);
  F(sl_parallel_opts, queue);
  F(sl_parallel_opts, ignore_errors);

  S(sl_prefetch_auto_opts);
  F(sl_prefetch_auto_opts, size);
  F(sl_prefetch_auto_opts, max_bytes);
  F(sl_prefetch_auto_opts, max_depth);

  S(sl_slr_writer_opts);
  F(sl_slr_writer_opts, level);
  F(sl_slr_writer_opts, chunk_bytes);
  F(sl_slr_writer_opts, records_per_chunk);

  S(sl_slr_frame_opts);
  F(sl_slr_frame_opts, frame_records);
  F(sl_slr_frame_opts, dict);
  F(sl_slr_frame_opts, dict_data);
  F(sl_slr_frame_opts, dict_size);
  F(sl_slr_frame_opts, dict_max_bytes);
  F(sl_slr_frame_opts, dict_sample_bytes);
  F(sl_slr_frame_opts, compact);
  S(sl_slr_open_opts);
  F(sl_slr_open_opts, policy);
  F(sl_slr_open_opts, max_bad_chunks);
  F(sl_slr_open_opts, max_chunk_bytes);

  S(sl_slr_chunk_info);
  F(sl_slr_chunk_info, offset);
  F(sl_slr_chunk_info, first_record);
  F(sl_slr_chunk_info, records);
  F(sl_slr_chunk_info, stored_size);
  F(sl_slr_chunk_info, raw_size);
  F(sl_slr_chunk_info, codec);

  S(sl_open_opts);
  F(sl_open_opts, size);
  F(sl_open_opts, slr);
  F(sl_open_opts, labels);
  F(sl_open_opts, text_mmap);
  F(sl_open_opts, parser);
  F(sl_open_opts, parser_options);
  F(sl_open_opts, image);
  F(sl_open_opts, tokens);
  F(sl_open_opts, npy);
  F(sl_open_opts, csv);
  F(sl_open_opts, tfrecord);
  F(sl_open_opts, wds);

  S(sl_open_files_opts);
  F(sl_open_files_opts, size);
  F(sl_open_files_opts, slr);
  F(sl_open_files_opts, threads);
  F(sl_open_files_opts, buffer);
  F(sl_open_files_opts, unordered);
  F(sl_open_files_opts, shuffle);
  F(sl_open_files_opts, seed);
  F(sl_open_files_opts, epoch);
  F(sl_open_files_opts, window);
  F(sl_open_files_opts, rank);
  F(sl_open_files_opts, world);
  F(sl_open_files_opts, remainder);

  S(sl_parser_api);
  F(sl_parser_api, abi_version);
  F(sl_parser_api, name);
  F(sl_parser_api, init);
  F(sl_parser_api, parse);
  F(sl_parser_api, destroy);

  S(sl_double_buffer_opts);
  F(sl_double_buffer_opts, size);
  F(sl_double_buffer_opts, device);
  F(sl_double_buffer_opts, slots);
  F(sl_double_buffer_opts, stream);
  F(sl_double_buffer_opts, release_wait_ms);

  S(sl_image_shape);
  F(sl_image_shape, channels);
  F(sl_image_shape, height);
  F(sl_image_shape, width);
  F(sl_image_shape, resize);

  S(sl_image_opts);
  F(sl_image_opts, size);
  F(sl_image_opts, shape);
  F(sl_image_opts, field);
  F(sl_image_opts, threads);
  F(sl_image_opts, window);
  F(sl_image_opts, unordered);
  F(sl_image_opts, policy);
  F(sl_image_opts, max_bad);

  S(sl_crop_flip_opts);
  F(sl_crop_flip_opts, size);
  F(sl_crop_flip_opts, field);
  F(sl_crop_flip_opts, height);
  F(sl_crop_flip_opts, width);
  F(sl_crop_flip_opts, flip);
  F(sl_crop_flip_opts, seed);
  F(sl_crop_flip_opts, epoch);

  S(sl_stage_stats);
  F(sl_stage_stats, name);
  F(sl_stage_stats, depth);
  F(sl_stage_stats, downstream);
  F(sl_stage_stats, threads);
  F(sl_stage_stats, samples_in);
  F(sl_stage_stats, samples_out);
  F(sl_stage_stats, next_s);
  F(sl_stage_stats, busy_s);
  F(sl_stage_stats, wait_up_s);
  F(sl_stage_stats, wait_down_s);
  F(sl_stage_stats, errors_ignored);
  F(sl_stage_stats, queue_depth);
  F(sl_stage_stats, last_error);
  F(sl_stage_stats, samples_fused);
  F(sl_stage_stats, threads_auto);
  F(sl_stage_stats, threads_max);
  F(sl_stage_stats, bytes_held);
  F(sl_stage_stats, bytes_peak);
  F(sl_stage_stats, budget_bytes);
  F(sl_stage_stats, budget_default_pct);
  F(sl_stage_stats, memory_usable);

  /* Internal, declared by lua/sluice/cdef.lua (src/script/lua_host.h). */
  S(sl__lua_pins);
  F(sl__lua_pins, last);
  F(sl__lua_pins, next);
  F(sl__lua_pins, total);

  S(sl__lua_stage_opts);
  F(sl__lua_stage_opts, threads);
  F(sl__lua_stage_opts, ordered);
  F(sl__lua_stage_opts, queue);
  F(sl__lua_stage_opts, deadline);
  F(sl__lua_stage_opts, seed);
  F(sl__lua_stage_opts, epoch);
  F(sl__lua_stage_opts, ignore_errors);

  /* Language-model data (docs/TEXT.md). */
  S(sl_tokens_opts);
  F(sl_tokens_opts, size);
  F(sl_tokens_opts, seq_len);
  F(sl_tokens_opts, shuffle);
  F(sl_tokens_opts, seed);
  F(sl_tokens_opts, rank);
  F(sl_tokens_opts, world);
  F(sl_tokens_opts, block);
  F(sl_tokens_opts, batch);
  S(sl_pack_opts);
  F(sl_pack_opts, size);
  F(sl_pack_opts, seq_len);
  F(sl_pack_opts, fields);
  F(sl_pack_opts, nfields);
  F(sl_pack_opts, has_eos);
  F(sl_pack_opts, eos);
  F(sl_pack_opts, pad);
  F(sl_pack_opts, lookahead);
  F(sl_pack_opts, truncate);
  S(sl_pad_value);
  F(sl_pad_value, field);
  F(sl_pad_value, value);
  S(sl_padded_batch_opts);
  F(sl_padded_batch_opts, size);
  F(sl_padded_batch_opts, to);
  F(sl_padded_batch_opts, pad);
  F(sl_padded_batch_opts, npad);
  F(sl_padded_batch_opts, drop_remainder);
  S(sl_bucket_batch_opts);
  F(sl_bucket_batch_opts, size);
  F(sl_bucket_batch_opts, length);
  F(sl_bucket_batch_opts, boundaries);
  F(sl_bucket_batch_opts, nboundaries);
  F(sl_bucket_batch_opts, batch_sizes);
  F(sl_bucket_batch_opts, pad);
  F(sl_bucket_batch_opts, npad);
  F(sl_bucket_batch_opts, pad_to_bucket);
  F(sl_bucket_batch_opts, drop_remainder);
  S(sl_mix_opts);
  F(sl_mix_opts, size);
  F(sl_mix_opts, weights);
  F(sl_mix_opts, seed);
  F(sl_mix_opts, stop);
  F(sl_mix_opts, keep_order);
  S(sl_interleave_opts);
  F(sl_interleave_opts, size);
  F(sl_interleave_opts, cycle);
  F(sl_interleave_opts, threads);
  F(sl_interleave_opts, block);
  S(sl_shard_opts);
  F(sl_shard_opts, size);
  F(sl_shard_opts, remainder);
  S(sl_weighted_sample_opts);
  F(sl_weighted_sample_opts, size);
  F(sl_weighted_sample_opts, num_samples);
  F(sl_weighted_sample_opts, without_replacement);
  F(sl_weighted_sample_opts, seed);
  F(sl_weighted_sample_opts, cache);
  S(sl_global_shuffle_opts);
  F(sl_global_shuffle_opts, size);
  F(sl_global_shuffle_opts, seed);
  F(sl_global_shuffle_opts, rank);
  F(sl_global_shuffle_opts, world);
  F(sl_global_shuffle_opts, remainder);
  F(sl_global_shuffle_opts, cache);
  F(sl_global_shuffle_opts, threads);

  /* Arrow (include/sluice/arrow.h, docs/SCALING.md). */
  SS(ArrowSchema);
  FS(ArrowSchema, format);
  FS(ArrowSchema, name);
  FS(ArrowSchema, metadata);
  FS(ArrowSchema, flags);
  FS(ArrowSchema, n_children);
  FS(ArrowSchema, children);
  FS(ArrowSchema, dictionary);
  FS(ArrowSchema, release);
  FS(ArrowSchema, private_data);
  SS(ArrowArray);
  FS(ArrowArray, length);
  FS(ArrowArray, null_count);
  FS(ArrowArray, offset);
  FS(ArrowArray, n_buffers);
  FS(ArrowArray, n_children);
  FS(ArrowArray, buffers);
  FS(ArrowArray, children);
  FS(ArrowArray, dictionary);
  FS(ArrowArray, release);
  FS(ArrowArray, private_data);
  SS(ArrowArrayStream);
  FS(ArrowArrayStream, get_schema);
  FS(ArrowArrayStream, get_next);
  FS(ArrowArrayStream, get_last_error);
  FS(ArrowArrayStream, release);
  FS(ArrowArrayStream, private_data);
  S(sl_arrow_opts);
  F(sl_arrow_opts, size);
  F(sl_arrow_opts, name);

  /* Other programs' formats (docs/FORMATS.md). */
  S(sl_npy_opts);
  F(sl_npy_opts, size);
  F(sl_npy_opts, field);
  S(sl_csv_opts);
  F(sl_csv_opts, size);
  F(sl_csv_opts, columns);
  F(sl_csv_opts, delimiter);
  F(sl_csv_opts, no_header);
  S(sl_wds_opts);
  F(sl_wds_opts, size);
  F(sl_wds_opts, threads);
  F(sl_wds_opts, shuffle);
  F(sl_wds_opts, seed);
  F(sl_wds_opts, rank);
  F(sl_wds_opts, world);
  F(sl_wds_opts, buffer);
  F(sl_wds_opts, remainder);
  F(sl_wds_opts, fields);
  F(sl_wds_opts, missing);
  S(sl_tfrecord_opts);
  F(sl_tfrecord_opts, size);
  F(sl_tfrecord_opts, features);
  F(sl_tfrecord_opts, compression);

  /* DLPack (dlpack/dlpack.h), declared by lua/sluice/device.lua. */
  S(DLManagedTensor);
  F(DLManagedTensor, dl_tensor);
  F(DLManagedTensor, dl_tensor.data);
  F(DLManagedTensor, dl_tensor.device);
  F(DLManagedTensor, dl_tensor.device.device_type);
  F(DLManagedTensor, dl_tensor.device.device_id);
  F(DLManagedTensor, dl_tensor.ndim);
  F(DLManagedTensor, dl_tensor.dtype);
  F(DLManagedTensor, dl_tensor.dtype.code);
  F(DLManagedTensor, dl_tensor.dtype.bits);
  F(DLManagedTensor, dl_tensor.dtype.lanes);
  F(DLManagedTensor, dl_tensor.shape);
  F(DLManagedTensor, dl_tensor.strides);
  F(DLManagedTensor, dl_tensor.byte_offset);
  F(DLManagedTensor, manager_ctx);
  F(DLManagedTensor, deleter);
  return ferror(stdout) ? 1 : 0;
}
