/* dtype.c - element sizes and names of the dtypes. */
#include "internal.h"

static const size_t k_size[SL_DTYPE_COUNT] = {[SL_DTYPE_INVALID] = 0,
#define SL__DT_SIZE(name, lname, size) [SL_##name] = size,
                                              SL_DTYPE_MAP(SL__DT_SIZE)
#undef SL__DT_SIZE
};

static const char *const k_name[SL_DTYPE_COUNT] = {[SL_DTYPE_INVALID] =
                                                       "invalid",
#define SL__DT_NAME(name, lname, size) [SL_##name] = #lname,
                                                   SL_DTYPE_MAP(SL__DT_NAME)
#undef SL__DT_NAME
};

size_t sl_dtype_size(sl_dtype dt) {
  if ((int)dt <= SL_DTYPE_INVALID || dt >= SL_DTYPE_COUNT) return 0;
  return k_size[dt];
}

const char *sl_dtype_name(sl_dtype dt) {
  if ((int)dt <= SL_DTYPE_INVALID || dt >= SL_DTYPE_COUNT) return "invalid";
  return k_name[dt];
}

sl_dtype sl_dtype_from_name(const char *name) {
  if (!name) return SL_DTYPE_INVALID;
  for (int i = 1; i < SL_DTYPE_COUNT; i++)
    if (strcmp(k_name[i], name) == 0) return (sl_dtype)i;
  return SL_DTYPE_INVALID;
}
