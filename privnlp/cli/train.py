"""`privnlp train`: train the bundled tiny GPT-2 LM privately and print/save the privacy statement.

``privnlp train [OPTIONS]`` runs directly (a callback with ``invoke_without_command=True``);
``privnlp train --help`` lists the options. Heavy imports happen inside the command.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import typer

from privnlp.accounting.duplicates import DuplicateExamplesWarning, normalize_text
from privnlp.core.claims import PrivacyClaim
from privnlp.core.errors import InvalidArgument, PrivnlpError
from privnlp.core.report import atomic_write_text
from privnlp.data import generate_corpus, load_texts
from privnlp.mechanisms import get

app = typer.Typer(
    help="Train a bundled tiny model privately (DP-SGD, frozen embeddings, update transforms).",
    invoke_without_command=True,
)

DEFENSES = ("dp_sgd", "frozen_embeddings", "none")
#: ``privnlp train --model`` without --epsilon / --noise-multiplier: DP at this epsilon (the recipe's target)
DEFAULT_FINE_TUNE_EPSILON = 8.0
#: the option that sets each FineTuneRecipe field: the recipe's range errors are reported under these names
RECIPE_FLAGS = {
    "batch_size": "--batch-size",
    "epochs": "--epochs",
    "max_grad_norm": "--max-grad-norm",
    "lr": "--lr",
    "max_length": "--max-length",
    "physical_batch_size": "--physical-batch-size",
    "head": "--head",
    "schedule": "--lr-schedule",
    "ema": "--ema",
    "lora_rank": "--lora-rank",
    "dropout": "--dropout",
}


@app.callback(invoke_without_command=True)
def train(
    ctx: typer.Context,
    data: Path | None = typer.Option(
        None,
        "--data",
        help="Text file (.txt: one text per line) or .jsonl/.csv; "
        "default: the bundled synthetic private corpus.",
    ),
    field: str | None = typer.Option(
        None, "--field", help="Field holding the text in JSONL/CSV (default: text)."
    ),
    model_dir: Path | None = typer.Option(
        None,
        "--model",
        help="Fine-tune this local pretrained checkpoint (a folder written by save_pretrained: config.json, "
        "weights, tokenizer) instead of the bundled tiny GPT-2: a classifier with --label-field, else a causal "
        "LM. Defaults then follow the DP fine-tuning recipe (see --help of each flag and the docs).",
    ),
    label_field: str | None = typer.Option(
        None,
        "--label-field",
        help="With --model: the JSONL key / CSV column of the label (fine-tunes a sequence classifier).",
    ),
    text_field: str | None = typer.Option(
        None, "--text-field", help="The JSONL key / CSV column of the text (same as --field)."
    ),
    baseline: bool | None = typer.Option(
        None,
        "--baseline/--no-baseline",
        help="With --model and DP (the default): also fine-tune a fresh copy without DP, same recipe, and "
        "print its held-out metric beside the DP one. On by default with --model.",
    ),
    device: str = typer.Option("cpu", "--device", help="With --model: cpu or cuda."),
    head: str | None = typer.Option(
        None,
        "--head",
        help="With --model and --label-field: pooler (Hugging Face's head on [CLS], default) or mean (mean "
        "pooling and a cosine head, how sentence encoders were trained).",
    ),
    label_texts: Path | None = typer.Option(
        None,
        "--label-texts",
        help="With --head mean: a JSON file {label: public description} (one per class, written without "
        "looking at the data); the head starts as the encoder's zero-shot classifier over them.",
    ),
    lr_schedule: str | None = typer.Option(
        None,
        "--lr-schedule",
        help="With --model: constant (default) or linear (down to 0 at the last step). No privacy cost.",
    ),
    ema: float | None = typer.Option(
        None,
        "--ema",
        help="With --model: decay in [0, 1) of an average of the weights over the steps, the model kept and "
        "saved (0: the last step's, default). Post-processing: no privacy cost.",
    ),
    lora_rank: int | None = typer.Option(
        None,
        "--lora-rank",
        help="With --model: DP-LoRA, rank-r adapters on every linear layer but the head (the head trained in "
        "full, the rest frozen; saved merged), r in [1, 4096]; 0: full fine-tuning (default). Needs peft.",
    ),
    dropout: float | None = typer.Option(
        None,
        "--dropout",
        help="With --model: every dropout of the model (embeddings, attention, hidden, head) at this rate in "
        "[0, 1) for the run; default: the checkpoint's own rates. No privacy cost.",
    ),
    defense: str = typer.Option("dp_sgd", "--defense", help=f"One of {', '.join(DEFENSES)}."),
    epsilon: float | None = typer.Option(
        None,
        "--epsilon",
        help="Target epsilon (hard budget; calibrates sigma unless --noise-multiplier is given).",
    ),
    noise_multiplier: float | None = typer.Option(
        None, "--noise-multiplier", help="DP-SGD noise multiplier sigma."
    ),
    max_grad_norm: float | None = typer.Option(
        None,
        "--max-grad-norm",
        help="Per-example clipping norm C (> 0; default 1.0, with --model 0.1).",
    ),
    delta: float | None = typer.Option(
        None, "--delta", help="Delta (default min(1e-5, N^-1.1); must be < 1/N)."
    ),
    accountant: str = typer.Option("prv", "--accountant", help="prv (default) or rdp."),
    freeze_embeddings: bool = typer.Option(
        False,
        "--freeze-embeddings",
        help="Freeze the word embeddings (with --model also the position embeddings: they stay the "
        "checkpoint's, so DP noises fewer parameters).",
    ),
    epochs: float | None = typer.Option(
        None, "--epochs", help="Passes over the data (> 0; default 1, with --model 20)."
    ),
    batch_size: int | None = typer.Option(
        None,
        "--batch-size",
        min=1,
        help="Expected (logical) batch size (default 16; with --model 4096, at most a quarter of the data).",
    ),
    physical_batch_size: int | None = typer.Option(
        None, "--physical-batch-size", min=1, help="Split logical batches (BatchMemoryManager)."
    ),
    lr: float | None = typer.Option(
        None, "--lr", help="Learning rate (AdamW; default 5e-3, with --model 1e-3)."
    ),
    vocab_size: int | None = typer.Option(
        None,
        "--vocab-size",
        min=257,
        help="BPE vocabulary size of the bundled model (default 500).",
    ),
    max_length: int | None = typer.Option(
        None, "--max-length", min=4, help="Max tokens per text (default 48, with --model 128)."
    ),
    seed: int = typer.Option(
        0,
        "--seed",
        min=0,
        help="Seed of the non-private randomness (split, tokenizer, model "
        "init). The DP noise and Poisson masks do NOT use it (see --noise-seed).",
    ),
    noise_seed: int | None = typer.Option(
        None,
        "--noise-seed",
        min=0,
        help="Seed the DP noise and Poisson masks "
        "for a reproducible simulation (the claim then says 'noise seeded: not "
        "private against anyone who knows the seed'). Default: OS entropy.",
    ),
    dedup: bool = typer.Option(
        False,
        "--dedup",
        help="Train on one copy of each duplicated text (exact or equal "
        "after normalising whitespace/case). Without it duplicates are counted and the group "
        "epsilon of the most repeated text is reported.",
    ),
    public_dataset_size: int | None = typer.Option(
        None,
        "--public-dataset-size",
        min=1,
        help="A public upper bound on the number of training texts: the sampling rate becomes "
        "--batch-size / this bound (never the private count) and the claim holds for add/remove "
        "neighbours. Default: rate and normaliser from the data's size (zero-out claim, N public).",
    ),
    steps_opt: int | None = typer.Option(
        None, "--steps", min=1, help="Total logical steps (default: epochs x batches per epoch)."
    ),
    resume: Path | None = typer.Option(
        None,
        "--resume",
        help="Resume from a checkpoint.pt written by an earlier "
        "run with the same data/options: continues to the planned total of steps; "
        "generator states are restored (seeded) or fresh (secure): noise is never "
        "replayed.",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Folder for claim.json, privacy_statement.txt, "
        "utility.json and checkpoint.pt (each written atomically).",
    ),
) -> None:
    """Train the tiny GPT-2 LM on TEXTS with DEFENSE; print the TF-Privacy-style statement and utility."""
    if ctx.invoked_subcommand is not None:  # pragma: no cover
        return
    try:
        if defense not in DEFENSES:
            raise InvalidArgument(f"--defense must be one of {DEFENSES}; got {defense!r}")
        if epochs is not None and not epochs > 0:
            raise InvalidArgument(f"--epochs must be > 0; got {epochs}")
        if (
            defense != "dp_sgd"
        ):  # a flag that cannot apply is an error, never silently ignored (issue #29)
            given = [
                flag
                for flag, v in (
                    ("--epsilon", epsilon),
                    ("--noise-multiplier", noise_multiplier),
                    ("--noise-seed", noise_seed),
                    ("--delta", delta),
                    ("--physical-batch-size", physical_batch_size),
                    ("--public-dataset-size", public_dataset_size),
                    ("--resume", resume),
                )
                if v is not None
            ] + (["--dedup"] if dedup else [])
            if given:
                raise InvalidArgument(
                    f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --defense dp_sgd "
                    f"only; --defense {defense} adds no DP noise and spends no budget: drop "
                    f"{'it' if len(given) == 1 else 'them'} or use --defense dp_sgd"
                )
        if text_field is not None and field is not None and text_field != field:
            raise InvalidArgument(
                f"--text-field {text_field!r} and --field {field!r} name the same thing: give one"
            )
        field = text_field if text_field is not None else field
        if defense == "none" and baseline:
            raise InvalidArgument(
                "--baseline applies to a private run: --defense none is itself the non-private baseline"
            )
        if model_dir is not None:
            _fine_tune(
                model_dir,
                data,
                field,
                label_field,
                defense=defense,
                dp_flags={
                    "target_epsilon": epsilon,
                    "noise_multiplier": noise_multiplier,
                    "delta": delta,
                    "accountant": accountant,
                    "rng": noise_seed,
                    "dedup": dedup,
                    "public_dataset_size": public_dataset_size,
                    "tied_embeddings": "freeze" if freeze_embeddings else "untie",
                },
                recipe_flags={
                    "batch_size": batch_size,
                    "epochs": epochs,
                    "max_grad_norm": max_grad_norm,
                    "lr": lr,
                    "max_length": max_length,
                    "physical_batch_size": physical_batch_size,
                    "device": device,
                    "head": head,
                    "schedule": lr_schedule,
                    "ema": ema,
                    "lora_rank": lora_rank,
                    "dropout": dropout,
                    "freeze_embeddings": True if freeze_embeddings else None,
                },
                label_texts=label_texts,
                refused={
                    "--vocab-size": vocab_size,
                    "--steps": steps_opt,
                    "--resume": resume,
                },
                baseline=baseline,
                seed=seed,
                out=out,
            )
            return
        not_here = [
            flag
            for flag, v in (
                ("--label-field", label_field),
                ("--baseline/--no-baseline", baseline),
                ("--device", None if device == "cpu" else device),
                ("--head", head),
                ("--label-texts", label_texts),
                ("--lr-schedule", lr_schedule),
                ("--ema", ema),
                ("--lora-rank", lora_rank),
                ("--dropout", dropout),
            )
            if v is not None
        ]
        if not_here:
            raise InvalidArgument(
                f"{', '.join(not_here)} {'applies' if len(not_here) == 1 else 'apply'} to --model DIR "
                "(fine-tuning a pretrained checkpoint) only; the bundled tiny GPT-2 is a language model "
                "trained on CPU"
            )
        max_grad_norm = 1.0 if max_grad_norm is None else max_grad_norm
        epochs = 1.0 if epochs is None else epochs
        batch_size = 16 if batch_size is None else batch_size
        lr = 5e-3 if lr is None else lr
        vocab_size = 500 if vocab_size is None else vocab_size
        max_length = 48 if max_length is None else max_length
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        from privnlp.mechanisms.training import make_private, train_private
        from privnlp.mechanisms.training.distributed import (
            init_from_env,
            is_rank_zero,
        )  # torchrun (issue #20)
        from privnlp.mechanisms.training.dp_sgd import per_sample_lm_loss
        from privnlp.mechanisms.training.embedding import freeze_embeddings as _freeze
        from privnlp.mechanisms.training.loop import TrainResult
        from privnlp.models import lm_batch, tiny_gpt2, train_bpe_tokenizer

        if defense != "dp_sgd" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise InvalidArgument(
                f"--defense {defense} runs in one process; under torchrun use --defense dp_sgd"
            )
        dist_ctx = init_from_env()  # None in one process; gloo on CPU (nccl on GPUs) under torchrun

        torch.manual_seed(seed)
        if data is None:
            texts = generate_corpus(seed=seed).texts()
        else:
            texts = load_texts(data, field=field)
        texts = [t for t in texts if t.strip()]
        if len(texts) < 4:
            raise InvalidArgument(f"--data must hold at least 4 non-empty texts; got {len(texts)}")
        order = np.random.default_rng(seed).permutation(len(texts))
        n_eval = max(1, len(texts) // 10)
        eval_texts = [texts[i] for i in order[:n_eval]]
        train_texts = [texts[i] for i in order[n_eval:]]
        tok = train_bpe_tokenizer(train_texts, vocab_size=vocab_size)
        eos = tok.eos_token_id
        model = tiny_gpt2(
            len(tok),
            n_positions=max(max_length, 16),
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
            seed=seed,
        )
        tr = lm_batch(tok, train_texts, max_length=max_length)
        ev = lm_batch(tok, eval_texts, max_length=max_length)

        def perplexity() -> float:
            model.eval()
            with torch.no_grad():
                out = model(
                    input_ids=ev.input_ids,
                    attention_mask=ev.attention_mask,
                    position_ids=ev.position_ids,
                )
                loss = per_sample_lm_loss(out.logits, ev.labels).mean()
            model.train()
            return float(math.exp(float(loss)))

        ppl_before = perplexity()
        notes = []
        if defense == "frozen_embeddings" or freeze_embeddings:
            notes.append(f"frozen: {list(_freeze(model))}")
        ds = TensorDataset(tr.input_ids, tr.attention_mask, tr.labels)
        dl = DataLoader(
            ds,
            batch_size=min(batch_size, len(ds)),
            shuffle=defense != "dp_sgd",
            generator=torch.Generator().manual_seed(seed),
        )
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)

        def loss_fn(m, batch):
            ids, mask, labels = batch
            return per_sample_lm_loss(m(input_ids=ids, attention_mask=mask).logits, labels)

        # epochs -> steps from public quantities when the dataset size is private (issue #28 item 2)
        per_epoch = public_dataset_size / batch_size if public_dataset_size is not None else len(dl)
        steps = int(steps_opt) if steps_opt is not None else max(1, int(round(epochs * per_epoch)))
        if defense == "dp_sgd":
            if epsilon is None and noise_multiplier is None:
                raise InvalidArgument(
                    "--defense dp_sgd needs --epsilon (> 0) or --noise-multiplier (>= 0)"
                )
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", DuplicateExamplesWarning)
                pt = make_private(
                    model,
                    opt,
                    dl,
                    noise_multiplier=noise_multiplier,
                    target_epsilon=epsilon,
                    steps=steps,
                    max_grad_norm=max_grad_norm,
                    delta=delta,
                    accountant=accountant,
                    tied_embeddings="freeze" if freeze_embeddings else "untie",
                    rng=noise_seed,
                    dedup=dedup,
                    duplicate_keys=[normalize_text(t) for t in train_texts],
                    **(
                        {
                            "expected_batch_size": batch_size,
                            "public_dataset_size": public_dataset_size,
                        }
                        if public_dataset_size is not None
                        else {}
                    ),
                )
            for w in caught:
                if issubclass(w.category, DuplicateExamplesWarning):
                    typer.echo(f"warning: {w.message}", err=True)
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            if notes:
                pt.notes = pt.notes + tuple(notes)
            if resume is not None:
                if not resume.is_file():
                    raise InvalidArgument(f"--resume: no checkpoint at {resume}")
                pt.load_checkpoint(resume)
                typer.echo(f"resumed from {resume} at step {pt.steps}", err=True)
            res = (
                train_private(
                    pt,
                    loss_fn,
                    steps=max(0, steps - pt.steps) or 1,
                    max_physical_batch_size=physical_batch_size,
                    stop_at_budget=True,
                    progress=is_rank_zero(),
                )
                if pt.steps < steps
                else None
            )
            if res is None:
                res = TrainResult((), 0, pt.epsilon(), pt.claim(), False)
            claim = res.claim
            statement = pt.privacy_statement()
            if res.stopped_by_budget:
                statement += "\nTraining stopped early: the next step would have exceeded the target epsilon."
            losses = res.losses
        else:
            losses = []
            done = 0
            while done < steps:
                for batch in dl:
                    opt.zero_grad()
                    loss = loss_fn(model, batch).mean()
                    loss.backward()
                    opt.step()
                    losses.append(float(loss))
                    done += 1
                    if done >= steps:
                        break
            claim = (
                get("frozen_embeddings")().claim()
                if defense == "frozen_embeddings"
                else PrivacyClaim.none()
            )
            statement = claim.statement()
        utility = {
            "eval_perplexity_before": ppl_before,
            "eval_perplexity_after": perplexity(),
            "final_train_loss": losses[-1] if losses else float("nan"),
            "train_texts": len(train_texts),
            "eval_texts": len(eval_texts),
            "steps": len(losses),
        }
        rank0 = (
            is_rank_zero()
        )  # under torchrun only rank 0 prints and writes (the checkpoint: rank 0 + barrier)
        if rank0:
            typer.echo(statement)
            typer.echo(
                "Utility: "
                + ", ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in utility.items()
                )
            )
        if out is not None:
            if rank0:
                out.mkdir(parents=True, exist_ok=True)
                atomic_write_text(out / "claim.json", json.dumps(claim.to_dict(), indent=2))
                atomic_write_text(out / "privacy_statement.txt", statement + "\n")
                atomic_write_text(out / "utility.json", json.dumps(utility, indent=2))
            if defense == "dp_sgd":
                pt.save_checkpoint(out / "checkpoint.pt")
            if rank0:
                typer.echo(f"wrote claim.json, privacy_statement.txt, utility.json to {out}")
        if dist_ctx is not None:
            torch.distributed.destroy_process_group()
    except PrivnlpError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def _fine_tune(
    model_dir: Path,
    data: Path | None,
    field: str | None,
    label_field: str | None,
    *,
    defense: str,
    dp_flags: dict,
    recipe_flags: dict,
    refused: dict,
    baseline: bool | None,
    seed: int,
    out: Path | None,
    label_texts: Path | None = None,
) -> None:
    """``privnlp train --model DIR``: DP fine-tuning of a local checkpoint (issue #29 item 7); every check
    runs before anything is trained or written."""
    given = [flag for flag, v in refused.items() if v is not None]
    if given:
        raise InvalidArgument(
            f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to the bundled tiny model only; "
            "with --model the tokenizer comes with the checkpoint and the length is --epochs"
        )
    if defense == "frozen_embeddings":
        raise InvalidArgument("--model fine-tunes with --defense dp_sgd (default) or none")
    if recipe_flags["device"] not in ("cpu", "cuda"):
        raise InvalidArgument(f"--device must be cpu or cuda; got {recipe_flags['device']!r}")
    from privnlp.mechanisms.training.devices import (
        resolve_device,
    )  # imports torch: only when the command runs

    resolve_device(
        recipe_flags["device"], name="--device"
    )  # cuda where torch sees none: one line, exit 2
    if data is None:
        raise InvalidArgument("--model needs --data (a .jsonl or .csv file of records)")
    # fine-tuning imports torch and transformers: loaded only when the command runs
    from privnlp.mechanisms.training.finetune import (
        FineTuneRecipe,
        check_model_dir,
        fine_tune,
        read_labelled,
        with_overrides,
    )

    task = "classification" if label_field is not None else "causal-lm"
    if task != "classification" and (recipe_flags.get("head") or label_texts is not None):
        raise InvalidArgument(
            "--head / --label-texts apply to classification (--label-field) only, not to a causal LM"
        )
    # every range is the recipe's own (FineTuneRecipe.__post_init__), reported under the flag's name
    recipe = with_overrides(FineTuneRecipe(), flags=RECIPE_FLAGS, **recipe_flags)
    texts_by_label = None
    if label_texts is not None:
        if recipe_flags.get("head") != "mean":
            raise InvalidArgument("--label-texts initialises --head mean only: add --head mean")
        try:
            texts_by_label = json.loads(Path(label_texts).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise InvalidArgument(
                f"--label-texts {label_texts}: not a readable JSON file ({e})"
            ) from None
        if not isinstance(texts_by_label, dict):
            raise InvalidArgument(
                f"--label-texts {label_texts}: expected a JSON object {{label: description}}"
            )
    check_model_dir(model_dir, task)
    records = read_labelled(data, text_field=field or "text", label_field=label_field)
    dp = None
    if defense == "dp_sgd":
        dp = {k: v for k, v in dp_flags.items() if v is not None}
        if "target_epsilon" not in dp and "noise_multiplier" not in dp:
            dp["target_epsilon"] = DEFAULT_FINE_TUNE_EPSILON
    res = fine_tune(
        model_dir,
        records,
        task=task,
        recipe=recipe,
        dp=dp,
        baseline=baseline is not False,
        seed=seed,
        progress=True,
        label_texts=texts_by_label,
    )
    metric = "accuracy" if task == "classification" else "perplexity"
    typer.echo(res.statement)
    typer.echo(
        f"Held-out {metric} ({res.utility['heldout_examples']} examples): "
        f"{res.utility[metric]:.4g} {'(DP)' if dp is not None else '(no DP)'}"
        + (
            f" | non-private baseline, same recipe: {res.baseline[metric]:.4g}"
            if res.baseline is not None
            else ""
        )
        + f" | before fine-tuning: {res.utility[metric + '_before']:.4g}"
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        utility = {**res.utility, "baseline": res.baseline, "task": task, "recipe": asdict(recipe)}
        atomic_write_text(out / "claim.json", json.dumps(res.claim.to_dict(), indent=2))
        atomic_write_text(out / "privacy_statement.txt", res.statement + "\n")
        atomic_write_text(out / "utility.json", json.dumps(utility, indent=2))
        res.save(out / "model")
        typer.echo(f"wrote claim.json, privacy_statement.txt, utility.json and model/ to {out}")
