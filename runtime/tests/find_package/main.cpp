// Links attnpack::runtime from an install tree and uses the C++ header: a missing archive is
// an attnpack::Error with its status, and the bundle folder is where the package says.
#include <attnpack/attnpack.hpp>

#include <cstdio>
#include <string>

int main() {
  try {
    attnpack::Bundle::open("/nonexistent/attnpack-0.1.0-sm_90.apk", "sm_90");
  } catch (const attnpack::Error& e) {
    if (e.status() != ATTNPACK_STATUS_ARCHIVE_NOT_FOUND) return 1;
    const std::string bundle_dir = BUNDLE_DIR;
    if (bundle_dir.size() < 9 || bundle_dir.substr(bundle_dir.size() - 9) != "/attnpack") return 1;
    std::printf("consumer: libattnpack %s, bundles in %s\n", attnpack_version_string(), BUNDLE_DIR);
    return 0;
  }
  return 1;
}
