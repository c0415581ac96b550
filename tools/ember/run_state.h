// What `ember train` needs to stop and go on: the flags as JSON (stored in checkpoints and read
// back on --resume), the run's checkpoints (every N steps, keep the newest K), and SIGINT/SIGTERM
// turned into a stop at the end of the current step (blocked, then polled: no handler, no global).
#pragma once
#include <signal.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "ember/io.h"

namespace ember::cli {

// The flags that define a run (and where its outputs go) as JSON, and back. On resume, flags
// the user gives that would change the run's arithmetic are errors naming the flag and the
// checkpoint's value; output flags (--out, --save, --checkpoint-*, ...), --epochs, --data,
// --threads and --isa may be given (threads and ISA change the rounding: bit-identity is only
// promised for the checkpoint's own).
nlohmann::json train_args_json(const TrainArgs& a, uint32_t train_crc, int64_t train_count);
void resume_args(TrainArgs& a, const CLI::App& cmd, const CheckpointInfo& info);

// CRC-32 of a training set's images and labels: a resumed run checks it has the same data.
uint32_t dataset_crc(const Dataset& d);

// Blocks SIGINT and SIGTERM in this thread and every thread it starts (the pool's), until
// destroyed; taken() polls for one without blocking and returns its number, or 0.
class SignalStop {
 public:
  SignalStop();
  ~SignalStop();
  SignalStop(const SignalStop&) = delete;
  SignalStop& operator=(const SignalStop&) = delete;
  int taken();

 private:
  sigset_t set_{}, old_{};
};

// A run's checkpoints: DIR/ckpt-<step>.safetensors, every N steps, the newest K kept.
class Checkpoints {
 public:
  Checkpoints(std::string dir, int64_t every, int keep, std::string config_json);
  const std::string& dir() const { return dir_; }
  const std::string& last() const { return last_; }  // the newest good one ("" if none)
  void set_last(const std::string& path) { last_ = path; }
  // Saves when `step` (steps done since the run began) is a multiple of N.
  void maybe_save(Plan& plan, const TrainState& next, int64_t step);
  // Saves now (creating the directory); errors name the step and the last good checkpoint.
  void save(Plan& plan, const TrainState& next, int64_t step);

 private:
  std::string dir_, config_, last_;
  int64_t every_;
  int keep_;
};

}  // namespace ember::cli
