// Data sets: IDX (MNIST-format) images and labels, raw or gzip; CIFAR-10/100 binary batches;
// folders of PNG/JPEG images (torchvision's ImageFolder layout, and TinyImageNet's). Every field
// is checked against the file before anything is allocated, headers before payloads, optionally
// only the first N items. Images stay u8 in memory, planar: [N, channels, rows, cols].
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ember {

struct ImageFiles;

struct Dataset {
  int64_t count = 0;             // N
  int64_t total = 0;             // the split's samples before a limit kept the first N (0: unknown)
  int rows = 0, cols = 0;        // H, W
  int channels = 1;              // C: 1 (grey) or 3 (RGB)
  int num_classes = 10;
  std::vector<uint8_t> images;   // [N, C, H, W], row-major
  std::vector<uint8_t> labels;   // [N], each < num_classes
  std::vector<std::string> class_names;  // [num_classes] when the format names them, else empty
  // Set when the images are read from their files as needed (they did not fit the cache): then
  // `images` is empty and files->decode(i, dst) gives image i. Training and evaluation go through
  // the BatchLoader (ember/loader.h), which decodes ahead of the step.
  std::shared_ptr<const ImageFiles> files;
  size_t image_elems() const { return size_t(channels) * rows * cols; }
  bool streamed() const { return files != nullptr; }
  // Image i (< count): from memory, or decoded into scratch (image_elems() bytes) when streamed.
  const uint8_t* image(int64_t i, uint8_t* scratch) const;
};

class DecodeBudget;
// The files of a streamed image set, all [channels, rows, cols] once decoded (and resized).
struct ImageFiles {
  std::vector<std::string> paths;  // [count]
  std::vector<uint64_t> cost;      // [count] bytes decoding each holds at once (from its header)
  int rows = 0, cols = 0, channels = 1;
  bool resize = false, cubic = false;  // resize: every image to rows x cols; else each must be so
  int64_t max_pixels = int64_t(1) << 26;
  std::string what = "image folder";  // what errors call the folder (the CLI: its flag)
  std::shared_ptr<DecodeBudget> budget;  // shared by every decoding thread (src/data/decode_budget.h)
  // dst[channels, rows, cols] = file i, grey replicated to 3 channels when channels is 3. Throws
  // Error naming the file (it may have changed since it was listed).
  void decode(int64_t i, uint8_t* dst) const;
};

// Reads an IDX file of unsigned bytes (magic 0x00000801 labels, 0x00000803 images), raw or
// gzip-compressed (detected by content; several gzip members, as `cat a.gz b.gz` makes, decode as
// one stream). Checks magic, element type, rank, that the dimensions agree with the file's
// (uncompressed) size, and that the gzip stream is complete and ends right after the payload.
// Files are opened without blocking: only a regular file is read (a FIFO, a device such as
// /dev/zero, a directory or a symlink loop is refused at once, never waited on). A raw file
// is not read whole: its size must equal header + payload exactly, then the payload is read. The
// payload (product of the dims) is capped at 4 GiB, and for gzip the buffer grows only as decoded
// data arrives, so a lying header or a gzip bomb cannot allocate more than the data really holds.
// Throws ember::Error, one line naming the path and the field, on any problem.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};
IdxArray read_idx(const std::string& path);
// The same from memory: size bytes at data (raw or gzip, detected by content; data may be null
// when size is 0). `name` stands for the path in error messages. Both go through the same
// parser, so they give the same checks and messages.
IdxArray parse_idx(const uint8_t* data, size_t size, const std::string& name);

// Reads images [N, rows, cols] + labels [N]. Both headers are read and checked first (ranks,
// N >= 1, rows and cols <= 4096, equal counts) before either payload is decoded; then the labels
// (each < num_classes) and the images. `limit` > 0 keeps only the first min(N, limit) images and
// labels, and only those are decoded: a raw file must still have the exact size, but a gzip
// stream is decoded no further than needed (its rest is not verified). 0 keeps all; < 0 throws.
Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int num_classes = 10, int64_t limit = 0);

// The four standard files in dir (train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte), each with or without ".gz" (the raw one wins).
// Only a truly absent name counts as missing: one that is there but unusable (a symlink loop, a
// dangling symlink, no permission) is reported with its reason. The limits are load_idx_dataset's,
// for the training and the test set.
struct TrainTest {
  Dataset train, test;
};
TrainTest load_mnist_dir(const std::string& dir, int64_t limit_train = 0, int64_t limit_test = 0);

// CIFAR-10 (data_batch_1..5.bin, test_batch.bin: records of 1 label byte + 3072 image bytes) or
// CIFAR-100 (train.bin, test.bin: coarse label, fine label, 3072 bytes) in dir, detected by which
// files are there; images [N, 3, 32, 32] as stored (planar R, G, B). `fine` picks CIFAR-100's 100
// fine labels, else its 20 coarse ones. Each file's size must be a whole number of records (at
// least one, at most what the real file holds: 10,000 records, CIFAR-100's train.bin 50,000,
// checked from the size before reading), each label below the class count; class names come from
// batches.meta.txt / fine_label_names.txt / coarse_label_names.txt when present. Limits as load_mnist_dir's (only
// the records kept are read). Throws Error naming the file and the field.
TrainTest load_cifar_dir(const std::string& dir, bool fine = true, int64_t limit_train = 0,
                         int64_t limit_test = 0);
