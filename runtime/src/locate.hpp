// Where archives are found: $ATTNPACK_BUNDLE_DIR, else <dir of libattnpack.so>/attnpack
// (where `cmake --install` puts them), and which file in that folder serves an arch.
#pragma once

#include <string>

namespace attnpack {

// The folder searched when the caller names none.
std::string default_bundle_directory();

// The one attnpack-*-<arch>.apk in `directory`; throws ARCHIVE_NOT_FOUND when there is none
// or several (which one to use is the caller's decision, not a guess).
std::string find_archive(const std::string& directory, const std::string& arch);

}  // namespace attnpack
