"""`privnlp sanitize INPUT -o OUTPUT ...` and `privnlp sanitize tune` (Vickrey / Laplace / Mahalanobis).

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt``. Heavy imports happen inside the
commands so ``privnlp --help`` stays fast.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import click
import numpy as np
import typer
from typer.core import TyperGroup

import privnlp.accounting as accounting  # lazy package: DPLedger loads only with --ledger
from privnlp.attacks.text.bayesian import sentiment_flip_loss
from privnlp.core.errors import InvalidArgument, MalformedInput, PrivnlpError, check_range
from privnlp.core.report import atomic_write_text
from privnlp.data.loaders import load_texts
from privnlp.data.sentiment import LEXICON
from privnlp.mechanisms.text import LaplaceMetric, Mahalanobis, Vickrey, VickreyK, load_embeddings
from privnlp.mechanisms.text.distributed import sanitize_file_dask
from privnlp.mechanisms.text.embeddings import default_embeddings
from privnlp.mechanisms.text.files import _metric_run, _seeded, sanitize_file
from privnlp.mechanisms.text.textio import WORD_RE
from privnlp.mechanisms.text.tuning import plot_tradeoff, select_parameters, tradeoff_points


class _SanitizeGroup(TyperGroup):
    """A group whose callback takes a positional INPUT and that still dispatches ``tune``:
    when the first argument names a subcommand, the group's own arguments are not parsed;
    otherwise options may follow INPUT (``privnlp sanitize in.txt -o out.txt``)."""

    allow_interspersed_args = True

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            ctx.meta["privnlp_subcommand"] = True
            for p in self.get_params(ctx):  # fill defaults without consuming the subcommand's args
                if (
                    p.expose_value
                    and p.name
                    and not p.name.startswith("_")
                    and p.name not in ctx.params
                ):
                    ctx.params[p.name] = p.get_default(ctx) if not p.multiple else ()
            rest = list(args)
            ctx._protected_args, ctx.args = rest[:1], rest[1:]  # type: ignore[attr-defined]
            return ctx.args
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_SanitizeGroup,
    invoke_without_command=True,
    no_args_is_help=False,
    help="Sanitize text with metric-DP word perturbation (Vickrey, Laplace, Mahalanobis).",
)

#: the word mechanisms by name (imported directly: ``privnlp.mechanisms.get`` would import every
#: registered mechanism, torch and opacus included, ~3 s of every sanitize run)
MECH_CLASSES = {
    "vickrey": Vickrey,
    "vickrey_k": VickreyK,
    "laplace_metric": LaplaceMetric,
    "mahalanobis": Mahalanobis,
}
MECHS = tuple(MECH_CLASSES)


def _fail(msg: str) -> None:
    typer.secho(f"error: {msg}", err=True, fg=typer.colors.RED)
    raise typer.Exit(2)


def _read_ledger(path: Path | None, target_epsilon: float | None) -> Any:
    """The DPLedger of ``--ledger`` (read, or a new one when the file does not exist); ``None``
    without ``--ledger``."""
    if path is None:
        if target_epsilon is not None:
            raise InvalidArgument(
                "--target-epsilon needs --ledger (the file that records the releases)"
            )
        return None
    if target_epsilon is not None:
        check_range("--target-epsilon", target_epsilon, 0.0, math.inf, lo_inclusive=False)
    if not path.exists():
        return accounting.DPLedger()
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise MalformedInput(f"--ledger: {path} is not JSON ({e})") from None
    except OSError as e:
        raise InvalidArgument(f"--ledger: cannot read {path} ({e.strerror})") from None
    if not isinstance(d, dict):
        raise MalformedInput(f"--ledger: {path} holds a {type(d).__name__}, not a ledger object")
    return accounting.DPLedger.from_dict(d)


def _embeddings(path: Path | None, fmt: str | None, vocab_limit: int | None) -> Any:
    """The user's vectors (gensim formats) or the default (GloVe 6B 50-d, else bundled word2vec + warning)."""

    if vocab_limit is not None:
        check_range("--vocab-limit", vocab_limit, 2, 10**9, integer=True)
    if path is not None:
        return load_embeddings(path, fmt, limit=vocab_limit)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        emb = default_embeddings(vocab_limit)
    for w in ws:
        typer.secho(f"warning: {w.message}", err=True, fg=typer.colors.YELLOW)
    return emb


