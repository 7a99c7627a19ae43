// A parsed chat template and its rendering. No Jinja engine for C++ is packaged
// in Debian 12 (apt-cache search jinja / minja finds only Python's jinja2), so
// this implements the part of Jinja2 that chat templates use, with the
// environment transformers renders them in (trim_blocks, lstrip_blocks,
// loop controls, tojson that keeps non-ASCII, raise_exception, strftime_now).
#pragma once
#include <ctime>
#include <memory>
#include <string_view>

#include "engine/jinja/ast.hpp"
#include "engine/jinja/value.hpp"

namespace inferd::engine::jinja {

class Template {
 public:
  // Throws SyntaxError ("line N: ...") for what Jinja2 refuses or this engine
  // does not implement.
  explicit Template(std::string_view source);

  // The text, and which of its bytes came from marked strings in `context`.
  // Throws RenderError ("line N: ...") where Jinja2 raises: raise_exception(),
  // an attribute of an undefined value, a type error. `now`: what
  // strftime_now() formats.
  Text render(const Dict& context, std::time_t now) const;

  // The template reads this variable somewhere.
  bool reads(const std::string& name) const { return program_->names.count(name) != 0; }

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace inferd::engine::jinja
