// Shared by the IDX reader tests (test_idx, test_idx_sets): byte builders for IDX files, raw
// and gzip writers, error capture and the IdxTest fixture (a fresh temp directory per test).
#pragma once
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ember/data.h"
#include "ember/error.h"

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

void put_be32(Bytes& b, uint32_t v) {
  b.push_back(uint8_t(v >> 24));
  b.push_back(uint8_t(v >> 16));
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}

// An IDX file: magic 0x000008<rank> (or an explicit magic), dims, then payload.
Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& payload, uint32_t magic = 0) {
  Bytes b;
  put_be32(b, magic ? magic : 0x800u + uint32_t(dims.size()));
  for (uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes pattern(size_t n, uint32_t seed = 1) {
  Bytes b(n);
  uint32_t x = seed;
  for (auto& v : b) {
    x = x * 1664525u + 1013904223u;
    v = uint8_t(x >> 24);
  }
  return b;
}

Bytes read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

void write_raw(const fs::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  ASSERT_TRUE(f.good()) << p;
}

// Writes b gzip-compressed with zlib; mode "wb0" gives stored (uncompressed) deflate blocks.
void write_gz(const fs::path& p, const Bytes& b, const char* mode = "wb9") {
  gzFile g = gzopen(p.c_str(), mode);
  ASSERT_NE(g, nullptr) << p;
  if (!b.empty()) {
    ASSERT_EQ(gzwrite(g, b.data(), unsigned(b.size())), int(b.size()));
  }
  ASSERT_EQ(gzclose(g), Z_OK);
}

// The peak resident set of this process so far, in KiB (it only ever grows).
[[maybe_unused]] long peak_rss_kib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

[[maybe_unused]] double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs f, which must throw ember::Error; returns the message.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ember::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-ember exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an ember::Error, nothing was thrown";
  return "";
}

// The message must be one line and contain every one of `parts`.
void expect_msg(const std::string& msg, std::initializer_list<std::string> parts) {
  ::testing::Test::RecordProperty("message", msg);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "missing \"" << p << "\" in: " << msg;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ember_idx_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path path(const std::string& name) const { return dir_ / name; }

  // b gzip-compressed by zlib (through a scratch file), as bytes.
  Bytes gz_of(const Bytes& b, const char* mode = "wb9") {
    auto p = path("scratch.gz");
    write_gz(p, b, mode);
    Bytes out = read_file(p);
    fs::remove(p);
    return out;
  }

  // Writes a small consistent image/label pair; returns {images, labels} paths.
  std::pair<std::string, std::string> write_pair(const std::string& prefix, uint32_t n,
                                                 bool gz, const Bytes* labels = nullptr) {
    Bytes lab(n);
    for (uint32_t i = 0; i < n; ++i) lab[i] = uint8_t(i % 10);
    if (labels) lab = *labels;
    auto ip = path(prefix + "-images-idx3-ubyte" + (gz ? ".gz" : ""));
    auto lp = path(prefix + "-labels-idx1-ubyte" + (gz ? ".gz" : ""));
    Bytes ib = idx_bytes({n, 3, 2}, pattern(size_t(n) * 6, n));
    Bytes lb = idx_bytes({uint32_t(lab.size())}, lab);
    if (gz) {
      write_gz(ip, ib);
      write_gz(lp, lb);
    } else {
      write_raw(ip, ib);
      write_raw(lp, lb);
    }
    return {ip.string(), lp.string()};
  }

  fs::path dir_;
};

}  // namespace
