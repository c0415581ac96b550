// Binarized and ternary convolutional layers trained without backpropagation by exact loss
// deltas (the model of is8ac/bnn): a 3x3 valid bit convolution, segmented majority pooling, a
// bit fully-connected head and a squared-error loss; for every weight and every value it could
// take, the exact change in loss. The model, a brute-force oracle, training and benchmarks.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ember/data.h"

namespace ember::bitnet {

enum class WeightKind { binary, ternary };
const char* kind_name(WeightKind k);

// One layer. Input image [H, W] of B-bit pixels; 3x3 valid convolution to O channels over
// P = (H-2) x Q = (W-2) positions; the output cut into S x S segments (segment rows
// [i*(H-2)/S, (i+1)*(H-2)/S), columns likewise); a head of C classes over the S*S*O pooled bits.
// A patch has N = 9*B bits, bit (dy*3 + dx)*B + b = bit b of pixel (y+dy, x+dx).
//   binary:  bma(w, x) = popcount(w ^ x),                              MAX = N,  fires if > N/2
//   ternary: bma = #(mask zero) + 2*popcount((sign ^ x) & mask),      MAX = 2N, fires if > N
// Pooled bit (s, o) = more than half of segment s's pixels fire on channel o.
// act_c = sum_s bma(head[c][s], pooled bits of s);  loss = sum_c (act_c - target_c)^2 with
// target = S*S*O (binary) or 2*S*S*O (ternary) for the true class, 0 for the others.
// Segments per side: is8ac/bnn's model has S = 1..4; ember allows up to kMaxS (finer pooling).
constexpr int kMaxS = 8;
constexpr int kMaxSegments = kMaxS * kMaxS;  // live-segment sets fit one uint64_t

struct LayerShape {
  int H = 32, W = 32, B = 1024, O = 1024, S = 2, C = 10;
  WeightKind kind = WeightKind::binary;

