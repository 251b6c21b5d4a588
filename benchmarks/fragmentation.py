"""Benchmark: phrase-pair fragmentation of 10k toy sentence pairs (align + extract + release).

Paper: ../shared/papers/phrase-pair-fragmentation-nmt.txt. Target: <= 30 s on 2 cores with eflomal.
Baseline (same process): the numpy fallback aligner (fast_align_py) on the same corpus.
Also prints the leakage grid (attack per max length / discard fraction / tagging) on 1000 pairs.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fragmentation.py [--n 10000] [--no-grid]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from privnlp.data.parallel import generate_parallel
from privnlp.mechanisms.fragmentation import PhraseFragmentation, aer, from_corpus
from privnlp.mechanisms.fragmentation.align import eflomal_available


def run(aligner: str, corpus, pt) -> dict:
    mech = PhraseFragmentation(max_length=4, discard_fraction=0.5, tag=True, aligner=aligner)
    t = time.perf_counter()
    rel = mech.fragment(pt, rng=np.random.default_rng(0))
    wall = time.perf_counter() - t
    return {
        "aligner": aligner,
        "wall_s": wall,
        "pairs_per_s": len(pt) / wall,
        "aer": aer(rel.alignment, corpus.alignments),
        "extracted": rel.n_extracted,
        "released": rel.n_released,
        **{k: round(v, 2) for k, v in rel.timings.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--no-grid", action="store_true")
    args = ap.parse_args()
    corpus = generate_parallel(args.n, seed=0)
    pt = from_corpus(corpus)
    print(
        f"{args.n} sentence pairs, {sum(map(len, pt.source))} source tokens; max_length=4, discard 0.5, tags"
    )
    base = run("fast_align_py", corpus, pt)
    print(f"baseline fast_align_py: {base}")
    if eflomal_available():
        main_ = run("eflomal", corpus, pt)
        print(f"eflomal:                {main_}")
        print(
            f"eflomal wall {main_['wall_s']:.1f} s ({main_['pairs_per_s']:.0f} pairs/s), "
            f"ratio eflomal/fast_align_py = {main_['wall_s'] / base['wall_s']:.2f}x; "
            f"target <= 30 s: {'OK' if main_['wall_s'] <= 30 else 'MISSED'}"
        )
    else:
        print("eflomal not installed (pip install 'privnlp[align]'): baseline only")
    if not args.no_grid:
        from privnlp.evaluation.scenarios.fragmentation import leakage_grid

        t = time.perf_counter()
        rows = leakage_grid(
            1000, seed=0, max_lengths=(4, 7, 1000), discard_fractions=(0.0, 0.5), tags=(False, True)
        )
        print(f"\nleakage grid on 1000 pairs (gold alignments), {time.perf_counter() - t:.1f} s")
        print(
            "| max len | discard | tag | released | full recon. | longest span | ROUGE-L | sensitive link | 4-gram cov. |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['max_length'] or 'full sentences'} | {r['discard_fraction']} | {r['tag']} | {r['released']} | "
                f"{r['full_reconstruction_rate']:.3f} | {r['longest_span_mean']:.3f} | {r['rougeL_mean']:.3f} | "
                f"{r['sensitive_link_rate']:.3f} | {r['ngram_coverage_4']:.3f} |"
            )


if __name__ == "__main__":
    main()
