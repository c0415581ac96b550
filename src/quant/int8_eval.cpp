// Evaluation of an int8 plan on a data set, and the calibration inputs of post-training
// quantization (ember/quant.h).
#include <algorithm>
#include <numeric>
#include <random>

#include "ember/error.h"
#include "ember/quant.h"
#include "nn/input_u8.h"
#include "train/eval_batches.h"

namespace ember {

EvalResult evaluate(Int8Plan& plan, const Dataset& data, const Augment* augment) {
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  eval_batches(
      data, augment, plan.batch(), 0, data.count,
      [&](const uint8_t* images, const uint8_t* labels, const int64_t* idx, int n) { plan.gather_u8(images, labels, idx, n); },
      [&](const int64_t*, int n) {
        plan.forward(n);
        loss_sum += plan.loss(n) * n;
        correct += plan.correct(n);
      });
  r.count = data.count;
  r.loss = data.count ? loss_sum / double(data.count) : 0;
  r.accuracy = data.count ? double(correct) / double(data.count) : 0;
  return r;
}

std::vector<float> calibration_inputs(const Dataset& data, int n, uint64_t seed, const std::vector<double>& scale,
                                      const std::vector<double>& shift) {
  if (n < 1 || n > data.count)
    throw Error("calib_samples: " + std::to_string(n) + " calibration samples, the data set has " + std::to_string(data.count));
  std::vector<int64_t> order(size_t(data.count));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const size_t D = data.image_elems(), plane = size_t(data.rows) * data.cols;
  std::vector<float> x(size_t(n) * D);
  std::vector<uint8_t> scratch(D);
  for (int i = 0; i < n; ++i) {
    nn::u8_to_input(x.data() + size_t(i) * D, data.image(order[size_t(i)], scratch.data()), D, plane, scale, shift);
  }
  return x;
}

}  // namespace ember
