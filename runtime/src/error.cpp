#include "error.hpp"

namespace attnpack {
namespace {
thread_local std::string last_error_message;
}  // namespace

void set_last_error(const std::string& message) { last_error_message = message; }
const char* last_error() { return last_error_message.c_str(); }

}  // namespace attnpack
