"""Distributed DP-SGD scaling: samples/s at 1 and 2 processes, and DP vs non-private DDP at 2 processes.

Issue #20 part 4. Every configuration trains the same tiny BERT classifier on the same data with the same
global (expected) batch: DP-SGD in one process, DP-SGD on W processes (privnlp's distributed
``make_private``: per-rank Poisson sampling at the global rate, per-rank clipping, split secure noise, one
flat all-reduce per step), and non-private ``torch.nn.parallel.DistributedDataParallel`` on W processes
(fixed batch of B/W per rank). Processes are started with ``torch.multiprocessing`` and talk over gloo on
loopback (CPU). Prints samples/s and the ratios, with the load average before and after (on a shared 2-core
machine the W=2 numbers are bounded by the cores and noisy). Paper: Abadi et al. 2016;
``../shared/papers/dp-bert-and-dp-wordpiece.txt``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dp_ddp_scaling.py [--steps 10] [--batch 256] [--world 2]

Multi-node: the library code is the same; launch the training script (or ``-m privnlp.cli.main train``) with
``torchrun --nnodes 2 --nproc_per_node G --rdzv_backend c10d --rdzv_endpoint HOST:29400 ...`` on every node.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from privnlp.mechanisms.training import make_private
from privnlp.mechanisms.training.dp_sgd import per_sample_classification_loss
from privnlp.models import tiny_bert_classifier

V, T, N = 500, 32, 2048


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, V, (N, T), generator=g)
    y = torch.randint(0, 2, (N,), generator=g)
    return x, y


def _model():

    return tiny_bert_classifier(
        V,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=T,
        seed=0,
    )


def _loss(m, x, y):

    return per_sample_classification_loss(m(input_ids=x).logits, y)


def run_dp(world: int, rank: int, steps: int, batch: int, mode: str) -> tuple[float, int]:

    x, y = _data()
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    pt = make_private(
        m,
        opt,
        DataLoader(TensorDataset(x, y), batch_size=batch),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        accountant="rdp",
        grad_sample_mode=mode,
        dedup=False,
        distributed=world > 1,
    )
    it = iter(pt.data_loader)

    def step() -> int:
        nonlocal it
        try:
            xb, yb = next(it)
        except StopIteration:
            it = iter(pt.data_loader)
            xb, yb = next(it)
        pt.optimizer.zero_grad(set_to_none=True)
        if len(xb) == 0:
            pt.noise_only_step()
        else:
            pt.loss(_loss(pt.model, xb, yb)).backward()
            pt.optimizer.step()
        return len(xb)

    step()  # warm-up
    if world > 1:
        dist.barrier()
    t = time.perf_counter()
    n = sum(step() for _ in range(steps))
    if world > 1:
        tot = torch.tensor([n])
        dist.all_reduce(tot)
        n = int(tot)
        dist.barrier()
    dt = time.perf_counter() - t
    pt.close()
    return dt, n


def run_ddp(world: int, rank: int, steps: int, batch: int) -> tuple[float, int]:

    x, y = _data()
    local = batch // world
    m = DDP(_model()) if world > 1 else _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)

    def step() -> int:
        idx = torch.randint(0, N, (local,), generator=g)
        opt.zero_grad(set_to_none=True)
        _loss(m, x[idx], y[idx]).mean().backward()
        opt.step()
        return local

    step()
    if world > 1:
        dist.barrier()
    t = time.perf_counter()
    n = sum(step() for _ in range(steps)) * world
    if world > 1:
        dist.barrier()
    return time.perf_counter() - t, n


def _worker(
    rank: int, world: int, port: int, kind: str, steps: int, batch: int, mode: str, q
) -> None:

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        dt, n = (
            run_dp(world, rank, steps, batch, mode)
            if kind == "dp"
            else run_ddp(world, rank, steps, batch)
        )
        if rank == 0:
            q.put((dt, n))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(kind: str, world: int, steps: int, batch: int, mode: str = "hooks") -> float:
    """Samples per second (all ranks together)."""
    if world == 1:
        torch.set_num_threads(1)
        dt, n = run_dp(1, 0, steps, batch, mode) if kind == "dp" else run_ddp(1, 0, steps, batch)
        return n / dt
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(r, world, PORT, kind, steps, batch, mode, q))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    dt, n = q.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return n / dt


PORT = _free_port()


def main() -> None:
    global PORT

    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=256, help="global (expected) batch size")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--mode", default="hooks", help="grad_sample_mode of the DP runs")
    a = ap.parse_args()
    load0 = os.getloadavg()
    print(
        f"tiny BERT (hidden 64, 2 layers), N={N}, seq_len={T}, global batch {a.batch}, {a.steps} steps, "
        f"gloo on loopback, 1 thread per process, cores={os.cpu_count()}, mode={a.mode}"
    )
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    dp1 = measure("dp", 1, a.steps, a.batch, a.mode)
    PORT = _free_port()
    dpw = measure("dp", a.world, a.steps, a.batch, a.mode)
    PORT = _free_port()
    ddp1 = measure("ddp", 1, a.steps, a.batch)
    PORT = _free_port()
    ddpw = measure("ddp", a.world, a.steps, a.batch)
    load1 = os.getloadavg()
    print(f"{'configuration':34} {'samples/s':>10}")
    print(f"{'DP-SGD, 1 process':34} {dp1:10.1f}")
    print(f"{'DP-SGD, %d processes' % a.world:34} {dpw:10.1f}")
    print(f"{'non-private, 1 process':34} {ddp1:10.1f}")
    print(f"{'non-private DDP, %d processes' % a.world:34} {ddpw:10.1f}")
    print(
        f"DP-SGD scaling {a.world} vs 1 process: {dpw / dp1:.2f}x (ideal {a.world}x; bounded by {os.cpu_count()} "
        "shared cores)"
    )
    print(
        f"DP vs non-private DDP at {a.world} processes: {dpw / ddpw:.2f}x the samples/s "
        f"(= {ddpw / dpw:.2f}x the time)"
    )
    print(f"non-private scaling {a.world} vs 1 process: {ddpw / ddp1:.2f}x")
    print(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
