"""DP-FedAvg round time / FedAvg round time on the tiny LM with 100 simulated users (target <= 1.1x).

Same clients, same local training, same seed; only the server aggregation differs (clip to S,
fixed denominator, Gaussian noise; user-level accounting is cached per (N, m, z) and not on the
round's critical path unless a budget is set). Prints absolute round times and rounds/s.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fl_round_overhead.py [--rounds 10] [--users 100] [--m 10]
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--m", type=int, default=10, help="clients per round")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--records", type=int, default=4, help="records per user")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from privnlp.data import generate_corpus
    from privnlp.mechanisms.federated import (
        DPFedAvg,
        FedAvg,
        FedSimulator,
        lm_client_data,
        lm_task,
        partition_natural,
    )
    from privnlp.models import train_bpe_tokenizer

    corpus = generate_corpus(n_users=a.users, records_per_user=a.records, seed=0)
    tok = train_bpe_tokenizer(corpus.texts(), vocab_size=500)
    part = partition_natural(corpus.records)
    data = lm_client_data(
        tok, {k: [r.text for r in v] for k, v in part.clients.items()}, max_length=48
    )
    task = lm_task(tok, n_layer=2, n_embd=64, n_head=2)
    common = dict(clients_per_round=a.m, local_epochs=1, local_batch_size=8, local_lr=0.5)
    mechs = {
        "fedavg": lambda: FedAvg(**common),
        "dp_fedavg": lambda: DPFedAvg(clip_norm=0.5, noise_multiplier=1.0, **common),
    }
    # warm-up (imports, first-call allocations, the cached RDP curve of the claim)
    for mk in mechs.values():
        FedSimulator(mk(), task, data).run(1, rng=0, evaluate=False)
    times: dict[str, list[float]] = {k: [] for k in mechs}
    for rep in range(2):  # interleave to cancel drift on a shared machine
        for name, mk in mechs.items():
            res = FedSimulator(mk(), task, data).run(a.rounds, rng=rep, evaluate=False)
            times[name] += [h.seconds for h in res.history]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"users={a.users} clients/round={a.m} rounds={a.rounds}x2 model=tiny GPT-2 (2x64) params="
        f"{sum(p.numel() for p in task.model_factory().parameters())}"
    )
    for k, v in med.items():
        print(f"{k:10s} median round {v * 1000:8.1f} ms   {1.0 / v:6.2f} rounds/s")
    ratio = med["dp_fedavg"] / med["fedavg"]
    print(
        f"ratio dp_fedavg/fedavg = {ratio:.3f}x (target <= 1.1x) -> {'OK' if ratio <= 1.1 else 'OVER'}"
    )


if __name__ == "__main__":
    main()
