"""Issue #15, item 6: SIGTERM to ``privnlp fl client`` must stop its SuperNode (nothing outlives its parent)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytestmark = pytest.mark.integration


def _pids_with(token: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if token in cmd and "flower-supernode" in cmd:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_to_fl_client_stops_its_supernode(tmp_path):
    from privnlp.mechanisms.federated.flower import free_port

    link = f"127.0.0.1:{free_port()}"  # nothing listens here: the SuperNode keeps retrying until stopped
    env = dict(os.environ, HF_HUB_OFFLINE="1", FLWR_TELEMETRY_ENABLED="0")
    cli = subprocess.Popen([sys.executable, "-m", "privnlp.cli.main", "fl", "client", "--superlink", link,
                            "--flwr-home", str(tmp_path / "home")], env=env, cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        nodes: list[int] = []
        while time.monotonic() < deadline and not nodes:
            nodes = _pids_with(link)
            time.sleep(0.25)
        assert nodes, "the SuperNode never started"
        cli.send_signal(signal.SIGTERM)
        cli.wait(30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in nodes):
            time.sleep(0.2)
        assert not any(_alive(p) for p in nodes), "the SuperNode outlived `privnlp fl client`"
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
        for p in _pids_with(link):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def _superlink_pids(port: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "flower-superlink" in cmd and f"--port {port}" in cmd:
                out.append(int(d.name))
    return out


def test_sigterm_to_fl_server_stops_its_superlink(tmp_path):
    from privnlp.mechanisms.federated.flower import free_port

    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", FLWR_TELEMETRY_ENABLED="0")
    cli = subprocess.Popen([sys.executable, "-m", "privnlp.cli.main", "fl", "server", "--port", str(port),
                            "--work-dir", str(tmp_path / "run"), "--timeout", "120"], env=env, cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        links: list[int] = []
        while time.monotonic() < deadline and not links:
            links = _superlink_pids(port)
            time.sleep(0.25)
        assert links, "the SuperLink never started"
        time.sleep(2.0)  # let the CLI reach its wait for SuperNodes
        cli.send_signal(signal.SIGTERM)
        cli.wait(30)
        assert cli.returncode != 0  # an interrupted run is not a success
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in links):
            time.sleep(0.2)
        assert not any(_alive(p) for p in links), "the SuperLink outlived `privnlp fl server`"
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
        for p in _superlink_pids(port):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
