// Whether a test binary may replace the global operator new to count or measure allocations:
// not under ThreadSanitizer, whose runtime defines operator new itself (a second definition does
// not link). Tests that need the replacement skip when EMBER_TEST_CAN_HOOK_NEW is 0.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define EMBER_TEST_CAN_HOOK_NEW 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMBER_TEST_CAN_HOOK_NEW 0
#endif
#endif
#ifndef EMBER_TEST_CAN_HOOK_NEW
#define EMBER_TEST_CAN_HOOK_NEW 1
#endif

#include <cstdlib>
#include <new>

// Defines this test binary's global operator new/delete family: malloc and free, calling
// ON_ALLOC(n) before every allocation of n bytes. Use at file scope, under
// #if EMBER_TEST_CAN_HOOK_NEW. GCC cannot see that the replacements pair malloc with free.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#define EMBER_REPLACE_GLOBAL_NEW(ON_ALLOC)                              \
  void* operator new(size_t n) {                                         \
    ON_ALLOC(n);                                                         \
    if (void* p = std::malloc(n ? n : 1)) return p;                      \
    throw std::bad_alloc();                                              \
  }                                                                      \
  void* operator new[](size_t n) { return operator new(n); }            \
  void operator delete(void* p) noexcept { std::free(p); }              \
  void operator delete[](void* p) noexcept { std::free(p); }            \
  void operator delete(void* p, size_t) noexcept { std::free(p); }      \
  void operator delete[](void* p, size_t) noexcept { std::free(p); }    \
  /* the nothrow forms too (std::stable_sort's buffer): else new and */  \
  /* delete come from two families, which ASan reports */                \
  void* operator new(size_t n, const std::nothrow_t&) noexcept {         \
    ON_ALLOC(n);                                                         \
    return std::malloc(n ? n : 1);                                       \
  }                                                                      \
  void* operator new[](size_t n, const std::nothrow_t& t) noexcept {     \
    return operator new(n, t);                                           \
  }                                                                      \
  void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); } \
  void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
