// header_cxx.cc - sluice.h must stay usable from C++ (extern "C", no C-only
// constructs such as a type and a function sharing a name): CTest
// header.cplusplus compiles this with -fsyntax-only.
#include "sluice.h"

int main() {
  sl_open_files_opts o = SL_OPEN_FILES_OPTS_INIT;
  (void)o;
  return sl_version() != nullptr ? 0 : 1;
}
