// The calibration inputs of post-training quantization (ember/quant.h).
#include <algorithm>
#include <numeric>
#include <random>

#include "ember/error.h"
#include "ember/quant.h"
#include "nn/input_u8.h"

namespace ember {

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
