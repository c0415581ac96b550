// Evaluation of an int8 plan on a data set, and the calibration inputs of post-training
// quantization (ember/quant.h).
#include <algorithm>
#include <numeric>
#include <random>

#include "ember/error.h"
#include "ember/quant.h"
#include "nn/input_u8.h"

namespace ember {

EvalResult evaluate(Int8Plan& plan, const Dataset& data, const Augment* augment) {
  const int B = plan.batch();
  std::vector<int64_t> index(size_t(data.count));
  std::iota(index.begin(), index.end(), int64_t(0));
  std::vector<int64_t> ident(static_cast<size_t>(B));
  std::iota(ident.begin(), ident.end(), int64_t(0));
  std::unique_ptr<BatchLoader> loader;
  const Augment none;
  if (augment || data.streamed()) {
    loader = std::make_unique<BatchLoader>(data, augment ? *augment : none, B, data.streamed() ? 2 : 1, 3, 0);
    loader->start(index.data(), data.count, 0, 0, false);
  }
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < data.count; start += B) {
    const int n = int(std::min<int64_t>(B, data.count - start));
    if (loader) {
      const BatchLoader::Batch b = loader->next();
      plan.gather_u8(b.images, b.labels, ident.data(), n);
    } else {
      plan.gather_u8(data.images.data(), data.labels.data(), index.data() + start, n);
    }
    plan.forward(n);
    loss_sum += plan.loss(n) * n;
    correct += plan.correct(n);
  }
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
