/* embed.c - built against an installed sluice by tests/install/run.sh: a C
 * program that runs a Lua pipeline script (with a Lua map on two worker
 * threads) and finds the installed Lua modules without LUA_PATH/LUA_CPATH. */
#include <sluice.h>

#include <stdint.h>
#include <stdio.h>

static const char SCRIPT[] =
    "local sluice = require 'sluice'\n"
    "local n = tonumber((...))\n"
    "return sluice.range(n):map(function(s) s.i = s.i * 10 return s end,\n"
    "                           {threads = 2}):batch(4)\n";

int main(void) {
  const char *argv[] = {"10"};
  sl_pipeline *p;
  int rc = sl_pipeline_open_string(SCRIPT, "embed", 1, argv, &p);
  if (rc < 0) {
    fprintf(stderr, "embed: %s: %s\n", sl_err_name(rc), sl_last_error());
    return 1;
  }
  int64_t sum = 0, count = 0;
  sl_sample *b;
  while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
    const sl_tensor *t = sl_sample_field(b, "i");
    if (!t || sl_tensor_dtype(t) != SL_I64) {
      fprintf(stderr, "embed: bad field i: %s\n", sl_last_error());
      return 1;
    }
    const int64_t *v = sl_tensor_data(t);
    for (int64_t k = 0; k < sl_tensor_shape(t)[0]; k++) sum += v[k], count++;
    sl_sample_release(b);
  }
  sl_pipeline_close(p);
  if (rc != SL_EOF || count != 10 || sum != 450) {
    fprintf(stderr, "embed: rc %s, %lld samples, sum %lld (want 10, 450)\n",
            sl_err_name(rc), (long long)count, (long long)sum);
    return 1;
  }
  printf("embed: 10 samples through a Lua map in worker states, sum 450\n");
  return 0;
}
