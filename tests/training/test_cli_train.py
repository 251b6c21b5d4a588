"""`privnlp train` end to end on a tiny text file (a few DP-SGD steps)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from privnlp.cli.main import app

TEXTS = [
    "the patient john smith called at noon",
    "my ssn is 123-45-6789 and my phone is 555 0100",
    "meeting with alice about the contract",
    "please email bob at bob@example.com today",
    "the weather is nice and the sun shines",
    "our order ships next week to the office",
    "remember to pay the rent before friday",
    "call mom back about the holiday plans",
]


def test_privnlp_train_prints_and_saves_the_privacy_statement(tmp_path):
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "out"
    r = CliRunner().invoke(
        app,
        [
            "train",
            "--data",
            str(data),
            "--epsilon",
            "8",
            "--accountant",
            "rdp",
            "--batch-size",
            "4",
            "--epochs",
            "1",
            "--vocab-size",
            "300",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert (
        "DP-SGD performed over 7 examples" in r.output
        and "Epsilon assuming no amplification" in r.output
    )
    claim = json.loads((out / "claim.json").read_text())
    assert claim["kind"] == "dp" and claim["epsilon"] <= 8.0 and claim["ledger"]["runs"]
    assert "eval_perplexity_after" in json.loads((out / "utility.json").read_text())
    assert (out / "checkpoint.pt").exists()


def test_privnlp_train_bad_input_names_the_option(tmp_path):
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n")
    r = CliRunner().invoke(
        app, ["train", "--data", str(data), "--epsilon", "-1", "--vocab-size", "300"]
    )
    assert r.exit_code == 2 and "target_epsilon" in r.output
    r = CliRunner().invoke(app, ["train", "--data", str(data), "--defense", "nope"])
    assert r.exit_code == 2 and "--defense" in r.output


def test_flags_that_cannot_apply_without_dp_are_errors(tmp_path):
    """`--defense frozen_embeddings|none` adds no noise: a DP flag there is an error, not silently ignored."""
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "out"
    for defense in ("frozen_embeddings", "none"):
        for flags in (
            ["--noise-multiplier", "1.0"],
            ["--epsilon", "3"],
            ["--noise-seed", "1"],
            ["--dedup"],
            ["--delta", "1e-6"],
            ["--epsilon", "3", "--dedup"],
        ):
            r = CliRunner().invoke(
                app, ["train", "--data", str(data), "--defense", defense, "--out", str(out), *flags]
            )
            assert r.exit_code == 2, (defense, flags, r.output)
            assert flags[0] in r.output and "--defense dp_sgd only" in r.output
            assert "Traceback" not in r.output
    assert not out.exists()  # no partial output


def test_public_dataset_size_makes_the_claim_independent_of_the_private_count(tmp_path):
    claims = []
    for n in (7, 8):  # N and N+1 training texts (one held out of each file)
        data = tmp_path / f"t{n}.txt"
        data.write_text(
            "\n".join(TEXTS[: n + 1] if n < 8 else TEXTS + ["one more line of text"]) + "\n"
        )
        out = tmp_path / f"out{n}"
        r = CliRunner().invoke(
            app,
            [
                "train", "--data", str(data), "--noise-multiplier", "1.0", "--accountant", "rdp",
                "--batch-size", "4", "--epochs", "1", "--vocab-size", "300",
                "--public-dataset-size", "40", "--out", str(out),
            ],
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        claims.append(json.loads((out / "claim.json").read_text()))
    a, b = claims
    assert a["neighbouring"] == b["neighbouring"] == "add/remove"
    assert a["extra"]["sample_rate"] == b["extra"]["sample_rate"] == 0.1
    assert a["extra"]["steps"] == b["extra"]["steps"] == 10  # 1 epoch of the public 40 at batch 4
    assert a["epsilon"] == b["epsilon"] and "dataset_size" not in a["extra"]
