"""Benchmark: the cost of the empirical DP audits (privnlp.auditing), per audit trial, as a ratio to one call of
the audited mechanism measured in the same process (one DP-SGD training step on the audit's model, one
DP-FedAvg aggregation, one DP word-histogram release / one full DP WordPiece build, one word sanitized).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dp_audit.py [--preset quick|full] [--only NAME ...]

Prints absolute times and the ratios; states the machine load (``os.getloadavg``) next to them.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np


def _time(fn, n: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def baseline_dp_sgd() -> tuple[str, float]:
    import torch

    from privnlp.auditing import training as T
    from privnlp.mechanisms.training import DPSGD

    X = T._dataset(T.DIM, np.array([True]), T.N_BENIGN, np.random.default_rng(0))
    model = torch.nn.Linear(T.DIM, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pt = DPSGD(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-5).make_private(
            model, opt, T._loader(X), rng=0
        )

        def step():
            for (xb,) in pt.data_loader:
                pt.optimizer.zero_grad()
                pt.loss(model(xb).squeeze(-1)).backward()
                pt.optimizer.step()

        return "one DP-SGD training step (same tiny model)", _time(step, 300)


def baseline_dp_fedavg() -> tuple[str, float]:
    import torch

    from privnlp.auditing import federated as F
    from privnlp.mechanisms.federated import DPFedAvg

    mech, plan, _ = F._mechanism(DPFedAvg, 4.0, 4)
    replies = F._replies(np.random.default_rng(0).standard_normal((4, F.DIM)))
    ref, g = {"w": torch.zeros(F.DIM)}, torch.Generator().manual_seed(0)
    return "one DP-FedAvg aggregation (4 users)", _time(
        lambda: mech.aggregate(ref, replies, num_selected=4, plan=plan, generator=g), 2000
    )


def baseline_dp_wordpiece() -> list[tuple[str, float]]:
    from privnlp.mechanisms.vocab import DPWordPiece

    mech = DPWordPiece(epsilon=1.0, delta=1e-5, max_words_per_contributor=1, vocab_size=600)
    texts = ["commonaa"] * 40
    g = np.random.default_rng(0)
    return [
        (
            "one DP histogram release (40 docs)",
            _time(lambda: mech.release_histogram(texts, rng=g), 500),
        ),
        ("one full DP WordPiece build (40 docs)", _time(lambda: mech.build(texts, rng=g), 20)),
    ]


def baseline_text(name: str) -> tuple[str, float]:
    from privnlp.auditing.text import audit_vocabularies
    from privnlp.core.registry import MECHANISMS

    ex = MECHANISMS.get(name).example("quick")
    emb = audit_vocabularies(1.0 / ex.epsilon)["grid"][0]
    extra = {k: getattr(ex, k) for k in ("t", "ts", "lam") if k in vars(ex)}
    mech = type(ex)(ex.epsilon, embeddings=emb, **extra)
    g = np.random.default_rng(0)
    return "one word sanitized (perturb_words)", _time(
        lambda: mech.perturb_words(["g4"], rng=g), 300
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", default="quick", choices=("quick", "full"))
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    from privnlp.core.registry import AUDITS, MECHANISMS

    names = args.only or AUDITS.names()
    print(
        f"load average {os.getloadavg()}, cpus {os.cpu_count()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    print(
        f"{'defense':15s} {'audit s':>8s} {'trials':>8s} {'ms/trial':>9s}  baseline (ms/call) -> ratio"
    )
    for n in names:
        fn = AUDITS.get(n)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = fn(MECHANISMS.get(n), name=n, system="defense", preset=args.preset, seed=0)
        wall = time.perf_counter() - t0
        calls = sum(r.calls for r in res)
        per = wall / max(1, calls)
        if n == "dp_sgd":
            bases = [baseline_dp_sgd()]
        elif n == "dp_fedavg":
            bases = [baseline_dp_fedavg()]
        elif n == "dp_wordpiece":
            bases = baseline_dp_wordpiece()
        else:
            bases = [baseline_text(n)]
        cells = "; ".join(f"{lab}: {b * 1e3:.3f} ms -> x{per / b:.2f}" for lab, b in bases)
        print(f"{n:15s} {wall:8.1f} {calls:8d} {per * 1e3:9.4f}  {cells}", flush=True)


if __name__ == "__main__":
    main()
