// Files that hold state, each written atomically (a temporary file renamed over the target): the
// safetensors format (8-byte little-endian header length, JSON header, raw little-endian tensors)
// for weights in PyTorch's layouts and names, and checkpoints (a safetensors file with the
// optimizer state and the loop's position added). Every reader checks every header field against
// the file before it allocates or copies.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ember/plan.h"
#include "ember/train.h"

namespace ember {

// ---- safetensors ---------------------------------------------------------------------------

struct SafetensorsEntry {
  std::string name;
  std::string dtype;              // "F32", "F64", "F16", "BF16", "I64", ... (checked against a list)
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;    // byte range inside the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;        // in the header's order
  std::map<std::string, std::string> metadata;  // __metadata__ (string values only)
  uint64_t data_offset = 0;                     // where the data section starts in the file
  const SafetensorsEntry* find(const std::string& name) const;
};

// Parses and checks a header from the first `n` bytes of a file of `file_size` bytes: the length
// field against the file, the JSON, every tensor's dtype, rank, shape (products without
// overflow), byte range (inside the data, matching the shape, not overlapping another).
// Throws Error naming `file` and the field. Needs only the first 8 + header-length bytes.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t n, uint64_t file_size,
                                           const std::string& file);

// Weights: the plan's parameters under their PyTorch names and shapes (Linear [K, C], Conv2d
// [K, C/G, R, S]) as F32 (or BF16: rounded to nearest even, half the bytes; PyTorch loads
// either), with the model description and ember's version in __metadata__.
enum class WeightDtype { f32, bf16 };
void save_weights(Plan& plan, const std::string& path, WeightDtype dtype = WeightDtype::f32);
// Loads weights whose names and shapes match the plan's parameters (F32, F64, F16 or BF16,
// converted to f32). Tensors named "optimizer.*" (a checkpoint's) are ignored; any other extra
// tensor or missing one is an error naming it.
void load_weights(Plan& plan, const std::string& path);
// Checks, from the header alone and before any plan is built (so a small file cannot make a
// huge model allocate), that the file holds every parameter of `model` with its shape.
void check_weights_fit(const Model& model, const std::string& path);
// The __metadata__ of a weights file (its "model" is the description save_weights stored).
std::map<std::string, std::string> read_weights_metadata(const std::string& path);
// The same from bytes in memory (`name` is used in errors): the fuzzing entry point.
void load_weights_from_memory(Plan& plan, const uint8_t* bytes, size_t n, const std::string& name);

// ---- checkpoints ---------------------------------------------------------------------------

// A checkpoint is a safetensors file: the weights as save_weights writes them, the optimizer
// state as "optimizer.<state>.<param>" (PyTorch's names: exp_avg, exp_avg_sq, momentum_buffer),
// and in __metadata__ "ember_checkpoint": a JSON object with the optimizer's step count, the
// loop's TrainState, the data order's generator, and the caller's configuration (opaque JSON).
struct CheckpointInfo {
  std::string path;
  std::string ember_version;
  std::string model_json;      // the model description (parse_model_json)
  std::string config_json;     // what the caller stored (the CLI: its flags)
  std::string optimizer;       // "sgd", "momentum", "nesterov", "adam", "adamw"
  int64_t optimizer_steps = 0;
  TrainState state;            // where the run stood: the next step to take
};

void save_checkpoint(Plan& plan, const TrainState& state, const std::string& config_json,
                     const std::string& path);
// Reads and checks only the header (cheap): what run this is and where it stood.
CheckpointInfo read_checkpoint_info(const std::string& path);
// Restores the weights, the optimizer state and its step count into `plan` (built for the same
// model and optimizer; everything is checked first) and returns the header's information.
// batch: the run's batch size when it is not the plan's (gradient blocks: the plan holds one block).
CheckpointInfo load_checkpoint(Plan& plan, const std::string& path, int batch = 0);
CheckpointInfo load_checkpoint_from_memory(Plan& plan, const uint8_t* bytes, size_t n,
                                           const std::string& name);

// Checkpoint files in a directory: "ckpt-<step, 10 digits>.safetensors", oldest first.
std::vector<std::string> list_checkpoints(const std::string& dir);
std::string checkpoint_path(const std::string& dir, int64_t step);
// Deletes all but the newest `keep` checkpoints (and temporary files a crash left behind).
void prune_checkpoints(const std::string& dir, int keep);
// Deletes the temporary files a crashed or killed save left in dir: regular files named
// ".ember-XXXXXX" (the atomic writes' temporary names, six letters or digits) or
// ".ckpt-*.safetensors.tmp.*" (older versions'), not modified for `min_age_s` seconds; symlinks
// and other names are left. Call it only while no other process saves into dir (the CLI holds the
// directory's lock). Returns the names removed.
std::vector<std::string> remove_stale_temporaries(const std::string& dir, int min_age_s = 60);

}  // namespace ember
