"""Shared fixtures for the fragmentation tests (session-scoped: built once)."""

from __future__ import annotations

import pytest

from privnlp.data.parallel import generate_parallel
from privnlp.mechanisms.fragmentation.corpus import from_corpus


@pytest.fixture(scope="session")
def toy():
    return generate_parallel(600, seed=0)


@pytest.fixture(scope="session")
def toy_text(toy):
    return from_corpus(toy)
