// Shared by the library-level training tests (checkpoints, data-parallel): a learnable toy data
// set of 12x12 images and a small CNN for it.
#pragma once
#include <cstdint>

#include "ember/ember.h"

namespace toy {

// Class c lights a 4x4 block at its own place on a 12x12 image; the rest is faint noise.
inline ember::Dataset dataset(int n, uint32_t seed) {
  ember::Dataset d;
  d.count = n, d.rows = 12, d.cols = 12;
  uint32_t x = seed * 747796405u + 1;
  auto rnd = [&] { return (x = x * 1664525u + 1013904223u) >> 24; };
  for (int i = 0; i < n; ++i) {
    const int c = int(rnd() % 10);
    d.labels.push_back(uint8_t(c));
    for (int r = 0; r < 12; ++r)
      for (int q = 0; q < 12; ++q) {
        const bool on = r >= (c / 4) * 4 && r < (c / 4) * 4 + 4 && q >= (c % 4) * 3 && q < (c % 4) * 3 + 4;
        d.images.push_back(uint8_t(on ? 180 + rnd() % 70 : rnd() % 50));
      }
  }
  return d;
}

// conv 3x3 (4) -> ReLU -> max-pool -> Linear 16 -> ReLU -> Linear 10, on [1, 12, 12].
inline ember::Model small_cnn() {
  ember::Model m;
  m.name = "toy-cnn";
  m.in_h = m.in_w = 12;
  m.conv2d(4, 3, 1, 1).relu().maxpool2d(2).flatten().linear(16).relu().linear(10);
  return m;
}

}  // namespace toy
