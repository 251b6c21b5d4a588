"""Benchmark: pi_TEXT (crypten_textcnn) seconds per instance, sequential vs batched, on loopback.

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (Tab. 2: 0.74 s sequential,
0.11 s batched per instance, 3 x 16-vCPU Azure VMs, 768-d embeddings). Here: Alice + Bob + TTP
as local processes (one thread each), all-MiniLM-L6-v2 embeddings (384-d) when installed,
else the hashed public fallback. Prints absolute numbers, CrypTen's rounds/bytes per party,
the batched/sequential ratio and the plaintext baseline (same process).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mpc_inference.py [--n 200] [--n-seq 20]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200, help="texts in the batched run")
    ap.add_argument("--n-seq", type=int, default=20, help="texts in the sequential run")
    ap.add_argument("--encoder", default="auto")
    ap.add_argument("--provider", default="TTP")
    a = ap.parse_args()
    import numpy as np
    import torch

    from privnlp.mechanisms.mpc import CryptenTextCNN, train_alice_model

    alice, xt, yt = train_alice_model(n=max(800, 4 * a.n), encoder=a.encoder, epochs=10, seed=0, held_out=0.25)
    x = xt[:a.n]
    print(f"encoder={alice.encoder.resolved} embed_dim={x.shape[1]} model={alice.model.config()} "
          f"plaintext held-out accuracy={alice.accuracy:.3f}")
    torch.set_num_threads(1)
    t = time.perf_counter()
    for _ in range(10):
        ref = alice.model.predict(torch.tensor(x)).numpy()
    plain = (time.perf_counter() - t) / 10 / len(x)
    rows = []
    for mode, n in (("sequential", a.n_seq), ("batched", len(x))):
        mech = CryptenTextCNN(provider=a.provider, mode=mode, timeout=600)
        t = time.perf_counter()
        res = mech.classify(alice.model, x[:n])
        wall = time.perf_counter() - t
        agree = float((res.labels == ref[:n]).mean())
        c = res.comm
        rows.append((mode, n, res.seconds / n, wall / n, agree, c))
        print(f"{mode:10s} n={n:4d}  protocol {res.seconds / n:.4f} s/instance  (incl. process start {wall / n:.4f})  "
              f"agreement={agree:.4f}  alice: {c['alice']['rounds']:.0f} rounds {c['alice']['bytes'] / 1e6:.2f} MB  "
              f"bob: {c['bob']['rounds']:.0f} rounds {c['bob']['bytes'] / 1e6:.2f} MB  "
              f"per instance: {c['bob']['rounds'] / n:.0f} rounds {c['bob']['bytes'] / n / 1e3:.1f} kB (bob)")
    seq, bat = rows[0][2], rows[1][2]
    print(f"plaintext: {plain * 1e6:.1f} us/instance; MPC/plaintext (batched) = {bat / plain:.0f}x")
    print(f"batched/sequential per-instance ratio = {bat / seq:.3f}  (paper: 0.11/0.74 = {0.11 / 0.74:.3f})")
    print(f"targets: sequential {seq:.3f} <= 0.15 s: {seq <= 0.15};  batched {bat:.4f} <= 0.01 s: {bat <= 0.01}")


if __name__ == "__main__":
    main()
