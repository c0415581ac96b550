// Internal helpers of the binarized layers shared by the oracle, the fast path and training:
// weight states, the segment grid and the head refit's column counts (over engine.h, the fast path).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "bitnet/engine.h"

namespace ember::bitnet {

// Weight states: binary 0/1 (the bit); ternary 0 (mask 0), 1 (mask 1, sign 0), 2 (mask 1, sign 1).
int conv_state(const Layer& L, int o, int i);
void set_conv_state(Layer& L, int o, int i, int state);
int head_state(const Layer& L, int c, int sg, int j);
void set_head_state(Layer& L, int c, int sg, int j, int state);

// What weight state `st` adds to a bma for input bit x.
inline int contrib(WeightKind k, int st, int x) {
  if (k == WeightKind::binary) return st ^ x;
  return st == 0 ? 1 : st == 1 ? 2 * x : 2 * (1 - x);
}

// contrib(k, st, z) = a + b*z.
struct AB {
  int64_t a, b;
};
inline AB state_ab(WeightKind k, int st) {
  if (k == WeightKind::binary) return st == 0 ? AB{0, 1} : AB{1, -1};
  return st == 0 ? AB{1, 0} : st == 1 ? AB{0, 2} : AB{2, -2};
}

// One example's multiclass hinge loss sum_{c != label} max(0, margin + a[c] - a[label]), a[C].
inline int64_t example_hinge(const int64_t* a, int C, int label, int64_t margin) {
  int64_t t = 0;
  for (int c = 0; c < C; ++c)
    if (c != label) t += std::max<int64_t>(0, margin + a[c] - a[label]);
  return t;
}

// Row popcounts of one class block of PooledColumns, [F, W] words, into cnt[F] (head_fit.cpp).
void column_counts(const uint64_t* blk, int F, int W, int64_t* cnt);

// seg_of[P] (segment of each output pixel, row-major over (H-2) x (W-2)), size[S*S] (pixels).
struct SegmentGrid {
  std::vector<int> seg_of;
  std::vector<int> size;
};
SegmentGrid segment_grid(const LayerShape& s);

}  // namespace ember::bitnet
