// Prints the sha256 of stdin in hex: the runtime's implementation, for comparison with hashlib.
#include <cstdio>

#include "sha256.hpp"

int main() {
  attnpack::Sha256 hasher;
  unsigned char chunk[4093];  // odd-sized reads exercise the partial-block path
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), stdin)) > 0) hasher.update(chunk, n);
  attnpack::Sha256Digest digest = hasher.finish();
  std::printf("%s\n", attnpack::to_hex(digest.data(), digest.size()).c_str());
  return 0;
}
