"""What a newcomer sees in the terminal (issue #21): no known-harmless library warnings between the progress
bars, and `privnlp evaluate` ends with one summary table."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture()
def hf_log():
    h = _Records()
    lg = logging.getLogger("transformers")
    lg.addHandler(h)
    try:
        yield h
    finally:
        lg.removeHandler(h)


@pytest.fixture(scope="module")
def tiny_lm():
    from privnlp.models import tiny_gpt2, train_bpe_tokenizer

    texts = [
        "The nurse called me about the appointment tomorrow.",
        "My phone number is 555 0123.",
    ] * 5
    tok = train_bpe_tokenizer(texts, vocab_size=300, model_max_length=16)
    return tiny_gpt2(len(tok), n_layer=1, n_embd=16, n_head=2, n_positions=32, seed=0), tok


def test_film_beam_search_uses_the_current_cache_api_quietly(tiny_lm, hf_log):
    """FILM's KV-cached beam search: no `past_key_values` FutureWarning / deprecation log, same result."""
    from privnlp.attacks.gradient.film import beam_search

    model, tok = tiny_lm
    bag = tok("The nurse called me about the appointment tomorrow.")["input_ids"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        cached = beam_search(model, tok, bag, max_length=8, beam_size=4, use_cache=True)
    assert not [m for m in hf_log.messages if "past_key_values" in m], hf_log.messages
    assert cached == beam_search(model, tok, bag, max_length=8, beam_size=4, use_cache=False)


def test_length_filters_do_not_warn_about_long_sequences(tiny_lm, hf_log):
    """The scenarios measure a text's full length with ``verbose=False``; transformers honours it (and warns
    without it: the check can fail)."""
    _, tok = tiny_lm
    long = "The nurse called me about the appointment tomorrow. " * 8
    assert len(tok(long, verbose=False)["input_ids"]) > tok.model_max_length
    assert not [m for m in hf_log.messages if "Token indices sequence length" in m]
    src = (ROOT / "privnlp" / "evaluation" / "scenarios" / "gradient.py").read_text()
    assert "tok(r.text, verbose=False)" in src and "tok(t, verbose=False)" in src


def _outcomes():
    from privnlp.core.report import LeakageReport
    from privnlp.evaluation.cards import EvaluationOutcome

    names = ["dp_sgd", "vickrey", "crypten_textcnn"]
    return [
        EvaluationOutcome(
            n, LeakageReport.load(ROOT / "cards" / "mechanisms" / n / "report.json"), {}, 1.5
        )
        for n in names
    ]


def test_summary_table_has_every_defense_attack_and_failure():
    from rich.console import Console

    from privnlp.cli._summary import summary_table

    outs = _outcomes()
    console = Console(record=True, width=140)
    console.print(summary_table(outs, {"fedavg": "RuntimeError: boom"}))
    text = console.export_text()
    for o in outs:
        assert o.name in text
        for atk, v in o.report.headline().items():
            assert atk.split(" (")[0] in text and f"{v['defended']:.3f}" in text
    assert "FAILED" in text and "boom" in text
    assert "(7.96, 1e-05)-DP / example" in text


def test_evaluate_ends_with_one_summary_table(monkeypatch, tmp_path):
    """The CLI prints the table once, after the run (evaluate_all is stubbed: the wiring is what is tested)."""
    from typer.testing import CliRunner

    import privnlp.evaluation.cards as cards
    from privnlp.cli.main import app

    outs = _outcomes()
    monkeypatch.setattr(
        cards, "evaluate_all", lambda **kw: (outs, {"fedavg": "RuntimeError: boom"})
    )
    r = CliRunner().invoke(app, ["evaluate", "--defense", "dp_sgd", "--report-dir", str(tmp_path)])
    out = r.output
    assert r.exit_code == 1  # a failure makes the command fail
    assert out.count("headline leakage") == 1 and "vickrey" in out and "FAILED" in out
    assert "✓" not in out  # no per-defense lines any more
