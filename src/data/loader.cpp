// BatchLoader: background threads fill a ring of `depth` batch slots with augmented u8 samples,
// batch b into slot b % depth, while the training step consumes them in order. A new epoch bumps
// a generation number and waits out the fills in flight, so no slot is written twice at once.
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/fp_mode.h"
#include "ember/error.h"
#include "ember/loader.h"

namespace ember {

struct BatchLoader::Impl {
  const Dataset& d;
  Augment a;
  int B, depth;
  Size2 out;
  uint64_t seed;
  size_t per;  // bytes per output sample
  struct Slot {
    std::vector<uint8_t> images, labels;
    int n = 0;
    int64_t ready = -1;  // the batch it holds, -1: none
    std::string error;   // why it could not be filled (a streamed file that no longer decodes)
  };
  std::vector<Slot> slots;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int64_t> order;
  int64_t count = 0, nbatches = 0, fill = 0, consume = 0;  // batch numbers
  int epoch = 0, busy = 0;
  bool train = true, stop = false, consumed_one = false;
  uint64_t generation = 0;
  std::vector<std::thread> threads;

  Impl(const Dataset& data, const Augment& aug, int batch, int workers, int dep, uint64_t sd)
      : d(data), a(aug), B(batch), depth(std::max(dep, 1)), seed(sd) {
    out = augmented_size(a, d.rows, d.cols, "crop");
    per = size_t(d.channels) * out.h * out.w;
    slots.resize(size_t(depth));
    for (Slot& s : slots) s.images.resize(per * size_t(B)), s.labels.resize(size_t(B));
    for (int t = 0; t < std::max(workers, 1); ++t) threads.emplace_back([this] { work(); });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
  }
  void work() {
    set_thread_fp_mode(true);  // ember's thread: denormals flushed (core/fp_mode.h); u8 results either way
    std::vector<uint8_t> scratch(d.streamed() ? d.image_elems() : 0);  // a streamed image, decoded
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || (fill < nbatches && fill < consume + depth); });
      if (stop) return;
      const int64_t b = fill++;
      const uint64_t gen = generation;
      Slot& s = slots[size_t(b % depth)];
      ++busy;
      lock.unlock();
      const int64_t start = b * B, n = std::min<int64_t>(B, count - start);
      std::string error;
      try {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t idx = order[size_t(start + i)];
          augment_sample(s.images.data() + size_t(i) * per, d.image(idx, scratch.data()), d.channels, d.rows, d.cols, a,
                         out, train, seed, epoch, idx);
          s.labels[size_t(i)] = d.labels[size_t(idx)];
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      --busy;
      if (gen == generation) s.n = int(n), s.ready = b, s.error = error;
      cv.notify_all();
    }
  }
};

BatchLoader::BatchLoader(const Dataset& d, const Augment& a, int batch, int workers, int depth, uint64_t seed)
    : impl_(std::make_unique<Impl>(d, a, batch, workers, depth, seed)) {}
BatchLoader::~BatchLoader() = default;
Size2 BatchLoader::size() const { return impl_->out; }

void BatchLoader::start(const int64_t* order, int64_t count, int epoch, int64_t first, bool train) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  ++m.generation;
  m.nbatches = 0;  // no new fills while the old ones finish
  m.cv.wait(lock, [&] { return m.busy == 0; });
  m.order.assign(order, order + count);
  m.count = count, m.epoch = epoch, m.train = train;
  m.nbatches = (count + m.B - 1) / m.B;
  m.fill = m.consume = std::clamp<int64_t>(first, 0, m.nbatches);
  m.consumed_one = false;
  for (auto& s : m.slots) s.ready = -1;
  m.cv.notify_all();
}

BatchLoader::Batch BatchLoader::next() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  if (m.consumed_one) ++m.consume, m.consumed_one = false;  // the previous batch's slot is free again
  m.cv.notify_all();
  if (m.consume >= m.nbatches) return {};
  const Impl::Slot& s = m.slots[size_t(m.consume % m.depth)];
  m.cv.wait(lock, [&] { return s.ready == m.consume; });
  m.consumed_one = true;
  if (!s.error.empty()) throw Error(s.error);
  return {s.images.data(), s.labels.data(), s.n};
}

}  // namespace ember
