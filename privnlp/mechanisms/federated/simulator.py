"""The embedded, deterministic federated simulator (no Ray, no network) with on-disk snapshots.

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (Algorithm 1 main loop),
``../shared/papers/record-level-privacy-leakage-in-fl.txt`` (M of N clients per round; every global
model is a snapshot an eavesdropper may observe -> :class:`~privnlp.core.ModelSnapshots`).

Usage::

    sim = FedSimulator(DPFedAvg(clip_norm=0.5, noise_multiplier=1.0, clients_per_round=10), task, client_data)
    res = sim.run(20, rng=0, snapshot_dir="runs/fl")      # -> FedRunResult
    res.claim.statement(); res.snapshots.load(3); res.history[-1].loss

Each round: select clients (fixed-size without replacement or Poisson) from the round's own seed
(``SeedSequence(base_seed, spawn_key=(round,))``), send each a :class:`FitIns` (Flower's message
shape), collect :class:`FitRes` replies (a client raising counts as a missing reply), let the
mechanism aggregate (DP-FedAvg fails closed on a missing reply), apply the server optimizer, record
the round in the ledger, stream the snapshot + selection to disk. Checkpoints hold the model, the
server momentum, the ledger and the base seed: a resumed run reproduces the uninterrupted one.

Privacy noise: ``run(rng=None)`` (or a secure generator) draws the server's DP-FedAvg noise and every
client's DP-SGD noise / Poisson masks from fresh OS entropy (nothing to replay on resume, nothing a
party can recompute). ``run(rng=seed)`` is a reproducible single-process simulation: the server noise
of round r comes from ``(seed, r)`` and client j's DP-SGD noise from ``(seed, r, j)`` -- passed to
:func:`local_update` as ``rng`` in-process, never through the ``FitIns`` config (whose ``seed`` drives
only the data order of plain local SGD) -- and the claim says "noise seeded".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from privnlp.accounting.ledger import DPLedger
from privnlp.core.claims import PrivacyClaim
from privnlp.core.errors import InvalidArgument, ProtocolError, check_range
from privnlp.core.observations import ModelSnapshots
from privnlp.core.rng import (
    check_noise_seed_allowed,
    noise_is_seeded,
    secure_numpy,
    secure_torch,
    seed_of,
)

from .aggregation import ServerOptimizer
from .client import ClientData, FitIns, FitRes, Task, local_update, trainable_state

__all__ = ["RoundRecord", "FedRunResult", "FedSimulator", "select_clients", "round_seeds"]


@dataclass(frozen=True)
class RoundRecord:
    """One round: who was selected, how many replied, client loss, update norms, noise, epsilon so far.

    Attributes:
        round: the round number, from 1.
        selected: the ids of the selected clients.
        num_replies: how many replied.
        loss: the mean local training loss of the replies.
        update_norms: the L2 norm of each reply's update before clipping.
        clipped: how many updates were clipped.
        noise_std: the std of the noise added to the average.
        epsilon: the user-level epsilon spent after the round (``None`` without a DP mechanism).
        seconds: wall-clock seconds of the round.
    """

    round: int
    selected: tuple[str, ...]
    num_replies: int
    loss: float
    update_norms: tuple[float, ...]
    clipped: int
    noise_std: float
    epsilon: float | None
    seconds: float


@dataclass(frozen=True)
class FedRunResult:
    """The trained global model, the snapshots (``None`` without ``snapshot_dir``), the claim, the
    ledger (``DPLedger.to_dict()``), the per-round history and the final evaluation.

    Attributes:
        model: the trained global model.
        snapshots: the global model after every round (``None`` without ``snapshot_dir``).
        claim: the run's privacy claim (from its ledger).
        ledger: ``DPLedger.to_dict()`` of the run.
        history: one record per round.
        metrics: ``task.evaluate`` on the final model.
        checkpoint: the path of the last checkpoint, where checkpoints were written.
    """

    model: Any
    snapshots: ModelSnapshots | None
    claim: PrivacyClaim
    ledger: Mapping[str, Any]
    history: tuple[RoundRecord, ...]
    metrics: Mapping[str, float] = field(default_factory=dict)
    checkpoint: str | None = None


def round_seeds(base_seed: int, server_round: int) -> tuple[np.random.Generator, int, int]:
    """(selection generator, client seed base, noise seed) of a round, independent of earlier rounds.

    Args:
        base_seed: the run's seed.
        server_round: the round number.
    """
    ss = np.random.SeedSequence(int(base_seed), spawn_key=(int(server_round),))
    a, b, c = ss.spawn(3)
    return (
        np.random.default_rng(a),
        int(b.generate_state(1)[0]),
        int(c.generate_state(2, np.uint64)[0] >> 1),
    )


def client_noise_rng(base_seed: int, server_round: int, j: int) -> np.random.Generator:
    """Seeded simulation only: the DP-SGD noise generator of the ``j``-th selected client of a round (a stream
    separate from :func:`round_seeds`; never sent to the client in a config)."""
    return np.random.default_rng(
        np.random.SeedSequence(int(base_seed), spawn_key=(int(server_round), 7, int(j)))
    )


def select_clients(
    ids: Sequence[str], clients_per_round: float, sampling: str, g: np.random.Generator
) -> list[str]:
    """Fixed-size: ``m`` of ``N`` without replacement; Poisson: each with probability ``m/N``.

    Args:
        ids: the population's client ids.
        clients_per_round: m (an integer for ``"fixed"``, the expected number for ``"poisson"``).
        sampling: ``"fixed"`` or ``"poisson"``.
        g: the selection generator (non-private randomness).

    Returns:
        The selected ids, in population order.
    """
    n = len(ids)
    if sampling == "fixed":
        idx = np.sort(g.choice(n, size=int(clients_per_round), replace=False))
    else:
        idx = np.flatnonzero(g.random(n) < float(clients_per_round) / n)
    return [ids[i] for i in idx]


def _atomic_torch_save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class FedSimulator:
    """In-process federated training of ``task`` over ``clients`` with a federated ``mechanism``.

    Args:
        mechanism: a :class:`~privnlp.mechanisms.federated.FedAvg` / ``DPFedAvg`` (or its leaky twin).
        task: :class:`~privnlp.mechanisms.federated.client.Task` (architecture + per-sample loss).
        clients: client id -> :class:`ClientData` (the order fixes the population order).
        client_fn: optional ``client_fn(client_id, FitIns) -> FitRes`` replacing the honest local update
            (failure injection / malicious clients in tests). Raising = no reply.
        init_state: optional initial trainable weights (default: ``task.model_factory()``'s).
    """

    def __init__(
        self,
        mechanism: Any,
        task: Task,
        clients: Mapping[str, ClientData],
        client_fn: Callable[[str, FitIns], FitRes] | None = None,
        init_state: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        if not clients:
            raise InvalidArgument("clients must not be empty")
        self.mechanism = mechanism
        self.task = task
        self.clients = clients
        self.client_fn = client_fn
        self.init_state = init_state

    # ------------------------------------------------------------------------------------------
    def run(
        self,
        rounds: int,
        *,
        rng: Any = None,
        snapshot_dir: str | os.PathLike | None = None,
        checkpoint_path: str | os.PathLike | None = None,
        resume_from: str | os.PathLike | None = None,
        evaluate: bool = True,
        progress: bool = False,
    ) -> FedRunResult:
        """Train until ``rounds`` rounds in total (a resumed run continues to ``rounds``).

        ``snapshot_dir``: write ``round_00000.pt`` (initial), ``round_00001.pt``... and
        ``selection.jsonl`` as the run goes (streamed); ``checkpoint_path``: atomically rewritten after
        every round; ``resume_from``: a checkpoint written by an earlier run with the same mechanism.
        ``rng``: ``None`` (default) = secure noise everywhere; a seed = a reproducible simulation whose
        claim says "noise seeded" (see the module docstring).
        """
        check_range("rounds", rounds, 0, 10**9, integer=True)
        mech = self.mechanism
        ids = [str(k) for k in self.clients]
        n_users = len(ids)
        mech.check_population(n_users)
        model = self.task.model_factory()
        worker = self.task.model_factory()
        params = (
            trainable_state(model)
            if self.init_state is None
            else {k: v.clone() for k, v in self.init_state.items()}
        )
        server = ServerOptimizer(mech.server_lr, mech.server_momentum)
        ledger = DPLedger()
        history: list[RoundRecord] = []
        selection_log: list[tuple[str, ...]] = [()]
        snap_paths: list[str] = []
        start_round = 0
        seeded = noise_is_seeded(rng)
        max_copies = 1
        if resume_from is not None:
            ck = torch.load(resume_from, map_location="cpu", weights_only=False)
            if ck.get("format") != "privnlp.fed_checkpoint/1":
                raise InvalidArgument(
                    f"resume_from: {resume_from} is not a privnlp federated checkpoint"
                )
            if ck["mechanism"] != type(mech).__name__ or ck["params_of_mechanism"] != mech.params():
                raise InvalidArgument(
                    "resume_from: the checkpoint was written with another mechanism configuration; "
                    "resuming under other accounting parameters is refused"
                )
            params, base_seed, start_round = ck["params"], int(ck["base_seed"]), int(ck["round"])
            server.load_state_dict(ck["server"])
            ledger = DPLedger.from_dict(ck["ledger"])
            history = [RoundRecord(**h) for h in ck["history"]]
            selection_log = [tuple(s) for s in ck["selection"]]
            snap_paths = list(ck.get("snapshots", []))
            plan = ck["plan"]
            seeded = bool(
                ck.get("noise_seeded", seeded)
            )  # the run keeps its noise source across a resume
        else:
            base_seed = seed_of(rng if rng is not None else secure_numpy())
            plan = mech.plan(n_users, max(1, rounds))
        noisy = (plan.get("noise_multiplier") or 0) > 0 or getattr(
            mech, "client_max_grad_norm", None
        ) is not None
        if seeded and noisy:
            check_noise_seed_allowed(
                rng if resume_from is None else 0
            )  # PRIVNLP_REFUSE_SEEDED_NOISE=1 refuses
        snap_dir = Path(snapshot_dir) if snapshot_dir is not None else None
        if snap_dir is not None:
            snap_dir.mkdir(parents=True, exist_ok=True)
            if not snap_paths:
                snap_paths.append(self._snapshot(model, params, snap_dir, 0))
                (snap_dir / "selection.jsonl").write_text("")
        bar = None
        if progress:
            bar = tqdm(
                total=max(0, rounds - start_round), desc=f"{type(mech).__name__}", unit="round"
            )
        try:
            for r in range(start_round + 1, rounds + 1):
                t0 = time.perf_counter()
                mech.account(
                    ledger, plan, n_users, check=True
                )  # budget: refuse before any client trains
                g_sel, client_seed, noise_seed = round_seeds(base_seed, r)
                selected = select_clients(ids, mech.clients_per_round, mech.sampling, g_sel)
                replies, losses = [], []
                for j, cid in enumerate(selected):
                    ins = FitIns(params, mech.client_config(r, (client_seed + j) % (2**31 - 1)))
                    try:
                        rep = (
                            self.client_fn(cid, ins)
                            if self.client_fn is not None
                            else local_update(
                                self.task,
                                self.clients[cid],
                                ins,
                                model=worker,
                                rng=client_noise_rng(base_seed, r, j) if seeded else None,
                            )
                        )
                    except ProtocolError:
                        raise
                    except Exception:  # noqa: BLE001 - a failing client is a missing reply
                        rep = None
                    if rep is not None:
                        replies.append((cid, rep))
                        if "loss" in rep.metrics:
                            losses.append(float(rep.metrics["loss"]))
                if mech.require_all_replies() and len(replies) < len(selected):
                    missing = sorted(set(selected) - {c for c, _ in replies})
                    raise ProtocolError(
                        f"round {r}: clients {missing} did not reply; {type(mech).__name__} fails "
                        "closed (nothing of this round is released or accounted)"
                    )
                if not replies and not selected and not mech.require_all_replies():
                    update = None
                else:
                    g_noise = (
                        torch.Generator().manual_seed(noise_seed) if seeded else secure_torch()
                    )
                    update, info = mech.aggregate(
                        params,
                        [rep for _, rep in replies],
                        num_selected=len(selected),
                        plan=plan,
                        generator=g_noise,
                    )
                if update is not None:
                    params = server.step(params, update)
                mech.account(ledger, plan, n_users, check=False)
                for cid, rep in replies:
                    max_copies = max(max_copies, int(rep.metrics.get("dp-max-copies", 1)))
                    if "dp-steps" in rep.metrics:
                        ledger.record_client_steps(
                            cid,
                            rep.metrics["dp-noise-multiplier"],
                            rep.metrics["dp-sample-rate"],
                            int(rep.metrics["dp-steps"]),
                        )
                selection_log.append(tuple(selected))
                if snap_dir is not None:
                    snap_paths.append(self._snapshot(model, params, snap_dir, r))
                    with open(snap_dir / "selection.jsonl", "a") as f:
                        f.write(json.dumps({"round": r, "selected": list(selected)}) + "\n")
                eps = None
                if (
                    plan.get("noise_multiplier") is not None
                    and getattr(mech, "target_epsilon", None) is not None
                ):
                    eps = ledger.user_epsilon(plan["delta"])
                history.append(
                    RoundRecord(
                        r,
                        tuple(selected),
                        len(replies),
                        float(np.mean(losses)) if losses else math.nan,
                        tuple(info.update_norms) if update is not None else (),
                        info.clipped if update is not None else 0,
                        info.noise_std if update is not None else 0.0,
                        eps,
                        time.perf_counter() - t0,
                    )
                )
                if checkpoint_path is not None:
                    self._checkpoint(
                        Path(checkpoint_path),
                        params,
                        server,
                        ledger,
                        history,
                        selection_log,
                        snap_paths,
                        plan,
                        base_seed,
                        r,
                        seeded,
                    )
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        self._set(model, params)
        claim = mech.claim_for(ledger, n_users, plan)

        if seeded and noisy and claim.kind.value == "dp":
            claim = dataclasses.replace(claim, noise_seeded=True)
        if max_copies > 1 and claim.kind.value == "dp":
            claim = dataclasses.replace(
                claim,
                extra={**claim.extra, "record_max_copies": max_copies},
                notes=claim.notes
                + (
                    f"a client's data held up to {max_copies} copies of one record: the record-level guarantee of that "
                    f"record is the group-privacy one (group size {max_copies}); set dp-dedup (local_update(dedup=True)) "
                    "or rely on the user-level guarantee",
                ),
            )
        if hasattr(mech, "_last_claim"):
            mech._last_claim = claim
        metrics = (
            dict(self.task.evaluate(model)) if (evaluate and self.task.evaluate is not None) else {}
        )
        snaps = None
        if snap_dir is not None:
            snaps = ModelSnapshots(
                paths=tuple(snap_paths),
                selection=tuple(selection_log),
                model_factory=self.task.model_factory,
                tokenizer=self.task.tokenizer,
                meta={
                    "mechanism": type(mech).__name__,
                    "rounds": len(snap_paths) - 1,
                    "num_users": n_users,
                    "clients_per_round": mech.clients_per_round,
                    "sampling": mech.sampling,
                    "selection_index": "selection[r] = round r (1-based); "
                    "selection[0] = () for the initial model",
                },
            )
        return FedRunResult(
            model,
            snaps,
            claim,
            ledger.to_dict(),
            tuple(history),
            metrics,
            str(checkpoint_path) if checkpoint_path is not None else None,
        )

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def _set(model: torch.nn.Module, params: Mapping[str, torch.Tensor]) -> None:
        named = dict(model.named_parameters())
        with torch.no_grad():
            for k, v in params.items():
                named[k].copy_(v)

    def _snapshot(
        self, model: torch.nn.Module, params: Mapping[str, torch.Tensor], d: Path, r: int
    ) -> str:
        self._set(model, params)
        p = d / f"round_{r:05d}.pt"
        _atomic_torch_save(model.state_dict(), p)
        return str(p)

    def _checkpoint(
        self,
        path: Path,
        params,
        server,
        ledger,
        history,
        selection,
        snaps,
        plan,
        base_seed,
        r,
        seeded: bool = True,
    ) -> None:
        _atomic_torch_save(
            {
                "format": "privnlp.fed_checkpoint/1",
                "round": r,
                "params": params,
                "server": server.state_dict(),
                "ledger": ledger.to_dict(),
                "history": [asdict(h) for h in history],
                "selection": [list(s) for s in selection],
                "snapshots": list(snaps),
                "plan": dict(plan),
                "base_seed": int(base_seed),
                "noise_seeded": bool(seeded),
                "mechanism": type(self.mechanism).__name__,
                "params_of_mechanism": self.mechanism.params(),
            },
            path,
        )
