import numpy as np
import pytest

from privnlp.data import LEXICON, generate_sentiment


def test_deterministic_and_balanced():
    a, b, c = (
        generate_sentiment(300, seed=1),
        generate_sentiment(300, seed=1),
        generate_sentiment(300, seed=2),
    )
    assert a == b and a.texts != c.texts
    assert len(a) == 300 and sum(a.labels) == 150 and set(a.labels) == {0, 1}


def test_lexicon():
    assert len(LEXICON["positive"]) >= 40 and len(LEXICON["negative"]) >= 40
    assert not set(LEXICON["positive"]) & set(LEXICON["negative"])


def test_learnable_by_bow_but_not_one_word():
    pytest.importorskip("sklearn")
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    d = generate_sentiment(2000, seed=0)
    tr, te = d.split(0.2)
    vec = CountVectorizer()
    clf = LogisticRegression(max_iter=1000).fit(vec.fit_transform(tr.texts), tr.labels)
    assert clf.score(vec.transform(te.texts), te.labels) > 0.85
    x = (vec.transform(d.texts) > 0).toarray().astype(float)
    y = np.asarray(d.labels, dtype=float)
    agree = (x * y[:, None] + (1 - x) * (1 - y[:, None])).mean(
        axis=0
    )  # accuracy of "word present => 1"
    best = float(np.maximum(agree, 1 - agree).max())
    assert best < 0.75  # no single word decides the label
