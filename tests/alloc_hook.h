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
