// Internal helpers of the report library: number formatting for labels and coordinates, the
// series palette, and small string utilities shared by the charts, the flame graph and the HTML.
#pragma once
#include <string>
#include <string_view>

namespace ember::report::detail {

// A pixel coordinate: two decimals, trailing zeros dropped ("12.5", "3").
std::string px(double v);

// Decimals needed to print multiples of `step` exactly (0.25 -> 2, 5 -> 0).
int decimals_for_step(double step);

// Fixed-point with `decimals` decimals; "-0" printed as "0".
std::string fixed(double v, int decimals);

// Integers with thousands separators ("1,234,567"); others with 3 significant digits past them.
std::string grouped(double v);

// A short human form for values in tables and tooltips: 4 significant digits ("0.2134",
// "26000", "1.235e+06"), "—" for non-finite values.
std::string short_num(double v);

// The i-th colour of the series palette (cycles).
const char* series_colour(size_t i);

// A number for a data-* attribute: up to 10 significant digits, exact for counts.
std::string num_attr(double v);

// The longest prefix of `s` of at most `bytes` bytes that does not split a UTF-8 sequence.
std::string utf8_prefix(std::string_view s, size_t bytes);

// Bytes as "1.5 KiB", "12.0 MiB" (exact bytes below 1 KiB).
std::string human_bytes(double bytes);

}  // namespace ember::report::detail
