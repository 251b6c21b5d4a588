"""DP WordPiece: a BERT-style WordPiece vocabulary trained on a DP word histogram.

Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` Section 3.2 ("it is enough to make the
input histogram differentially private ... and apply the standard WordPiece algorithm").

Pipeline (:meth:`DPWordPiece.build`):

1. cut every text into words with the BERT normalizer/pre-tokenizer;
2. group texts by contributor (document, or user when ``unit="user"``) and keep at most
   ``k = max_words_per_contributor`` distinct words per contributor (sampled, seeded);
3. count distinct contributors per word, add Laplace (or Gaussian) noise and threshold
   (:mod:`~privnlp.mechanisms.vocab.calibration`); this *released histogram* is DP;
4. train HF ``tokenizers``' WordPiece trainer on the released histogram only (each word fed
   ``max(1, round(count * count_scale))`` times): post-processing, so the vocabulary and the
   ``tokenizer.json`` keep the histogram's guarantee.

Threat model: a data recipient gets the tokenizer (vocabulary, and optionally the released
histogram) and wants to learn whether a given rare word (a surname, an ID) occurs in the
private corpus. Evaluated by the ``vocab_membership`` attack in the ``vocab.membership`` scenario.

Reproducibility: ``tokenizers``' WordPiece trainer breaks ties between equally-frequent merges by
token ids that are assigned in hash-map order (huggingface/tokenizers#1794, fix proposed in
#2066), so two trainings on the same histogram can differ in the tokens picked at tied merge
counts. The *released histogram* is exactly reproducible from the seed and is saved next to the
tokenizer (``histogram.json``); :func:`train_wordpiece_from_histogram` feeds words in sorted order
and re-numbers the learned tokens canonically (specials first, then sorted), so ``vocab.txt`` is
identical whenever the learned token *set* is; only the choice among exactly tied merges can vary.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import string
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from privnlp.accounting.adversaries import vocab_adversary_bounds
from privnlp.core.claims import Adversary, PrivacyClaim, ThreatModel
from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    MalformedInput,
    check_range,
)
from privnlp.core.protocols import Mechanism
from privnlp.core.registry import LEAKY_TWINS, MECHANISMS
from privnlp.core.report import atomic_write_text
from privnlp.core.rng import noise_is_seeded, secure_numpy
from privnlp.models.tokenization import learn_wordpiece_pieces

if TYPE_CHECKING:
    from privnlp.accounting import DPLedger, ThresholdRelease

from .calibration import (
    NoiseCalibration,
    calibrate,
    single_contributor_release_probability,
)
from .histogram import (
    NoisyHistogram,
    WordSplitter,
    bound_contributions,
    contributor_histogram,
    group_by_contributor,
    release_histogram,
)

__all__ = [
    "DPWordPiece",
    "VocabBuild",
    "train_wordpiece_from_histogram",
    "histogram_iterator",
    "build_nonprivate_wordpiece",
    "LeakyOccurrenceWordPiece",
    "SPECIAL_TOKENS",
    "PUBLIC_ALPHABET",
    "min_vocab_size",
]

PAPER = "dp-bert-and-dp-wordpiece.txt (Section 3.2): DP WordPiece from a noised, thresholded word histogram"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: data-independent characters always in the alphabet (public: costs no privacy)
PUBLIC_ALPHABET = string.ascii_lowercase + string.digits + string.punctuation

THREAT_MODEL = ThreatModel(
    adversary=Adversary.DATA_RECIPIENT,
    observes=("released WordPiece vocabulary / tokenizer.json", "released noisy word histogram"),
    knows=(
        "the mechanism and its parameters",
        "candidate private words (e.g. a surname or an ID)",
        "all other contributors' data",
    ),
    goal="decide whether a candidate word occurs in the private corpus (vocabulary membership)",
)


def min_vocab_size(
    words: Sequence[str],
    alphabet: str = PUBLIC_ALPHABET,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
) -> int:
    """Size of the initial vocabulary: specials + characters + ``##``-characters (the public
    alphabet's ``##`` forms are always added, so that any word over the alphabet can be segmented)."""
    chars = set(alphabet)
    cont = set(alphabet)
    for w in words:
        chars.update(w)
        cont.update(w[1:])
    return len(special_tokens) + len(chars) + len(cont)


