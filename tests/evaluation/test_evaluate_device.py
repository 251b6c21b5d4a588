"""`privnlp evaluate --device` (issue #29 item 8): resolved before any work, handed to every scenario that trains,
named in the realistic plan, recorded in the scenario's config; the training moves to the device and the
observations come back on the CPU."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

import privnlp.evaluation.cards as cards
from privnlp.cli.main import app
from privnlp.core.errors import InvalidArgument
from privnlp.core.registry import MECHANISMS
from privnlp.evaluation import realistic
from privnlp.evaluation.audit import _scenario_identity, resolve_scenario
from privnlp.evaluation.realistic import current_device, dp_train_lm, use_device
from privnlp.evaluation.scenarios.gradient import FedSGDEavesdropper, client_update
from privnlp.evaluation.scenarios.memorization import (
    FLSnapshotsScenario,
    LMCanaryScenario,
    digit_bpe_tokenizer,
)
from privnlp.mechanisms.training.devices import InputsOnDevice, resolve_device
from privnlp.models import tiny_gpt2

#: the scenarios whose run trains a model (victim fine-tune, DP-SGD, federated local steps)
TRAINING_SCENARIOS = (FedSGDEavesdropper, LMCanaryScenario, FLSnapshotsScenario)


def _no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _fake_cuda(monkeypatch, count=1):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_resolve_device_spellings_and_auto(monkeypatch):
    _no_cuda(monkeypatch)
    assert resolve_device("cpu") == "cpu"
    assert resolve_device(" CPU ") == "cpu"
    assert resolve_device("auto") == "cpu"
    _fake_cuda(monkeypatch, count=2)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda") == "cuda"
    assert resolve_device("cuda:1") == "cuda:1"


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "mps", "", "cpu0"])
def test_resolve_device_refuses_unknown_spellings_naming_the_flag(spec):
    with pytest.raises(InvalidArgument, match=r"--device must be one of cpu, cuda, cuda:N, auto"):
        resolve_device(spec, name="--device")


def test_resolve_device_refuses_cuda_without_cuda_and_an_index_out_of_range(monkeypatch):
    _no_cuda(monkeypatch)
    with pytest.raises(InvalidArgument, match=r"--device 'cuda' requested but torch sees no CUDA"):
        resolve_device("cuda", name="--device")
    _fake_cuda(monkeypatch, count=1)
    with pytest.raises(InvalidArgument, match=r"--device 'cuda:1': this machine has 1 CUDA device"):
        resolve_device("cuda:1", name="--device")


def test_cli_cuda_without_cuda_is_one_line_exit_2_before_any_work(monkeypatch, tmp_path):
    _no_cuda(monkeypatch)
    calls = []
    monkeypatch.setattr(cards, "evaluate_all", lambda **kw: calls.append(kw))
    monkeypatch.setattr(
        realistic, "realistic_plan", lambda *a, **k: calls.append("plan")
    )  # not even the plan
    out = tmp_path / "reports"
    r = CliRunner().invoke(
        app,
        ["evaluate", "--defense", "dp_sgd", "--preset", "realistic", "--device", "cuda"]
        + ["--report-dir", str(out)],
    )
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --device 'cuda'"), r.output
    assert "Traceback" not in r.output
    assert calls == [] and not out.exists()


def test_cli_device_reaches_the_plan_and_the_scenarios(monkeypatch, tmp_path):
    """``--device auto`` on a (faked) CUDA machine: the plan names cuda, and the scenarios the audit builds
    inside ``evaluate_all`` are built for cuda (constructing one touches no GPU)."""
    _fake_cuda(monkeypatch)
    seen = {}

    def fake_evaluate_all(**kw):
        seen["context"] = current_device()
        mech = MECHANISMS.get("dp_sgd").example("quick")
        seen["scenario"] = resolve_scenario("lm.canary", mech, kw["preset"]).device
        return [], {}

    monkeypatch.setattr(cards, "evaluate_all", fake_evaluate_all)
    r = CliRunner().invoke(
        app,
        ["evaluate", "--defense", "dp_sgd", "--preset", "realistic", "--device", "auto"]
        + ["--report-dir", str(tmp_path)],
    )
    assert r.exit_code == 0, r.output
    assert "the scenarios train on cuda" in " ".join(r.output.split())
    assert seen == {"context": "cuda", "scenario": "cuda"}
    assert current_device() == "cpu"  # restored after the run


def test_cli_default_device_is_cpu_even_where_cuda_exists(monkeypatch, tmp_path):
    _fake_cuda(monkeypatch)
    seen = []
    monkeypatch.setattr(
        cards, "evaluate_all", lambda **kw: (seen.append(current_device()), ([], {}))[1]
    )
    r = CliRunner().invoke(app, ["evaluate", "--defense", "dp_sgd", "--report-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert seen == ["cpu"]


def test_cli_device_with_model_is_refused(tmp_path):
    r = CliRunner().invoke(
        app, ["evaluate", "--model", str(tmp_path), "--data", "x.txt", "--device", "cuda"]
    )
    assert r.exit_code == 2 and "--device applies to the registered defenses" in r.output


@pytest.mark.parametrize("cls", TRAINING_SCENARIOS)
def test_every_training_scenario_takes_the_device_and_keys_its_cache_by_it(cls):
    assert cls().device == "cpu"
    with use_device("cuda:1"):
        built = cls()
        explicit = cls(device="cpu")
    assert built.device == "cuda:1" and explicit.device == "cpu"
    # the audit cache key holds the scenario's attributes: a cuda result is never read for a cpu run
    assert _scenario_identity(built) != _scenario_identity(cls())
    with pytest.raises(InvalidArgument, match="device must be"):
        cls(device="gpu")


def test_use_device_refuses_an_unresolved_spelling_and_restores():
    with pytest.raises(InvalidArgument, match="device must be"):
        with use_device("auto"):  # the CLI resolves auto first
            pass
    with use_device("cuda"):
        with use_device("cpu"):
            assert current_device() == "cpu"
        assert current_device() == "cuda"
    assert current_device() == "cpu"


def test_realistic_plan_names_the_device():
    plan = realistic.realistic_plan(["dp_sgd"], lm_cached=True, device="cuda:0")
    assert plan.device == "cuda:0" and "the scenarios train on cuda:0" in plan.describe()
    assert (
        "the scenarios train on cpu"
        in realistic.realistic_plan(["dp_sgd"], lm_cached=True).describe()
    )


def _dp_update(device: str):
    tok_len = 64
    model = tiny_gpt2(tok_len, n_layer=1, n_embd=16, n_head=2, n_positions=16, seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.randint(0, tok_len, (2, 8), generator=torch.Generator().manual_seed(0))
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(8).repeat(2, 1),
        "labels": ids.clone(),
    }
    mech = MECHANISMS.get("dp_sgd").example("quick")
    grads, extras = client_update(model, batch, mech, rng=0, device=device)
    return model, before, grads, extras


def test_dp_sgd_update_on_cpu_device_comes_back_on_the_cpu_and_leaves_the_model():
    model, before, grads, extras = _dp_update("cpu")
    assert grads and all(g.device.type == "cpu" for g in grads.values())
    assert extras["noise_std"] > 0
    for n, p in model.named_parameters():
        assert p.device.type == "cpu" and torch.equal(p, before[n])


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (run by scripts/gpu)"
)
def test_dp_sgd_update_on_cuda_comes_back_on_the_cpu_and_leaves_the_model():
    model, before, grads, extras = _dp_update("cuda")
    assert grads and all(g.device.type == "cpu" for g in grads.values())
    assert all(torch.isfinite(g).all() for g in grads.values())
    for n, p in model.named_parameters():
        assert p.device.type == "cpu" and torch.equal(p, before[n])


def _dp_lm(device: str):
    texts = [f"my pin code is {1000 + 37 * i} and the day is fine" for i in range(24)]
    tok = digit_bpe_tokenizer(texts, 120, model_max_length=24)
    eos = tok.eos_token_id
    model = tiny_gpt2(
        len(tok), n_layer=1, n_embd=16, n_head=2, n_positions=24, seed=0,
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
    )  # fmt: skip
    mech = MECHANISMS.get("dp_sgd").example("quick")
    cfg = {"train": {"max_length": 24, "steps": 2}, "dp": {"batch_size": 8, "lr": 1e-3}}
    return dp_train_lm(mech, model, tok, texts, cfg, rng=0, device=device)


def test_dp_train_lm_records_the_device_and_returns_a_cpu_model():
    model, info = _dp_lm("cpu")
    assert info["device"] == "cpu" and info["dp_steps"] >= 1 and info["epsilon"] > 0
    assert all(p.device.type == "cpu" for p in model.parameters())


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (run by scripts/gpu)"
)
def test_dp_train_lm_on_cuda_spends_the_cpu_epsilon_and_returns_a_cpu_model():
    cpu_model, cpu_info = _dp_lm("cpu")
    model, info = _dp_lm("cuda")
    assert info["device"] == "cuda" and info["dp_steps"] == cpu_info["dp_steps"]
    assert info["epsilon"] == pytest.approx(
        cpu_info["epsilon"], rel=1e-12
    )  # same ledger on every device
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_inputs_on_device_moves_tensor_arguments_and_shares_the_parameters():
    """The wrapper ``train_lm`` gets on a GPU: its inputs are moved to the module's device (``meta`` here: a device
    that is not the CPU, on a machine without a GPU), its parameters and training mode are the module's."""
    lin = torch.nn.Linear(3, 2, device="meta")
    wrapped = InputsOnDevice(lin, "meta")
    out = wrapped(torch.ones(4, 3))  # a CPU tensor in, computed on meta
    assert out.device.type == "meta" and out.shape == (4, 2)
    assert list(wrapped.parameters()) == list(lin.parameters())
    wrapped.eval()
    assert not lin.training
    with pytest.raises(RuntimeError):  # unwrapped, the CPU input meets meta weights
        lin(torch.ones(4, 3))
