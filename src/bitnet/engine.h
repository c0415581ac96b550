// The binarized layers' fast path, private to the library (ember/bitnet.h is the public model):
// DeltaEngine (exact loss deltas of one example in compact form, on a bit-kernel table and the
// thread pool) and the exact head refit on frozen features that train() and the benchmarks run.
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "ember/bitnet.h"
#include "kernels/bit_kernels.h"

namespace ember::bitnet {

// Exact deltas of one example in compact form. Only a channel with a "live" segment (one whose
// pooled bit a single weight change can flip) has nonzero conv deltas; for it, flips[j][a] is a
// bit row over the channel's weights (bit i: changing weight i to slot a flips live segment j),
// and table[F] is the loss delta for the set F of flipped live segments (m <= 10), or, for more
// live segments, dact[j][c] (the change of act_c when live segment j flips) and the deltas are
// recomputed from err[c] = act_c - target_c when expanded: the squared error, or, after
// hinge_conv_tables (hinge_margin > 0), the hinge loss of `label`.
struct LiveChannel {
  int o = 0, m = 0;
  int seg[kMaxSegments] = {};
  int64_t table_off = 0;   // into ExampleDeltas::tables: 2^m entries (m <= 10) or m*C (m > 10)
  int64_t flips_off = 0;   // into ExampleDeltas::flips: [m, alts, K] words
};
struct ExampleDeltas {
  int64_t loss = 0;
  std::vector<int64_t> err;        // [C]
  std::vector<LiveChannel> live;   // ascending o
  std::vector<int64_t> tables;
  std::vector<uint64_t> flips;
  std::vector<int64_t> head;       // [C, S*S, O, alts], dense, unthresholded
  int64_t hinge_margin = 0;        // 0: tables are squared-error deltas; > 0: hinge (hinge_conv_tables)
  int label = 0;
};
// conv_sum[O, N, alts] += the example's thresholded conv deltas; head_sum likewise.
void accumulate(const LayerShape& s, const ExampleDeltas& d, int64_t threshold, int64_t* conv_sum,
                int64_t* head_sum);
DenseDeltas to_dense(const LayerShape& s, const ExampleDeltas& d, int64_t threshold = 0);

// The fast path. An engine owns the scratch for one layer shape (allocated once) and the kernel
// table it was made with; compute() allocates nothing once the output has grown to its size.
class DeltaEngine {
 public:
  DeltaEngine(const LayerShape& s, const BitKernels& k);
  ~DeltaEngine();
  DeltaEngine(const DeltaEngine&) = delete;
  DeltaEngine& operator=(const DeltaEngine&) = delete;
  // Deltas of one example; with a pool, channels are split over its threads.
  void compute(const Layer& layer, const BitImage& img, int label, ExampleDeltas* out, ThreadPool* pool = nullptr);
  // Forward only: the pooled bits [S*S, head_words] and act[C]; returns the predicted class.
  int predict(const Layer& layer, const BitImage& img, std::vector<int64_t>* act = nullptr);
  // The conv output image [H-2, W-2] of O-bit pixels (the next layer's input).
  void apply(const Layer& layer, const BitImage& img, BitImage* out);
  // The pooled bits [S*S, head_words] of the last compute(), predict() or apply().
  const uint64_t* pooled() const;
  struct Scratch;

 private:
  LayerShape s_;
  const BitKernels& k_;
  Scratch* sc_;
};

// Head refit on frozen features. The pooled bits of n examples as columns, grouped by class: class
// c's block holds, for every head input f (f = segment * O + channel), one row of words[c] words
// whose bit i is the pooled bit f of the class's i-th example (in input order). words[c] is
// ceil(count[c] / 64) rounded up to a multiple of 8 (the bit kernels' K); bits past count[c] are 0.
struct PooledColumns {
  int64_t n = 0;
  int F = 0, C = 0;
  std::vector<int64_t> count;  // [C] examples of each class
  std::vector<int> words;      // [C]
  std::vector<size_t> offset;  // [C] where class c's block [F, words[c]] starts in bits
  std::vector<uint64_t> bits;
  const uint64_t* block(int c) const { return bits.data() + offset[c]; }
};
// Columns from n rows of pooled bits, rows [n, S*S, head_words] as DeltaEngine::pooled() gives
// them, and their labels[n] (each < s.C, else an Error naming the example).
PooledColumns pooled_columns(const LayerShape& s, const uint64_t* rows, const uint8_t* labels, int64_t n);
struct HeadFitReport {
  int64_t loss_before = 0, loss_after = 0;  // the loss summed over the examples
  int64_t changes = 0;                      // head weights changed
  int64_t rounds = 0;                       // rounds of refit_head_hinge
  int64_t compactions = 0;                  // candidate lists made by refit_head_hinge (its active sets)
};
// Exact coordinate descent on the head: for each class (classes are independent; in parallel on
// the pool), repeatedly apply the one head-weight change that lowers the loss summed over the
// examples the most, until none lowers it or `max_changes` per class (0: no cap). The conv is
// untouched. Deltas come in closed form from the columns' co-occurrence counts (computed once with
// the bit-conv kernel, F*F 32-bit counts), so each change costs O(F).
HeadFitReport refit_head(Layer& layer, const PooledColumns& z, const BitKernels& k, ThreadPool* pool,
                         int64_t max_changes = 0);
// For accuracy rather than the model's loss: descent on the multiclass hinge loss
// sum_e sum_{c != y_e} max(0, margin + act_c - act_{y_e}) over the examples. Each round computes
// every head change's exact delta, then class by class applies the class's best few and keeps
// them if the loss falls (doubling how many next time), else undoes them (halving); a round that
// keeps nothing is followed by the single best change overall, whose delta is exact. Stops when no
// change lowers the loss or after max_rounds. loss_before/after in the report are hinge losses.
// Rounds count only over the examples a change can affect (within `slack` of it when the list was
// made, remade when another becomes affected; slack < 0: max(2, margin / 8) per unit of change).
HeadFitReport refit_head_hinge(Layer& layer, const PooledColumns& z, const BitKernels& k, ThreadPool* pool,
                               int64_t margin, int64_t max_rounds, int64_t slack = -1);
// Turns one example's conv deltas (from DeltaEngine::compute, whose pooled() must still hold the
// example's pooled bits) into exact deltas of that example's hinge loss
// sum_{c != label} max(0, margin + act_c - act_label): each live channel's table is rewritten (a
// channel with more than 10 live segments keeps its act changes and its deltas are recomputed
// with the hinge loss when expanded). Head deltas are untouched. Returns the example's hinge loss.
int64_t hinge_conv_tables(const Layer& layer, const uint64_t* pooled, int label, int64_t margin, ExampleDeltas* d);
// The hinge loss above from act [C, n] (class-major).
int64_t hinge_loss(const std::vector<int32_t>& act, const uint8_t* labels, int64_t n, int C, int64_t margin);

}  // namespace ember::bitnet
