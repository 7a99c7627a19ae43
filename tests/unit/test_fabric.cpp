// The fabric pre-flight on recorded sysfs trees (tests/fabric/): reading, the
// choice of interface, device, port and GID index, and its refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fabric/env.hpp"
#include "fabric/netif.hpp"
#include "fabric/port_monitor.hpp"
#include "fabric/report.hpp"
#include "fabric/select.hpp"
#include "fabric/sysfs.hpp"
#include "fabric/verbs.hpp"
#include "inferd_config.h"

using namespace inferd::fabric;

namespace {

std::string tree(const std::string& name) {
  const char* s = std::getenv("INFERD_SOURCE_DIR");
  return std::string(s ? s : INFERD_TEST_SOURCE_DIR) + "/tests/fabric/" + name;
}

Decision decide_on(const std::string& name, const std::string& master, std::map<std::string, std::string> env = {},
                   const std::string& interface = "") {
  return decide(read_sysfs(tree(name)), Request{master, interface, std::move(env), {}});
}

}  // namespace

TEST_SUITE("fabric") {
  TEST_CASE("fabric: a recorded ConnectX tree reads as two ports with typed GIDs, interfaces and counters") {
    const FabricTable t = read_sysfs(tree("two-ports"));
    REQUIRE(t.ports.size() == 2);
    const Port& p = t.ports[0];
    CHECK(p.device == "mlx5_0");
    CHECK(p.port == 1);
    CHECK(p.active());
    CHECK(p.state == "ACTIVE");
    CHECK(p.phys_state == "LinkUp");
    CHECK(p.link_layer == "Ethernet");
    CHECK(p.rate == "200 Gb/sec (4X HDR)");
    CHECK(!p.active_mtu);
    REQUIRE(p.gids.size() == 6);  // index 6 is an empty slot
    CHECK(p.gids[3] == GidEntry{3, "0000:0000:0000:0000:0000:ffff:0a00:0005", "RoCE v2", "ens1f0np0"});
    CHECK(p.gids[2].type == "IB/RoCE v1");
    CHECK(gid_address(p.gids[3].gid) == "10.0.0.5");
    CHECK(gid_address(p.gids[5].gid) == "2001:db8:0:1::5");
    CHECK(!mapped_ipv4(p.gids[5].gid));
    CHECK(p.counters.at("symbol_error") == 0);
    CHECK(p.counters.at("port_rcv_data") == 1048576);
    CHECK(p.hw_counters.at("out_of_sequence") == 0);
    CHECK(t.ports[1].device == "mlx5_1");
    CHECK(t.interfaces.at("ens1f0np0") == NetInterface{"ens1f0np0", 9000, "up"});
    CHECK(t.interfaces.size() == 2);
  }

  TEST_CASE("fabric: sysfs without class/infiniband is no devices; a missing root is an error") {
    CHECK(read_sysfs(tree("no-devices")).ports.empty());
    CHECK(decide_on("no-devices", "10.0.0.1").skipped == "no RDMA devices; collectives over TCP");
    CHECK(decide_on("no-devices", "10.0.0.1").ok());
    CHECK_THROWS_WITH(read_sysfs(tree("nowhere")), doctest::Contains("not a directory"));
    CHECK(parse_numbered("4: ACTIVE") == std::pair<int, std::string>{4, "ACTIVE"});
    CHECK(parse_numbered("garbage") == std::pair<int, std::string>{0, "garbage"});
  }

  TEST_CASE("fabric: the master's address picks the port whose RoCE v2 IPv4 entry shares the longest prefix") {
    Decision d = decide_on("two-ports", "10.0.0.1");
    REQUIRE(d.ok());
    REQUIRE(d.choice);
    CHECK(*d.choice == Choice{"ens1f0np0", "mlx5_0", 1, 3, "10.0.0.5", 29});
    d = decide_on("two-ports", "10.1.0.1");
    REQUIRE(d.ok());
    CHECK(*d.choice == Choice{"ens1f1np1", "mlx5_1", 1, 3, "10.1.0.5", 29});
    // The node's own address as master (the head itself).
    CHECK(decide_on("two-ports", "10.1.0.5").choice->common_prefix_bits == 32);
  }

  TEST_CASE("fabric: two nodes with other interface names and indices resolve their own from the same master") {
    const Decision a = decide_on("two-ports", "10.0.0.1");
    const Decision b = decide_on("node-b", "10.0.0.1");
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(*a.choice == Choice{"ens1f0np0", "mlx5_0", 1, 3, "10.0.0.5", 29});
    CHECK(*b.choice == Choice{"enp65s0f1np1", "mlx5_1", 1, 7, "10.0.0.6", 29});
  }

  TEST_CASE("fabric: after a reboot moved the entries, the choice follows the address, not the old index") {
    const Decision before = decide_on("two-ports", "10.0.0.1");
    const Decision after = decide_on("rebooted", "10.0.0.1");
    REQUIRE(after.ok());
    CHECK(before.choice->gid_index == 3);
    CHECK(after.choice->gid_index == 5);
    CHECK(after.choice->address == "10.0.0.5");
    // An operator value that was right before the reboot is now the IPv6 entry.
    const Decision stale = decide_on("rebooted", "10.0.0.1", {{"NCCL_IB_GID_INDEX", "3"}});
    CHECK(stale.refusal ==
          "NCCL_IB_GID_INDEX=3 is the RoCE v2 entry for 2001:db8:0:1::5 on mlx5_0 port 1, not this node's address on "
          "the master's network; index 5 is the RoCE v2 entry for 10.0.0.5");
  }

  TEST_CASE("fabric: a down port is refused naming device, port and state") {
    const Decision d = decide_on("port-down", "10.1.0.1");
    REQUIRE(d.choice);
    CHECK(d.choice->device == "mlx5_1");
    CHECK(d.refusal == "mlx5_1 port 1: port is DOWN (physical state Disabled); it holds 10.1.0.5 on ens1f1np1");
    // The other port of the same node is fine.
    CHECK(decide_on("port-down", "10.0.0.1").ok());
  }

  TEST_CASE("fabric: an operator's NCCL_IB_GID_INDEX on a RoCE v1 entry names the index and the v2 index") {
    const Decision d = decide_on("two-ports", "10.0.0.1", {{"NCCL_IB_GID_INDEX", "2"}});
    CHECK(d.refusal ==
          "NCCL_IB_GID_INDEX=2 points at the IB/RoCE v1 entry for 10.0.0.5 on mlx5_0 port 1; index 3 is the RoCE "
          "v2 entry for 10.0.0.5");
    CHECK(decide_on("two-ports", "10.0.0.1", {{"NCCL_IB_GID_INDEX", "9"}}).refusal ==
          "NCCL_IB_GID_INDEX=9: mlx5_0 port 1 has no GID at index 9; index 3 is the RoCE v2 entry for 10.0.0.5");
    CHECK(decide_on("two-ports", "10.0.0.1", {{"NCCL_IB_GID_INDEX", "x"}}).refusal ==
          "NCCL_IB_GID_INDEX=x is not a GID index; the fabric says 3");
    CHECK(decide_on("two-ports", "10.0.0.1", {{"NCCL_IB_GID_INDEX", "3"}}).ok());
  }

  TEST_CASE("fabric: unset variables are exported; operator-set ones are verified in NCCL's list syntax") {
    Decision d = decide_on("two-ports", "10.0.0.1");
    REQUIRE(d.env.size() == 6);
    std::map<std::string, std::string> want = {{"NCCL_SOCKET_IFNAME", "ens1f0np0"}, {"GLOO_SOCKET_IFNAME", "ens1f0np0"},
                                               {"NCCL_IB_HCA", "mlx5_0:1"},         {"NCCL_IB_GID_INDEX", "3"},
                                               {"UCX_MEM_MMAP_HOOK_MODE", "none"},  {"UCX_RCACHE_MAX_UNRELEASED", "1024"}};
    for (const EnvCheck& e : d.env) {
      CHECK(want.at(e.name) == e.value);
      CHECK(!e.operator_value);
    }
    for (const std::string ok : {"ens1f0np0", "ens1", "=ens1f0np0", "^docker,lo", "eth,ens1f0"})
      CHECK(decide_on("two-ports", "10.0.0.1", {{"NCCL_SOCKET_IFNAME", ok}}).ok());
    CHECK(decide_on("two-ports", "10.0.0.1", {{"NCCL_SOCKET_IFNAME", "ens1f1np1"}}).refusal ==
          "NCCL_SOCKET_IFNAME=ens1f1np1 does not select ens1f0np0, the interface on the master's network");
    CHECK(!decide_on("two-ports", "10.0.0.1", {{"NCCL_SOCKET_IFNAME", "^ens1"}}).ok());
    CHECK(!decide_on("two-ports", "10.0.0.1", {{"NCCL_SOCKET_IFNAME", "=ens1"}}).ok());
    for (const std::string ok : {"mlx5_0", "mlx5_0:1", "=mlx5_0:1", "mlx5", "^mlx5_1"})
      CHECK(decide_on("two-ports", "10.0.0.1", {{"NCCL_IB_HCA", ok}}).ok());
    CHECK(decide_on("two-ports", "10.0.0.1", {{"NCCL_IB_HCA", "mlx5_1:1"}}).refusal ==
          "NCCL_IB_HCA=mlx5_1:1 does not select mlx5_0:1, the port on the master's network");
    CHECK(!decide_on("two-ports", "10.0.0.1", {{"NCCL_IB_HCA", "mlx5_0:2"}}).ok());
    CHECK(decide_on("two-ports", "10.0.0.1", {{"GLOO_SOCKET_IFNAME", "ens1f1np1"}}).refusal ==
          "GLOO_SOCKET_IFNAME=ens1f1np1 is not ens1f0np0, the interface on the master's network");
    CHECK(decide_on("two-ports", "10.0.0.1", {{"UCX_MEM_MMAP_HOOK_MODE", "bistro"}}).refusal.starts_with(
        "UCX_MEM_MMAP_HOOK_MODE=bistro lets UCX's registration cache grow"));
    CHECK(decide_on("two-ports", "10.0.0.1", {{"UCX_RCACHE_MAX_UNRELEASED", "512"}}).ok());
    CHECK(!decide_on("two-ports", "10.0.0.1", {{"UCX_RCACHE_MAX_UNRELEASED", "inf"}}).ok());
    // Every wrong value is named, not only the first.
    d = decide_on("two-ports", "10.0.0.1", {{"NCCL_IB_GID_INDEX", "2"}, {"NCCL_IB_HCA", "mlx5_1"}});
    CHECK(d.refusal.find("NCCL_IB_HCA=mlx5_1") != std::string::npos);
    CHECK(d.refusal.find("NCCL_IB_GID_INDEX=2") != std::string::npos);
  }

  TEST_CASE("fabric: export_env sets only what the operator left unset") {
    ::unsetenv("NCCL_SOCKET_IFNAME");
    ::setenv("NCCL_IB_HCA", "mlx5", 1);
    const Decision d = decide_on("two-ports", "10.0.0.1", process_env());
    REQUIRE(d.ok());
    const auto set = export_env(d.env);
    CHECK(std::string(std::getenv("NCCL_SOCKET_IFNAME")) == "ens1f0np0");
    CHECK(std::string(std::getenv("NCCL_IB_HCA")) == "mlx5");
    CHECK(std::find(set.begin(), set.end(), "NCCL_IB_HCA=mlx5_0:1") == set.end());
    CHECK(std::find(set.begin(), set.end(), "UCX_MEM_MMAP_HOOK_MODE=none") != set.end());
    for (const std::string& name : env_names()) ::unsetenv(name.c_str());
  }

  TEST_CASE("fabric: a configured interface restricts the choice; unknown ones and non-IPv4 masters are refused") {
    Decision d = decide_on("two-ports", "10.0.0.1", {}, "ens1f1np1");
    REQUIRE(d.ok());
    CHECK(d.choice->device == "mlx5_1");
    d = decide_on("node-b", "head.example", {}, "enp65s0f0np0");
    REQUIRE(d.ok());
    CHECK(d.choice->address == "10.1.0.6");
    CHECK(decide_on("two-ports", "10.0.0.1", {}, "eth9").refusal ==
          "interface eth9 carries no RDMA GID entry (interfaces with RDMA ports: ens1f0np0, ens1f1np1)");
    CHECK(decide_on("two-ports", "head.example").refusal ==
          "master address 'head.example' is not an IPv4 address; name the interface with [fabric] interface");
    CHECK(decide_on("two-ports", "192.168.1.1").refusal ==
          "no RoCE v2 address on the master's network 192.168.1.1 (this node holds 10.0.0.5, 10.1.0.5); name the "
          "interface with [fabric] interface");
    CHECK(decide_on("two-ports", "127.0.0.1").skipped.starts_with("master address 127.0.0.1 is loopback"));
  }

  TEST_CASE("fabric: only RoCE v1 entries for an address are refused naming the entry") {
    FabricTable t = read_sysfs(tree("two-ports"));
    for (Port& p : t.ports)
      for (GidEntry& g : p.gids) g.type = "IB/RoCE v1";
    CHECK(decide(t, {"10.0.0.1", "", {}}).refusal ==
          "no RoCE v2 GID entry with an IPv4 address on any port (mlx5_0 port 1 index 2 holds 10.0.0.5 as IB/RoCE v1 "
          "only)");
  }

  TEST_CASE("fabric: InfiniBand ports alone are not RoCE: nothing to choose, nothing refused") {
    FabricTable t = read_sysfs(tree("two-ports"));
    for (Port& p : t.ports) {
      p.link_layer = "InfiniBand";
      for (GidEntry& g : p.gids) g.ndev.clear();
    }
    const Decision d = decide(t, {"10.0.0.1", "", {}});
    CHECK(d.ok());
    CHECK(!d.choice);
    CHECK(d.skipped == "InfiniBand ports only: no RoCE port to choose, NCCL picks the HCA and GID itself");
    CHECK(!d.socket);
    // The socket transports still get the interface on the master's subnet.
    const Decision s = decide(t, {"10.0.0.1", "", {}, {{"ib0", "10.0.0.7", 16, false}}});
    CHECK(s.ok());
    REQUIRE(s.socket);
    CHECK(s.socket->interface == "ib0");
    CHECK(s.env.size() == 2);
  }

  TEST_CASE("fabric: the report shows every entry, the choice and each variable's source") {
    const FabricTable t = read_sysfs(tree("two-ports"));
    const std::string table = format_table(t);
    CHECK(table.find("mlx5_0 port 1: ACTIVE (LinkUp), Ethernet, 200 Gb/sec (4X HDR)") != std::string::npos);
    CHECK(table.find("RoCE v2      10.0.0.5") != std::string::npos);
    const Request r{"10.0.0.1", "", {{"NCCL_IB_GID_INDEX", "2"}}};
    const std::string text = format_decision(decide(t, r), r);
    CHECK(text.find("choice: interface ens1f0np0, device mlx5_0 port 1, RoCE v2 GID index 3 (10.0.0.5") !=
          std::string::npos);
    CHECK(text.find("NCCL_SOCKET_IFNAME=ens1f0np0 (unset: inferd exports it)") != std::string::npos);
    CHECK(text.find("NCCL_IB_GID_INDEX=2 (set by the operator; WRONG, the fabric says 3)") != std::string::npos);
    CHECK(text.find("refused: NCCL_IB_GID_INDEX=2") != std::string::npos);
  }

  TEST_CASE("fabric: with no RDMA device the socket interface is the one whose subnet holds the master") {
    // Two nodes name the same link differently; each resolves its own.
    const std::vector<InterfaceAddress> a = {{"lo", "127.0.0.1", 8, true},
                                             {"eth0", "192.0.2.2", 24, false},
                                             {"fab0", "10.77.0.1", 24, false}};
    const std::vector<InterfaceAddress> b = {{"lo", "127.0.0.1", 8, true},
                                             {"ens1f1", "10.77.0.2", 24, false},
                                             {"wide", "10.0.0.9", 8, false}};
    CHECK(socket_interface(a, "10.77.0.1", "") == SocketChoice{"fab0", "10.77.0.1", 24, false});
    // The most specific subnet wins over a wider one that also holds the master.
    CHECK(socket_interface(b, "10.77.0.1", "") == SocketChoice{"ens1f1", "10.77.0.2", 24, false});
    CHECK(socket_interface(b, "10.1.2.3", "") == SocketChoice{"wide", "10.0.0.9", 8, false});
    // A master no subnet holds (routed), or not IPv4: no choice.
    CHECK(!socket_interface(a, "203.0.113.7", ""));
    CHECK(!socket_interface(a, "head.example", ""));
    // [fabric] interface names it, wherever the master is.
    CHECK(socket_interface(a, "203.0.113.7", "eth0") == SocketChoice{"eth0", "192.0.2.2", 24, true});
    CHECK(!socket_interface(a, "10.77.0.1", "ens1f1"));

    Request r{"10.77.0.1", "", {}, b};
    Decision d = decide(read_sysfs(tree("no-devices")), r);
    CHECK(d.ok());
    CHECK(d.skipped == kNoDevices);
    REQUIRE(d.socket);
    CHECK(d.socket->interface == "ens1f1");
    REQUIRE(d.env.size() == 2);
    CHECK(d.env[0].name == "NCCL_SOCKET_IFNAME");
    CHECK(d.env[0].value == "ens1f1");
    CHECK(d.env[1].name == "GLOO_SOCKET_IFNAME");
    CHECK(summary_line(d) == "no RDMA devices; collectives over TCP; socket interface ens1f1 (10.77.0.2/24, on the "
                             "master's subnet)");
    CHECK(format_decision(d, r) ==
          "no RDMA devices; collectives over TCP\n"
          "socket interface ens1f1 (10.77.0.2/24, on the master's subnet)\n"
          "  NCCL_SOCKET_IFNAME=ens1f1 (unset: inferd exports it)\n"
          "  GLOO_SOCKET_IFNAME=ens1f1 (unset: inferd exports it)\n");
    // An operator's wrong value is said, never refused: without RDMA nothing fails.
    r.env = {{"GLOO_SOCKET_IFNAME", "eth0"}, {"NCCL_SOCKET_IFNAME", "ens"}};
    d = decide(read_sysfs(tree("no-devices")), r);
    CHECK(d.ok());
    CHECK(d.env[0].problem.empty());  // "ens" is a prefix NCCL matches ens1f1 with
    CHECK(d.env[1].problem == "GLOO_SOCKET_IFNAME=eth0 is not ens1f1, the interface on the master's network");
    // A master on loopback keeps the group on this host; none on the master's network: the one line alone.
    CHECK(!decide(read_sysfs(tree("no-devices")), Request{"127.0.0.1", "", {}, b}).socket);
    d = decide(read_sysfs(tree("no-devices")), Request{"203.0.113.7", "", {}, b});
    CHECK(!d.socket);
    CHECK(d.env.empty());
    CHECK(format_decision(d, {}) == "no RDMA devices; collectives over TCP\n");
  }

  TEST_CASE("fabric: the kernel's own interfaces are read (getifaddrs): loopback at least") {
    const auto all = kernel_ipv4_addresses();
    CHECK(std::any_of(all.begin(), all.end(), [](const InterfaceAddress& a) { return a.loopback && a.prefix_len == 8; }));
  }

  TEST_CASE("fabric: libibverbs runs for real and finds no devices on a machine without them") {
    const VerbsReport r = probe_verbs();
    CHECK(r.built == bool(INFERD_HAVE_RDMA));
    // A machine with RDMA devices lists them; this check is for CI and dev machines without.
    if (!std::filesystem::exists("/sys/class/infiniband")) {
      CHECK(r.ports.empty());
      CHECK(r.error.empty());
    }
  }
}

