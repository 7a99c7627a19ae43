"""`inferctl proof` against the real daemon: every gate passes on the default
model (the restart gate restarting the daemon for real), and each gate fails
when what it checks is broken."""
import json
import os
import shlex
import signal
import subprocess
import time

from conftest import INFERCTL, free_port, scaled, write_proc


def proof(d, *args, admin_port=None, timeout=600):
    cmd = [str(INFERCTL), "proof", "--url", d.url, "--ready-timeout", str(round(scaled(120)))]
    if admin_port:
        cmd += ["--admin-url", f"http://127.0.0.1:{admin_port}"]
    r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=scaled(timeout))
    return r


def gates(path):
    with open(path) as f:
        return {g["gate"]: g for g in json.load(f)["gates"]}


def restart_command(d, pidfile, log):
    """Stops the daemon (SIGTERM), waits until it has exited, and starts the same
    command line again in the background, its pid in `pidfile`."""
    pid = d.proc.pid
    gone = f"[ ! -e /proc/{pid} ] || grep -q '^State:.*Z' /proc/{pid}/status"
    return (f"kill -TERM {pid}; for i in $(seq 300); do if {gone}; then break; fi; sleep 0.1; done; "
            f"setsid {shlex.join(d.cmd)} > {log} 2>&1 < /dev/null & echo $! > {pidfile}")


def test_every_gate_passes_on_the_default_model_and_the_restart_is_real(start_daemon, tmp_path):
    admin_port = free_port()
    d = start_daemon(["--admin-port", str(admin_port)], admin_key=False)
    pidfile, out = tmp_path / "pid", tmp_path / "proof.json"
    try:
        r = proof(d, "--restart-command", restart_command(d, pidfile, tmp_path / "restarted.log"), "--out", str(out),
                  admin_port=admin_port)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "PASSED: 0 of 8 gates failed" in r.stdout, r.stdout
        g = gates(out)
        assert [name for name in g] == ["readiness", "probe", "long_context", "tool_call", "json_schema", "integrity",
                                        "restart", "memory"]
        assert {name: x["result"] for name, x in g.items()} == {
            "readiness": "pass", "probe": "pass", "long_context": "pass", "tool_call": "pass", "json_schema": "pass",
            "integrity": "skipped", "restart": "pass", "memory": "pass"}
        assert g["tool_call"]["data"]["arguments"] == {"city": "Madrid"}
        assert g["json_schema"]["data"]["valid"] == 20
        lc = g["long_context"]["data"]
        assert lc["nonce"] in lc["answer"]
        assert lc["max_model_len"] - 128 <= lc["prompt_tokens"] <= lc["max_model_len"] - 24, lc
        assert g["readiness"]["data"]["warmup_keys_covered"] == g["readiness"]["data"]["warmup_keys_total"] > 0
        # The restart was real: the first process is gone, a new one serves.
        assert d.proc.wait(timeout=30) == 0
        new_pid = int(pidfile.read_text())
        assert new_pid != d.proc.pid and os.path.exists(f"/proc/{new_pid}")
        assert g["restart"]["data"]["error_lines_after_baseline"] == 0
    finally:
        if pidfile.exists():
            pid = int(pidfile.read_text())
            os.kill(pid, signal.SIGTERM)
            for _ in range(300):
                if not os.path.exists(f"/proc/{pid}"):
                    break
                time.sleep(0.1)


def test_each_gate_fails_when_what_it_checks_is_broken(start_daemon, tmp_path):
    # No warm-up: readiness fails. Memory pressure above the proof's bound: memory fails.
    write_proc(tmp_path, 10_000_000, some_avg10=5.0)
    d = start_daemon(["--no-warmup", "--procfs-root", str(tmp_path), "--health-interval-ms", "100",
                      "--probe-interval", "0"])
    out = tmp_path / "a.json"
    r = proof(d, "--gates", "readiness,memory,restart", "--max-memory-psi", "2", "--out", str(out),
              "--admin-api-key", d.admin_key)
    assert r.returncode == 1, r.stdout + r.stderr
    g = gates(out)
    assert g["readiness"]["result"] == "FAIL" and "no warm-up has run" in g["readiness"]["detail"]
    assert g["memory"]["result"] == "FAIL" and "memory pressure some avg10 5.00% above 2.00%" in g["memory"]["detail"]
    assert g["restart"]["result"] == "FAIL" and "--restart-command" in g["restart"]["detail"]
    assert "FAILED: 3 of 3 gates failed" in r.stdout

    # A restart command that fails, and one that restarts nothing.
    r = proof(d, "--gates", "restart", "--restart-command", "exit 3", "--out", str(out))
    assert r.returncode == 1 and "`exit 3` exited with 3" in gates(out)["restart"]["detail"]
    r = subprocess.run([str(INFERCTL), "proof", "--url", d.url, "--gates", "restart", "--restart-command", ":",
                        "--ready-timeout", "3", "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no new process answered within 3 s" in gates(out)["restart"]["detail"]

    # Outputs no longer held to their schema: the JSON schema gate fails.
    assert d.admin_post("/admin/fault", json={"name": "grammar.off"}).status_code == 200
    r = proof(d, "--gates", "json_schema", "--out", str(out))
    assert r.returncode == 1, r.stdout
    assert "outputs invalid" in gates(out)["json_schema"]["detail"], gates(out)
    d.admin_post("/admin/fault", json={"name": "grammar.off", "armed": False})

    # Wrong answers: the long-context retrieval and the tool call fail, and the
    # probe (after which the supervisor recovers, interrupting whatever runs).
    assert d.admin_post("/admin/fault", json={"name": "logits.corrupt"}).status_code == 200
    r = proof(d, "--gates", "long_context,tool_call", "--out", str(out))
    assert r.returncode == 1, r.stdout
    assert "was not returned" in gates(out)["long_context"]["detail"], gates(out)
    assert gates(out)["tool_call"]["result"] == "FAIL", gates(out)
    r = proof(d, "--gates", "probe", "--admin-api-key", d.admin_key, "--out", str(out))
    assert r.returncode == 1, r.stdout
    assert "the generation probe failed" in gates(out)["probe"]["detail"], gates(out)


def test_bad_proof_flags_are_refused_naming_them():
    r = subprocess.run([str(INFERCTL), "proof", "--gates", "readiness,vibes"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--gates: unknown gate 'vibes'" in r.stderr, r.stderr
    r = subprocess.run([str(INFERCTL), "proof", "--systemd-unit", "inferd", "--restart-command", ":"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "give one of them" in r.stderr, r.stderr
