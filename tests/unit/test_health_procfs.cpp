// The procfs monitors replayed from recorded files in a temporary root.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "health/meminfo_monitor.hpp"
#include "health/process_monitor.hpp"
#include "health/procfs.hpp"
#include "health/psi_monitor.hpp"

using namespace inferd::health;

namespace {

// A scratch procfs root; files are written relative to it.
struct ReplayRoot {
  std::filesystem::path dir;
  ReplayRoot() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "inferd-health-XXXXXX").string();
    dir = mkdtemp(tmpl.data());
  }
  ~ReplayRoot() { std::filesystem::remove_all(dir); }
  void write(const std::string& relative, const std::string& text) const {
    std::filesystem::create_directories((dir / relative).parent_path());
    std::ofstream(dir / relative) << text;
  }
  Procfs procfs() const { return Procfs{dir}; }
};

std::string pressure(double some10, double some60, double full10, double full60) {
  return "some avg10=" + std::to_string(some10) + " avg60=" + std::to_string(some60) +
         " avg300=0.00 total=12345\nfull avg10=" + std::to_string(full10) + " avg60=" + std::to_string(full60) +
         " avg300=0.00 total=678\n";
}

constexpr uint64_t GiB = 1ull << 30;

std::string meminfo(uint64_t total, uint64_t available) {
  return "MemTotal:       " + std::to_string(total / 1024) + " kB\nMemFree:         1000 kB\nMemAvailable:   " +
         std::to_string(available / 1024) + " kB\nSwapTotal:       2048 kB\nSwapFree:        1024 kB\n";
}

}  // namespace

