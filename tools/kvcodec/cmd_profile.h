// `kvcodec profile`, which `kvcodec calibrate --profile` also runs once the calibration is written.
#pragma once

#include <cstdint>
#include <string>

#include "cli_common.h"

namespace kvcodec_cli {

struct ProfileArgs {
  std::string model = DefaultModel(), text, calibration, out;
  uint32_t docs = 0, ctx = 0, cont = 0;
  int threads = 0;
  bool json = false, quiet = false;
};

int RunProfile(const ProfileArgs& a);

}  // namespace kvcodec_cli
