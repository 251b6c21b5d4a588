"""`privnlp attack canary|eavesdrop|watermark`: the memorization evaluators on the bundled scenarios.

Papers: ``../shared/papers/unintended-memorization-under-fl.txt``, ``dp-bert-and-dp-wordpiece.txt``
(canary exposure / extraction), ``record-level-privacy-leakage-in-fl.txt`` (eavesdropping, watermark).
Call :func:`register` on a typer app to add the commands; the scenarios (torch) load through their
registry when a command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import typer

from privnlp.attacks import get as get_attack
from privnlp.core.report import atomic_write_text
from privnlp.evaluation.scenarios import get as get_scenario
from privnlp.mechanisms import get as get_mech

__all__ = ["register"]


def _emit(payload: dict[str, Any], out: Path | None) -> None:
    text = json.dumps(payload, indent=2, sort_keys=True, default=str)
    if out is not None:
        atomic_write_text(out, text + "\n")
    typer.echo(text)


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r})
    return {k: float(np.nanmean([r.get(k, float("nan")) for r in rows])) for k in keys}


def register(app: typer.Typer) -> typer.Typer:
    """Add ``canary``, ``eavesdrop`` and ``watermark`` to ``app`` (the ``privnlp attack`` group)."""

    @app.command("canary")
    def canary(
        mechanism: str | None = typer.Option(
            None,
            help="registered DP-SGD-like mechanism (e.g. dp_sgd); default: undefended training",
        ),
        preset: str = typer.Option("quick", help="quick | full"),
        repeats: int | None = typer.Option(
            None, min=0, help="canary insertions (default: the preset's)"
        ),
        pattern: str | None = typer.Option(
            None, help="canary pattern, e.g. 'my pin code is {digits:4}'"
        ),
        seed: int = typer.Option(0, min=0),
        out: Path | None = typer.Option(None, help="write the JSON result here"),
    ) -> None:
        """Train the lm.canary model and measure canary exposure + extraction (RS / BS / beam)."""

        mech = get_mech(mechanism).example(preset) if mechanism else None
        run = get_scenario("lm.canary")(preset, repeats=repeats, pattern=pattern).run(
            mech, rng=np.random.default_rng(seed)
        )
        rows = []
        for tr in run.trials:
            row: dict[str, float] = {}
            for name in ("canary_exposure", "canary_extraction"):
                atk = get_attack(name).example(preset)
                row.update(
                    atk.run(tr.observation, rng=np.random.default_rng(seed)).score(tr.ground_truth)
                )
            rows.append(row)
        _emit(
            {
                "scenario": "lm.canary",
                "mechanism": mechanism,
                "seed": seed,
                "metrics": _mean(rows),
                "utility": dict(run.utility),
                "config": dict(run.config),
            },
            out,
        )

    def _fl(attack: str, preset: str, seed: int, rounds: int | None, out: Path | None) -> None:
        run = get_scenario("fl.snapshots")(preset, rounds=rounds).run(
            None, rng=np.random.default_rng(seed)
        )
        atk = get_attack(attack).example(preset)
        rows = [
            atk.run(tr.observation, rng=np.random.default_rng(seed)).score(tr.ground_truth)
            for tr in run.trials
        ]
        _emit(
            {
                "scenario": "fl.snapshots",
                "attack": attack,
                "seed": seed,
                "metrics": _mean(rows),
                "utility": dict(run.utility),
                "config": dict(run.config),
            },
            out,
        )

    @app.command("eavesdrop")
    def eavesdrop(
        preset: str = typer.Option("quick"),
        seed: int = typer.Option(0, min=0),
        rounds: int | None = typer.Option(None, min=3),
        out: Path | None = typer.Option(None),
    ) -> None:
        """Eavesdropping attack (ECorr + final exposure) on the fl.snapshots scenario vs the Carlini baseline."""
        _fl("eavesdropping", preset, seed, rounds, out)

    @app.command("watermark")
    def watermark(
        preset: str = typer.Option("quick"),
        seed: int = typer.Option(0, min=0),
        rounds: int | None = typer.Option(None, min=3),
        out: Path | None = typer.Option(None),
    ) -> None:
        """Watermark attack (WCorr + final exposure) on the fl.snapshots scenario vs the Carlini baseline."""
        _fl("watermark", preset, seed, rounds, out)

    return app
