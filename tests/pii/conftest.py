"""Shared, session-scoped artifacts of the PII tests (small corpus, auto-annotations, a tiny tagger)."""

from __future__ import annotations

import warnings

import pytest


@pytest.fixture(scope="session")
def pii_corpus():
    from privnlp.data import generate_corpus

    return generate_corpus(20, 6, seed=0)


@pytest.fixture(scope="session")
def pii_split(pii_corpus):
    from privnlp.mechanisms.pii import AutoAnnotator

    users = list(pii_corpus.users)
    test_users = set(users[-4:])
    train = [r for r in pii_corpus.records if r.user_id not in test_users]
    test = [r for r in pii_corpus.records if r.user_id in test_users]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        docs = AutoAnnotator(patterns=True).annotate_records(train, pii_corpus.known_fields)
    return train, test, [d.tokens_and_tags() for d in docs]


@pytest.fixture(scope="session")
def tiny_tagger_run(pii_split):
    from privnlp.mechanisms.pii.tagger import train_tagger

    train, _, sents = pii_split
    return train_tagger(
        sents,
        groups=[r.user_id for r in train],
        sites=1,
        rounds=3,
        lr=3.0,
        emb_dim=24,
        hidden=24,
        min_count=3,
        rng=0,
    )
