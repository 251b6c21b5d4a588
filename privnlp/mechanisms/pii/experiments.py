"""Reproductions of the WikiPII paper's effects on the bundled corpus (used by the slow tests, the benchmark
and the README numbers).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt``: Table 4 (auto-annotation vs manual labels),
Table 5 (a tagger trained on the noisy labels vs gold), Figure 5 (F1 vs the number of federated sites, each
site holding an equal random share of the training data, repeated over random divisions).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument
from privnlp.core.rng import as_numpy
from privnlp.data import generate_corpus
from privnlp.metrics.ner import bio_to_spans

from .annotate import AutoAnnotator, degrade_fields
from .recognizers import recognize
from .spans import to_bio
from .tagger import evaluate_tags, split_sites, train_tagger

__all__ = ["noisy_label_effect", "sites_curve", "union_tags", "jitter_boundaries"]


def _setup(
    n_users: int,
    records_per_user: int,
    heldout_users: int,
    seed: int,
    patterns: bool,
    shared_names: bool = False,
    degraded: bool = False,
    annotator: dict[str, Any] | None = None,
):

    corpus = generate_corpus(n_users, records_per_user, seed=seed)
    users = list(corpus.users)
    held = set(users[-heldout_users:])
    train = [r for r in corpus.records if r.user_id not in held]
    test = [r for r in corpus.records if r.user_id in held]
    fields = degrade_fields(corpus.known_fields, rng=seed) if degraded else corpus.known_fields
    kw = dict(annotator or {})
    ann = AutoAnnotator(patterns=patterns, shared_names=shared_names, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr_docs = ann.annotate_records(train, {r.id: fields[r.id] for r in train})
        ann = AutoAnnotator(patterns=patterns, **kw)  # test users: their own fields only
        te_docs = ann.annotate_records(test, {r.id: fields[r.id] for r in test})
    return corpus, train, test, [d.tokens_and_tags() for d in tr_docs], te_docs


def noisy_label_effect(
    *,
    n_users: int = 48,
    records_per_user: int = 10,
    heldout_users: int = 8,
    rounds: int = 10,
    patterns: bool = True,
    shared_names: bool = False,
    degraded: bool = False,
    annotator: dict[str, Any] | None = None,
    boundary_noise: float = 0.0,
    model: str = "bilstm",
    rng: Any = 0,
    **train_kw: Any,
) -> dict[str, Any]:
    """Noisy labels vs gold and the tagger trained on them vs gold, on held-out users' documents.

    The noisy labels of the held-out documents come from the same annotator and the same kind of fields as
    the training labels (``degraded=True``: :func:`~privnlp.mechanisms.pii.degrade_fields`; ``annotator``:
    :class:`~privnlp.mechanisms.pii.AutoAnnotator` keywords, e.g. ``{"fuzzy_threshold": 100, "nicknames":
    False}`` for an exact matcher; ``boundary_noise``: :func:`jitter_boundaries` on every label, training and
    held-out alike: random noise, unlike the annotator's own systematic misses). Also scores what is available for documents *without* known fields:
    the regex recognizers alone, and the union of the tagger with the noisy labels."""
    g = as_numpy(rng)
    seed = int(g.integers(0, 2**31 - 1))
    _, train, test, sents, te_docs = _setup(
        n_users, records_per_user, heldout_users, seed, patterns, shared_names, degraded, annotator
    )
    gold = [r.tokens_and_tags() for r in test]
    gold_tags = [t for _, t in gold]
    te_labels = [d.tokens_and_tags()[1] for d in te_docs]
    if boundary_noise > 0:
        gn = np.random.default_rng([seed, 7])
        sents = [(t, jitter_boundaries(tg, boundary_noise, rng=gn)) for t, tg in sents]
        te_labels = [jitter_boundaries(tg, boundary_noise, rng=gn) for tg in te_labels]
    noisy = evaluate_tags(gold_tags, te_labels)
    regex = evaluate_tags(
        gold_tags,
        [to_bio(r.text, recognize(r.text, ("EMAIL", "PHONE", "SSN", "DATE")))[1] for r in test],
    )
    t0 = time.perf_counter()
    defaults = {"lr": 3.0, "min_count": 4, "word_dropout": 0.25} if model == "bilstm" else {}
    run = train_tagger(
        sents,
        groups=[r.user_id for r in train],
        sites=1,
        rounds=rounds,
        model=model,
        rng=int(g.integers(0, 2**31 - 1)),
        **{**defaults, **train_kw},
    )
    secs = time.perf_counter() - t0
    pred = run.tagger.tags_for_tokens([t for t, _ in gold])
    tagged = evaluate_tags(gold_tags, pred)
    union = evaluate_tags(gold_tags, [union_tags(lab, p) for lab, p in zip(te_labels, pred)])
    return {
        "noisy_labels": noisy.to_dict(),
        "tagger": tagged.to_dict(),
        "regex_only": regex.to_dict(),
        "labels_or_tagger": union.to_dict(),
        "train_seconds": secs,
        "seconds_per_epoch": run.seconds_per_round,
        "model": model,
        "train_docs": len(train),
        "test_docs": len(test),
        "patterns": patterns,
        "rounds": rounds,
        "degraded": degraded,
        "annotator": dict(annotator or {}),
        "boundary_noise": boundary_noise,
        "train_kw": {k: v for k, v in train_kw.items() if isinstance(v, (int, float, str, bool))},
    }


def jitter_boundaries(tags: Sequence[str], p: float, *, rng: Any) -> list[str]:
    """Random boundary noise on BIO ``tags`` (the paper's fuzzy noun-chunk matches, §2.2 / Table 4): each entity,
    with probability ``p``, loses its first or last token (one-token entities: gain a neighbouring ``O``
    token instead). Types are kept; entities never merge."""

    g = as_numpy(rng)
    out = ["O"] * len(tags)
    spans = bio_to_spans(list(tags))
    taken = [False] * len(tags)
    for a, b, _ in spans:
        for i in range(a, b):
            taken[i] = True
    for a, b, lab in spans:
        if g.random() < p:
            left = g.random() < 0.5
            if b - a > 1:
                a, b = (a + 1, b) if left else (a, b - 1)
            elif left and a > 0 and not taken[a - 1]:
                a -= 1
            elif not left and b < len(tags) and not taken[b]:
                b += 1
            for i in range(a, b):
                taken[i] = True
        out[a:b] = ["B-" + lab] + ["I-" + lab] * (b - a - 1)
    return out


def union_tags(labels: Sequence[str], tagger: Sequence[str]) -> list[str]:
    """The noisy labels, with every tagger entity added whose tokens the labels leave all ``O``."""

    out = list(labels)
    for a, b, lab in bio_to_spans(list(tagger)):
        if all(t == "O" for t in out[a:b]):
            out[a:b] = ["B-" + lab] + ["I-" + lab] * (b - a - 1)
    return out


def sites_curve(
    site_counts: Sequence[int] = (1, 2, 4, 8),
    *,
    total_sites: int = 8,
    repeats: int = 3,
    n_users: int = 88,
    records_per_user: int = 10,
    heldout_users: int = 8,
    rounds: int = 12,
    setting: str = "remote",
    patterns: bool = True,
    rng: Any = 0,
    **train_kw: Any,
) -> list[dict[str, Any]]:
    """Figure 5: the training users are divided at random among ``total_sites`` sites and the first K take part;
    strict / partial F1 on held-out users, mean and sd over ``repeats`` random divisions.

    ``setting="remote"`` (federated/remote): FedAvg over the K sites, ``rounds`` rounds of one local epoch each,
    so every site trains the same number of steps whatever K (more sites = more data, not more steps per
    site); ``setting="central"`` (the paper's federated/central, used for its Figure 5): the K sites' batches
    are pooled and trained centrally for ``rounds`` epochs."""

    if setting not in ("remote", "central"):
        raise InvalidArgument(f"setting must be 'remote' or 'central'; got {setting!r}")
    g = as_numpy(rng)
    seed = int(g.integers(0, 2**31 - 1))
    _, train, test, sents, _ = _setup(n_users, records_per_user, heldout_users, seed, patterns)
    gold = [r.tokens_and_tags() for r in test]
    kw = {"lr": 3.0, "min_count": 4, "word_dropout": 0.25, **train_kw}
    rows = []
    res: dict[int, list[dict[str, float]]] = {k: [] for k in site_counts}
    for rep in range(repeats):
        sites = split_sites(
            sents, [r.user_id for r in train], total_sites, rng=np.random.default_rng([seed, rep])
        )
        for k in site_counts:
            part = sites[:k] if setting == "remote" else [[s for site in sites[:k] for s in site]]
            t0 = time.perf_counter()
            run = train_tagger(
                [], site_data=part, rounds=rounds, rng=int(g.integers(0, 2**31 - 1)), **kw
            )
            secs = time.perf_counter() - t0
            ev = evaluate_tags(
                [t for _, t in gold], run.tagger.tags_for_tokens([t for t, _ in gold])
            )
            res[k].append(
                {
                    "strict_f1": ev.metrics.strict.f1,
                    "partial_f1": ev.metrics.partial.f1,
                    "seqeval_f1": ev.seqeval_f1,
                    "docs": sum(len(s) for s in sites[:k]),
                    "seconds": secs,
                }
            )
    for k in site_counts:
        vals = res[k]
        row = {
            "sites": k,
            "setting": setting,
            "rounds": rounds,
            "train_docs": float(np.mean([v["docs"] for v in vals])),
        }
        for m in ("strict_f1", "partial_f1", "seqeval_f1", "seconds"):
            row[m] = float(np.mean([v[m] for v in vals]))
            row[m + "_sd"] = float(np.std([v[m] for v in vals]))
        rows.append(row)
    return rows