def histogram_iterator(
    counts: Mapping[str, float], count_scale: float = 1.0, chunk: int = 512
) -> Iterator[str]:
    """Yield each word ``max(1, round(count * count_scale))`` times (space-joined chunks), words in
    sorted order. This is everything the WordPiece trainer sees.

    Args:
        counts: word -> (noisy) count.
        count_scale: multiplier applied to each count before rounding.
        chunk: the most repetitions joined into one yielded string.

    Yields:
        Space-joined repetitions of one word.
    """
    for w in sorted(counts):
        n = max(1, int(round(counts[w] * count_scale)))
        while n > 0:
            m = min(n, chunk)
            yield " ".join([w] * m)
            n -= m


def _base_tokenizer(lowercase: bool = True):
    tok = Tokenizer(
        models.WordPiece(
            unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=100
        )
    )
    tok.normalizer = normalizers.BertNormalizer(
        lowercase=lowercase, strip_accents=None if not lowercase else True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def train_wordpiece_from_histogram(
    counts: Mapping[str, float],
    vocab_size: int,
    *,
    count_scale: float = 1.0,
    alphabet: str = PUBLIC_ALPHABET,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
    lowercase: bool = True,
):
    """Train a BERT-style WordPiece ``tokenizers.Tokenizer`` from a word histogram only.

    During training the tokenizer has no normalizer and a plain whitespace pre-tokenizer, so the
    trainer counts exactly the words of ``counts``; the BERT normalizer / pre-tokenizer and the
    ``[CLS] $A [SEP]`` post-processor are attached afterwards.

    Args:
        counts: word -> (noisy) count; the only data the trainer sees.
        vocab_size: the vocabulary size, an integer >= the special tokens + the alphabet of ``counts`` and of
            ``alphabet`` with their ``##`` forms.
        count_scale: multiplier applied to counts (see :func:`histogram_iterator`).
        alphabet: public characters always in the vocabulary (with their ``##`` forms).
        special_tokens: the special tokens, first in id order.
        lowercase: BERT uncased normalization of the final tokenizer.

    Returns:
        A ``tokenizers.Tokenizer``.

    Raises:
        InvalidArgument: ``vocab_size`` too small.
    """
    check_range("vocab_size", vocab_size, 1, math.inf, integer=True, hi_inclusive=False)
    need = min_vocab_size(list(counts), alphabet, special_tokens)
    if vocab_size < need:
        raise InvalidArgument(
            f"vocab_size must be >= {need} (special tokens + the alphabet of the released histogram "
            f"and its '##' continuation forms); got {vocab_size}"
        )
    tok = _base_tokenizer(lowercase)
    normalizer, pre = tok.normalizer, tok.pre_tokenizer
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    released_cont = {"##" + ch for w in counts for ch in w[1:]}
    public_cont = {"##" + ch for ch in set(alphabet)}
    extra = sorted(public_cont - released_cont)  # data-independent, appended after training
    # HF tokenizers' WordPieceTrainer is a BPE trainer whose '##' symbol ids follow Rust hash order, so
    # tied merges differ from run to run (tokenizers#1794). learn_wordpiece_pieces runs the same BPE
    # merges through the deterministic BpeTrainer: identical vocabularies every run.

    pieces = learn_wordpiece_pieces(
        histogram_iterator(counts, count_scale),
        int(vocab_size) - len(extra),
        special_tokens=list(special_tokens),
        initial_alphabet=sorted(set(alphabet)),
        min_frequency=1,
        both_forms=False,
    )
    # Canonical ids (specials first, then sorted).
    learned = set(pieces) | set(special_tokens) | set(extra)
    order = list(special_tokens) + sorted(learned - set(special_tokens))
    tok.model = models.WordPiece(
        vocab={t: i for i, t in enumerate(order)},
        unk_token="[UNK]",
        continuing_subword_prefix="##",
        max_input_chars_per_word=100,
    )
    tok.normalizer, tok.pre_tokenizer = normalizer, pre
    pad = tok.token_to_id("[PAD]")
    if (
        pad is not None
    ):  # recorded in tokenizer.json: PreTrainedTokenizerFast(tokenizer_file=...) pads
        tok.enable_padding(pad_id=pad, pad_token="[PAD]")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    if cls is not None and sep is not None:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
        )
    return tok


