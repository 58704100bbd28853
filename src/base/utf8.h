// Text that leaves kvcodec is valid UTF-8, whatever bytes produced it. A model's tokens are
// arbitrary bytes: with byte-fallback vocabularies one character arrives as several tokens
// (an emoji as four), so a single token's piece is often not valid UTF-8 on its own, and a
// model may emit byte sequences that never form a character at all. Hostile files and requests
// carry arbitrary bytes into error messages, too.
#pragma once

#include <string>
#include <string_view>

namespace kvc {

// True when `text` is well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view text);

// `bytes` with every ill-formed sequence replaced by U+FFFD (one per maximal ill-formed subpart,
// as the Unicode standard recommends), so the result is always valid UTF-8.
std::string ToValidUtf8(std::string_view bytes);

// Joins pieces of text that may split a character between them (a model's token pieces) into
// valid UTF-8, as early as possible: Push returns everything that is complete, holding back only
// the bytes of a character whose remaining bytes may still arrive (at most 3). Bytes that can
// never become a character are replaced by U+FFFD at once. Finish ends the stream: a character
// still incomplete is replaced by U+FFFD. The concatenation of every returned string is
// ToValidUtf8 of the concatenated input.
class Utf8Stream {
 public:
  std::string Push(std::string_view bytes);
  std::string Finish();
  // Bytes held back, waiting for the rest of their character.
  size_t pending() const { return pending_.size(); }

 private:
  std::string pending_;
};

// For messages and logs: valid UTF-8 on one line. Control characters (C0 including newline and
// tab, DEL, C1) are written as \xNN, so a hostile string can neither forge a second line nor
// send escape sequences to a terminal; a NUL no longer cuts the message short.
std::string PrintableOneLine(std::string_view text);

}  // namespace kvc
