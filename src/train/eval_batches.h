// The batches of an evaluation (evaluate(Plan&), train.cpp): fp32, bf16 and int8 plans alike:
// samples [first, end) of a data set in order, through the BatchLoader
// (an Augment's deterministic path, or a streamed set's decoding) or straight from memory.
#pragma once
#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "ember/data.h"
#include "ember/loader.h"

namespace ember {

// Calls gather(images, labels, index, start, n) for each batch of at most B samples, in order:
// index[0, n) picks the batch's rows of images/labels (start: the batch's first sample, counted
// from `first`), then run(start, n).
template <class Gather, class Run>
void eval_batches(const Dataset& data, const Augment* augment, int B, int64_t first, int64_t end, Gather&& gather,
                  Run&& run) {
  std::vector<int64_t> index(size_t(end - first));
  std::iota(index.begin(), index.end(), first);
  std::vector<int64_t> ident(static_cast<size_t>(B));
  std::iota(ident.begin(), ident.end(), int64_t(0));
  std::unique_ptr<BatchLoader> loader;
  const Augment none;  // a streamed set without augmentation: the loader decodes, nothing else
  if (augment || data.streamed()) {
    loader = std::make_unique<BatchLoader>(data, augment ? *augment : none, B, data.streamed() ? 2 : 1, 3, 0);
    loader->start(index.data(), end - first, 0, 0, false);
  }
  for (int64_t start = 0; start < end - first; start += B) {
    const int n = int(std::min<int64_t>(B, end - first - start));
    if (loader) {
      const BatchLoader::Batch b = loader->next();
      gather(b.images, b.labels, ident.data(), n);  // the batch in order: index 0 .. n-1
    } else {
      gather(data.images.data(), data.labels.data(), index.data() + start, n);
    }
    run(index.data() + start, n);
  }
}

}  // namespace ember
