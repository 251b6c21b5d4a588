"""Issue #17: the ``realistic`` preset is accepted wherever presets are and builds its own victims."""

from __future__ import annotations

import numpy as np
import pytest


def test_realistic_is_a_preset_and_maps_the_rest_to_quick():
    from privnlp.attacks.gradient.lamp import LAMP
    from privnlp.attacks.memorization import CanaryExposure
    from privnlp.evaluation.audit import resolve_attacks, resolve_mechanism, resolve_scenario
    from privnlp.evaluation.cards import PRESETS
    from privnlp.evaluation.realistic import REALISTIC_ATTACKS

    assert "realistic" in PRESETS and PRESETS["realistic"]["seeds"]
    # scenarios with realistic victims keep the preset, the others run with quick sizes
    assert resolve_scenario("fedsgd.eavesdropper", None, "realistic").preset == "realistic"
    assert resolve_scenario("lm.canary", None, "realistic").preset == "realistic"
    assert resolve_scenario("fl.snapshots", None, "realistic").preset == "realistic"
    assert resolve_scenario("vocab.membership", None, "realistic").preset == "quick"
    # mechanism examples: quick's
    assert (
        resolve_mechanism("dp_sgd", "realistic").params()
        == resolve_mechanism("dp_sgd", "quick").params()
    )
    # attacks: the realistic budget where one is set, else the quick example
    lamp, exp = resolve_attacks(["lamp", "canary_exposure"], None, "realistic")
    assert isinstance(lamp, LAMP) and all(
        getattr(lamp, k) == v for k, v in REALISTIC_ATTACKS["lamp"].items()
    )
    assert exp.params() == CanaryExposure.example("quick").params()
    # quick is unchanged
    assert resolve_scenario("fl.snapshots", None, "quick").preset == "quick"
    assert resolve_attacks(["lamp"], None, "full")[0].params() == LAMP.example("full").params()


def test_unknown_preset_is_refused_with_the_allowed_ones():
    from privnlp.core.errors import InvalidArgument
    from privnlp.evaluation.cards import evaluate_defense
    from privnlp.evaluation.scenarios.gradient import FedSGDEavesdropper

    with pytest.raises(InvalidArgument, match="realistic"):
        evaluate_defense("dp_sgd", preset="realistc")
    with pytest.raises(InvalidArgument, match="realistic"):
        FedSGDEavesdropper(preset="realistc")


def test_license_sentences_are_a_two_class_real_text_task():
    from privnlp.evaluation.realistic import license_sentences

    a = license_sentences()
    assert a == license_sentences() and len(a) > 200
    labels = [y for _, y in a]
    assert 0 < sum(labels) < len(labels)  # both classes (GNU / other licenses)
    assert any("Apache" in s for s, y in a if y == 0) and any("GNU" in s for s, y in a if y == 1)


def test_realistic_labels_task_runs_on_pretrained_minilm_and_rlg_is_exact():
    """The RLG trials of ``fedsgd.eavesdropper(preset="realistic")``: MiniLM (hidden 384) with a fresh
    100-way head, batches of 10 license sentences with secret labels (no fine-tuning needed)."""
    from privnlp.attacks.gradient.rlg import RLG
    from privnlp.evaluation.scenarios.gradient import PRESETS, FedSGDEavesdropper

    run = FedSGDEavesdropper("realistic", task="labels").run(None, rng=np.random.default_rng(0))
    cfg = PRESETS["realistic"]
    assert len(run.trials) == cfg["label_trials"] and run.config["preset"] == "realistic"
    obs = run.trials[0].observation
    assert obs.model.config.hidden_size == 384 and obs.model.config.num_hidden_layers == 6
    assert (
        obs.gradients["classifier.weight"].shape == (cfg["label_classes"], 384)
        and obs.labels is None
    )
    for t in run.trials[:2]:
        assert RLG().run(t.observation, rng=0).score(t.ground_truth["labels"])["exact_match"] == 1.0


