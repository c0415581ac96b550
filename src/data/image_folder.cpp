// Image-folder data sets (listed by image_scan.cpp): every image's header read and checked first
// (size, channels, pixel count), the cache decision taken on their sum, then the images decoded on
// a few threads (each image alone, so the result does not depend on their number) within a memory
// budget, resized to one size and packed planar u8 [N, C, S, S], or left to be streamed.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/fp_mode.h"
#include "data/alloc.h"
#include "data/decode_budget.h"
#include "data/image_scan.h"
#include "ember/data.h"
#include "ember/error.h"
#include "ember_support/files.h"

namespace ember {
namespace {

using detail::Item;
constexpr uint64_t kMaxFile = uint64_t{1} << 28;        // 256 MiB per image file
constexpr uint64_t kDecodeBudget = uint64_t{512} << 20;  // read and decoded at once, all threads
constexpr size_t kHeadBytes = size_t{64} << 10;          // read for a header's first try

// Runs fn(i) for every item on `threads` threads; the first failing item (lowest index) is
// reported.
template <class Fn>
void for_each_item(size_t n, int threads, Fn fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  size_t bad_at = SIZE_MAX;
  std::string bad_msg;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < bad_at) bad_at = i, bad_msg = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, threads); ++t)
    pool.emplace_back([&] {
      set_thread_fp_mode(true);  // ember's thread: denormals flushed (core/fp_mode.h)
      work();
    });
  {
    const FpModeScope fp(true);  // the caller's share, its own mode restored
    work();
  }
  for (auto& t : pool) t.join();
  if (bad_at != SIZE_MAX) throw Error(bad_msg);
}

// Bytes held while one image is decoded and resized to size x size (0: not resized): its file,
// the decoder's interleaved copy (RGB for PNG), the planar pixels, the resampler's output and
// sums, and its weight tables (at most 8 MiB).
uint64_t decode_cost(uint64_t file, const Image& h, int size) {
  const uint64_t px = uint64_t(h.width) * uint64_t(h.height), out = uint64_t(size) * uint64_t(size);
  return file + px * uint64_t(3 + h.channels) + out * uint64_t(h.channels + 4) + (uint64_t{8} << 20);
}

struct Head {
  Image im;           // width, height, channels; no pixels
  uint64_t cost = 0;  // decode_cost
};

// The first (at most) n bytes of a regular file (open_input's checks: never a FIFO or device),
// and its size; a file over kMaxFile is refused as read_input would.
std::string read_prefix(const std::string& path, size_t n, const std::string& what, uint64_t* size) {
  const int fd = open_input(path, what, size);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (*size > kMaxFile)
    throw Error(what + " " + quote_path(path) + ": is " + std::to_string(*size) + " bytes, more than the " +
                std::to_string(kMaxFile) + "-byte limit");
  std::string out(size_t(std::min<uint64_t>(n, *size)), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t r = ::pread(fd, out.data() + done, out.size() - done, off_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // an error or a file that shrank: the header check (or the full read) says so
    done += size_t(r);
  }
  out.resize(done);
  return out;
}

// One item's header: from the file's first 64 KiB (PNG's IHDR is in its first 33 bytes, a JPEG's
// frame header almost always early), else from the whole file (read within the budget).
Head read_head(const std::string& path, const FolderOptions& o, DecodeBudget* budget) {
  uint64_t size = 0;
  const std::string head = read_prefix(path, kHeadBytes, o.what, &size);
  Head h;
  try {
    h.im = read_image_header(reinterpret_cast<const uint8_t*>(head.data()), head.size(), path, o.max_pixels);
  } catch (const Error&) {
    if (head.size() >= size) throw;  // that was the whole file
    DecodeBudget::Hold hold(budget, size);
    const std::string bytes = named_alloc(o.what + " " + quote_path(path), "reading its header", size,
                                          [&] { return read_input(path, kMaxFile, o.what); });
    h.im = read_image_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, o.max_pixels);
  }
  h.cost = decode_cost(size, h.im, o.image_size);
  return h;
}

// Every item's header, a few at a time.
std::vector<Head> read_heads(const std::vector<Item>& items, const FolderOptions& o, DecodeBudget* budget) {
  std::vector<Head> out(items.size());
  for_each_item(items.size(), o.threads, [&](size_t i) { out[i] = read_head(items[i].path, o, budget); });
  return out;
}

// One image decoded, and resized to image_size when that is set.
Image read_one(const std::string& path, int image_size, bool cubic, int64_t max_pixels, const std::string& what) {
  const std::string bytes = read_input(path, kMaxFile, what);
  Image im = decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, max_pixels);
  if (image_size <= 0 || (im.width == image_size && im.height == image_size)) return im;
  Image r{image_size, image_size, im.channels, std::vector<uint8_t>(size_t(im.channels) * image_size * image_size)};
  resize_image(r.pixels.data(), image_size, image_size, im.pixels.data(), im.channels, im.height, im.width, cubic);
  return r;
}

