// Not a test: the cost of a grammar's token mask per decode step on a model's
// real vocabulary. A valid JSON document is tokenized with the model's tokenizer
// and walked token by token; at each position the mask is computed (best of
// several runs), must equal trying every token (checked outside the timing) and
// must allow the document's next token. Prints per-position
// statistics as JSON: inside strings (the fast path) and elsewhere.
//   bench_grammar MODEL.gguf
#include <boost/json.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf_reader.hpp"
#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/matcher.hpp"
#include "engine/grammar/token_mask.hpp"
#include "engine/tokenizer.hpp"

namespace json = boost::json;
namespace g = inferd::engine::grammar;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "age": {"type": "integer"}, "score": {"type": "number"},
  "email": {"anyOf": [{"type": "string"}, {"type": "null"}]},
  "tags": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}, "maxItems": 3},
  "bio": {"type": "string"},
  "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
              "zip": {"type": ["integer", "null"]}}, "required": ["street", "city", "zip"], "additionalProperties": false}},
  "required": ["name", "age", "score", "email", "tags", "bio", "address"], "additionalProperties": false})";

const char* kDocument =
    R"({"name": "Ada Lovelace", "age": 36, "score": -12.75, "email": null, "tags": ["admin", "guest"], )"
    R"("bio": "Wrote the first published algorithm for Babbage's Analytical Engine, and saw that it could )"
    R"(act on \"symbols\" beyond numbers.\nBorn in London.", "address": {"street": "12 St James's Square", )"
    R"("city": "London", "zip": null}})";

struct Stats {
  std::vector<double> us;
  json::object summary() const {
    std::vector<double> v = us;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    if (v.empty()) return {{"positions", 0}};
    return {{"positions", v.size()},
            {"mean_us", sum / static_cast<double>(v.size())},
            {"median_us", v[v.size() / 2]},
            {"p99_us", v[std::min(v.size() - 1, v.size() * 99 / 100)]},
            {"max_us", v.back()}};
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: bench_grammar MODEL.gguf\n";
    return 2;
  }
  auto file = inferd::engine::GgufFile::open(argv[1]);
  auto tok = inferd::engine::Tokenizer::from_gguf(*file);
  const auto t0 = Clock::now();
  std::vector<std::string> bytes(tok->vocab_size());
  for (size_t id = 0; id < bytes.size(); ++id) bytes[id] = tok->piece(static_cast<int32_t>(id), true);
  g::TokenIndex index(std::move(bytes));
  const double index_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  json::object out{{"vocab", tok->vocab_size()}, {"index_build_ms", index_ms}};
  const auto schema = std::make_shared<const g::Grammar>(g::compile_json_schema(json::parse(kSchema), true));
  const auto object = std::make_shared<const g::Grammar>(g::any_json_object());
  const std::vector<int32_t> doc = tok->encode(kDocument, false, false);
  const std::vector<int32_t> stops = tok->stop_ids();
  for (const auto& [name, gr] : {std::pair{"json_schema", schema}, std::pair{"json_object", object}}) {
    g::Matcher m(gr);
    g::TokenSet allowed;
    Stats in_string, elsewhere;
    double allowed_sum = 0;
    for (int32_t id : doc) {
      double best = 1e30;
      size_t n = 0;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t = Clock::now();
        n = index.allowed(m, stops, allowed);
        best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t).count());
      }
      allowed_sum += static_cast<double>(n);
      // Outside the timing: the mask must equal trying every token.
      for (size_t t = 0; t < index.size(); ++t) {
        const auto tid = static_cast<int32_t>(t);
        const bool stop = std::find(stops.begin(), stops.end(), tid) != stops.end();
        const bool want = stop ? m.can_end() : !index.bytes(tid).empty() && m.accepts(index.bytes(tid));
        if (g::contains(allowed, tid) != want) {
          std::cerr << name << ": the mask " << (want ? "misses" : "wrongly allows") << " token " << tid << " `"
                    << index.bytes(tid) << "`\n";
          return 1;
        }
      }
      (m.string_room() >= 0 ? in_string : elsewhere).us.push_back(best);
      if (!g::contains(allowed, id) || !m.accept(index.bytes(id))) {
        std::cerr << name << ": the document's token " << id << " `" << index.bytes(id) << "` is not allowed\n";
        return 1;
      }
    }
    if (!m.finished()) {
      std::cerr << name << ": the document did not finish the grammar\n";
      return 1;
    }
    Stats all;
    all.us = in_string.us;
    all.us.insert(all.us.end(), elsewhere.us.begin(), elsewhere.us.end());
    out[name] = json::object{{"all", all.summary()},
                             {"in_string", in_string.summary()},
                             {"elsewhere", elsewhere.summary()},
                             {"mean_allowed_tokens", allowed_sum / static_cast<double>(doc.size())}};
  }
  std::cout << json::serialize(out) << "\n";
  return 0;
}
