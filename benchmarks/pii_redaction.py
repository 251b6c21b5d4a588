"""Benchmark of PII redaction (``privnlp.mechanisms.pii``; ``../shared/papers/wikipii-pii-extraction-federated.txt``).

Prints, with absolute numbers:

1. documents/s redacted (regex only; regex + BiLSTM tagger; + known fields) as a ratio to tokenizing the same
   documents with ``privnlp.data.tokenize`` (the baseline, same process);
2. tagger training time per site-round (FedAvg over K sites, embedded simulator) as a ratio to one central
   epoch over the same data; with ``--minilm`` also one central epoch of all-MiniLM-L6-v2 as a token classifier.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/pii_redaction.py [--docs 400] [--sites 4] [--minilm]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--sites", type=int, default=4)
    ap.add_argument("--minilm", action="store_true")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    import torch

    from privnlp.data import generate_corpus, tokenize
    from privnlp.mechanisms.pii import AutoAnnotator, PIIRedactor
    from privnlp.mechanisms.pii.tagger import train_tagger

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    print(
        f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1/5 min), torch threads {torch.get_num_threads()}"
    )
    corpus = generate_corpus(max(8, a.docs // 10), 10, seed=1)
    recs = list(corpus.records[: a.docs])
    texts = [r.text for r in recs]
    fields = [corpus.known_fields[r.id] for r in recs]
    docs = AutoAnnotator(patterns=True).annotate_records(recs, corpus.known_fields)
    sents = [d.tokens_and_tags() for d in docs]
    groups = [r.user_id for r in recs]

    t_tok = _best(lambda: [tokenize(t) for t in texts])
    print(
        f"baseline tokenize: {len(texts) / t_tok:,.0f} docs/s ({len(texts)} docs, {t_tok * 1e3:.1f} ms)"
    )
    central = train_tagger(
        sents, groups=groups, sites=1, rounds=2, lr=3.0, min_count=4, word_dropout=0.25, rng=0
    )
    t_epoch = min(h.seconds for h in central.history)
    red_regex = PIIRedactor(tagger=None)
    red_tag = PIIRedactor(tagger=central.tagger)
    for name, fn in (
        ("regex only", lambda: red_regex.redact_many(texts)),
        ("regex + BiLSTM tagger", lambda: red_tag.redact_many(texts)),
        ("regex + tagger + known fields", lambda: red_tag.redact_many(texts, fields)),
    ):
        t = _best(fn, repeat=2)
        print(
            f"redact [{name}]: {len(texts) / t:,.0f} docs/s; ratio to tokenizing = {t / t_tok:.1f}x slower"
        )
    fed = train_tagger(
        sents, groups=groups, sites=a.sites, rounds=2, lr=3.0, min_count=4, word_dropout=0.25, rng=0
    )
    t_round = min(h.seconds for h in fed.history)
    print(f"central epoch ({len(sents)} docs): {t_epoch:.2f} s")
    print(
        f"FedAvg round over {a.sites} sites: {t_round:.2f} s = {t_round / t_epoch:.2f}x one central epoch; "
        f"per site-round {t_round / a.sites:.2f} s = {t_round / a.sites / t_epoch:.2f}x one central epoch"
    )
    if a.minilm:
        mini = train_tagger(
            sents, groups=groups, sites=1, rounds=1, model="minilm", lr=0.05, batch_size=16, rng=0
        )
        print(
            f"all-MiniLM-L6-v2 central epoch: {mini.seconds:.1f} s = {mini.seconds / t_epoch:.1f}x the BiLSTM epoch"
        )


if __name__ == "__main__":
    main()
