"""White-box audits of ``dp_sgd`` (and its leaky twin): Dirac gradient canaries.

Papers: Nasr, Song, Thakurta, Papernot & Carlini 2021 ("Adversary instantiation: lower bounds for
differentially private machine learning": the white-box adversary that sees every noisy gradient and
inserts a *Dirac* canary, whose gradient is non-zero in one coordinate only, audits DP-SGD almost
tightly); Jagielski et al. 2020 (Clopper-Pearson); Steinke, Nasr & Jagielski 2023 (one run);
Mahloujifar, Melis & Chaudhuri 2025 (f-DP, one run). The DP-SGD implementation audited is
``privnlp.mechanisms.training`` (``../shared/papers/dp-bert-and-dp-wordpiece.txt``; opacus underneath).

Setting (both variants). A tiny linear model ``w in R^d`` whose per-example "loss" is ``<w, x>``, so an
example's gradient is its input ``x``, whatever ``w`` is. Benign examples have ``x[0] = 0``; the canary
is ``x = 1000 e_0`` (a Dirac gradient, clipped by DP-SGD to ``C e_0``). The data loader's batch is the
whole dataset and DP-SGD's Poisson sampling runs at rate ``q = 1`` (no amplification: the white-box
worst case the claim must cover). The registered mechanism class is used as a user would:
``cls(...).make_private(model, SGD(lr=1), loader, rng=seed)``, then ``zero_grad / backward /
optimizer.step()``; the adversary reads the update ``w_before - w_after`` of the released model.

* **Repeated runs** (``variant="one step, repeated runs"``): the test statistic is the update's
  projection on the canary direction (coordinate 0), over ``trials`` one-step runs with the canary and
  ``trials`` without. Each step restarts from the same weights, so every step is an independent one-step
  run (one ``make_private`` per side; its budget guard is not used because it would refuse a second
  step; the claim is that of one step, computed by the mechanism's own accountant). The threshold is
  chosen on 30% of the runs and the bound computed on the other 70% (:func:`threshold_audit`).
* **One run** (``variant="one run, m canaries"``): ``m`` Dirac canaries ``1000 e_i`` (one coordinate
  each), each included with probability 1/2; one DP-SGD step; the score of canary ``i`` is coordinate
  ``i`` of the update; guesses and bounds by :func:`one_run_audit`.

Neighbouring datasets. With ``N``-derived sampling (the default), ``dp_sgd`` claims zero-out
neighbours with the dataset size ``N`` public: opacus divides the noisy sum by the expected batch size
``q * N``. On the side without the canary we therefore keep a zero-gradient placeholder example, so
``N`` is the same on both sides and the two noisy *sums* differ exactly by the canary's clipped
gradient (zero-out). With public sampling hyperparameters (``expected_batch_size`` /
``public_dataset_size``) the claim is add/remove and the same audit applies (issue #28 item 2).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from privnlp.core.claims import ClaimKind
from privnlp.core.registry import MECHANISMS
from privnlp.data import generate_corpus
from privnlp.mechanisms.training.dp_sgd import per_sample_lm_loss
from privnlp.mechanisms.training.loop import train_private
from privnlp.models import bundled_lm
from privnlp.models._seed import seeded
from privnlp.models.training import lm_batch

from .bounds import DEFAULT_CONFIDENCE, gdp_epsilon, headline_bound, one_run_audit, threshold_audit
from .result import DPAuditResult, qualname

__all__ = ["audit_dp_sgd", "AUDIT_PRESETS", "calibrated_one_step"]

AUDIT_PRESETS = {
    "quick": {"epsilons": (4.0,), "trials": 4000, "twin_trials": 500, "canaries": 1000},
    "full": {
        "epsilons": (4.0, 1.0),
        "trials": 40000,
        "twin_trials": 4000,
        "canaries": 5000,
        "lm_one_run": True,
    },
}
DELTA = 1e-5
CLIP = 1.0
CANARY_SCALE = 1000.0
N_BENIGN = 4
DIM = 8
ACCOUNTANT = "prv"

_CALIBRATION: dict = {}


def _loader(X: Any) -> Any:

    return DataLoader(TensorDataset(X), batch_size=int(X.shape[0]))


def _dataset(dim: int, canaries: np.ndarray, n_benign: int, g: np.random.Generator) -> Any:
    """Benign rows (zero on the canary coordinates ``0..len(canaries)-1``) + one row per canary slot:
    ``CANARY_SCALE e_i`` when ``canaries[i]`` else a placeholder that is zero on every canary coordinate
    (tiny and distinct on the benign ones, so that no two rows are duplicates)."""

    m = len(canaries)
    X = np.zeros((n_benign + m, dim), dtype=np.float32)
    X[:n_benign, m:] = g.standard_normal((n_benign, dim - m))
    for i, inc in enumerate(canaries):
        if inc:
            X[n_benign + i, i] = CANARY_SCALE
        else:  # a distinct placeholder (not a duplicate row): zero on every canary coordinate
            X[n_benign + i, m + i % (dim - m)] = 1e-3 * (1 + i // (dim - m))
    return torch.from_numpy(X)


def _private(cls: Any, X: Any, *, rng: Any, **kw: Any) -> tuple[Any, Any]:

    model = torch.nn.Linear(int(X.shape[1]), 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    mech = cls(max_grad_norm=CLIP, delta=DELTA, accountant=ACCOUNTANT, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pt = mech.make_private(model, opt, _loader(X), rng=rng)
    return model, pt


def _step(model: Any, pt: Any) -> np.ndarray:
    """One DP-SGD step from w = 0; returns the update w_before - w_after (then resets w to 0)."""

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for (xb,) in pt.data_loader:
            pt.optimizer.zero_grad()
            pt.loss(pt.model(xb).squeeze(-1)).backward()
            pt.optimizer.step()
    with torch.no_grad():
        upd = -model.weight.detach()[0].numpy().astype(np.float64).copy()
        model.weight.zero_()
    return upd


def calibrated_one_step(target_epsilon: float, dim: int = DIM) -> tuple[float, float, float]:
    """(noise multiplier, claimed epsilon, claimed delta) of ONE DP-SGD step at q = 1 calibrated to
    ``target_epsilon``: the registered ``dp_sgd`` calibrates sigma (``target_epsilon=..., steps=1``), takes
    the step, and states its claim (opacus PRV + dp_accounting PLD, the larger). Memoised per process."""
    key = (float(target_epsilon), DELTA, ACCOUNTANT)
    if key not in _CALIBRATION:
        g = np.random.default_rng(0)
        X = _dataset(dim, np.array([True]), N_BENIGN, g)
        model, pt = _private(
            MECHANISMS.get("dp_sgd"), X, rng=0, target_epsilon=float(target_epsilon), steps=1
        )
        _step(model, pt)
        c = pt.claim()
        if c.kind != ClaimKind.DP:  # pragma: no cover
            raise AssertionError("dp_sgd stated a non-DP claim")
        _CALIBRATION[key] = (float(pt.noise_multiplier), float(c.epsilon), float(c.delta))
        pt.close()
    return _CALIBRATION[key]


def _repeated(
    cls: Any,
    name: str,
    system: str,
    target_epsilon: float,
    trials: int,
    seed: int,
    confidence: float,
) -> DPAuditResult:
    t0 = time.perf_counter()
    sigma, eps_c, delta_c = calibrated_one_step(target_epsilon)
    ss = np.random.SeedSequence([seed, 0xD9])
    s_data, s_in, s_out, s_split = ss.spawn(4)
    scores = {}
    for label, inc, s in (("in", True, s_in), ("out", False, s_out)):
        X = _dataset(DIM, np.array([inc]), N_BENIGN, np.random.default_rng(s_data))
        model, pt = _private(cls, X, rng=int(s.generate_state(1)[0]), noise_multiplier=sigma)
        scores[label] = np.array([_step(model, pt)[0] for _ in range(trials)])
        pt.close()
    bounds = threshold_audit(
        scores["out"],
        scores["in"],
        delta=delta_c,
        confidence=confidence,
        rng=np.random.default_rng(s_split),
    )
    head, other = bounds["gdp_clopper_pearson"], bounds["clopper_pearson"]
    return DPAuditResult(
        mechanism=name,
        system=system,
        implementation=qualname(cls),
        variant="white-box Dirac gradient canary, one DP-SGD step, repeated runs",
        claimed_epsilon=eps_c,
        claimed_delta=delta_c,
        unit="example",
        audited=head,
        others=(other,),
        config={
            "noise_multiplier": sigma,
            "max_grad_norm": CLIP,
            "sample_rate": 1.0,
            "steps": 1,
            "target_epsilon": target_epsilon,
            "accountant": ACCOUNTANT,
            "runs_per_side": trials,
            "model": f"linear, d={DIM}",
            "benign_examples": N_BENIGN,
            "canary": f"{CANARY_SCALE:g} * e_0",
            "statistic": "update projected on the canary coordinate",
        },
        seconds=time.perf_counter() - t0,
        calls=2 * trials,
        seed=seed,
        notes=(
            "headline: GDP bound (mu from Clopper-Pearson on FPR/FNR, converted at delta); the other bound "
            "assumes nothing about the mechanism's trade-off curve",
        ),
    )


def _one_run(
    cls: Any, name: str, system: str, target_epsilon: float, m: int, seed: int, confidence: float
) -> DPAuditResult:
    t0 = time.perf_counter()
    sigma, eps_c, delta_c = calibrated_one_step(target_epsilon)
    ss = np.random.SeedSequence([seed, 0x01])
    s_inc, s_data, s_noise, s_ties = ss.spawn(4)
    inc = np.random.default_rng(s_inc).random(m) < 0.5
    X = _dataset(m + 4, inc, N_BENIGN, np.random.default_rng(s_data))
    model, pt = _private(cls, X, rng=int(s_noise.generate_state(1)[0]), noise_multiplier=sigma)
    upd = _step(model, pt)
    pt.close()
    bounds = one_run_audit(
        upd[:m], inc, delta=delta_c, confidence=confidence, rng=np.random.default_rng(s_ties)
    )
    # one unsubsampled Gaussian step (q = 1): Gaussian-shaped, the f-DP conversion is a lower bound
    head, others = headline_bound(bounds, gaussian_shaped=True)
    other = others[0]
    ideal = _ideal_gaussian_one_run(1.0 / sigma, m, delta_c, confidence, seed)
    return DPAuditResult(
        mechanism=name,
        system=system,
        implementation=qualname(cls),
        variant=f"white-box Dirac gradient canaries, one run (m={m} canaries, one DP-SGD step)",
        claimed_epsilon=eps_c,
        claimed_delta=delta_c,
        unit="example",
        audited=head,
        others=(other,),
        config={
            "noise_multiplier": sigma,
            "max_grad_norm": CLIP,
            "sample_rate": 1.0,
            "steps": 1,
            "target_epsilon": target_epsilon,
            "canaries": m,
            "inclusion_probability": 0.5,
            "model": f"linear, d={m + 4}",
            "ideal_gaussian_same_setting": ideal,
        },
        seconds=time.perf_counter() - t0,
        calls=1,
        seed=seed,
        notes=(
            "reference: the same one-run analyses on an ideal Gaussian mechanism with the same mu and m "
            "(the idealised setting of the papers' figures), simulated here: "
            f"f-DP {ideal['fdp_gaussian_one_run']:.3f}, Steinke et al. {ideal['steinke_one_run']:.3f}",
        ),
    )


def _ideal_gaussian_one_run(
    mu: float, m: int, delta: float, confidence: float, seed: int
) -> dict[str, float]:
    g = np.random.default_rng([seed, 0x1DEA])
    inc = g.random(m) < 0.5
    b = one_run_audit(
        g.standard_normal(m) + mu * inc, inc, delta=delta, confidence=confidence, rng=g
    )
    return {k: float(v.epsilon) for k, v in b.items()}


#: black-box one-run audit of DP-SGD fine-tuning the bundled LM (full preset only)
LM_ONE_RUN = {
    "canaries": 400,
    "target_epsilon": 8.0,
    "epochs": 6,
    "batch_size": 32,
    "lr": 1e-2,
    "max_length": 32,
    "lm_preset": "quick",
}


def _canary_texts(m: int, g: np.random.Generator) -> list[str]:
    """``m`` random canary records (8 random 3-digit groups: high-entropy, unlike the corpus)."""
    return [
        "account " + " ".join(f"{x:03d}" for x in g.integers(0, 1000, size=8)) for _ in range(m)
    ]


def _per_text_loss(model: Any, tok: Any, texts: list[str], max_length: int) -> np.ndarray:

    out = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(texts), 64):
            b = lm_batch(tok, texts[i : i + 64], max_length)
            logits = model(
                input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids
            ).logits
            out.append(per_sample_lm_loss(logits, b.labels).numpy())
    return np.concatenate(out).astype(np.float64)


def _lm_one_run(cls: Any, name: str, system: str, seed: int, confidence: float) -> DPAuditResult:
    """Steinke et al.'s black-box ("input space") one-run audit on the bundled LM: ``m`` random canary records,
    each added to the fine-tuning set with probability 1/2; DP-SGD fine-tuning through ``cls.make_private``
    (Poisson sampling, ``epochs`` epochs, sigma calibrated by the mechanism to ``target_epsilon``); the score
    of a canary is its loss decrease (before - after). The claim is the trained run's own claim."""

    t0 = time.perf_counter()
    cfg = LM_ONE_RUN
    m = int(cfg["canaries"])
    ss = np.random.SeedSequence([seed, 0x1A])
    s_can, s_inc, s_noise, s_torch, s_ties = ss.spawn(5)
    model, tok = bundled_lm(cfg["lm_preset"], seed=0)
    canaries = _canary_texts(m, np.random.default_rng(s_can))
    inc = np.random.default_rng(s_inc).random(m) < 0.5
    before = _per_text_loss(model, tok, canaries, cfg["max_length"])
    texts = generate_corpus(n_users=20, records_per_user=10, seed=0).texts() + [
        c for c, i in zip(canaries, inc) if i
    ]
    b = lm_batch(tok, texts, cfg["max_length"])
    loader = DataLoader(
        TensorDataset(b.input_ids, b.attention_mask, b.labels), batch_size=int(cfg["batch_size"])
    )
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=float(cfg["lr"]))
    mech = cls(
        target_epsilon=float(cfg["target_epsilon"]),
        epochs=float(cfg["epochs"]),
        max_grad_norm=CLIP,
        accountant=ACCOUNTANT,
    )
    # dropout of the tiny GPT-2 is non-private randomness: seeded without touching the caller's torch RNG
    with warnings.catch_warnings(), seeded(int(s_torch.generate_state(1)[0])):
        warnings.simplefilter("ignore")
        pt = mech.make_private(model, opt, loader, rng=int(s_noise.generate_state(1)[0]))

        def loss_fn(mdl: Any, batch: Any) -> Any:
            ids, mask, labels = batch
            pos = torch.arange(ids.shape[1]).unsqueeze(0).repeat(ids.shape[0], 1)
            return per_sample_lm_loss(
                mdl(input_ids=ids, attention_mask=mask, position_ids=pos).logits, labels
            )

        res = train_private(pt, loss_fn, epochs=float(cfg["epochs"]), stop_at_budget=True)
        claim = pt.claim()
        trained = pt.original_model
        pt.close()
    after = _per_text_loss(trained, tok, canaries, cfg["max_length"])
    bounds = one_run_audit(
        before - after,
        inc,
        delta=float(claim.delta),
        confidence=confidence,
        rng=np.random.default_rng(s_ties),
    )
    # subsampled DP-SGD over many steps is not Gaussian-shaped: the f-DP bound converted with the
    # Gaussian curve could overstate, so the assumption-free Steinke et al. bound is the headline
    head, others = headline_bound(bounds, gaussian_shaped=False)
    mu_ideal = _mu_for_epsilon(float(claim.epsilon), float(claim.delta))
    ideal = _ideal_gaussian_one_run(mu_ideal, m, float(claim.delta), confidence, seed)
    return DPAuditResult(
        mechanism=name,
        system=system,
        implementation=qualname(cls),
        variant=f"black-box canary records, one run on the bundled LM (m={m}, DP-SGD fine-tuning)",
        claimed_epsilon=float(claim.epsilon),
        claimed_delta=float(claim.delta),
        unit="example",
        audited=head,
        others=others,
        config={
            **cfg,
            "noise_multiplier": float(pt.noise_multiplier),
            "steps": int(res.steps),
            "sample_rate": float(pt.sample_rate),
            "training_examples": len(texts),
            "score": "canary loss before - after fine-tuning",
            "ideal_gaussian_same_setting": ideal,
            "ideal_mu": mu_ideal,
        },
        seconds=time.perf_counter() - t0,
        calls=int(res.steps),
        seed=seed,
        notes=(
            "headline: Steinke et al. (assumption-free); the f-DP bound converted with the Gaussian "
            "trade-off curve is shown beside it only, since subsampled DP-SGD is not Gaussian-shaped",
            "the black-box one-run audit of a whole training run is far from tight (Steinke et al. 2023 report "
            "the same for input-space canaries); reference: the same analyses on an ideal Gaussian mechanism "
            f"with the claimed epsilon (mu = {mu_ideal:.3f}) and the same m, simulated here: f-DP "
            f"{ideal['fdp_gaussian_one_run']:.3f}, Steinke et al. {ideal['steinke_one_run']:.3f}",
        ),
    )


