// Jinja2 syntax as far as chat templates use it. Anything else is a
// SyntaxError naming the line and the construct, so a template this engine
// cannot render faithfully is refused when the model loads, never guessed at.
#pragma once
#include <string_view>

#include "engine/jinja/ast.hpp"
#include "engine/jinja/lexer.hpp"

namespace inferd::engine::jinja {

Program parse(std::string_view source);

}  // namespace inferd::engine::jinja
