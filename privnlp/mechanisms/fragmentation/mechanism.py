"""Phrase-pair fragmentation of confidential parallel data (the ``phrase_fragmentation`` mechanism).

Paper: ``../shared/papers/phrase-pair-fragmentation-nmt.txt`` — "Using Confidential Data for
Domain Adaptation of Neural Machine Translation" (Sohyung Kim, Arianna Bisazza, Fatih Turkmen,
2021). The data owner word-aligns its parallel corpus (fast_align, union symmetrisation),
extracts every phrase pair consistent with the alignment (Moses, max source length 4 or 7),
shuffles all phrase *occurrences* of the corpus, discards a random 50% and releases the rest,
optionally tagged ``<P> ... </P>`` on both sides.

Threat model (paper, Sec. 2): an honest-but-curious recipient (the translation company) who
tries to *fully reconstruct* the original sentences from the released fragments. There is no
formal guarantee: the claim is ``heuristic``; leakage is measured by the paired
``fragment_reconstruction`` attack.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privnlp.core.claims import Adversary, PrivacyClaim, ThreatModel
from privnlp.core.errors import InvalidArgument, check_range
from privnlp.core.observations import FragmentSet
from privnlp.core.protocols import Mechanism
from privnlp.core.registry import LEAKY_TWINS, MECHANISMS
from privnlp.core.rng import as_numpy

from .align import ALIGNERS, SYMMETRIZATIONS, align
from .corpus import ParallelText, from_corpus
from .extract import check_lengths, extract_phrases

__all__ = [
    "PhraseFragmentation",
    "FragmentRelease",
    "LeakyPhraseFragmentation",
    "OPEN_TAG",
    "CLOSE_TAG",
    "strip_tags",
    "check_discard_fraction",
]

PAPER = (
    "phrase-pair-fragmentation-nmt.txt — Kim, Bisazza, Turkmen (2021), Using Confidential Data for "
    "Domain Adaptation of Neural Machine Translation"
)
OPEN_TAG, CLOSE_TAG = "<P>", "</P>"

THREAT_MODEL = ThreatModel(
    adversary=Adversary.HONEST_BUT_CURIOUS_SERVER,
    observes=(
        "the released phrase pairs (shuffled, subsampled, optionally tagged)",
        "the release settings",
    ),
    knows=("the fragmentation algorithm and its parameters (Kerckhoffs)",),
    goal="fully reconstruct the original sentences / link sensitive entity pairs (e.g. drug and side effect)",
)


def check_discard_fraction(discard_fraction: float) -> float:
    """Validate ``discard_fraction``.

    Args:
        discard_fraction: the fraction of phrase occurrences discarded, in [0, 1).

    Returns:
        It, as a float.

    Raises:
        InvalidArgument: outside [0, 1).
    """
    check_range(
        "discard_fraction", discard_fraction, 0.0, 1.0, lo_inclusive=True, hi_inclusive=False
    )
    return float(discard_fraction)


def strip_tags(tokens: Sequence[str]) -> list[str]:
    """Drop a leading ``<P>`` and a trailing ``</P>`` tag from a fragment's tokens.

    Args:
        tokens: the fragment's tokens.

    Returns:
        The tokens without the tags (unchanged when untagged).
    """
    toks = list(tokens)
    if toks and toks[0] == OPEN_TAG:
        toks = toks[1:]
    if toks and toks[-1] == CLOSE_TAG:
        toks = toks[:-1]
    return toks


@dataclass(frozen=True)
class FragmentRelease:
    """The released fragments (in release order) and what the owner keeps private.

    ``source``/``target`` are what gets published. ``occurrences`` (rows ``sentence, s0, s1,
    t0, t1`` aligned with the release order) and ``alignment`` stay with the data owner; they
    are used by tests and utility metrics only.

    Attributes:
        source: the released source fragments, in release order.
        target: the released target fragments, aligned with ``source``.
        settings: the release settings (what the claim is computed from).
        n_extracted: the number of phrase occurrences extracted before discarding.
        occurrences: ``(n, 5)`` rows ``(sentence, s0, s1, t0, t1)`` of the released fragments (kept private).
        alignment: the word alignments used (kept private).
        timings: seconds per stage (``align_s``, ``extract_s``, ``release_s``).
    """

    source: tuple[str, ...]
    target: tuple[str, ...]
    settings: Mapping[str, Any]
    n_extracted: int
    occurrences: np.ndarray = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    alignment: Any = field(repr=False, compare=False, default=None)
    timings: Mapping[str, float] = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return len(self.source)

    @property
    def n_released(self) -> int:
        return len(self.source)

    def to_observation(self) -> FragmentSet:
        return FragmentSet(
            source=self.source,
            target=self.target,
            tagged=bool(self.settings.get("tag")),
            settings=dict(self.settings),
        )

    def sidecar(self) -> dict[str, Any]:
        return {
            "format": "privnlp.fragments/1",
            "settings": dict(self.settings),
            "n_extracted": self.n_extracted,
            "n_released": self.n_released,
            "claim": PhraseFragmentation.claim_for(self.settings).to_dict(),
        }

    def write(
        self,
        outdir: str | Path,
        *,
        prefix: str = "fragments",
        src_suffix: str = "src",
        tgt_suffix: str = "tgt",
    ) -> dict[str, Path]:
        """Write ``prefix.src``, ``prefix.tgt`` and ``prefix.json`` atomically (all or nothing)."""
        outdir = Path(outdir)
        outdir.mkdir(parents=True, exist_ok=True)
        paths = {
            "source": outdir / f"{prefix}.{src_suffix}",
            "target": outdir / f"{prefix}.{tgt_suffix}",
            "sidecar": outdir / f"{prefix}.json",
        }
        contents = {
            "source": "".join(s + "\n" for s in self.source),
            "target": "".join(t + "\n" for t in self.target),
            "sidecar": json.dumps(self.sidecar(), indent=2, sort_keys=True) + "\n",
        }
        tmps: dict[str, str] = {}
        moved: list[Path] = []
        umask = os.umask(0)
        os.umask(umask)
        try:
            for k, text in contents.items():
                fd, tmp = tempfile.mkstemp(dir=outdir, prefix=f".{paths[k].name}.", suffix=".tmp")
                tmps[k] = tmp
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600: the mode a plain open gives
            for k in ("source", "target", "sidecar"):  # sidecar last: it marks a complete release
                os.replace(tmps[k], paths[k])
                del tmps[k]
                moved.append(paths[k])
        except BaseException:
            for p in moved:  # all or nothing: remove the files of this incomplete release
                try:
                    os.unlink(p)
                except OSError:
                    pass
            raise
        finally:
            for tmp in tmps.values():
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        return paths


@MECHANISMS.register("phrase_fragmentation")
class PhraseFragmentation(Mechanism):
    """Release shuffled, subsampled phrase pairs instead of full sentence pairs (heuristic).

    Args:
        max_length: maximum source phrase length (paper: 4 or 7).
        discard_fraction: fraction of phrase occurrences discarded at random, in [0, 1) (paper: 0.5).
        tag: wrap every released phrase in ``<P> ... </P>`` on both sides (paper's tagging).
        max_target_length: maximum target phrase length (default: ``max_length``, as Moses).
        min_length: minimum source phrase length (paper's future work), default 1.
        aligner: ``"eflomal"`` (default), ``"fast_align_py"`` (numpy fallback) or ``"auto"``.
        symmetrization: ``"union"`` (paper), ``"intersection"``, ``"grow-diag"``,
            ``"grow-diag-final"``, ``"grow-diag-final-and"``.

    Claim: heuristic (no formal guarantee; paper Sec. 3.1, threat model Sec. 2; leakage measured by
    ``fragment_reconstruction``).

    Raises:
        InvalidArgument: a length out of range (``max_length``, ``max_target_length`` >= 1, ``min_length`` in
            [1, max_length]), ``discard_fraction`` outside [0, 1), or an unknown ``aligner`` / ``symmetrization``.
    """

    paper = PAPER
    paired_attacks = ("fragment_reconstruction",)
    threat_models = (THREAT_MODEL,)
    scenario = "fragmentation.reconstruction"

    def __init__(
        self,
        max_length: int = 4,
        discard_fraction: float = 0.5,
        tag: bool = False,
        *,
        max_target_length: int | None = None,
        min_length: int = 1,
        aligner: str = "eflomal",
        symmetrization: str = "union",
    ) -> None:
        check_lengths(max_length, max_target_length, min_length)
        check_discard_fraction(discard_fraction)
        if aligner not in ALIGNERS:
            raise InvalidArgument(f"aligner must be one of {', '.join(ALIGNERS)}; got {aligner!r}")
        if symmetrization not in SYMMETRIZATIONS:
            raise InvalidArgument(
                f"symmetrization must be one of {', '.join(SYMMETRIZATIONS)}; got {symmetrization!r}"
            )
        self.max_length = max_length
        self.discard_fraction = discard_fraction
        self.tag = tag
        self.max_target_length = max_target_length
        self.min_length = min_length
        self.aligner = aligner
        self.symmetrization = symmetrization

    # -- claim ------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        return {
            "max_length": int(self.max_length),
            "max_target_length": int(
                self.max_target_length if self.max_target_length is not None else self.max_length
            ),
            "min_length": int(self.min_length),
            "discard_fraction": float(self.discard_fraction),
            "tag": bool(self.tag),
            "aligner": self.aligner,
            "symmetrization": self.symmetrization,
            "shuffled": True,
            "mechanism": "phrase_fragmentation",
        }

    @staticmethod
    def claim_for(settings: Mapping[str, Any]) -> PrivacyClaim:
        return PrivacyClaim.heuristic(
            "no formal privacy guarantee: phrase pairs consistent with the word alignment are released "
            f"(source length <= {settings.get('max_length')}, target length <= {settings.get('max_target_length')}), "
            f"shuffled across the whole corpus, with {100 * float(settings.get('discard_fraction', 0)):.0f}% of the "
            "occurrences discarded at random",
            "protects against full reconstruction of long sentences only heuristically; short sentences, "
            "repeated phrases and entities closer than the maximum phrase length can still be released together",
            extra={
                "max_length": int(settings.get("max_length", 0)),
                "discard_fraction": float(settings.get("discard_fraction", 0.0)),
                "tag": bool(settings.get("tag", False)),
            },
        )

    def claim(self) -> PrivacyClaim:
        return self.claim_for(self.settings())

    @classmethod
    def sweep_grid(cls, preset: str = "quick") -> tuple[str, tuple[int, ...]]:
        """The max-phrase-length sweep of the report's privacy-utility curve (reconstruction vs coverage)."""
        return ("max_length", (2, 4, 7, 12) if preset == "quick" else (2, 3, 4, 5, 7, 10, 15))

    @classmethod
    def example(cls, preset: str = "quick") -> PhraseFragmentation:
        # the quick preset uses the deterministic numpy aligner so reports are reproducible
        return cls(
            max_length=4,
            discard_fraction=0.5,
            tag=True,
            aligner="fast_align_py" if preset == "quick" else "auto",
        )

    # -- operation --------------------------------------------------------------------------
    def extract(
        self, data: ParallelText, alignments: Sequence[Any] | None = None, *, progress: bool = False
    ) -> tuple[np.ndarray, Any, dict[str, float]]:
        timings: dict[str, float] = {}
        t = time.perf_counter()
        if alignments is None:
            res = align(
                data.source, data.target, aligner=self.aligner, symmetrization=self.symmetrization
            )
            alignments = res.symmetric
        elif len(alignments) != len(data):
            raise InvalidArgument(
                f"alignments must have one entry per sentence pair; got {len(alignments)} for {len(data)}"
            )
        timings["align_s"] = time.perf_counter() - t
        t = time.perf_counter()
        occ = extract_phrases(
            data.source,
            data.target,
            alignments,
            max_length=self.max_length,
            max_target_length=self.max_target_length,
            min_length=self.min_length,
            progress=progress,
        )
        timings["extract_s"] = time.perf_counter() - t
        return occ, alignments, timings

    def _select(self, occ: np.ndarray, g: np.random.Generator) -> np.ndarray:
        """Shuffle all occurrences across the corpus and keep a random (1 - discard_fraction) of them."""
        n = len(occ)
        n_keep = n - int(round(float(self.discard_fraction) * n))
        return g.permutation(n)[:n_keep]

    def fragment(
        self,
        data: Any,
        *,
        rng: Any,
        alignments: Sequence[Any] | None = None,
        progress: bool = False,
    ) -> FragmentRelease:
        """Align (unless ``alignments`` are given), extract, shuffle, subsample and (optionally) tag.

        ``data``: a :class:`ParallelText` or a :class:`privnlp.data.parallel.ParallelCorpus`.
        """
        g = as_numpy(rng)
        if not isinstance(data, ParallelText):
            data = from_corpus(data)
        occ, alignments, timings = self.extract(data, alignments, progress=progress)
        t = time.perf_counter()
        order = self._select(occ, g)
        kept = occ[order]
        src_out, tgt_out = [], []
        o, c = (OPEN_TAG + " ", " " + CLOSE_TAG) if self.tag else ("", "")
        S, T = data.source, data.target
        for k, s0, s1, t0, t1 in kept.tolist():
            src_out.append(o + " ".join(S[k][s0:s1]) + c)
            tgt_out.append(o + " ".join(T[k][t0:t1]) + c)
        timings["release_s"] = time.perf_counter() - t
        return FragmentRelease(
            tuple(src_out),
            tuple(tgt_out),
            self.settings(),
            int(len(occ)),
            kept,
            alignments,
            timings,
        )


@LEAKY_TWINS.register("phrase_fragmentation")
class LeakyPhraseFragmentation(PhraseFragmentation):
    """Deliberately leaky twin: ignores ``discard_fraction`` (releases every occurrence) and does
    not shuffle (fragments come out in sentence order) while claiming the same settings.
    The ``fragment_reconstruction`` attack must catch it (tests/fragmentation).

    Args:
        max_length: maximum source phrase length.
        discard_fraction: claimed (and ignored) discarded fraction, in [0, 1).
        tag: wrap every released phrase in ``<P> ... </P>``.
        max_target_length: maximum target phrase length (default: ``max_length``).
        min_length: minimum source phrase length.
        aligner: ``"eflomal"``, ``"fast_align_py"`` or ``"auto"``.
        symmetrization: one of :data:`~privnlp.mechanisms.fragmentation.align.SYMMETRIZATIONS`.

    Raises:
        InvalidArgument: as for :class:`PhraseFragmentation`.
    """

    def _select(self, occ: np.ndarray, g: np.random.Generator) -> np.ndarray:
        return np.arange(len(occ))
