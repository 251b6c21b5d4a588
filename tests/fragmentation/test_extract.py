"""Phrase extraction (Koehn et al. 2003) on hand-made alignments and against a brute-force oracle."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.fragmentation.extract import extract_phrases, extract_sentence


def brute_force(m, n, links, max_s, max_t=None, min_s=1):
    max_t = max_t or max_s
    out = set()
    for s0, s1 in itertools.combinations(range(m + 1), 2):
        for t0, t1 in itertools.combinations(range(n + 1), 2):
            if not (min_s <= s1 - s0 <= max_s and t1 - t0 <= max_t):
                continue
            inside = [(i, j) for i, j in links if s0 <= i < s1 and t0 <= j < t1]
            crossing = [(i, j) for i, j in links if (s0 <= i < s1) != (t0 <= j < t1)]
            if inside and not crossing:
                out.add((s0, s1, t0, t1))
    return out


def test_crossing_links():
    # a b c / x y z with b-z and c-y crossing
    got = extract_sentence(3, 3, {(0, 0), (1, 2), (2, 1)}, max_length=3)
    assert sorted(got) == sorted(
        {(0, 1, 0, 1), (1, 2, 2, 3), (2, 3, 1, 2), (1, 3, 1, 3), (0, 3, 0, 3)}
    )
    assert len(got) == len(set(got))


def test_unaligned_source_word_extends_phrases():
    # a b c / x y ; b unaligned: "b" alone has no alignment point, but extends its neighbours
    got = set(extract_sentence(3, 2, {(0, 0), (2, 1)}, max_length=3))
    assert got == {(0, 1, 0, 1), (0, 2, 0, 1), (2, 3, 1, 2), (1, 3, 1, 2), (0, 3, 0, 2)}


def test_unaligned_target_word_extends_phrases():
    # a b / x y z ; y unaligned
    got = set(extract_sentence(2, 3, {(0, 0), (1, 2)}, max_length=3))
    assert got == {(0, 1, 0, 1), (0, 1, 0, 2), (1, 2, 2, 3), (1, 2, 1, 3), (0, 2, 0, 3)}


def test_one_to_many_and_length_limits():
    # a b / x y z ; a-x, b-y, b-z ; max length 1 on the source and 1 on the target
    links = {(0, 0), (1, 1), (1, 2)}
    assert set(extract_sentence(2, 3, links, max_length=1)) == {
        (0, 1, 0, 1)
    }  # b needs 2 target words
    assert set(extract_sentence(2, 3, links, max_length=1, max_target_length=2)) == {
        (0, 1, 0, 1),
        (1, 2, 1, 3),
    }
    assert (
        set(extract_sentence(2, 3, links, max_length=2, min_length=2)) == set()
    )  # "a b" needs 3 target words
    assert set(extract_sentence(2, 3, links, max_length=2, max_target_length=3, min_length=2)) == {
        (0, 2, 0, 3)
    }


@pytest.mark.parametrize("seed", range(25))
def test_matches_brute_force_on_random_alignments(seed):
    g = np.random.default_rng(seed)
    m, n = int(g.integers(1, 9)), int(g.integers(1, 9))
    links = {(int(g.integers(m)), int(g.integers(n))) for _ in range(int(g.integers(0, m + n)))}
    for max_s, max_t, min_s in [(3, None, 1), (7, 5, 1), (4, 4, 2), (20, 20, 1)]:
        got = extract_sentence(
            m, n, links, max_length=max_s, max_target_length=max_t, min_length=min_s
        )
        assert len(got) == len(set(got)), "duplicate occurrences"
        assert set(got) == brute_force(m, n, links, max_s, max_t, min_s)


def test_corpus_occurrences_and_errors(toy, toy_text):
    occ = extract_phrases(toy_text.source, toy_text.target, toy.alignments, max_length=4)
    assert occ.dtype == np.int32 and occ.shape[1] == 5
    assert (occ[:, 2] - occ[:, 1]).max() <= 4 and (occ[:, 4] - occ[:, 3]).max() <= 4
    # occurrences, not types: a phrase repeated in two sentences appears twice
    assert len(np.unique(occ[:, 0])) == len(toy_text)
    for bad in (0, -1, 1.5):
        with pytest.raises(InvalidArgument, match="max_length"):
            extract_sentence(2, 2, {(0, 0)}, max_length=bad)
    with pytest.raises(InvalidArgument, match="min_length"):
        extract_sentence(2, 2, {(0, 0)}, max_length=2, min_length=3)
    with pytest.raises(InvalidArgument, match="outside the sentence pair"):
        extract_sentence(2, 2, {(0, 5)}, max_length=2)
