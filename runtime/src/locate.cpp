#include "locate.hpp"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "error.hpp"

namespace attnpack {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string default_bundle_directory() {
  const char* override_dir = std::getenv("ATTNPACK_BUNDLE_DIR");
  if (override_dir && *override_dir) return override_dir;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&default_bundle_directory), &info) && info.dli_fname) {
    std::string library = info.dli_fname;
    size_t slash = library.rfind('/');
    return (slash == std::string::npos ? std::string(".") : library.substr(0, slash)) + "/attnpack";
  }
  return "attnpack";
}

std::string find_archive(const std::string& directory, const std::string& arch) {
  const std::string pattern = "attnpack-*-" + arch + ".apk";
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) {
    fail(ATTNPACK_STATUS_ARCHIVE_NOT_FOUND,
         "no " + pattern + " found: the bundle folder " + directory +
             " cannot be read — install the bundle beside libattnpack.so or set ATTNPACK_BUNDLE_DIR");
  }
  std::vector<std::string> matches;
  while (const dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind("attnpack-", 0) == 0 && ends_with(name, "-" + arch + ".apk")) matches.push_back(name);
  }
  ::closedir(dir);
  std::sort(matches.begin(), matches.end());
  if (matches.empty()) {
    fail(ATTNPACK_STATUS_ARCHIVE_NOT_FOUND,
         "no " + pattern + " in " + directory +
             " — build one with `attnpack build --arch " + arch + "`, or set ATTNPACK_BUNDLE_DIR");
  }
  if (matches.size() > 1) {
    std::string names;
    for (const std::string& name : matches) names += (names.empty() ? "" : ", ") + name;
    fail(ATTNPACK_STATUS_ARCHIVE_NOT_FOUND,
         "several archives for " + arch + " in " + directory + " (" + names +
             ") — keep one, or open one by path");
  }
  return directory + "/" + matches.front();
}

}  // namespace attnpack
