// QDQ import of files ember did not write (raw protobuf bytes, tests/cli/onnx_wire.h): the integer
// ops QLinearConv, QLinearMatMul, ConvInteger and MatMulInteger, and hostile quantization
// parameters (scales 0, -1, NaN, Inf; zero points out of range; lying shapes) refused in one line;
// torch.onnx.export's forms (Constant nodes, folded Casts) and hostile variants of them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cli/onnx_wire.h"
#include "ember/error.h"
#include "ember/onnx_quant.h"

using namespace ember;
using namespace onnx_wire;

namespace {

enum Type { FLOAT = 1, UINT8 = 2, INT8 = 3, INT32 = 6 };

template <class T>
Bytes typed(const std::string& name, const std::vector<int64_t>& dims, Type type, const std::vector<T>& v) {
  Bytes t;
  for (int64_t d : dims) t += num(1, uint64_t(d));
  return str(5, t + num(2, type) + str(8, name) + str(9, Bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T))));
}
Bytes floats(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) { return typed(name, dims, FLOAT, v); }
Bytes u8(const std::string& name, uint8_t v) { return typed(name, {}, UINT8, std::vector<uint8_t>{v}); }
Bytes i8(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int8_t>& v) { return typed(name, dims, INT8, v); }
Bytes i32(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int32_t>& v) { return typed(name, dims, INT32, v); }
Bytes n(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out, const Bytes& attrs = "") {
  return str(1, node(op, in, out, out[0] + "_node", attrs));
}
Bytes conv_attrs() { return attr_ints("kernel_shape", {3, 3}) + attr_ints("pads", {1, 1, 1, 1}); }

std::vector<int8_t> weights(size_t count, int seed) {
  std::vector<int8_t> w(count);
  for (size_t k = 0; k < count; ++k) w[k] = int8_t(int((k * 37 + size_t(seed) * 11) % 255) - 127);
  return w;
}

QuantizedWeights import(const onnx_wire::Model& m) {
  const Bytes b = m.bytes();
  return import_onnx_quantized_from_memory(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "t.onnx");
}

const QuantLayer* layer_with(const QuantizedWeights& q, size_t rank) {
  for (const QuantLayer& l : q.layers)
    if (l.shape.size() == rank) return &l;
  return nullptr;
}

// x [N, 1, 4, 4] -> Q -> QLinearConv (2 channels, per-channel scales, int32 bias) -> DQ -> Flatten
// -> Q -> QLinearMatMul ([32, 3], per-column scales) -> DQ -> y [N, 3].
// conv_x: the QLinearConv's x_scale and x_zero_point (another pair than the QuantizeLinear's: hostile).
onnx_wire::Model qlinear_model(const std::vector<std::string>& conv_x = {"xs", "xz"}) {
  onnx_wire::Model m;
  const std::vector<int8_t> cw = weights(18, 1), mw = weights(96, 2);
  m.nodes = n("QuantizeLinear", {"x", "xs", "xz"}, {"xq"}) +
            n("QLinearConv", {"xq", conv_x[0], conv_x[1], "conv.weight", "cws", "cwz", "cs", "cz", "conv.bias"}, {"cq"}, conv_attrs()) +
            n("DequantizeLinear", {"cq", "cs", "cz"}, {"c"}) + n("Flatten", {"c"}, {"f"}) +
            n("QuantizeLinear", {"f", "cs", "cz"}, {"fq"}) +
            n("QLinearMatMul", {"fq", "cs", "cz", "fc.weight", "mws", "mwz", "ys", "yz"}, {"yq"}) +
            n("DequantizeLinear", {"yq", "ys", "yz"}, {"y"});
  m.initializers = floats("xs", {}, {0.004f}) + u8("xz", 3) + i8("conv.weight", {2, 1, 3, 3}, cw) + floats("cws", {2}, {0.01f, 0.02f}) +
                   i8("cwz", {2}, {0, 0}) + i32("conv.bias", {2}, {-70, 1234}) + floats("cs", {}, {0.05f}) + u8("cz", 128) +
                   i8("fc.weight", {32, 3}, mw) + floats("mws", {3}, {0.001f, 0.002f, 0.003f}) + i8("mwz", {3}, {0, 0, 0}) +
                   floats("ys", {}, {0.1f}) + u8("yz", 100) + floats("xs10", {}, {0.04f}) + u8("xz4", 4);
  m.inputs = str(11, value_info("x", float_type({0, 1, 4, 4})));
  m.outputs = str(12, value_info("y", float_type({0, 3})));
  return m;
}

