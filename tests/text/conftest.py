import numpy as np
import pytest


@pytest.fixture(scope="session")
def bundled():
    from privnlp.mechanisms.text import bundled_embeddings

    return bundled_embeddings()


@pytest.fixture(scope="session")
def lexicon_emb(bundled):
    from privnlp.data.sentiment import LEXICON

    return bundled.restrict(words=list(LEXICON["positive"]) + list(LEXICON["negative"]))


@pytest.fixture()
def small_emb():
    from privnlp.mechanisms.text import Embeddings

    words = ("good", "great", "bad", "awful", "movie", "film", "the", "a", "service", "food")
    g = np.random.default_rng(0)
    return Embeddings(words, g.standard_normal((len(words), 8)))