@pytest.mark.slow
def test_realistic_classifier_and_lm_tasks_build():
    """MiniLM fine-tuned on license sentences (LAMP's victim) and the realistic LM fine-tuned on the client's
    records (FILM's victim); needs the cached realistic LM (minutes to build)."""
    from privnlp.evaluation.realistic import CLASSIFIER, LM, classifier_victim
    from privnlp.evaluation.scenarios.gradient import FedSGDEavesdropper

    _, tok, texts, labels, info = classifier_victim(0)
    assert info["train_loss_last"] < info["train_loss_first"] and set(labels) == {0, 1}
    assert all(
        CLASSIFIER["min_tokens"] <= len(tok(t)["input_ids"]) <= CLASSIFIER["max_tokens"]
        for t in texts
    )
    run = FedSGDEavesdropper("realistic", task="both", batch_size=2).run(
        None, rng=np.random.default_rng(0)
    )
    kinds = [t.observation.meta["task"] for t in run.trials]
    assert kinds.count("lm") == 2 and kinds.count("classifier") == 2 and kinds.count("labels") == 4
    lm = next(t for t in run.trials if t.observation.meta["task"] == "lm")
    assert lm.observation.model.config.n_layer >= 4 and lm.observation.model.config.n_embd >= 256
    assert len(lm.ground_truth["texts"]) == 2 and all(len(t) > 10 for t in lm.ground_truth["texts"])
    assert lm.observation.gradients["transformer.wpe.weight"].shape[0] >= LM["max_length"]


def test_lamp_prior_corpus_is_validated_and_the_debian_prior_has_no_license_text():
    from privnlp.attacks.gradient.lamp import LAMP, _debian_prior_texts
    from privnlp.core.errors import InvalidArgument

    assert LAMP().aux_corpus == "synthetic"  # the quick / full behaviour
    with pytest.raises(InvalidArgument, match="aux_corpus"):
        LAMP(aux_corpus="wiki")
    texts = _debian_prior_texts(200)
    assert len(texts) == 200 and not any(
        "licen" in t.lower() or "warrant" in t.lower() for t in texts
    )


def test_realistic_fl_snapshots_refuses_the_lstm_and_dp_classifier_checks_its_settings():
    """fl.snapshots realistic trains the realistic GPT-2 only; dp_classifier names the bad setting (before any
    model is loaded or trained)."""
    from privnlp.core.errors import InvalidArgument
    from privnlp.evaluation.realistic import dp_classifier
    from privnlp.evaluation.scenarios.memorization import FLSnapshotsScenario

    with pytest.raises(InvalidArgument, match="model='lstm'"):
        FLSnapshotsScenario("realistic", model="lstm").run(None, rng=0)
    with pytest.raises(InvalidArgument, match="unknown settings.*epsilon"):
        dp_classifier(0, epsilon=8)
    with pytest.raises(InvalidArgument, match="trainable must be 'all' or 'head'"):
        dp_classifier(0, trainable="body")


def test_a_mechanism_card_appends_the_realistic_block(tmp_path):
    """The realistic reproduction writes cards/mechanisms/<name>/REALISTIC.md; the one card renderer appends it after
    the developer notes (and renders as before without it)."""
    import shutil
    from pathlib import Path

    from privnlp.core.report import LeakageReport
    from privnlp.evaluation.cards import card_text

    src = Path(__file__).resolve().parents[2] / "cards" / "mechanisms" / "dp_sgd"
    d = tmp_path / "dp_sgd"
    d.mkdir()
    shutil.copy(src / "report.json", d / "report.json")
    rep = LeakageReport.load(d / "report.json")
    plain = card_text("dp_sgd", rep, d)
    (d / "NOTES.md").write_text("hand-written note\n")
    (d / "REALISTIC.md").write_text("### Realistic preset\n\nMiniLM numbers\n")
    card = card_text("dp_sgd", rep, d)
    assert "MiniLM numbers" not in plain and card.index("hand-written note") < card.index(
        "MiniLM numbers"
    )


def test_realistic_lm_cache_key_changes_with_the_debian_corpus(monkeypatch):
    """A machine with other documentation packages reads other paragraphs: the realistic LM's cache key must
    change with them (a stale model trained on another corpus is never loaded)."""
    import privnlp.models.realistic as R

    assert R.corpus_fingerprint(["ab", "c"]) != R.corpus_fingerprint(["a", "bc"])  # length-prefixed
    keys = []

    def fake_get_or_build(kind, config, seed, build, load):
        keys.append(config["corpus_sha256"])
        return None, None, {}

    monkeypatch.setattr(R, "get_or_build", fake_get_or_build)
    monkeypatch.setattr(
        R, "debian_english_texts", lambda **kw: ["one paragraph of English text"] * 3
    )
    R.realistic_lm(seed=0)
    R.realistic_lm(seed=0)
    monkeypatch.setattr(
        R,
        "debian_english_texts",
        lambda **kw: ["one paragraph of English text"] * 3 + ["python3-doc"],
    )
    R.realistic_lm(seed=0)
    assert keys[0] == keys[1] != keys[2]
