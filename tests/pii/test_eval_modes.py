"""The paper's four evaluation modes (Table 3) through evaluate_annotation / evaluate_tags."""

from __future__ import annotations

import pytest

from privnlp.data.corpus import Record, Span
from privnlp.mechanisms.pii import evaluate_annotation
from privnlp.mechanisms.pii.annotate import AnnotatedDoc
from privnlp.mechanisms.pii.recognizers import PIISpan
from privnlp.mechanisms.pii.tagger import evaluate_tags

TEXT = "Adam London."


@pytest.mark.parametrize(
    "pred,expected",
    [
        ((0, 11, "PERSON"), (1.0, 1.0, 1.0, 1.0)),  # correct
        ((0, 4, "PERSON"), (0.0, 0.0, 0.5, 0.5)),  # boundary wrong
        ((0, 11, "LOC"), (0.0, 1.0, 0.0, 0.5)),  # type wrong
        ((5, 11, "LOC"), (0.0, 0.0, 0.0, 0.5)),  # both wrong
    ],
)
def test_table3_credit(pred, expected):
    rec = Record("r", "u", "note", TEXT, (Span(0, 11, "PERSON"),))
    doc = AnnotatedDoc(TEXT, (PIISpan(*pred),))
    ev = evaluate_annotation([rec], {}, docs=[doc])
    got = tuple(getattr(ev.metrics, s).f1 for s in ("strict", "exact", "type", "partial"))
    assert got == pytest.approx(expected)


def test_evaluate_tags_by_class():
    gold = [["B-PERSON", "I-PERSON", "O", "B-DATE"]]
    pred = [["B-PERSON", "I-PERSON", "O", "O"]]
    ev = evaluate_tags(gold, pred)
    assert ev.by_class["PERSON"] == 1.0 and ev.by_class["DATE"] == 0.0
    assert ev.metrics.strict.recall == 0.5 and ev.metrics.strict.precision == 1.0
    assert ev.seqeval_f1 == pytest.approx(2 / 3)
