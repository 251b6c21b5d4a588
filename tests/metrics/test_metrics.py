"""Every metric against hand-computed values."""

import numpy as np
import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.data import Record, Span
from privnlp.metrics import (
    PRF,
    bio_to_spans,
    bleu,
    chrf,
    edit_distance,
    hungarian_match,
    ner_span_metrics,
    nerr,
    rouge,
    seqeval_f1,
    set_prf,
    token_precision_recall,
    top_k_accuracy,
)

REF, HYP = "the cat sat on the mat", "the cat on the mat"


def test_rouge_hand():
    r = rouge([REF], [HYP])
    # R1: 5 matched unigrams, P=5/5, R=5/6 -> F=10/11; R2: 3 of 4 hyp / 5 ref bigrams -> 2/3; L: LCS=5 -> 10/11
    assert r["rouge1"] == pytest.approx(10 / 11)
    assert r["rouge2"] == pytest.approx(2 / 3)
    assert r["rougeL"] == pytest.approx(10 / 11)
    two = rouge([REF, "a b"], [HYP, "c d"])
    assert two["rouge1"] == pytest.approx((10 / 11 + 0) / 2)
    with pytest.raises(InvalidArgument):
        rouge(["a"], ["a", "b"])


def test_bleu_chrf_hand():
    assert bleu([REF], [REF]) == pytest.approx(100.0)
    # hyp "the cat sat on the mat" vs ref "the cat sat on a mat": p1=5/6 p2=3/5 p3=2/4 p4=1/3, BP=1
    expected = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert bleu(["the cat sat on a mat"], [REF]) == pytest.approx(expected, abs=1e-6)
    assert chrf([REF], [REF]) == pytest.approx(100.0)
    assert chrf(["aaaa"], ["bbbb"]) == pytest.approx(0.0)
    assert 0 < chrf([REF], [HYP]) < 100


def test_nerr_hand():
    rec = Record(
        "r",
        "u",
        "note",
        "John Smith, SSN 123-45-6789, works at Acme.",
        (Span(0, 10, "PERSON"), Span(16, 27, "SSN"), Span(38, 42, "ORG")),
    )
    assert nerr(rec, "john smith called about 123-45-6789") == pytest.approx(2 / 3)
    assert nerr([rec, ["Paris"]], ["nothing", "in paris"]) == pytest.approx(1 / 4)
    assert nerr([[("Bob", "PERSON")]], ["bob"], case_sensitive=True) == 0.0
    assert nerr([[]], ["x"]) == 0.0


def test_token_precision_recall_hand():
    pr = token_precision_recall("a b c d", "a b b e")
    assert (pr.precision, pr.recall, pr.f1) == (0.5, 0.5, 0.5)
    pr = token_precision_recall(["x", "y"], ["x"])
    assert (pr.precision, pr.recall) == (1.0, 0.5) and pr.f1 == pytest.approx(2 / 3)


def test_set_prf_hand():
    r = set_prf({1, 2, 3}, {2, 3, 4, 5})
    assert r == PRF(2 / 3, 0.5, pytest.approx(4 / 7), 0.0)
    assert set_prf([1, 1, 0], [1, 0, 0], multiset=True) == PRF(
        2 / 3, 2 / 3, pytest.approx(2 / 3), 0.0
    )
    assert set_prf([1, 1, 0], [1, 0, 0]) == PRF(1.0, 1.0, 1.0, 1.0)
    assert set_prf([], []) == PRF(1.0, 1.0, 1.0, 1.0)
    assert set_prf(["a"], []) == PRF(0.0, 0.0, 0.0, 0.0)


def test_edit_distance_hand():
    assert edit_distance("kitten", "sitting", level="char") == 3
    assert edit_distance("kitten", "sitting", level="char", normalized=True) == pytest.approx(3 / 7)
    assert edit_distance("the cat sat", "the dog sat down") == 2
    assert edit_distance(["a", "b"], ["b"]) == 1
    assert edit_distance("", "", level="char", normalized=True) == 0.0
    with pytest.raises(InvalidArgument, match="level"):
        edit_distance("a", "b", level="word")


