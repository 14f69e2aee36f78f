/*
 * parser_plugin.h - loading a text parser plugin (sl_parser_api in sluice.h)
 * and running it on lines with the checks and messages the text reader
 * promises: which plugin, which file, which line.
 */
#ifndef SLUICE_PARSER_PLUGIN_H
#define SLUICE_PARSER_PLUGIN_H

#include "core/internal.h"

typedef struct sl__parser sl__parser;

/* Loads the plugin at `so`, checks its ABI version and runs its init with
 * `options` (NULL is "").  `ctx` starts every message ("text: data.csv").
 * Returns SL_OK and *out, or SL_EINVAL (cannot load: dlerror's text; no
 * sl_parser_entry; missing callbacks; no schema), SL_EUNSUPPORTED (another
 * ABI version), SL_ENOMEM, or init's own error - all naming the plugin. */
int sl__parser_open(const char *so, const char *options, const char *ctx,
                    sl__parser **out);

/* The schema the plugin declared (borrowed, frozen; lives as long as `p`). */
sl_schema *sl__parser_schema(const sl__parser *p);

/* Parses one line into *out, checked against the declared schema.  Returns
 * SL_OK, SL_PARSER_SKIP (no sample for this line), or an error whose
 * message is "<ctx>:<lineno>: parser NAME (SO): <what>": the plugin's own
 * error and code, SL_ESHAPE for a sample that does not fit the schema, or
 * SL_EINVAL for a plugin breaking the ABI (no sample, unknown code). */
int sl__parser_parse(sl__parser *p, const char *line, size_t len,
                     const char *ctx, uint64_t lineno, sl_sample **out);

/* Destroys the plugin's state and drops the schema; the shared object stays
 * mapped (RTLD_NODELETE: samples may hold memory its code made).  NULL-safe.
 */
void sl__parser_close(sl__parser *p);

#endif
