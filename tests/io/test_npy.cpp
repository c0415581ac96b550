// The .npy reader (ember/npy.h) on files as NumPy writes them (float32 and float64, format 1.0,
// 2.0 and 3.0) and on hostile ones, each refused with one line naming the file and the field; and
// targets_of / gather_targets (ember/train.h), which turn an array into a plan's targets.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "ember/error.h"
#include "ember/npy.h"
#include "ember/train.h"
#include "io/npy_util.h"

namespace fs = std::filesystem;

namespace {

class Npy : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "ember-npy-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string put(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    write_file(p, bytes);
    return p;
  }
  // The error read_npy (and parse_npy, from memory) throws for `bytes`: one line, starting with
  // the file's name, naming `field`.
  void expect_refused(const std::string& bytes, const std::string& field, const std::string& also = "") {
    const std::string p = put("bad.npy", bytes);
    for (int from_memory = 0; from_memory < 2; ++from_memory) {
      SCOPED_TRACE(from_memory ? "parse_npy" : "read_npy");
      try {
        if (from_memory) ember::parse_npy(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), p);
        else ember::read_npy(p);
        ADD_FAILURE() << "accepted a file that should be refused for " << field;
      } catch (const ember::Error& e) {
        const std::string m = e.what();
        EXPECT_EQ(m.rfind(p + ": " + field, 0), 0u) << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
        if (!also.empty()) {
          EXPECT_NE(m.find(also), std::string::npos) << m;
        }
      }
    }
  }
  fs::path dir_;
};

const std::vector<float> kSix{0.5f, -1.f, 2.25f, 3.f, -4.5f, 1e-3f};

TEST_F(Npy, ReadsFloat32AndFloat64InEveryVersion) {
  for (int major = 1; major <= 3; ++major) {
    SCOPED_TRACE(major);
    const ember::NpyArray a = ember::read_npy(put("a.npy", npy_file("<f4", "(3, 2)", bytes_of(kSix), major)));
    EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 2}));
    ASSERT_FALSE(a.is_f64);
    EXPECT_EQ(a.f32, kSix);
    const std::vector<double> d{1.0 / 3, -2e300, 7};
    const ember::NpyArray b = ember::read_npy(put("b.npy", npy_file("<f8", "(3,)", bytes_of(d), major)));
    EXPECT_EQ(b.shape, (std::vector<int64_t>{3}));
    ASSERT_TRUE(b.is_f64);
    EXPECT_EQ(b.f64, d);
  }
  // Higher ranks, double quotes, no trailing comma, and parse_npy on the same bytes.
  const std::string four = npy_raw("{\"shape\": (1, 3, 1, 2), \"fortran_order\": False, \"descr\": \"<f4\"}\n", bytes_of(kSix));
  EXPECT_EQ(ember::read_npy(put("c.npy", four)).shape, (std::vector<int64_t>{1, 3, 1, 2}));
  EXPECT_EQ(ember::parse_npy(reinterpret_cast<const uint8_t*>(four.data()), four.size(), "mem").f32, kSix);
}

TEST_F(Npy, RefusesHostileFilesWithOneLineNamingTheField) {
  const std::string good = npy_file("<f4", "(3, 2)", bytes_of(kSix));
  expect_refused(good.substr(0, good.size() - 3), "shape", "needs 24 bytes");          // truncated data
  expect_refused(good + "xx", "shape", "needs 24 bytes");                              // trailing bytes
  expect_refused(npy_file("<f4", "(1000, 2)", bytes_of(kSix)), "shape", "(1000, 2)");  // a lying shape
  expect_refused(npy_file("<f4", "(4294967296, 4294967296)", ""), "shape", "limit");   // product overflows
  expect_refused(npy_file("<f8", "(3037000500, 3037000500, 3037000500)", ""), "shape", "limit");
  expect_refused(npy_file("<f4", "(1234567890123456789,)", ""), "shape[0]", "digits");
  expect_refused(npy_file("<f4", "(3, 0)", ""), "shape[1]", "empty");
  expect_refused(npy_file("<f4", "()", ""), "shape", "scalar");
  expect_refused(npy_file("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 6)", bytes_of(kSix)), "shape", "at most 8");
  expect_refused(npy_file("<f4", "(-3, 2)", bytes_of(kSix)), "shape[0]", "integer");
  expect_refused(npy_file("<f4", "[3, 2]", bytes_of(kSix)), "shape", "tuple");
  expect_refused("\x93NUMPX" + good.substr(6), "magic");
  expect_refused("", "magic");
  expect_refused(good.substr(0, 8), "version", "prefix");
  expect_refused(npy_file("<f4", "(3, 2)", bytes_of(kSix), 4), "version", "4.0");
  expect_refused(npy_file("<f4", "(3, 2)", bytes_of(kSix), 1, "True"), "fortran_order", "True");
  expect_refused(npy_file("<f4", "(3, 2)", bytes_of(kSix), 1, "0"), "fortran_order");
  expect_refused(npy_file(">f4", "(3, 2)", bytes_of(kSix)), "descr", "'>f4'");
  expect_refused(npy_file("<i4", "(3, 2)", bytes_of(kSix)), "descr", "'<i4'");
  expect_refused(npy_file("|u1", "(3, 2)", bytes_of(kSix)), "descr");
  // Header lengths: past the end of the file, and beyond the 64 KiB limit (format 2.0's u32).
  std::string past = good;
  past[8] = char(0x60), past[9] = char(0xea);  // 60000
  expect_refused(past, "header length", "past the end");
  expect_refused(npy_raw(std::string(70000, ' '), "", 2), "header length", "limit");
  // The dict: missing, extra and repeated keys, unterminated, text after it, not a dict.
  expect_refused(npy_raw("{'descr': '<f4', 'fortran_order': False}\n", bytes_of(kSix)), "header", "missing key 'shape'");
  expect_refused(npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), 'x': 1}\n", bytes_of(kSix)),
                 "header", "unexpected key 'x'");
  expect_refused(npy_raw("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)}\n", bytes_of(kSix)),
                 "header", "twice");
  expect_refused(npy_raw("{'descr': '<f4, 'fortran_order': False, 'shape': (3, 2)}\n", bytes_of(kSix)), "descr");
  expect_refused(npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)} x\n", bytes_of(kSix)), "header",
                 "after the dict");
  expect_refused(npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)", bytes_of(kSix)), "header");
  expect_refused(npy_raw("__import__('os')\n", bytes_of(kSix)), "header", "expected '{'");
  expect_refused(npy_raw(std::string("{'descr\n\x01': 1}"), ""), "header", "unexpected key");
  // fuzz_npy's finding: a key holding a newline, then no ':' (the key was quoted raw in the field).
  expect_refused(npy_raw(std::string("{'de\nscr' 'x': 1}"), ""), "header 'de\\nscr'", "expected ':'");
  expect_refused(npy_raw("{'" + std::string(5000, 'k') + "' 1}", ""), "header '", "bytes)");  // a long key is clipped
}

