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
    monkeypatch.setattr(fl, "submit_run", lambda *a, **k: subprocess.CompletedProcess([], 0, "", ""))
    monkeypatch.setattr(fl, "wait_for_result", lambda *a, **k: result)
    monkeypatch.setattr(fl, "stop", lambda procs: None)


@pytest.mark.parametrize("result, code", [
    ({"error": "ProtocolError: round 1: 2 of 3 selected nodes replied; DP-FedAvg fails closed"}, 1),
    ({"claim": {"kind": "dp", "epsilon": 1.0}, "history": []}, 0),
])
def test_server_exit_code_follows_the_run(monkeypatch, tmp_path, result, code):
    from typer.testing import CliRunner

    from privnlp.cli.fl import app

    import privnlp.cli.fl as cli_fl

    _fake_flower(monkeypatch, result)
    monkeypatch.setattr(cli_fl, "_forward_termination", lambda: None)  # keep pytest's own signal handlers
    res = CliRunner().invoke(app, ["server", "--work-dir", str(tmp_path / "w"), "--timeout", "5"])
    assert res.exit_code == code, res.output
    if code:
        assert "fails closed" in res.output