@dataclass(frozen=True)
class VocabBuild:
    """A built vocabulary: the ``tokenizers.Tokenizer``, the released histogram it was trained on,
    and the claim. ``save(dir)`` writes ``tokenizer.json``, ``vocab.txt``, ``histogram.json`` and
    ``claim.json`` (each atomically).

    Attributes:
        tokenizer: the trained ``tokenizers.Tokenizer``.
        histogram: the released histogram it was trained on.
        claim: the privacy claim of the release.
        config: the mechanism's hyperparameters.
    """

    tokenizer: Any
    histogram: NoisyHistogram
    claim: PrivacyClaim
    config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def vocab(self) -> list[str]:
        """Tokens in id order (the BERT ``vocab.txt``)."""
        v = self.tokenizer.get_vocab()
        return [t for t, _ in sorted(v.items(), key=lambda kv: kv[1])]

    def hf_tokenizer(self):
        """A ``transformers.PreTrainedTokenizerFast`` wrapping the tokenizer."""
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(
            tokenizer_object=self.tokenizer,
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
        )

    def save(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        paths = {
            "tokenizer": d / "tokenizer.json",
            "vocab": d / "vocab.txt",
            "histogram": d / "histogram.json",
            "claim": d / "claim.json",
        }
        atomic_write_text(paths["tokenizer"], self.tokenizer.to_str(pretty=True))
        # AutoTokenizer.from_pretrained(dir) reads the class and the special tokens from here
        paths["tokenizer_config"] = d / "tokenizer_config.json"
        atomic_write_text(
            paths["tokenizer_config"],
            json.dumps(
                {
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "unk_token": "[UNK]",
                    "pad_token": "[PAD]",
                    "cls_token": "[CLS]",
                    "sep_token": "[SEP]",
                    "mask_token": "[MASK]",
                    "model_max_length": 512,
                },
                indent=2,
            )
            + "\n",
        )
        atomic_write_text(paths["vocab"], "\n".join(self.vocab) + "\n")
        atomic_write_text(
            paths["histogram"],
            json.dumps(
                {
                    "counts": dict(self.histogram.counts),
                    "n_contributors": self.histogram.n_contributors,
                    "calibration": self.histogram.calibration.to_dict()
                    if self.histogram.calibration
                    else None,
                    "secure": self.histogram.secure,
                },
                indent=1,
                sort_keys=True,
            ),
        )
        atomic_write_text(
            paths["claim"],
            json.dumps(
                {"claim": self.claim.to_dict(), "config": dict(self.config)}, indent=2, default=str
            ),
        )
        return paths


def _split_corpus(
    texts: Sequence[str], contributor_ids: Sequence[Any] | None, lowercase: bool
) -> list[list[str]]:
    if isinstance(texts, str):
        raise InvalidArgument(
            "texts must be a sequence of strings (one per document), not a single str"
        )
    texts = list(texts)
    if not texts:
        raise MalformedInput("texts: empty corpus (need at least one non-empty document)")
    split = WordSplitter(lowercase)
    groups = group_by_contributor(texts, contributor_ids)
    word_sets = [[w for t in g for w in split(t)] for g in groups]
    if not any(word_sets):
        raise MalformedInput("texts: empty corpus (no words after normalization)")
    return word_sets


@MECHANISMS.register("dp_wordpiece")
class DPWordPiece(Mechanism):
    """DP WordPiece vocabulary (contribution-bounded, noised, thresholded word histogram).

    Args:
        epsilon, delta: the guarantee at ``unit`` (``delta < 1/n_contributors`` is checked at build).
        max_words_per_contributor: ``k``, distinct words kept per contributor (sampled).
        unit: ``"document"`` (each text is a contributor) or ``"user"`` (texts grouped by
            ``contributor_ids``).
        noise: ``"laplace"`` or ``"gaussian"``.
        neighbouring: ``"add/remove"`` (default) or ``"replace-one"`` contributors.
        vocab_size: WordPiece vocabulary size (>= specials + alphabet).
        count_scale: noisy counts are multiplied by this before being fed to the trainer.
        secure: draw the noise with OpenDP's hardened discrete Laplace (``rng`` then only drives
            the contribution sampling).
        lowercase: BERT uncased normalization.

    Implements the paper's Section 3.2 (DP vocabulary), generalised to k words per contributor and to
    user-level contributors. Claim: (epsilon, delta)-DP at ``unit`` (``"document"`` or ``"user"``) for the
    histogram; the vocabulary and tokenizer are post-processing.

    Raises:
        InvalidPrivacyParameter: ``epsilon`` not > 0 and finite, or ``delta`` outside (0, 1); (``build``)
            ``delta >= 1/n_contributors``.
        InvalidArgument: another argument out of range, an unknown ``unit`` / ``noise`` / ``neighbouring``,
            ``secure=True`` with Gaussian noise; (``build``) ``unit="user"`` without ``contributor_ids``.
        MalformedInput: (``build``) an empty corpus.
    """

    paper = PAPER
    paired_attacks = ("vocab_membership",)
    threat_models = (THREAT_MODEL,)
    scenario = "vocab.membership"

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        max_words_per_contributor: int = 32,
        *,
        unit: str = "document",
        noise: str = "laplace",
        neighbouring: str = "add/remove",
        vocab_size: int = 8000,
        count_scale: float = 1.0,
        secure: bool = False,
        lowercase: bool = True,
    ) -> None:
        check_range(
            "epsilon",
            epsilon,
            0.0,
            math.inf,
            lo_inclusive=False,
            hi_inclusive=False,
            error=InvalidPrivacyParameter,
        )
        check_range(
            "delta",
            delta,
            0.0,
            1.0,
            lo_inclusive=False,
            hi_inclusive=False,
            error=InvalidPrivacyParameter,
        )
        check_range(
            "max_words_per_contributor (k)",
            max_words_per_contributor,
            1,
            math.inf,
            integer=True,
            hi_inclusive=False,
        )
        if unit not in ("document", "user"):
            raise InvalidArgument(f"unit must be 'document' or 'user'; got {unit!r}")
        if noise not in ("laplace", "gaussian"):
            raise InvalidArgument(f"noise must be 'laplace' or 'gaussian'; got {noise!r}")
        if neighbouring not in ("add/remove", "replace-one"):
            raise InvalidArgument(
                f"neighbouring must be 'add/remove' or 'replace-one'; got {neighbouring!r}"
            )
        need = min_vocab_size([], PUBLIC_ALPHABET, SPECIAL_TOKENS)
        check_range("vocab_size", vocab_size, need, math.inf, integer=True, hi_inclusive=False)
        check_range(
            "count_scale", count_scale, 0.0, math.inf, lo_inclusive=False, hi_inclusive=False
        )
        if secure and noise != "laplace":
            raise InvalidArgument("secure=True supports noise='laplace' only; got noise='gaussian'")
        self.epsilon = epsilon
        self.delta = delta
        self.max_words_per_contributor = max_words_per_contributor
        self.unit = unit
        self.noise = noise
        self.neighbouring = neighbouring
        self.vocab_size = vocab_size
        self.count_scale = count_scale
        self.secure = secure
        self.lowercase = lowercase

    # ------------------------------------------------------------------ claim
    def calibration(self) -> NoiseCalibration:
        return calibrate(
            self.noise,
            self.epsilon,
            self.delta,
            int(self.max_words_per_contributor),
            self.neighbouring,
        )

    def claim(self) -> PrivacyClaim:
        cal = self.calibration()
        # The same noise read with the paper's accounting: a per-word (k = 1) guarantee eps/k per
        # word occurrence, composed over the 256 WordPieces of a BERT example (Theorem 1).
        eps_word = self.epsilon / self.max_words_per_contributor
        delta_word = single_contributor_release_probability(cal)
        notes = [
            f"{self.noise} noise scale {cal.scale:.4g}, threshold {cal.threshold:.4g}, at most "
            f"k={self.max_words_per_contributor} distinct words per {self.unit}",
            "the vocabulary and tokenizer are post-processing of the released histogram",
        ]
        if not self.secure:
            notes.append(
                "noise from numpy floating-point samplers (not hardened against floating-point attacks); "
                "secure=True uses OpenDP's discrete Laplace"
            )
        return PrivacyClaim.dp(
            self.epsilon,
            self.delta,
            self.unit,
            neighbouring=self.neighbouring,
            accountant="laplace/gaussian thresholding (partition selection)",
            notes=tuple(notes),
            # who sees the released vocabulary: its recipient and whoever gets a model shipped with the
            # tokenizer; both see the same released histogram (no sampling, no amplification)
            adversaries=vocab_adversary_bounds(
                epsilon=self.epsilon, delta=self.delta, noise=self.noise
            ),
            extra={
                "k": int(self.max_words_per_contributor),
                "noise_scale": cal.scale,
                "threshold": cal.threshold,
                "paper_per_word_epsilon": eps_word,
                "paper_per_word_delta": delta_word,
                "paper_example256_epsilon": 256 * eps_word,
                "paper_example256_delta": min(1.0, 256 * delta_word),
            },
        )

    def release_event(self) -> ThresholdRelease:
        """The ledger event of one release (:class:`~privnlp.accounting.ThresholdRelease`): the
        calibrated noise and threshold, from which the ledger derives (epsilon, delta) itself."""
        # deferred: the accounting pulls dp_accounting + scipy (~2 s) and this module sits on the CLI's
        # light path (``privnlp vocab`` imports it at its top); only a ledger-charging build needs it
        from privnlp.accounting.events import ThresholdRelease

        cal = self.calibration()
        return ThresholdRelease(
            cal.noise, cal.scale, cal.threshold, cal.k, cal.neighbouring, cal.delta, self.unit
        )

    def _charge(self, ledger: DPLedger | None, target_epsilon: float | None) -> None:
        """Charge one release to ``ledger`` before anything is released (refused over the budget)."""
        if ledger is None:
            if target_epsilon is not None:
                raise InvalidArgument("target_epsilon needs a ledger (ledger=DPLedger())")
            return
        if not callable(getattr(ledger, "charge", None)):
            raise InvalidArgument(
                f"ledger must be a privnlp.accounting.DPLedger; got {type(ledger).__name__}"
            )
        ledger.charge(self.release_event(), target_epsilon=target_epsilon)

    @classmethod
    def sweep_grid(cls, preset: str = "quick") -> tuple[str, tuple[float, ...]]:
        """The epsilon sweep of the report's privacy-utility curve (membership advantage vs vocabulary overlap)."""
        return (
            "epsilon",
            (0.25, 1.0, 4.0, 16.0)
            if preset == "quick"
            else (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
        )

    @classmethod
    def example(cls, preset: str = "quick") -> DPWordPiece:
        if preset == "quick":
            return cls(epsilon=1.0, delta=1e-5, max_words_per_contributor=8, vocab_size=600)
        return cls(epsilon=1.0, delta=1e-6, max_words_per_contributor=16, vocab_size=2000)

    # ------------------------------------------------------------------ operation
    def _check_contributors(self, n: int) -> None:
        if not (self.delta < 1.0 / n):
            raise InvalidPrivacyParameter(
                f"delta must be in (0, 1/n) = (0, {1.0 / n:.3g}) for n={n} contributors; "
                f"got {self.delta!r}"
            )

    def _histogram(self, word_sets: list[list[str]], *, rng: Any) -> NoisyHistogram:
        n = len(word_sets)
        self._check_contributors(n)
        if rng is None:  # the privacy-noise rule (issue #15): no seed given -> OS entropy
            rng = secure_numpy()
        bounded = bound_contributions(word_sets, int(self.max_words_per_contributor), rng=rng)
        hist = contributor_histogram(bounded)
        return release_histogram(
            hist, self.calibration(), rng=rng, secure=self.secure, n_contributors=n
        )

    def release_histogram(
        self, texts: Sequence[str], *, contributor_ids: Sequence[Any] | None = None, rng: Any = None
    ) -> NoisyHistogram:
        """Step 1-3 only: the DP word histogram (``rng=None``: noise from the OS entropy pool)."""
        if self.unit == "user" and contributor_ids is None:
            raise InvalidArgument(
                "contributor_ids is required for unit='user' (one user id per text)"
            )
        return self._histogram(
            _split_corpus(texts, contributor_ids if self.unit == "user" else None, self.lowercase),
            rng=rng,
        )

    def build(
        self,
        texts: Sequence[str],
        *,
        contributor_ids: Sequence[Any] | None = None,
        rng: Any = None,
        records: str | None = None,
        seed: int | None = None,
        ledger: DPLedger | None = None,
        target_epsilon: float | None = None,
    ) -> VocabBuild:
        """Release the DP histogram and train the WordPiece tokenizer on it. ``rng=None``: the noise comes from
        the OS entropy pool; a seed / Generator makes a reproducible simulation and the claim says "noise
        seeded" (``secure=True`` draws OpenDP's noise from its CSPRNG whatever ``rng`` is). ``records``:
        how the caller cut its files into documents (e.g. :data:`privnlp.data.loaders.TXT_UNIT_RULES`);
        the claim states it, since the per-document bound holds for documents so defined.

        ``seed`` (instead of ``rng``): contributor ``i`` is bounded with ``default_rng([seed, 0, i])``
        and the threshold noise drawn from ``default_rng([seed, 1])`` — the scheme of the Dask
        map-reduce (:func:`privnlp.mechanisms.text.distributed.build_vocab_dask`), which gives the
        same vocabulary for the same seed. A reproducible simulation ("noise seeded").

        ``ledger`` (a :class:`~privnlp.accounting.DPLedger`): the release is charged to it
        (:meth:`release_event`) before any noise is drawn; with ``target_epsilon`` a release that
        would take the ledger's epsilon above it is refused (:class:`PrivacyBudgetExceeded`) and
        nothing is released."""
        if seed is not None:
            if rng is not None:
                raise InvalidArgument("pass either rng or seed, not both")
            check_range("seed", seed, 0, 2**63 - 1, integer=True)
            if self.unit == "user" and contributor_ids is None:
                raise InvalidArgument(
                    "contributor_ids is required for unit='user' (one user id per text)"
                )
            word_sets = _split_corpus(
                texts, contributor_ids if self.unit == "user" else None, self.lowercase
            )
            k = int(self.max_words_per_contributor)
            hist: Counter = Counter()
            for i, ws in enumerate(word_sets):
                gi = np.random.default_rng([int(seed), 0, i])
                hist.update(bound_contributions([ws], k, rng=gi)[0])
            return self.build_from_counts(
                hist,
                len(word_sets),
                rng=np.random.default_rng([int(seed), 1]),
                records=records,
                ledger=ledger,
                target_epsilon=target_epsilon,
            )
        if self.unit == "user" and contributor_ids is None:
            raise InvalidArgument(
                "contributor_ids is required for unit='user' (one user id per text)"
            )
        word_sets = _split_corpus(
            texts, contributor_ids if self.unit == "user" else None, self.lowercase
        )
        self._check_contributors(len(word_sets))
        self._charge(ledger, target_epsilon)
        h = self._histogram(word_sets, rng=rng)
        tok = train_wordpiece_from_histogram(
            h.counts, int(self.vocab_size), count_scale=self.count_scale, lowercase=self.lowercase
        )
        return VocabBuild(tok, h, self._release_claim(rng, records), config=self.params())

    def build_from_counts(
        self,
        hist: Mapping[str, int],
        n_contributors: int,
        *,
        rng: Any = None,
        records: str | None = None,
        ledger: DPLedger | None = None,
        target_epsilon: float | None = None,
    ) -> VocabBuild:
        """The reduce step: the noisy threshold, drawn once, on contributor counts that were already
        bounded to ``k`` distinct words per contributor (summed over shards), then the tokenizer.

        Args:
            hist: word -> number of contributors using it (each contributor bounded to ``k`` words).
            n_contributors: the number of contributors (checks ``delta < 1/n``).
            rng: the noise (``None`` = OS entropy; a seed / Generator: "noise seeded").
            records: the record rule stated in the claim.
            ledger: charged with the release before the noise is drawn (see :meth:`build`).
            target_epsilon: refuse the release when the ledger would exceed it (needs ``ledger``).
        """
        check_range("n_contributors", n_contributors, 1, math.inf, integer=True)
        self._check_contributors(int(n_contributors))
        self._charge(ledger, target_epsilon)
        noise = secure_numpy() if rng is None else rng
        h = release_histogram(
            dict(hist),
            self.calibration(),
            rng=noise,
            secure=self.secure,
            n_contributors=int(n_contributors),
        )
        tok = train_wordpiece_from_histogram(
            h.counts, int(self.vocab_size), count_scale=self.count_scale, lowercase=self.lowercase
        )
        return VocabBuild(tok, h, self._release_claim(rng, records), config=self.params())

    def _release_claim(self, rng: Any, records: str | None) -> PrivacyClaim:
        """The claim of one release: "noise seeded" for a seeded ``rng``, the record rule as a note."""
        claim = self.claim()
        if noise_is_seeded(rng) and not self.secure and claim.kind.value == "dp":
            claim = dataclasses.replace(claim, noise_seeded=True)
        if records:
            claim = dataclasses.replace(
                claim, notes=claim.notes + (f"a {self.unit}'s records: {records}",)
            )
        return claim


def build_nonprivate_wordpiece(
    texts: Sequence[str], vocab_size: int, *, lowercase: bool = True
) -> VocabBuild:
    """The non-private baseline: WordPiece on the raw occurrence histogram (no cap, no noise).

    Args:
        texts: the documents.
        vocab_size: the vocabulary size (see :func:`train_wordpiece_from_histogram`).
        lowercase: BERT uncased normalization.

    Returns:
        The build, with claim ``none``.

    Raises:
        InvalidArgument: ``texts`` is a single string or ``vocab_size`` too small.
        MalformedInput: an empty corpus.
    """

    word_sets = _split_corpus(texts, None, lowercase)
    c: Counter = Counter()
    for ws in word_sets:
        c.update(ws)
    h = NoisyHistogram({w: float(v) for w, v in c.items()}, None, len(word_sets))
    tok = train_wordpiece_from_histogram(h.counts, vocab_size, lowercase=lowercase)
    return VocabBuild(
        tok,
        h,
        PrivacyClaim.none("non-private WordPiece baseline"),
        config={"vocab_size": vocab_size},
    )


@LEAKY_TWINS.register("dp_wordpiece")
class LeakyOccurrenceWordPiece(DPWordPiece):
    """DELIBERATELY LEAKY twin of ``dp_wordpiece`` (for tests): counts word *occurrences* with no
    contribution cap and thresholds at 1 (forgets the ``ln(k/2delta)`` term), yet claims the same
    guarantee. A word used by a single document is released about half the time.

    Args:
        epsilon: the claimed epsilon; > 0 and finite.
        delta: the claimed delta, in (0, 1).
        max_words_per_contributor: the claimed k (ignored by the histogram), an integer >= 1.
        unit: ``"document"`` or ``"user"``.
        noise: ``"laplace"`` or ``"gaussian"``.
        neighbouring: ``"add/remove"`` or ``"replace-one"``.
        vocab_size: WordPiece vocabulary size.
        count_scale: count multiplier fed to the trainer; > 0.
        secure: claimed OpenDP noise (the leaky histogram always uses numpy noise).
        lowercase: BERT uncased normalization.

    Raises:
        InvalidPrivacyParameter: as for :class:`DPWordPiece`.
        InvalidArgument: as for :class:`DPWordPiece`.
    """

    def _histogram(self, word_sets: list[list[str]], *, rng: Any) -> NoisyHistogram:
        c: Counter = Counter()
        for ws in word_sets:
            c.update(ws)
        cal = self.calibration()
        leaky = NoiseCalibration(
            cal.noise,
            cal.scale,
            1.0,
            cal.epsilon,
            cal.delta,
            cal.k,
            cal.neighbouring,
            cal.l0,
            cal.l1,
            cal.l2,
        )
        return release_histogram(c, leaky, rng=rng, n_contributors=len(word_sets))
