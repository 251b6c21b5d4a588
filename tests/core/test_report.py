import json

import numpy as np
import pytest

from privnlp.core import AttackMetrics, LeakageReport, PrivacyClaim, summarize
from privnlp.core.report import Figure, atomic_write_text


def _report():
    return LeakageReport(
        mechanism="m",
        claim=PrivacyClaim.dp(1.0, 1e-5, "record"),
        threat_models=(),
        attacks=(
            AttackMetrics(
                "a",
                "acc",
                {"acc": summarize([0.5, 0.6, 0.7])},
                {"acc": summarize([0.9, 0.95, 1.0])},
                leaky_twin={"acc": summarize([1.0, 1.0])},
            ),
        ),
        utility={"loss": summarize([1.0, 2.0])},
        seeds=(0, 1, 2),
        figures=(Figure("f", b"\x89PNG fake", "cap"),),
    )


def test_summarize_t_interval_hand_computed():
    s = summarize([1.0, 2.0, 3.0])
    # mean 2, sd 1, sem 1/sqrt(3), t_{0.975,2} = 4.302653
    assert s.mean == pytest.approx(2.0)
    assert s.ci_high - s.mean == pytest.approx(4.302653 / np.sqrt(3), rel=1e-5)
    assert summarize([5.0]).ci_low == 5.0
    assert np.isnan(summarize([]).mean)


def test_report_roundtrip_and_renderings(tmp_path):
    r = _report()
    d = r.to_dict()
    assert d["schema"] == "privnlp.report/1"
    r2 = LeakageReport.from_dict(json.loads(json.dumps(d)))
    assert r2.attacks[0].defended["acc"].mean == pytest.approx(0.6)
    h = r2.headline()["a"]
    assert h["metric"] == "acc"
    assert (h["undefended"], h["defended"], h["leaky_twin"]) == pytest.approx((0.95, 0.6, 1.0))
    md = r.to_markdown()
    assert "| a | acc (headline) | 0.950 ± " in md and "leaky twin" in md
    html = r.to_html()
    assert (
        "<table>" in html
        and "data:image/png;base64," in html
        and "http" not in html.split("<body>")[1]
    )
    paths = r.save(tmp_path)
    assert all(p.exists() for p in paths.values())


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "out.txt"

    with pytest.raises(Exception):
        atomic_write_text(target, None)  # type: ignore[arg-type]
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


# -- issue 28 item 7: reports a reader can act on -----------------------------------------------
def test_no_interval_from_two_trials_and_intervals_clipped_to_the_metric_range():
    two = summarize([0.0, 0.044])  # the "ROUGE-2 0.022 ± 0.282" from 2 trials
    assert two.ci_low == two.ci_high == pytest.approx(0.022)
    assert two.fmt() == "0.022 (n=2)"
    s = summarize([0.0, 0.0, 0.1], value_range=(0.0, 1.0))
    assert s.ci_low == 0.0 and s.ci_high > s.mean
    assert s.fmt().startswith("0.033 [0.000, ")
    # applied by metric name inside AttackMetrics: a ROUGE interval never goes below 0
    a = AttackMetrics("film", "rouge2", {"rouge2": summarize([0.0, 0.0, 0.1])})
    assert a.defended["rouge2"].ci_low == 0.0
    unknown = AttackMetrics("x", "score", {"score": summarize([0.0, 0.0, 0.1])})
    assert unknown.defended["score"].ci_low < 0  # no range known: left alone


def test_attack_too_weak_flag_when_the_twin_does_not_leak_more():
    weak = AttackMetrics(
        "film",
        "rougeL",
        {"rougeL": summarize([0.05, 0.05, 0.05])},
        {"rougeL": summarize([1.0, 1.0, 1.0])},
        leaky_twin={"rougeL": summarize([0.05, 0.05, 0.05])},
    )
    strong = AttackMetrics(
        "lamp",
        "rouge1",
        {"rouge1": summarize([0.1, 0.1, 0.1])},
        leaky_twin={"rouge1": summarize([0.8, 0.8, 0.8])},
    )
    assert weak.attack_too_weak and not strong.attack_too_weak
    r = LeakageReport("m", PrivacyClaim.dp(1.0, 1e-5, "record"), (), (weak, strong))
    h = r.headline()
    assert h["film"]["attack_too_weak"] is True and "attack_too_weak" not in h["lamp"]
    md = r.to_markdown()
    row = next(line for line in md.splitlines() if line.startswith("| film | rougeL (headline)"))
    assert row.rstrip(" |").endswith("(attack too weak here)")
    assert md.count("attack too weak here") == 1


