"""Shared fixtures for tests/models: a small fixed text set, tokenizers built once per session."""

from __future__ import annotations

import pytest

_NAMES = ["alice", "bob", "carol", "dave", "erin", "frank"]
_VERBS = ["called", "emailed", "visited", "paid", "met", "thanked"]
_PLACES = ["the clinic", "the bank", "our office", "the school", "the market"]


def make_texts(n: int = 120) -> list[str]:
    out = []
    for i in range(n):
        a, b = _NAMES[i % 6].title(), _NAMES[(i * 5 + 1) % 6].title()
        out.append(
            f"{a} {_VERBS[(i * 7) % 6]} {b} at {_PLACES[i % 5]} on day {i % 28 + 1}; "
            f"phone 555-01{i % 100:02d}."
        )
    return out


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return make_texts()


@pytest.fixture(scope="session")
def bpe(texts):
    from privnlp.models import train_bpe_tokenizer

    return train_bpe_tokenizer(texts, 400)


@pytest.fixture(scope="session")
def wordpiece(texts):
    from privnlp.models import train_wordpiece_tokenizer

    return train_wordpiece_tokenizer(texts, 300)


@pytest.fixture(scope="session")
def text_factory():
    return make_texts
