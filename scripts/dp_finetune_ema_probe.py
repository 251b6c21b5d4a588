"""Issue #29 item 6 on a CPU: do a decaying learning rate and an average of the weights help DP fine-tuning?

Both are free in privacy: the schedule is fixed before training (data-independent) and an exponential moving
average (EMA) of the iterates is post-processing of the released noisy iterates. On the top-layer proxy of
``scripts/dp_finetune_prior_probe.py`` (the last MiniLM layer + unit-norm mean pooling + the head started from the
public section descriptions, frozen lower layers run once, 32 tokens), at the full-size regime (B 4,096, 20 epochs,
C 0.1, AdamW 1e-3, seeded noise): a constant and a linearly decaying learning rate, each with the final iterate and
EMAs of decay 0.8 / 0.9 / 0.95 (``torch.optim.swa_utils``' rule: the first
iterate copied, then ``d * ema + (1 - d) * w``), all read on validation only; test is
printed for the one chosen on validation at the end.

    OMP_NUM_THREADS=2 .venv/bin/python scripts/dp_finetune_ema_probe.py --epsilon 8
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from privnlp.mechanisms.training import make_private, train_private
from privnlp.mechanisms.training.tasks import debian_sections_task

_spec = importlib.util.spec_from_file_location(
    "probe2", Path(__file__).with_name("dp_finetune_prior_probe.py")
)
probe2 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe2)

DECAYS = (0.8, 0.9, 0.95)


def run(
    f: dict, protos: torch.Tensor, eps: float, schedule: str, B: int, E: float, lr: float, C: float
):
    torch.manual_seed(0)
    model = probe2.CosTop(f["top_layer"], protos)
    tr = f["train"]
    ds = TensorDataset(tr["h"], tr["mask"], tr["y"])

    def loss(m, b):
        return torch.nn.functional.cross_entropy(m(b[0], b[1]), b[2], reduction="none")

    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    pt = make_private(
        model,
        opt,
        DataLoader(ds, batch_size=B),
        target_epsilon=eps,
        epochs=E,
        max_grad_norm=C,
        rng=0,
    )
    total = max(1, round(E * len(pt.data_loader)))
    params = list(pt.original_model.parameters())
    emas = {d: [p.detach().clone() for p in params] for d in DECAYS}

    def on_step(p, _loss):
        t = p.steps
        if schedule == "linear":
            for g in p.optimizer.param_groups:
                g["lr"] = lr * max(0.0, 1.0 - t / total)
        with torch.no_grad():
            for d, shadow in emas.items():
                k = 0.0 if t == 1 else d
                for s, q in zip(shadow, params):
                    s.mul_(k).add_(q.detach(), alpha=1.0 - k)

    t0 = time.perf_counter()
    res = train_private(
        pt, loss, steps=total, stop_at_budget=True, max_physical_batch_size=256, on_step=on_step
    )
    final = pt.original_model
    rows = []
    for name in ["final", *DECAYS]:
        m = final if name == "final" else copy.deepcopy(final)
        if name != "final":
            with torch.no_grad():
                for q, s in zip(m.parameters(), emas[name]):
                    q.copy_(s)
        v, te = probe2.acc(m, f["validation"]), probe2.acc(m, f["test"])
        desc = (
            f"top1/prior eps {eps} {schedule} B {B} E {E:g} lr {lr:g} C {C:g} weights "
            f"{'final' if name == 'final' else f'ema {name}'}: validation {v:.3f}, "
            f"({res.claim.epsilon:.2f}, {res.claim.delta:.2g})-DP, sigma {pt.noise_multiplier:.2f}, "
            f"{res.steps} steps [{time.perf_counter() - t0:.0f} s]"
        )
        print(desc, flush=True)
        rows.append((v, te, desc))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, default=8.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--schedules", nargs="+", default=["constant", "linear"])
    args = ap.parse_args()
    f = probe2.features(32, 1)
    protos = probe2.prototypes(debian_sections_task().label_names)
    rows = []
    for s in args.schedules:
        rows += run(f, protos, args.epsilon, s, 4096, 20, args.lr, 0.1)
    best = max(rows, key=lambda r: r[0])
    print(f"CHOSEN on validation (eps {args.epsilon}) -> {best[2]}; test {best[1]:.3f}", flush=True)


if __name__ == "__main__":
    main()
