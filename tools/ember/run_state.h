// What `ember train` needs to stop and go on: the flags as JSON (stored in checkpoints and read
// back on --resume), the run's checkpoints (every N steps, keep the newest K), and SIGINT/SIGTERM
// turned into a stop at the end of the current step (blocked, then polled: no handler, no global).
#pragma once
#include <signal.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "ember/io.h"
#include "ember_support/files.h"

namespace ember::cli {

// The flags that define a run as JSON, and back. On resume, flags the user gives that would
// change the run's arithmetic are errors naming the flag and the checkpoint's value; --epochs,
// --data, --threads and --isa may be given (threads and ISA change the rounding: bit-identity
// is only promised for the checkpoint's own). Output flags (--out, --save, --metrics,
// --profile, --checkpoint-dir) are never restored: a resume writes only where it is told.
// Returns, for each flag whose value came from the checkpoint, where it was stored (for errors).
nlohmann::json train_args_json(const TrainArgs& a, uint32_t train_crc, int64_t train_count);
std::map<std::string, std::string> resume_args(TrainArgs& a, const CLI::App& cmd, const CheckpointInfo& info);
// The metrics lines of the epochs a checkpoint had finished (absent in older checkpoints: none).
std::vector<std::string> metrics_so_far(const CheckpointInfo& info);

// CRC-32 of a training set's images and labels: a resumed run checks it has the same data.
uint32_t dataset_crc(const Dataset& d);

// Blocks SIGINT and SIGTERM in this thread (the pool's workers always block them) from the
// start of training until destroyed; taken() polls for one without blocking and returns its
// number, or 0. Before it exists, the two signals end ember at once (main's handler).
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

// A run's checkpoints: DIR/ckpt-<step>.safetensors, every N steps, the newest K of its own kept
// (another run's checkpoints in the directory are never deleted). The directory is locked
// (DirLock) from lock() or the first save to the end of the run. Each checkpoint's configuration
// carries the metrics lines of the epochs finished so far.
class Checkpoints {
 public:
  Checkpoints(std::string dir, int64_t every, int keep, nlohmann::json config);
  // Locks the directory and reads it: a checkpoint name that is not a regular file is refused;
  // `resumed` (a checkpoint file, or "" for a new run) and the older ones beside it are this run's;
  // any other checkpoint there is another run's, refused when `refuse_foreign`, else kept.
  void lock(const std::string& resumed, bool refuse_foreign);
  bool foreign() const { return foreign_; }  // the directory holds another run's checkpoints
  void set_config(nlohmann::json config);  // the run's flags (train_args_json), stored in each checkpoint
  void add_metrics(const std::string& line);
  const std::string& dir() const { return dir_; }
  const std::string& last() const { return last_; }  // the newest good one ("" if none)
  void set_last(const std::string& path) { last_ = path; }
  // Saves when `step` (steps done since the run began) is a multiple of N.
  void maybe_save(Plan& plan, const TrainState& next, int64_t step);
  // Saves now (creating and locking the directory); errors name the step and the last good checkpoint.
  void save(Plan& plan, const TrainState& next, int64_t step);

 private:
  std::string dir_, last_, resumed_;
  nlohmann::json config_;
  DirLock lock_;
  std::vector<std::string> own_;  // this run's checkpoints in the directory, oldest first
  bool foreign_ = false;
  int64_t every_;
  int keep_;
};

}  // namespace ember::cli