def test_top_k_accuracy_hand():
    s = [[0.1, 0.5, 0.4], [0.3, 0.2, 0.5]]
    assert top_k_accuracy(s, [2, 0], k=1) == 0.0
    assert top_k_accuracy(s, [2, 0], k=2) == 1.0
    assert top_k_accuracy(np.array(s), [1, 0], k=1) == 0.5
    assert top_k_accuracy([["a", "b"], ["c", "d"]], ["b", "x"], k=1) == 0.0
    assert top_k_accuracy([["a", "b"], ["c", "d"]], ["b", "x"], k=2) == 0.5
    with pytest.raises(InvalidArgument):
        top_k_accuracy(s, [0], k=1)


@pytest.mark.parametrize(
    "pred,expected",
    [
        # WikiPII Table 3 on gold "Adam London" = name: (strict, exact, type, partial)
        ((0, 11, "name"), (1, 1, 1, 1)),
        ((0, 4, "name"), (0, 0, 0.5, 0.5)),
        ((0, 11, "place"), (0, 1, 0, 0.5)),
        ((0, 4, "place"), (0, 0, 0, 0.5)),
        ((20, 25, "name"), (0, 0, 0, 0)),
    ],
)
def test_ner_span_metrics_table3(pred, expected):
    m = ner_span_metrics([(0, 11, "name")], [pred])
    got = tuple(getattr(m, s).f1 for s in ("strict", "exact", "type", "partial"))
    assert got == pytest.approx(expected)


def test_ner_span_metrics_pooled_hand():
    gold = [[(0, 4, "PER"), (10, 16, "LOC")], [(0, 3, "ORG")]]
    pred = [[(0, 4, "PER"), (10, 14, "LOC"), (20, 22, "PER")], []]
    m = ner_span_metrics(gold, pred)
    # strict credit 1 of 3 pred / 3 gold; type/partial credit 1 + 0.5
    assert (m.strict.precision, m.strict.recall) == pytest.approx((1 / 3, 1 / 3))
    assert (m.type.precision, m.type.recall) == pytest.approx((1.5 / 3, 1.5 / 3))
    assert m.partial.f1 == pytest.approx(0.5) and m.exact.f1 == pytest.approx(1 / 3)
    assert m.strict.exact_match == 0.0
    # BIO input
    m2 = ner_span_metrics([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-ORG"]])
    assert m2.strict.f1 == 0.5 and m2.exact.f1 == 1.0 and m2.partial.f1 == pytest.approx(0.75)
    assert ner_span_metrics([], []).strict == PRF(1.0, 1.0, 1.0, 1.0)
    assert "type_f1" in m.to_dict()


def test_bio_to_spans():
    assert bio_to_spans(["B-A", "I-A", "O", "I-B", "B-B", "I-A"]) == [
        (0, 2, "A"),
        (3, 4, "B"),
        (4, 5, "B"),
        (5, 6, "A"),
    ]
    with pytest.raises(InvalidArgument):
        bio_to_spans(["X-A"])


def test_seqeval_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["B-PER", "I-PER", "O", "O"]]
    assert seqeval_f1(gold, pred) == pytest.approx(2 / 3)  # P=1, R=1/2
    assert seqeval_f1(gold, gold, strict=True) == 1.0
    with pytest.raises(InvalidArgument):
        seqeval_f1(gold, [["O"]])


def test_hungarian_beats_greedy():
    table = {("r0", "h0"): 0.9, ("r0", "h1"): 0.8, ("r1", "h0"): 0.7, ("r1", "h1"): 0.1}
    m = hungarian_match(["r0", "r1"], ["h0", "h1"], lambda r, h: table[(r, h)])
    assert m.pairs == ((0, 1), (1, 0)) and m.mean_score == pytest.approx(
        0.75
    )  # greedy would give 0.5
    d = hungarian_match(["a b c", "d e f"], ["d e f", "a b x"])  # default ROUGE-L F
    assert d.pairs == ((0, 1), (1, 0)) and d.mean_score == pytest.approx((2 / 3 + 1) / 2)
    assert d.reordered(["d e f", "a b x"]) == ["a b x", "d e f"]
    one = hungarian_match(["a", "b", "c"], ["c"], lambda r, h: float(r == h))
    assert one.pairs == ((2, 0),) and one.mean_score == pytest.approx(1 / 3)
