// DeepSeek-V4's prompt encoding as a chat template. V4 ships no Jinja template
// (its reference encoding is Python code); this one renders the same text with
// the variables ChatTemplate gives, for checkpoints without a template of
// their own. See deepseek_v4_template.cpp for what it covers.
#pragma once
#include <string_view>

namespace inferd::engine {

std::string_view deepseek_v4_chat_template();

}  // namespace inferd::engine
