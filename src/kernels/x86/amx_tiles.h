// The AMX tile configuration every tile kernel uses (x86/sbgemm_amx.cpp: bf16, x86/int8_amx.cpp: u8 x s8):
// palette 1, tiles 0-7 all 16 rows x 64 bytes, loaded once per kernel call and released after.
// Include only from files built with -mamx-tile; in an anonymous namespace like the other x86 headers.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace ember {
namespace {

// tmm0-3 the C tiles (16 x 16 32-bit sums), tmm4-5 the A tiles, tmm6-7 the B tiles (16 rows of 64 bytes).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64);

// Loads the configuration on construction, releases the tiles on destruction: one per kernel call.
struct TileScope {
  TileScope() {
    static const TileConfig cfg{};
    _tile_loadconfig(&cfg);
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

}  // namespace
}  // namespace ember
