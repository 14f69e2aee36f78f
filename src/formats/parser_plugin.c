/*
 * parser_plugin.c - text parser plugins: shared objects exporting
 * sl_parser_entry (the ABI is sl_parser_api in sluice.h; docs/PLUGINS.md).
 *
 * Loading.  dlopen(RTLD_NOW) so that a plugin with an unresolved symbol
 * fails here, with dlerror's text, instead of at its first line;
 * RTLD_LOCAL so two plugins may both define helpers of the same name; and
 * RTLD_NODELETE because a plugin may hand out samples whose buffers it
 * allocated with its own free callback: those samples can outlive the
 * reader, so the code must never be unmapped under them.  The ABI version is
 * the first field of every version of sl_parser_api and is checked before
 * any other field is read, so a plugin built for another layout is refused
 * without touching fields that may not exist.
 *
 * Running.  The plugin reports errors through the host's sl_set_error; the
 * host clears the slot before each call, so a plugin that fails without a
 * message cannot make us repeat a stale one, then prefixes the plugin's
 * message with the file, line and plugin.  Every sample is checked against
 * the declared schema: downstream stages (batch, the SLR writer) trust a
 * reader's schema, so a plugin must not be able to lie about it.
 */
#include "formats/parser_plugin.h"

#include <dlfcn.h>

struct sl__parser {
  void *dl;
  const sl_parser_api *api;
  void *state;
  sl_schema *schema; /* the declared schema, frozen */
  char *so;          /* the path given, for messages */
  char name[64];     /* api->name, copied (or the path's base name) */
};

/* Keeps the plugin's message after a failed call, or sets the code's
 * description when it set none (the slot was cleared before the call). */
static void ensure_message(int rc) {
  if (!sl_last_error()[0]) sl_set_error(rc, "%s", sl_strerror(rc));
}

void sl__parser_close(sl__parser *p) {
  if (!p) return;
  if (p->api && p->api->destroy && p->state) p->api->destroy(p->state);
  sl_schema_release(p->schema);
  /* Drops our reference; RTLD_NODELETE keeps the code mapped. */
  if (p->dl) dlclose(p->dl);
  sl__free(p->so);
  sl__free(p);
}

sl_schema *sl__parser_schema(const sl__parser *p) {
  return p->schema;
}

/* Finds the entry point and checks the table it returns. */
static int bind_api(sl__parser *p, const char *ctx) {
  dlerror(); /* clear: dlsym's NULL alone does not mean failure */
  void *sym = dlsym(p->dl, SL_PARSER_ENTRY);
  const char *why = dlerror();
  if (!sym)
    return sl_set_error(SL_EINVAL,
                        "%s: parser plugin %s: no symbol %s (%s); a plugin "
                        "exports const sl_parser_api *%s(void)",
                        ctx, p->so, SL_PARSER_ENTRY, why ? why : "it is NULL",
                        SL_PARSER_ENTRY);
  /* Object to function pointer: dlsym's documented use, spelled with
   * memcpy because ISO C has no such conversion. */
  sl_parser_entry_fn entry;
  memcpy(&entry, &sym, sizeof entry);
  p->api = entry();
  if (!p->api)
    return sl_set_error(SL_EINVAL, "%s: parser plugin %s: %s() returned NULL",
                        ctx, p->so, SL_PARSER_ENTRY);
  if (p->api->abi_version != SL_PARSER_ABI_VERSION)
    return sl_set_error(SL_EUNSUPPORTED,
                        "%s: parser plugin %s: ABI version %u, this "
                        "libsluice (%s) expects %u (SL_PARSER_ABI_VERSION): "
                        "rebuild the plugin against this sluice.h",
                        ctx, p->so, (unsigned)p->api->abi_version,
                        SL_VERSION_STRING, (unsigned)SL_PARSER_ABI_VERSION);
  const char *base = strrchr(p->so, '/');
  snprintf(p->name, sizeof p->name, "%s",
           p->api->name && p->api->name[0] ? p->api->name
                                           : (base ? base + 1 : p->so));
  SL_RETURN_ERROR_IF(!p->api->init || !p->api->parse, SL_EINVAL,
                     "%s: parser %s (%s): sl_parser_api has no %s callback",
                     ctx, p->name, p->so, p->api->init ? "parse" : "init");
  return SL_OK;
}

