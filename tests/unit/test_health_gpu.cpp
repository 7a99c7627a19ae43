// The gpu monitor: classification as plain functions, and the monitor against
// the fake NVML library (tests/nvml/fake_nvml.cpp) playing scripts.
#include <doctest/doctest.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/config.hpp"
#include "daemon/monitor_settings.hpp"
#include "health/gpu_monitor.hpp"

using namespace inferd;
using namespace inferd::health;

namespace {

GpuReading healthy(int gpu = 0) {
  GpuReading r;
  r.gpu = gpu;
  r.readable = true;
  r.memory_used = 2ull << 30;
  r.memory_total = 80ull << 30;
  r.temperature_c = 45;
  r.ecc_corrected = 0;
  r.ecc_uncorrected = 0;
  r.clock_reasons = 0;
  return r;
}

// A script file for the fake NVML, removed when the test ends.
struct Script {
  std::filesystem::path path;
  explicit Script(const std::string& text) {
    path = std::filesystem::temp_directory_path() / ("inferd-fake-nvml-" + std::to_string(::getpid()) + ".txt");
    std::ofstream(path) << text;
    ::setenv("INFERD_FAKE_NVML_SCRIPT", path.c_str(), 1);
  }
  ~Script() {
    ::unsetenv("INFERD_FAKE_NVML_SCRIPT");
    std::filesystem::remove(path);
  }
};

GpuMonitorOptions fake(std::vector<int> gpus = {0}) {
  // A missing fake fails the test here, not as a crash reading a GPU never seen.
  REQUIRE_MESSAGE(std::filesystem::exists(INFERD_FAKE_NVML), "build tests/libfake_nvml.so: " INFERD_FAKE_NVML);
  GpuMonitorOptions o;
  o.gpus = std::move(gpus);
  o.library = INFERD_FAKE_NVML;
  return o;
}

}  // namespace

TEST_CASE("gpu: the Xids that make a GPU untrustworthy are critical, the others warn") {
  for (uint64_t x : {48, 63, 64, 79, 94, 95}) CHECK(xid_is_critical(x));
  for (uint64_t x : {13, 31, 43, 45, 74, 999}) CHECK_FALSE(xid_is_critical(x));
  CHECK(xid_text(79) == "Xid 79 (GPU has fallen off the bus)");
  CHECK(xid_text(13) == "Xid 13");
}

TEST_CASE("gpu: assess_gpu levels") {
  SUBCASE("healthy is ok, and says memory and temperature") {
    const Signal s = assess_gpu(healthy(), 0, {});
    CHECK(s.monitor == "gpu");
    CHECK(s.level == Level::Ok);
    CHECK(s.reason == "gpu0: 2048 of 81920 MiB used, 45 C");
  }
  SUBCASE("clocks slowed for heat or power warn; idle or an application clock setting does not") {
    auto r = healthy();
    r.clock_reasons = clock_reason::kHwThermalSlowdown | clock_reason::kGpuIdle;
    Signal s = assess_gpu(r, 0, {});
    CHECK(s.level == Level::Warn);
    CHECK(s.reason == "gpu0: clocks slowed: hw_thermal_slowdown");
    r.clock_reasons = clock_reason::kSwPowerCap;
    CHECK(assess_gpu(r, 0, {}).level == Level::Warn);
    r.clock_reasons = clock_reason::kGpuIdle | clock_reason::kApplicationsClocksSetting;
    CHECK(assess_gpu(r, 0, {}).level == Level::Ok);
  }
  SUBCASE("a critical Xid is critical, whatever else warns") {
    auto r = healthy(1);
    r.clock_reasons = clock_reason::kSwThermalSlowdown;
    const Signal s = assess_gpu(r, 0, {79, 13});
    CHECK(s.level == Level::Critical);
    CHECK(s.reason == "gpu1: Xid 79 (GPU has fallen off the bus)");
  }
  SUBCASE("any other Xid warns") {
    const Signal s = assess_gpu(healthy(), 0, {13, 13});
    CHECK(s.level == Level::Warn);
    CHECK(s.reason == "gpu0: Xid 13");
  }
  SUBCASE("uncorrected ECC errors since the baseline are critical; before it, or corrected ones, are not") {
    auto r = healthy();
    r.ecc_uncorrected = 3;
    r.ecc_corrected = 50;
    CHECK(assess_gpu(r, 3, {}).level == Level::Ok);
    CHECK(assess_gpu(r, std::nullopt, {}).level == Level::Ok);
    const Signal s = assess_gpu(r, 1, {});
    CHECK(s.level == Level::Critical);
    CHECK(s.reason == "gpu0: 2 uncorrected ECC error(s) since the baseline");
  }
  SUBCASE("a lost GPU is critical, an unreadable one warns") {
    GpuReading r;
    r.lost = true;
    r.error = "GPU is lost (NVML error 15)";
    CHECK(assess_gpu(r, 0, {}).level == Level::Critical);
    CHECK(assess_gpu(r, 0, {}).reason == "gpu0: lost (GPU is lost (NVML error 15))");
    r.lost = false;
    CHECK(assess_gpu(r, 0, {}).level == Level::Warn);
  }
}

