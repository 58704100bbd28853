// A progress line with rate and ETA on stderr, for long work (evaluation, calibration).
// Redrawn in place on a terminal; on a pipe or file, printed at most every few seconds.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace kvc {

class ProgressBar {
 public:
  ProgressBar(std::string label, size_t total, bool enabled = true);
  ~ProgressBar();
  void Advance(size_t n = 1);
  void Finish();

 private:
  void Draw(bool force);

  std::string label_;
  size_t total_;
  size_t done_ = 0;
  size_t drawn_ = static_cast<size_t>(-1);  // done_ at the last draw
  bool enabled_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kvc
