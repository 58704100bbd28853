#include "base/progress.h"

#include <unistd.h>

#include <cstdio>

namespace kvc {

ProgressBar::ProgressBar(std::string label, size_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  Draw(true);
}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Advance(size_t n) {
  done_ += n;
  Draw(false);
}

void ProgressBar::Finish() {
  if (finished_) return;
  finished_ = true;
  Draw(true);
  if (enabled_ && tty_) std::fputc('\n', stderr);
}

void ProgressBar::Draw(bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const double since_draw = std::chrono::duration<double>(now - last_draw_).count();
  if (!tty_ && done_ == drawn_) return;  // a log gets one line per state, not repeats
  if (!force && since_draw < (tty_ ? 0.2 : 5.0) && done_ < total_) return;
  drawn_ = done_;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const double eta = done_ ? elapsed * (1.0 - frac) / frac : 0.0;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(frac * kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = 0;
  std::fprintf(stderr, "%s%s [%s] %zu/%zu  %.1fs elapsed, ETA %.1fs%s", tty_ ? "\r" : "", label_.c_str(), bar, done_,
               total_, elapsed, eta, tty_ ? "  " : "\n");
  std::fflush(stderr);
}

}  // namespace kvc