TEST_CASE("gpu: the NVML device of a CUDA index goes through CUDA_VISIBLE_DEVICES") {
  CHECK(nvml_target(1, nullptr)->index == 1u);
  CHECK(nvml_target(0, "3,1")->index == 3u);
  CHECK(nvml_target(1, "3, 1")->index == 1u);
  CHECK(nvml_target(1, "GPU-0,GPU-abc")->uuid == "GPU-abc");
  CHECK_FALSE(nvml_target(2, "3,1"));
  CHECK_FALSE(nvml_target(0, "MIG-abc"));
  CHECK_FALSE(nvml_target(0, ""));
  CHECK_FALSE(nvml_target(-1, nullptr));
}

TEST_CASE("gpu: the GPUs watched are [health] gpu_devices, else the engine's CUDA device, else none") {
  CHECK(daemon::cuda_device_index("cuda") == 0);
  CHECK(daemon::cuda_device_index("cuda:3") == 3);
  CHECK_FALSE(daemon::cuda_device_index("cpu"));
  CHECK_FALSE(daemon::cuda_device_index("cuda:x"));
  daemon::Config c;
  CHECK(daemon::gpu_monitor_options(c).gpus.empty());
  CHECK_FALSE(daemon::gpu_monitor_options(c).engine_on_cuda);
  c.engine.device = "cuda:2";
  CHECK(daemon::gpu_monitor_options(c).gpus == std::vector<int>{2});
  CHECK(daemon::gpu_monitor_options(c).engine_on_cuda);
  c = daemon::parse_config_toml("[health]\ngpu_devices = \"0, 1,1\"\n", "x.toml");
  CHECK(c.health.gpu_devices == std::vector<int>{0, 1});
  CHECK(daemon::gpu_monitor_options(c).gpus == std::vector<int>{0, 1});
  CHECK_THROWS_WITH_AS(daemon::parse_config_toml("[health]\ngpu_devices = \"0,x\"\n", "x.toml"),
                       doctest::Contains("CUDA device indices"), daemon::ConfigError);
}

TEST_CASE("gpu: without the NVML library the monitor is inactive, and says so only when a GPU should be watched") {
  GpuMonitorOptions o;
  o.gpus = {0};
  o.library = "/nonexistent/libnvidia-ml.so.1";
  GpuMonitor m(o);
  auto obs = m.sample();
  CHECK_FALSE(obs.active);
  CHECK(obs.give_signal);
  CHECK(obs.signal.level == Level::Ok);
  CHECK(obs.signal.reason.find("inactive: NVML not loaded: cannot load /nonexistent/libnvidia-ml.so.1") == 0);
  GpuMonitor none({.gpus = {}, .library = "/nonexistent/libnvidia-ml.so.1"});
  CHECK_FALSE(none.sample().give_signal);
}

