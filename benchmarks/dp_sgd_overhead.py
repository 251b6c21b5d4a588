"""DP-SGD step-time and memory overhead vs plain training on the tiny GPT-2 LM and BERT classifier.

Both runs happen in this one process on the same data; prints absolute step times, the ratio
DP / non-DP (target <= 2.0x with word embeddings frozen), and peak memory (CUDA peak allocated on
GPU; on CPU the process' peak RSS growth, a coarse number). Paper:
``../shared/papers/dp-bert-and-dp-wordpiece.txt``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dp_sgd_overhead.py [--steps 20] [--batch 32] [--device cpu]
"""
from __future__ import annotations

import argparse
import resource
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from privnlp.mechanisms.training import make_private
from privnlp.mechanisms.training.dp_sgd import per_sample_classification_loss, per_sample_lm_loss
from privnlp.mechanisms.training.embedding import freeze_embeddings
from privnlp.models import tiny_bert_classifier, tiny_gpt2

V, T = 1000, 64


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _build(kind: str, device: str):
    if kind == "gpt2":
        m = tiny_gpt2(V, n_layer=2, n_embd=64, n_head=2, n_positions=T, seed=0)
    else:
        m = tiny_bert_classifier(V, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                 max_position_embeddings=T, seed=0)
    return m.to(device)


def _loss(kind, model, x, y):
    if kind == "gpt2":
        pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0).repeat(x.shape[0], 1)
        return per_sample_lm_loss(model(input_ids=x, position_ids=pos).logits, x)
    return per_sample_classification_loss(model(input_ids=x).logits, y)


def _time(fn, steps: int, device: str) -> float:
    fn()  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps


def bench(kind: str, *, frozen: bool, steps: int, batch: int, device: str, mode: str = "auto") -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, V, (batch * 8, T), generator=g)
    y = torch.randint(0, 2, (batch * 8,), generator=g)
    xb, yb = x[:batch].to(device), y[:batch].to(device)

    # baseline
    m = _build(kind, device)
    if frozen:
        freeze_embeddings(m)
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4)

    def plain():
        opt.zero_grad()
        _loss(kind, m, xb, yb).mean().backward()
        opt.step()

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rss0 = _rss_mb()
    t_plain = _time(plain, steps, device)
    mem_plain = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else _rss_mb() - rss0

    # DP-SGD (fixed batch fed directly so both runs see the same batch size)
    m2 = _build(kind, device)
    if frozen:
        freeze_embeddings(m2)
    opt2 = torch.optim.AdamW([p for p in m2.parameters() if p.requires_grad], lr=1e-4)
    dl = DataLoader(TensorDataset(x, y), batch_size=batch)
    pt = make_private(m2, opt2, dl, noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp",
                      tied_embeddings="freeze" if frozen else "untie", grad_sample_mode=mode, rng=0)

    def private():
        pt.optimizer.zero_grad()
        pt.loss(_loss(kind, pt.model, xb, yb)).backward()
        pt.optimizer.step()

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rss1 = _rss_mb()
    t_dp = _time(private, steps, device)
    mem_dp = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else _rss_mb() - rss1
    pt.close()
    return {"model": kind, "frozen_embeddings": frozen, "mode": pt.grad_sample_mode, "plain_ms": 1e3 * t_plain,
            "dp_ms": 1e3 * t_dp, "ratio": t_dp / t_plain, "mem_plain_mb": mem_plain, "mem_dp_mb": mem_dp}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    print(f"device={a.device} torch={torch.__version__} threads={torch.get_num_threads()} batch={a.batch} "
          f"seq_len={T} vocab={V} steps={a.steps}")
    print(f"{'model':6} {'emb':7} {'mode':6} {'plain ms':>9} {'DP ms':>9} {'ratio':>6} {'mem plain':>10} {'mem DP':>8}"
          + ("  (MiB, CUDA peak)" if a.device == "cuda" else "  (MiB, peak-RSS growth)"))
    for kind, mode in (("gpt2", "auto"), ("bert", "auto"), ("bert", "ghost")):   # auto = hooks for these sizes
        for frozen in (True, False):
            r = bench(kind, frozen=frozen, steps=a.steps, batch=a.batch, device=a.device, mode=mode)
            print(f"{r['model']:6} {'frozen' if frozen else 'trained':7} {r['mode']:6} {r['plain_ms']:9.1f} "
                  f"{r['dp_ms']:9.1f} {r['ratio']:5.2f}x {r['mem_plain_mb']:10.1f} {r['mem_dp_mb']:8.1f}")


if __name__ == "__main__":
    main()