TEST_F(Npy, RefusesWhatIsNotARegularFile) {
  const std::string fifo = (dir_ / "fifo.npy").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string loop = (dir_ / "loop.npy").string();  // a symlink to itself
  ASSERT_EQ(::symlink(loop.c_str(), loop.c_str()), 0);
  for (const std::string& p : {fifo, dir_.string(), (dir_ / "absent.npy").string(), std::string("/dev/zero"), loop}) {
    try {  // a FIFO without a writer would block a plain open, /dev/zero never ends: each must return at once
      ember::read_npy(p);
      ADD_FAILURE() << p;
    } catch (const ember::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(p), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

TEST_F(Npy, TargetsFitTheOutputAndTheSampleCount) {
  ember::NpyArray a = ember::read_npy(put("t.npy", npy_file("<f4", "(3, 2)", bytes_of(kSix))));
  const ember::Targets t = ember::targets_of(a, {2}, 3, "t.npy");
  EXPECT_EQ(t.count, 3);
  EXPECT_EQ(t.per, 2u);
  EXPECT_EQ(ember::targets_of(a, {1, 2, 1}, 3, "t.npy").per, 2u);  // [N, output size] for a [1, 2, 1] output
  auto refused = [&](ember::NpyArray v, std::vector<int> out, int64_t n, const std::string& needle) {
    try {
      ember::targets_of(std::move(v), out, n, "t.npy");
      ADD_FAILURE() << needle;
    } catch (const ember::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("t.npy: ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(a, {2}, 4, "expected [4, 2]");  // the wrong N
  refused(a, {3}, 3, "found [3, 2]");     // the wrong output size
  refused(a, {1, 1, 2}, 2, "shape");
  a.f32[3] = NAN;
  refused(a, {2}, 3, "value [1][1]");
  ember::NpyArray big;
  big.shape = {1, 1}, big.is_f64 = true, big.f64 = {1e300};  // finite, but not as float32
  refused(big, {1}, 1, "float32");
}

TEST_F(Npy, GatherCopiesRowsBySampleIndexIntoThePlansDtype) {
  ember::Model m;
  m.in_c = 2, m.in_h = 1, m.in_w = 1, m.num_classes = 7, m.loss = ember::LossKind::MSE;
  m.layers.resize(2);
  m.layers[0].kind = ember::LayerKind::Flatten;
  m.layers[1].kind = ember::LayerKind::Linear, m.layers[1].out = 2;
  for (ember::DType dt : {ember::DType::f32, ember::DType::f64})
    for (bool f64 : {false, true}) {
      ember::PlanOptions o;
      o.batch = 3, o.threads = 1, o.dtype = dt;
      ember::Plan plan(m, o);
      ember::NpyArray a;
      a.shape = {3, 2}, a.is_f64 = f64;
      for (float v : kSix) f64 ? a.f64.push_back(v) : a.f32.push_back(v);
      const ember::Targets t = ember::targets_of(a, plan.output_dims(), 3, "t.npy");
      const int64_t index[3] = {2, 0, 1};
      ember::gather_targets(plan, t, index, 3);
      for (int i = 0; i < 3; ++i)
        for (int k = 0; k < 2; ++k) {
          const double got = dt == ember::DType::f64 ? static_cast<double*>(plan.targets())[i * 2 + k]
                                                     : static_cast<float*>(plan.targets())[i * 2 + k];
          EXPECT_EQ(got, double(kSix[size_t(index[i] * 2 + k)])) << i << " " << k;
        }
    }
}

}  // namespace
