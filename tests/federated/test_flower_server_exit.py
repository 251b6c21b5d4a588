"""Issue #15, item 5: ``privnlp fl server`` exits non-zero when the private run failed (e.g. failed closed)."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

pytest.importorskip("flwr")


def _fake_flower(monkeypatch, result):
    from privnlp.mechanisms.federated import flower as fl

    proc = SimpleNamespace(poll=lambda: None, pid=-1)
    monkeypatch.setattr(fl, "write_app", lambda d, cfg: d)
    monkeypatch.setattr(fl, "flower_env", lambda *a, **k: {})
    monkeypatch.setattr(fl, "start_superlink", lambda *a, **k: proc)
    monkeypatch.setattr(fl, "_wait_port", lambda *a, **k: None)
    monkeypatch.setattr(
        fl, "submit_run", lambda *a, **k: subprocess.CompletedProcess([], 0, "", "")
    )
    monkeypatch.setattr(fl, "wait_for_result", lambda *a, **k: result)
    monkeypatch.setattr(fl, "stop", lambda procs: None)


@pytest.mark.parametrize(
    "result, code",
    [
        (
            {
                "error": "ProtocolError: round 1: 2 of 3 selected nodes replied; DP-FedAvg fails closed"
            },
            1,
        ),
        ({"claim": {"kind": "dp", "epsilon": 1.0}, "history": []}, 0),
    ],
)
def test_server_exit_code_follows_the_run(monkeypatch, tmp_path, result, code):
    from typer.testing import CliRunner

    import privnlp.cli.fl as cli_fl
    from privnlp.cli.fl import app

    _fake_flower(monkeypatch, result)
    monkeypatch.setattr(
        cli_fl, "_forward_termination", lambda: None
    )  # keep pytest's own signal handlers
    res = CliRunner().invoke(app, ["server", "--work-dir", str(tmp_path / "w"), "--timeout", "5"])
    assert res.exit_code == code, res.output
    if code:
        assert "fails closed" in res.output


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_real_failed_run_exits_1_and_leaves_no_process(tmp_path):
    """Loopback, real processes: no SuperNode ever joins, the ServerApp fails after --node-wait, the CLI exits 1
    with the error on stderr (bounded wait), and its SuperLink is gone."""
    import os
    import sys
    from pathlib import Path

    from privnlp.mechanisms.federated.flower import _running, free_port

    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", FLWR_TELEMETRY_ENABLED="0")
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
            str(tmp_path / "run"),
            "--node-wait",
            "2",
            "--timeout",
            "60",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = cli.communicate(timeout=90)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, 9)
    assert cli.returncode == 1, (out, err)
    assert "have no live SuperNode" in err
    assert '"claim"' not in out
    links = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if f"127.0.0.1:{port}" in cmd or f"--port {port}" in cmd:
                links.append(int(d.name))
    assert not [p for p in links if _running(p)]
