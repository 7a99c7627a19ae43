"""The admin routes' access: their own key (the API key never opens them), or,
without one, only the admin listener on 127.0.0.1 or a Unix socket."""
import http.client
import json
import os
import socket
import stat
import subprocess
import tempfile

import pytest
import requests

from conftest import INFERD, free_port


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket: http.client with its connect() replaced."""

    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.socket_path)


def unix_request(path, method, target, body=None):
    conn = UnixHTTPConnection(path)
    try:
        conn.request(method, target, body=body, headers={"Content-Type": "application/json"} if body else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.fixture
def short_dir():
    """A directory with a short path: a Unix socket path must fit in 108 bytes."""
    d = tempfile.mkdtemp(prefix="inferd-")
    yield d
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)


def test_admin_routes_take_the_admin_key_not_the_api_key(start_daemon):
    admin_port = free_port()
    d = start_daemon(["--api-key", "sk-api", "--admin-port", str(admin_port), "--log-level", "debug"])
    api = {"Authorization": "Bearer sk-api"}
    for method, path in (("GET", "/admin/supervisor"), ("GET", "/admin/warmup"), ("POST", "/admin/probe")):
        none = requests.request(method, d.url + path, json={}, timeout=10)
        assert none.status_code == 401, (path, none.text)
        assert "Authorization: Bearer <admin key>" in none.json()["error"]["message"]
        wrong = requests.request(method, d.url + path, json={}, headers=api, timeout=10)
        assert wrong.status_code == 401, (path, wrong.text)
        assert "the API key does not open admin endpoints" in wrong.json()["error"]["message"]
    assert d.admin_get("/admin/supervisor").status_code == 200
    assert d.admin_get("/admin/warmup").status_code == 200
    assert d.admin_post("/admin/probe", json={}).status_code in (200, 503)  # 503: no golden answer yet
    # The admin key is not an API key either.
    assert d.get("/v1/models", headers=d.admin_headers()).status_code == 401
    assert d.get("/v1/models", headers=api).status_code == 200
    # With an admin key, the admin listener wants it too.
    admin = f"http://127.0.0.1:{admin_port}"
    assert requests.get(admin + "/admin/supervisor", timeout=10).status_code == 401
    assert requests.get(admin + "/admin/supervisor", headers=d.admin_headers(), timeout=10).status_code == 200
    log = d.output()
    assert "admin endpoints: need the admin key from " + d.admin_key_file in log
    assert d.admin_key not in log


def test_an_admin_key_on_the_command_line_is_never_logged(start_daemon):
    key = "adm-cmdline-" + os.urandom(8).hex()
    d = start_daemon(["--admin-api-key", key, "--log-level", "debug"], admin_key=False)
    headers = {"Authorization": f"Bearer {key}"}
    assert d.get("/admin/supervisor", headers=headers).status_code == 200
    assert d.get("/admin/supervisor", headers={"Authorization": f"Bearer {key}x"}).status_code == 401
    assert "admin endpoints: need the admin key\n" in d.output()
    d.signal(15)
    assert d.wait(timeout=60) == 0
    assert key not in d.output()


def test_without_an_admin_key_admin_routes_are_only_on_the_admin_port(start_daemon):
    admin_port = free_port()
    d = start_daemon(["--admin-port", str(admin_port)], admin_key=False)
    r = d.get("/admin/supervisor")
    assert r.status_code == 403
    assert "--admin-port" in r.json()["error"]["message"] and "--admin-api-key-file" in r.json()["error"]["message"]
    assert d.post("/admin/warmup", json={}).status_code == 403
    # A client that claims to be local, as through a reverse proxy, changes nothing.
    assert d.get("/admin/supervisor", headers={"X-Forwarded-For": "127.0.0.1"}).status_code == 403

    admin = f"http://127.0.0.1:{admin_port}"
    report = requests.get(admin + "/admin/supervisor", timeout=10)
    assert report.status_code == 200 and "monitors" in report.json()
    assert requests.get(admin + "/admin/warmup", timeout=10).status_code == 200
    assert requests.get(admin + "/health/ready", timeout=10).json()["state"] == "Serving"
    assert "inferd_state" in requests.get(admin + "/metrics", timeout=10).text
    # The API is not served there.
    assert requests.get(admin + "/v1/models", timeout=10).status_code == 404
    assert requests.post(admin + "/v1/completions", json={"prompt": "hi"}, timeout=10).status_code == 404
    log = d.output()
    assert f"http: admin listener on 127.0.0.1:{admin_port}" in log
    assert "admin endpoints: on the admin listener only" in log


def test_without_an_admin_key_or_listener_admin_routes_are_not_served(start_daemon):
    d = start_daemon([], admin_key=False)
    assert d.get("/admin/supervisor").status_code == 403
    assert d.post("/admin/probe", json={}).status_code == 403
    assert "admin endpoints: not served (no admin key, no admin listener)" in d.output()


def test_admin_unix_socket(start_daemon, short_dir):
    path = os.path.join(short_dir, "admin.sock")
    # A socket left by a process that is gone is replaced.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()
    d = start_daemon(["--admin-socket", path], admin_key=False)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    status, body = unix_request(path, "GET", "/admin/supervisor")
    assert status == 200 and "monitors" in json.loads(body)
    assert unix_request(path, "GET", "/health/live")[0] == 200
    assert unix_request(path, "POST", "/v1/completions", b'{"prompt": "hi"}')[0] == 404
    assert d.get("/admin/supervisor").status_code == 403
    assert f"http: admin listener on unix socket {path}" in d.output()
    # A second daemon does not take a socket that answers.
    port = free_port()
    r = subprocess.run([str(INFERD), "--host", "127.0.0.1", "--port", str(port), "--admin-socket", path],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert f"cannot listen on unix socket {path}: another process is listening on it" in r.stderr
    assert unix_request(path, "GET", "/health/live")[0] == 200
    d.signal(15)
    assert d.wait(timeout=60) == 0
    assert not os.path.exists(path)


def test_a_file_in_the_way_of_the_admin_socket_fails_start_up(short_dir):
    path = os.path.join(short_dir, "not-a-socket")
    open(path, "w").close()
    r = subprocess.run([str(INFERD), "--host", "127.0.0.1", "--port", str(free_port()), "--admin-socket", path],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert f"cannot listen on unix socket {path}: a file that is not a socket is in the way" in r.stderr
