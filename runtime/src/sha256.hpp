// SHA-256 (FIPS 180-4). Archives hash their meta, index and every raw image with it; a small
// self-contained implementation keeps libattnpack free of a crypto library dependency.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace attnpack {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  Sha256Digest finish();

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(const void* data, size_t size);
std::string to_hex(const uint8_t* data, size_t size);

}  // namespace attnpack
