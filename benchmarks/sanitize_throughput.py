"""Throughput of Vickrey word perturbation on a 50k x 300 vocabulary.

Paper: ../shared/papers/vickrey-mechanism-metric-dp.txt (Algorithm 1). Compares, in one process,
with the same BLAS thread limit:
  * reference: a faithful per-word loop (noise, distances to every word, top-2, Vickrey choice);
  * exact:     privnlp's batched path (chunked float32 matmul with precomputed norms, argmin top-2);
  * hnsw:      privnlp with index="hnsw" (approximate top-2; recall vs exact is reported).
The vocabulary is synthetic (clustered 300-d vectors, like word embeddings: no real 50k embedding
file ships with privnlp). Prints absolute tokens/s and the speed-up ratios.

    python benchmarks/sanitize_throughput.py [--threads 2] [--tokens 40000]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def synthetic_vocab(n: int, d: int, seed: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed)
    n_clusters = max(1, n // 100)
    centers = g.standard_normal((n_clusters, d)).astype(np.float32)
    assign = g.integers(0, n_clusters, n)
    return (centers[assign] + 0.35 * g.standard_normal((n, d)).astype(np.float32)).astype(np.float32)


def reference_vickrey(E: np.ndarray, ids: np.ndarray, eps: float, t: float, g: np.random.Generator) -> np.ndarray:
    """Faithful per-word loop (what a direct reading of Algorithm 1 gives)."""
    n, d = E.shape
    out = np.empty_like(ids)
    for k, i in enumerate(ids):
        u = g.standard_normal(d)
        z = u / np.linalg.norm(u) * g.gamma(d, 1.0 / eps)
        x = (E[i] + z).astype(np.float32)  # keep float32 like E (a float64 x doubles the work)
        dist = np.linalg.norm(E - x, axis=1)
        two = np.argpartition(dist, 1)[:2]
        two = two[np.argsort(dist[two])]
        d1, d2 = dist[two[0]], dist[two[1]]
        p = (1 - t) * d2 / (t * d1 + (1 - t) * d2)
        out[k] = two[0] if g.random() < p else two[1]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=40_000)
    ap.add_argument("--ref-tokens", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epsilon", type=float, default=40.0)
    ap.add_argument("--t", type=float, default=0.5)
    ap.add_argument("--ef", type=int, default=48)
    args = ap.parse_args()

    from threadpoolctl import threadpool_limits

    from privnlp.mechanisms.text import Embeddings, Vickrey
    from privnlp.mechanisms.text.neighbors import ExactIndex, HnswIndex, topk_recall

    E = synthetic_vocab(args.vocab, args.dim)
    emb = Embeddings(tuple(f"w{i}" for i in range(args.vocab)), E)
    g = np.random.default_rng(0)
    ids = g.integers(0, args.vocab, args.tokens)
    res = {}
    with threadpool_limits(limits=args.threads):
        t0 = time.perf_counter()
        reference_vickrey(E, ids[: args.ref_tokens], args.epsilon, args.t, np.random.default_rng(1))
        res["reference"] = args.ref_tokens / (time.perf_counter() - t0)

        exact = Vickrey(args.epsilon, t=args.t, embeddings=emb)
        exact.perturb_ids(ids[:2000], rng=0)  # warm-up (norms, -2E)
        t0 = time.perf_counter()
        out = exact.perturb_ids(ids, rng=np.random.default_rng(2))
        res["exact"] = args.tokens / (time.perf_counter() - t0)
        changed = float(np.mean(out != ids))

        ann = Vickrey(args.epsilon, t=args.t, embeddings=emb, index="hnsw", ann_ef=args.ef)
        t0 = time.perf_counter()
        ann._nn().embeddings  # noqa: B018
        HnswIndex(emb, ef=args.ef, num_threads=args.threads)._index()
        build = time.perf_counter() - t0
        ann.perturb_ids(ids[:2000], rng=0)
        t0 = time.perf_counter()
        ann.perturb_ids(ids, rng=np.random.default_rng(2))
        res["hnsw"] = args.tokens / (time.perf_counter() - t0)

        # recall of the top-2 on noisy vectors of the benchmark's distribution
        q = E[ids[:5000]] + exact.sample_noise(5000, rng=np.random.default_rng(3))
        ex = ExactIndex(emb).query(q, 2)
        ap_ = HnswIndex(emb, ef=args.ef, num_threads=args.threads).query(q, 2)
        recall = topk_recall(ap_, ex)

    print(f"vocabulary {args.vocab} x {args.dim}, epsilon={args.epsilon}, t={args.t}, "
          f"BLAS/hnsw threads={args.threads}, tokens changed={changed:.2f}")
    print(f"reference per-word loop : {res['reference']:10.0f} tokens/s")
    print(f"exact (batched matmul)  : {res['exact']:10.0f} tokens/s   ratio vs reference {res['exact'] / res['reference']:7.1f}x")
    print(f"hnsw (ef={args.ef})          : {res['hnsw']:10.0f} tokens/s   ratio vs reference {res['hnsw'] / res['reference']:7.1f}x"
          f"   top-2 recall {recall:.4f}   index build {build:.1f}s")


if __name__ == "__main__":
    main()
