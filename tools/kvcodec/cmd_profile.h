// `kvcodec profile`, which `kvcodec calibrate` also runs once the calibration is written.
#pragma once

#include <string>

#include "cli_common.h"
#include "quality/profile_measure.h"

namespace kvcodec_cli {

struct ProfileArgs {
  kvc::ProfileOptions o;       // progress: set from `quiet`
  std::string out;             // empty: kvc::DefaultProfilePath(model)
  std::string prefix_lengths;  // "a,b,c"; empty: the default lengths
  bool json = false, quiet = false;
  ProfileArgs() { o.model_path = DefaultModel(); }
};

// Measures the profile and writes it; `print`: the report too (as JSON with --json).
int RunProfile(ProfileArgs& a, bool print = true);

}  // namespace kvcodec_cli
