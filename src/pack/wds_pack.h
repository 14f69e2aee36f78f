/* wds_pack.h - `sluice pack wds` and `sluice pack images --format wds`
 * (wds_pack.c), internal to libsluice and its command. */
#ifndef SLUICE_OPEN_WDS_PACK_H
#define SLUICE_OPEN_WDS_PACK_H

#include "pack/import.h"

/* The samples of WebDataset shards `names` (as sl_wds_open: braces, globs;
 * one thread, in the given order) into SLR file(s) `out` with the pack
 * options (shards, chunking, progress, cancel) of the other importers.
 * The schema is the wds reader's, metadata source=wds.  On failure nothing
 * is left under the output name(s). */
SL_API int sl__pack_wds(const char *const *names, size_t n, const char *out,
                        const sl__pack_opts *o, uint64_t *records);

/* The images of folder `root` (sl__pack_images' listing, order, seed and
 * classes) into WebDataset tar shards: per image, members "KEY.EXT" (the
 * file's bytes; EXT "jpg" or "png", the image's format) and, with classes,
 * "KEY.cls", the class names one a line in the file
 * sl__wds_classes_name names; KEY is the record's number, 8 digits
 * (sl_wds_open reads every such shard set).  o->shards K >= 1
 * writes OUT-000000.tar ... (OUT without ".tar"), records dealt by
 * o->mode; 0 writes `out` itself.  Files are written under temporary names
 * and renamed once all are complete (after o->before_commit). */
SL_API int sl__pack_images_wds(const char *root, const char *out,
                               const sl__pack_opts *o, uint64_t *records);
/* The name of wds shard `i` of `out` into buf: "OUT-%06u.tar". */
SL_API int sl__wds_shard_name(const char *out, uint32_t i, char *buf,
                              size_t size);

#endif
