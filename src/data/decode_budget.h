// The bytes that images being read and decoded at once may hold together: each read or decode
// first reserves its estimate (from the header) and waits until it fits, so N threads decoding
// large images cannot multiply the peak memory by N. One estimate over the budget runs alone.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace ember {

class DecodeBudget {
 public:
  explicit DecodeBudget(uint64_t bytes) : cap_(bytes) {}
  // Holds `bytes` of the budget while alive.
  class Hold {
   public:
    Hold(DecodeBudget* b, uint64_t bytes) : b_(b), n_(bytes) {
      if (b_) b_->take(n_);
    }
    ~Hold() {
      if (b_) b_->give(n_);
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    DecodeBudget* b_;
    uint64_t n_;
  };

 private:
  void take(uint64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return used_ == 0 || used_ + n <= cap_; });
    used_ += n;
  }
  void give(uint64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      used_ -= n;
    }
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t cap_, used_ = 0;
};

}  // namespace ember
