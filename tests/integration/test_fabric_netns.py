"""Two "nodes" in network namespaces of their own, joined by a veth pair whose
ends have different names (fab0 on the head's side, ens1f1 on the worker's),
read the same configuration file, which names only the master's address: each
resolves its own interface from the kernel's (there is no RDMA device), exports
it for NCCL and Gloo, and the two exchange their whole choice over the control
plane. Needs root (CAP_NET_ADMIN) and iproute2's `ip`; binds only inside the
namespaces it creates, and always deletes them."""
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import INFERCTL, INFERD, default_model

HEAD_IF, WORKER_IF = "fab0", "ens1f1"
HEAD_ADDR, WORKER_ADDR = "10.77.0.1", "10.77.0.2"
FABRIC_VARS = ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX",
               "UCX_MEM_MMAP_HOOK_MODE", "UCX_RCACHE_MAX_UNRELEASED"]


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def why_not():
    if shutil.which("ip") is None:
        return "no `ip` binary (iproute2)"
    if os.geteuid() != 0:
        return "not root: creating network namespaces needs CAP_NET_ADMIN"
    probe = f"inferd-probe-{secrets.token_hex(3)}"
    r = ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace (no CAP_NET_ADMIN?): {r.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


_why = why_not()
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")


@pytest.fixture
def nodes():
    """Two namespaces, unique to this run: {"head": name, "worker": name}; deleted at teardown, pass or fail."""
    tag = secrets.token_hex(3)
    ns = {"head": f"inferd-head-{tag}", "worker": f"inferd-worker-{tag}"}
    made = []
    try:
        for name in ns.values():
            ip("netns", "add", name)
            made.append(name)
        ip("link", "add", HEAD_IF, "netns", ns["head"], "type", "veth", "peer", "name", WORKER_IF, "netns", ns["worker"])
        for role, ifname, addr in (("head", HEAD_IF, HEAD_ADDR), ("worker", WORKER_IF, WORKER_ADDR)):
            ip("-n", ns[role], "addr", "add", f"{addr}/24", "dev", ifname)
            ip("-n", ns[role], "link", "set", ifname, "up")
            ip("-n", ns[role], "link", "set", "lo", "up")
        yield ns
    finally:
        for name in made:  # deleting a namespace deletes its end of the veth, and so the pair
            ip("netns", "del", name, check=False)


def clean_env():
    return {k: v for k, v in os.environ.items() if k not in FABRIC_VARS}


def in_ns(ns, *cmd):
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=60,
                          env=clean_env())


@pytest.fixture
def config(tmp_path):
    cfg = tmp_path / "inferd.toml"
    cfg.write_text(f'[parallel]\nmaster_addr = "{HEAD_ADDR}"\n')
    return cfg


def test_each_node_resolves_its_own_interface_from_the_same_config_file(nodes, config):
    head = in_ns(nodes["head"], str(INFERCTL), "fabric", "--config", str(config))
    worker = in_ns(nodes["worker"], str(INFERCTL), "fabric", "--config", str(config))
    assert head.returncode == 0 and worker.returncode == 0, head.stdout + head.stderr + worker.stdout + worker.stderr
    for out, ifname, addr in ((head.stdout, HEAD_IF, HEAD_ADDR), (worker.stdout, WORKER_IF, WORKER_ADDR)):
        assert "no RDMA devices; collectives over TCP\n" in out, out
        assert f"socket interface {ifname} ({addr}/24, on the master's subnet)\n" in out, out
        assert f"NCCL_SOCKET_IFNAME={ifname} (unset: inferd exports it)" in out, out
        assert f"GLOO_SOCKET_IFNAME={ifname} (unset: inferd exports it)" in out, out
    # An operator's value that names the other node's interface is said, not refused.
    env = {**clean_env(), "GLOO_SOCKET_IFNAME": HEAD_IF}
    r = subprocess.run(["ip", "netns", "exec", nodes["worker"], str(INFERCTL), "fabric", "--config", str(config)],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"GLOO_SOCKET_IFNAME={HEAD_IF} (set by the operator; WRONG, the fabric says {WORKER_IF})" in r.stdout


class NsDaemon:
    """inferd in a namespace (`ip netns exec` execs it: the pid is inferd's), its log in a file."""

    def __init__(self, ns, args):
        self.log = tempfile.NamedTemporaryFile(prefix="inferd-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, str(INFERD), *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=clean_env())

    def output(self):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def wait_for_line(self, text, timeout):
        deadline = time.monotonic() + timeout
        while text not in self.output() and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.2)
        return text in self.output()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def test_a_group_across_the_namespaces_exchanges_each_rank_s_whole_choice(nodes, config):
    group = ["--model", default_model(), "--threads", "1", "--max-model-len", "512",
             "--max-num-batched-tokens", "64", "--max-num-seqs", "4", "--tensor-parallel-size", "2", "--nnodes", "2",
             "--master-port", "29533", "--config", str(config), "--host", "127.0.0.1", "--port", "18080"]
    head = NsDaemon(nodes["head"], group)
    worker = NsDaemon(nodes["worker"], group + ["--node-rank", "1", "--headless"])
    try:
        # Each pre-flight exports its own interface name.
        for d, ifname in ((head, HEAD_IF), (worker, WORKER_IF)):
            for line in [f"fabric: socket interface {ifname} (", f"fabric: exported NCCL_SOCKET_IFNAME={ifname}",
                         f"fabric: exported GLOO_SOCKET_IFNAME={ifname}"]:
                assert d.wait_for_line(line, 60), d.output()
        # The head hears the worker's choice as it joins; the worker hears every rank's when the group forms.
        joined = (f"control plane: rank 1 joined from {WORKER_ADDR}:")
        assert head.wait_for_line(joined, 120), head.output() + worker.output()
        assert f"its fabric: interface {WORKER_IF} (sockets: no RDMA device), address {WORKER_ADDR}" in head.output()
        for rank, ifname, addr in ((0, HEAD_IF, HEAD_ADDR), (1, WORKER_IF, WORKER_ADDR)):
            line = f"control plane: rank {rank}'s fabric: interface {ifname} (sockets: no RDMA device), address {addr}"
            assert worker.wait_for_line(line, 60), worker.output()
        # `inferctl status` at the head shows each rank's choice once the group runs.
        deadline = time.monotonic() + 240
        status = ""
        while time.monotonic() < deadline and head.proc.poll() is None:
            r = in_ns(nodes["head"], str(INFERCTL), "status", "--url", "http://127.0.0.1:18080")
            status = r.stdout
            if f"fabric: interface {WORKER_IF}" in status:
                break
            time.sleep(1)
        assert f"; fabric: interface {HEAD_IF} (sockets: no RDMA device), address {HEAD_ADDR}" in status, \
            status + head.output()
        assert f"; fabric: interface {WORKER_IF} (sockets: no RDMA device), address {WORKER_ADDR}" in status, status
    finally:
        worker.stop()
        head.stop()