TEST(OnnxQdqOps, QLinearConvAndQLinearMatMulImport) {
  const std::vector<int8_t> cw = weights(18, 1), mw = weights(96, 2);
  const QuantizedWeights q = import(qlinear_model());
  ASSERT_EQ(q.layers.size(), 2u);
  const QuantLayer& c = *layer_with(q, 4);
  EXPECT_EQ(c.prefix, "conv");
  EXPECT_EQ(c.w, cw);
  EXPECT_EQ(c.w_scale, (std::vector<float>{0.01f, 0.02f}));
  EXPECT_EQ(c.bias, (std::vector<int32_t>{-70, 1234}));
  const QuantLayer& l = *layer_with(q, 2);
  EXPECT_EQ(l.shape, (std::vector<int>{3, 32}));  // PyTorch's [K, C]: MatMul's [C, K] transposed
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 32; ++j) ASSERT_EQ(l.w[size_t(k * 32 + j)], mw[size_t(j * 3 + k)]);
  EXPECT_EQ(l.w_scale, (std::vector<float>{0.001f, 0.002f, 0.003f}));
  EXPECT_FALSE(l.has_bias);
  EXPECT_EQ(q.acts.at("input").scale, 0.004f);
  EXPECT_EQ(q.acts.at("input").zero_point, 3);
  EXPECT_EQ(q.acts.at("conv").zero_point, 128);
  EXPECT_EQ(q.acts.at(l.prefix).scale, 0.1f);
  EXPECT_EQ(q.acts.at(l.prefix).zero_point, 100);
  EXPECT_EQ(q.acts.size(), 4u);  // input, conv, flatten, the linear
}

// x -> Q -> ConvInteger -> Cast -> Mul (x_scale * w_scale per channel) -> Relu -> Flatten -> Q ->
// MatMulInteger -> Cast -> Mul (one scale) -> y.
TEST(OnnxQdqOps, ConvIntegerAndMatMulIntegerImport) {
  onnx_wire::Model m;
  const std::vector<int8_t> cw = weights(18, 3), mw = weights(96, 4);
  m.nodes = n("QuantizeLinear", {"x", "xs", "xz"}, {"xq"}) + n("ConvInteger", {"xq", "conv.weight", "xz"}, {"ci"}, conv_attrs()) +
            n("Cast", {"ci"}, {"cf"}, attr_int("to", 1)) + n("Mul", {"cf", "cmul"}, {"c"}) + n("Relu", {"c"}, {"r"}) +
            n("Flatten", {"r"}, {"f"}) + n("QuantizeLinear", {"f", "fs", "fz"}, {"fq"}) +
            n("MatMulInteger", {"fq", "fc.weight", "fz"}, {"mi"}) + n("Cast", {"mi"}, {"mf"}, attr_int("to", 1)) +
            n("Mul", {"mf", "mmul"}, {"y"});
  const float xs = 0.5f, fs = 0.25f;
  m.initializers = floats("xs", {}, {xs}) + u8("xz", 0) + i8("conv.weight", {2, 1, 3, 3}, cw) +
                   floats("cmul", {2, 1, 1}, {xs * 0.01f, xs * 0.02f}) + floats("fs", {}, {fs}) + u8("fz", 0) +
                   i8("fc.weight", {32, 3}, mw) + floats("mmul", {}, {fs * 0.125f});
  m.inputs = str(11, value_info("x", float_type({0, 1, 4, 4})));
  m.outputs = str(12, value_info("y", float_type({0, 3})));
  const QuantizedWeights q = import(m);
  ASSERT_EQ(q.layers.size(), 2u);
  const QuantLayer& c = *layer_with(q, 4);
  EXPECT_EQ(c.w, cw);
  EXPECT_FLOAT_EQ(c.w_scale[0], 0.01f);
  EXPECT_FLOAT_EQ(c.w_scale[1], 0.02f);
  const QuantLayer& l = *layer_with(q, 2);
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 32; ++j) ASSERT_EQ(l.w[size_t(k * 32 + j)], mw[size_t(j * 3 + k)]);
  EXPECT_FLOAT_EQ(l.w_scale[2], 0.125f);
  EXPECT_EQ(q.acts.at("input").scale, xs);
}

