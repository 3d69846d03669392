// Failures inside the library are `Error` exceptions carrying the public status and a message;
// the C API (api.cpp) is the only place that catches them, so nothing escapes the C boundary.
#pragma once

#include <stdexcept>
#include <string>

#include "attnpack/attnpack.h"

namespace attnpack {

class Error : public std::runtime_error {
 public:
  Error(attnpack_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  attnpack_status status() const { return status_; }

 private:
  attnpack_status status_;
};

[[noreturn]] inline void fail(attnpack_status status, const std::string& message) {
  throw Error(status, message);
}

// The calling thread's last failure message (attnpack_last_error).
void set_last_error(const std::string& message);
const char* last_error();

}  // namespace attnpack
