// A program outside ember's tree: builds a small residual graph model with the C++ builder, trains
// it for a few steps on a learnable random problem through the Plan API, saves its weights and
// exports it as ONNX, then imports that file back and checks it predicts the same; names the kernel
// set it ran on (ember/cpu.h).
//   consumer OUT.safetensors   (prints the loss before and after; exits 1 if it did not fall)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <random>

#include "ember/cpu.h"
#include "ember/ember.h"
#include "ember/onnx.h"

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer OUT.safetensors\n");
    return 2;
  }
  // input [1, 8, 8] -> conv 3x3 (8) -> ReLU -> conv 3x3 (8) + skip -> flatten -> linear (2)
  ember::Model model;
  model.name = "consumer-residual";
  model.in_c = 1, model.in_h = model.in_w = 8, model.num_classes = 2;
  model.conv2d(8, 3, 1, 1).relu().named("a").conv2d(8, 3, 1, 1).named("b").add({"a", "b"}).flatten().linear(2);
  ember::PlanOptions options;
  options.batch = 32;
  options.threads = 2;
  options.optimizer.kind = ember::OptimizerKind::Adam;
  ember::Plan plan(model, options);
  plan.init_params(1);
  // Class 1: a bright left half; class 0: a bright right half (plus noise).
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> noise(0.f, 0.3f);
  auto batch = [&] {
    float* x = static_cast<float*>(plan.input());
    for (int n = 0; n < 32; ++n) {
      const int label = int(rng() % 2);
      plan.labels()[n] = label;
      for (int i = 0; i < 64; ++i) x[n * 64 + i] = noise(rng) + (((i % 8) < 4) == (label == 1) ? 0.7f : 0.f);
    }
  };
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    batch();
    plan.forward(32);
    const double loss = plan.loss(32, true);
    plan.backward_step(32, 1e-2);
    if (step == 0) first = loss;
    last = loss;
  }
  ember::save_weights(plan, argv[1]);
  // ONNX out and back in: the imported model with the file's weights gives the same logits.
  const std::string onnx = std::string(argv[1]) + ".onnx";
  ember::export_onnx(plan, onnx);
  const ember::OnnxImport imported = ember::import_onnx(onnx);
  ember::PlanOptions one;
  one.batch = 32, one.training = false;
  ember::Plan back(imported.model, one);
  ember::load_onnx_weights(back, imported);
  std::copy_n(static_cast<const float*>(plan.input()), 32 * 64, static_cast<float*>(back.input()));
  plan.forward(32);
  back.forward(32);
  const float* a = static_cast<const float*>(plan.output());
  const float* b = static_cast<const float*>(back.output());
  for (int i = 0; i < 32 * 2; ++i)
    if (std::fabs(a[i] - b[i]) > 1e-5f * (1 + std::fabs(a[i]))) {
      std::fprintf(stderr, "consumer: the ONNX round trip changed output %d: %g -> %g\n", i, a[i], b[i]);
      return 1;
    }
  std::printf("consumer: loss %.4f -> %.4f, weights in %s, ONNX round trip in %s, kernel set %s\n", first, last,
              argv[1], onnx.c_str(), ember::best_kernel_set().name);
  return last < first * 0.5 ? 0 : 1;
} catch (const ember::Error& e) {
  std::fprintf(stderr, "consumer: error: %s\n", e.what());
  return 2;
}