@app.callback()
def sanitize(
    ctx: typer.Context,
    input: Path | None = typer.Argument(
        None, help="Input file: .txt (one record per line), .jsonl or .csv."
    ),
    output: Path | None = typer.Option(
        None,
        "-o",
        "--output",
        help="Output file (written atomically) + OUTPUT.privnlp.json sidecar.",
    ),
    mechanism: str = typer.Option(
        "vickrey", "-m", "--mechanism", help=f"One of {', '.join(MECHS)}."
    ),
    epsilon: float = typer.Option(
        10.0, "-e", "--epsilon", help="Metric-DP epsilon per word (> 0)."
    ),
    t: float = typer.Option(
        0.5, "-t", "--t", help="Vickrey tuning parameter in [0, 1] (0 = Laplace)."
    ),
    ts: str | None = typer.Option(None, "--ts", help="vickrey_k: comma-separated t_1..t_k (>= 0)."),
    lam: float = typer.Option(
        0.2, "--lambda", help="mahalanobis: regularization lambda in [0, 1]."
    ),
    fmt: str | None = typer.Option(
        None, "--format", help="txt | jsonl | csv (default: from the suffix)."
    ),
    field: str = typer.Option("text", "--field", help="JSONL field / CSV column to sanitize."),
    embeddings: Path | None = typer.Option(
        None,
        "--embeddings",
        help="Vectors file (GloVe .txt, word2vec .txt/.bin, fastText .vec/.bin, gensim .kv); default: GloVe 6B 50-d (privnlp[vectors]), else the bundled word2vec.",
    ),
    embeddings_format: str | None = typer.Option(
        None,
        "--embeddings-format",
        help="glove | word2vec | word2vec-binary | fasttext | keyedvectors.",
    ),
    vocab_limit: int | None = typer.Option(
        None, "--vocab-limit", "--top-k", help="Keep the N most frequent vocabulary words (>= 2)."
    ),
    num_proc: str = typer.Option(
        "auto",
        "--num-proc",
        help="Worker processes: N >= 1, or auto (one per core, at most 4, for an input of >= 256 KiB "
        "on the faiss index; else 1). Output identical for every N with --seed.",
    ),
    oov: str = typer.Option(
        "random",
        "--oov",
        help="Out-of-vocabulary policy: random | mask | keep (keep is recorded in the claim).",
    ),
    skip_stopwords: bool = typer.Option(
        False, "--skip-stopwords", help="Release stop words verbatim (recorded in the claim)."
    ),
    index: str = typer.Option(
        "auto",
        "--index",
        help="Nearest neighbours: auto | exact | faiss | hnsw. auto: exact for small inputs, else faiss "
        "calibrated to top-k recall >= --recall-target on a public probe (recorded in the sidecar); "
        "any index is post-processing, same claim.",
    ),
    device: str = typer.Option(
        "cpu",
        "--device",
        help="cpu | cuda[:N]: the mechanism on the GPU in torch: noise, exact top-k, choice (OS-entropy "
        "noise drawn there); with --seed the noise is drawn on the CPU and the output equals the CPU's.",
    ),
    recall_target: float = typer.Option(
        0.99, "--recall-target", help="Top-k recall an approximate index must reach, in [0.5, 1]."
    ),
    seed: int | None = typer.Option(
        None,
        "--seed",
        help="Seed: a reproducible simulation (noise seeded: anyone who knows it can undo the noise); default: OS entropy (secure).",
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    redact_pii: bool = typer.Option(
        False,
        "--redact-pii",
        help="Replace e-mails, phone numbers, SSNs, card numbers and dates by placeholders first "
        "(privnlp's PII redaction; the composed claim says what it does and does not cover).",
    ),
    engine: str = typer.Option(
        "local",
        "--engine",
        help="local | dask: shards on a Dask cluster (same output as local for the same --seed; "
        "secure per-worker noise without one; atomic output, one merged sidecar).",
    ),
    workers: int = typer.Option(
        2, "--workers", help="--engine dask: worker processes of the local cluster."
    ),
    ledger: Path | None = typer.Option(
        None,
        "--ledger",
        help="a DPLedger JSON file (the format of `privnlp vocab build --ledger`): this pass is "
        "charged to it as a metric-DP run (created if missing, written back after the output is in "
        "place), so passes over the same records add up",
    ),
    target_epsilon: float | None = typer.Option(
        None,
        "--target-epsilon",
        help="with --ledger: refuse (exit 2, nothing written) a pass that would take the ledger's "
        "per-word metric-DP epsilon above this",
    ),
) -> None:
    """Sanitize INPUT into OUTPUT (record order and count kept, atomic write, claim in a sidecar)."""
    if ctx.meta.get("privnlp_subcommand") or ctx.invoked_subcommand is not None:
        return
    if input is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    if output is None:
        _fail("missing option -o/--output")

    try:
        if mechanism not in MECHS:
            _fail(f"--mechanism must be one of {MECHS}; got {mechanism!r}")
        procs: int | str = num_proc
        if num_proc != "auto":
            try:
                procs = int(num_proc)
            except ValueError:
                _fail(f"--num-proc must be 'auto' or an integer in [1, 1024]; got {num_proc!r}")
        cls = MECH_CLASSES[mechanism]
        kw: dict[str, Any] = dict(
            oov=oov,
            skip_stopwords=skip_stopwords,
            index=index,
            recall_target=recall_target,
            device=device,
            redact_pii=redact_pii,
        )
        if mechanism == "vickrey":
            kw["t"] = t
        elif mechanism == "vickrey_k":
            try:
                kw["ts"] = tuple(float(x) for x in (ts or "1,1,1").split(","))
            except ValueError:
                _fail(f"--ts must be comma-separated numbers; got {ts!r}")
        elif mechanism == "mahalanobis":
            kw["lam"] = lam
        mech = cls(epsilon, **kw)  # validates epsilon / t / ... before any work
        led = _read_ledger(ledger, target_epsilon)
        if led is not None:  # refuse before any work or output (PrivacyBudgetExceeded)
            led.check(_metric_run(mech, 1), target_epsilon)
        if input is not None and not input.is_file():
            _fail(f"INPUT {str(input)!r} is not a file")
        if engine not in ("local", "dask"):
            _fail(f"--engine must be 'local' or 'dask'; got {engine!r}")
        if engine == "dask" and embeddings is None:
            _embeddings(None, None, vocab_limit)  # warnings; the workers load the default vectors
            mech.vocab_limit = vocab_limit
        else:
            mech.embeddings = _embeddings(embeddings, embeddings_format, vocab_limit)
        if engine == "dask":
            rep = sanitize_file_dask(
                input, output, mech, seed=seed, fmt=fmt, field=field, n_workers=workers
            )
            if led is not None:  # the pass happened: record it (sanitize_file does it itself)
                led.add(_metric_run(mech, max(1, rep.max_words_per_record)))
        else:
            rep = sanitize_file(
                input,
                output,
                mech,
                fmt=fmt,
                field=field,
                progress=progress,
                seed=seed,
                num_proc=procs,
                ledger=led,
                target_epsilon=target_epsilon,
            )
        if led is not None:
            atomic_write_text(ledger, json.dumps(led.to_dict(), indent=1))
    except PrivnlpError as e:
        _fail(str(e))
    typer.echo(
        f"wrote {rep.output} ({rep.records} records, {rep.words} words, {rep.perturbed} perturbed, "
        f"{rep.changed} changed, {rep.oov} OOV = {100 * rep.oov_rate:.2f}%, policy {oov!r}) and {rep.sidecar}"
    )
    if rep.oov_top:
        top = ", ".join(f"{w!r} x{c} ({kind})" for w, c, kind in rep.oov_top)
        typer.echo(
            f"top out-of-vocabulary units (shown here only, not in the sidecar; each replaced by "
            f"--oov {oov}): {top}"
        )
    if rep.oov_rate > 0.05:
        typer.secho(
            f"warning: {100 * rep.oov_rate:.1f}% of the words are out of vocabulary (handled by --oov {oov}). "
            "Names, numbers and codes are expected to be OOV (see the list above); if most are ordinary "
            "words of your text, use --embeddings with vectors of its language/domain; to remove "
            "e-mails, phone numbers and dates first use --redact-pii",
            err=True,
            fg=typer.colors.YELLOW,
        )

    typer.echo(f"claim: {_seeded(mech.claim(), seed).statement()}")


def _top_units(emb: Any, texts: Any, n: int = 200) -> Any:
    """``emb`` restricted to the ``n`` most frequent in-vocabulary units of ``texts`` (as sanitize cuts them)."""

    sp = LaplaceMetric(1.0, embeddings=emb)
    freq = Counter(
        k
        for t in texts
        for m in WORD_RE.finditer(t)
        for a, b in sp.pieces(m.group())
        if (k := sp._key(m.group()[a:b])) in emb
    )
    if len(freq) < 2:
        raise MalformedInput("the text has fewer than 2 distinct in-vocabulary words to tune on")
    return emb.restrict(words=[w for w, _ in freq.most_common(n)])


@app.command()
def tune(
    input: Path | None = typer.Argument(
        None,
        help="Your text (.txt/.jsonl/.csv): tune on its 200 most frequent in-vocabulary words "
        "(d_L = word changed). Default: --words.",
    ),
    field: str = typer.Option("text", "--field", help="JSONL field / CSV column of INPUT."),
    max_loss: float = typer.Option(
        0.05,
        "--max-loss",
        "-C",
        help="Maximum expected utility loss C (sentiment-flip rate by default).",
    ),
    epsilon0: float = typer.Option(1.0, "--epsilon0", help="Initial epsilon of Algorithm 2."),
    words: str = typer.Option(
        "lexicon",
        "--words",
        help="Vocabulary to tune on: 'lexicon' (the bundled sentiment lexicon, "
        "d_L = sentiment flip), 'licenses' (200 most frequent words of the Debian license texts, "
        "Zipf prior over GloVe rank, d_L = word changed) or a file with one word per line (d_L = word changed).",
    ),
    embeddings: Path | None = typer.Option(
        None,
        "--embeddings",
        help="Vectors file; default: GloVe 6B 50-d (privnlp[vectors]), else bundled word2vec.",
    ),
    embeddings_format: str | None = typer.Option(None, "--embeddings-format"),
    vocab_limit: int | None = typer.Option(
        None, "--vocab-limit", help="Keep the N most frequent vocabulary words first."
    ),
    samples: int = typer.Option(200, "--samples", help="Monte Carlo samples per word."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write the privacy-utility plot (Figure 2 style) here."
    ),
    epsilons: str = typer.Option(
        "5,10,20,40,80,160", "--plot-epsilons", help="Comma-separated epsilons for the plot."
    ),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Algorithm 2: pick (epsilon, t) maximising the Bayesian adversary's inference error under L_M <= C."""

    try:
        emb = _embeddings(embeddings, embeddings_format, vocab_limit)
        if input is not None:  # the user's own text
            if not input.is_file():
                _fail(f"INPUT {str(input)!r} is not a file")
            fmt_in = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}.get(
                input.suffix.lower(), "txt"
            )
            texts = load_texts(str(input), field=None if fmt_in == "txt" else field, fmt=fmt_in)
            emb = _top_units(emb, texts)
            loss: Any = lambda a, b: (a != b).astype(float)  # noqa: E731
            typer.secho(
                "note: tuned on INPUT's word frequencies: the chosen (epsilon, t) depend on your "
                "private text and are not covered by the claim; tune on public text of the same kind "
                "(--words) before you publish output or parameters",
                err=True,
                fg=typer.colors.YELLOW,
            )
        elif words == "lexicon":
            emb = emb.restrict(words=list(LEXICON["positive"]) + list(LEXICON["negative"]))
            loss: Any = sentiment_flip_loss(emb.words, LEXICON)
        elif (
            words == "licenses"
        ):  # real English text: the 200 most frequent units of the Debian license texts
            from privnlp.evaluation.scenarios.text import license_texts  # pulls faker

            emb = _top_units(emb, license_texts())
            loss = lambda a, b: (a != b).astype(float)  # noqa: E731
        else:
            p = Path(words)
            if not p.is_file():
                _fail(f"--words must be 'lexicon', 'licenses' or a file; {words!r} does not exist")
            wl = [w.strip() for w in p.read_text(encoding="utf-8").splitlines() if w.strip()]
            emb = emb.restrict(words=wl)
            loss = lambda a, b: (a != b).astype(float)  # noqa: E731
        prior = emb.counts / emb.counts.sum() if emb.counts is not None else None
        res = select_parameters(
            emb,
            loss=loss,
            max_loss=max_loss,
            prior=prior,
            epsilon0=epsilon0,
            n_samples=samples,
            rng=np.random.default_rng(seed),
        )
        typer.echo(
            f"chosen: epsilon={res.epsilon:g} t={res.t:g}  E_M={res.inference_error:.4f}  "
            f"L_M={res.utility_loss:.4f} (C={max_loss:g}, vocabulary {len(emb)} words)"
        )
        mech_name = "laplace_metric" if res.t == 0 else "vickrey"
        typer.echo(
            f"meaning: an adversary who knows the mechanism and the word frequencies recovers about "
            f"{100 * (1 - res.inference_error):.0f}% of these words from the output (E_M = "
            f"{res.inference_error:.2f} is its expected error); L_M = {res.utility_loss:.2f} is the "
            f"expected utility loss ({'sentiment flips' if words == 'lexicon' and input is None else 'words changed'}) "
            f"per word, kept <= C = {max_loss:g}. "
            + ("t = 0 is the Laplace mechanism. " if res.t == 0 else "")
            + "Higher E_M = more privacy against this adversary."
        )
        src_arg = str(input) if input is not None else "INPUT"
        typer.echo(
            f"apply it: privnlp sanitize {src_arg} -o OUTPUT -m {mech_name} -e {res.epsilon:g}"
            + (f" -t {res.t:g}" if res.t != 0 else "")
        )
        if plot is not None:
            try:
                eps = [float(x) for x in epsilons.split(",")]
            except ValueError:
                _fail(f"--plot-epsilons must be comma-separated numbers; got {epsilons!r}")
            pts = tradeoff_points(
                emb, eps, loss=loss, prior=prior, n_samples=samples, rng=np.random.default_rng(seed)
            )
            plot_tradeoff(pts, str(plot), title=f"Bayesian adversary, {len(emb)} words")
            typer.echo(f"plot: {plot}")
    except PrivnlpError as e:
        _fail(str(e))
