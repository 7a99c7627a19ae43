"""The fabric pre-flight: `inferctl fabric` on recorded sysfs trees
(tests/fabric/) and on this machine's own /sys, and inferd refusing to leave
Loading when a group spanning nodes would run on a broken port, and the
supervisor's watch on port state and error counters."""
import os
import shutil
import subprocess
import time

import pytest

from conftest import INFERCTL, INFERD, SRC, Daemon, default_model, free_port, metric

TREES = SRC / "tests" / "fabric"
FABRIC_VARS = ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX",
               "UCX_MEM_MMAP_HOOK_MODE", "UCX_RCACHE_MAX_UNRELEASED"]


def fabric(*args, env=None):
    full_env = {k: v for k, v in os.environ.items() if k not in FABRIC_VARS}
    full_env.update(env or {})
    return subprocess.run([str(INFERCTL), "fabric", *args], capture_output=True, text=True, timeout=30, env=full_env)


def test_the_choice_from_a_recorded_tree_and_the_variables_it_exports():
    r = fabric("--sysfs-root", str(TREES / "two-ports"), "--master-addr", "10.0.0.1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mlx5_0 port 1: ACTIVE (LinkUp), Ethernet, 200 Gb/sec (4X HDR)" in r.stdout
    assert "choice: interface ens1f0np0, device mlx5_0 port 1, RoCE v2 GID index 3 (10.0.0.5" in r.stdout
    for line in ["NCCL_SOCKET_IFNAME=ens1f0np0 (unset: inferd exports it)", "GLOO_SOCKET_IFNAME=ens1f0np0 (unset: inferd exports it)",
                 "NCCL_IB_HCA=mlx5_0:1 (unset: inferd exports it)", "NCCL_IB_GID_INDEX=3 (unset: inferd exports it)",
                 "UCX_MEM_MMAP_HOOK_MODE=none (unset: inferd exports it)", "UCX_RCACHE_MAX_UNRELEASED=1024 (unset: inferd exports it)"]:
        assert line in r.stdout


def test_two_nodes_resolve_their_own_interface_and_index_from_the_same_master():
    a = fabric("--sysfs-root", str(TREES / "two-ports"), "--master-addr", "10.0.0.1")
    b = fabric("--sysfs-root", str(TREES / "node-b"), "--master-addr", "10.0.0.1")
    assert a.returncode == 0 and b.returncode == 0, a.stdout + b.stdout
    assert "choice: interface ens1f0np0, device mlx5_0 port 1, RoCE v2 GID index 3 (10.0.0.5" in a.stdout
    assert "choice: interface enp65s0f1np1, device mlx5_1 port 1, RoCE v2 GID index 7 (10.0.0.6" in b.stdout


def test_two_nodes_resolve_their_own_interface_from_the_same_config_file(tmp_path):
    cfg = tmp_path / "inferd.toml"
    cfg.write_text('[parallel]\nnnodes = 2\nmaster_addr = "10.0.0.1"\n\n[engine]\ntensor_parallel_size = 2\n')
    a = fabric("--config", str(cfg), "--sysfs-root", str(TREES / "two-ports"))
    b = fabric("--config", str(cfg), "--sysfs-root", str(TREES / "node-b"))
    assert a.returncode == 0 and b.returncode == 0, a.stdout + a.stderr + b.stdout + b.stderr
    assert "choice: interface ens1f0np0, device mlx5_0 port 1, RoCE v2 GID index 3" in a.stdout
    assert "choice: interface enp65s0f1np1, device mlx5_1 port 1, RoCE v2 GID index 7" in b.stdout
    # [fabric] interface from the file restricts the choice; a bad key is inferd's configuration error.
    cfg.write_text(cfg.read_text() + '\n[fabric]\ninterface = "enp65s0f0np0"\n')
    b = fabric("--config", str(cfg), "--sysfs-root", str(TREES / "node-b"))
    assert "choice: interface enp65s0f0np0, device mlx5_0 port 1, RoCE v2 GID index 3 (10.1.0.6" in b.stdout
    cfg.write_text('[fabric]\ninterfaces = "x"\n')
    r = fabric("--config", str(cfg))
    assert r.returncode == 2 and f"{cfg}:2: [fabric] interfaces: unknown key" in r.stderr


def test_a_down_port_is_refused_with_exit_1_naming_device_and_port():
    r = fabric("--sysfs-root", str(TREES / "port-down"), "--master-addr", "10.1.0.1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "refused: mlx5_1 port 1: port is DOWN (physical state Disabled)" in r.stdout


def test_an_operator_gid_index_on_a_roce_v1_entry_names_the_v2_index():
    r = fabric("--sysfs-root", str(TREES / "two-ports"), "--master-addr", "10.0.0.1",
               env={"NCCL_IB_GID_INDEX": "2", "NCCL_IB_HCA": "mlx5_0"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NCCL_IB_GID_INDEX=2 (set by the operator; WRONG, the fabric says 3)" in r.stdout
    assert "NCCL_IB_HCA=mlx5_0 (set by the operator; agrees)" in r.stdout
    assert ("refused: NCCL_IB_GID_INDEX=2 points at the IB/RoCE v1 entry for 10.0.0.5 on mlx5_0 port 1; "
            "index 3 is the RoCE v2 entry for 10.0.0.5") in r.stdout


def test_after_a_reboot_the_index_follows_the_address():
    r = fabric("--sysfs-root", str(TREES / "rebooted"), "--master-addr", "10.0.0.1")
    assert r.returncode == 0, r.stdout
    assert "RoCE v2 GID index 5 (10.0.0.5" in r.stdout
    # Non-zero error counters are shown under their port.
    assert "mlx5_0 port 1: ACTIVE (LinkUp), Ethernet, 200 Gb/sec (4X HDR), active MTU unknown\n  error counters: link_downed=1\n" in r.stdout
    assert r.stdout.count("error counters") == 1


def test_no_devices_is_one_line_and_success():
    r = fabric("--sysfs-root", str(TREES / "no-devices"), "--master-addr", "10.0.0.1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "no RDMA devices; collectives over TCP\n"


@pytest.mark.skipif(os.path.exists("/sys/class/infiniband"), reason="this machine has RDMA devices")
def test_the_live_path_asks_libibverbs_and_finds_no_devices_here():
    r = fabric("--master-addr", "10.0.0.1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.endswith("no RDMA devices; collectives over TCP\n")
    assert r.stdout.startswith("libibverbs: ")  # "no RDMA devices listed", or "not in this build"


def test_bad_flags_and_a_missing_root_are_clear_errors():
    r = fabric("--sysfs-roto", "/tmp")
    assert r.returncode == 2 and "unknown flag --sysfs-roto" in r.stderr
    r = fabric("--sysfs-root", str(TREES / "nowhere"), "--master-addr", "10.0.0.1")
    assert r.returncode == 1 and "not a directory" in r.stderr


def test_inferd_refuses_to_leave_loading_on_a_down_port(start_daemon):
    d = start_daemon(["--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr", "10.1.0.1",
                      "--sysfs-root", str(TREES / "port-down")], wait_state=None)
    assert d.wait(timeout=60) == 1, d.output()
    out = d.output()
    assert "fabric pre-flight refused: mlx5_1 port 1: port is DOWN (physical state Disabled)" in out
    assert "lifecycle: Loading -> Failed: fabric pre-flight refused: mlx5_1 port 1" in out


def test_inferd_with_no_devices_logs_one_line_and_goes_on_to_form_the_group(start_daemon):
    # The head waits for its worker in Loading: past the pre-flight, nothing failed.
    d = start_daemon(["--tensor-parallel-size", "2", "--nnodes", "2", "--sysfs-root", str(TREES / "no-devices")],
                     wait_state="live")
    deadline = time.monotonic() + 60
    while "fabric: no RDMA devices; collectives over TCP" not in d.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "fabric: no RDMA devices; collectives over TCP" in d.output()
    assert d.proc.poll() is None
    assert d.state() == "Loading"


def wait_metric(d, name, labels, value, timeout):
    deadline = time.monotonic() + timeout
    while metric(d, name, labels) != value and time.monotonic() < deadline:
        time.sleep(0.1)
    return metric(d, name, labels)


def test_the_supervisor_exports_port_state_and_error_deltas_after_the_baseline(start_daemon, tmp_path):
    root = tmp_path / "sys"
    shutil.copytree(TREES / "two-ports", root)
    port1 = root / "class" / "infiniband" / "mlx5_1" / "ports" / "1"
    # Errors before the baseline (the warm-up) are not news.
    (port1 / "hw_counters" / "out_of_sequence").write_text("7\n")
    cfg = tmp_path / "inferd.toml"
    cfg.write_text("[fabric]\nerrors_warn_per_s = 1\n")
    d = start_daemon(["--model", default_model(), "--health-interval-ms", "100", "--probe-interval", "0",
                      "--sysfs-root", str(root), "--config", str(cfg)])
    port = {"device": "mlx5_1", "port": "1"}
    counter = {**port, "counter": "out_of_sequence"}
    assert wait_metric(d, "inferd_fabric_port_active", port, 1, 10) == 1
    assert metric(d, "inferd_fabric_port_errors", counter) == 7
    assert wait_metric(d, "inferd_fabric_port_errors_since_baseline", counter, 0, 10) == 0
    assert metric(d, "inferd_monitor_level", {"monitor": "fabric"}) == 0
    # A burst: 200 errors within one sampling interval (about 1 s) is far over 1/s.
    (port1 / "hw_counters" / "out_of_sequence").write_text("207\n")
    assert wait_metric(d, "inferd_monitor_level", {"monitor": "fabric"}, 1, 10) == 1
    assert metric(d, "inferd_fabric_port_errors_since_baseline", counter) == 200
    assert metric(d, "inferd_fabric_port_errors_per_second", counter) > 1
    fabric = [m for m in d.admin_get("/admin/supervisor").json()["monitors"] if m["monitor"] == "fabric"]
    assert fabric[0]["reason"].startswith("error rates over the last "), fabric
    assert "mlx5_1 port 1 out_of_sequence " in fabric[0]["reason"] and fabric[0]["reason"].endswith("/s"), fabric
    # The burst over, the next interval's rate is 0: the warning clears, the count since the baseline stays.
    assert wait_metric(d, "inferd_monitor_level", {"monitor": "fabric"}, 0, 10) == 0
    assert metric(d, "inferd_fabric_port_errors_per_second", counter) == 0
    assert metric(d, "inferd_fabric_port_errors_since_baseline", counter) == 200
    (port1 / "state").write_text("1: DOWN\n")
    assert wait_metric(d, "inferd_fabric_port_active", port, 0, 10) == 0
    # One node: the fabric carries none of its traffic, so a port going down only warns.
    assert wait_metric(d, "inferd_monitor_level", {"monitor": "fabric"}, 1, 10) == 1
    report = d.admin_get("/admin/supervisor").json()
    fabric = [m for m in report["monitors"] if m["monitor"] == "fabric"]
    assert fabric and fabric[0]["level"] == "warn"
    assert fabric[0]["reason"] == "mlx5_1 port 1 went DOWN"
    r = subprocess.run([str(INFERCTL), "status", "--url", d.url, "--admin-api-key", d.admin_key],
                       capture_output=True, text=True, timeout=30)
    assert "fabric warn (mlx5_1 port 1 went DOWN)" in r.stdout, r.stdout + r.stderr
    assert d.state() == "Serving"


def test_ranks_whose_fabric_mtu_differs_are_refused_with_the_reason_on_both_sides(tmp_path):
    # Two ranks on this host, each reading its own recorded tree for the same
    # interface: the worker's says MTU 1500, the head's 9000.
    worker_root = tmp_path / "worker-sys"
    shutil.copytree(TREES / "two-ports", worker_root)
    (worker_root / "class" / "net" / "ens1f0np0" / "mtu").write_text("1500\n")
    cfg = tmp_path / "inferd.toml"
    cfg.write_text('[fabric]\ninterface = "ens1f0np0"\n')
    port = free_port(2)
    group = ["--model", default_model(), "--threads", "1", "--max-model-len", "512", "--max-num-batched-tokens", "64",
             "--max-num-seqs", "4", "--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
             "--master-port", str(port), "--config", str(cfg)]
    worker = Daemon(group + ["--node-rank", "1", "--headless", "--sysfs-root", str(worker_root)])
    head = Daemon(group + ["--sysfs-root", str(TREES / "two-ports")])
    try:
        assert worker.proc.wait(timeout=120) == 1, worker.output()
        choice = "interface ens1f0np0, mlx5_0 port 1, RoCE v2 GID index 3, address 10.0.0.5, MTU {}, Ethernet"
        reason = (f"fabric MTU differs: the head has 9000 ({choice.format(9000)}), "
                  f"rank 1 has 1500 ({choice.format(1500)})")
        assert reason in worker.output()
        deadline = time.monotonic() + 30
        while reason not in head.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert reason in head.output()
        assert "fabric: interface ens1f0np0, mlx5_0 port 1, RoCE v2 GID index 3 (10.0.0.5)" in head.output()
        assert "fabric: exported NCCL_IB_GID_INDEX=3" in head.output()
        assert head.proc.poll() is None  # still waiting for a rank 1 that matches
    finally:
        worker.stop()
        head.stop()
