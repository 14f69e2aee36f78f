/*
 * cmd_inspect.c - `sluice inspect [--json] [--chunks] FILE`: a file's
 * schema, metadata, record and chunk counts, sizes and compression ratio.
 *
 * Raw and stored payload sizes live in the chunk headers, not the index, so
 * every chunk header is read (and its CRC checked) through
 * sl_slr_chunk_info_get; the payloads are not read - that is `verify`.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char synopsis[] =
    "  sluice inspect [--json] [--chunks] [--max-chunk-bytes N] FILE\n";

static const char help[] =
    "Shows the schema (fields with dtype and shape, metadata), the record\n"
    "and chunk counts, the file size, the raw and stored (compressed)\n"
    "payload sizes and the compression ratio of an SLR file; for files\n"
    "with frames (pack --frame-records, --dict) the frame layout and the\n"
    "dictionary's size.  Reads every chunk header and frame table but no\n"
    "record (see 'sluice verify').\n"
    "\n"
    "Options:\n"
    "  --json       one JSON object: file, file_bytes, records, chunks,\n"
    "               fields [{name, dtype, shape}] (-1 = variable dimension),\n"
    "               metadata {key: value}, raw_bytes, stored_bytes, ratio,\n"
    "               dict_bytes, frames, frame_records (0 when chunks\n"
    "               differ)\n"
    CLI_MAX_CHUNK_HELP
    "  --chunks     also list every chunk (offset, first record, records,\n"
    "               stored and raw bytes); with --json, a \"chunk_list\" "
    "array\n"
    "  -h, --help   this help\n";

enum { OPT_JSON = 1, OPT_CHUNKS, OPT_HELP, OPT_MAX_CHUNK };

static const cli_opt opts[] = {
    {"max-chunk-bytes", 0, true, OPT_MAX_CHUNK},
    {"json", 'j', false, OPT_JSON},
    {"chunks", 0, false, OPT_CHUNKS},
    {"help", 'h', false, OPT_HELP},
    {NULL, 0, false, 0},
};

static void print_shape(FILE *o, const sl_schema *s, int i) {
  const int64_t *shape = sl_schema_field_shape(s, i);
  putc('[', o);
  for (int d = 0; d < sl_schema_field_rank(s, i); d++)
    fprintf(o, "%s%" PRId64, d ? "," : "", shape[d]);
  putc(']', o);
}

/* The frame layout of a file: frames in all, the records per frame of
 * its first chunk (0 when chunks differ), and whether any chunk is framed
 * (more than one frame or a framed file). */
typedef struct frames_sum {
  uint64_t frames;
  uint32_t per;
  bool varies;
  bool compact; /* some chunk is compact framed (codec 3) */
} frames_sum;

