/* wds.h - WebDataset tar shards: samples grouped from tar members by key
 * (wds_shard.c), shared by the one-shard reader (wds_reader.c, tag wds)
 * and the threaded reader of many shards (src/open/wds_open.c). */
#ifndef SLUICE_IO_WDS_H
#define SLUICE_IO_WDS_H

#include "core/internal.h"
#include "transport/output.h"
#include "transport/source.h"
#include "formats/tar.h"

#define SL__WDS_MAX_FIELDS 64
#define SL__WDS_EXT_MAX 64

typedef enum {
  SL__WDS_KEY,
  SL__WDS_CLS,
  SL__WDS_NPY,
  SL__WDS_BYTES
} sl__wds_kind;

#define SL__WDS_ALTS_MAX 256

/* The fields every sample of a data set has, after the `__key__` field:
 * its first sample's member extensions, sorted, or the fields asked for
 * (sl_wds_opts.fields).  Each field takes one member whose extension is
 * one of its alternatives, alts[f] = ";ext;ext;" (an image field of the
 * first sample's takes any image extension).  Immutable once made; shared
 * by the threads that read shards. */
typedef struct sl__wds_layout {
  int nf;
  char *fields;         /* the fields asked for, or NULL (the first sample's) */
  bool skip_incomplete; /* SL_WDS_MISSING_SKIP */
  char name[SL__WDS_MAX_FIELDS][SL__WDS_EXT_MAX];
  char alts[SL__WDS_MAX_FIELDS][SL__WDS_ALTS_MAX];
  sl__wds_kind kind[SL__WDS_MAX_FIELDS];
  sl_dtype dtype[SL__WDS_MAX_FIELDS]; /* NPY: the array's */
  int rank[SL__WDS_MAX_FIELDS];       /* NPY: the array's */
  sl_schema *schema;
} sl__wds_layout;

typedef struct sl__wds_member {
  char ext[SL__WDS_EXT_MAX];
  uint64_t data, size;
  sl_buffer *buf; /* from a source: its bytes once read (owned), or NULL */
} sl__wds_member;

/* One open shard: its mapping (a local file) or its byte source (a URL,
 * read by ranges: source_http.c), and the walk through it.  From a source,
 * grouping reads each member's bytes in file order as it passes it (so the
 * source's read-ahead serves a forward walk), into a buffer of the
 * member's own released with the next group - unless headers_only, when
 * the walk reads the 512-byte headers alone. */
typedef struct sl__wds_shard {
  char *path;
  sl_buffer *map;    /* or NULL */
  sl__source *src;   /* or NULL */
  uint64_t size;     /* the shard's bytes */
  bool headers_only; /* from a source: grouping reads no member bytes (a
                        restore or skip walking to a count) */
  sl__file_id id;
  sl__tar tar;
  uint64_t index; /* samples passed so far */
  /* the group read last */
  char *key;
  size_t key_cap;
  uint64_t group_off; /* its first header */
  sl__wds_member m[SL__WDS_MAX_FIELDS];
  int nm;
} sl__wds_shard;

/* Maps `path`, or opens a URL as a ranged byte source.  SL_OK, SL_EIO
 * naming it (an http error names the URL and status), SL_ENOMEM. */
int sl__wds_shard_open(const char *path, sl__wds_shard **out);
void sl__wds_shard_close(sl__wds_shard *sh); /* NULL-safe */
/* The bytes the open shard holds for itself: its walk's buffers and
 * source (sl__tar_held) and the key buffer; not the member bytes read for
 * the group (they are the sample's, counted where it is held).  For the
 * memory budget (wds_reader.c, wds_open.c), after each group. */
uint64_t sl__wds_shard_held(const sl__wds_shard *sh);
/* Restarts the walk at byte `off` (a sample's first header, or 0) as
 * sample number `index`. */
