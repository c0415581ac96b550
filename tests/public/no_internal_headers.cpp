// Built against the `ember` target alone, as a user's program is: the public headers compile on
// their own, and the library's internal headers (src/) are not on the user's include path.
#include "ember/cpu.h"
#include "ember/dist.h"
#include "ember/ember.h"
#include "ember/json.h"

#if __has_include("nn/graph.h") || __has_include("kernels/kernels.h")
#error "src/ is on the include path of ember's users: a part of the library exports it"
#endif

int ember_public_api_check() { return ember::Model{}.in_c; }