TEST_CASE("gpu: the monitor plays the fake NVML: normal, thermal throttle, Xid 79, then ok after a rebaseline") {
  Script script(
      "devices=2 mem_used=1073741824 mem_total=85899345920 temp=41 samples=1\n"
      "temp=91 reasons=0x40 samples=1\n"
      "xid=79 samples=1\n"
      "reasons=0\n");
  GpuMonitor m(fake({0, 1}));
  auto obs = m.sample();  // step 1
  REQUIRE(obs.active);
  REQUIRE(obs.gpus.size() == 2);
  CHECK(obs.gpus[0].memory_used == 1ull << 30);
  CHECK(obs.gpus[1].memory_total == 80ull << 30);
  CHECK(obs.gpus[0].temperature_c == 41u);
  CHECK(obs.signal.level == Level::Ok);
  obs = m.sample();  // step 2
  CHECK(obs.signal.level == Level::Warn);
  CHECK(obs.signal.reason == "gpu0: clocks slowed: hw_thermal_slowdown; gpu1: clocks slowed: hw_thermal_slowdown");
  CHECK(obs.gpus[0].clock_reasons == clock_reason::kHwThermalSlowdown);
  obs = m.sample();  // step 3: the event is queued, read at the next sample
  obs = m.sample();
  CHECK(obs.signal.level == Level::Critical);
  CHECK(obs.signal.reason.find("gpu0: Xid 79 (GPU has fallen off the bus)") == 0);
  CHECK(m.xid_counts() == std::map<std::pair<int, uint64_t>, uint64_t>{{{0, 79}, 1}});
  // It holds until the engine was reset.
  CHECK(m.sample().signal.level == Level::Critical);
  m.rebaseline();
  obs = m.sample();
  CHECK(obs.signal.level == Level::Ok);
  CHECK(m.xid_counts().at({0, 79}) == 1);
}

TEST_CASE("gpu: a new uncorrected ECC error is critical; the count at the first reading is the baseline") {
  Script script(
      "ecc_uncorrected=4 ecc_corrected=7 samples=1\n"
      "ecc_uncorrected=5\n");
  GpuMonitor m(fake());
  auto obs = m.sample();
  CHECK(obs.signal.level == Level::Ok);
  CHECK(obs.gpus[0].ecc_uncorrected == 4u);
  CHECK(obs.gpus[0].ecc_corrected == 7u);
  obs = m.sample();
  CHECK(obs.signal.level == Level::Critical);
  CHECK(obs.signal.reason == "gpu0: 1 uncorrected ECC error(s) since the baseline");
  m.rebaseline();
  CHECK(m.sample().signal.level == Level::Ok);
}

TEST_CASE("gpu: a lost GPU is critical; a GPU NVML does not know is not watched; no events is still watched") {
  SUBCASE("lost") {
    Script script("samples=1\nlost=1\n");
    GpuMonitor m(fake());
    CHECK(m.sample().signal.level == Level::Ok);
    const auto obs = m.sample();
    CHECK(obs.signal.level == Level::Critical);
    CHECK_FALSE(obs.gpus[0].readable);
    CHECK(obs.gpus[0].lost);
  }
  SUBCASE("unknown") {
    Script script("devices=1\n");
    GpuMonitor m(fake({3}));
    const auto obs = m.sample();
    CHECK_FALSE(obs.active);
    CHECK(obs.signal.reason == "inactive: none of the GPUs could be found through NVML");
  }
  SUBCASE("events not supported") {
    Script script("events=0 samples=1\nxid=79\n");
    GpuMonitor m(fake());
    CHECK(m.sample().active);
    CHECK(m.sample().signal.level == Level::Ok);
    CHECK(m.sample().signal.level == Level::Ok);
  }
}