def _mu_for_epsilon(epsilon: float, delta: float) -> float:
    """The mu whose mu-GDP epsilon at ``delta`` is ``epsilon`` (bisection)."""

    lo, hi = 0.0, 1.0
    while gdp_epsilon(hi, delta) < epsilon:
        hi *= 2.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gdp_epsilon(mid, delta) < epsilon else (lo, mid)
    return lo


def audit_dp_sgd(
    cls: Any,
    *,
    name: str = "dp_sgd",
    system: str = "defense",
    preset: str = "quick",
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[DPAuditResult]:
    """Audit ``cls`` (``dp_sgd``'s class or its leaky twin): repeated one-step runs at each of the preset's
    target epsilons, then the one-run variant at the first one; in the full preset also the black-box
    one-run audit of DP-SGD fine-tuning the bundled LM (the defense only)."""
    p = AUDIT_PRESETS[preset]
    trials = p["trials"] if system == "defense" else p["twin_trials"]
    out = [_repeated(cls, name, system, eps, trials, seed, confidence) for eps in p["epsilons"]]
    out.append(_one_run(cls, name, system, p["epsilons"][0], p["canaries"], seed, confidence))
    if p.get("lm_one_run") and system == "defense":
        out.append(_lm_one_run(cls, name, system, seed, confidence))
    return out
