// A layer spec of a kind, with its node name and inputs: what the built-in models'
// builders (convnext_models.cpp, resnet_models.cpp) assemble their layers from.
#pragma once
#include <string>
#include <vector>

#include "ember/model.h"

namespace ember {

inline LayerSpec named_spec(LayerKind k, const std::string& name, std::vector<std::string> inputs = {}) {
  LayerSpec s;
  s.kind = k;
  s.name = name;
  s.inputs = std::move(inputs);
  return s;
}

}  // namespace ember
