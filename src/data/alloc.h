// Allocation failures while loading data, named: what was being allocated, for which file, and
// how many bytes, instead of a bare "std::bad_alloc".
#pragma once
#include <cstdint>
#include <new>
#include <string>

#include "ember/error.h"

namespace ember {

// fn() with a std::bad_alloc in it turned into Error "WHERE: out of memory: N bytes for WHAT".
// `where` is already quoted ("--data 'dir/x.png'", "'dir/test_batch.bin'").
template <class Fn>
auto named_alloc(const std::string& where, const std::string& what, uint64_t bytes, Fn fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    throw Error(where + ": out of memory: " + std::to_string(bytes) + " bytes for " + what);
  }
}

}  // namespace ember