// The hostile cases' base: x -> Q -> DQ -> Conv(DQ(int8 w), DQ(int32 b)) -> Flatten -> y.
// dq_x: the activation DQ's inputs; extra: more initializers (after the others); more: more nodes.
struct Hostile {
  Bytes xs = floats("x_scale", {}, {0.01f}), xz = u8("x_zp", 0), ws = floats("w_scale", {2}, {0.1f, 0.2f});
  Bytes wz = i8("w_zp", {2}, {0, 0}), w = i8("w", {2, 1, 3, 3}, weights(18, 5));
  Bytes bs = floats("b_scale", {2}, {0.001f, 0.002f}), bz = i32("b_zp", {2}, {0, 0}), b = i32("b", {2}, {5, -5});
  std::vector<std::string> dq_x = {"xq", "x_scale", "x_zp"};
  Bytes extra, more;
  onnx_wire::Model model() const {
    onnx_wire::Model m;
    m.nodes = more + n("QuantizeLinear", {"x", "x_scale", "x_zp"}, {"xq"}) + n("DequantizeLinear", dq_x, {"xd"}) +
              n("DequantizeLinear", {"w", "w_scale", "w_zp"}, {"wd"}, attr_int("axis", 0)) +
              n("DequantizeLinear", {"b", "b_scale", "b_zp"}, {"bd"}, attr_int("axis", 0)) +
              n("Conv", {"xd", "wd", "bd"}, {"c"}, conv_attrs()) + n("Flatten", {"c"}, {"y"});
    m.initializers = xs + xz + ws + wz + w + bs + bz + b + extra;
    m.inputs = str(11, value_info("x", float_type({0, 1, 4, 4})));
    m.outputs = str(12, value_info("y", float_type({0, 32})));
    return m;
  }
};

