// The three ConvNeXt models against PyTorch (bench/convnext_torch.py, /usr/bin/python3 with
// python3-torch and python3-torchvision): ember's weights load into the PyTorch modules with
// load_state_dict(strict=True) and give the same outputs on a batch (1e-5 of the largest), and
// PyTorch's own weights load into ember and give PyTorch's outputs, in nchw and in channel-last
// (nhwc) plans alike, and within 3e-2 with bf16 products. Skips when PyTorch is absent.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "ember/cpu.h"
#include "ember/ember.h"
#include "gradcheck.h"

namespace fs = std::filesystem;

namespace ember::test {
namespace {

void write_floats(const fs::path& p, const float* v, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v), std::streamsize(n * sizeof(float)));
}
std::vector<float> read_floats(const fs::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  std::vector<float> v(size_t(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}
double rel_diff(const float* got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return diff / scale;
}

class ConvNextTorch : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};  // model, layout

TEST_P(ConvNextTorch, WeightsRoundTripWithPyTorchAndOutputsAgree) {
  if (std::system("/usr/bin/python3 -c 'import torch, torchvision, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "PyTorch and torchvision (python3-torch, python3-torchvision) are not installed";
  const std::string name = std::get<0>(GetParam()), layout = std::get<1>(GetParam());
  const fs::path dir = fs::temp_directory_path() / ("ember-cnx-" + name + "-" + layout + "-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  PlanOptions o;
  o.batch = 2;
  o.training = false;
  o.layout = layout;
  const Model model = builtin_model(name);
  Plan plan(model, o);
  plan.init_params(3);
  {  // move LayerNorm/layer-scale parameters off their constant starts
    float* w = static_cast<float*>(plan.param_data());
    auto r = randn(plan.param_count(), 4, 0.05);
    for (size_t i = 0; i < plan.param_count(); ++i) w[i] += float(r[i]);
  }
  const size_t D = size_t(model.in_c) * model.in_h * model.in_w;
  auto x = randn(2 * D, 5);
  float* in = static_cast<float*>(plan.input());
  for (size_t i = 0; i < x.size(); ++i) in[i] = float(x[i]);
  write_floats(dir / "x.bin", in, x.size());
  plan.forward(2);
  const size_t K = size_t(model.num_classes);
  write_floats(dir / "ember_out.bin", static_cast<const float*>(plan.output()), 2 * K);
  save_weights(plan, (dir / "ember.safetensors").string());
  const std::string cmd = "/usr/bin/python3 " + std::string(EMBER_SOURCE_DIR) + "/bench/convnext_torch.py roundtrip " +
                          name + " " + (dir / "ember.safetensors").string() + " " + (dir / "x.bin").string() + " " +
                          (dir / "ember_out.bin").string() + " " + (dir / "torch.safetensors").string() + " " +
                          (dir / "torch_out.bin").string() + " --shape 2," + std::to_string(model.in_c) + "," +
                          std::to_string(model.in_h) + "," + std::to_string(model.in_w) + " > " +
                          (dir / "py.txt").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream log(dir / "py.txt");
  const std::string py((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << py;
  std::printf("%s", py.c_str());
  ASSERT_TRUE(fs::exists(dir / "torch.safetensors")) << py;
  load_weights(plan, (dir / "torch.safetensors").string());
  for (size_t i = 0; i < x.size(); ++i) in[i] = float(x[i]);
  plan.forward(2);
  const double rel = rel_diff(static_cast<const float*>(plan.output()), read_floats(dir / "torch_out.bin"));
  std::printf("%s %s: PyTorch weights in ember: max |difference| / max |output| = %.3g\n", name.c_str(), layout.c_str(), rel);
  EXPECT_LE(rel, 1e-5);
  // bf16 products on the same weights (the best kernel set: amx tiles where the CPU has them):
  // within 3 % of the largest of PyTorch's fp32 outputs (measured 0.48-1.18 % on the amx, avx512,
  // avx2 and scalar sets), and not the fp32 bits.
  PlanOptions ob = o;
  ob.precision = Precision::bf16;
  Plan bf(model, ob);
  load_weights(bf, (dir / "torch.safetensors").string());
  float* bin = static_cast<float*>(bf.input());
  for (size_t i = 0; i < x.size(); ++i) bin[i] = float(x[i]);
  bf.forward(2);
  const double rel16 = rel_diff(static_cast<const float*>(bf.output()), read_floats(dir / "torch_out.bin"));
  const char* env = std::getenv("EMBER_ISA");
  std::printf("%s %s: bf16 (%s): max |difference| / max |output| = %.3g\n", name.c_str(), layout.c_str(),
              resolve_kernel_set(env ? env : "", "EMBER_ISA").bf16_path, rel16);
  EXPECT_LE(rel16, 3e-2);
  EXPECT_GT(rel16, 1e-6);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, ConvNextTorch,
                         ::testing::Combine(::testing::Values("convnext-fashion", "convnext-seed", "convnext-atto"),
                                            ::testing::Values("nchw", "nhwc")),
                         [](const auto& info) {
                           std::string s = std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                           for (char& c : s) c = c == '-' ? '_' : c;
                           return s;
                         });

}  // namespace
}  // namespace ember::test
