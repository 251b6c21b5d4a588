"""`privnlp fragment SRC [TGT] -o OUTDIR`: phrase-pair fragmentation of a parallel corpus.

Paper: ``../shared/papers/phrase-pair-fragmentation-nmt.txt``. Heavy imports happen inside the
command so ``privnlp --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from rich.console import Console

from privnlp.core.errors import PrivnlpError
from privnlp.mechanisms.fragmentation.align import align
from privnlp.mechanisms.fragmentation.corpus import read_parallel
from privnlp.mechanisms.fragmentation.mechanism import PhraseFragmentation

app = typer.Typer(
    help="Phrase-pair fragmentation of parallel data.",
    no_args_is_help=True,
    context_settings={"allow_interspersed_args": True},
)


@app.callback(invoke_without_command=True)
def fragment(
    src: Path = typer.Argument(
        ..., help="Source file (Moses pair with TGT), or one .tsv / .jsonl file."
    ),
    tgt: Path | None = typer.Argument(None, help="Target file of a Moses-style pair."),
    outdir: Path = typer.Option(..., "-o", "--outdir", help="Output folder (created)."),
    fmt: str | None = typer.Option(
        None, "--format", help="moses | tsv | jsonl (default: from the suffix)."
    ),
    max_length: int = typer.Option(
        4, "--max-length", help="Maximum source phrase length (paper: 4 or 7)."
    ),
    max_target_length: int | None = typer.Option(
        None, "--max-target-length", help="Default: --max-length."
    ),
    min_length: int = typer.Option(1, "--min-length", help="Minimum source phrase length."),
    discard_fraction: float = typer.Option(
        0.5, "--discard-fraction", help="Fraction of occurrences discarded, in [0, 1)."
    ),
    tag: bool = typer.Option(
        False, "--tag/--no-tag", help="Wrap phrases in <P> ... </P> on both sides."
    ),
    aligner: str = typer.Option(
        "auto", "--aligner", help="eflomal | fast_align_py | auto (eflomal if installed)."
    ),
    symmetrization: str = typer.Option(
        "union",
        "--symmetrization",
        help="union | intersection | grow-diag | grow-diag-final | grow-diag-final-and",
    ),
    src_lang: str = typer.Option(
        "en", "--src-lang", help="sacremoses language of the source side."
    ),
    tgt_lang: str = typer.Option(
        "en", "--tgt-lang", help="sacremoses language of the target side."
    ),
    pretokenized: bool = typer.Option(
        False, "--pretokenized", help="Input is already tokenised (split on spaces)."
    ),
    prefix: str = typer.Option("fragments", "--prefix", help="Output file prefix."),
    seed: int | None = typer.Option(
        None, "--seed", help="Seed for shuffling/discarding (default: OS entropy)."
    ),
) -> None:
    """Align, extract phrase pairs, shuffle, discard and write PREFIX.src / PREFIX.tgt / PREFIX.json."""

    console = Console(stderr=True)
    try:
        mech = PhraseFragmentation(
            max_length=max_length,
            discard_fraction=discard_fraction,
            tag=tag,
            max_target_length=max_target_length,
            min_length=min_length,
            aligner=aligner,
            symmetrization=symmetrization,
        )
        with console.status("reading and tokenising (sacremoses)..."):
            data = read_parallel(
                src, tgt, fmt=fmt, tokenize=not pretokenized, src_lang=src_lang, tgt_lang=tgt_lang
            )
        console.print(f"read {len(data)} sentence pairs")
        rng = np.random.default_rng(seed) if seed is not None else np.random.default_rng()
        with console.status(f"aligning ({aligner}, both directions, {symmetrization})..."):
            alignments = align(
                data.source, data.target, aligner=aligner, symmetrization=symmetrization
            ).symmetric
        release = mech.fragment(data, rng=rng, alignments=alignments, progress=True)
        paths = release.write(outdir, prefix=prefix)
    except PrivnlpError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    console.print(
        f"extracted {release.n_extracted} phrase-pair occurrences, released {release.n_released} "
        f"({100 * (1 - float(discard_fraction)):.0f}% kept, shuffled)"
    )
    for k, p in paths.items():
        typer.echo(f"{k}: {p}")
