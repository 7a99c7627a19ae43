"""Records in the journal: inferd under a stand-in journald (fake_journald.py, in a
mount namespace this test creates) sends each supervisor decision as a record
whose fields say what was decided, so `journalctl INFERD_ACTION=shed` finds it."""
import json
import pathlib
import shutil
import subprocess
import sys
import threading
import time

import pytest
import requests

from conftest import INFERD, SMALL_SHAPES, default_model, free_port, needs_faults

HARNESS = pathlib.Path(__file__).with_name("fake_journald.py")


def can_unshare_mounts():
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/run"],
                       capture_output=True, timeout=30)
    return r.returncode == 0


@needs_faults
@pytest.mark.skipif(not can_unshare_mounts(), reason="no permission to create a mount namespace")
def test_supervisor_decisions_are_journal_records_with_fields(tmp_path):
    port, admin_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(INFERD), "--host", "127.0.0.1", "--port", str(port), "--admin-port", str(admin_port),
           *SMALL_SHAPES, "--model", default_model(),
           "--no-warmup", "--health-interval-ms", "100", "--probe-interval", "0"]
    stderr = tmp_path / "stderr.log"
    harness = subprocess.Popen(["unshare", "-m", "--propagation", "private", sys.executable, str(HARNESS),
                                str(stderr), "--", *cmd], stdout=subprocess.PIPE, text=True)
    records = []
    reader = threading.Thread(target=lambda: records.extend(json.loads(l) for l in harness.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(url + "/health/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        else:
            pytest.fail(f"never ready\n{stderr.read_text()[-3000:]}")
        line = "NCCL WARN Call to ibv_reg_mr failed; NCCL error: unhandled system error"
        admin = f"http://127.0.0.1:{admin_port}"
        assert requests.post(admin + "/admin/fault", json={"name": "log.inject", "value": line}, timeout=5).ok

        def decision():
            return next((r for r in records if r.get("INFERD_ACTION") == "shed"), None)
        deadline = time.monotonic() + 15
        while decision() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        shed = decision()
        assert shed is not None, f"no shed record among {len(records)}\n{stderr.read_text()[-3000:]}"
        assert shed["MESSAGE"].startswith("supervisor: shed: log: ")
        assert shed["PRIORITY"] == "4" and shed["SYSLOG_IDENTIFIER"] == "inferd"
        assert (shed["INFERD_DECISION"], shed["INFERD_LEVEL"], shed["INFERD_MONITORS"]) == ("1", "shed", "log")
        assert shed["INFERD_STATE"] in ("Serving", "Degraded")
        # The plain records of the same run carry the state and no decision fields.
        ready = next(r for r in records if "-> Serving" in r.get("MESSAGE", ""))
        assert "INFERD_ACTION" not in ready and ready["INFERD_STATE"] == "Serving"
        # Records went to the journal, not to stderr (which carries the library's line).
        log = stderr.read_text()
        assert line in log and "supervisor: shed" not in log
    finally:
        harness.terminate()
        harness.wait(timeout=60)
