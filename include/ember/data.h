// Data sets: IDX (MNIST-format) images and labels, raw or gzip, read with every field checked
// against the file before anything is allocated. Images stay u8 in memory: [N, rows, cols].
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
// gzip-compressed (detected by content). Checks magic, element type, rank, that the dimensions
// agree with the file's (uncompressed) size, and that the gzip stream is complete. The payload
// (product of the dims) is capped at 4 GiB, and for gzip the buffer grows only as decoded data
// arrives, so a lying header or a gzip bomb cannot allocate more than the data really holds.
// Throws ember::Error naming the path and the field on any problem.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};
IdxArray read_idx(const std::string& path);
// The same from memory: size bytes at data (raw or gzip, detected by content; data may be null
// when size is 0). `name` stands for the path in error messages. read_idx reads the file and
// calls this, so both give the same checks and messages.
IdxArray parse_idx(const uint8_t* data, size_t size, const std::string& name);

// Reads images + labels, checks counts match, labels < num_classes, at least one image.
Dataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                         int num_classes = 10);

// The four standard files in dir (train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte), each with or without ".gz".
struct TrainTest {
  Dataset train, test;
};
TrainTest load_mnist_dir(const std::string& dir);

// Where the default data set (Fashion-MNIST, Debian's dataset-fashion-mnist) lives.
inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

}  // namespace ember
