// ember's one exception type: a one-line message naming the file, field or flag, what was
// expected and what was found. The CLI prints it and exits non-zero.
#pragma once
#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ember
