"""Reproductions of the WikiPII paper's effects on the bundled corpus (used by the slow tests, the benchmark
and the README numbers).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt``: Table 4 (auto-annotation vs manual labels),
Table 5 (a tagger trained on the noisy labels vs gold), Figure 5 (F1 vs the number of federated sites, each
site holding an equal random share of the training data, repeated over random divisions).
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Sequence

import numpy as np

from privnlp.core.rng import as_numpy

__all__ = ["noisy_label_effect", "sites_curve"]


def _setup(n_users: int, records_per_user: int, heldout_users: int, seed: int, patterns: bool,
           shared_names: bool = False):
    from privnlp.data import generate_corpus

    from .annotate import AutoAnnotator

    corpus = generate_corpus(n_users, records_per_user, seed=seed)
    users = list(corpus.users)
    held = set(users[-heldout_users:])
    train = [r for r in corpus.records if r.user_id not in held]
    test = [r for r in corpus.records if r.user_id in held]
    ann = AutoAnnotator(patterns=patterns, shared_names=shared_names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr_docs = ann.annotate_records(train, {r.id: corpus.known_fields[r.id] for r in train})
        ann = AutoAnnotator(patterns=patterns)  # test users: their own fields only
        te_docs = ann.annotate_records(test, {r.id: corpus.known_fields[r.id] for r in test})
    return corpus, train, test, [d.tokens_and_tags() for d in tr_docs], te_docs


def noisy_label_effect(*, n_users: int = 48, records_per_user: int = 10, heldout_users: int = 8, rounds: int = 10,
                       patterns: bool = True, shared_names: bool = False, model: str = "bilstm", rng: Any = 0,
                       **train_kw: Any) -> dict[str, Any]:
    """Noisy labels vs gold and the tagger trained on them vs gold, on held-out users' documents.

    Also scores what is available for documents *without* known fields: the regex recognizers alone."""
    from .recognizers import recognize
    from .spans import to_bio
    from .tagger import evaluate_tags, train_tagger

    g = as_numpy(rng)
    seed = int(g.integers(0, 2**31 - 1))
    _, train, test, sents, te_docs = _setup(n_users, records_per_user, heldout_users, seed, patterns, shared_names)
    gold = [r.tokens_and_tags() for r in test]
    gold_tags = [t for _, t in gold]
    noisy = evaluate_tags(gold_tags, [d.tokens_and_tags()[1] for d in te_docs])
    regex = evaluate_tags(gold_tags, [to_bio(r.text, recognize(r.text, ("EMAIL", "PHONE", "SSN", "DATE")))[1]
                                      for r in test])
    t0 = time.perf_counter()
    run = train_tagger(sents, groups=[r.user_id for r in train], sites=1, rounds=rounds, model=model,
                       rng=int(g.integers(0, 2**31 - 1)), **{"lr": 3.0, "min_count": 4, **train_kw})
    secs = time.perf_counter() - t0
    tagged = evaluate_tags(gold_tags, run.tagger.tags_for_tokens([t for t, _ in gold]))
    return {"noisy_labels": noisy.to_dict(), "tagger": tagged.to_dict(), "regex_only": regex.to_dict(),
            "train_seconds": secs, "seconds_per_epoch": run.seconds_per_round, "model": model,
            "train_docs": len(train), "test_docs": len(test), "patterns": patterns, "rounds": rounds}


def sites_curve(site_counts: Sequence[int] = (1, 2, 4, 8), *, total_sites: int = 8, repeats: int = 3,
                n_users: int = 48, records_per_user: int = 10, heldout_users: int = 8, rounds: int = 8,
                patterns: bool = True, rng: Any = 0, **train_kw: Any) -> list[dict[str, Any]]:
    """Figure 5: the training users are divided at random among ``total_sites`` sites; the first K sites train
    with FedAvg (federated/remote); strict / partial F1 on held-out users, mean and sd over ``repeats`` divisions."""
    from .tagger import evaluate_tags, split_sites, train_tagger

    g = as_numpy(rng)
    seed = int(g.integers(0, 2**31 - 1))
    _, train, test, sents, _ = _setup(n_users, records_per_user, heldout_users, seed, patterns)
    gold = [r.tokens_and_tags() for r in test]
    rows = []
    res: dict[int, list[dict[str, float]]] = {k: [] for k in site_counts}
    for rep in range(repeats):
        sites = split_sites(sents, [r.user_id for r in train], total_sites, rng=np.random.default_rng([seed, rep]))
        for k in site_counts:
            run = train_tagger([], site_data=sites[:k], rounds=rounds, rng=int(g.integers(0, 2**31 - 1)),
                               **{"lr": 3.0, "min_count": 4, **train_kw})
            ev = evaluate_tags([t for _, t in gold], run.tagger.tags_for_tokens([t for t, _ in gold]))
            res[k].append({"strict_f1": ev.metrics.strict.f1, "partial_f1": ev.metrics.partial.f1,
                           "seqeval_f1": ev.seqeval_f1, "docs": sum(len(s) for s in sites[:k]),
                           "seconds_per_round": run.seconds_per_round})
    for k in site_counts:
        vals = res[k]
        row = {"sites": k, "train_docs": float(np.mean([v["docs"] for v in vals]))}
        for m in ("strict_f1", "partial_f1", "seqeval_f1", "seconds_per_round"):
            row[m] = float(np.mean([v[m] for v in vals]))
            row[m + "_sd"] = float(np.std([v[m] for v in vals]))
        rows.append(row)
    return rows
