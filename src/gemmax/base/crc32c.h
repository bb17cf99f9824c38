// CRC-32C (Castagnoli), the checksum of TFRecord framing (TensorBoard event files), and the
// "masked" form those files store so that a CRC of data that holds CRCs stays well mixed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gemmax {

// CRC-32C of n bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }

// TFRecord's mask: rotate right by 15 bits, add a constant.
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace gemmax