// One batch file's content from memory (the same checks and messages; `name` stands for the path).
Dataset parse_cifar(const uint8_t* data, size_t size, bool hundred, bool fine, const std::string& name);
// Whether dir holds CIFAR-10 or CIFAR-100 binary batches (by file name only).
bool is_cifar_dir(const std::string& dir);
// Whether dir holds CIFAR-100's (train.bin or test.bin: the one layout with coarse labels).
bool is_cifar100_dir(const std::string& dir);

// One decoded image, planar: pixels [channels, height, width]; channels 1 (grey) or 3 (RGB).
struct Image {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};
// Decodes a PNG (libspng) or JPEG (libjpeg-turbo), told apart by their signatures. Grey, with or
// without alpha, gives 1 channel; palette, RGB and RGBA give 3 (alpha is dropped, not composited,
// as PIL's convert("RGB") does); 16-bit samples are reduced to 8. A size over max_pixels (width x
// height) is refused from the header, before the pixels are allocated; a damaged, truncated or
// empty stream, a CMYK JPEG or any other content is an Error naming `name`.
Image decode_image(const uint8_t* data, size_t size, const std::string& name, int64_t max_pixels = int64_t(1) << 26);
// The same checks on the header alone: width, height and channels, no pixels.
Image read_image_header(const uint8_t* data, size_t size, const std::string& name,
                        int64_t max_pixels = int64_t(1) << 26);
// dst[C, oh, ow] = src[C, H, W] resampled with PIL's bilinear (triangle) or bicubic (a = -0.5)
// filter, widened by the scale when shrinking (so it averages, as PIL and torchvision's Resize
// do), rounded to u8. Equal sizes copy.
void resize_image(uint8_t* dst, int oh, int ow, const uint8_t* src, int C, int H, int W, bool cubic = false);
// A PNG file's bytes for planar u8 pixels [C, H, W], C 1 or 3.
std::string encode_png(const uint8_t* planar, int C, int H, int W, const std::string& name);
// A JPEG file's bytes (quality 1-100, 4:2:0 chroma for colour) for planar u8 pixels [C, H, W].
std::string encode_jpeg(const uint8_t* planar, int C, int H, int W, int quality, const std::string& name);

// Folders of PNG/JPEG images: DIR/train/<class>/... and DIR/test/<class>/... (or DIR/val/<class>),
// class index = position of the folder name in the sorted list of train's class folders (as
// torchvision's ImageFolder); images anywhere below a class folder, sorted by path. TinyImageNet's
// layout (DIR/wnids.txt, train/<wnid>/images/*.JPEG, val/images/*.JPEG labelled by
// val/val_annotations.txt) is read as it comes. Every image is resized to image_size x image_size
// (0: all images must have the first one's size). Grey data sets stay 1 channel; if any image is
// colour, grey ones are replicated to 3. Files without a .png/.jpg/.jpeg name are skipped and
// counted; an image that does not decode, an empty class folder, no class folders, or a test class
// that train lacks is an Error naming it. Symlinked folders are not followed; nesting deeper than
// 8 levels below a class folder is refused; a FIFO, socket or device named as an image is refused.
// Every image's header (size, channels, pixel count) is read and checked before any image is
// decoded; images are decoded a few at a time within a memory budget (512 MiB), and resized in
// strips (buffers of the output's size, whatever the source's height).
struct FolderOptions {
  int image_size = 0;
  bool cubic = false;      // bicubic resize instead of bilinear
  int threads = 1;         // decoding threads (the result does not depend on them)
  int64_t limit_train = 0, limit_test = 0;  // the first N images by class then path (0: all)
  int64_t max_pixels = int64_t(1) << 26;     // per decoded image
  // Decoded sets larger than this (train and test together, summed over every header) are
  // streamed from their files (Dataset::files) instead of cached in memory.
  uint64_t cache_bytes = uint64_t(1) << 62;
  std::string what = "image folder";  // what errors call the folder (the CLI: its flag, "--data")
};
struct FolderReport {
  int64_t skipped_train = 0, skipped_test = 0;  // files that are not .png/.jpg/.jpeg
  bool streamed = false;                         // the set did not fit cache_bytes
};
TrainTest load_image_folder(const std::string& dir, const FolderOptions& o, FolderReport* report = nullptr);
// Whether dir looks like an image folder (has train/ with a sub-folder) or TinyImageNet (wnids.txt).
// Errors (an unreadable train/) name `what` and the path.
bool is_image_folder(const std::string& dir, const std::string& what = "image folder");

// Where the default data set (Fashion-MNIST, Debian's dataset-fashion-mnist) lives.
inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

}  // namespace ember
