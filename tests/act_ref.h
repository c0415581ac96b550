// The activations' scalar references for the tests: their formulas (src/kernels/act/), in double
// (act_info's) and in float (the scalar kernel table's), by ActId.
#pragma once
#include <type_traits>

#include "kernels/kernels.h"

namespace ember {

template <class T>
auto act_ref_fwd(ActId a) {
  if constexpr (std::is_same_v<T, double>) return act_info(a).fwd64;
  else return kernels_for(Isa::scalar).act_fwd[int(a)];
}
template <class T>
auto act_ref_bwd(ActId a) {
  if constexpr (std::is_same_v<T, double>) return act_info(a).bwd64;
  else return kernels_for(Isa::scalar).act_bwd[int(a)];
}

}  // namespace ember
