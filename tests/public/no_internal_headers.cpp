// Built against the `ember` target alone, as a user's program is: the public headers compile on
// their own (tests/CMakeLists.txt also compiles each one alone), and neither the library's internal
// headers (src/) nor ember_support's (the CLI's, not installed) are on the user's include path.
#include "ember/cpu.h"
#include "ember/dist.h"
#include "ember/ember.h"

#if __has_include("nn/graph.h") || __has_include("kernels/kernels.h")
#error "src/ is on the include path of ember's users: a part of the library exports it"
#endif
#if __has_include("ember_support/files.h") || __has_include("ember/files.h") || __has_include("ember/json.h")
#error "a CLI helper header (ember_support/: files, json, bench, report) is visible to ember's users"
#endif

int ember_public_api_check() { return ember::Model{}.in_c; }
