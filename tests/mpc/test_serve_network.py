"""Issue #33 item 5 (partly): the MPC parties talk over torch.distributed (gloo, plain TCP; the PyPI wheel's gloo
has no TLS transport), so a rendezvous off loopback is refused before anything starts unless the user asserts an
encrypted, authenticated network (``--encrypted-network``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from privnlp.cli.mpc import app


@pytest.mark.parametrize("role", ["alice", "bob", "ttp"])
@pytest.mark.parametrize("host", ["10.0.0.5", "0.0.0.0", "mpc.example"])
def test_non_loopback_rendezvous_refused_before_any_import(role, host, monkeypatch):
    import privnlp.mechanisms.mpc.protocol as P

    def boom(*a, **k):  # pragma: no cover - reaching it is the failure
        raise AssertionError("a party started")

    monkeypatch.setattr(P, "init_party", boom)
    monkeypatch.setattr(P, "run_ttp", boom)
    res = CliRunner().invoke(
        app, ["serve", "--role", role, "--rendezvous", f"tcp://{host}:29500", "--model", "m.pt"]
    )
    assert res.exit_code == 2, res.output
    assert "is not loopback" in res.output and "--encrypted-network" in res.output


def test_loopback_is_not_refused_for_the_network(monkeypatch):
    """On loopback the check passes; the command then fails later for an unrelated reason (missing --model)."""
    res = CliRunner().invoke(app, ["serve", "--role", "alice", "--rendezvous", "tcp://127.0.0.1:1"])
    assert "is not loopback" not in res.output
