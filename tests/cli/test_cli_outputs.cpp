// Outputs and inputs of every command (issue 37): no output flag may replace a file the run
// reads (data set files and folders, the model, weights, checkpoints), through symlinks and hard
// links (D1); paths that are not UTF-8 reach JSON escaped, never fatal (D4); `train --weights W`
// builds the model stored in W (D8). Each test failed on c918c99 (see the comments).
#include <sys/stat.h>

#include "cli/cli_util.h"
#include "ember/data.h"
#include "ember/io.h"

namespace {

Bytes as_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// A small RGB image: class c of 3 has a bright square at its own place.
Bytes rgb_image(int side, int cls, uint32_t seed) {
  Bytes b(size_t(3) * side * side);
  uint32_t x = seed * 2654435761u + 7;
  for (auto& v : b) v = uint8_t(10 + ((x = x * 1664525u + 1013904223u) >> 27));
  const int s = side / 3, y0 = cls * s;
  for (int ch = 0; ch < 3; ++ch)
    for (int y = y0; y < y0 + s; ++y)
      for (int xx = y0; xx < y0 + s; ++xx) b[(size_t(ch) * side + y) * side + xx] = uint8_t(180 + 30 * ch);
  return b;
}

class Outputs : public Cli {
 protected:
  // train/class{0,1,2}/N.png and test/..., 12x12 RGB.
  fs::path rgb_folder(const std::string& name = "pngs") {
    const fs::path d = tmp_ / name;
    for (const char* split : {"train", "test"})
      for (int c = 0; c < 3; ++c) {
        const fs::path cd = d / split / ("class" + std::to_string(c));
        fs::create_directories(cd);
        const int n = split[1] == 'r' ? 8 : 3;
        for (int i = 0; i < n; ++i) {
          const Bytes px = rgb_image(12, c, uint32_t(i * 3 + c + (split[1] == 'r' ? 0 : 100)));
          write_bytes(cd / (std::to_string(i) + ".png"), as_bytes(ember::encode_png(px.data(), 3, 12, 12, "t")));
        }
      }
    return d;
  }
  std::string folder_train(const fs::path& d, const std::string& extra) {
    return "train --data " + quote(d.string()) + " --model mnist-cnn --epochs 1 --batch-size 8 --threads 1 " + extra;
  }
  std::string train_model(const fs::path& model, const std::string& extra) {
    return "train --data " + quote(data_.string()) + " --model " + quote(model.string()) +
           " --epochs 1 --batch-size 32 --threads 1 " + extra;
  }
  static void hard_link(const fs::path& target, const fs::path& link) {
    ASSERT_EQ(::link(target.c_str(), link.c_str()), 0) << link;
  }
};

// D1: an output that is a file of an image-folder data set, reached by its own path, a hard link
// or a symlink, or any new path inside the data set's folder, is refused before any work, naming
// the flag and the input; on c918c99 `--save DIR/train/class0/0.png` turned the image into
// safetensors (exit 0), and so did --metrics and --show-batch.
TEST_F(Outputs, ImageFolderFilesAreNeverOutputs) {
  const fs::path d = rgb_folder(), img = d / "train" / "class0" / "0.png";
  const std::string before = read_text(img);
  const fs::path hard = tmp_ / "hard.png", soft = tmp_ / "soft.png";
  hard_link(img, hard);
  fs::create_symlink(img, soft);
  for (const std::string flag : {"--save", "--metrics", "--show-batch"}) {
    for (const fs::path& p : {img, hard, soft}) {
      const Result r = run(folder_train(d, flag + " " + quote(p.string())));
      expect_one_line_error(r, {flag, "--data"});
    }
    expect_one_line_error(run(folder_train(d, flag + " " + quote((d / "train" / "new.out").string()))),
                          {flag, "inside", "--data"});
  }
  expect_one_line_error(run(folder_train(d, "--out " + quote((d / "run").string()))), {"--out", "inside", "--data"});
  // Through `..` after a folder that does not exist yet: the path still ends inside the data set.
  const fs::path dotdot = tmp_ / "nope" / ".." / d.filename() / "run2";
  expect_one_line_error(run(folder_train(d, "--out " + quote(dotdot.string()))), {"--out", "inside", "--data"});
  EXPECT_FALSE(fs::exists(d / "run2"));
  expect_one_line_error(run(folder_train(d, "--checkpoint-every 5 --checkpoint-dir " + quote((d / "ck").string()))),
                        {"--checkpoint-dir", "inside", "--data"});
  expect_one_line_error(run("profile --data " + quote(d.string()) + " --model mnist-cnn --limit-samples 8 --threads 1 --json " +
                            quote(hard.string())),
                        {"--json", "--data"});
  // An image that is a symlink to a file outside the folder: that file is an input too.
  const fs::path outside = tmp_ / "outside.png";
  fs::copy_file(img, outside);
  fs::create_symlink(outside, d / "train" / "class1" / "linked.png");
  expect_one_line_error(run(folder_train(d, "--save " + quote(outside.string()))), {"--save", "linked.png", "--data"});
  EXPECT_TRUE(read_text(outside) == before) << "an image reached through a symlink was overwritten";
  EXPECT_TRUE(read_text(img) == before) << "a training image was overwritten";
  EXPECT_FALSE(fs::exists(d / "run"));
  EXPECT_FALSE(fs::exists(d / "ck"));
}

// D1: the same for a CIFAR directory and a TinyImageNet tree's text files (c918c99: exit 0,
// the batch file or wnids.txt replaced).
TEST_F(Outputs, CifarAndTinyImageNetFilesAreNeverOutputs) {
  const fs::path c = tmp_ / "cifar";
  fs::create_directories(c);
  Bytes batch;
  for (int i = 0; i < 20; ++i) {
    batch.push_back(uint8_t(i % 10));
    for (int k = 0; k < 3 * 32 * 32; ++k) batch.push_back(uint8_t((i * 7 + k) % 251));
  }
  for (int k = 1; k <= 5; ++k) write_bytes(c / ("data_batch_" + std::to_string(k) + ".bin"), batch);
  write_bytes(c / "test_batch.bin", batch);
  const fs::path hard = tmp_ / "batch-link";
  hard_link(c / "test_batch.bin", hard);
  const std::string before = read_text(c / "test_batch.bin");
  const std::string cifar = "train --data " + quote(c.string()) + " --model mnist-mlp --epochs 1 --threads 1 ";
  expect_one_line_error(run(cifar + "--save " + quote((c / "test_batch.bin").string())), {"--save", "--data"});
  expect_one_line_error(run(cifar + "--metrics " + quote(hard.string())), {"--metrics", "--data"});
  EXPECT_TRUE(read_text(c / "test_batch.bin") == before) << "the CIFAR batch was overwritten";

  const fs::path t = tmp_ / "tiny";
  fs::create_directories(t / "train" / "n01" / "images");
  fs::create_directories(t / "val" / "images");
  write_text(t / "wnids.txt", "n01\n");
  write_text(t / "val" / "val_annotations.txt", "v.png\tn01\t0\t0\t1\t1\n");
  const fs::path wn = tmp_ / "wnids-link";
  hard_link(t / "wnids.txt", wn);
  const std::string tiny = "train --data " + quote(t.string()) + " --data-format tinyimagenet --epochs 1 --threads 1 ";
  expect_one_line_error(run(tiny + "--save " + quote(wn.string())), {"--save", "--data", "wnids"});
  expect_one_line_error(run(tiny + "--metrics " + quote((t / "val" / "val_annotations.txt").string())),
                        {"--metrics", "--data"});
  EXPECT_EQ(read_text(t / "wnids.txt"), "n01\n");
}

// D1: the model file of `train --model X.onnx` (c918c99: `--save X.onnx` replaced it, exit 0),
// and `ember export W -o O` where O is a symlink or hard link to W (c918c99: W replaced).
TEST_F(Outputs, TheModelAndTheWeightsAreNeverOutputs) {
  const fs::path w = trained_weights(), onnx = tmp_ / "m.onnx";
  ASSERT_EQ(run("export " + quote(w.string()) + " -o " + quote(onnx.string())).code, 0);
  const std::string model = read_text(onnx), weights = read_text(w);
  const fs::path onnx_link = tmp_ / "onnx-link.safetensors";
  hard_link(onnx, onnx_link);
  expect_one_line_error(run(train_model(onnx, "--save " + quote(onnx.string()))),
                        {"--save", "--model", "m.onnx"});
  expect_one_line_error(run(train_model(onnx, "--save " + quote(onnx_link.string()))),
                        {"--save", "--model"});
  const fs::path soft = tmp_ / "soft.onnx", hard = tmp_ / "hard.onnx";
  fs::create_symlink(w, soft);
  hard_link(w, hard);
  for (const fs::path& o : {soft, hard})
    expect_one_line_error(run("export " + quote(w.string()) + " -o " + quote(o.string())), {"--output", "w.safetensors"});
  expect_one_line_error(run("profile --data " + quote(data_.string()) + " --model mnist-mlp --limit-samples 32 --threads 1 --weights " +
                            quote(w.string()) + " --trace " + quote(hard.string())),
                        {"--trace", "--weights"});
  EXPECT_TRUE(read_text(onnx) == model) << "the ONNX model was overwritten";
  EXPECT_TRUE(read_text(w) == weights) << "the weights were overwritten";
}

// D1: the MNIST-format data set's files, by hard link (new files beside them are allowed).
TEST_F(Outputs, IdxDataFilesAreNeverOutputsThroughHardLinks) {
  const fs::path hard = tmp_ / "labels-link";
  hard_link(data_ / kTrainLab, hard);
  const std::string before = read_text(data_ / kTrainLab);
  expect_one_line_error(run(train_args("--save " + quote(hard.string()))), {"--save", "--data"});
  EXPECT_TRUE(read_text(data_ / kTrainLab) == before) << "the labels were overwritten";
  // Outputs beside the four files are fine (`--data . --save w.safetensors`), and a run directory
  // may hold its checkpoints (--out X --checkpoint-dir X).
  const Result beside = run(train_args("--metrics " + quote((data_ / "m.jsonl").string()) + " --out " +
                                       quote((tmp_ / "run").string()) + " --checkpoint-every 4 --checkpoint-dir " +
                                       quote((tmp_ / "run").string())));
  ASSERT_EQ(beside.code, 0) << beside.out << beside.err;
  EXPECT_TRUE(fs::exists(data_ / "m.jsonl"));
  EXPECT_TRUE(read_text(data_ / kTrainLab) == before);
}

// D4: paths that are not UTF-8 are written into JSON with U+FFFD in place of each bad byte, and
// the run goes on (c918c99: "[json.exception.type_error.316] invalid UTF-8 byte", exit 4, an
// empty run directory, and a run that died at its first checkpoint).
TEST_F(Outputs, NonUtf8PathsAreWrittenIntoJsonEscaped) {
  const std::string bad = "x\xff\xfey";
  const fs::path data = tmp_ / ("data" + bad), out = tmp_ / ("run" + bad), ck = tmp_ / ("ck" + bad);
  fs::rename(data_, data);
  const Result r = run("train --data " + quote(data.string()) + " --model mnist-mlp --epochs 1 --batch-size 32 --threads 1 --out " +
                       quote(out.string()) + " --checkpoint-every 3 --checkpoint-dir " + quote(ck.string()));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const nlohmann::json config = nlohmann::json::parse(read_text(out / "config.json"));
  EXPECT_NE(config["data"].get<std::string>().find("x\xef\xbf\xbd\xef\xbf\xbdy"), std::string::npos) << config.dump();
  EXPECT_FALSE(ember::list_checkpoints(ck.string()).empty());
  EXPECT_TRUE(fs::exists(out / "metrics.jsonl"));
  // An ONNX file whose name is not UTF-8 names the model stored with the weights.
  fs::rename(data, data_);
  const fs::path w = trained_weights(), onnx = tmp_ / ("m" + bad + ".onnx"), w2 = tmp_ / "w2.safetensors";
  ASSERT_EQ(run("export " + quote(w.string()) + " -o " + quote(onnx.string())).code, 0);
  const Result t = run(train_model(onnx, "--save " + quote(w2.string())));
  ASSERT_EQ(t.code, 0) << t.out << t.err;
  EXPECT_NE(ember::read_weights_metadata(w2.string()).at("model").find("\xef\xbf\xbd"), std::string::npos);
}

// D4: every JSON text ember writes goes through one helper (json_text) that cannot throw on
// invalid UTF-8: no other `.dump(` in the sources (c918c99 had 20).
TEST(JsonWriting, EveryDumpGoesThroughTheOneSafeHelper) {
  std::vector<std::string> found;
  for (const char* top : {"src", "tools", "python"})
    for (const auto& e : fs::recursive_directory_iterator(fs::path(EMBER_SOURCE_DIR) / top)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
      if (e.path().filename() == "json_read.cpp") continue;  // the helper itself
      std::istringstream in(read_text(e.path()));
      int n = 0;
      for (std::string line; std::getline(in, line);)
        if (++n, line.find(".dump(") != std::string::npos) found.push_back(e.path().string() + ":" + std::to_string(n));
    }
  EXPECT_TRUE(found.empty()) << "a .dump( outside json_text: " << found.front() << " and " << found.size() - 1 << " more";
}

// D8: `train --weights W` builds the model stored in W, so weights trained on RGB images start
// another run on the same data (c918c99: "tensor '0.weight'.shape: expected [32,1,5,5], found
// [32,3,5,5]"); a --model that is another model is refused naming both.
TEST_F(Outputs, TrainWeightsUsesTheModelStoredInTheWeights) {
  const fs::path d = rgb_folder(), w = tmp_ / "rgb.safetensors", w2 = tmp_ / "rgb2.safetensors";
  ASSERT_EQ(run(folder_train(d, "--save " + quote(w.string()))).code, 0);
  const Result r = run("train --data " + quote(d.string()) + " --epochs 1 --batch-size 8 --threads 1 --weights " +
                       quote(w.string()) + " --save " + quote(w2.string()));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("model mnist-cnn"), std::string::npos) << r.out;
  const Result same = run(folder_train(d, "--weights " + quote(w.string())));  // --model mnist-cnn: the same model
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  expect_one_line_error(run("train --data " + quote(d.string()) + " --model mnist-mlp --epochs 1 --threads 1 --weights " +
                            quote(w.string())),
                        {"--model", "mnist-mlp", "mnist-cnn"});
}

}  // namespace