  int P() const { return (H - 2) * (W - 2); }
  int N() const { return 9 * B; }
  int pixel_words() const { return (B + 63) / 64; }
  int K() const { return ((N() + 63) / 64 + 7) / 8 * 8; }  // words per patch / conv weight row
  int segments() const { return S * S; }
  int head_words() const { return (O + 63) / 64; }
  int alts() const { return kind == WeightKind::binary ? 1 : 2; }
  int32_t conv_threshold() const { return kind == WeightKind::binary ? N() / 2 : N(); }
  int64_t head_target() const { return int64_t(segments()) * O * (kind == WeightKind::binary ? 1 : 2); }
  int64_t conv_weights() const { return int64_t(O) * N(); }
  int64_t head_weights() const { return int64_t(C) * segments() * O; }
};
// Throws ember::Error naming the field (and `what`, e.g. a flag) when a size is out of range:
// H, W in [3, 256], B in [1, 4096], O in [1, 4096], S in [1, kMaxS] and S <= H-2, W-2, C in [2, 64].
void validate(const LayerShape& s, const std::string& what = "layer");

// Weights. Conv rows [O, K] words (bit i of row o = weight (o, i); bits >= N are zero); head rows
// [C, S*S, head_words] (bit j = the weight on channel j's pooled bit). Binary layers use sign only.
// A ternary weight has three states: 0 (mask 0, sign 0), 1 (mask 1, sign 0), 2 (mask 1, sign 1);
// state 1 adds 2 where the input bit is 1, state 2 where it is 0, state 0 adds 1 always.
struct Layer {
  LayerShape shape;
  std::vector<uint64_t> conv_sign, conv_mask;  // [O, K]
  std::vector<uint64_t> head_sign, head_mask;  // [C, S*S, head_words]
};
Layer random_layer(const LayerShape& s, uint64_t seed);
// One layer of the parts' channels side by side (same H, W, B, S, C and kind): channel j of part p
// becomes channel (the earlier parts' O) + j, with its conv row and head weights. Every act_c of
// the joined layer is the sum of the parts' act_c, so it classifies as their committee.
Layer join_layers(const std::vector<Layer>& parts);

// A B-bit image: bits [H, W, pixel_words] (bit b of pixel (y, x) at word (y*W + x)*pw + b/64).
struct BitImage {
  int H = 0, W = 0, B = 0;
  std::vector<uint64_t> bits;
};
BitImage random_image(int H, int W, int B, uint64_t seed, double density = 0.5);

// Loss deltas, dense: conv [O, N, alts], head [C, S*S, O, alts]. Slot a of a weight is its value
// flipped (binary) or its state changed to (state + 1 + a) % 3 (ternary); the value is
// loss(new) - loss(now), set to 0 where |value| <= threshold.
struct DenseDeltas {
  int64_t loss = 0;
  std::vector<int64_t> conv, head;
};

// The brute-force oracle: for every weight and value, set it, recompute the whole forward pass
// and loss bit by bit, restore. Cost O(weights * forward); for small layers only.
DenseDeltas oracle_deltas(const Layer& layer, const BitImage& img, int label, int64_t threshold = 0);
// The forward pass bit by bit (also the oracle's): activations act[C] and the loss.
int64_t reference_loss(const Layer& layer, const BitImage& img, int label, std::vector<int64_t>* act = nullptr);

// The fast path (DeltaEngine: exact deltas of one example, in compact form, on the bit-kernel table
// and the thread pool) and the head refit on frozen features are in src/bitnet/engine.h, private to
// the library: train() and the benchmarks below run them.

// Images as bits: pixel v (0..255) of a grey image becomes a B-bit thermometer code, bit b set
// iff v > (b + 0.5) * 256 / B.
BitImage encode_thermometer(const uint8_t* pixels, int H, int W, int B);
// Each pixel's mean over its (2r+1)x(2r+1) window (the part inside the image), rounded down. Its
// thermometer code is set around the strokes too, so majority votes can measure stroke proximity.
std::vector<uint8_t> box_blur(const uint8_t* pixels, int H, int W, int r);
// Moment deskewing (classic MNIST preprocessing): the image is sheared so that its principal
// axis is vertical (shear alpha = cov(x, y) / var(y) over the intensity) and moved so that its
// centre of mass lies at the centre, sampled bilinearly. A blank image is returned unchanged.
std::vector<uint8_t> deskew(const uint8_t* pixels, int H, int W);
// The image mirrored left to right (a training-set augmentation for Fashion-MNIST).
std::vector<uint8_t> mirror(const uint8_t* pixels, int H, int W);
// The image moved by (dy, dx) pixels, zeros shifted in: out(y, x) = in(y - dy, x - dx).
std::vector<uint8_t> shift(const uint8_t* pixels, int H, int W, int dy, int dx);
// 2x2 pooling of a bit image between layers: output pixel (y, x) combines input pixels
// (2y..2y+1, 2x..2x+1) bit by bit: `any` sets a bit set in any of the four, `majority` one set in
// at least two of them. The output is floor(H/2) x floor(W/2) (an odd last row or column is dropped).
enum class LayerPool { none, any, majority };
const char* pool_name(LayerPool p);
BitImage pool2x2(const BitImage& im, LayerPool p);
// The pixels of a and b side by side (a's bits, then b's); the sizes must match.
BitImage concat_pixels(const BitImage& a, const BitImage& b);
// Space to depth: output pixel (y, x) of the floor(H/2) x floor(W/2) image holds input pixels
// (2y, 2x), (2y, 2x+1), (2y+1, 2x), (2y+1, 2x+1), their B bits one after the other (4B bits), so a
// 3x3 window sees 6x6 input pixels.
BitImage space_to_depth(const BitImage& im);
// The image with `bits` more bits per pixel appended: a fixed pseudo-random code of the pixel's
// position (the same for every image, from `seed`). Constant backgrounds (MNIST's zeros) then no
// longer give every pixel of a segment the same count, so majority votes can depend on the strokes.
BitImage append_position_bits(const BitImage& im, int bits, uint64_t seed);

// Greedy layer-wise training (train conv + head, drop the head, apply the conv, repeat).
struct TrainOptions {
  int layers = 1;
  std::vector<int> channels = {64};   // per layer (the last value repeats)
  int input_bits = 16;                // thermometer bits per pixel of layer 1
  int position_bits = 16;             // fixed random position code appended to every layer's input
  std::vector<int> blur_radii;        // layer 1 also gets the thermometer code of each box blur
  bool deskew = false;                // deskew() every image (train and test) before encoding it
  bool mirror = false;                // the training set also holds every image mirrored (deskew() first)
  int shift_copies = 0;               // ... and this many copies of it moved by one pixel (0..4 directions)
  bool space_to_depth = false;        // layer 1's input: space_to_depth() of the codes, before the position bits
  LayerPool layer_pool = LayerPool::none;  // pool2x2 of a layer's output before the next layer
  int segments = 2;
  WeightKind kind = WeightKind::binary;
  int epochs = 4;                     // per layer
  int batch = 32;                     // first epoch's mini-batch; doubles every epoch
  int steps = 200;                    // updates per epoch
  int updates = 16;                   // cap of non-colliding weight changes per step
  // 0: the head follows the same rule as the conv (one change per class, no shared input bit,
  // at most `updates`). N > 0: the head takes its N best changes per step, several per class.
  int head_updates = 0;
  bool freeze_head = false;           // conv steps leave the head alone (it changes only in refits)
  // Head refit on the pooled bits of the training images (the first `refit_examples` of them, 0:
  // all, except after a layer's last epoch: all): none; end (after each layer's last epoch); epoch
  // (before the first and after every epoch).
  enum class Refit { none, end, epoch } head_refit = Refit::none;
  int64_t refit_examples = 0;
  // The refit's loss: the model's squared error (refit_head) or the multiclass hinge loss with
  // this margin (refit_head_hinge, at most refit_rounds rounds); margin 0: squared error. Per layer
  // (the last value repeats), like the conv margin below.
  std::vector<int64_t> refit_margin = {0};
  int64_t refit_rounds = 400;
  // 0: conv steps follow the model's squared-error deltas; M > 0: the deltas of the multiclass
  // hinge loss with margin M (hinge_conv_tables), usually with freeze_head and epoch refits.
  std::vector<int64_t> conv_margin = {0};
  // Each layer trained as `blocks` independent blocks of channels[l] channels (fresh random
  // weights, their own heads and refits, one after the other), then joined (join_layers): one
  // layer of blocks * channels[l] channels whose head is the blocks' heads side by side, so it
  // classifies as their committee. join_refit_margin > 0 refits that joined head (hinge, on all
  // training images) instead of keeping the committee's.
  int blocks = 1;
  int64_t join_refit_margin = 0;
  int64_t threshold = 0;
  int64_t limit_train = 0, limit_test = 0;  // 0: all
  int threads = 1;
  std::string isa;                    // empty: the best the CPU has
  uint64_t seed = 1;
};
struct EpochReport {
  int layer = 0, epoch = 0, batch = 0, steps = 0, changes = 0;
  // With --blocks: block = 1.. for a block's epochs; after the second and every later block, one
  // report of the committee of the blocks so far (block = 0, joined = how many, epoch = epochs, no
  // steps), the last being the layer. Without --blocks: block = 0, joined = 1.
  int block = 0, joined = 1;
  double train_loss = 0;              // mean loss over the epoch's mini-batches
  int64_t refit_changes = -1;         // head weights the epoch's closing refit changed (-1: none ran)
  double refit_loss = 0;              // mean loss per example over the refit's examples after it
  int64_t refit_rounds = 0;           // rounds of the hinge refit
  double refit_seconds = 0;           // the refit's time (pooled features and descent), in `seconds`
  double test_accuracy = 0;           // fraction
  double seconds = 0;
};
// Throws ember::Error on bad options (naming the field) or shapes.
std::vector<Layer> train(const TrainOptions& o, const TrainTest& data,
                         const std::function<void(const EpochReport&)>& on_epoch);

// The benchmark: ms per example of the deltas of one random example and layer.
struct BenchConfig {
  int input_bits = 1024, channels = 1024, segments = 2, threads = 1;
  WeightKind kind = WeightKind::binary;
  bool over_examples = false;   // threads each take whole examples instead of splitting channels
  double min_seconds = 0.3;     // time at least this long (and at least 2 examples)
  std::string isa;
};
struct BenchRow {
  BenchConfig cfg;
  double ms_per_example = 0, ns_per_weight = 0;
  double live_channels = 0;     // mean fraction of channels with a live segment
  int examples = 0;
};
BenchRow bench_deltas(const BenchConfig& c);
// The brute-force oracle on a small layer, ms per example (for contrast).
double bench_oracle_ms(const LayerShape& s);
// The conv kernel alone on [P, K] x [O, K]: bit multiply-accumulates per second on one thread.
double bench_conv_bitmacs(int input_bits, int channels, const std::string& isa, double min_seconds = 0.3);
// The kernel table name chosen for `isa` (empty: best), e.g. "avx512-vpopcntdq".
std::string kernel_name(const std::string& isa);

}  // namespace ember::bitnet
