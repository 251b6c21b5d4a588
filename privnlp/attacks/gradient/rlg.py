"""RLG: revealing the set of labels from the gradient of the output (projection) layer.

Paper: Dang, Thakkar, Ramaswamy, Mathews, Chin, Beaufays, "Revealing and Protecting Labels in
Distributed Training", NeurIPS 2021 — ``../shared/papers/rlg-revealing-labels-from-gradients.txt``.

The update of the projection layer factors as ``dW = H^T G`` (Remark 1) with ``S`` = number of
labels behind it (batch size, or N samples x K local steps), every row of ``G`` has exactly one
negative coordinate, at the true label (Remark 3). With the right singular matrix ``Q`` (S x C)
of ``dW``, label ``c`` is in the batch only if ``q_c`` is linearly separable from every other
column by a hyperplane through the origin (Remark 4). Algorithm 1 checks that with one linear
program per label; we solve ``find r: r.q_c = -1, r.q_j >= 0 (j != c), |r_i| <= box`` with a
zero objective (scipy ``linprog``, HiGHS).

Speed (the paper screens with a perceptron on the 500 largest-norm points; we use the same
largest-norm points but with an *exact* screening): a label whose column lies in the cone of S
other columns is certainly infeasible (Farkas), and that is tested for all C labels at once by one
S x S solve per basis made of the largest-norm columns. Only the survivors go to HiGHS. Screening
never rejects a feasible label, so the answer is the paper's.

Baseline: Yin et al.'s sign rule (the paper's Eq. 5), ``{j : min_i dW_i^j < 0}``, valid only for
non-negative features (ReLU before the head).

Works on classifier heads and on an LM's output head (the labels are then the next tokens: RLG
returns the bag of next tokens). Use an *untied* head for the LM case: with tied input/output
embeddings the input-side rows are mixed in (FILM exploits those instead).

Threat model: an eavesdropper / honest-but-curious server sees the update of the projection layer
and knows the id-to-label map; nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.optimize import linprog

from privnlp.core.claims import Adversary, ThreatModel
from privnlp.core.errors import InvalidArgument, check_positive, check_range
from privnlp.core.observations import GradientObservation
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS
from privnlp.core.rng import seed_of

from ._common import set_prf

__all__ = [
    "find_head",
    "LabelSet",
    "estimate_num_labels",
    "reveal_labels",
    "sign_baseline",
    "RLG",
    "output_layer_gradient",
]

HEAD_NAMES = (
    "classifier.weight",
    "score.weight",
    "lm_head.weight",
    "classifier.out_proj.weight",
    "head.weight",
    "fc.weight",
    "output.weight",
)


def find_head(gradients: Any, candidates: Sequence[str] = HEAD_NAMES) -> str | None:
    """Name of the projection layer's weight: an exact match or a ``.``-separated suffix match.

    (A bare ``endswith`` would take GPT-2's ``transformer.h.0.mlp.c_fc.weight`` for ``fc.weight``
    when the tied ``lm_head.weight`` is absent from the update, and RLG would run on an MLP layer.)"""
    for c in candidates:
        for name in gradients:
            if name == c or name.endswith("." + c):
                return name
    return None


@dataclass(frozen=True)
class LabelSet:
    """The revealed set of labels.

    Attributes:
        labels: sorted label ids predicted to be behind the update.
        num_labels: ``S`` (estimated from the spectrum, or the known value).
        singular_values: the spectrum of the update (descending).
        num_lp: how many linear programs were solved after screening.
        method: ``"rlg"`` or ``"sign"``.
    """

    labels: tuple[int, ...]
    num_labels: int
    singular_values: tuple[float, ...] = ()
    num_lp: int = 0
    method: str = "rlg"


def estimate_num_labels(singular_values: Sequence[float], *, rtol: float = 1e-4) -> int:
    """``S = rank(dW)`` (Remark 2): singular values above ``rtol`` times the largest one, cut at the
    largest log-gap among those (float32 gradients leave a noise floor around 1e-7 relative).

    Args:
        singular_values: the singular values of the output layer's gradient, in decreasing order.
        rtol: the relative cut below which a singular value counts as zero.

    Returns:
        The estimated number of distinct labels in the batch (0 for a zero gradient).
    """
    s = np.asarray(singular_values, dtype=float)
    if s.size == 0 or s[0] <= 0:
        return 0
    rel = s / s[0]
    k = int(np.sum(rel > rtol))
    if k <= 1:
        return max(k, 1)
    # a sharp drop inside the kept part (e.g. noise floor of a float32 sum) also ends the rank
    logs = np.log(np.maximum(rel[: k + 1 if k < s.size else k], 1e-300))
    gaps = logs[:-1] - logs[1:]
    j = int(np.argmax(gaps))
    if gaps[j] > np.log(1e3) and j + 1 < k:
        return j + 1
    return k


def output_layer_gradient(gradients: Any, name: str | None = None, *, include_bias: bool = True):
    """``(C, d[+1])`` float64 numpy matrix of the projection layer's gradient (bias appended as a
    column: it is the gradient for a constant feature 1, so it keeps ``dW = H^T G``)."""

    if name is None:
        name = find_head(gradients)
        if name is None:
            raise InvalidArgument(
                "layer: cannot find the output layer's gradient; pass layer=<parameter name> "
                f"(one of {', '.join(list(gradients)[-6:])})"
            )
    if name not in gradients:
        raise InvalidArgument(f"layer {name!r} is not in the observed gradients")
    w = gradients[name]
    w = (
        w.detach().to(torch.float64).cpu().numpy()
        if isinstance(w, torch.Tensor)
        else np.asarray(w, float)
    )
    if w.ndim != 2:
        raise InvalidArgument(
            f"layer {name!r} must be a 2-D weight (labels x features); got shape {w.shape}"
        )
    if include_bias and name.endswith("weight"):
        bname = name[: -len("weight")] + "bias"
        if bname in gradients and gradients[bname] is not None:
            b = gradients[bname]
            b = (
                b.detach().to(torch.float64).cpu().numpy()
                if isinstance(b, torch.Tensor)
                else np.asarray(b, float)
            )
            if b.shape == (w.shape[0],):
                w = np.concatenate([w, b[:, None]], axis=1)
    return w, name


def sign_baseline(dW: np.ndarray) -> LabelSet:
    """Yin et al. (the paper's Eq. 5): labels whose gradient column has a negative entry.
    ``dW`` is ``(C, d)`` (PyTorch layout: one row per label).

    Args:
        dW: ``(C, d)`` gradient of the output layer, one row per label.

    Returns:
        The labels found (``method="sign"``).
    """
    labels = np.nonzero(dW.min(axis=1) < 0)[0]
    return LabelSet(tuple(int(i) for i in labels), int(labels.size), method="sign")


def _screen(
    Qn: np.ndarray,
    norms: np.ndarray,
    *,
    n_points: int,
    tol: float,
    rng: np.random.Generator,
    n_random: int = 16,
) -> np.ndarray:
    """Exact rejection: label c is infeasible if q_c = T lam, lam >= 0, for a basis T of other columns.

    Bases are drawn from the ``n_points`` largest-norm columns (all (S+1)-choose-S subsets of the
    top S+1, plus random S-subsets of the top ``n_points``). Returns a mask of survivors."""
    S, C = Qn.shape
    alive = np.ones(C, dtype=bool)
    order = np.argsort(-norms)
    top = order[: min(n_points, C)]
    bases: list[np.ndarray] = []
    first = order[: min(S + 1, C)]
    if first.size == S + 1:
        for drop in range(S + 1):
            bases.append(np.delete(first, drop))
    for _ in range(n_random):
        if top.size >= S:
            bases.append(rng.choice(top, size=S, replace=False))
    for idx in bases:
        T = Qn[:, idx]
        try:
            lam = np.linalg.solve(T, Qn[:, alive])
        except np.linalg.LinAlgError:
            continue
        # relative tolerance: a coefficient may be slightly negative from round-off only
        in_cone = (lam >= -tol * np.abs(lam).max(axis=0, keepdims=True)).all(axis=0)
        cols = np.nonzero(alive)[0]
        in_cone &= ~np.isin(cols, idx)
        alive[cols[in_cone]] = False
        if alive.sum() <= S:
            break
    return alive


def _lp_feasible(
    Q: np.ndarray,
    c: int,
    box: float,
    *,
    order: np.ndarray | None = None,
    first: int = 500,
    tol: float = 1e-9,
) -> bool:
    """LP(c) of the paper, solved exactly by constraint generation: start from the ``first``
    largest-norm columns, check the solution against all columns, add the violated ones and resolve.
    A subset being infeasible proves infeasibility; a solution that satisfies every column proves
    feasibility (so the answer equals the full LP's)."""

    S, C = Q.shape
    if order is None:
        order = np.arange(C)
    active = [j for j in order[: first + 1].tolist() if j != c]
    while True:
        A = Q[:, active]
        res = linprog(
            c=np.zeros(S),
            A_ub=-A.T,
            b_ub=np.zeros(len(active)),
            A_eq=Q[:, c][None, :],
            b_eq=[-1.0],
            bounds=[(-box, box)] * S,
            method="highs",
        )
        if res.status != 0:
            return False
        vals = res.x @ Q
        vals[c] = 0.0
        viol = np.nonzero(vals < -tol * max(1.0, float(np.abs(vals).max())))[0]
        viol = viol[~np.isin(viol, active)]
        if viol.size == 0:
            return True
        active.extend(viol[np.argsort(vals[viol])][:1000].tolist())


def _left_singular(dW: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left singular vectors and singular values of a tall (C x d) matrix. For C >> d, via the d x d
    Gram matrix (LAPACK's full SVD of a 16k x 257 matrix takes ~20 s on 2 cores, this ~0.2 s);
    singular values below ~1e-7 relative are then noise, far under the rank cut ``rtol``."""
    C, d = dW.shape
    if C <= 4 * d:
        U, s, _ = np.linalg.svd(dW, full_matrices=False)
        return U, s
    lam, V = np.linalg.eigh(dW.T @ dW)
    order = np.argsort(-lam)
    lam, V = np.maximum(lam[order], 0.0), V[:, order]
    s = np.sqrt(lam)
    keep = s > s[0] * 1e-7 if s[0] > 0 else np.zeros_like(s, dtype=bool)
    U = np.zeros((C, d))
    U[:, keep] = (dW @ V[:, keep]) / s[keep]
    return U, s


def reveal_labels(
    dW: np.ndarray,
    *,
    num_labels: int | None = None,
    rtol: float = 1e-4,
    box: float = 1e4,
    screening_points: int = 500,
    screen: bool = True,
    generate: bool = True,
    rng: Any = 0,
) -> LabelSet:
    """Algorithm 1 of the paper on ``dW`` of shape ``(C, d)`` (one row per label).

    Args:
        num_labels: known ``S`` (known-S mode); ``None`` estimates it from the spectrum.
        rtol: relative singular-value cut for the rank estimate.
        box: bound on every coordinate of ``r`` (the LP is bounded; ``r.q_c = -1`` fixes the scale).
        screening_points: number of largest-norm columns the exact cone screening draws bases from
            (and the first constraints of each LP).
        screen, generate: turn off the cone screening / the constraint generation (the plain
            Algorithm 1: one full LP per label) — same answer, slower.
    """
    check_positive("box", box)
    check_range("rtol", rtol, 0, 1, lo_inclusive=False)
    dW = np.asarray(dW, dtype=np.float64)
    if dW.ndim != 2:
        raise InvalidArgument(f"dW must be 2-D (labels x features); got shape {dW.shape}")
    C, d = dW.shape
    # right singular matrix of the paper's (d x C) dW is the left one of our (C x d) layout
    U, s = _left_singular(dW)
    S = estimate_num_labels(s, rtol=rtol) if num_labels is None else int(num_labels)
    if S < 1:
        return LabelSet((), 0, tuple(float(x) for x in s[:64]), 0)
    if num_labels is not None:
        check_range("num_labels", num_labels, 1, min(C, d), integer=True)
    Q = U[:, :S].T  # S x C
    norms = np.linalg.norm(Q, axis=0)
    Qn = Q / np.maximum(norms, 1e-300)  # separability through the origin ignores positive scaling
    g = (
        np.random.default_rng(rng if isinstance(rng, (int, np.integer)) else None)
        if not isinstance(rng, np.random.Generator)
        else rng
    )
    alive = (
        _screen(Qn, norms, n_points=screening_points, tol=1e-9, rng=g)
        if screen and S < C
        else np.ones(C, bool)
    )
    cand = np.nonzero(alive)[0]
    order = np.argsort(-norms)
    labels = [
        int(c)
        for c in cand
        if _lp_feasible(Qn, int(c), box, order=order, first=screening_points if generate else C)
    ]
    return LabelSet(
        tuple(sorted(labels)), S, tuple(float(x) for x in s[: min(64, s.size)]), int(cand.size)
    )


def _score(result: AttackResult, ground_truth: Any) -> dict[str, float]:
    """Ground truth: the label sequence (or a dict with ``labels``) behind the update."""
    gold_seq = ground_truth.get("labels") if isinstance(ground_truth, dict) else ground_truth
    gold_seq = [int(x) for x in np.asarray(gold_seq).ravel().tolist()]
    pred = result.reconstructions
    out = set_prf(pred, set(gold_seq))
    out["length_error"] = float(abs(int(result.raw.get("num_labels", 0)) - len(gold_seq)))
    return out


@ATTACKS.register("rlg")
class RLG(Attack):
    """Reveal the set of labels behind an update from its output-layer gradient (RLG, Algorithm 1).

    Implements Dang et al. 2021, Sec. 3 (the gradient of the projection layer is a product whose left
    singular vectors span the labels' rows; Algorithm 1: SVD, then one linear program per label to test
    whether a separating direction exists). The adversary is an eavesdropper on one update that knows the
    id-to-label map. Headline metric: ``f1`` of the recovered label set (higher = more leakage); the scorer
    also reports precision, recall and exact match.

    Args:
        layer: parameter name of the projection layer (``None``: ``classifier.weight`` /
            ``lm_head.weight`` / ... auto-detected).
        num_labels: the number ``S`` of distinct labels in the batch, >= 1, if known (``None``: estimated
            from the singular-value spectrum with ``rtol``).
        method: ``"rlg"`` (SVD + LP) or ``"sign"`` (Yin et al.'s Eq. 5 baseline, ReLU features only).
        rtol: relative singular-value threshold for the rank estimate, > 0.
        box: bound on the LP variables (> 0).
        screening_points: random directions tried before the LPs, >= 1.
        include_bias: append the bias gradient as an extra feature column.

    Raises:
        InvalidArgument: an unknown ``method`` or an argument outside its range.
    """

    paper = (
        "Dang et al., Revealing and Protecting Labels in Distributed Training, NeurIPS 2021 "
        "(shared/papers/rlg-revealing-labels-from-gradients.txt)"
    )
    observation_type = GradientObservation
    threat_model = ThreatModel(
        adversary=Adversary.EAVESDROPPER,
        observes=("output-layer update",),
        knows=("id-to-label map",),
        goal="the set of labels (or next tokens) behind the update",
    )
    headline_metric = "f1"

    def __init__(
        self,
        layer: str | None = None,
        num_labels: int | None = None,
        method: str = "rlg",
        rtol: float = 1e-4,
        box: float = 1e4,
        screening_points: int = 500,
        include_bias: bool = True,
    ) -> None:
        if method not in ("rlg", "sign"):
            raise InvalidArgument(f"method must be 'rlg' or 'sign'; got {method!r}")
        if num_labels is not None:
            check_range("num_labels", num_labels, 1, float("inf"), integer=True)
        check_positive("box", box)
        check_range("screening_points", screening_points, 1, float("inf"), integer=True)
        self.layer = layer
        self.num_labels = num_labels
        self.method = method
        self.rtol = rtol
        self.box = box
        self.screening_points = screening_points
        self.include_bias = include_bias

    def applies_to(self, observation: Any) -> bool:
        """Needs an untied projection layer with at least two labels more than samples behind the update.

        Softmax cross-entropy gradients sum to zero over the labels, so the update has rank at most
        ``C - 1``; with ``C <= S + 1`` every label passes the LP (e.g. a binary classifier and one
        sample: both labels are always "revealed"), so RLG has nothing to tell apart."""
        if not isinstance(observation, GradientObservation):
            return False
        name = self.layer or find_head(observation.gradients)
        if name is None or name not in observation.gradients:
            return False
        cfg = getattr(observation.model, "config", None)
        if name.endswith("lm_head.weight") and getattr(cfg, "tie_word_embeddings", False):
            return False
        C = int(observation.gradients[name].shape[0])
        S = (observation.batch_size or 1) * max(1, observation.num_local_steps)
        return C > S + 1

    def run(self, observation: GradientObservation, *, rng: Any) -> AttackResult:
        if not isinstance(observation, GradientObservation):
            raise InvalidArgument(
                f"observation must be a GradientObservation; got {type(observation).__name__}"
            )

        dW, name = output_layer_gradient(
            observation.gradients,
            self.layer,
            include_bias=self.include_bias and self.method == "rlg",
        )
        if self.method == "sign":
            # Eq. 5 reads the gradient; a FedAvg delta (theta_new - theta_old) has the opposite sign
            sgn = -1.0 if observation.meta.get("update_kind") == "delta" else 1.0
            res = sign_baseline(sgn * dW)
        else:
            res = reveal_labels(
                dW,
                num_labels=self.num_labels,
                rtol=self.rtol,
                box=self.box,
                screening_points=self.screening_points,
                rng=seed_of(rng),
            )
        return AttackResult(
            attack=self.name or "rlg",
            reconstructions=res.labels,
            raw={
                "num_labels": res.num_labels,
                "layer": name,
                "method": res.method,
                "num_lp": res.num_lp,
                "singular_values": list(res.singular_values[:16]),
            },
            scorer=_score,
        )
