// Greedy layer-wise training of binarized layers by exact loss deltas: per step, the mini-batch's
// deltas (squared error, or a hinge loss) are summed over threads and the best non-colliding weight
// changes (one per output channel and input index, a cap per step) are applied; the head can be
// refitted on frozen features around the epochs. The mini-batch doubles every epoch. After a
// layer's epochs its head is dropped and its convolution turns the images into the next input.
#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>

#include "bitnet/internal.h"
#include "core/thread_pool.h"
#include "ember/error.h"
#include "kernels/bit_kernels.h"

namespace ember::bitnet {

namespace {

using Clock = std::chrono::steady_clock;

void check_opt(const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    throw Error(std::string(field) + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                "], found " + std::to_string(v));
}

struct Candidate {
  int64_t sum;
  int out, in, alt;  // conv: channel, weight index; head: class, segment*O + channel
};

// Picks at most `cap` candidates with negative sums, best first, no two sharing `out` or `in`.
std::vector<Candidate> pick(const int64_t* sums, int outs, int ins, int A, int cap) {
  std::vector<Candidate> best;
  for (int o = 0; o < outs; ++o) {
    Candidate c{0, o, -1, 0};
    const int64_t* row = sums + size_t(o) * ins * A;
    for (int i = 0; i < ins * A; ++i)
      if (row[i] < c.sum) c = Candidate{row[i], o, i / A, i % A};
    if (c.in >= 0) best.push_back(c);
  }
  std::sort(best.begin(), best.end(), [](const Candidate& a, const Candidate& b) {
    return a.sum != b.sum ? a.sum < b.sum : a.out != b.out ? a.out < b.out : a.in < b.in;
  });
  std::vector<Candidate> chosen;
  std::vector<char> used_in(ins, 0);
  for (const Candidate& c : best) {
    if (int(chosen.size()) >= cap) break;
    if (used_in[c.in]) continue;
    used_in[c.in] = 1;
    chosen.push_back(c);
  }
  return chosen;
}

// Picks at most `cap` entries of sums[n] (n = weights * A) with negative values, best first, with
// no rule but one change per weight: the head's alternative to pick() (--head-updates).
std::vector<Candidate> pick_any(const int64_t* sums, int64_t n, int A, int cap) {
  std::vector<Candidate> all;
  for (int64_t i = 0; i < n; ++i)
    if (sums[i] < 0) all.push_back(Candidate{sums[i], int(i / A), 0, int(i % A)});
  const size_t k = std::min(all.size(), size_t(cap));
  std::partial_sort(all.begin(), all.begin() + k, all.end(), [](const Candidate& a, const Candidate& b) {
    return a.sum != b.sum ? a.sum < b.sum : a.out < b.out;
  });
  all.resize(k);
  return all;
}

struct Worker {
  std::unique_ptr<DeltaEngine> eng;
  ExampleDeltas d;
  std::vector<int64_t> conv_sum, head_sum;
  double loss = 0;
};

double accuracy(const Layer& L, const std::vector<BitImage>& imgs, const std::vector<uint8_t>& labels,
                std::vector<Worker>& ws, ThreadPool& pool) {
  std::vector<int64_t> right(ws.size(), 0);
  pool.run([&](int tid) {
    const Range r = split_range(int64_t(imgs.size()), tid, pool.size());
    for (int64_t i = r.begin; i < r.end; ++i) right[tid] += ws[tid].eng->predict(L, imgs[i]) == labels[i];
  });
  return double(std::accumulate(right.begin(), right.end(), int64_t(0))) / double(imgs.size());
}

}  // namespace

std::vector<Layer> train(const TrainOptions& o, const TrainTest& data,
                         const std::function<void(const EpochReport&)>& on_epoch) {
  check_opt("layers", o.layers, 1, 8);
  if (o.channels.empty()) throw Error("channels: expected at least one value");
  for (int c : o.channels) check_opt("channels", c, 1, 4096);
  check_opt("input_bits", o.input_bits, 1, 256);
  check_opt("position_bits", o.position_bits, 0, 256);
  if (o.blur_radii.size() > 8) throw Error("blur_radii: expected at most 8 radii");
  for (int r : o.blur_radii) check_opt("blur_radii", r, 1, 8);
  check_opt("segments", o.segments, 1, kMaxS);
  check_opt("epochs", o.epochs, 1, 1000);
  check_opt("batch", o.batch, 1, 1 << 20);
  check_opt("steps", o.steps, 1, 1 << 24);
  check_opt("updates", o.updates, 1, 1 << 20);
  check_opt("head_updates", o.head_updates, 0, 1 << 20);
  check_opt("refit_examples", o.refit_examples, 0, int64_t(1) << 40);
  if (o.refit_margin.empty()) throw Error("refit_margin: expected at least one value");
  if (o.conv_margin.empty()) throw Error("conv_margin: expected at least one value");
  for (int64_t m : o.refit_margin) check_opt("refit_margin", m, 0, int64_t(1) << 30);
  check_opt("refit_rounds", o.refit_rounds, 1, int64_t(1) << 30);
  for (int64_t m : o.conv_margin) check_opt("conv_margin", m, 0, int64_t(1) << 30);
  check_opt("shift_copies", o.shift_copies, 0, 4);
  check_opt("blocks", o.blocks, 1, 16);
  check_opt("join_refit_margin", o.join_refit_margin, 0, int64_t(1) << 30);
  check_opt("threshold", o.threshold, 0, int64_t(1) << 40);
  check_opt("threads", o.threads, 1, 256);
  check_opt("limit_train", o.limit_train, 0, int64_t(1) << 40);
  check_opt("limit_test", o.limit_test, 0, int64_t(1) << 40);
  const Isa isa = resolve_isa(o.isa, "isa");
  const BitKernels& kern = bit_kernels_for(isa);
  const Dataset& tr = data.train;
  const Dataset& te = data.test;
  if (tr.rows != te.rows || tr.cols != te.cols) throw Error("data: train and test images differ in size");
  int64_t ntr = o.limit_train ? std::min(o.limit_train, tr.count) : tr.count;
  const int64_t nte = o.limit_test ? std::min(o.limit_test, te.count) : te.count;

  // Layer 1's input: thermometer codes (of the deskewed image with --deskew). The training set
  // holds each image, then its mirror image (--mirror), then --shift-copies copies of it moved by
  // one pixel, the directions (down, right, up, left) taken in turn from image i's i % 4-th on.
  const int64_t first_shift = o.mirror ? 2 : 1, copies = first_shift + o.shift_copies, nsrc = ntr;
  ntr *= copies;
  std::vector<BitImage> xtr(ntr), xte(nte);
  const int64_t px = int64_t(tr.rows) * tr.cols;
  auto upright = [&](const uint8_t* raw) {
    return o.deskew ? deskew(raw, tr.rows, tr.cols) : std::vector<uint8_t>(raw, raw + px);
  };
  auto encode = [&](const std::vector<uint8_t>& img) {
    BitImage im = encode_thermometer(img.data(), tr.rows, tr.cols, o.input_bits);
    for (int r : o.blur_radii)
      im = concat_pixels(im, encode_thermometer(box_blur(img.data(), tr.rows, tr.cols, r).data(), tr.rows, tr.cols,
                                                o.input_bits));
    if (o.space_to_depth) im = space_to_depth(im);
    return append_position_bits(im, o.position_bits, o.seed);
  };
  std::vector<uint8_t> ytr(ntr), yte(te.labels.begin(), te.labels.begin() + nte);
  for (int64_t i = 0; i < nsrc; ++i) {
    static constexpr int kDy[4] = {1, 0, -1, 0}, kDx[4] = {0, 1, 0, -1};
    const std::vector<uint8_t> img = upright(tr.images.data() + i * px);
    BitImage* x = &xtr[i * copies];
    x[0] = encode(img);
    if (o.mirror) x[1] = encode(mirror(img.data(), tr.rows, tr.cols));
    for (int64_t c = first_shift; c < copies; ++c) {
      const int d = int((i + c - first_shift) % 4);
      x[c] = encode(shift(img.data(), tr.rows, tr.cols, kDy[d], kDx[d]));
    }
    std::fill_n(ytr.begin() + i * copies, copies, tr.labels[i]);
  }
  for (int64_t i = 0; i < nte; ++i) xte[i] = encode(upright(te.images.data() + i * px));

  ThreadPool pool(o.threads);
  std::mt19937_64 rng(o.seed);
  auto make_workers = [&](const LayerShape& s) {
    std::vector<Worker> ws(o.threads);
    for (auto& w : ws) {
      w.eng = std::make_unique<DeltaEngine>(s, kern);
      w.conv_sum.assign(size_t(s.conv_weights()) * s.alts(), 0);
      w.head_sum.assign(size_t(s.head_weights()) * s.alts(), 0);
    }
    return ws;
  };
  // Refits L's head on the pooled bits of the training images: the first refit_examples of them,
  // except when `all` (a layer's last refit).
  auto refit = [&](Layer& L, std::vector<Worker>& ws, int64_t margin, EpochReport* rep, bool all) {
    const LayerShape& s = L.shape;
    const auto r0 = Clock::now();
    const int64_t n = o.refit_examples && !all ? std::min(o.refit_examples, ntr) : ntr;
    const size_t row = size_t(s.segments()) * s.head_words();
    std::vector<uint64_t> rows(size_t(n) * row);
    pool.run([&](int tid) {
      const Range r = split_range(n, tid, pool.size());
      for (int64_t i = r.begin; i < r.end; ++i) {
        ws[tid].eng->predict(L, xtr[i]);
        std::copy(ws[tid].eng->pooled(), ws[tid].eng->pooled() + row, rows.begin() + i * row);
      }
    });
    const PooledColumns z = pooled_columns(s, rows.data(), ytr.data(), n);
    const HeadFitReport h = margin > 0 ? refit_head_hinge(L, z, kern, &pool, margin, o.refit_rounds)
                                       : refit_head(L, z, kern, &pool);
    if (rep) {
      rep->refit_changes = h.changes, rep->refit_loss = double(h.loss_after) / double(n), rep->refit_rounds = h.rounds;
      rep->refit_seconds = std::chrono::duration<double>(Clock::now() - r0).count();
    }
  };
  // Trains one layer (or one block of a layer's channels, `block` > 0) from random weights; ws
  // gets the workers it trained with (engines for shape s).
  auto train_layer = [&](const LayerShape& s, uint64_t seed, int l, int block, std::vector<Worker>& ws) {
    Layer L = random_layer(s, seed);
    const int64_t refit_margin = o.refit_margin[std::min<size_t>(l, o.refit_margin.size() - 1)];
    const int64_t conv_margin = o.conv_margin[std::min<size_t>(l, o.conv_margin.size() - 1)];
    ws = make_workers(s);
    const int A = s.alts(), states = A + 1;
    if (o.head_refit == TrainOptions::Refit::epoch) refit(L, ws, refit_margin, nullptr, false);
    std::vector<int64_t> order(ntr);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    int64_t cursor = 0;
    for (int e = 0; e < o.epochs; ++e) {
      const auto t0 = Clock::now();
      const int64_t batch = std::min<int64_t>(int64_t(o.batch) << std::min(e, 20), ntr);
      EpochReport rep;
      rep.layer = l + 1, rep.block = block, rep.epoch = e + 1, rep.batch = int(batch), rep.steps = o.steps;
      double loss_sum = 0;
      std::vector<int64_t> idx(batch);
      for (int step = 0; step < o.steps; ++step) {
        for (int64_t b = 0; b < batch; ++b) {
          if (cursor == ntr) std::shuffle(order.begin(), order.end(), rng), cursor = 0;
          idx[b] = order[cursor++];
        }
        pool.run([&](int tid) {
          Worker& w = ws[tid];
          std::fill(w.conv_sum.begin(), w.conv_sum.end(), 0);
          std::fill(w.head_sum.begin(), w.head_sum.end(), 0);
          w.loss = 0;
          const Range r = split_range(batch, tid, pool.size());
          for (int64_t b = r.begin; b < r.end; ++b) {
            w.eng->compute(L, xtr[idx[b]], ytr[idx[b]], &w.d, nullptr);
            if (conv_margin > 0) hinge_conv_tables(L, w.eng->pooled(), ytr[idx[b]], conv_margin, &w.d);
            accumulate(s, w.d, o.threshold, w.conv_sum.data(), w.head_sum.data());
            w.loss += double(w.d.loss);
          }
        });
        for (size_t t = 1; t < ws.size(); ++t) {
          for (size_t i = 0; i < ws[0].conv_sum.size(); ++i) ws[0].conv_sum[i] += ws[t].conv_sum[i];
          for (size_t i = 0; i < ws[0].head_sum.size(); ++i) ws[0].head_sum[i] += ws[t].head_sum[i];
        }
        for (const auto& w : ws) loss_sum += w.loss;
        for (const Candidate& c : pick(ws[0].conv_sum.data(), s.O, s.N(), A, o.updates)) {
          set_conv_state(L, c.out, c.in, (conv_state(L, c.out, c.in) + 1 + c.alt) % states);
          ++rep.changes;
        }
        const int HI = s.segments() * s.O;  // head inputs per class
        std::vector<Candidate> head_picks;
        if (o.freeze_head) {
          // the head changes only in refits
        } else if (o.head_updates == 0) {
          head_picks = pick(ws[0].head_sum.data(), s.C, HI, A, o.updates);
        } else {
          head_picks = pick_any(ws[0].head_sum.data(), int64_t(s.C) * HI * A, A, o.head_updates);
          for (Candidate& c : head_picks) c.in = c.out % HI, c.out /= HI;
        }
        for (const Candidate& c : head_picks) {
          const int sg = c.in / s.O, j = c.in % s.O;
          set_head_state(L, c.out, sg, j, (head_state(L, c.out, sg, j) + 1 + c.alt) % states);
          ++rep.changes;
        }
      }
      rep.train_loss = loss_sum / double(batch * o.steps);
      if (o.head_refit == TrainOptions::Refit::epoch ||
          (o.head_refit == TrainOptions::Refit::end && e + 1 == o.epochs))
        refit(L, ws, refit_margin, &rep, e + 1 == o.epochs);
      rep.test_accuracy = accuracy(L, xte, yte, ws, pool);
      rep.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (on_epoch) on_epoch(rep);
    }
    return L;
  };

  std::vector<Layer> layers;
  for (int l = 0; l < o.layers; ++l) {
    LayerShape s;
    s.H = xtr[0].H, s.W = xtr[0].W, s.B = xtr[0].B;
    s.O = o.channels[std::min<size_t>(l, o.channels.size() - 1)];
    s.S = o.segments, s.C = std::max(tr.num_classes, 2), s.kind = o.kind;
    validate(s, "layer " + std::to_string(l + 1));
    if (int64_t(s.O) * o.blocks > 4096)
      throw Error("blocks: " + std::to_string(o.blocks) + " blocks of " + std::to_string(s.O) +
                  " channels make more than 4096 channels in layer " + std::to_string(l + 1));
    // Block 0's seed is the layer's seed without --blocks; the others are fresh random layers.
    // From the second block on, the committee of the blocks so far is joined and evaluated; the
    // last such join is the layer (its head refitted with --join-refit-margin).
    std::vector<Layer> parts;
    Layer L;
    std::vector<Worker> ws;
    for (int b = 0; b < o.blocks; ++b) {
      parts.push_back(train_layer(s, o.seed * 1000 + l + 16 * uint64_t(b), l, o.blocks > 1 ? b + 1 : 0, ws));
      if (b == 0) continue;
      const auto t0 = Clock::now();
      L = join_layers(parts);
      ws = make_workers(L.shape);
      EpochReport rep;
      rep.layer = l + 1, rep.joined = b + 1, rep.epoch = o.epochs;
      if (b + 1 == o.blocks && o.join_refit_margin > 0) refit(L, ws, o.join_refit_margin, &rep, true);
      rep.test_accuracy = accuracy(L, xte, yte, ws, pool);
      rep.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (on_epoch) on_epoch(rep);
    }
    if (o.blocks == 1) L = std::move(parts[0]);  // ws holds its engines already
    parts.clear();
    // Drop the head; the convolution (pooled 2x2 with --layer-pool) makes the next layer's input.
    if (l + 1 < o.layers) {
      if (o.layer_pool != LayerPool::none && (xtr[0].H - 2 < 2 || xtr[0].W - 2 < 2))
        throw Error("layer_pool: layer " + std::to_string(l + 1) + "'s output is too small to pool");
      pool.run([&](int tid) {
        for (int64_t i = split_range(ntr, tid, pool.size()).begin, e = split_range(ntr, tid, pool.size()).end; i < e; ++i) {
          BitImage next;
          ws[tid].eng->apply(L, xtr[i], &next);
          xtr[i] = append_position_bits(pool2x2(next, o.layer_pool), o.position_bits, o.seed + l + 1);
        }
        for (int64_t i = split_range(nte, tid, pool.size()).begin, e = split_range(nte, tid, pool.size()).end; i < e; ++i) {
          BitImage next;
          ws[tid].eng->apply(L, xte[i], &next);
          xte[i] = append_position_bits(pool2x2(next, o.layer_pool), o.position_bits, o.seed + l + 1);
        }
      });
      if (xtr[0].H < 3 || xtr[0].W < 3) throw Error("layers: images shrink below 3x3 after layer " + std::to_string(l + 1));
    }
    layers.push_back(std::move(L));
  }
  return layers;
}

}  // namespace ember::bitnet