TEST_SUITE("fabric") {
  TEST_CASE("fabric monitor: state and error counters read from the recorded tree") {
    const auto ports = read_ports(tree("rebooted"));
    REQUIRE(ports.size() == 2);
    CHECK(ports[0].device == "mlx5_0");
    CHECK(ports[0].active);
    CHECK(ports[0].errors.at("link_downed") == 1);
    CHECK(ports[0].errors.at("out_of_sequence") == 0);
    CHECK(ports[0].errors.count("port_rcv_data") == 0);  // traffic, not an error
    CHECK(read_ports(tree("no-devices")).empty());
    CHECK(read_ports(tree("nowhere")).empty());
  }

  TEST_CASE("fabric monitor: before the baseline nothing is a signal; after it the chosen port going down is critical") {
    const auto base = read_ports(tree("two-ports"));
    PortObservation o = assess({}, {}, read_ports(tree("port-down")), 0, {});
    CHECK(o.signal.level == inferd::health::Level::Ok);
    CHECK(!o.baselined);
    CHECK(o.deltas.empty());
    // No chosen port (InfiniBand, where NCCL picks; one node): every port counts.
    o = assess(base, {}, read_ports(tree("port-down")), 0, {});
    CHECK(o.signal.monitor == "fabric");
    CHECK(o.signal.level == inferd::health::Level::Critical);
    CHECK(o.signal.reason == "mlx5_1 port 1 went DOWN");
    // The pre-flight chose mlx5_1 port 1: its loss is critical.
    o = assess(base, {}, read_ports(tree("port-down")), 0, {}, {"mlx5_1", 1});
    CHECK(o.signal.level == inferd::health::Level::Critical);
    // It chose mlx5_0 port 1: another port going down is said, at warn.
    o = assess(base, {}, read_ports(tree("port-down")), 0, {}, {"mlx5_0", 1});
    CHECK(o.signal.level == inferd::health::Level::Warn);
    CHECK(o.signal.reason == "mlx5_1 port 1 went DOWN");
    // A port already down at the baseline is not news.
    o = assess(read_ports(tree("port-down")), {}, read_ports(tree("port-down")), 0, {});
    CHECK(o.signal.level == inferd::health::Level::Ok);
    CHECK(assess(base, {}, {}, 0, {}).signal.reason == "mlx5_0 port 1 is gone, mlx5_1 port 1 is gone");
    o = assess(base, {}, {}, 0, {}, {"mlx5_0", 1});
    CHECK(o.signal.level == inferd::health::Level::Critical);
    CHECK(o.signal.reason == "mlx5_0 port 1 is gone; mlx5_1 port 1 is gone");
  }

  TEST_CASE("fabric monitor: error counters warn by their rate over the sampling interval, not their count") {
    // Two recorded samples: two-ports, then errors-burst (out_of_sequence +600,
    // symbol_error +20 on mlx5_1 port 1) some seconds later.
    const auto base = read_ports(tree("two-ports"));
    const auto burst = read_ports(tree("errors-burst"));
    const PortThresholds t{.link_downed_per_s = 0.01, .errors_per_s = 1};
    // 10 s apart: 60/s and 2/s, both over 1/s.
    PortObservation o = assess(base, base, burst, 10, t);
    CHECK(o.signal.level == inferd::health::Level::Warn);
    CHECK(o.signal.reason ==
          "error rates over the last 10 s: mlx5_1 port 1 out_of_sequence 60/s, mlx5_1 port 1 symbol_error 2/s");
    CHECK(std::find(o.deltas.begin(), o.deltas.end(), CounterDelta{"mlx5_1", 1, "out_of_sequence", 600, 60}) !=
          o.deltas.end());
    // The same growth over 100 s: symbol_error is 0.2/s, under the threshold.
    o = assess(base, base, burst, 100, t);
    CHECK(o.signal.reason == "error rates over the last 100 s: mlx5_1 port 1 out_of_sequence 6/s");
    // Over an hour neither is a rate worth a warning, though the counts are the same.
    o = assess(base, base, burst, 3600, t);
    CHECK(o.signal.level == inferd::health::Level::Ok);
    CHECK(std::find(o.deltas.begin(), o.deltas.end(), CounterDelta{"mlx5_1", 1, "out_of_sequence", 600, 600.0 / 3600}) !=
          o.deltas.end());
    // Once the burst stops, the next interval's rate is 0: the warning clears,
    // while the count since the baseline stays.
    o = assess(base, burst, burst, 1, t);
    CHECK(o.signal.level == inferd::health::Level::Ok);
    CHECK(std::find(o.deltas.begin(), o.deltas.end(), CounterDelta{"mlx5_1", 1, "out_of_sequence", 600, 0}) !=
          o.deltas.end());
    // No earlier sample: no rate yet.
    CHECK(assess(base, {}, burst, 0, t).signal.level == inferd::health::Level::Ok);
    // 0 never warns; a higher threshold holds.
    CHECK(assess(base, base, burst, 10, {0.01, 0}).signal.level == inferd::health::Level::Ok);
    CHECK(assess(base, base, burst, 10, {0.01, 61}).signal.level == inferd::health::Level::Ok);
    // link_downed has its own threshold: one in 10 s is 0.1/s.
    o = assess(base, base, read_ports(tree("rebooted")), 10, t);
    CHECK(o.signal.reason == "error rates over the last 10 s: mlx5_0 port 1 link_downed 0.1/s");
    CHECK(assess(base, base, read_ports(tree("rebooted")), 10, {0.2, 1}).signal.level == inferd::health::Level::Ok);
    // A counter that went backwards was reset, not an increase.
    CHECK(assess(burst, burst, base, 10, t).signal.level == inferd::health::Level::Ok);
  }

  TEST_CASE("fabric monitor: the monitor takes its rates between its own samples") {
    PortMonitor m(tree("errors-burst"), {0.01, 1});
    m.capture_baseline();
    PortObservation o = m.sample();  // the first sample: nothing to take a rate from
    CHECK(o.signal.level == inferd::health::Level::Ok);
    o = m.sample();  // unchanged since: 0/s
    CHECK(o.signal.level == inferd::health::Level::Ok);
    for (const auto& d : o.deltas) CHECK(d.per_second == 0);
  }
}
