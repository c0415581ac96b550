// Shared by the CLI tests: running the `ember` binary under a timeout in a temp directory, and
// tiny learnable MNIST-format data sets (class c has a bright 7x7 block at its own place).
#pragma once
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

// A sanitizer build (gcc defines __SANITIZE_*, clang has __has_feature): it reserves far more
// address space than any `prlimit --as` allows, so tests under such a limit leave it out.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
[[maybe_unused]] constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
[[maybe_unused]] constexpr bool kSanitizedBuild = true;
#else
[[maybe_unused]] constexpr bool kSanitizedBuild = false;
#endif
#else
[[maybe_unused]] constexpr bool kSanitizedBuild = false;
#endif

// ---------------------------------------------------------------------------------------------
// Running the binary: EMBER_BINARY, or $EMBER_TEST_BINARY (to run a test against another build,
// e.g. an old commit's, to see it fail there).

[[maybe_unused]] std::string ember_binary() {
  const char* e = std::getenv("EMBER_TEST_BINARY");
  return e && *e ? e : EMBER_BINARY;
}

struct Result {
  int code = -1;        // exit status (128+N when a signal killed it, 124 on timeout)
  std::string out;      // stdout
  std::string err;      // stderr
  std::string cmd;
};

// Waits for a spawned child: its exit status, or 128 + the signal that killed it.
[[maybe_unused]] int wait_status(pid_t pid) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

[[maybe_unused]] Bytes read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const fs::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << p;
}

[[maybe_unused]] void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::trunc);
  f << s;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> nonempty_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}

// ---------------------------------------------------------------------------------------------
// Tiny MNIST-format data: class c has a bright 7x7 block at its own place, over dim noise.

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

