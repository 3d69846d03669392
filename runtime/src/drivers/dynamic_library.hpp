// dlopen of a driver library, kept open for the life of the process (a driver unloaded at
// exit while a stream still runs would crash; the OS reclaims it anyway).
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace attnpack {

class DynamicLibrary {
 public:
  // Tries each name in order and keeps the first that loads.
  explicit DynamicLibrary(std::initializer_list<const char*> names) {
    for (const char* name : names) {
      handle_ = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle_) {
        name_ = name;
        return;
      }
      const char* why = ::dlerror();
      if (error_.empty()) error_ = why ? why : std::string(name) + ": not found";
    }
  }
  bool loaded() const { return handle_ != nullptr; }
  const std::string& name() const { return name_; }
  // dlerror() of the first name tried, e.g. "libcuda.so.1: cannot open shared object file".
  const std::string& error() const { return error_; }

  // The symbol, or null when this version of the library lacks it.
  template <typename Function>
  Function symbol(const char* name) const {
    return reinterpret_cast<Function>(::dlsym(handle_, name));
  }

  // Binds a symbol the driver cannot work without; the first one missing is kept in
  // missing(), so a driver binds its whole table and then reports one clear reason.
  template <typename Function>
  void require(Function& function, const char* name) {
    function = symbol<Function>(name);
    if (!function && missing_.empty()) missing_ = name;
  }
  // "" when every required symbol was found.
  const std::string& missing() const { return missing_; }

 private:
  void* handle_ = nullptr;
  std::string name_, error_, missing_;
};

}  // namespace attnpack
