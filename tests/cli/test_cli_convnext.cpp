// convnext-fashion against PyTorch 1.13 (bench/convnext_torch.py): from the same initial weights
// (written by PyTorch, loaded with --weights) and the same data order (--no-shuffle), one epoch on
// a slice of Fashion-MNIST gives the same epoch train loss within 1 % and the same test accuracy
// within 0.5 points. Skips when PyTorch or the Fashion-MNIST package is absent. And --act with the
// op table's activations.
#include <cstdlib>
#include <regex>

#include "cli/cli_util.h"

namespace {

constexpr const char* kFashion = "/usr/share/datasets/fashion-mnist";

double number_after(const std::string& text, const std::string& key) {
  const size_t at = text.rfind(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

TEST_F(Cli, ConvNextFashionEpochAgreesWithPyTorch) {
  if (std::system("/usr/bin/python3 -c 'import torch, torchvision, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "PyTorch (python3-torch, python3-torchvision) is not installed";
  if (!fs::exists(fs::path(kFashion) / "train-images-idx3-ubyte.gz") && !fs::exists(fs::path(kFashion) / "train-images-idx3-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST (dataset-fashion-mnist) is not installed at " << kFashion;
  const fs::path init = tmp_ / "init.safetensors", out = tmp_ / "py.txt";
  const std::string slice = " --limit-train 640 --limit-test 500";
  const std::string py = "/usr/bin/python3 " + std::string(EMBER_SOURCE_DIR) + "/bench/convnext_torch.py epoch convnext-fashion --init " +
                         quote(init.string()) + slice + " --batch 128 > " + quote(out.string()) + " 2>&1";
  ASSERT_EQ(std::system(py.c_str()), 0) << read_text(out);
  const std::string torch_out = read_text(out);
  Result r = run("train --model convnext-fashion --weights " + quote(init.string()) + " --no-shuffle --epochs 1" + slice +
                 " --batch-size 128 --threads 2",
                 "", 600);  // a hang guard only: on the scalar set, with the other core busy, about 90 s
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const double ember_loss = number_after(r.out, "train loss "), torch_loss = number_after(torch_out, "train loss ");
  const double ember_acc = number_after(r.out, "final test accuracy "), torch_acc = number_after(torch_out, "test accuracy ");
  std::printf("convnext-fashion, 640 images, 1 epoch: train loss ember %.4f PyTorch %.4f; test accuracy ember %.2f%% "
              "PyTorch %.2f%%\n", ember_loss, torch_loss, ember_acc, torch_acc);
  ASSERT_GT(torch_loss, 0) << torch_out;
  EXPECT_LE(std::abs(ember_loss - torch_loss), 0.01 * torch_loss) << r.out << torch_out;
  EXPECT_LE(std::abs(ember_acc - torch_acc), 0.5) << r.out << torch_out;
}

// --act takes the op table's activations: one made in its own file (mish) trains in every block,
// and the run's model.json names it; a name that is no activation lists them all.
TEST_F(Cli, ActTakesTheOpTablesActivations) {
  if (!fs::exists(fs::path(kFashion) / "train-images-idx3-ubyte.gz") && !fs::exists(fs::path(kFashion) / "train-images-idx3-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST (dataset-fashion-mnist) is not installed at " << kFashion;
  Result r = run("train --model convnext-fashion --act mish --epochs 1 --limit-train 64 --limit-test 32 --batch-size 32 --out " +
                 quote((tmp_ / "run").string()));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string model = read_text(tmp_ / "run" / "model.json");
  size_t blocks = 0;
  for (size_t at = model.find("\"mish\""); at != std::string::npos; at = model.find("\"mish\"", at + 1)) ++blocks;
  EXPECT_EQ(blocks, 8u) << model;  // convnext-fashion: 2 blocks in each of 4 stages
  r = run("train --model convnext-fashion --act conv2d --epochs 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--act: expected elu, fastswish, gelu, gelu-tanh, hardswish, mish, relu"), std::string::npos) << r.err;
}

}  // namespace