/* Runs the plugin's init and takes the schema it declares. */
static int run_init(sl__parser *p, const char *options, const char *ctx) {
  sl_schema *schema = NULL;
  void *state = NULL;
  sl_clear_error();
  int rc = p->api->init(options, &schema, &state);
  if (rc > 0)
    rc = sl_set_error(SL_EINVAL, "init returned %d, not SL_OK or an error", rc);
  if (rc == SL_OK && !schema) {
    if (state && p->api->destroy) p->api->destroy(state);
    rc = sl_set_error(SL_EINVAL, "init returned SL_OK but no schema");
  }
  if (rc < 0) {
    if (rc == SL_EOF) /* end of data is not an error code callers expect */
      rc = sl_set_error(SL_EINVAL, "init returned SL_EOF");
    ensure_message(rc);
    /* The contract: a failing init leaves nothing to free. */
    return sl_wrap_error(rc, "%s: parser %s (%s): init with options \"%s\"",
                         ctx, p->name, p->so, options);
  }
  sl_schema_freeze(schema);
  p->schema = schema;
  p->state = state;
  return SL_OK;
}

int sl__parser_open(const char *so, const char *options, const char *ctx,
                    sl__parser **out) {
  *out = NULL;
  SL_RETURN_ERROR_IF(!so || !so[0], SL_EINVAL, "%s: empty parser plugin path",
                     ctx);
  if (!options) options = "";
  sl__parser *p = sl__calloc(1, sizeof *p);
  if (p) p->so = sl__strdup(so);
  if (!p || !p->so) {
    sl__free(p);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate a parser", ctx);
  }
  dlerror();
  p->dl = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  int rc;
  if (!p->dl) {
    const char *why = dlerror();
    rc = sl_set_error(SL_EINVAL, "%s: parser plugin %s: cannot load: %s", ctx,
                      so, why ? why : "unknown dlopen error");
  } else {
    rc = bind_api(p, ctx);
    if (rc == SL_OK) rc = run_init(p, options, ctx);
  }
  if (rc < 0) {
    sl__parser_close(p); /* state is NULL: init failed or never ran */
    return rc;
  }
  *out = p;
  return SL_OK;
}

/* Checks a parsed sample against the declared schema; SL_ESHAPE says how
 * it differs. */
static int check_sample(const sl__parser *p, const sl_sample *s) {
  const sl_schema *got = sl_sample_schema(s);
  if (got != p->schema && !sl_schema_equal(got, p->schema)) {
    char want_s[512], got_s[512];
    return sl_set_error(SL_ESHAPE,
                        "the sample has schema %s, but the plugin "
                        "declared %s",
                        sl_schema_describe(got, got_s, sizeof got_s),
                        sl_schema_describe(p->schema, want_s, sizeof want_s));
  }
  /* sl_sample_new leaves every field empty: rank 0 and no data.  A field
   * the plugin forgot to fill fails the rank check, or for a scalar field
   * the size check (a scalar has one element, so it cannot be 0 bytes). */
  int n = sl_schema_nfields(p->schema);
  for (int i = 0; i < n; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    SL_FORWARD_IF_ERROR(sl_schema_check(p->schema, i, t));
    uint64_t want = (uint64_t)sl_tensor_numel(t) * sl_dtype_size(t->dtype);
    SL_RETURN_ERROR_IF(t->nbytes != want || (want && !t->data), SL_ESHAPE,
                       "field '%s' was not filled (%zu data bytes for %llu "
                       "elements)",
                       sl_schema_field_name(p->schema, i), t->nbytes,
                       (unsigned long long)sl_tensor_numel(t));
  }
  return SL_OK;
}

int sl__parser_parse(sl__parser *p, const char *line, size_t len,
                     const char *ctx, uint64_t lineno, sl_sample **out) {
  sl_sample *s = NULL;
  sl_clear_error();
  int rc = p->api->parse(p->state, line, len, &s);
  *out = NULL;
  /* Only SL_OK hands over a sample; after anything else *out is not the
   * plugin's to give (the ABI says leave it NULL) and is ignored. */
  if (rc == SL_PARSER_SKIP) return SL_PARSER_SKIP;
  if (rc != SL_OK) s = NULL;
  if (rc > 0) {
    rc = sl_set_error(SL_EINVAL,
                      "parse returned %d, not SL_OK, SL_PARSER_SKIP or an "
                      "error",
                      rc);
  } else if (rc == SL_EOF) {
    /* Passed through, it would end the pass silently in mid-file. */
    rc = sl_set_error(SL_EINVAL, "parse returned SL_EOF, which is not an "
                                 "error code");
  } else if (rc == SL_OK && !s) {
    rc = sl_set_error(SL_EINVAL, "parse returned SL_OK but no sample");
  } else if (rc == SL_OK) {
    rc = check_sample(p, s);
  }
  if (rc < 0) {
    sl_sample_release(s);
    ensure_message(rc);
    return sl_wrap_error(rc, "%s:%llu: parser %s (%s)", ctx,
                         (unsigned long long)lineno, p->name, p->so);
  }
  *out = s;
  return SL_OK;
}