static void print_json(const char *path, uint64_t file_bytes, sl_slr_file *f,
                       const sl_slr_chunk_info *ci, uint64_t raw,
                       uint64_t stored, bool chunks, const frames_sum *fs) {
  const sl_schema *s = sl_slr_schema(f);
  FILE *o = stdout;
  fputs("{\"file\":", o);
  cli_json_string(o, path, strlen(path));
  fprintf(o,
          ",\"file_bytes\":%" PRIu64 ",\"records\":%" PRIu64
          ",\"chunks\":%" PRIu64 ",\"fields\":[",
          file_bytes, sl_slr_records(f), sl_slr_chunks(f));
  for (int i = 0; i < sl_schema_nfields(s); i++) {
    const char *name = sl_schema_field_name(s, i);
    fputs(i ? ",{\"name\":" : "{\"name\":", o);
    cli_json_string(o, name, strlen(name));
    fprintf(o, ",\"dtype\":\"%s\",\"shape\":",
            sl_dtype_name(sl_schema_field_dtype(s, i)));
    print_shape(o, s, i);
    putc('}', o);
  }
  fputs("],\"metadata\":{", o);
  for (int i = 0; i < sl_schema_meta_count(s); i++) {
    const char *k, *v;
    sl_schema_meta_at(s, i, &k, &v);
    if (i) putc(',', o);
    cli_json_string(o, k, strlen(k));
    putc(':', o);
    cli_json_string(o, v, strlen(v));
  }
  fprintf(o, "},\"raw_bytes\":%" PRIu64 ",\"stored_bytes\":%" PRIu64, raw,
          stored);
  if (stored)
    fprintf(o, ",\"ratio\":%.4f", (double)raw / (double)stored);
  else
    fputs(",\"ratio\":null", o);
  fprintf(o,
          ",\"dict_bytes\":%" PRIu64 ",\"frames\":%" PRIu64
          ",\"frame_records\":%" PRIu32,
          sl_slr_dict_size(f), fs->frames, fs->varies ? 0 : fs->per);
  if (fs->compact) fputs(",\"frame_table\":\"compact\"", o);
  if (chunks) {
    fputs(",\"chunk_list\":[", o);
    for (uint64_t c = 0; c < sl_slr_chunks(f); c++)
      fprintf(o,
              "%s{\"offset\":%" PRIu64 ",\"first_record\":%" PRIu64
              ",\"records\":%" PRIu32 ",\"stored_bytes\":%" PRIu64
              ",\"raw_bytes\":%" PRIu64 "}",
              c ? "," : "", ci[c].offset, ci[c].first_record, ci[c].records,
              ci[c].stored_size, ci[c].raw_size);
    putc(']', o);
  }
  fputs("}\n", o);
}

static void print_text(const char *path, uint64_t file_bytes, sl_slr_file *f,
                       const sl_slr_chunk_info *ci, uint64_t raw,
                       uint64_t stored, bool chunks, const frames_sum *fs) {
  const sl_schema *s = sl_slr_schema(f);
  FILE *o = stdout;
  char h[32];
  printf("file:      %s\n", path);
  printf("size:      %" PRIu64 " bytes (%s)\n", file_bytes,
         cli_human_bytes(file_bytes, h, sizeof h));
  printf("records:   %" PRIu64 "\n", sl_slr_records(f));
  printf("chunks:    %" PRIu64 "\n", sl_slr_chunks(f));
  printf("fields:\n");
  int w = 0;
  for (int i = 0; i < sl_schema_nfields(s); i++) {
    int n = (int)strlen(sl_schema_field_name(s, i));
    if (n > w) w = n;
  }
  for (int i = 0; i < sl_schema_nfields(s); i++) {
    printf("  %-*s  %s", w, sl_schema_field_name(s, i),
           sl_dtype_name(sl_schema_field_dtype(s, i)));
    print_shape(o, s, i);
    putc('\n', o);
  }
  if (sl_schema_meta_count(s)) printf("metadata:\n");
  for (int i = 0; i < sl_schema_meta_count(s); i++) {
    const char *k, *v;
    sl_schema_meta_at(s, i, &k, &v);
    printf("  %s = ", k);
    cli_text_string(o, v, strlen(v), 200);
    putc('\n', o);
  }
  printf("raw:       %" PRIu64 " bytes (%s)\n", raw,
         cli_human_bytes(raw, h, sizeof h));
  printf("stored:    %" PRIu64 " bytes (%s)\n", stored,
         cli_human_bytes(stored, h, sizeof h));
  uint64_t dict = sl_slr_dict_size(f), nc = sl_slr_chunks(f);
  if (stored)
    printf("ratio:     %.2f%s", (double)raw / (double)stored,
           dict ? "" : "\n");
  else
    printf("ratio:     -\n");
  if (stored && dict)
    printf(" (%.2f counting the dictionary)\n",
           (double)raw / (double)(stored + dict + 12));
  if (fs->frames > nc) {
    printf("frames:    %" PRIu64 " (%.1f per chunk; ", fs->frames,
           (double)fs->frames / (double)nc);
    if (fs->varies)
      printf("records per frame vary by chunk)\n");
    else
      printf("%" PRIu32 " records per frame, %.0f raw bytes)\n", fs->per,
             (double)raw / (double)fs->frames);
  }
  if (fs->compact)
    printf("frame table: compact (codec 3: varint sizes, frames without "
           "zstd's magic number)\n");
  if (dict)
    printf("dictionary: %" PRIu64 " bytes (%s)\n", dict,
           cli_human_bytes(dict, h, sizeof h));
  if (chunks) {
    printf("%8s %12s %12s %8s %12s %12s\n", "chunk", "offset", "first",
           "records", "stored", "raw");
    for (uint64_t c = 0; c < sl_slr_chunks(f); c++)
      printf("%8" PRIu64 " %12" PRIu64 " %12" PRIu64 " %8" PRIu32 " %12" PRIu64
             " %12" PRIu64 "\n",
             c, ci[c].offset, ci[c].first_record, ci[c].records,
             ci[c].stored_size, ci[c].raw_size);
  }
}

