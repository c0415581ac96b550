// What the int8 plan makes of a quantized model, without building it (int8_plan.cpp): the checks
// the quantized file's reader runs, so that a file that loads also runs, exports and imports back,
// and the tensors whose QParams the plan takes from their input.
#pragma once
#include <map>
#include <string>

#include "ember/quant.h"

namespace ember::quant {

// q once checked against what the int8 plan and its QDQ export compute: every activation's
// QParams and every layer's scales (qparams_problem, layer_problem), each requantization scale a
// normal float, each bias fitting int32 in the plan's units, the layers as the export writes them
// (BatchNorm2d folded in), and each exact u8 op's own output pair, where q has one, its input's.
// Otherwise Error "WHERE: tensor 'T': ..." naming the tensor.
QuantizedWeights checked_for_int8(QuantizedWeights q, const std::string& where);

// Each tensor the int8 plan of q computes by an exact u8 op (a ReLU, 2x2 max-pool or flatten on
// u8 values) -> the tensor whose QParams it keeps (the first of such a chain).
std::map<std::string, std::string> u8_passthrough(const QuantizedWeights& q);

}  // namespace ember::quant
