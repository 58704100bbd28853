// Stop strings over streamed text: text goes in piece by piece, and what comes out never holds
// a stop string or the start of one that the next piece might complete, so a stream never
// shows part of a stop string it then takes back.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvc {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops = {});

  // The text that is safe to send now. Once a stop string is found, the text ends just before
  // it, stopped() is true and later pushes return nothing.
  std::string Push(std::string_view text);
  // The generation ended otherwise: the held-back text was no stop string after all.
  std::string Finish();

  bool stopped() const { return stopped_; }
  // The stop string that ended the text (the first found; empty while none has).
  const std::string& stop_word() const { return stop_word_; }
  // Bytes returned so far.
  size_t emitted() const { return emitted_; }

 private:
  std::string Emit(size_t n);

  std::vector<std::string> stops_;
  std::string held_;  // text not yet returned: the end of it may begin a stop string
  size_t emitted_ = 0;
  bool stopped_ = false;
  std::string stop_word_;
};

}  // namespace kvc
