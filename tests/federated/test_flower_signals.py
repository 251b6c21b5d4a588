"""Issue #15, item 6: SIGTERM/SIGINT to ``privnlp fl client`` / ``privnlp fl server`` stop every Flower process
they started -- the SuperNode / SuperLink and their descendants (Flower 1.42 starts ``flower-superexec`` in a
session of its own, so a process-group kill alone misses it) -- and exit 128 + signal (bounded waits)."""

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


def _tree(pid: int) -> set[int]:
    from privnlp.mechanisms.federated.flower import _descendants

    return set(_descendants(pid))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_fl_client_stops_its_supernode(tmp_path, sig):
    from privnlp.mechanisms.federated.flower import free_port

    link = f"127.0.0.1:{free_port()}"  # nothing listens here: the SuperNode keeps retrying until stopped
    env = dict(os.environ, HF_HUB_OFFLINE="1", FLWR_TELEMETRY_ENABLED="0")
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "privnlp.cli.main",
            "fl",
            "client",
            "--superlink",
            link,
            "--flwr-home",
            str(tmp_path / "home"),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        nodes: list[int] = []
        while time.monotonic() < deadline and not nodes:
            nodes = _pids_with(link)
            time.sleep(0.25)
        assert nodes, "the SuperNode never started"
        tree = _tree(cli.pid)
        assert set(nodes) <= tree
        cli.send_signal(sig)
        assert cli.wait(30) == 128 + sig
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in tree):
            time.sleep(0.2)
        assert not [p for p in tree if _alive(p)], "a Flower process outlived `privnlp fl client`"
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
    run_dir = tmp_path / "run"
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "privnlp.cli.main",
            "fl",
            "server",
            "--port",
            str(port),
            "--work-dir",
            str(run_dir),
            "--timeout",
            "120",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        links: list[int] = []
        while time.monotonic() < deadline and not links:
            links = _superlink_pids(port)
            time.sleep(0.25)
        assert links, "the SuperLink never started"
        deadline = (
            time.monotonic() + 30
        )  # the CLI reaches its wait for SuperNodes; the ServerApp runs by then
        tree: set[int] = set()
        while time.monotonic() < deadline and not (run_dir / "out" / "server.log").exists():
            time.sleep(0.2)
        time.sleep(0.5)
        tree = _tree(cli.pid)
        assert len(tree) > len(links), tree  # SuperExec (and the ServerApp) besides the SuperLink
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(30) == 128 + signal.SIGTERM  # an interrupted run is not a success
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in tree):
            time.sleep(0.2)
        assert not [p for p in tree if _alive(p)], "a Flower process outlived `privnlp fl server`"
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
        for p in _superlink_pids(port):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