void expect_refused(const Hostile& h, const std::string& tensor, const std::string& what) {
  try {
    import(h.model());
    ADD_FAILURE() << "imported; expected a refusal naming '" << tensor << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + tensor + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

TEST(OnnxQdqOps, TheHostileBaseImports) {
  const QuantizedWeights q = import(Hostile().model());
  ASSERT_EQ(q.layers.size(), 1u);
  EXPECT_EQ(q.layers[0].bias, (std::vector<int32_t>{5, -5}));  // b_scale = x_scale * w_scale
}

TEST(OnnxQdqOps, BadScalesAreRefusedNamingTheTensor) {
  for (float bad : {0.f, -1.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    Hostile h;
    h.xs = floats("x_scale", {}, {bad});
    expect_refused(h, "x_scale", "is not finite and > 0");
    Hostile w;
    w.ws = floats("w_scale", {2}, {0.1f, bad});
    expect_refused(w, "w_scale", "is not finite and > 0");
    Hostile b;
    b.bs = floats("b_scale", {2}, {bad, 0.1f});
    expect_refused(b, "b_scale", "is not finite and > 0");
  }
}

TEST(OnnxQdqOps, ZeroPointsOutOfRangeAreRefusedNamingTheTensor) {
  Hostile b;
  b.bz = i32("b_zp", {2}, {300, 0});  // an int32 zero point: a bias's must be 0
  expect_refused(b, "b_zp", "is not 0");
  Hostile x;
  x.xz = i32("x_zp", {}, {300});  // an activation's zero point given as int32
  expect_refused(x, "x_zp", "300 is outside 0..255");
  Hostile u;
  u.xz = str(5, num(2, UINT8) + str(8, "x_zp") + num(5, 300));  // uint8 in int32_data
  expect_refused(u, "x_zp", "300 is outside 0..255");
  Hostile w;
  w.wz = i8("w_zp", {2}, {0, 4});
  expect_refused(w, "w_zp", "not 0");
}

TEST(OnnxQdqOps, LyingShapesAreRefusedNamingTheTensor) {
  Hostile s;
  s.ws = floats("w_scale", {3}, {0.1f, 0.2f, 0.3f});  // 3 scales for 2 output channels
  expect_refused(s, "w", "3 scales do not match axis 0");
  Hostile w;
  w.w = i8("w", {2, 1, 3, 3}, weights(17, 5));  // 17 bytes for 18 values
  expect_refused(w, "w", "dims say 18");
  Hostile b;
  b.b = i32("b", {3}, {1, 2, 3});
  expect_refused(b, "b", "does not match its 2 scales");
  Hostile z;
  z.wz = i8("w_zp", {3}, {0, 0, 0});
  expect_refused(z, "w_zp", "3 zero points for 2 scales");
  Hostile x;
  x.xs = floats("x_scale", {2}, {0.1f, 0.1f});
  expect_refused(x, "x_scale", "per tensor");
}

// Both imports (int8, and the fp32 graph a QDQ file computes) refuse m in one line holding `needles`.
void expect_both_refused(const onnx_wire::Model& m, const std::vector<std::string>& needles) {
  const Bytes b = m.bytes();
  const auto* p = reinterpret_cast<const uint8_t*>(b.data());
  for (int fp32 = 0; fp32 < 2; ++fp32) try {
      if (fp32) import_onnx_from_memory(p, b.size(), "t.onnx");
      else import_onnx_quantized_from_memory(p, b.size(), "t.onnx");
      ADD_FAILURE() << (fp32 ? "the fp32 import" : "the int8 import") << " accepted it; expected: " << needles[0];
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const std::string& w : needles) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
    }
}

// H1 (hostile-input report 2026-12-01): a DequantizeLinear of a QuantizeLinear's output was
// computed with the QuantizeLinear's scale and zero point whatever its own were (a silent wrong
// answer in int8 and fp32 alike: its scale x10 gave the same outputs), and a zero point of another
// type or shape on it was ignored. Now each is refused naming the nodes; equal values under other
// names, and a zero point left out where the QuantizeLinear's is 0, are the same QParams.
TEST(OnnxQdqOps, ADequantizeWithOtherQParamsThanItsQuantizeIsRefused) {
  const std::string other = "DequantizeLinear 'xd_node' uses other QParams than its QuantizeLinear 'xq_node'";
  Hostile s;
  s.dq_x = {"xq", "s10", "x_zp"}, s.extra = floats("s10", {}, {0.1f});
  expect_both_refused(s.model(), {"t.onnx", other, "scale 0.1"});
  Hostile z;
  z.dq_x = {"xq", "x_scale", "z5"}, z.extra = u8("z5", 5);
  expect_both_refused(z.model(), {other, "zero point 5"});
  Hostile gone;  // the DQ's zero point left out (0) where the Q's is 3
  gone.xz = u8("x_zp", 3), gone.dq_x = {"xq", "x_scale"};
  expect_both_refused(gone.model(), {other, "zero point 0"});
  Hostile t;  // the report's int8 [128] weight zero point on the activation DQ
  t.dq_x = {"xq", "x_scale", "zw"}, t.extra = i8("zw", {128}, std::vector<int8_t>(128, 0));
  expect_both_refused(t.model(), {"'xd_node'", "zero point 'zw' is int8 [128]"});
  Hostile shape;
  shape.dq_x = {"xq", "x_scale", "z2"}, shape.extra = typed("z2", {2}, UINT8, std::vector<uint8_t>{0, 0});
  expect_both_refused(shape.model(), {"'xd_node'", "zero point 'z2'", "[2]"});
  Hostile same;
  same.dq_x = {"xq", "s_copy"}, same.extra = floats("s_copy", {}, {0.01f});
  const QuantizedWeights q = import(same.model());
  EXPECT_EQ(q.acts.at("input").scale, 0.01f);
  EXPECT_EQ(q.acts.at("input").zero_point, 0);
}

// H1's kin: a QLinearConv's x_scale other than its input's QuantizeLinear's replaced the input's
// QParams; two QuantizeLinear of one tensor with other QParams kept the last (ember's int8 plan
// has one per tensor, so one branch ran with the other's scale). Both are refused.
TEST(OnnxQdqOps, OtherQParamsForOneQuantizedTensorAreRefused) {
  expect_both_refused(qlinear_model({"xs10", "xz"}), {"QLinearConv 'cq_node' uses other input QParams than its QuantizeLinear 'xq_node'"});
  expect_both_refused(qlinear_model({"xs", "xz4"}), {"QLinearConv 'cq_node' uses other input QParams", "zero point 4"});
  Hostile h;  // x -> Q (x_scale) -> DQ -> Conv, and x -> Q (0.02) -> DQ -> Conv; Add; Flatten
  onnx_wire::Model m = h.model();
  m.nodes = n("QuantizeLinear", {"x", "x_scale", "x_zp"}, {"xq"}) + n("DequantizeLinear", {"xq", "x_scale", "x_zp"}, {"xd"}) +
            n("QuantizeLinear", {"x", "s2", "x_zp"}, {"xq2"}) + n("DequantizeLinear", {"xq2", "s2", "x_zp"}, {"xd2"}) +
            n("DequantizeLinear", {"w", "w_scale", "w_zp"}, {"wd"}, attr_int("axis", 0)) +
            n("DequantizeLinear", {"b", "b_scale", "b_zp"}, {"bd"}, attr_int("axis", 0)) +
            n("Conv", {"xd", "wd", "bd"}, {"c1"}, conv_attrs()) + n("Conv", {"xd2", "wd", "bd"}, {"c2"}, conv_attrs()) +
            n("Add", {"c1", "c2"}, {"s"}) + n("Flatten", {"s"}, {"y"});
  m.initializers += floats("s2", {}, {0.02f});
  expect_both_refused(m, {"QuantizeLinear 'xq2_node' quantizes 'x' with other QParams than QuantizeLinear 'xq_node'"});
}

// M1: a duplicate initializer of a Q/DQ scale or zero point was accepted, the last one winning (the
// QDQ pass read initializers before the importer's "appears twice"); now every duplicate is
// refused before anything reads them, with the message a duplicate weight gets.
// A file that requantizes at a 2x2 max-pool (x -> conv -> Q(cs) -> DQ -> MaxPool -> Q(rs) -> DQ ->
// flatten): the int8 plan runs the pool exactly on u8 values, so its output keeps its input's
// QParams; with rs != cs the int8 import ran it with cs in place of the file's rs (a silent wrong
// answer, as H1). Now refused, as the quantized-file reader refuses such a pair; rs == cs imports.
onnx_wire::Model pool_requantized(float pool_scale) {
  const Hostile h;
  onnx_wire::Model m;
  m.nodes = n("QuantizeLinear", {"x", "x_scale", "x_zp"}, {"xq"}) + n("DequantizeLinear", {"xq", "x_scale", "x_zp"}, {"xd"}) +
            n("DequantizeLinear", {"w", "w_scale", "w_zp"}, {"wd"}, attr_int("axis", 0)) +
            n("DequantizeLinear", {"b", "b_scale", "b_zp"}, {"bd"}, attr_int("axis", 0)) +
            n("Conv", {"xd", "wd", "bd"}, {"c"}, conv_attrs()) + n("QuantizeLinear", {"c", "c_scale", "c_zp"}, {"cq"}) +
            n("DequantizeLinear", {"cq", "c_scale", "c_zp"}, {"cd"}) +
            n("MaxPool", {"cd"}, {"r"}, attr_ints("kernel_shape", {2, 2}) + attr_ints("strides", {2, 2})) +
            n("QuantizeLinear", {"r", "r_scale", "c_zp"}, {"rq"}) + n("DequantizeLinear", {"rq", "r_scale", "c_zp"}, {"rd"}) +
            n("Flatten", {"rd"}, {"y"});
  m.initializers = h.xs + h.xz + h.ws + h.wz + h.w + h.bs + h.bz + h.b + floats("c_scale", {}, {0.05f}) + u8("c_zp", 128) +
                   floats("r_scale", {}, {pool_scale});
  m.inputs = str(11, value_info("x", float_type({0, 1, 4, 4})));
  m.outputs = str(12, value_info("y", float_type({0, 8})));
  return m;
}

TEST(OnnxQdqOps, ARequantizationAtAnExactU8OpIsRefused) {
  EXPECT_NO_THROW(import(pool_requantized(0.05f)));
  try {
    import(pool_requantized(0.5f));
    ADD_FAILURE() << "imported a max-pool whose output QParams differ from its input's";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find("t.onnx"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected its input's"), std::string::npos) << msg;
  }
}

// fuzz_onnx's finding (issue 55's 600 s run): a QuantizeLinear with no output was read at its
// output 0 (a null protobuf field: undefined behaviour). Each quantized op needs one output.
TEST(OnnxQdqOps, AQuantizedOpWithoutItsOutputIsRefused) {
  Hostile h;
  h.more = str(1, node("QuantizeLinear", {"x", "x_scale", "x_zp"}, {}, "q_nothing"));
  expect_both_refused(h.model(), {"t.onnx", "QuantizeLinear", "expected one output, found 0"});
}

TEST(OnnxQdqOps, DuplicateInitializersAreRefusedAsADuplicateWeightIs) {
  const std::vector<std::pair<std::string, Bytes>> dups = {
      {"x_scale", floats("x_scale", {}, {0.5f})}, {"x_zp", u8("x_zp", 7)},
      {"w_scale", floats("w_scale", {2}, {0.5f, 0.5f})}, {"w_zp", i8("w_zp", {2}, {0, 0})},
      {"b_scale", floats("b_scale", {2}, {1.f, 1.f})}, {"w", i8("w", {2, 1, 3, 3}, weights(18, 9))}};
  for (const auto& [name, bytes] : dups) {
    Hostile h;
    h.extra = bytes;
    expect_both_refused(h.model(), {"t.onnx", "initializer '" + name + "' appears twice"});
  }
  Hostile c;  // torch.onnx.export's form: a Constant node writing a name an initializer has
  c.more = n("Constant", {}, {"x_scale"}, str(5, str(1, "value") + floats("", {}, {0.5f}) + num(20, 4)));
  expect_both_refused(c.model(), {"tensor 'x_scale' is produced by node 0 (Constant) and is an initializer"});
}

// What torch.onnx.export writes around a quantized model: scales and zero points as Constant
// nodes, a zero point as Cast(Constant) or Cast(ConstantOfShape), a Cast after each QuantizeLinear.
// `zp` makes "xz" (x's zero point); `cast_to` is the type of the Cast after QuantizeLinear.
Bytes const_node(const std::string& out, const Bytes& tensor) { return n("Constant", {}, {out}, str(5, str(1, "value") + tensor + num(20, 4))); }
onnx_wire::Model torch_style(const Bytes& zp, int cast_to) {
  Hostile h;
  onnx_wire::Model m;
  m.nodes = const_node("xs", floats("", {}, {0.01f})) + zp + n("QuantizeLinear", {"x", "xs", "xz"}, {"xq"}) +
            n("Cast", {"xq"}, {"xc"}, attr_int("to", cast_to)) + n("DequantizeLinear", {"xc", "xs", "xz"}, {"xd"}) +
            n("DequantizeLinear", {"w", "w_scale", "w_zp"}, {"wd"}, attr_int("axis", 0)) +
            n("DequantizeLinear", {"b", "b_scale", "b_zp"}, {"bd"}, attr_int("axis", 0)) +
            n("Conv", {"xd", "wd", "bd"}, {"c"}, conv_attrs()) + n("Flatten", {"c"}, {"y"});
  m.initializers = h.ws + h.wz + h.w + h.bs + h.bz + h.b;
  m.inputs = str(11, value_info("x", float_type({0, 1, 4, 4})));
  m.outputs = str(12, value_info("y", float_type({0, 32})));
  m.opset = 13;
  return m;
}
void expect_torch_refused(const onnx_wire::Model& m, const std::string& node, const std::string& what) {
  try {
    import(m);
    ADD_FAILURE() << "imported; expected a refusal naming node '" << node << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + node + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

TEST(OnnxQdqOps, TorchExportFormsImportAndHostileOnesAreRefused) {
  const Bytes zp_cast = const_node("z32", typed("", {}, INT32, std::vector<int32_t>{7})) + n("Cast", {"z32"}, {"xz"}, attr_int("to", UINT8));
  const QuantizedWeights q = import(torch_style(zp_cast, UINT8));
  EXPECT_EQ(q.acts.at("input").zero_point, 7);
  EXPECT_FLOAT_EQ(q.acts.at("input").scale, 0.01f);
  ASSERT_EQ(q.layers.size(), 1u);
  // a folded zero point that does not fit its type
  const Bytes big = const_node("z32", typed("", {}, INT32, std::vector<int32_t>{300})) + n("Cast", {"z32"}, {"xz"}, attr_int("to", UINT8));
  expect_torch_refused(torch_style(big, UINT8), "xz_node", "does not fit the Cast's type");
  // ConstantOfShape claiming 2^20 values
  const Bytes huge = const_node("shape", typed("", {1}, Type(7), std::vector<int64_t>{int64_t(1) << 20})) +
                     n("ConstantOfShape", {"shape"}, {"xz"}, str(5, str(1, "value") + typed("", {1}, UINT8, std::vector<uint8_t>{0}) + num(20, 4)));
  expect_torch_refused(torch_style(huge, UINT8), "xz_node", "more than 65536 values");
  // the Cast after QuantizeLinear to another type than the quantized value's
  expect_torch_refused(torch_style(zp_cast, FLOAT), "xc_node", "a Cast of a quantized value to another type");
}

}  // namespace
