"""`privnlp attack film|rlg|lamp|dlg|tag`: run a gradient-leakage attack on a saved observation
(``torch.save`` of a dict with the ``GradientObservation`` fields: ``model``, ``gradients``,
``tokenizer``, ``batch_size``, ``labels``, ``lengths``, ``noise_std``, ...; or of a
``GradientObservation`` itself) or on the bundled ``fedsgd.eavesdropper`` scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import typer

from privnlp.attacks import get
from privnlp.core.errors import MalformedInput
from privnlp.core.observations import GradientObservation
from privnlp.core.report import atomic_write_text
from privnlp.mechanisms import get as mget

app = typer.Typer(
    help="Run a bundled attack on a saved observation or a bundled scenario.", no_args_is_help=True
)

_OBS = typer.Option(
    None,
    "--observation",
    "-o",
    help="torch.save'd dict (or GradientObservation); omit to run the bundled scenario",
)
_OUT = typer.Option(
    None, "--out", help="write the result (reconstructions, raw, scores) as JSON here"
)
_BATCH = typer.Option(1, "--batch-size", "-b", help="scenario: records per client update")
_SEED = typer.Option(0, "--seed", help="random seed")
_MECH = typer.Option(
    None,
    "--mechanism",
    "-m",
    help="scenario: a registered defense (e.g. sign_sgd, frozen_embeddings)",
)


def _load_observation(path: Path) -> Any:
    import torch  # deferred: torch: CLI modules stay torch-free until a command runs

    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a malformed input
        raise MalformedInput(f"observation: cannot load {path}: {e}") from e
    if isinstance(obj, GradientObservation):
        return obj
    if not isinstance(obj, dict) or "gradients" not in obj or "model" not in obj:
        raise MalformedInput(
            f"observation: {path} must hold a GradientObservation or a dict with 'model' and "
            "'gradients' (plus optional tokenizer, batch_size, labels, lengths, noise_std)"
        )
    fields = set(GradientObservation.__dataclass_fields__)
    return GradientObservation(**{k: v for k, v in obj.items() if k in fields})


def _run(
    name: str,
    attack: Any,
    observation: Path | None,
    batch_size: int,
    seed: int,
    mechanism: str | None,
    task: str,
    out: Path | None,
) -> None:
    trials: list[tuple[Any, Any]] = []
    if observation is not None:
        trials.append((_load_observation(observation), None))
    else:
        # scenarios/gradient.py imports torch at the top: loaded when the command runs
        from privnlp.evaluation.scenarios.gradient import FedSGDEavesdropper

        mech = mget(mechanism)() if mechanism else None
        run = FedSGDEavesdropper(batch_size=batch_size, task=task).run(mech, rng=seed)
        trials = [
            (t.observation, t.ground_truth) for t in run.trials if attack.applies_to(t.observation)
        ]
    results = []
    for obs, gt in trials:
        res = attack.run(obs, rng=seed)
        row: dict[str, Any] = {
            "reconstructions": [
                r if isinstance(r, (str, int)) else str(r) for r in res.reconstructions
            ],
            "raw": {
                k: v
                for k, v in res.raw.items()
                if isinstance(v, (int, float, str, list, type(None)))
            },
        }
        if gt is not None:
            row["scores"] = res.score(gt)
            row["ground_truth"] = gt.get("texts") if isinstance(gt, dict) else gt
        results.append(row)
        typer.echo(
            json.dumps(
                {"reconstructions": row["reconstructions"][:4], "scores": row.get("scores")},
                default=str,
            )
        )
    summary: dict[str, Any] = {"attack": name, "params": attack.params(), "trials": results}
    if results and "scores" in results[0]:
        keys = results[0]["scores"].keys()
        summary["mean_scores"] = {
            k: float(np.mean([r["scores"][k] for r in results])) for k in keys
        }
        typer.echo(
            f"mean {attack.headline_metric}: {summary['mean_scores'].get(attack.headline_metric)}"
        )
    if out is not None:
        flat = dict(summary)
        if len(results) == 1:
            flat["reconstructions"] = results[0]["reconstructions"]
        atomic_write_text(out, json.dumps(flat, indent=2, default=str))


@app.command()
def film(
    observation: Path | None = _OBS,
    batch_size: int = _BATCH,
    beam_size: int = typer.Option(32, help="beam size k"),
    reorder_steps: int = typer.Option(200, help="steps of each reordering stage"),
    repetitions: int = typer.Option(1, help="sentences to recover (repeated beam searches)"),
    mechanism: str | None = _MECH,
    seed: int = _SEED,
    out: Path | None = _OUT,
) -> None:
    """FILM: bag of words -> beam search -> reordering on a GPT-2 style LM's gradient."""

    a = get("film")(beam_size=beam_size, reorder_steps=reorder_steps, repetitions=repetitions)
    _run("film", a, observation, batch_size, seed, mechanism, "lm", out)


@app.command()
def rlg(
    observation: Path | None = _OBS,
    layer: str | None = typer.Option(None, help="output layer parameter name"),
    num_labels: int | None = typer.Option(None, help="known S (default: from the spectrum)"),
    method: str = typer.Option("rlg", help="rlg | sign (Yin et al. baseline)"),
    batch_size: int = _BATCH,
    mechanism: str | None = _MECH,
    seed: int = _SEED,
    out: Path | None = _OUT,
) -> None:
    """RLG: the set of labels behind an update, from the output layer's gradient."""

    a = get("rlg")(layer=layer, num_labels=num_labels, method=method)
    _run("rlg", a, observation, batch_size, seed, mechanism, "classifier", out)


def _gm(name: str, observation, batch_size, iterations, mechanism, seed, out, **kw) -> None:
    a = get(name)(iterations=iterations, **kw)
    _run(name, a, observation, batch_size, seed, mechanism, "classifier", out)


@app.command()
def lamp(
    observation: Path | None = _OBS,
    batch_size: int = _BATCH,
    iterations: int = typer.Option(10),
    loss: str = typer.Option("cos", help="cos | tag (L2+L1)"),
    mechanism: str | None = _MECH,
    seed: int = _SEED,
    out: Path | None = _OUT,
) -> None:
    """LAMP: gradient matching + discrete steps guided by an auxiliary LM (classifier, known labels/lengths)."""
    _gm("lamp", observation, batch_size, iterations, mechanism, seed, out, loss=loss)


@app.command()
def dlg(
    observation: Path | None = _OBS,
    batch_size: int = _BATCH,
    iterations: int = typer.Option(10),
    mechanism: str | None = _MECH,
    seed: int = _SEED,
    out: Path | None = _OUT,
) -> None:
    """DLG: L2 gradient matching (LAMP engine preset)."""
    _gm("dlg", observation, batch_size, iterations, mechanism, seed, out)


@app.command()
def tag(
    observation: Path | None = _OBS,
    batch_size: int = _BATCH,
    iterations: int = typer.Option(10),
    mechanism: str | None = _MECH,
    seed: int = _SEED,
    out: Path | None = _OUT,
) -> None:
    """TAG: L2 + L1 gradient matching (LAMP engine preset)."""
    _gm("tag", observation, batch_size, iterations, mechanism, seed, out)
