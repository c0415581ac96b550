// `ember bench bitnet` and `ember bitnet train` through the binary: JSON lines with the promised
// fields, one-line errors naming the flag for bad values, training that learns the tiny
// class-per-place data set, and (where MNIST is installed) learning on real digits.
#include <filesystem>

#include "cli/cli_util.h"

namespace {

TEST_F(Cli, BitnetBenchJsonLines) {
  const Result r = run("bench bitnet --json --input-bits 64,96 --channels 8 --segments 1,3 --threads 1,2 --min-time 0.01");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = nonempty_lines(r.out);
  ASSERT_EQ(lines.size(), 2u + 2 * 2 * 3) << r.out;  // kernel, oracle, 2 bits x 2 segs x (1t, 2t x 2 splits)
  const auto k = nlohmann::json::parse(lines[0]);
  EXPECT_GT(k.at("bit_macs_per_s").get<double>(), 0);
  EXPECT_GT(nlohmann::json::parse(lines[1]).at("ms_per_example").get<double>(), 0);
  int two_thread = 0;
  for (size_t i = 2; i < lines.size(); ++i) {
    const auto j = nlohmann::json::parse(lines[i]);
    for (const char* f : {"input_bits", "channels", "segments", "threads", "ms_per_example", "ns_per_weight"})
      EXPECT_TRUE(j.contains(f)) << f << " missing in " << lines[i];
    EXPECT_GT(j.at("ms_per_example").get<double>(), 0);
    EXPECT_EQ(j.at("channels").get<int>(), 8);
    two_thread += j.at("threads").get<int>() == 2;
  }
  EXPECT_EQ(two_thread, 8);
}

TEST_F(Cli, BitnetBenchTable) {
  const Result r = run("bench bitnet --input-bits 1024 --channels 16 --segments 2 --threads 1 --min-time 0.01 --no-oracle");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("T bit-MAC/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ms/example"), std::string::npos) << r.out;
}

TEST_F(Cli, BitnetBenchBadFlags) {
  expect_one_line_error(run("bench bitnet --segments 9"), {"--segments", "9"});
  expect_one_line_error(run("bench bitnet --kind quaternary"), {"--kind", "quaternary"});
  expect_one_line_error(run("bench bitnet --mode sideways"), {"--mode", "sideways"});
  expect_one_line_error(run("bench bitnet --threads 0"), {"--threads", "0"});
  expect_one_line_error(run("bench bitnet --channels 5000"), {"--channels", "5000"});
  expect_one_line_error(run("bench bitnet --min-time 0"), {"--min-time"});
  expect_one_line_error(run("bench bitnet --isa sse9"), {"--isa", "sse9"});
}

std::string bitnet_train(const fs::path& data, const std::string& extra) {
  return "bitnet train --data " + quote(data.string()) + " --threads 1 " + extra;
}

