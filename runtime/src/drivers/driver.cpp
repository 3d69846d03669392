// Which driver serves a vendor, and what the current device is.
#include "../driver.hpp"
#include "../error.hpp"

namespace attnpack {

Driver& driver_for(Vendor vendor) { return vendor == Vendor::Amd ? hip_driver() : cuda_driver(); }

DeviceInfo detect_current_device() {
  std::string tried;
  attnpack_status status = ATTNPACK_STATUS_NO_DRIVER;
  for (Driver& (*driver)() : {cuda_driver, hip_driver}) {
    try {
      return driver().device_info();
    } catch (const Error& e) {
      // A driver without a device says more than a missing driver.
      if (e.status() != ATTNPACK_STATUS_NO_DRIVER) status = e.status();
      tried += (tried.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  fail(status, "cannot tell the device's arch: " + tried + " — pass the arch, or run where a GPU is");
}

}  // namespace attnpack