void sl__wds_shard_seek(sl__wds_shard *sh, uint64_t off, uint64_t index);
/* Reads the next sample's members into sh->key / sh->m: SL_OK, SL_EOF,
 * SL_ECORRUPT or SL_EINVAL (a member repeated within a sample, an
 * extension too long), naming the shard; from a source also SL_EIO (a
 * read, naming the URL) and SL_ENOMEM. */
int sl__wds_shard_group(sl__wds_shard *sh);
/* The number of samples of the shard at `path` (those with a member for
 * every field of `lay`, when lay->skip_incomplete), walking its headers
 * alone with a handle of its own: SL_OK and *n, or sl__wds_shard_group's
 * errors. */
int sl__wds_shard_count(const char *path, const sl__wds_layout *lay,
                        uint64_t *n);
/* Whether the group just read has a member for every field of `lay`. */
bool sl__wds_group_complete(const sl__wds_shard *sh, const sl__wds_layout *lay);
/* The layout of the group just read (the data set's first sample), with
 * `fields` (sl_wds_opts.fields, or NULL) and `missing` (its policy).  SL_OK and
 * *out (free with sl__wds_layout_free), or SL_EINVAL (a malformed fields list,
 * a field the first sample has no member for), SL_ECORRUPT or SL_ENOMEM. */
int sl__wds_layout_make(sl__wds_shard *sh, const char *fields, int missing,
                        sl__wds_layout **out);
void sl__wds_layout_free(sl__wds_layout *lay);
/* The sample of the group just read, by `lay`: SL_OK and *out, SL_EINVAL
 * naming the shard and key (a field missing, two members of one field, a
 * member of no field unless lay->fields, a .cls that is not an integer, an
 * .npy of another dtype or rank), SL_ECORRUPT (a bad .npy), SL_ENOMEM. */
int sl__wds_shard_sample(sl__wds_shard *sh, const sl__wds_layout *lay,
                         sl_sample **out);

/* --- set identity ----------------------------------------------------------
 * `sluice pack images --format wds` writes, as every shard's first member,
 * SL__WDS_SET_MEMBER holding the text "id HEX\nshards K\nindex I\n": the
 * pack run's set id (sl__new_set_id), the shard count and the shard's
 * index.  Its name has no extension, so it forms no sample (the grouping
 * passes over it) and WebDataset's own readers skip it ("__*__" names are
 * metadata to them). */
#define SL__WDS_SET_MEMBER "__sluice_set__"
#define SL__WDS_SET_MAX 256 /* the member's largest size */

typedef struct sl__wds_set {
  bool has; /* false: the shard records no identity (another tool's) */
  char id[SL__SET_ID_LEN + 1];
  uint32_t shards, index;
} sl__wds_set;

/* The member's text for shard `index` of `shards` of set `id` into buf
 * (at least SL__WDS_SET_MAX bytes); returns its length. */
size_t sl__wds_set_text(const char *id, uint32_t shards, uint32_t index,
                        char *buf);
/* The identity of local shard `path` from its first member; out->has is
 * false when that member is not SL__WDS_SET_MEMBER.  SL_ECORRUPT naming
 * the shard when the member is malformed. */
int sl__wds_shard_set(const char *path, sl__wds_set *out);
/* The local shards among paths[0..n) (URLs are passed over) are one pack
 * run's - the same set id and count - or none records an identity (other
 * tools' shards); a subset of a run is fine.  Each is checked against the
 * first local shard's: SL_ECORRUPT "WHAT: ..." naming both. */
int sl__wds_set_check(const char *what, const char *const *paths, size_t n);

/* The file of class names beside wds shard `shard` into buf: its name
 * without ".tar" and a "-NNNNNN" shard number, then "-classes.txt"
 * ("x-000003.tar" and "x.tar": "x-classes.txt").  SL_OK or SL_EINVAL (too
 * long). */
int sl__wds_classes_name(const char *shard, char *buf, size_t size);

#endif
