// Load progress on the default model: the weights stage goes tensor by tensor
// from 0 to every byte of the file's tensors, the later stages follow, nothing
// goes backwards, and the weights are in memory once the load returns.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/models/model_registry.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
using engine::LoadProgress;

namespace {

struct Report {
  std::string stage;
  uint64_t bytes_done, bytes_total;
  int tensors_done, tensors_total;
};

struct Recorder {
  std::vector<Report> reports;
  engine::LoadProgressFn fn() {
    return [this](const LoadProgress& p) {
      reports.push_back({std::string(p.stage), p.bytes_done, p.bytes_total, p.tensors_done, p.tensors_total});
    };
  }
};

std::unique_ptr<engine::GgufFile> open_default_model() {
  const auto path = test_paths::default_model();
  REQUIRE_MESSAGE(std::filesystem::exists(path), "default model missing at " << path << " (run tools/bootstrap.sh)");
  return engine::GgufFile::open(path);
}

uint64_t tensor_bytes(const engine::GgufFile& f) {
  uint64_t n = 0;
  for (const auto& t : f.tensors()) n += t.nbytes;
  return n;
}

// Totals fixed, counts never going back, and the last report complete.
void check_monotonic_to_total(const std::vector<Report>& r, uint64_t bytes_total, int tensors_total) {
  REQUIRE(!r.empty());
  for (size_t i = 0; i < r.size(); ++i) {
    CAPTURE(i);
    CHECK(r[i].bytes_total == bytes_total);
    CHECK(r[i].tensors_total == tensors_total);
    if (i > 0) {
      CHECK(r[i].bytes_done >= r[i - 1].bytes_done);
      CHECK(r[i].tensors_done >= r[i - 1].tensors_done);
    }
  }
  CHECK(r.back().bytes_done == bytes_total);
  CHECK(r.back().tensors_done == tensors_total);
}

}  // namespace

TEST_CASE("load progress: the weights stage reports every tensor, from 0 to the file's tensor bytes") {
  auto file = open_default_model();
  auto backend = kernels::make_cpu_backend(1);
  Recorder rec;
  engine::load_model(*file, *backend, engine::Precision::Fast, rec.fn());

  const auto& r = rec.reports;
  const int n = static_cast<int>(file->tensors().size());
  check_monotonic_to_total(r, tensor_bytes(*file), n);
  // One report before the first tensor, then one per tensor: the model uses all of them.
  REQUIRE(r.size() == size_t(n) + 1);
  CHECK(r.front().bytes_done == 0);
  CHECK(r.front().tensors_done == 0);
  for (size_t i = 0; i < r.size(); ++i) {
    CHECK(r[i].stage == "weights");
    CHECK(r[i].tensors_done == int(i));
  }
}

TEST_CASE("load progress: tensors an architecture leaves unused count as done when the stage ends") {
  auto file = open_default_model();
  Recorder rec;
  engine::WeightLoader w(*file, rec.fn());
  w.take(file->tensors().front());
  w.finish();
  const auto& r = rec.reports;
  REQUIRE(r.size() == 3);
  CHECK(r[1].tensors_done == 1);
  CHECK(r[1].bytes_done == file->tensors().front().nbytes);
  check_monotonic_to_total(r, tensor_bytes(*file), int(file->tensors().size()));
}

TEST_CASE("load progress: an engine reports weights, then tokenizer, then kv_cache, ending at the total") {
  Recorder rec;
  engine::EngineOptions o;
  o.model_path = test_paths::default_model();
  o.threads = 1;
  o.max_model_len = 256;
  o.kv_cache_bytes = 16 << 20;
  o.on_load_progress = rec.fn();
  auto file = open_default_model();
  engine::Engine eng(o);

  const auto& r = rec.reports;
  check_monotonic_to_total(r, tensor_bytes(*file), int(file->tensors().size()));
  std::vector<std::string> stages;
  for (const auto& x : r)
    if (stages.empty() || stages.back() != x.stage) stages.push_back(x.stage);
  CHECK(stages == std::vector<std::string>{"weights", "tokenizer", "kv_cache"});
  // The weights are complete before the later stages start.
  for (const auto& x : r)
    if (x.stage != "weights") CHECK(x.bytes_done == x.bytes_total);
}

TEST_CASE("load progress: every page of the weights is resident once the model is loaded") {
  auto file = open_default_model();
  auto backend = kernels::make_cpu_backend(1);
  auto model = engine::load_model(*file, *backend);
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  size_t missing = 0;
  for (const auto& t : file->tensors()) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(t.data) & ~(page - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(t.data) + t.nbytes;
    std::vector<unsigned char> vec((end - first + page - 1) / page);
    REQUIRE(::mincore(reinterpret_cast<void*>(first), end - first, vec.data()) == 0);
    for (unsigned char v : vec) missing += (v & 1) == 0;
  }
  CHECK(missing == 0);
}
