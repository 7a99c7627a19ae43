// Finds stop strings in streamed text that arrives in arbitrary pieces: text that
// could still be the start of a stop string is held back until it can't be.
#pragma once
#include <string>
#include <vector>

namespace inferd::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends text; returns what can be emitted now. After a stop string is seen,
  // stopped() is true and nothing past its start is ever emitted.
  std::string push(const std::string& text);
  // The held-back tail, at the end of generation (empty once stopped).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace inferd::engine
