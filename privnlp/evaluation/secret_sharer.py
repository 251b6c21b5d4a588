"""The federated secret sharer grid: canary exposure of a FedAvg / DP-FedAvg LM over (p_u, p_e).

An evaluation (it trains a federated model with :mod:`privnlp.mechanisms.federated`, inserts canaries
with :mod:`privnlp.attacks.memorization` and reuses the scenarios' presets), so it lives in the
evaluation layer: ``from privnlp.evaluation.secret_sharer import secret_sharer_grid`` (it moved here
from ``privnlp.mechanisms.federated``, which must not import the evaluation layer).

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (Sec. 3 / Fig. 1: every user is a secret
sharer with probability p_u, every example of a sharer is replaced by the canary with probability p_e,
both Poisson; exposure / RS / BS of the final model for a grid of (p_u, p_e)). The insertion is the
memorization package's :func:`privnlp.attacks.memorization.federated_secret_sharer`; exposure is
:func:`privnlp.attacks.memorization.canary_exposure` (exact over the 4-digit space).

Usage::

    grid = secret_sharer_grid((0.1, 0.5), (0.1, 0.5), rounds=10, rng=0)
    for c in grid.cells: print(c.p_u, c.p_e, c.sharers, c.insertions, c.exposure)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from privnlp.attacks.memorization import canary_exposure, federated_secret_sharer
from privnlp.core.errors import InvalidArgument, check_probability
from privnlp.core.rng import as_numpy
from privnlp.data import generate_corpus, make_canary
from privnlp.evaluation.scenarios.federated import FL_DP_FEDAVG_PRESETS
from privnlp.evaluation.scenarios.memorization import digit_bpe_tokenizer, heldout_loss
from privnlp.mechanisms.federated.client import lm_client_data, lm_task
from privnlp.mechanisms.federated.mechanisms import FedAvg
from privnlp.mechanisms.federated.simulator import FedSimulator

__all__ = ["SecretSharerCell", "SecretSharerGrid", "secret_sharer_run", "secret_sharer_grid"]


@dataclass(frozen=True)
class SecretSharerCell:
    """One federated secret-sharer run (Table 1 of ``unintended-memorization-under-fl.txt``).

    Attributes:
        p_u: the probability that a user is a secret sharer.
        p_e: the probability that each of a sharer's examples is replaced by the canary.
        seed: the run's seed (corpus, canary, training).
        sharers: the number of secret sharers drawn.
        insertions: the number of examples replaced by the canary.
        exposure: the canary's exposure in bits under the final model.
        log2_space: log2 of the canary's randomness space (the maximal exposure).
        extracted: whether the canary has rank 1 (scores best among its space).
        heldout_loss: the final model's loss on held-out users.
        epsilon: the run's finite epsilon, where the mechanism claims one.
    """

    p_u: float
    p_e: float
    seed: int
    sharers: int
    insertions: int
    exposure: float
    log2_space: float
    extracted: bool
    heldout_loss: float
    epsilon: float | None


@dataclass(frozen=True)
class SecretSharerGrid:
    """Every cell of a secret-sharer grid.

    Attributes:
        cells: one cell per (p_u, p_e, seed).
        config: the grid's settings.
    """

    cells: tuple[SecretSharerCell, ...]
    config: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"cells": [asdict(c) for c in self.cells], "config": dict(self.config)}

    def mean_exposure(self) -> dict[tuple[float, float], float]:
        out: dict[tuple[float, float], list[float]] = {}
        for c in self.cells:
            out.setdefault((c.p_u, c.p_e), []).append(c.exposure)
        return {k: float(np.mean(v)) for k, v in out.items()}


def secret_sharer_run(
    p_u: float,
    p_e: float,
    *,
    mechanism: Any = None,
    preset: str = "quick",
    rounds: int | None = None,
    n_users: int | None = None,
    rng: Any,
) -> SecretSharerCell:
    """One federated secret-sharer run (``mechanism=None``: plain weighted FedAvg with the
    ``fl.dp_fedavg`` preset's client hyperparameters).

    Args:
        p_u: the probability that a user is a secret sharer, in [0, 1].
        p_e: the probability that each of a sharer's examples is replaced, in [0, 1].
        mechanism: a federated mechanism (``FedAvg`` / ``DPFedAvg``); ``None`` = the preset's FedAvg.
        preset: a key of the ``fl.dp_fedavg`` scenario presets (``"quick"``, ``"full"``).
        rounds: training rounds (default: the preset's).
        n_users: users in the generated corpus (default: the preset's).
        rng: randomness (keyword-only).

    Returns:
        The cell.

    Raises:
        InvalidArgument: ``p_u`` / ``p_e`` outside [0, 1] or an unknown ``preset``.
    """

    check_probability("p_u", p_u)
    check_probability("p_e", p_e)
    if preset not in FL_DP_FEDAVG_PRESETS:
        raise InvalidArgument(
            f"preset must be one of {sorted(FL_DP_FEDAVG_PRESETS)}; got {preset!r}"
        )
    cfg = FL_DP_FEDAVG_PRESETS[preset]
    g = as_numpy(rng)
    seed = int(g.integers(0, 2**31 - 1))
    corpus_cfg = dict(cfg["corpus"], **({"n_users": int(n_users)} if n_users else {}))
    corpus = generate_corpus(**corpus_cfg, seed=seed)
    users = list(corpus.users)
    held = set(users[-int(cfg["heldout_users"]) :])
    train = [r for r in corpus.records if r.user_id not in held]
    canary = make_canary(cfg["pattern"], rng=g)
    inserted, sharers, n_ins = federated_secret_sharer(train, canary, p_u=p_u, p_e=p_e, rng=g)
    by_user: dict[str, list[str]] = {}
    for r in inserted:
        by_user.setdefault(r.user_id, []).append(r.text)
    tok = digit_bpe_tokenizer(
        [r.text for r in train],
        int(cfg["vocab_size"]),
        model_max_length=cfg["model"]["n_positions"],
    )
    task = lm_task(tok, **cfg["model"], seed=seed)
    data = lm_client_data(tok, by_user, max_length=int(cfg["max_length"]))
    mech = FedAvg(**cfg["fedavg"]) if mechanism is None else mechanism
    res = FedSimulator(mech, task, data).run(
        int(rounds or cfg["rounds"]), rng=int(g.integers(0, 2**31 - 1)), evaluate=False
    )
    model = res.model.eval()
    est = canary_exposure(model, tok, canary, rng=g)
    scores_best = est.rank <= 1.0
    loss = heldout_loss(
        model, tok, [r.text for r in corpus.records if r.user_id in held], int(cfg["max_length"])
    )
    eps = (
        res.claim.epsilon
        if res.claim.epsilon is not None and math.isfinite(res.claim.epsilon)
        else None
    )
    return SecretSharerCell(
        float(p_u),
        float(p_e),
        seed,
        len(sharers),
        int(n_ins),
        float(est.exposure),
        float(est.log2_space),
        bool(scores_best),
        float(loss),
        eps,
    )


def secret_sharer_grid(
    p_us: Sequence[float] = (0.1, 0.3, 1.0),
    p_es: Sequence[float] = (0.05, 0.2, 0.5),
    *,
    mechanism: Any = None,
    preset: str = "quick",
    rounds: int | None = None,
    n_users: int | None = None,
    seeds: Sequence[int] = (0,),
    progress: bool = False,
    rng: Any = None,
) -> SecretSharerGrid:
    """Exposure for every (p_u, p_e, seed) (Poisson user and example selection). ``rng`` (optional)
    is mixed into every seed.

    Args:
        p_us: the p_u values (not empty).
        p_es: the p_e values (not empty).
        mechanism: as for :func:`secret_sharer_run`.
        preset: as for :func:`secret_sharer_run`.
        rounds: as for :func:`secret_sharer_run`.
        n_users: as for :func:`secret_sharer_run`.
        seeds: the seeds (not empty); a seed gives the same corpus and canary in every cell.
        progress: show a progress bar.
        rng: optional randomness mixed into every seed.

    Returns:
        The grid.

    Raises:
        InvalidArgument: an empty ``p_us`` / ``p_es`` / ``seeds``, or as :func:`secret_sharer_run`.
    """
    if not p_us or not p_es or not seeds:
        raise InvalidArgument("p_us, p_es and seeds must not be empty")
    base = 0 if rng is None else int(as_numpy(rng).integers(0, 2**31 - 1))
    combos = [(pu, pe, s) for pu in p_us for pe in p_es for s in seeds]
    it: Any = combos
    if progress:
        it = tqdm(combos, desc="secret sharer grid", unit="run")
    cells = tuple(
        secret_sharer_run(
            pu,
            pe,
            mechanism=mechanism,
            preset=preset,
            rounds=rounds,
            n_users=n_users,
            rng=np.random.default_rng([base, int(s)]),
        )
        for pu, pe, s in it
    )
    return SecretSharerGrid(
        cells,
        {
            "p_us": list(p_us),
            "p_es": list(p_es),
            "seeds": list(seeds),
            "preset": preset,
            "rounds": rounds,
            "n_users": n_users,
            "mechanism": "FedAvg (preset)" if mechanism is None else type(mechanism).__name__,
        },
    )
