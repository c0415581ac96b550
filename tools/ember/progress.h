// Training progress for the CLI: on a terminal, one line redrawn in place (bar, %, samples/s, ETA)
// at most ten times a second; otherwise a plain line every `plain_every_s` seconds, so logs get
// periodic news without carriage returns. Called after every step; costs a clock read.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ember::cli {

class Progress {
 public:
  Progress(std::FILE* out, bool terminal, int epochs, double plain_every_s = 10.0)
      : out_(out), tty_(terminal), epochs_(epochs), plain_every_s_(plain_every_s) {}

  void step(int epoch, int64_t done, int64_t total) {
    const auto now = clock::now();
    if (epoch != epoch_) {
      epoch_ = epoch;
      epoch_start_ = now;
      last_ = now;
    }
    const double since = std::chrono::duration<double>(now - last_).count();
    if (tty_ ? since < 0.1 : since < plain_every_s_) return;
    last_ = now;
    const double el = std::chrono::duration<double>(now - epoch_start_).count();
    const double rate = el > 0 ? double(done) / el : 0;
    const double eta = rate > 0 ? double(total - done) / rate : 0;
    const int pct = total ? int(100 * done / total) : 100;
    if (tty_) {
      char bar[31];
      const int fill = total ? int(30 * done / total) : 30;
      for (int i = 0; i < 30; ++i) bar[i] = i < fill ? '#' : '-';
      bar[30] = 0;
      std::fprintf(out_, "\r\033[Kepoch %d/%d [%s] %3d%%  %.0f samples/s  ETA %.1f s", epoch, epochs_, bar,
                   pct, rate, eta);
      shown_ = true;
    } else {
      std::fprintf(out_, "  epoch %d/%d: %d%% (%lld/%lld samples), %.0f samples/s, ETA %.1f s\n", epoch,
                   epochs_, pct, (long long)done, (long long)total, rate, eta);
    }
    std::fflush(out_);
  }
  // Before printing a line of its own, the caller clears the redrawn line.
  void clear() {
    if (tty_ && shown_) std::fprintf(out_, "\r\033[K");
    shown_ = false;
  }

 private:
  using clock = std::chrono::steady_clock;
  std::FILE* out_;
  bool tty_;
  int epochs_;
  double plain_every_s_;
  int epoch_ = 0;
  bool shown_ = false;
  clock::time_point epoch_start_{}, last_{};
};

}  // namespace ember::cli
