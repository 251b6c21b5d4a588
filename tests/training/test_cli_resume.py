"""`privnlp train`: secure noise by default, --noise-seed, --resume equals the uninterrupted run, duplicates."""

from __future__ import annotations

import json

import torch
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
    "My SSN is 123-45-6789 and my  phone is 555 0100",
    "my ssn is 123-45-6789 and my phone is 555 0100",
]


def _train(tmp_path, name, *extra):
    out = tmp_path / name
    r = CliRunner().invoke(
        app,
        [
            "train",
            "--data",
            str(tmp_path / "t.txt"),
            "--noise-multiplier",
            "1.0",
            "--accountant",
            "rdp",
            "--batch-size",
            "3",
            "--vocab-size",
            "300",
            "--max-length",
            "24",
            "--out",
            str(out),
            *extra,
        ],
    )
    assert r.exit_code == 0, r.output
    return out, r.output


def test_cli_resume_equals_uninterrupted_run_and_noise_rule(tmp_path):
    (tmp_path / "t.txt").write_text("\n".join(TEXTS) + "\n")
    full, out_full = _train(tmp_path, "full", "--steps", "4", "--noise-seed", "3")
    part, _ = _train(tmp_path, "part", "--steps", "2", "--noise-seed", "3")
    resumed, out_res = _train(
        tmp_path,
        "resumed",
        "--steps",
        "4",
        "--noise-seed",
        "3",
        "--resume",
        str(part / "checkpoint.pt"),
    )
    assert "resumed from" in out_res
    a = torch.load(full / "checkpoint.pt", weights_only=False)
    b = torch.load(resumed / "checkpoint.pt", weights_only=False)
    assert all(
        torch.equal(a["model"][k], b["model"][k]) for k in a["model"]
    )  # resumed == uninterrupted
    claim = json.loads((full / "claim.json").read_text())
    assert claim["noise_seeded"] and "knows the seed" in claim["statement"]
    # the near-duplicate texts (case / whitespace) are counted and the group epsilon is reported
    assert "duplicates" in out_full and "k=" in out_full
    # default: OS-entropy noise, no seeded note; --dedup drops the copies
    sec, out_sec = _train(tmp_path, "secure", "--steps", "2", "--dedup")
    c = json.loads((sec / "claim.json").read_text())
    assert (
        not c["noise_seeded"]
        and "knows the seed" not in c["statement"]
        and c["extra"]["max_copies"] == 1
    )
    assert "warning:" not in out_sec
