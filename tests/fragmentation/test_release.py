"""Release: shuffling, discard fraction (seeded statistical test), tags, I/O, bad input."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from privnlp.core.claims import ClaimKind
from privnlp.core.errors import InvalidArgument, MalformedInput
from privnlp.mechanisms.fragmentation import (
    LeakyPhraseFragmentation,
    ParallelText,
    PhraseFragmentation,
    read_parallel,
)


def test_discard_fraction_statistically(toy, toy_text):
    """Every occurrence is kept with probability 1 - d, whatever its length or position.

    Tolerance: 4 binomial standard deviations per bucket (false-failure rate < 1e-4 per bucket).
    """
    d, seeds = 0.5, 60
    mech = PhraseFragmentation(max_length=4, discard_fraction=d)
    occ_all, _, _ = mech.extract(toy_text, toy.alignments)
    n = len(occ_all)
    kept_count = np.zeros(n)
    key = {tuple(r): i for i, r in enumerate(occ_all.tolist())}
    for s in range(seeds):
        rel = mech.fragment(toy_text, rng=np.random.default_rng(s), alignments=toy.alignments)
        assert rel.n_extracted == n and rel.n_released == n - round(d * n)
        kept_count[[key[tuple(r)] for r in rel.occurrences.tolist()]] += 1
    lengths = occ_all[:, 2] - occ_all[:, 1]
    first_half = occ_all[:, 0] < len(toy_text) // 2
    for name, mask in [
        ("len1", lengths == 1),
        ("len>=3", lengths >= 3),
        ("first half", first_half),
        ("second half", ~first_half),
    ]:
        trials = seeds * mask.sum()
        freq = kept_count[mask].sum() / trials
        tol = 4 * math.sqrt(d * (1 - d) / trials)
        assert abs(freq - (1 - d)) < tol, (name, freq)


def test_shuffled_across_corpus_vs_leaky_twin(toy, toy_text):
    real = PhraseFragmentation(4, 0.5).fragment(toy_text, rng=1, alignments=toy.alignments)
    leaky = LeakyPhraseFragmentation(4, 0.5).fragment(toy_text, rng=1, alignments=toy.alignments)
    rho_real = np.corrcoef(np.arange(len(real)), real.occurrences[:, 0])[0, 1]
    rho_leaky = np.corrcoef(np.arange(len(leaky)), leaky.occurrences[:, 0])[0, 1]
    assert abs(rho_real) < 0.05 and rho_leaky > 0.99
    assert leaky.n_released == leaky.n_extracted  # the twin ignores the discard fraction


def test_tags_claim_and_sidecar(tmp_path, toy, toy_text):
    mech = PhraseFragmentation(7, 0.5, tag=True)
    rel = mech.fragment(toy_text, rng=0, alignments=toy.alignments)
    assert all(s.startswith("<P> ") and s.endswith(" </P>") for s in rel.source + rel.target)
    obs = rel.to_observation()
    assert obs.tagged and obs.settings["max_length"] == 7
    claim = mech.claim()
    assert (
        claim.kind == ClaimKind.HEURISTIC
        and claim.epsilon is None
        and "no formal" in claim.statement()
    )
    paths = rel.write(tmp_path / "out")
    assert paths["source"].read_text().splitlines() == list(rel.source)
    assert paths["target"].read_text().splitlines() == list(rel.target)
    side = json.loads(paths["sidecar"].read_text())
    assert side["settings"]["discard_fraction"] == 0.5 and side["n_released"] == rel.n_released
    assert side["claim"]["kind"] == "heuristic"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "fragments.json",
        "fragments.src",
        "fragments.tgt",
    ]


def test_write_failure_leaves_no_partial_output(tmp_path, toy, toy_text, monkeypatch):
    rel = PhraseFragmentation(4, 0.5).fragment(toy_text, rng=0, alignments=toy.alignments)
    import privnlp.mechanisms.fragmentation.mechanism as mod

    real_replace = mod.os.replace
    calls = []

    def flaky(a, b):
        calls.append(b)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_replace(a, b)

    monkeypatch.setattr(mod.os, "replace", flaky)
    with pytest.raises(OSError):
        rel.write(tmp_path)
    # all or nothing: no temp files, no half release
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"max_length": 0}, r"max_length must be in \[1"),
        ({"max_length": -3}, r"max_length must be in \[1"),
        ({"discard_fraction": 1.0}, r"discard_fraction must be in \[0.0, 1.0\)"),
        ({"discard_fraction": -0.1}, r"discard_fraction must be in \[0.0, 1.0\)"),
        ({"discard_fraction": float("nan")}, r"discard_fraction"),
        ({"min_length": 5, "max_length": 4}, r"min_length must be in \[1, max_length=4\]"),
        ({"max_target_length": 0}, r"max_target_length"),
        ({"aligner": "giza"}, r"aligner must be one of"),
        ({"symmetrization": "sum"}, r"symmetrization must be one of"),
    ],
)
def test_bad_parameters(kw, match):
    with pytest.raises(InvalidArgument, match=match):
        PhraseFragmentation(**kw)


def test_input_formats(tmp_path):
    (tmp_path / "a.src").write_text("Hello, world!\nThe cat sat.\n")
    (tmp_path / "a.tgt").write_text("Hallo, Welt!\nDie Katze sass.\n")
    pt = read_parallel(tmp_path / "a.src", tmp_path / "a.tgt", src_lang="en", tgt_lang="de")
    assert pt.source[0] == ("Hello", ",", "world", "!") and pt.doc_ids is None
    (tmp_path / "a.tsv").write_text("a b\tx y\td1\nc\tz\td2\n")
    pt = read_parallel(tmp_path / "a.tsv", tokenize=False)
    assert pt.doc_ids == ("d1", "d2") and pt.target[1] == ("z",)
    (tmp_path / "a.jsonl").write_text(
        '{"src": "a b", "tgt": "x y", "doc_id": 7}\n{"source": "c", "target": "z", "doc_id": 7}\n'
    )
    pt = read_parallel(tmp_path / "a.jsonl", tokenize=False)
    assert pt.doc_ids == ("7", "7") and pt.source[0] == ("a", "b")
    train, test, tr, te = ParallelText.from_strings(
        ["a"] * 6, ["x"] * 6, ["d1", "d1", "d2", "d2", "d3", "d3"]
    ).split_by_document(0.34, rng=0)
    assert (
        len(te) == 2 and len({("d1", "d1", "d2", "d2", "d3", "d3")[i] for i in te}) == 1
    )  # documents kept together


def test_bad_input_files(tmp_path):
    (tmp_path / "a.src").write_text("a\nb\nc\n")
    (tmp_path / "a.tgt").write_text("x\ny\n")
    with pytest.raises(MalformedInput, match="mismatched line counts.*3 lines.*has 2"):
        read_parallel(tmp_path / "a.src", tmp_path / "a.tgt")
    (tmp_path / "b.tgt").write_text("x\n\nz\n")
    with pytest.raises(MalformedInput, match="line 2 is empty"):
        read_parallel(tmp_path / "a.src", tmp_path / "b.tgt")
    (tmp_path / "c.tsv").write_text("a\tx\nb\n")
    with pytest.raises(MalformedInput, match="line 2"):
        read_parallel(tmp_path / "c.tsv")
    (tmp_path / "d.jsonl").write_text('{"src": "a"}\n')
    with pytest.raises(MalformedInput, match="'target'/'tgt'"):
        read_parallel(tmp_path / "d.jsonl")
    with pytest.raises(MalformedInput, match="does not exist"):
        read_parallel(tmp_path / "nope.src", tmp_path / "a.tgt")


def test_written_files_honour_the_umask(tmp_path, toy, toy_text):
    """Issue #31: the release files get 0666 minus the umask (mkstemp alone gives 0600)."""
    rel = PhraseFragmentation(7, 0.5).fragment(toy_text, rng=0, alignments=toy.alignments)
    old = os.umask(0o022)
    try:
        paths = rel.write(tmp_path / "a")
        assert {oct(p.stat().st_mode & 0o777) for p in paths.values()} == {oct(0o644)}
        os.umask(0o077)
        paths = rel.write(tmp_path / "b")
        assert {oct(p.stat().st_mode & 0o777) for p in paths.values()} == {oct(0o600)}
    finally:
        os.umask(old)
