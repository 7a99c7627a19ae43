// The control plane of a tensor-parallel group on loopback: a real head and a
// real worker exchanging hello, orders and heartbeats.
#include <doctest/doctest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "cluster/control_head.hpp"
#include "cluster/control_worker.hpp"

using namespace inferd::cluster;
using inferd::health::Level;
using inferd::health::Signal;
using namespace std::chrono_literals;

namespace {

Fingerprint fingerprint() {
  Fingerprint f;
  f.model_bytes = 1;
  f.model_hash = "test";
  f.tensor_parallel_size = 2;
  return f;
}

// The worker's health report, as the head last heard it, once it equals
// `want` (polls for up to 10 s: heartbeats come every 20 ms).
bool head_hears(const ControlHead& head, const std::vector<Signal>& want) {
  for (int i = 0; i < 500; ++i) {
    const auto ranks = head.ranks();
    const auto& got = ranks.at(1).health;
    bool same = got.size() == want.size();
    for (size_t k = 0; same && k < got.size(); ++k)
      same = got[k].monitor == want[k].monitor && got[k].level == want[k].level && got[k].reason == want[k].reason;
    if (same) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

}  // namespace

TEST_SUITE("cluster") {
  TEST_CASE("fingerprint: ranks with a fabric compare its link layer and MTU; a rank without one is not compared") {
    Fingerprint head = fingerprint(), worker = fingerprint();
    head.fabric = {"ens1f0np0", "mlx5_0", 1, 3, 4096, "Ethernet", "10.0.0.5"};
    worker.fabric = {"enp65s0f1np1", "mlx5_1", 1, 7, 1024, "Ethernet", "10.0.0.6"};
    CHECK(head.differs(worker, 1) ==
          "fabric MTU differs: the head has 4096 (interface ens1f0np0, mlx5_0 port 1, RoCE v2 GID index 3, address "
          "10.0.0.5, MTU 4096, Ethernet), rank 1 has 1024 (interface enp65s0f1np1, mlx5_1 port 1, RoCE v2 GID index "
          "7, address 10.0.0.6, MTU 1024, Ethernet)");
    // Interface, device and index are each node's own: they may differ.
    worker.fabric.mtu = 4096;
    CHECK(!head.differs(worker, 1));
    worker.fabric.link_layer = "InfiniBand";
    CHECK(head.differs(worker, 1).value().starts_with(
        "fabric link layer differs: the head has Ethernet (interface ens1f0np0,"));
    CHECK(head.differs(worker, 1).value().find("rank 1 has InfiniBand (interface enp65s0f1np1,") != std::string::npos);
    worker = fingerprint();  // no fabric: collectives over TCP
    CHECK(!head.differs(worker, 1));
    // A socket-only choice (no RDMA device) carries no MTU: never compared.
    worker.fabric.interface = "fab0";
    worker.fabric.address = "10.77.0.2";
    CHECK(!head.differs(worker, 1));
    CHECK(worker.fabric.describe() == "interface fab0 (sockets: no RDMA device), address 10.77.0.2");
    CHECK(FabricChoice{}.describe() == "none");
    // Through JSON, whole, and from a rank that sends no fabric at all.
    CHECK(Fingerprint::from_json(head.to_json()).fabric == head.fabric);
    CHECK(!head.differs(Fingerprint::from_json(head.to_json()), 1));
    auto o = head.to_json();
    o.erase("fabric");
    CHECK(Fingerprint::from_json(o).fabric.empty());
    CHECK(!head.differs(Fingerprint::from_json(o), 1));
  }

  TEST_CASE("fingerprint: ranks must agree on sizing the KV cache by their devices, which joins them in a collective") {
    Fingerprint head = fingerprint(), worker = fingerprint();
    head.device = worker.device = "cuda";  // the kind: cuda:0 and cuda:1 are both "cuda"
    head.kv_sized_by_device = true;
    CHECK(head.differs(worker, 1) ==
          "kv_sized_by_device (gpu_memory_utilization set) differs: the head has true, rank 1 has false");
    worker.kv_sized_by_device = true;
    CHECK(!head.differs(worker, 1));
    CHECK(Fingerprint::from_json(head.to_json()).kv_sized_by_device);
    auto o = head.to_json();
    o.erase("kv_sized_by_device");  // a rank that sends none sizes by bytes
    CHECK(!Fingerprint::from_json(o).kv_sized_by_device);
    worker.device = "cpu";
    CHECK(head.differs(worker, 1) == "device differs: the head has cuda, rank 1 has cpu");
  }

  TEST_CASE("control plane: a worker's health report reaches the head with its heartbeats; a re-forming starts it afresh") {
    ControlHead head({.address = "127.0.0.1", .port = 0, .world_size = 2, .fingerprint = fingerprint()});
    std::mutex mu;
    std::vector<Signal> report{{"meminfo", Level::Shed, "MemAvailable 90 MiB below the shed floor"}};
    WorkerOptions o{.master_addr = "127.0.0.1", .master_port = head.port(), .rank = 1, .fingerprint = fingerprint()};
    o.heartbeat_interval = 20ms;
    o.health = [&] {
      std::lock_guard lk(mu);
      return report;
    };
    ControlWorker worker(o);
    worker.join(10s, {});
    head.send_reform(0);
    auto order = worker.next();
    REQUIRE(order);
    CHECK(order->reform == 0);
    CHECK(head_hears(head, report));

    {
      std::lock_guard lk(mu);
      report = {{"log", Level::Critical, "nccl: 1 line(s) matched"}, {"psi", Level::Warn, "memory some avg10 12"}};
    }
    CHECK(head_hears(head, report));

    // The order to re-form drops what the worker reported before it.
    {
      std::lock_guard lk(mu);
      report.clear();
    }
    head.send_reform(1);
    CHECK(head.ranks().at(1).health.empty());
    order = worker.next();
    REQUIRE(order);
    CHECK(order->reform == 1);
    CHECK(head_hears(head, {}));
  }

  TEST_CASE("control plane: coverage orders reach a worker in order with plans, and the head waits for every answer") {
    ControlHead head({.address = "127.0.0.1", .port = 0, .world_size = 2, .fingerprint = fingerprint()});
    ControlWorker worker({.master_addr = "127.0.0.1", .master_port = head.port(), .rank = 1, .fingerprint = fingerprint()});
    worker.join(10s, {});
    head.send_reform(0);
    REQUIRE(worker.next()->reform == 0);

    CHECK(head.order_coverage(/*reset=*/true) == 1);
    inferd::engine::StepPlan plan;
    head.send_plan(plan);
    const uint64_t round = head.order_coverage(/*reset=*/false);
    auto o = worker.next();
    REQUIRE(o);
    CHECK(o->coverage == "reset");
    o = worker.next();
    REQUIRE(o);
    CHECK(o->is_plan());
    o = worker.next();
    REQUIRE(o);
    CHECK((o->coverage == "report" && o->round == round));

    // No answer yet: the wait names the rank.
    try {
      head.wait_coverage(round, 200ms);
      FAIL("no timeout");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).find("worker rank(s) 1 did not report") != std::string::npos);
    }
    worker.report_coverage(round, 110, 107, {"matmul.q8_0[n=64,k=576,t=1]"});
    const auto answers = head.wait_coverage(round, 10s);
    REQUIRE(answers.size() == 1);
    CHECK((answers[0].rank == 1 && answers[0].total == 110 && answers[0].covered == 107));
    CHECK(answers[0].missing == std::vector<std::string>{"matmul.q8_0[n=64,k=576,t=1]"});
  }
}
