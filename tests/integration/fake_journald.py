"""A stand-in journald for one command, run inside its own mount namespace:
    unshare -m --propagation private python3 fake_journald.py STDERR_FILE -- CMD...
It mounts a tmpfs on /run (visible only in this namespace), listens on
/run/systemd/journal/socket as journald does, starts CMD with stderr on
STDERR_FILE and JOURNAL_STREAM naming that file, and prints every record CMD
sends as one JSON object per line. It stops CMD when it is itself terminated."""
import json
import os
import signal
import socket
import struct
import subprocess
import sys


def parse(datagram):
    """Journal native protocol: "KEY=value\\n", or "KEY\\n" + u64le length + value + "\\n"."""
    fields, i = {}, 0
    while i < len(datagram):
        nl = datagram.index(b"\n", i)
        line = datagram[i:nl]
        if b"=" in line:
            key, value = line.split(b"=", 1)
            i = nl + 1
        else:
            key = line
            (n,) = struct.unpack_from("<Q", datagram, nl + 1)
            value = datagram[nl + 9:nl + 9 + n]
            i = nl + 9 + n + 1
        fields[key.decode()] = value.decode(errors="replace")
    return fields


def main():
    stderr_path, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    subprocess.run(["mount", "-t", "tmpfs", "fake-journald", "/run"], check=True)
    os.makedirs("/run/systemd/journal")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("/run/systemd/journal/socket")
    sock.settimeout(0.2)
    with open(stderr_path, "w") as err:
        st = os.fstat(err.fileno())
        env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
        proc = subprocess.Popen(cmd, stdout=err, stderr=err, env=env)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while not stop and proc.poll() is None:
        try:
            print(json.dumps(parse(sock.recv(1 << 16))), flush=True)
        except socket.timeout:
            pass
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
