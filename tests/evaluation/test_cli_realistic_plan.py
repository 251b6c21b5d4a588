"""`privnlp evaluate --preset realistic` states its expected time before any step runs (issue #29 item 8)."""

from __future__ import annotations

from typer.testing import CliRunner

import privnlp.evaluation.cards as cards
from privnlp.cli.main import app


def test_realistic_preset_prints_its_plan_before_the_run(monkeypatch, tmp_path):
    calls = []

    def fake_evaluate_all(**kw):  # the run itself is not the point: the plan must come first
        calls.append(kw["preset"])
        raise SystemExit(3)

    monkeypatch.setattr(cards, "evaluate_all", fake_evaluate_all)
    r = CliRunner().invoke(
        app,
        ["evaluate", "--preset", "realistic", "--defense", "dp_sgd", "--report-dir", str(tmp_path)],
    )
    assert calls == ["realistic"], r.output
    assert "realistic preset: 6 audit steps, expected about" in r.output
    assert "interrupted run resumes" in " ".join(r.output.split())
