"""DP-SGD on 2 processes (gloo on loopback, CPU): claim, aggregated noise level, identical models, one ledger,
checkpoints across world sizes, collective budget refusal, and the ``torchrun ... privnlp.cli.main train`` path.

One ``torchrun --nproc_per_node 2`` launch runs this file as a worker (``--worker OUT``) and writes what
each rank saw to ``OUT/rank{r}.json``; the tests below read it (session-scoped: one launch for all).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

N, BATCH, D_IN, HIDDEN = 256, 32, 64, 128
SIGMA, C = 1.0, 1.0
TRAIN_STEPS = 6
ZERO_STEPS = 3
# noise check: the aggregated noise of ZERO_STEPS zero-gradient steps over every parameter
# (~3 x 8.6k draws): the relative standard error of the sample std is ~0.45%; tolerance 3% (> 6 SE)
NOISE_RTOL = 0.03
LAUNCH_TIMEOUT = 60


def _data(seed: int = 0):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D_IN, generator=g)
    y = (x[:, 0] > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=BATCH)


def _model(seed: int = 0):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(D_IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 2)
    )


def _loss(model, batch):
    import torch

    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y, reduction="none")


def _private(seed: int = 0, **kw):
    import torch

    from privnlp.mechanisms.training import make_private

    m = _model(seed)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    kw.setdefault("noise_multiplier", SIGMA)
    kw.setdefault("grad_sample_mode", "hooks")
    return make_private(m, opt, _data(), max_grad_norm=C, accountant="rdp", **kw)


# ----------------------------------------------------------------------------- the worker (under torchrun)
def _worker(out: Path) -> None:
    import torch

    from privnlp.core.errors import InvalidArgument
    from privnlp.mechanisms.training import train_private
    from privnlp.mechanisms.training.distributed import init_from_env

    torch.set_num_threads(1)
    ctx = init_from_env("gloo")
    rank, w = ctx.rank, ctx.world_size
    res: dict = {"rank": rank, "world_size": w}

    # a seed shared by the ranks never seeds the noise
    try:
        _private(rng=0)
        res["seed_refused"] = False
    except InvalidArgument as e:
        res["seed_refused"] = "seed" in str(e)

    # 1. zero-gradient steps: the aggregated noise (p.grad after the all-reduce) has std sigma*C/B
    pt = _private(seed=rank)  # different init per rank: DPDDP must broadcast rank 0's
    res["expected_batch_size"] = pt.expected_batch_size
    draws = []
    for _ in range(ZERO_STEPS):
        pt.optimizer.zero_grad(set_to_none=True)
        pt.noise_only_step()
        draws.append(torch.cat([p.grad.reshape(-1) for p in pt.optimizer.params]))
    noise = torch.cat(draws).double()
    res["noise_std"] = float(noise.std())
    res["noise_mean"] = float(noise.mean())
    res["noise_n"] = int(noise.numel())
    res["noise_hash"] = float((noise * torch.arange(noise.numel(), dtype=torch.float64)).sum())
    pt.close()

    # 2. training: identical final models on every rank, one ledger, the claim
    pt = _private(seed=rank)
    r = train_private(pt, _loss, steps=TRAIN_STEPS)
    flat = torch.cat([p.detach().reshape(-1) for p in pt.original_model.parameters()]).double()
    res["model_hash"] = [
        float(flat.sum()),
        float((flat * torch.arange(flat.numel(), dtype=torch.float64)).sum()),
    ]
    gathered = [torch.zeros_like(flat) for _ in range(w)]
    torch.distributed.all_gather(gathered, flat)
    res["models_identical"] = all(torch.equal(gathered[0], g) for g in gathered)
    res["steps"] = r.steps
    res["epsilon"] = pt.epsilon()
    claim = pt.claim()
    res["claim"] = {
        "kind": str(claim.kind),
        "epsilon": claim.epsilon,
        "delta": claim.delta,
        "unit": claim.unit,
        "noise_seeded": bool(getattr(claim, "noise_seeded", False)),
        "distributed_note": any("distributed: 2 ranks" in n for n in claim.notes),
    }
    res["ledger"] = pt.ledger.to_dict()
    res["sample_rate"] = pt.sample_rate
    res["delta"] = pt.delta
    pt.save_checkpoint(out / "ckpt_2ranks.pt")  # rank 0 writes, all wait
    res["ckpt_exists_after_barrier"] = (out / "ckpt_2ranks.pt").is_file()
    pt.close()

    # 2b. book-keeping clipping on 2 ranks: identical models too
    pt = _private(seed=rank, grad_sample_mode="bookkeeping")
    train_private(pt, _loss, steps=3)
    flat = torch.cat([p.detach().reshape(-1) for p in pt.original_model.parameters()]).double()
    torch.distributed.all_gather(gathered, flat)
    res["bk_models_identical"] = all(torch.equal(gathered[0], g) for g in gathered)
    res["bk_steps"] = pt.steps
    pt.close()

    # 3. resume a single-process checkpoint on 2 ranks: the ledger is restored exactly, then continues
    pt = _private()
    pt.load_checkpoint(out / "ckpt_1rank.pt")
    res["resumed_steps"] = pt.steps
    res["resumed_ledger"] = pt.ledger.to_dict()
    train_private(pt, _loss, steps=2)
    res["steps_after_resume"] = pt.steps
    pt.close()

    # 4. budget: rank 1 is given a smaller target; both ranks stop at the same step
    target = 0.8 if rank == 0 else 0.45  # sigma 3, q 1/8: about 15 vs 4 steps
    pt = _private(noise_multiplier=3.0, target_epsilon=target)
    res["allowed_local"] = float(pt.allowed_steps())
    r = train_private(pt, _loss, steps=50, stop_at_budget=True)
    res["budget_steps"] = r.steps
    res["budget_stopped"] = r.stopped_by_budget
    pt.close()

    # 5. the Hugging Face Trainer path (DPTrainer; the Trainer wraps the model in torch DDP itself)
    res["trainer"] = _trainer(out, rank)

    (out / f"rank{rank}.json").write_text(json.dumps(res))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def _trainer(
    out: Path,
    rank: int,
    per_device: int = 8,
    mode: str | None = None,
    noise_steps: int = 0,
    ddp_backend: str | None = "gloo",
) -> dict:
    """DPTrainer on a tiny BERT, 64 examples, 2 epochs (``per_device`` x world size = the expected global batch).
    ``ddp_backend``: ``None`` lets accelerate pick (gloo on CPU unless torch has MPI); it must be ``None`` in a
    single process (accelerate 1.15 then calls ``get_world_size()`` on a process group that does not exist).
    ``noise_steps``: afterwards, that many zero-gradient steps through the Trainer's DP optimizer (collective;
    their aggregated noise is returned, they are charged to the ledger after it was recorded above)."""
    import torch
    from transformers import TrainingArguments

    from privnlp.mechanisms.training.loop import DPTrainer
    from privnlp.models import tiny_bert_classifier

    class DS(torch.utils.data.Dataset):
        def __init__(self):
            self.x = torch.randint(1, 40, (64, 12), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"input_ids": self.x[i], "labels": int(self.x[i, 0] % 2)}

    args = TrainingArguments(
        output_dir=str(out / "hf"),
        per_device_train_batch_size=per_device,
        num_train_epochs=2,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        ddp_backend=ddp_backend,
    )
    model = tiny_bert_classifier(
        40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
        seed=rank,
    )  # rank 0's init is broadcast
    dp = dict(noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp")
    if mode:
        dp["grad_sample_mode"] = mode
    t = DPTrainer(model=model, args=args, train_dataset=DS(), dp=dp)
    t.train()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    c = t.private.claim()
    res = {
        "steps": t.private.steps,
        "epsilon": t.private.epsilon(),
        "ledger": t.private.ledger.to_dict(),
        "expected_batch_size": t.private.expected_batch_size,
        "sample_rate": t.private.sample_rate,
        "wrapped": type(t.model_wrapped).__name__,
        "mode": t.private.grad_sample_mode,
        "model_hash": [
            float(flat.sum()),
            float((flat * torch.arange(flat.numel(), dtype=torch.float64)).sum()),
        ],
        "distributed_note": any("distributed: 2 ranks" in n for n in c.notes),
        "claim": {
            "kind": str(c.kind),
            "epsilon": c.epsilon,
            "delta": c.delta,
            "unit": c.unit,
            "noise_seeded": bool(getattr(c, "noise_seeded", False)),
        },
    }
    if noise_steps:
        draws = []
        for _ in range(noise_steps):
            t.private.optimizer.zero_grad(set_to_none=True)
            t.private.noise_only_step()
            draws.append(torch.cat([p.grad.reshape(-1) for p in t.private.optimizer.params]))
        noise = torch.cat(draws).double()
        res.update(
            noise_std=float(noise.std()),
            noise_mean=float(noise.mean()),
            noise_n=int(noise.numel()),
            noise_hash=float((noise * torch.arange(noise.numel(), dtype=torch.float64)).sum()),
        )
    return res


def _trainer_signal(out: Path, rank: int, mode: str) -> float:
    """One DP-SGD step of DPTrainer under the Trainer's DDP on fixed per-rank batches (6 examples each), SGD lr 1,
    noise 1e-4: returns the relative distance of the update from the single-process clipped sum of the union batch
    over the expected global batch (computed example by example on rank 0; other ranks return 0). Checks that
    the Trainer's own DDP all-reduce does not double or halve the signal (ghost runs a second backward through
    DDP)."""
    import torch
    from transformers import TrainingArguments

    from privnlp.mechanisms.training.loop import DPTrainer
    from privnlp.models import tiny_bert_classifier

    def build():
        return tiny_bert_classifier(
            40,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=16,
            seed=0,
        )

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return {"input_ids": torch.full((12,), 1 + i % 39), "labels": i % 2}

    args = TrainingArguments(
        output_dir=str(out / f"sig_{mode}"),
        per_device_train_batch_size=8,
        max_steps=1,
        learning_rate=1.0,
        optim="sgd",
        weight_decay=0.0,
        lr_scheduler_type="constant",
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    model = build()
    t = DPTrainer(
        model=model,
        args=args,
        train_dataset=DS(),
        dp=dict(noise_multiplier=1e-4, max_grad_norm=1.0, accountant="rdp", grad_sample_mode=mode),
    )
    t.train()  # one step: the Trainer builds its DDP wrapper and the DP optimizer
    xs = torch.randint(1, 40, (2, 6, 12), generator=torch.Generator().manual_seed(123))
    ys = xs[:, :, 0] % 2
    params = [p for p in model.parameters() if p.requires_grad]
    ref = build()
    ref.load_state_dict({k: v.detach().clone() for k, v in model.state_dict().items()})
    w0 = [p.detach().clone() for p in params]
    t.private.optimizer.zero_grad(set_to_none=True)
    logits = t.model_wrapped(input_ids=xs[rank]).logits
    t.private.loss(torch.nn.functional.cross_entropy(logits, ys[rank], reduction="none")).backward()
    t.private.optimizer.step()
    upd = torch.cat([(a - p.detach()).reshape(-1) for a, p in zip(w0, params)])
    if rank != 0:
        return 0.0
    rp = [p for p in ref.parameters() if p.requires_grad]
    want = torch.zeros_like(upd)
    for r in range(2):
        for i in range(6):
            ref.zero_grad()
            torch.nn.functional.cross_entropy(
                ref(input_ids=xs[r, i : i + 1]).logits, ys[r, i : i + 1]
            ).backward()
            g = torch.cat([p.grad.reshape(-1) for p in rp])
            want += g * min(1.0, 1.0 / float(g.norm()))
    want /= t.private.expected_batch_size
    return float((upd - want).norm() / want.norm())


def _trainer_worker(out: Path) -> None:
    """Under ``accelerate launch``: the Trainer alone (it initializes the process group itself, through accelerate's
    PartialState, from the WORLD_SIZE / RANK / MASTER_* that accelerate's launcher -- torch.distributed.run -- set)."""
    import torch

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    res = {
        "trainer": _trainer(
            out, rank, noise_steps=ZERO_STEPS, ddp_backend=None
        ),  # as in the README's train_hf.py
        "launcher_env": {
            k: os.environ.get(k) for k in ("WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_MIXED_PRECISION")
        },
        "world_size": torch.distributed.get_world_size(),
        "backend": torch.distributed.get_backend(),
        "ghost_signal_error": _trainer_signal(out, rank, "ghost"),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(res))


# ----------------------------------------------------------------------------- the tests
def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = (
        str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    )
    return env


def _free_port() -> int:
    """A port free on the loopback now (the OS picks it): a fixed port per test process was reused by the next
    launch of the same worker while the last one's socket could still hold it (a launch that exited 1 in CI)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _torchrun(
    args: list[str], cwd: Path, timeout: float
) -> tuple[subprocess.CompletedProcess, float]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        *args,
    ]
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    return p, time.perf_counter() - t


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    import torch

    from privnlp.mechanisms.training import train_private

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("ddp")
    # the single-process reference run (same global batch, steps, sigma): epsilon + a checkpoint for step 3
    pt = _private()
    train_private(pt, _loss, steps=TRAIN_STEPS)
    ref = {
        "epsilon": pt.epsilon(),
        "ledger": pt.ledger.to_dict(),
        "expected_batch_size": pt.expected_batch_size,
    }
    pt.save_checkpoint(out / "ckpt_1rank.pt")
    pt.close()
    p, wall = _torchrun([str(Path(__file__).resolve()), "--worker", str(out)], out, LAUNCH_TIMEOUT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return {"ranks": ranks, "ref": ref, "out": out, "wall": wall}


@pytest.mark.integration
def test_two_ranks_launch_is_bounded(two_ranks):
    assert two_ranks["wall"] < LAUNCH_TIMEOUT
    assert [r["world_size"] for r in two_ranks["ranks"]] == [2, 2]


@pytest.mark.integration
def test_distributed_refuses_a_noise_seed(two_ranks):
    assert all(r["seed_refused"] for r in two_ranks["ranks"])


@pytest.mark.integration
def test_aggregated_noise_std_is_sigma_c_over_expected_batch(two_ranks):
    r0, r1 = two_ranks["ranks"]
    b = r0["expected_batch_size"]
    assert b == BATCH == two_ranks["ref"]["expected_batch_size"]
    want = SIGMA * C / b
    assert r0["noise_hash"] == r1["noise_hash"]  # every rank holds the same all-reduced noise
    assert abs(r0["noise_std"] - want) <= NOISE_RTOL * want, (r0["noise_std"], want)
    # noise added once per rank at sigma*C/sqrt(2): opacus' rank-0-only or sigma*C per rank would give
    # the same / sqrt(2)-times larger std; per-rank sigma*C is > 40% off and is caught here
    assert abs(r0["noise_mean"]) <= 6 * want / math.sqrt(r0["noise_n"])


@pytest.mark.integration
def test_final_models_of_both_ranks_are_identical(two_ranks):
    r0, r1 = two_ranks["ranks"]
    assert r0["models_identical"] and r1["models_identical"]
    assert r0["model_hash"] == r1["model_hash"]
    assert r0["steps"] == r1["steps"] == TRAIN_STEPS
    assert (
        r0["bk_models_identical"] and r0["bk_steps"] == r1["bk_steps"] == 3
    )  # grad_sample_mode="bookkeeping"


@pytest.mark.integration
def test_ledger_epsilon_equals_single_process(two_ranks):
    ref = two_ranks["ref"]
    for r in two_ranks["ranks"]:
        assert r["ledger"] == ref["ledger"]
        assert r["epsilon"] == pytest.approx(ref["epsilon"], rel=1e-12)
        c = r["claim"]
        assert c["epsilon"] == pytest.approx(ref["epsilon"], rel=1e-12)
        assert c["unit"] == "example" and not c["noise_seeded"] and c["distributed_note"]


@pytest.mark.integration
def test_checkpoints_move_between_world_sizes(two_ranks):
    import torch

    ref = two_ranks["ref"]
    for r in two_ranks["ranks"]:  # 1 rank -> 2 ranks
        assert r["ckpt_exists_after_barrier"]
        assert r["resumed_steps"] == TRAIN_STEPS and r["resumed_ledger"] == ref["ledger"]
        assert r["steps_after_resume"] == TRAIN_STEPS + 2
    # 2 ranks -> 1 rank
    pt = _private()
    pt.load_checkpoint(two_ranks["out"] / "ckpt_2ranks.pt")
    assert pt.ledger.to_dict() == two_ranks["ranks"][0]["ledger"]
    assert pt.epsilon() == pytest.approx(two_ranks["ranks"][0]["epsilon"], rel=1e-12)
    flat = torch.cat([p.detach().reshape(-1) for p in pt.original_model.parameters()]).double()
    assert float(flat.sum()) == two_ranks["ranks"][0]["model_hash"][0]
    pt.close()


@pytest.mark.integration
def test_budget_refusal_stops_every_rank_together(two_ranks):
    r0, r1 = two_ranks["ranks"]
    assert 0 < r1["allowed_local"] < r0["allowed_local"]  # the ranks disagree locally...
    assert (
        r0["budget_steps"] == r1["budget_steps"] == int(r1["allowed_local"])
    )  # ...and stop together
    assert r0["budget_stopped"] and r1["budget_stopped"]


def test_distributed_true_without_a_process_group_is_refused():
    from privnlp.core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="distributed=True"):
        _private(distributed=True)


@pytest.mark.integration
def test_torchrun_cli_train(tmp_path):
    out = tmp_path / "run"
    p, wall = _torchrun(
        [
            "-m",
            "privnlp.cli.main",
            "train",
            "--noise-multiplier",
            "1.0",
            "--steps",
            "3",
            "--batch-size",
            "16",
            "--vocab-size",
            "300",
            "--max-length",
            "24",
            "--out",
            str(out),
        ],
        tmp_path,
        LAUNCH_TIMEOUT,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    assert wall < LAUNCH_TIMEOUT
    claim = json.loads((out / "claim.json").read_text())
    assert claim["extra"]["steps"] == 3
    assert any("distributed: 2 ranks" in n for n in claim["notes"])
    assert (out / "checkpoint.pt").is_file()
    assert p.stdout.count("DP-SGD performed over") == 1  # rank 0 prints the statement once


@pytest.mark.integration
def test_hf_trainer_under_torchrun(two_ranks):
    """DPTrainer under torchrun: global expected batch = per_device (8) x 2 ranks, q = 16/64, 2 epochs = 8 steps,
    one ledger, identical models, the Trainer's own DDP wrapper around the model."""
    from privnlp.accounting import epsilon_for

    t0, t1 = (r["trainer"] for r in two_ranks["ranks"])
    assert t0["expected_batch_size"] == 16 and t0["sample_rate"] == pytest.approx(0.25)
    assert t0["steps"] == t1["steps"] == 8
    assert t0["model_hash"] == t1["model_hash"]
    assert t0["ledger"] == t1["ledger"] and t0["wrapped"] == "DistributedDataParallel"
    assert t0["distributed_note"]
    # the single-process epsilon of the same (sigma, q, steps)
    from privnlp.accounting import default_delta

    want = epsilon_for(((1.0, 0.25, 8),), default_delta(64), "rdp").epsilon
    assert t0["epsilon"] == pytest.approx(want, rel=1e-9)


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker(Path(sys.argv[sys.argv.index("--worker") + 1]))
elif __name__ == "__main__" and "--trainer-worker" in sys.argv:
    _trainer_worker(Path(sys.argv[sys.argv.index("--trainer-worker") + 1]))


# ----------------------------------------------------------------------------- accelerate launch (HF Trainer)
ACCELERATE_TIMEOUT = (
    150  # 2 processes importing transformers + accelerate's launcher, on 2 loaded cores
)


def _accelerate_launch(
    args: list[str], cwd: Path, timeout: float
) -> tuple[subprocess.CompletedProcess, float]:
    """``accelerate launch --multi_gpu --num_processes 2`` on CPU: accelerate's multi-process launcher is
    torch.distributed.run whatever the device (``--cpu`` instead starts ONE process unless an MPI hostfile is
    given), and the Trainer (``use_cpu=True, ddp_backend="gloo"``) builds a gloo group from its environment."""
    exe = Path(sys.executable).parent / "accelerate"
    launcher = (
        [str(exe), "launch"]
        if exe.exists()
        else [sys.executable, "-m", "accelerate.commands.launch"]
    )
    cmd = [
        *launcher,
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "0",
        *args,
    ]
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    return p, time.perf_counter() - t


@pytest.mark.integration
def test_dp_trainer_under_accelerate_launch(tmp_path):
    """DPTrainer with DDP under ``accelerate launch`` on 2 CPU processes (gloo, loopback): the ledger and the claim
    equal the single-process DPTrainer's with the same expected global batch (16), both ranks end with the
    identical model, and the aggregated noise of zero-gradient steps has std sigma*C/16."""
    pytest.importorskip("accelerate")
    import torch

    torch.set_num_threads(1)
    ref = _trainer(
        tmp_path / "single", 0, per_device=16, ddp_backend=None
    )  # one process: batch 16 = the global one
    assert ref["expected_batch_size"] == 16 and ref["steps"] == 8
    out = tmp_path / "acc"
    out.mkdir()
    p, wall = _accelerate_launch(
        [str(Path(__file__).resolve()), "--trainer-worker", str(out)], out, ACCELERATE_TIMEOUT
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    assert wall < ACCELERATE_TIMEOUT
    r0, r1 = (json.loads((out / f"rank{r}.json").read_text()) for r in range(2))
    assert r0["world_size"] == r1["world_size"] == 2 and r0["backend"] == "gloo"
    t0, t1 = r0["trainer"], r1["trainer"]
    assert t0["wrapped"] == "DistributedDataParallel" and t0["distributed_note"]
    assert t0["expected_batch_size"] == 16 and t0["sample_rate"] == pytest.approx(
        ref["sample_rate"]
    )
    assert t0["steps"] == t1["steps"] == ref["steps"] == 8
    assert t0["ledger"] == t1["ledger"] == ref["ledger"]
    assert t0["epsilon"] == pytest.approx(ref["epsilon"], rel=1e-12)
    assert t0["claim"] == t1["claim"] == ref["claim"] and not t0["claim"]["noise_seeded"]
    assert t0["model_hash"] == t1["model_hash"]
    want = SIGMA * C / 16
    assert t0["noise_hash"] == t1["noise_hash"]
    assert abs(t0["noise_std"] - want) <= NOISE_RTOL * want, (t0["noise_std"], want)
    assert abs(t0["noise_mean"]) <= 6 * want / math.sqrt(t0["noise_n"])
    # ghost clipping (what `auto` takes under DDP for large models): the update of fixed per-rank batches is the
    # single-process clipped sum of their union / 16 (noise 1e-4; a doubled or halved signal would be 100% / 50%)
    assert r0["ghost_signal_error"] < 0.02, r0["ghost_signal_error"]
