"""Exact top-k search on a small vocabulary (the quick cards' GloVe 20k x 50): the float32 prescreen in
cache-sized blocks against the path it replaced (bf16 prescreen, 48 MiB blocks of scores).

The quick cards of the four metric-DP word mechanisms (``laplace_metric``, ``mahalanobis``, ``vickrey``,
``vickrey_k``) spend ~85% of their regeneration in :class:`~privnlp.mechanisms.text.neighbors.ExactIndex`
full scans: the Bayesian inversion attack estimates its channel from 200 words x 300 noisy vectors, twice
per trial. Both paths are exact (certified prescreen + float64 re-rank), so they must return the same ids
and distances, which this script asserts. Runs the two paths interleaved (medians of ``--pairs`` pairs)
with one torch thread, the setting of ``make check-cards``; prints queries/s and the ratio.

    python benchmarks/exact_small_vocab.py [--vocab 20000] [--queries 12000] [--epsilon 10] [--k 2]
        [--synthetic-dim D]   (random vectors of dimension D instead of GloVe)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=20000)
    ap.add_argument("--queries", type=int, default=12000)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--synthetic-dim", type=int, default=0)
    args = ap.parse_args()

    import torch

    from privnlp.mechanisms.text import neighbors as nbm
    from privnlp.mechanisms.text.embeddings import Embeddings
    from privnlp.mechanisms.text.mechanisms import Vickrey

    torch.set_num_threads(1)
    g = np.random.default_rng(0)
    if args.synthetic_dim:
        d = args.synthetic_dim
        V = (g.standard_normal((args.vocab, d)) * (4.8 / np.sqrt(d))).astype(np.float32)
        emb = Embeddings([f"w{i}" for i in range(args.vocab)], V)
        src = f"synthetic {args.vocab} x {d}"
    else:
        emb = Vickrey(epsilon=args.epsilon, vocab_limit=args.vocab).resolve_embeddings()
        src = f"GloVe {len(emb)} x {emb.dim}"
    mech = Vickrey(epsilon=args.epsilon, t=0.5, embeddings=emb)
    ids = g.integers(
        0, min(len(emb), 2000), args.queries
    )  # frequent words, as the attack's support
    q = emb.vectors[ids] + mech.sample_noise(ids.size, rng=g)

    new = nbm.ExactIndex(emb)

    def old_query() -> nbm.NeighborResult:
        # the previous behaviour: bf16 (where oneDNN has it) and the 48 MiB block for every vocabulary
        saved = nbm.SMALL_BLOCK_BYTES
        nbm.SMALL_BLOCK_BYTES = 1 << 62
        try:
            return old._scan(q, args.k)
        finally:
            nbm.SMALL_BLOCK_BYTES = saved

    old = nbm.ExactIndex(emb, precision="bf16" if nbm._bf16_ok() else "fp32")
    new._scan(q[:64], args.k), old_query()  # build both prescreen matrices, warm up
    t_old, t_new = [], []
    for _ in range(args.pairs):
        t0 = time.perf_counter()
        r_old = old_query()
        t_old.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        r_new = new.query(q, args.k)
        t_new.append(time.perf_counter() - t0)
        if not (np.array_equal(r_old.ids, r_new.ids) and np.array_equal(r_old.dists, r_new.dists)):
            raise SystemExit("FAIL: the two exact paths disagree")
    a, b = statistics.median(t_old), statistics.median(t_new)
    print(
        f"{src}, {args.queries} noisy queries (epsilon {args.epsilon:g}), top-{args.k}, 1 torch thread, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"  before: {old.resolved_precision()} prescreen, 48 MiB blocks: {args.queries / a:,.0f} queries/s"
    )
    print(
        f"  now:    {new.resolved_precision()} prescreen, "
        f"{nbm.SMALL_BLOCK_BYTES >> 20} MiB blocks: {args.queries / b:,.0f} queries/s"
    )
    print(
        f"  speed-up {a / b:.2f}x (medians of {args.pairs} interleaved pairs); same ids and distances"
    )


if __name__ == "__main__":
    main()
