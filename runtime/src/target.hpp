// What the runtime knows of a target: only what an archive's meta says of it
// (python/attnpack/targets.py writes it). The runtime picks its driver by vendor and holds no
// list of archs: a new target is a row of that table, not a change here.
#pragma once

#include <cstdint>
#include <string>

namespace attnpack {

enum class Vendor : uint8_t { Nvidia, Amd };

struct TargetRecord {
  Vendor vendor = Vendor::Nvidia;
  std::string image_kind;     // "cubin" (nvidia) or "hsaco" (amd)
  uint32_t wave_size = 32;
  uint32_t shared_bytes = 0;  // dynamic shared memory / LDS one block may use
};

inline const char* vendor_word(Vendor vendor) { return vendor == Vendor::Nvidia ? "nvidia" : "amd"; }

}  // namespace attnpack
