// Augmentation of u8 images (padded random crop, random resized crop, horizontal flip; centre crop
// for evaluation) and the background batch loader that runs it ahead of the training step on its
// own threads through a bounded queue. Each sample's randomness comes from (seed, epoch, sample
// index) alone, so the batches are the same bits for any number of threads.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/data.h"

namespace ember {

struct Augment {
  int crop = 0;                 // output side (0: the image's own size)
  int pad = 0;                  // zero border added on each side before a random crop
  bool resized_crop = false;    // RandomResizedCrop(crop): area 8-100 %, aspect 3/4-4/3, bilinear
  bool flip = false;            // mirror left-right with probability 1/2
  std::vector<double> mean, std;  // per channel, of x / 255 (empty: none)
  bool random() const { return pad > 0 || resized_crop || flip || crop > 0; }
};

// Parses --normalize: "none", "imagenet" (torchvision's mean 0.485,0.456,0.406 and std
// 0.229,0.224,0.225), "M,S" (every channel) or "M1,M2,M3,S1,S2,S3"; checked against `channels`.
// Throws Error naming `what`.
void parse_normalize(const std::string& text, int channels, Augment& a, const std::string& what);
// The per-channel affine Plan::set_input_affine takes for a's normalisation (empty: none).
void input_affine(const Augment& a, std::vector<double>* scale, std::vector<double>* shift);

// The output size: crop x crop, or the images' own H x W when crop is 0; Error naming `what` when
// the crop does not fit the padded image.
struct Size2 {
  int h = 0, w = 0;
};
Size2 augmented_size(const Augment& a, int H, int W, const std::string& what);

// One sample: dst[C, out.h, out.w] from src[C, H, W]. train: a's random crop (or resized crop)
// and flip drawn from (seed, epoch, index); else the deterministic path: a centre crop (after the
// same zero padding), no flip.
void augment_sample(uint8_t* dst, const uint8_t* src, int C, int H, int W, const Augment& a, Size2 out, bool train,
                    uint64_t seed, int epoch, int64_t index);

// Runs augment_sample over whole batches on `workers` background threads, at most `depth` batches
// ahead of the consumer. A batch is u8 [n, C, size().h, size().w] plus labels [n], in order.
class BatchLoader {
 public:
  struct Batch {
    const uint8_t* images = nullptr;
    const uint8_t* labels = nullptr;
    int n = 0;
  };
  BatchLoader(const Dataset& d, const Augment& a, int batch, int workers, int depth, uint64_t seed);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;
  // Begins an epoch over order[0 .. count) (copied), from batch `first` on; a pending epoch is
  // abandoned. train selects the random path.
  void start(const int64_t* order, int64_t count, int epoch, int64_t first, bool train);
  // The next batch (waits for it); valid until the following next() or start(). n == 0: the
  // epoch is over.
  Batch next();
  Size2 size() const;  // of each image of a batch

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
