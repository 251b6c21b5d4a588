"""Benchmark: DP WordPiece pipeline vs plain `tokenizers` WordPiece training, same run.

Paper: ../shared/papers/dp-bert-and-dp-wordpiece.txt (Section 3.2). Corpus: ~1M words of
synthetic Zipfian text (10,000 documents of ~100 words). Prints absolute seconds and the ratio
DP / plain (target <= 2x). Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dp_vocab.py
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(
    n_docs: int = 10_000, doc_len: int = 100, vocab_size: int = 8000, repeats: int = 2
) -> dict:
    import numpy as np
    from tokenizers import trainers

    from privnlp.mechanisms.vocab import DPWordPiece
    from privnlp.mechanisms.vocab.wordpiece import SPECIAL_TOKENS, _base_tokenizer

    g = np.random.default_rng(0)
    syll = [
        "ka",
        "lo",
        "mi",
        "ne",
        "ta",
        "ri",
        "so",
        "pe",
        "du",
        "ba",
        "ge",
        "fo",
        "ha",
        "li",
        "mu",
        "no",
        "ra",
    ]
    lex = sorted({"".join(g.choice(syll, size=int(g.integers(1, 5)))) for _ in range(60_000)})
    p = 1.0 / np.arange(1, len(lex) + 1) ** 1.05
    p /= p.sum()
    ids = g.choice(len(lex), size=n_docs * doc_len, p=p)
    texts = [
        " ".join(lex[i] for i in ids[d * doc_len : (d + 1) * doc_len]) + "." for d in range(n_docs)
    ]
    n_words = n_docs * doc_len

    def plain():
        tok, _ = _base_tokenizer()
        tr = trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False
        )
        tok.train_from_iterator(texts, trainer=tr)
        return tok

    mech = DPWordPiece(epsilon=1.0, delta=1e-6, max_words_per_contributor=32, vocab_size=vocab_size)

    def dp():
        return mech.build(texts, rng=0)

    t_plain, t_dp = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        plain()
        t_plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        res = dp()
        t_dp.append(time.perf_counter() - t0)
    tp, td = min(t_plain), min(t_dp)
    out = {
        "words": n_words,
        "docs": n_docs,
        "plain_s": tp,
        "dp_s": td,
        "ratio": td / tp,
        "released_words": len(res.histogram),
        "vocab": len(res.vocab),
    }
    print(f"corpus: {n_words:,} words in {n_docs:,} documents, vocab_size={vocab_size}")
    print(f"plain tokenizers WordPiece training: {tp:.2f} s")
    print(
        f"DP WordPiece pipeline (split+cap k=32+count+Laplace+threshold+train): {td:.2f} s "
        f"({len(res.histogram):,} words released, vocab {len(res.vocab):,})"
    )
    print(f"ratio DP / plain = {td / tp:.2f}x (target <= 2x)")
    return out


if __name__ == "__main__":
    main()
