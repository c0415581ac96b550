// Data sets: IDX (MNIST-format) images and labels, raw or gzip, read with every field checked
// against the file before anything is allocated, headers before payloads, optionally only the
// first N items. Images stay u8 in memory: [N, rows, cols].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember {

struct Dataset {
  int64_t count = 0;             // N
  int rows = 0, cols = 0;        // H, W (one channel)
  int num_classes = 10;
  std::vector<uint8_t> images;   // [N, H, W], row-major
  std::vector<uint8_t> labels;   // [N], each < num_classes
};

// Reads an IDX file of unsigned bytes (magic 0x00000801 labels, 0x00000803 images), raw or
// gzip-compressed (detected by content; several gzip members, as `cat a.gz b.gz` makes, decode as
// one stream). Checks magic, element type, rank, that the dimensions agree with the file's
// (uncompressed) size, and that the gzip stream is complete and ends right after the payload.
// Files are opened with open_input (ember/files.h): only a regular file is read (a FIFO, a device
// such as /dev/zero, a directory or a symlink loop is refused at once, never waited on). A raw file
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

// Where the default data set (Fashion-MNIST, Debian's dataset-fashion-mnist) lives.
inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

}  // namespace ember