TEST_SUITE("health") {
  TEST_CASE("health procfs: colon fields in kB and plain numbers; malformed values are nullopt") {
    const std::string text =
        "Name:\tinferd\nVmRSS:\t    2048 kB\nThreads:\t7\nBad:\t12 MB\nJunk:\tabc kB\nMemTotalX: 5 kB\n";
    CHECK(colon_field(text, "VmRSS") == 2048u * 1024);
    CHECK(colon_field(text, "Threads") == 7u);
    CHECK_FALSE(colon_field(text, "Bad"));
    CHECK_FALSE(colon_field(text, "Junk"));
    CHECK_FALSE(colon_field(text, "MemTotal"));  // a longer key is another key
    CHECK_FALSE(colon_field(text, "Name"));
    CHECK_FALSE(colon_field("", "VmRSS"));
    CHECK_FALSE(colon_field("VmRSS:", "VmRSS"));

    ReplayRoot root;
    root.write("a/b", "x\ny\n");
    root.write("d/1", "");
    root.write("d/2", "");
    CHECK(root.procfs().read("a/b") == "x\ny\n");
    CHECK_FALSE(root.procfs().read("missing"));
    CHECK(root.procfs().count_entries("d") == 2u);
    CHECK_FALSE(root.procfs().count_entries("missing"));
    CHECK(Procfs{}.root() == "/proc");
  }

  TEST_CASE("health psi: parse some/full lines; cpu without full; malformed lines are unavailable") {
    const PsiResource mem = parse_pressure(
        "some avg10=1.50 avg60=2.25 avg300=0.10 total=123456\nfull avg10=0.50 avg60=0.75 avg300=0.00 total=99\n");
    REQUIRE(mem.available);
    CHECK(mem.some.avg10 == doctest::Approx(1.5));
    CHECK(mem.some.avg60 == doctest::Approx(2.25));
    CHECK(mem.some.avg300 == doctest::Approx(0.1));
    CHECK(mem.some.total_us == 123456u);
    REQUIRE(mem.full);
    CHECK(mem.full->avg60 == doctest::Approx(0.75));

    const PsiResource cpu = parse_pressure("some avg10=3.00 avg60=0.00 avg300=0.00 total=5");
    CHECK(cpu.available);
    CHECK_FALSE(cpu.full);

    CHECK_FALSE(parse_pressure("").available);
    CHECK_FALSE(parse_pressure("garbage\n").available);
    CHECK_FALSE(parse_pressure("some avg10=abc avg60=0 avg300=0 total=0\n").available);
    CHECK_FALSE(parse_pressure("some avg10=1.0 avg60=0 avg300=0\n").available);  // total missing
    CHECK_FALSE(parse_pressure("some avg10=1.0 avg60 avg300=0 total=0\n").available);
    CHECK_FALSE(parse_pressure("full avg10=1.0 avg60=0 avg300=0 total=0\n").available);  // no some
    // A bad full line is dropped; an unknown extra field is ignored.
    const PsiResource odd = parse_pressure("some avg10=1 avg60=0 avg300=0 total=0 avg900=3\nfull avg10=x\n");
    CHECK(odd.available);
    CHECK_FALSE(odd.full);
  }

  TEST_CASE("health psi: memory pressure thresholds on avg10 and avg60 give warn, shed, critical") {
    ReplayRoot root;
    root.write("pressure/cpu", "some avg10=55.00 avg60=0.00 avg300=0.00 total=5\n");
    root.write("pressure/io", pressure(1, 1, 1, 1));
    PsiMonitor psi({}, root.procfs());

    root.write("pressure/memory", pressure(0.5, 0.2, 0.0, 0.0));
    PsiObservation obs = psi.sample();
    CHECK(obs.available);
    CHECK(obs.signal.monitor == "psi");
    CHECK(obs.signal.level == Level::Ok);
    CHECK(obs.cpu.available);
    CHECK(obs.cpu.some.avg10 == doctest::Approx(55.0));  // cpu is observed, not classified
    CHECK(obs.io.available);

    root.write("pressure/memory", pressure(12, 0, 0, 0));
    CHECK(psi.sample().signal.level == Level::Warn);
    root.write("pressure/memory", pressure(12, 0, 11, 0));
    obs = psi.sample();
    CHECK(obs.signal.level == Level::Shed);
    CHECK(obs.signal.reason.find("full avg10") != std::string::npos);
    root.write("pressure/memory", pressure(45, 0, 0, 0));
    CHECK(psi.sample().signal.level == Level::Critical);
    // Sustained: avg60 escalates at lower values than avg10.
    root.write("pressure/memory", pressure(1, 1, 0.5, 6));
    obs = psi.sample();
    CHECK(obs.signal.level == Level::Shed);
    CHECK(obs.signal.reason.find("full avg60") != std::string::npos);

    PsiOptions strict;
    strict.some_avg10 = {0.1, 0.2, 0.3};
    root.write("pressure/memory", pressure(0.25, 0, 0, 0));
    CHECK(PsiMonitor(strict, root.procfs()).sample().signal.level == Level::Shed);
  }

  TEST_CASE("health psi: a missing or malformed pressure file is Ok and unavailable, then recovers") {
    ReplayRoot root;
    PsiMonitor psi({}, root.procfs());
    PsiObservation obs = psi.sample();
    CHECK_FALSE(obs.available);
    CHECK(obs.signal.level == Level::Ok);
    CHECK(obs.signal.reason.find("unavailable") != std::string::npos);
    CHECK(psi.sample().signal.level == Level::Ok);  // repeated: still quiet

    root.write("pressure/memory", "some avg10=99.0 avg60=oops\n");
    obs = psi.sample();
    CHECK_FALSE(obs.available);
    CHECK(obs.signal.level == Level::Ok);

    root.write("pressure/memory", pressure(99, 99, 99, 99));
    obs = psi.sample();
    CHECK(obs.available);
    CHECK(obs.signal.level == Level::Critical);
  }

  TEST_CASE("health psi: a trigger outside procfs is unavailable and the caller falls back") {
    ReplayRoot root;
    PsiTrigger missing({}, root.procfs());
    CHECK_FALSE(missing.available());
    CHECK(missing.fd() == -1);
    CHECK_FALSE(missing.error().empty());
    CHECK(missing.wait(std::chrono::milliseconds(1)) == PsiTrigger::Wait::Unavailable);

    root.write("pressure/memory", pressure(0, 0, 0, 0));
    PsiTrigger replayed({}, root.procfs());
    CHECK_FALSE(replayed.available());
    CHECK(replayed.error().find("not on procfs") != std::string::npos);

    // The real kernel may refuse (no PSI, unprivileged window, container); either
    // way the trigger says so consistently, and an armed one waits with a timeout.
    PsiTrigger real;
    CHECK(real.available() == (real.fd() >= 0));
    CHECK(real.available() == real.error().empty());
    CHECK(real.available() == !real.trigger().empty());
    if (real.available()) {
      CHECK(real.trigger().starts_with("some "));
      const auto w = real.wait(std::chrono::milliseconds(5));
      CHECK((w == PsiTrigger::Wait::Timeout || w == PsiTrigger::Wait::Fired));
      PsiTrigger moved = std::move(real);
      CHECK(moved.available());
      CHECK_FALSE(real.available());
      CHECK(real.trigger().empty());
    } else {
      MESSAGE("kernel PSI trigger unavailable here: " << real.error());
    }
    PsiTriggerOptions bad;
    bad.window = std::chrono::microseconds(1);  // the kernel accepts 500 ms .. 10 s
    CHECK_FALSE(PsiTrigger(bad).available());
  }

  TEST_CASE("health meminfo: floors are bytes, a share of MemTotal, or the smaller of both") {
    CHECK(MemFloor{}.resolve(64 * GiB) == 0);
    CHECK(MemFloor{5 * GiB, 0}.resolve(64 * GiB) == 5 * GiB);
    CHECK(MemFloor{0, 0.5}.resolve(64 * GiB) == 32 * GiB);
    CHECK(MemFloor{5 * GiB, 0.5}.resolve(8 * GiB) == 4 * GiB);
    CHECK(MemFloor{5 * GiB, 0.5}.resolve(64 * GiB) == 5 * GiB);

    // The defaults: the seed values on a large machine, scaled down on a small one.
    const MeminfoOptions d;
    CHECK(d.warn.resolve(256 * GiB) == 12'000'000'000u);
    CHECK(d.shed.resolve(256 * GiB) == 8 * GiB);
    CHECK(d.critical.resolve(256 * GiB) == 1 * GiB);
    CHECK(d.warn.resolve(16 * GiB) == 4 * GiB);
    CHECK(d.shed.resolve(16 * GiB) == static_cast<uint64_t>(0.15 * 16 * GiB));
    CHECK(d.critical.resolve(16 * GiB) == static_cast<uint64_t>(0.05 * 16 * GiB));
  }

  TEST_CASE("health meminfo: absolute floors, the relative floor after a baseline, and the start-up reserve") {
    ReplayRoot root;
    MeminfoMonitor mem({}, root.procfs());
    root.write("meminfo", meminfo(256 * GiB, 100 * GiB));
    MeminfoObservation obs = mem.sample();
    REQUIRE(obs.available);
    CHECK(obs.signal.monitor == "meminfo");
    CHECK(obs.mem_total == 256 * GiB);
    CHECK(obs.mem_available == 100 * GiB);
    CHECK(obs.swap_total == 2048u * 1024);
    CHECK(obs.swap_free == 1024u * 1024);
    CHECK(obs.shed_floor == 8 * GiB);
    CHECK(obs.signal.level == Level::Ok);
    CHECK_FALSE(obs.baseline);

    root.write("meminfo", meminfo(256 * GiB, 11 * GiB));
    CHECK(mem.sample().signal.level == Level::Warn);
    root.write("meminfo", meminfo(256 * GiB, 7 * GiB));
    obs = mem.sample();
    CHECK(obs.signal.level == Level::Shed);
    CHECK(obs.signal.reason.find("shed floor") != std::string::npos);
    root.write("meminfo", meminfo(256 * GiB, GiB / 2));
    CHECK(mem.sample().signal.level == Level::Critical);

    // Relative: 100 GiB at the baseline; losing a quarter warns, half sheds.
    root.write("meminfo", meminfo(256 * GiB, 100 * GiB));
    REQUIRE(mem.capture_baseline());
    CHECK(mem.baseline() == 100 * GiB);
    root.write("meminfo", meminfo(256 * GiB, 80 * GiB));
    CHECK(mem.sample().signal.level == Level::Ok);
    root.write("meminfo", meminfo(256 * GiB, 70 * GiB));
    obs = mem.sample();
    CHECK(obs.signal.level == Level::Warn);
    CHECK(obs.signal.reason.find("baseline") != std::string::npos);
    CHECK(obs.baseline == 100 * GiB);
    root.write("meminfo", meminfo(256 * GiB, 45 * GiB));
    CHECK(mem.sample().signal.level == Level::Shed);

    // The reserve: what is left after taking the bytes must stay above the shed floor.
    root.write("meminfo", meminfo(256 * GiB, 20 * GiB));
    CHECK(mem.has_reserve(12 * GiB));
    CHECK_FALSE(mem.has_reserve(13 * GiB));
    CHECK_FALSE(mem.has_reserve(30 * GiB));
  }

  TEST_CASE("health meminfo: missing or malformed meminfo is Ok and unavailable, never a crash") {
    ReplayRoot root;
    MeminfoMonitor mem({}, root.procfs());
    CHECK_FALSE(mem.sample().available);
    CHECK_FALSE(mem.capture_baseline());
    CHECK(mem.has_reserve(1ull << 50));  // unknown: do not refuse start-up on a guess
    for (const char* bad : {"", "MemTotal: 100 kB\n", "MemTotal: x kB\nMemAvailable: 5 kB\n",
                            "MemTotal: 0 kB\nMemAvailable: 0 kB\n", "MemTotal: 100 kB\nMemAvailable: 5 pages\n",
                            "\xff\xfe\n\n::::\n"}) {
      root.write("meminfo", bad);
      const MeminfoObservation obs = mem.sample();
      CHECK_FALSE(obs.available);
      CHECK(obs.signal.level == Level::Ok);
    }
    // The real one parses.
    const MeminfoObservation real = MeminfoMonitor{}.sample();
    CHECK(real.available);
    CHECK(real.mem_total > 0);
    CHECK(real.mem_available <= real.mem_total);
  }

  TEST_CASE("health meminfo and process: a baseline taken on one thread while another samples") {
    // The supervisor thread samples while the thread that opens the warm-up gate
    // takes the baselines: the baselines are shared (a race ThreadSanitizer sees).
    ReplayRoot root;
    root.write("meminfo", meminfo(256 * GiB, 100 * GiB));
    root.write("self/status", "VmRSS:\t  1048576 kB\nThreads:\t12\n");
    MeminfoMonitor mem({}, root.procfs());
    ProcessMonitor proc({}, root.procfs());
    std::atomic<int> seen{0};
    std::thread sampler([&] {
      for (int i = 0; i < 100000; ++i) {
        const bool m = mem.sample().baseline.has_value();
        const bool p = proc.sample().baseline_rss.has_value();
        if (m && p) seen.fetch_add(1);
        if (seen.load() >= 3) break;
      }
    });
    REQUIRE(mem.capture_baseline());
    REQUIRE(proc.capture_baseline());
    sampler.join();
    CHECK(seen.load() >= 3);
    CHECK(mem.baseline() == 100 * GiB);
    CHECK(proc.baseline_rss() == GiB);
  }

  TEST_CASE("health process: RSS, threads and open fds; RSS growth over the baseline warns") {
    ReplayRoot root;
    auto status = [](uint64_t rss_kb) {
      return "Name:\tinferd\nVmPeak:\t 9999 kB\nVmRSS:\t  " + std::to_string(rss_kb) + " kB\nThreads:\t12\n";
    };
    root.write("self/status", status(1024 * 1024));
    for (int i = 0; i < 5; ++i) root.write("self/fd/" + std::to_string(i), "");
    ProcessMonitor proc({}, root.procfs());
    ProcessObservation obs = proc.sample();
    REQUIRE(obs.available);
    CHECK(obs.signal.monitor == "process");
    CHECK(obs.rss_bytes == GiB);
    CHECK(obs.threads == 12u);
    CHECK(obs.open_fds == 5u);
    CHECK(obs.signal.level == Level::Ok);

    REQUIRE(proc.capture_baseline());
    CHECK(proc.baseline_rss() == GiB);
    root.write("self/status", status(1200 * 1024));  // +176 MiB: under the 256 MiB minimum
    CHECK(proc.sample().signal.level == Level::Ok);
    root.write("self/status", status(1400 * 1024));  // +376 MiB and +37%
    obs = proc.sample();
    CHECK(obs.signal.level == Level::Warn);
    CHECK(obs.baseline_rss == GiB);

    root.write("self/status", "VmRSS:\tlots\nThreads:\t1\n");
    obs = proc.sample();
    CHECK_FALSE(obs.available);
    CHECK(obs.signal.level == Level::Ok);
    CHECK(obs.open_fds == 5u);

    const ProcessObservation self = ProcessMonitor{}.sample();
    CHECK(self.available);
    CHECK(self.rss_bytes > 0);
    CHECK(self.threads >= 1u);
    REQUIRE(self.open_fds);
    CHECK(*self.open_fds >= 3u);
  }
}
