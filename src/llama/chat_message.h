// A chat message as a request carries it and a chat template formats it.
#pragma once

#include <string>

namespace kvc {

struct ChatMessage {
  std::string role, content;  // content: a string, or the text parts joined
};

}  // namespace kvc
