// Weights on disk in the safetensors format (8-byte little-endian header length, JSON header,
// raw little-endian tensors), in PyTorch's layouts and names, with the model description and
// ember's version in __metadata__. Saves are atomic (temporary file, fsync, rename, fsync dir).
#pragma once
#include <string>

#include "ember/plan.h"

namespace ember {

void save_weights(Plan& plan, const std::string& path);
// Checks the header length against the file size, the JSON, every tensor's dtype (F32), shape
// and byte range against the plan's parameters before copying. Throws Error naming path and field.
void load_weights(Plan& plan, const std::string& path);

}  // namespace ember
