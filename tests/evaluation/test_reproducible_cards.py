"""Issue #17: cards reproduce in a clean clone -- pinned torch threads, numerics in cache keys,
the environment in every report, and the CI comparison of headline numbers (scripts/check_cards.py)."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from privnlp.core import (
    Adversary,
    Attack,
    AttackResult,
    Mechanism,
    PerturbedText,
    PrivacyClaim,
    ThreatModel,
)
from privnlp.core.numerics import environment, numerics_fingerprint, pinned_threads
from privnlp.core.protocols import Scenario, ScenarioRun, Trial
from privnlp.core.rng import as_numpy
from privnlp.evaluation import audit
from privnlp.models import cache as mcache

ROOT = Path(__file__).resolve().parents[2]


def _load_check_cards():
    spec = importlib.util.spec_from_file_location(
        "check_cards", ROOT / "scripts" / "check_cards.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pinned_threads_sets_and_restores(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.delenv("PRIVNLP_TORCH_THREADS", raising=False)
        with pinned_threads() as n:
            assert n == 1 and torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("PRIVNLP_TORCH_THREADS", "0")
        with pytest.raises(Exception, match="PRIVNLP_TORCH_THREADS"):
            with pinned_threads():
                pass
    finally:
        torch.set_num_threads(before)


def test_model_cache_key_has_numerics_and_build_runs_pinned(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVNLP_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PRIVNLP_TORCH_THREADS", raising=False)
    k1 = mcache.cache_key("x", {"a": 1}, 0)
    monkeypatch.setenv("PRIVNLP_TORCH_THREADS", "2")
    assert mcache.cache_key("x", {"a": 1}, 0) != k1, (
        "thread count must be part of the model cache key"
    )
    monkeypatch.delenv("PRIVNLP_TORCH_THREADS")
    v = mcache._versions()
    assert {"torch_threads", "cpu_capability", "torch", "transformers", "code"} <= set(v)

    seen = []

    def build(out: Path) -> None:
        seen.append(torch.get_num_threads())
        (out / "w.txt").write_text("x")

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        mcache.get_or_build("pin", {"a": 1}, 0, build, lambda p: (p / "w.txt").read_text())
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _tiny_train(threads: int) -> str:
    """A tiny GPT-2 trained a few steps under ``pinned_threads`` while the process runs ``threads``."""
    from privnlp.models import tiny_gpt2

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with pinned_threads():
            torch.manual_seed(0)
            m = tiny_gpt2(97, n_layer=1, n_embd=64, n_head=2, n_positions=64, seed=0)
            opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
            g = torch.Generator().manual_seed(0)
            for _ in range(15):
                ids = torch.randint(0, 97, (16, 48), generator=g)
                loss = m(input_ids=ids, labels=ids).loss
                opt.zero_grad()
                loss.backward()
                opt.step()
        return hashlib.sha256(
            b"".join(p.detach().numpy().tobytes() for p in m.parameters())
        ).hexdigest()
    finally:
        torch.set_num_threads(before)


def test_training_bits_do_not_depend_on_the_process_thread_count():
    # the root cause of the irreproducible LAMP card: weights trained with 1 vs 2 threads differed
    assert _tiny_train(1) == _tiny_train(2)


class _Flip(Mechanism):
    paired_attacks = ("guess17",)

    def claim(self):
        return PrivacyClaim.dp(1.0, 0.0, "record")

    def release(self, bits, *, rng):
        return 1 - bits


class _Bits(Scenario):
    name = "bits17"
    threat_model = ThreatModel(Adversary.DATA_RECIPIENT, observes=("released bits",))
    threads_seen: list = []

    def run(self, mechanism, *, rng):
        _Bits.threads_seen.append(torch.get_num_threads())
        bits = as_numpy(rng).integers(0, 2, 50)
        rel = bits if mechanism is None else mechanism.release(bits, rng=rng)
        return ScenarioRun(
            (Trial(PerturbedText(texts=tuple(str(b) for b in rel)), tuple(int(b) for b in bits)),),
            {"agreement": float((rel == bits).mean())},
        )


class _Guess(Attack):
    name = "guess17"
    observation_type = PerturbedText
    headline_metric = "accuracy"

    def run(self, observation, *, rng):
        return AttackResult(
            self.name,
            tuple(int(t) for t in observation.texts),
            scorer=lambda r, gt: {"accuracy": float(np.mean(np.array(r.reconstructions) == gt))},
        )


def test_audit_runs_pinned_and_report_records_environment(tmp_path):
    _Bits.threads_seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rep = audit(
            _Flip(),
            _Bits(),
            [_Guess()],
            seeds=[0],
            cache_dir=tmp_path,
            progress=False,
            figures=False,
        )
    finally:
        torch.set_num_threads(before)
    assert _Bits.threads_seen == [1, 1]  # defended + undefended, both pinned
    env = rep.to_dict()["config"]["environment"]
    for k in (
        "torch_threads",
        "cpu_capability",
        "cpu_flags",
        "torch",
        "transformers",
        "OMP_NUM_THREADS",
    ):
        assert k in env
    assert (
        env["torch_threads"] == 1
        and env["cpu_capability"] == numerics_fingerprint()["cpu_capability"]
    )
    from privnlp.evaluation.cards import render_mechanism_card

    assert "- environment: torch_threads 1" in render_mechanism_card(rep)
    assert environment()["cpu_count"]


def _report(name_metric="rouge2", und=(0.5, 0.4, 0.6), dfd=(0.0, 0.0, 0.0), cpu=None):
    def s(m, lo, hi):
        return {name_metric: {"mean": m, "ci_low": lo, "ci_high": hi, "n": 1, "values": [m]}}

    cfg = {"preset": "quick", "environment": {"torch_threads": 1, "cpu_capability": "AVX512"}}
    if cpu:
        cfg["cpu_intervals"] = cpu
    return {
        "config": cfg,
        "attacks": [
            {
                "attack": "lamp",
                "headline_metric": name_metric,
                "params": {"scenario": "fedsgd.eavesdropper"},
                "undefended": s(*und),
                "defended": s(*dfd),
            }
        ],
    }


def test_check_cards_names_card_metric_and_system():
    from privnlp.evaluation.reproducibility import compare, widen_intervals

    committed = _report()
    assert compare("dp_sgd", committed, _report(und=(0.55, 0.55, 0.55))) == []
    errs = compare("dp_sgd", committed, _report(und=(0.0, 0.0, 0.0)))
    assert (
        len(errs) == 1 and "cards/mechanisms/dp_sgd: lamp rouge2 (undefended) = 0.0000" in errs[0]
    )
    assert "[0.4000, 0.6000]" in errs[0]
    # a CPU-dependent interval stated in the committed report widens the check
    wide = _report(cpu={"lamp": {"undefended": [0.0, 0.6]}})
    assert compare("dp_sgd", wide, _report(und=(0.0, 0.0, 0.0))) == []
    assert "attack missing" in compare("dp_sgd", committed, {"config": {}, "attacks": []})[0]
    w = widen_intervals(_report(), _report(und=(0.0, 0.0, 0.0)))
    assert w["config"]["cpu_intervals"] == {"lamp": {"undefended": [0.0, 0.6]}}
    assert compare("dp_sgd", w, _report(und=(0.0, 0.0, 0.0))) == []
    # the script's entry point exists and parses --only
    cc = _load_check_cards()
    assert callable(cc.main)


def test_card_states_cpu_dependent_interval_and_regeneration_keeps_it(tmp_path):
    from privnlp.evaluation.cards import render_mechanism_card
    from privnlp.evaluation.reproducibility import carry_cpu_intervals

    rep = audit(
        _Flip(), _Bits(), [_Guess()], seeds=[0], cache_dir=tmp_path, progress=False, figures=False
    )
    prev = {
        "config": {
            "cpu_intervals": {"guess17": {"undefended": [0.5, 1.0]}},
            "cpu_interval_environments": ["AVX2 kernels, 1 thread(s), x"],
        }
    }
    kept = carry_cpu_intervals(rep, prev)
    assert kept.config["cpu_intervals"]["guess17"]["undefended"] == [0.5, 1.0]
    card = render_mechanism_card(kept)
    assert "**CPU-dependent:**" in card and "guess17 undefended: [0.500, 1.000]" in card
    assert carry_cpu_intervals(rep, None) is rep


def test_check_cards_runs_cards_in_parallel_workers(tmp_path):
    """Issue #30 item 9: --jobs 2 regenerates cards in two spawned processes; here both committed reports are
    of another preset, so each worker only reads and skips its card (a few seconds) and the run says so."""
    import json
    import subprocess
    import sys

    for name in ("aaa", "bbb"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps({"config": {"preset": "quick"}}))
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "check_cards.py"),
            "--jobs",
            "2",
            "--preset",
            "full",
        ]
        + ["--cards-dir", str(tmp_path), "--work", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "skip aaa" in out.stdout and "skip bbb" in out.stdout
    assert "2/2 cards reproduce" in out.stdout and "with 2 job(s)" in out.stdout
    missing = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_cards.py"), "--jobs", "2", "--only", "zzz"]
        + ["--cards-dir", str(tmp_path), "--work", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        missing.returncode == 1
        and "cards/mechanisms/zzz: no committed report.json" in missing.stdout
    )