TEST_F(Cli, BitnetTrainLearnsTinyData) {
  const Result r = run(bitnet_train(data_, "--channels 16 --input-bits 4 --segments 2 --epochs 3 --batch-size 16 "
                                           "--steps 100 --updates 16 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = nonempty_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  const auto last = nlohmann::json::parse(lines.back());
  EXPECT_EQ(last.at("layer").get<int>(), 1);
  EXPECT_EQ(last.at("epoch").get<int>(), 3);
  EXPECT_EQ(last.at("batch").get<int>(), 64);  // doubles every epoch
  EXPECT_GT(last.at("test_accuracy").get<double>(), 0.4) << r.out;  // chance is 0.1
  EXPECT_LT(last.at("train_loss").get<double>(), nlohmann::json::parse(lines[0]).at("train_loss").get<double>());
}

TEST_F(Cli, BitnetTrainHeadUpdatesLearnsTinyData) {
  const Result r = run(bitnet_train(data_, "--channels 16 --input-bits 4 --segments 2 --epochs 3 --batch-size 16 "
                                           "--steps 100 --updates 16 --head-updates 40 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto last = nlohmann::json::parse(nonempty_lines(r.out).back());
  EXPECT_GT(last.at("test_accuracy").get<double>(), 0.4) << r.out;  // chance is 0.1
}

TEST_F(Cli, BitnetTrainHeadRefitLearnsTinyData) {
  // Hinge-loss conv steps with a frozen head, refitted by the hinge loss on frozen features.
  const Result r = run(bitnet_train(data_, "--channels 16 --input-bits 4 --segments 2 --epochs 2 --batch-size 16 "
                                           "--steps 20 --updates 16 --freeze-head --conv-margin 4 --head-refit epoch "
                                           "--refit-margin 4 --blur 1 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = nonempty_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const auto& l : lines) EXPECT_GE(nlohmann::json::parse(l).at("refit_changes").get<int64_t>(), 0) << l;
  EXPECT_GT(nlohmann::json::parse(lines.back()).at("test_accuracy").get<double>(), 0.4) << r.out;  // chance is 0.1
  const Result sq = run(bitnet_train(data_, "--channels 16 --input-bits 4 --segments 2 --epochs 1 --batch-size 16 "
                                            "--steps 20 --head-refit end --json"));
  ASSERT_EQ(sq.code, 0) << sq.err;
  EXPECT_GE(nlohmann::json::parse(nonempty_lines(sq.out).back()).at("refit_changes").get<int64_t>(), 0) << sq.out;
}

TEST_F(Cli, BitnetTrainTwoLayers) {
  const Result r = run(bitnet_train(data_, "--layers 2 --channels 8,4 --input-bits 2 --position-bits 8 --segments 2 "
                                           "--epochs 1 --batch-size 8 --steps 5"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = nonempty_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;  // header, layer 1, layer 2
  EXPECT_EQ(lines[2].find("    2 "), 0u) << lines[2];
}

TEST_F(Cli, BitnetTrainPooledLayersDeskewMirror) {
  // 2x2 majority pooling between layers (26x26 -> 13x13), per-layer margins, deskewed and mirrored
  // inputs (the tiny set's classes are places, which deskewing moves, so only that it runs and that
  // layer 2 reports, with the training set doubled by the mirror images).
  const Result r = run(bitnet_train(data_, "--layers 2 --channels 8,6 --input-bits 2 --position-bits 8 --segments 2 "
                                           "--epochs 1 --batch-size 8 --steps 5 --layer-pool majority --deskew "
                                           "--mirror --shift-copies 2 --freeze-head --head-refit end --conv-margin 2,3 "
                                           "--refit-margin 2,3 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = nonempty_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(nlohmann::json::parse(lines[1]).at("layer").get<int>(), 2);
  const Result any = run(bitnet_train(data_, "--layers 2 --channels 8 --input-bits 2 --position-bits 8 --segments 2 "
                                             "--epochs 1 --batch-size 8 --steps 5 --layer-pool any --space-to-depth"));
  ASSERT_EQ(any.code, 0) << any.err;
}

TEST_F(Cli, BitnetTrainBlocksJoinAsCommittee) {
  // Three blocks of 8 channels, each trained and refitted on its own, then the committees of the
  // first two and of all three (the layer), the last with its joined head refitted.
  const Result r = run(bitnet_train(data_, "--channels 8 --input-bits 4 --segments 2 --epochs 2 --batch-size 16 "
                                           "--steps 20 --updates 16 --freeze-head --conv-margin 4 --head-refit epoch "
                                           "--refit-margin 4 --blocks 3 --join-refit-margin 12 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = nonempty_lines(r.out);
  ASSERT_EQ(lines.size(), 3u * 2 + 2) << r.out;  // 3 blocks x 2 epochs, 2 committees
  std::vector<nlohmann::json> j;
  for (const auto& l : lines) j.push_back(nlohmann::json::parse(l));
  for (int b = 0; b < 3; ++b)
    for (int e = 0; e < 2; ++e) {
      const auto& x = j[size_t(b * 2 + e + (b == 2 ? 1 : 0))];
      EXPECT_EQ(x.at("block").get<int>(), b + 1) << x;
      EXPECT_EQ(x.at("epoch").get<int>(), e + 1) << x;
      EXPECT_EQ(x.at("joined").get<int>(), 1) << x;
    }
  const auto& two = j[4];
  const auto& all = j.back();
  EXPECT_EQ(two.at("block").get<int>(), 0) << two;
  EXPECT_EQ(two.at("joined").get<int>(), 2) << two;
  EXPECT_EQ(two.at("refit_changes").get<int64_t>(), -1) << two;  // a committee: no refit
  EXPECT_EQ(all.at("joined").get<int>(), 3) << all;
  EXPECT_GE(all.at("refit_changes").get<int64_t>(), 0) << all;  // --join-refit-margin
  EXPECT_GT(all.at("test_accuracy").get<double>(), 0.4) << r.out;  // chance is 0.1
  const Result text = run(bitnet_train(data_, "--channels 8 --input-bits 4 --segments 2 --epochs 1 --steps 3 --blocks 2"));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find(" 1..2 "), std::string::npos) << text.out;
}

TEST_F(Cli, BitnetTrainBadFlags) {
  expect_one_line_error(run(bitnet_train(data_, "--layer-pool sideways")), {"--layer-pool", "sideways"});
  expect_one_line_error(run(bitnet_train(data_, "--shift-copies 5")), {"--shift-copies", "5"});
  expect_one_line_error(run(bitnet_train(data_, "--blocks 0")), {"--blocks", "0"});
  expect_one_line_error(run(bitnet_train(data_, "--blocks 17")), {"--blocks", "17"});
  expect_one_line_error(run(bitnet_train(data_, "--channels 2048 --blocks 3")), {"--blocks", "4096"});
  expect_one_line_error(run(bitnet_train(data_, "--join-refit-margin -1")), {"--join-refit-margin", "-1"});
  expect_one_line_error(run(bitnet_train(data_, "--conv-margin 4,-1")), {"--conv-margin", "-1"});
  expect_one_line_error(run(bitnet_train(data_, "--refit-margin 4,-7")), {"--refit-margin", "-7"});
  expect_one_line_error(run(bitnet_train(data_, "--channels 0")), {"--channels", "0"});
  expect_one_line_error(run(bitnet_train(data_, "--segments 9")), {"--segments", "9"});
  expect_one_line_error(run(bitnet_train(data_, "--kind fuzzy")), {"--kind", "fuzzy"});
  expect_one_line_error(run(bitnet_train(data_, "--epochs 0")), {"--epochs", "0"});
  expect_one_line_error(run(bitnet_train(data_, "--layers 20")), {"--layers", "20"});
  expect_one_line_error(run(bitnet_train(data_, "--head-updates -3")), {"--head-updates", "-3"});
  expect_one_line_error(run(bitnet_train(data_, "--head-refit sometimes")), {"--head-refit", "sometimes"});
  expect_one_line_error(run(bitnet_train(data_, "--refit-margin -1")), {"--refit-margin", "-1"});
  expect_one_line_error(run(bitnet_train(data_, "--refit-rounds 0")), {"--refit-rounds", "0"});
  expect_one_line_error(run(bitnet_train(data_, "--blur 0")), {"--blur", "0"});
  expect_one_line_error(run(bitnet_train(data_, "--conv-margin -2")), {"--conv-margin", "-2"});
  // The library names bitnet::TrainOptions' fields (batch, input_bits, limit_test); the CLI its flags.
  expect_one_line_error(run(bitnet_train(data_, "--batch-size 0")), {"error: --batch-size: ", "found 0"});
  expect_one_line_error(run(bitnet_train(data_, "--input-bits 300")), {"error: --input-bits: ", "found 300"});
  expect_one_line_error(run(bitnet_train(data_, "--limit-test -5")), {"error: --limit-test: ", "found -5"});
  expect_one_line_error(run(bitnet_train(tmp_ / "nosuch", "")), {"nosuch"});
  expect_one_line_error(run("bitnet"), {"subcommand"});
}

TEST_F(Cli, BitnetTrainBadDataFile) {
  write_text(data_ / "train-images-idx3-ubyte", "not an idx file");
  fs::remove(data_ / "train-images-idx3-ubyte.gz");
  const Result r = run(bitnet_train(data_, "--epochs 1 --steps 1"));
  EXPECT_NE(r.code, 0);
  EXPECT_LT(r.code, 124);
  EXPECT_NE(r.err.find("train-images-idx3-ubyte"), std::string::npos) << r.err;
}

TEST_F(Cli, BitnetTrainLearnsMnist) {
  const fs::path mnist = fs::path(EMBER_SOURCE_DIR) / "../shared/data/mnist";  // beside the project
  if (!fs::exists(mnist / "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "MNIST not found in " << mnist << " (four IDX .gz files); skipping";
  const Result r = run(bitnet_train(mnist, "--channels 32 --input-bits 8 --position-bits 24 --segments 2 --epochs 1 "
                                           "--batch-size 32 --steps 200 --updates 16 --limit-train 5000 "
                                           "--limit-test 1000 --json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(nonempty_lines(r.out).back());
  EXPECT_GT(j.at("test_accuracy").get<double>(), 0.25) << r.out;  // chance is 0.1
}

}  // namespace