int cmd_inspect(int argc, char **argv) {
  cli_parser p;
  cli_parser_init(&p, argc, argv, "inspect", synopsis, opts);
  const char *path = NULL;
  bool json = false, chunks = false;
  sl_slr_open_opts oo = {0};
  for (;;) {
    const char *v;
    int id = cli_next(&p, &v);
    if (id == CLI_ARG_END) break;
    if (id == CLI_ARG_BAD) return CLI_USAGE;
    if (id == OPT_JSON) json = true;
    if (id == OPT_CHUNKS) chunks = true;
    if (id == OPT_MAX_CHUNK &&
        cli_max_chunk_bytes("inspect", synopsis, v, &oo.max_chunk_bytes) !=
            CLI_OK)
      return CLI_USAGE;
    if (id == OPT_HELP) {
      printf("Usage:\n%s\n%s", synopsis, help);
      return CLI_OK;
    }
    if (id == CLI_ARG_OPERAND) {
      if (path)
        return cli_usage_error("inspect", synopsis,
                               "one file at a time ('%s' and '%s')", path, v);
      path = v;
    }
  }
  if (!path) return cli_usage_error("inspect", synopsis, "no file given");

  sl_slr_file *f = NULL;
  int rc = sl_slr_open(path, &oo, &f);
  if (rc < 0) return cli_fail("inspect", rc);
  struct stat st;
  uint64_t file_bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
  uint64_t n = sl_slr_chunks(f), raw = 0, stored = 0;
  sl_slr_chunk_info *ci = calloc(n ? n : 1, sizeof *ci);
  if (!ci) {
    sl_slr_close(f);
    fprintf(stderr, "sluice: inspect: out of memory for %" PRIu64 " chunks\n",
            n);
    return CLI_FAIL;
  }
  frames_sum fs = {0};
  for (uint64_t c = 0; c < n && rc == SL_OK; c++) {
    rc = sl_slr_chunk_info_get(f, c, &ci[c]);
    raw += ci[c].raw_size;
    stored += ci[c].stored_size;
    uint32_t per = 0, count = 0;
    if (rc == SL_OK) rc = sl_slr_chunk_frames(f, c, &per, &count);
    fs.frames += count;
    if (rc == SL_OK && ci[c].codec == 3) fs.compact = true;
    /* The last chunk's last frame may be short; its `per` is the file's. */
    if (c == 0) fs.per = per;
    if (per != fs.per && (count > 1 || per > fs.per)) fs.varies = true;
  }
  if (rc == SL_OK) {
    char shown[4096];
    cli_shown(path, shown, sizeof shown);
    if (json)
      print_json(shown, file_bytes, f, ci, raw, stored, chunks, &fs);
    else
      print_text(shown, file_bytes, f, ci, raw, stored, chunks, &fs);
  }
  int ret = rc < 0 ? cli_fail("inspect", rc) : CLI_OK;
  free(ci);
  sl_slr_close(f);
  return ret;
}