Bytes idx(uint32_t magic, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b;
  put_be32(b, magic);
  for (uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

struct Images {
  Bytes pixels, labels;
};

Images make_images(int n, uint32_t seed) {
  Images im;
  uint32_t x = seed * 2654435761u + 12345u;
  auto rnd = [&] { return (x = x * 1664525u + 1013904223u) >> 24; };
  for (int i = 0; i < n; ++i) {
    const int c = int(rnd() % 10);
    im.labels.push_back(uint8_t(c));
    const int r0 = 2 + (c / 4) * 9, c0 = 1 + (c % 4) * 7;  // 3 rows x 4 columns of positions
    for (int r = 0; r < 28; ++r)
      for (int col = 0; col < 28; ++col) {
        const bool on = r >= r0 && r < r0 + 7 && col >= c0 && col < c0 + 7;
        im.pixels.push_back(uint8_t(on ? 200 + rnd() % 56 : rnd() % 40));
      }
  }
  return im;
}

const char* kTrainImg = "train-images-idx3-ubyte";
const char* kTrainLab = "train-labels-idx1-ubyte";
const char* kTestImg = "t10k-images-idx3-ubyte";
const char* kTestLab = "t10k-labels-idx1-ubyte";

void write_gz(const fs::path& p, const Bytes& b) {
  gzFile g = gzopen(p.c_str(), "wb");
  ASSERT_NE(g, nullptr) << p;
  ASSERT_EQ(gzwrite(g, b.data(), unsigned(b.size())), int(b.size()));
  ASSERT_EQ(gzclose(g), Z_OK);
}

// Writes the four files into dir (raw, or gzipped with the .gz suffix).
void write_dataset(const fs::path& dir, int n_train, int n_test, bool gz = false) {
  fs::create_directories(dir);
  const Images tr = make_images(n_train, 1), te = make_images(n_test, 2);
  const std::pair<const char*, Bytes> files[] = {
      {kTrainImg, idx(0x803, {uint32_t(n_train), 28, 28}, tr.pixels)},
      {kTrainLab, idx(0x801, {uint32_t(n_train)}, tr.labels)},
      {kTestImg, idx(0x803, {uint32_t(n_test), 28, 28}, te.pixels)},
      {kTestLab, idx(0x801, {uint32_t(n_test)}, te.labels)}};
  for (auto& [name, bytes] : files) {
    if (gz) write_gz(dir / (std::string(name) + ".gz"), bytes);
    else write_bytes(dir / name, bytes);
  }
}

// ---------------------------------------------------------------------------------------------
// Fixture: a fresh temp directory per test, holding `data/` (200 train / 50 test, raw).

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ember-cli-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    tmp_ = tmpl;
    data_ = tmp_ / "data";
    write_dataset(data_, 200, 50);
  }
  void TearDown() override {
    std::error_code ec;
    if (!tmp_.empty()) fs::remove_all(tmp_, ec);
  }

  // Runs `ember ARGS` (ARGS already shell-quoted where needed) under a timeout.
  Result run(const std::string& args, const std::string& env = "", int timeout_s = 60) {
    Result r;
    const fs::path out = tmp_ / "stdout.txt", err = tmp_ / "stderr.txt";
    r.cmd = env + (env.empty() ? "" : " ") + "timeout -k 5 " + std::to_string(timeout_s) + " " + quote(ember_binary()) + " " + args;
    const std::string full = r.cmd + " >" + quote(out) + " 2>" + quote(err) + " </dev/null";
    const int st = std::system(full.c_str());
    if (st != -1 && WIFEXITED(st)) r.code = WEXITSTATUS(st);
    else if (st != -1 && WIFSIGNALED(st)) r.code = 128 + WTERMSIG(st);
    r.out = read_text(out);
    r.err = read_text(err);
    return r;
  }

  // Runs `ember ARGS` as run() does, from a forked child whose only children are that command, so
  // the child's getrusage(RUSAGE_CHILDREN) is the command's peak RSS (kB, into *peak_kb): Linux
  // carries a child's peak up to whoever waits for it (ember, under `timeout`).
  Result run_peak(const std::string& args, long* peak_kb, int timeout_s = 60) {
    const fs::path report = tmp_ / "rusage.txt";
    const pid_t pid = ::fork();
    if (pid == 0) {
      const Result r = run(args, "", timeout_s);
      rusage ru{};
      ::getrusage(RUSAGE_CHILDREN, &ru);
      std::ofstream(report) << r.code << " " << ru.ru_maxrss << "\n" << r.cmd;
      std::_Exit(0);
    }
    EXPECT_EQ(wait_status(pid), 0);
    Result r;
    std::istringstream in(read_text(report));
    in >> r.code >> *peak_kb;
    std::getline(in >> std::ws, r.cmd);
    r.out = read_text(tmp_ / "stdout.txt"), r.err = read_text(tmp_ / "stderr.txt");
    return r;
  }

  // Common small-run flags: tiny batch, one thread, one epoch, mnist-mlp.
  std::string train_args(const std::string& extra, const fs::path& data = {}) {
    return "train --data " + quote((data.empty() ? data_ : data).string()) +
           " --model mnist-mlp --epochs 1 --batch-size 32 --threads 1 " + extra;
  }

  // Trains mnist-mlp for one epoch and saves its weights to tmp_/name.
  fs::path trained_weights(const std::string& name = "w.safetensors") {
    const fs::path w = tmp_ / name;
    Result r = run(train_args("--save " + quote(w.string())));
    EXPECT_EQ(r.code, 0) << r.cmd << "\n" << r.out << r.err;
    EXPECT_TRUE(fs::exists(w));
    return w;
  }

  fs::path tmp_, data_;
};

[[maybe_unused]] double final_accuracy(const std::string& out, const std::string& prefix) {
  const size_t p = out.find(prefix);
  if (p == std::string::npos) return -1;
  return std::atof(out.c_str() + p + prefix.size());
}

// The contract for bad input: non-zero exit that is not a crash or timeout, nothing on stdout
// about training, and stderr is exactly one line containing "error" and every `needles` string.
[[maybe_unused]] void expect_one_line_error(const Result& r, const std::vector<std::string>& needles) {
  if (std::getenv("EMBER_CLI_TEST_SHOW"))  // print every error line, to review the wording
    std::fprintf(stderr, "  [%d] %s", r.code, r.err.c_str());
  SCOPED_TRACE(r.cmd);
  EXPECT_NE(r.code, 0) << "stdout:\n" << r.out << "stderr:\n" << r.err;
  EXPECT_LT(r.code, 124) << "crashed, timed out or killed; stderr:\n" << r.err;
  const auto lines = nonempty_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << "expected a one-line error, stderr was:\n" << r.err;
  EXPECT_NE(lines[0].find("error"), std::string::npos) << lines[0];
  for (const auto& n : needles) EXPECT_NE(lines[0].find(n), std::string::npos) << "missing '" << n << "' in: " << lines[0];
  EXPECT_EQ(r.out.find("epoch "), std::string::npos) << "training started:\n" << r.out;
}

}  // namespace