def test_headline_claim_one_line_with_group_epsilon_and_audited_claim_named():
    c = PrivacyClaim.dp(7.955, 1e-5, "example", extra={"group_epsilon": 1113.0, "max_copies": 16})
    assert c.headline() == "(7.955, 1e-05)-DP per example; a record repeated 16 times: epsilon 1113"
    r = LeakageReport(
        "dp_sgd",
        c,
        (),
        (),
        empirical_epsilon_lower_bound=3.729,
        audited_claim="(3.98, 1e-05)-DP per example (one DP-SGD step)",
    )
    md = r.to_markdown()
    assert "**Claim:** (7.955, 1e-05)-DP per example; a record repeated 16 times" in md
    assert "3.729, a lower bound on the epsilon of the audited claim (3.98, 1e-05)-DP" in md
    r2 = LeakageReport.from_dict(json.loads(r.to_json()))
    assert r2.audited_claim == r.audited_claim


# -- evaluate --model (issue 28 item 7); the lead may move these next to tests/evaluation/test_byom.py
def test_evaluate_model_bad_input_is_one_line_and_exit_2(tmp_path):
    from typer.testing import CliRunner

    from privnlp.cli.main import app

    data = tmp_path / "d.txt"
    data.write_text("one record\n")
    cases = [
        (["--model", str(tmp_path / "missing"), "--data", str(data)], "existing folder"),
        (["--model", str(tmp_path)], "needs --data"),
        (["--model", str(tmp_path), "--data", str(tmp_path / "no.txt")], "--data must be"),
        (["--model", str(tmp_path), "--data", str(data)], "config.json"),
    ]
    for args, want in cases:
        res = CliRunner().invoke(app, ["evaluate", *args, "--report-dir", str(tmp_path / "r")])
        assert res.exit_code == 2, res.output
        err = [line for line in res.output.splitlines() if line.startswith("error:")]
        assert len(err) == 1 and want in err[0], res.output
        assert "Traceback" not in res.output
        assert not (tmp_path / "r").exists()  # no partial output


def test_report_name_unique_per_checkpoint_folder(tmp_path):
    from privnlp.evaluation.byom import report_name

    a, b = tmp_path / "x" / "model", tmp_path / "y" / "model"
    reports = tmp_path / "reports"
    reports.mkdir()
    assert report_name(a, reports) == "model"
    (reports / "model.json").write_text(json.dumps({"config": {"model_path": str(a.resolve())}}))
    assert report_name(a, reports) == "model"  # the same folder overwrites its own report
    other = report_name(b, reports)
    assert other.startswith("model-") and other != report_name(tmp_path / "z" / "model", reports)


def test_byom_names_attacks_that_did_not_apply_and_labels_the_column(tmp_path):
    from privnlp.data import generate_corpus
    from privnlp.evaluation.byom import audit_model
    from privnlp.models import tiny_bert_classifier, train_wordpiece_tokenizer

    texts = [t[:60] for t in generate_corpus(n_users=2, records_per_user=4, seed=3).texts()]
    tok = train_wordpiece_tokenizer(texts, 200)
    model = tiny_bert_classifier(
        len(tok),
        num_labels=2,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        seed=0,
    )
    # a binary classifier with one record per update: RLG has nothing to tell apart (C <= S + 1)
    rep = audit_model(model, tok, texts, attacks=["rlg"], batch_size=1, trials=1)
    assert rep.attacks == ()
    assert any(n.startswith("rlg did not apply to this classifier: ") for n in rep.notes)
    assert rep.config["system_label"] == "as given"
    assert (
        "| attack | metric | undefended | as given |"
        in LeakageReport(
            "m",
            PrivacyClaim.none(),
            (),
            (AttackMetrics("a", "acc", {"acc": summarize([0.5])}),),
            config={"system_label": "as given"},
        ).to_markdown()
    )