// The shape every image becomes: --image-size, or the first train image's (which every other
// image, train and test, must then have, by its header).
struct Shape {
  int rows = 0, cols = 0, channels = 1;
};
Shape check_heads(const detail::Listing& l, const std::vector<Head>& ha, const std::vector<Head>& hb, const FolderOptions& o) {
  const Image& first = ha[0].im;
  Shape s{o.image_size > 0 ? o.image_size : first.height, o.image_size > 0 ? o.image_size : first.width, 1};
  for (const auto& [items, heads] : {std::pair{&l.train.items, &ha}, std::pair{&l.test.items, &hb}})
    for (size_t i = 0; i < items->size(); ++i) {
      const Image& im = (*heads)[i].im;
      s.channels = std::max(s.channels, im.channels);
      if (o.image_size == 0 && (im.width != s.cols || im.height != s.rows))
        throw Error(o.what + " " + quote_path((*items)[i].path) + ": image is " + std::to_string(im.width) + "x" +
                    std::to_string(im.height) + ", the first one " + quote_path(l.train.items[0].path) + " is " +
                    std::to_string(s.cols) + "x" + std::to_string(s.rows) + " (pass image_size to resize all)");
    }
  return s;
}

// A split whose images are read from their files as needed (Dataset::files).
Dataset files_of(const std::vector<Item>& items, const std::vector<Head>& heads, const Shape& s, int classes,
                 const FolderOptions& o, const std::shared_ptr<DecodeBudget>& budget) {
  auto files = std::make_shared<ImageFiles>();
  files->rows = s.rows, files->cols = s.cols, files->channels = s.channels;
  files->resize = o.image_size > 0, files->cubic = o.cubic, files->max_pixels = o.max_pixels;
  files->what = o.what, files->budget = budget;
  Dataset d;
  d.count = int64_t(items.size());
  d.channels = s.channels, d.num_classes = classes, d.rows = s.rows, d.cols = s.cols;
  for (size_t i = 0; i < items.size(); ++i) {
    files->paths.push_back(items[i].path);
    files->cost.push_back(heads[i].cost);
    d.labels.push_back(uint8_t(items[i].label));
  }
  d.files = std::move(files);
  return d;
}

// Decodes every image of a streamed split into memory (the set fits the cache).
void cache(Dataset& d, const std::string& dir, const FolderOptions& o) {
  const uint64_t bytes = uint64_t(d.count) * d.image_elems();
  named_alloc(o.what + " " + quote_path(dir), "the decoded images (cache_bytes)", bytes, [&] { d.images.resize(bytes); });
  const size_t per = d.image_elems();
  for_each_item(size_t(d.count), o.threads, [&](size_t i) { d.files->decode(int64_t(i), d.images.data() + per * i); });
  d.files.reset();
}

}  // namespace

void ImageFiles::decode(int64_t i, uint8_t* dst) const {
  const std::string& path = paths[size_t(i)];
  DecodeBudget::Hold hold(budget.get(), cost.empty() ? 0 : cost[size_t(i)]);
  const Image im = named_alloc(what + " " + quote_path(path), "decoding the image", cost.empty() ? 0 : cost[size_t(i)],
                               [&] { return read_one(path, resize ? rows : 0, cubic, max_pixels, what); });
  if (im.width != cols || im.height != rows)
    throw Error(what + " " + quote_path(path) + ": image is now " + std::to_string(im.width) + "x" +
                std::to_string(im.height) + ", it was " + std::to_string(cols) + "x" + std::to_string(rows));
  const size_t plane = size_t(rows) * cols;
  for (int c = 0; c < channels; ++c) std::memcpy(dst + plane * c, im.pixels.data() + plane * (im.channels == 1 ? 0 : c), plane);
}

const uint8_t* Dataset::image(int64_t i, uint8_t* scratch) const {
  if (!files) return images.data() + size_t(i) * image_elems();
  files->decode(i, scratch);
  return scratch;
}

TrainTest load_image_folder(const std::string& dir, const FolderOptions& o, FolderReport* report) {
  const detail::Listing l = detail::list_image_folder(dir, o);
  if (report) report->skipped_train = l.train.skipped, report->skipped_test = l.test.skipped;
  // Every header before any pixel: sizes, channels and pixel counts, and the cache decision on
  // their sum (train and test together, each image at the shape it becomes).
  const auto budget = std::make_shared<DecodeBudget>(kDecodeBudget);
  const std::vector<Head> ha = read_heads(l.train.items, o, budget.get()), hb = read_heads(l.test.items, o, budget.get());
  const Shape s = check_heads(l, ha, hb, o);
  const int classes = int(l.classes.size());
  TrainTest t{files_of(l.train.items, ha, s, classes, o, budget), files_of(l.test.items, hb, s, classes, o, budget)};
  t.train.total = l.train.total, t.test.total = l.test.total;
  const uint64_t bytes = uint64_t(t.train.count + t.test.count) * t.train.image_elems();
  const bool stream = bytes > o.cache_bytes;
  if (!stream) cache(t.train, dir, o), cache(t.test, dir, o);
  if (report) report->streamed = stream;
  t.train.class_names = t.test.class_names = l.classes;
  return t;
}

}  // namespace ember
