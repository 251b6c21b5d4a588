"""Metric-DP word perturbation: multivariate Laplace, regularized Mahalanobis, Vickrey (t) and
the generalized k-neighbour Vickrey mechanism.

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` — Xu, Aggarwal, Feyisetan, Teissier,
"On a Utilitarian Approach to Privacy Preserving Text Generation" (Algorithms 1 and 3,
Theorems 1 and 2). Baselines: Feyisetan et al. 2020 (multivariate Laplace + nearest neighbour)
and Xu et al. 2020 (regularized Mahalanobis noise + nearest neighbour).

Every word ``w`` is perturbed independently: ``phi_hat = phi(w) + Z`` with density
``p(z) ∝ exp(-eps * d(z, 0))`` (uniform direction x Gamma(d, 1/eps) radius; for Mahalanobis the
direction is mapped through ``Sigma_lambda^{1/2}``), then the output is chosen among the nearest
vocabulary neighbours **of the noisy vector alone**. The paper's Algorithm 1 text writes the
candidates as ``argmin over W \\ {w_i}``; excluding the input word makes ``P[M(w) = w] = 0`` while
``P[M(w') = w] > 0``, which breaks Theorem 1 (whose proof partitions R^p by the first/second
neighbour among *all* of W) and the claimed ``t = 0 == Laplace`` reduction. We never exclude it;
the leaky twin :class:`LeakyVickreyExcludesInput` does, and the audit test catches it.

Threat model: the data recipient sees the released text and knows the algorithm, its parameters
and the public vocabulary/embeddings; it wants to recover the original words.
Claim: ``eps * d(phi(w), phi(w'))`` metric DP per word (Euclidean, or the regularized
Mahalanobis metric); for a text of n perturbed words, ``eps * sum_i d(phi(w_i), phi(w'_i))`` over
word-aligned texts of the same length.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np

from privnlp.accounting.adversaries import metric_dp_adversary_bounds
from privnlp.core.claims import Adversary, PrivacyClaim, ThreatModel
from privnlp.core.errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    check_positive,
    check_range,
)
from privnlp.core.protocols import Mechanism
from privnlp.core.registry import LEAKY_TWINS, MECHANISMS
from privnlp.core.report import atomic_write_text
from privnlp.core.rng import (
    as_numpy,
    check_noise_seed_allowed,
    is_secure,
    secure_numpy,
    secure_torch,
)

from .embeddings import (
    CLITICS,
    DEFAULT_STOPWORDS,
    Embeddings,
    _cache_root,
    default_embeddings,
    load_embeddings,
)
from .neighbors import (
    RECALL_TARGET,
    Calibration,
    ExactIndex,
    NeighborResult,
    TorchIndex,
    make_index,
)
from .textio import WORD_RE, SanitizedText, nfc


def _noise_rng(rng: Any) -> np.random.Generator:
    """The privacy-noise rule (issue #15): ``rng=None`` draws from the OS entropy pool; a seed / Generator is
    a reproducible simulation (not private against anyone who knows the seed)."""
    check_noise_seed_allowed(rng)  # PRIVNLP_REFUSE_SEEDED_NOISE=1: deployments refuse seeded noise
    return secure_numpy() if rng is None else as_numpy(rng)


__all__ = [
    "WordMetricDP",
    "LaplaceMetric",
    "Mahalanobis",
    "Vickrey",
    "VickreyK",
    "LeakyVickreyExcludesInput",
    "OOV_POLICIES",
    "PAPER",
]

PAPER = (
    "vickrey-mechanism-metric-dp.txt — Xu, Aggarwal, Feyisetan, Teissier: On a Utilitarian Approach to "
    "Privacy Preserving Text Generation (Vickrey mechanism, Algorithms 1-3, Theorems 1-2)"
)
OOV_POLICIES = ("random", "mask", "keep")
INDEXES = ("auto", "exact", "faiss", "hnsw")
#: a device index's search batch in blocks (at least ``batch_tokens``): the blocks of one query pipeline
DEVICE_SEARCH_BLOCKS = 8
_PROBE_SEED = 31  # the public seed of the recall probe (issue #31)


def _available_ann() -> str:
    """The approximate index ``index="auto"`` uses: faiss, else hnswlib, else exact."""
    for mod, kind in (("faiss", "faiss"), ("hnswlib", "hnsw")):
        if importlib.util.find_spec(mod) is not None:
            return kind
    return "exact"


#: vocabulary of the card examples (GloVe's most frequent words; the paper's IMDb setup has 22k words)
EXAMPLE_VOCAB = {"quick": 20_000, "full": 100_000}

THREAT = ThreatModel(
    adversary=Adversary.DATA_RECIPIENT,
    observes=("the sanitized text",),
    knows=(
        "the mechanism and its parameters (epsilon, t)",
        "the public vocabulary and embeddings",
        "a prior over words (informative adversary)",
    ),
    goal="recover the original words (Bayesian inversion, Section 3.1)",
)


class WordMetricDP(Mechanism):
    """Base of the word-level metric-DP mechanisms (noise + nearest-neighbour selection).

    Args:
        epsilon: privacy parameter (> 0), per word, in units of the embedding metric.
        embeddings: an :class:`Embeddings`, a path loadable by :func:`load_embeddings`, or ``None``
            for the default vectors: GloVe 6B 50-d (``privnlp[vectors]``, memory-mapped), else the
            bundled word2vec model (trained on the bundled corpus; with a warning).
        vocab_limit: keep only the N most frequent vocabulary words (the paper's setting); ``None`` = all.
        index: ``"auto"`` (default), ``"exact"``, ``"hnsw"`` or ``"faiss"``. ``"auto"``: the exact index for
            a vocabulary of at most ``auto_exact_vocab`` words or an input of at most
            ``auto_exact_words`` words (:meth:`plan_index`), else faiss IVF (hnswlib, then exact, when
            faiss is not installed). An approximate index is post-processing of the noisy vector (same
            claim); its ``nprobe`` / ``ef`` is calibrated to top-k recall >= ``recall_target`` on a public
            probe (noisy vocabulary vectors at this epsilon), recorded in :meth:`index_report`, the
            sidecar and the claim's notes.
        oov: out-of-vocabulary policy: ``"random"`` (a uniformly random vocabulary word),
            ``"mask"`` (``mask_token``) or ``"keep"`` (verbatim; opt-in, recorded in the claim).
        mask_token: the token used by ``oov="mask"``.
        redactable: only these words are perturbed (e.g. the IMDb redactable set); ``None`` = all.
        skip_stopwords: release stop words verbatim (recorded in the claim).
        lowercase: look words up lower-cased (outputs are vocabulary words).
        ann_ef: hnswlib query breadth for ``index="hnsw"``, an integer in [1, 100000]; ``None`` = calibrated.
        batch_tokens: tokens per noise/search batch, an integer in [1, 2**24].
        ann_nprobe: faiss IVF lists scanned per query, an integer in [1, 2**20]; ``None`` = calibrated.
        recall_target: the top-k recall a calibrated approximate index must reach, in [0.5, 1].
        auto_exact_words: ``index="auto"`` stays exact for inputs of at most this many words (>= 0).
        auto_exact_vocab: ``index="auto"`` stays exact for vocabularies of at most this many words (>= 2).
        redact_pii: run privnlp's PII redaction (:class:`~privnlp.mechanisms.pii.PIIRedactor`, regex
            recognizers, placeholders) on each text first; the placeholders are released verbatim and
            the claim states the composition.
        device: ``"cpu"`` (default) or a torch device (``"cuda"``): the exact nearest neighbours on the
            device (:class:`~privnlp.mechanisms.text.neighbors.TorchIndex`: float32 GEMM + top-k there,
            certified float64 re-rank of the candidates), the same answer as the CPU exact index for
            the same noisy vectors. ``"torch-cpu"`` runs that torch path on the CPU (for checks). Any
            ``index`` other than ``"auto"`` / ``"exact"`` is refused with a device.
        device_noise: with a ``device``: the whole mechanism runs there (default ``True``): the noise
            and the selection uniforms are drawn by a torch generator on the device (OS entropy, or
            seeded from ``rng``: reproducible on the same device kind, torch version and ``batch_tokens``,
            not equal to the CPU's numpy draws; the secure generator holds 63 bits of OS entropy, the
            CPU's numpy one 256), the nearest neighbours and the choice computed there; queries whose
            float64 order is within rounding of a tie are answered by the CPU exact index. ``False``:
            numpy draws on the host, as on the CPU, so ``rng`` gives identical output on every device.
            ``sanitize_many(seed=...)`` / ``--seed`` (one generator per record) always draw on the host.

    Raises:
        InvalidPrivacyParameter: ``epsilon`` not > 0 and finite.
        InvalidArgument: an unknown ``index`` / ``oov``, an argument out of range, or ``embeddings`` of
            another type; (at use) a vocabulary of fewer than 2 words.
    """

    paper: ClassVar[str] = PAPER
    paired_attacks: ClassVar[tuple[str, ...]] = ("bayesian_inversion",)
    threat_models: ClassVar[tuple[ThreatModel, ...]] = (THREAT,)
    scenario: ClassVar[str | None] = (
        "text.licenses"  # real English text on the default vectors (issue #16)
    )
    metric_name: ClassVar[str] = "euclidean"
    n_candidates: ClassVar[int] = 1

    def __init__(
        self,
        epsilon: float = 10.0,
        *,
        embeddings: Embeddings | str | None = None,
        index: str = "auto",
        oov: str = "random",
        mask_token: str = "[MASK]",
        redactable: Iterable[str] | None = None,
        skip_stopwords: bool = False,
        lowercase: bool = True,
        ann_ef: int | None = None,
        batch_tokens: int = 4096,
        ann_nprobe: int | None = None,
        vocab_limit: int | None = None,
        recall_target: float = RECALL_TARGET,
        auto_exact_words: int = 20_000,
        auto_exact_vocab: int = 50_000,
        device: str = "cpu",
        redact_pii: bool = False,
        device_noise: bool = True,
    ) -> None:
        check_positive("epsilon", epsilon, error=InvalidPrivacyParameter)
        if index not in INDEXES:
            raise InvalidArgument(f"index must be one of {INDEXES}; got {index!r}")
        if oov not in OOV_POLICIES:
            raise InvalidArgument(f"oov must be one of {OOV_POLICIES}; got {oov!r}")
        if ann_ef is not None:
            check_range("ann_ef", ann_ef, 1, 100000, integer=True)
        check_range("batch_tokens", batch_tokens, 1, 1 << 24, integer=True)
        if ann_nprobe is not None:
            check_range("ann_nprobe", ann_nprobe, 1, 1 << 20, integer=True)
        check_range("recall_target", recall_target, 0.5, 1.0)
        check_range("auto_exact_words", auto_exact_words, 0, math.inf, integer=True)
        check_range("auto_exact_vocab", auto_exact_vocab, 2, math.inf, integer=True)
        if not isinstance(device, str) or not device:
            raise InvalidArgument(f"device must be 'cpu' or a torch device string; got {device!r}")
        if device != "cpu" and index not in ("auto", "exact"):
            raise InvalidArgument(
                f"device={device!r} runs the exact search on the device; index must be 'auto' or "
                f"'exact', got {index!r}"
            )
        if vocab_limit is not None:
            check_range("vocab_limit", vocab_limit, 2, math.inf, integer=True)
        if embeddings is not None and not isinstance(embeddings, (Embeddings, str, os.PathLike)):
            hint = (
                "; wrap gensim vectors with Embeddings.from_keyed_vectors(model.wv)"
                if hasattr(embeddings, "wv") or hasattr(embeddings, "index_to_key")
                else ""
            )
            raise InvalidArgument(
                f"embeddings must be an Embeddings, a path or None; got "
                f"{type(embeddings).__name__}{hint}"
            )
        self.epsilon = epsilon
        self.embeddings = embeddings
        self.index = index
        self.oov = oov
        self.mask_token = mask_token
        self.redactable = None if redactable is None else frozenset(redactable)
        self.skip_stopwords = skip_stopwords
        self.lowercase = lowercase
        self.ann_ef = ann_ef
        self.batch_tokens = batch_tokens
        self.ann_nprobe = ann_nprobe
        self.vocab_limit = vocab_limit
        self.recall_target = recall_target
        self.auto_exact_words = auto_exact_words
        self.auto_exact_vocab = auto_exact_vocab
        self.device = device
        self.redact_pii = bool(redact_pii)
        self.device_noise = bool(device_noise)

    # -- resources (public, computed lazily once) --------------------------------------
    def resolve_embeddings(self) -> Embeddings:
        e = self.__dict__.get("_emb")
        if e is None:
            lim = self.vocab_limit
            if self.embeddings is None:
                e = default_embeddings(lim)
            elif isinstance(self.embeddings, Embeddings):
                e = self.embeddings
                if lim is not None and lim < len(e):
                    e = e.restrict(top_k=lim)
            else:
                e = load_embeddings(self.embeddings, limit=lim)
            if len(e) < 2:
                raise InvalidArgument(f"embeddings: need at least 2 vocabulary words; got {len(e)}")
            self.__dict__["_emb"] = e
        return e

    def plan_index(self, expected_words: int | None = None) -> str:
        """Resolve ``index="auto"`` once, for an input of about ``expected_words`` words (``None``:
        unknown, treated as large), and build / calibrate the index. ``sanitize_file`` plans from the
        file size; a ``sanitize`` / ``sanitize_many`` / ``perturb_ids`` call that finds no plan plans
        from its own number of words (a short text stays exact). Returns the index kind in use
        (``"exact"``, ``"faiss"`` or ``"hnsw"``); later calls return the same. Only the speed and the
        top-k recall depend on this choice, never the claim (an index is post-processing)."""
        kind = self.__dict__.get("_index_kind")
        if kind is None:
            kind, why = self.index, f"index={self.index!r} given"
            if self.device != "cpu":
                kind, why = "torch", f"exact search on device {self.device!r}"
            elif kind == "auto":
                n = len(self.resolve_embeddings())
                if n <= self.auto_exact_vocab:
                    kind, why = "exact", f"auto: vocabulary of {n} <= {self.auto_exact_vocab} words"
                elif expected_words is not None and expected_words <= self.auto_exact_words:
                    kind, why = (
                        "exact",
                        f"auto: input of about {expected_words} <= {self.auto_exact_words} words",
                    )
                else:
                    kind = _available_ann()
                    size = "unknown size" if expected_words is None else f"~{expected_words} words"
                    why = f"auto: vocabulary of {n} words, input of {size}"
                    if kind == "exact":
                        why += " (neither faiss nor hnswlib installed)"
            self.__dict__["_index_kind"] = kind
            self.__dict__["_index_why"] = why
        self._nn()
        return kind

    def _nn(self) -> Any:
        nn = self.__dict__.get("_nn_index")
        if nn is None:
            kind = self.__dict__.get("_index_kind") or self.plan_index_kind_only()
            emb = self.resolve_embeddings()
            if kind == "exact":
                nn = make_index(emb, "exact")
            elif kind == "torch":  # "torch-cpu": the device path run on the CPU (tests, checks)
                # blocks of at most batch_tokens queries: the device holds one block x vocabulary score matrix
                nn = make_index(
                    emb,
                    "torch",
                    device=self.device.removeprefix("torch-"),
                    block=min(8192, int(self.batch_tokens)),
                )
            else:
                fixed = self.ann_ef if kind == "hnsw" else self.ann_nprobe
                nn = make_index(
                    emb,
                    kind,
                    recall_target=float(self.recall_target),
                    **({"ef": fixed} if kind == "hnsw" else {"nprobe": fixed}),
                )
                if fixed is None:  # calibrated on the public probe (cached on disk)
                    self.__dict__["_calibration"] = self._calibrate(nn, kind)
            self.__dict__["_nn_index"] = nn
        return nn

    def plan_index_kind_only(self) -> str:
        """The index kind without an input size (``auto`` then treats the input as large)."""
        self.__dict__.pop("_nn_index", None)
        kind = self.index
        if self.device != "cpu":
            kind = "torch"
            self.__dict__["_index_why"] = f"exact search on device {self.device!r}"
        elif kind == "auto":
            n = len(self.resolve_embeddings())
            kind = "exact" if n <= self.auto_exact_vocab else _available_ann()
            self.__dict__["_index_why"] = f"auto: vocabulary of {n} words, input size not given"
        else:
            self.__dict__["_index_why"] = f"index={self.index!r} given"
        self.__dict__["_index_kind"] = kind
        return kind

    #: probe size of the recall calibration (2 x 2,000 ids: the 95% lower bound is ~0.003 under the
    #: point estimate near 0.99)
    probe_size: ClassVar[int] = 2000

    def probe_queries(self, n: int | None = None) -> np.ndarray:
        """Public probe for the recall calibration: ``n`` noisy vectors of vocabulary words drawn with
        frequency weights (the corpus counts, else ``1 / (rank + 10)``: vectors files are sorted by
        frequency), noised by this mechanism's noise at its epsilon from a fixed public seed. No
        private data is touched; the probe is not privacy noise."""
        emb = self.resolve_embeddings()
        n = int(self.probe_size if n is None else n)
        g = np.random.default_rng(_PROBE_SEED)
        if emb.counts is not None and np.asarray(emb.counts).sum() > 0:
            w = np.asarray(emb.counts, dtype=np.float64)
        else:
            w = 1.0 / (np.arange(len(emb), dtype=np.float64) + 10.0)
        rows = g.choice(len(emb), size=n, p=w / w.sum())
        return emb.vectors[rows] + self._draw_noise(n, g, np.float32)

    def _noise_key(self) -> str:
        return f"{self.metric_name}:{float(self.epsilon)!r}"

    def _calibrate(self, nn: Any, kind: str) -> Any:
        """Calibrate ``nn`` on :meth:`probe_queries`; cached on disk by the vectors' fingerprint, the
        index parameters, the noise (metric, epsilon), k, the target and the probe size."""
        emb = self.resolve_embeddings()
        k = self._k_needed()
        spec = (
            f"faiss:{nn.resolved_factory()}:{nn.seed}"
            if kind == "faiss"
            else f"hnsw:{nn.M}:{nn.ef_construction}:{nn.seed}"
        )
        key = hashlib.sha256(
            f"v1|{emb.fingerprint()}|{len(emb)}|{spec}|{self._noise_key()}|{k}|"
            f"{float(self.recall_target)!r}|{self.probe_size}|{_PROBE_SEED}".encode()
        ).hexdigest()[:24]
        path = _cache_root() / "ann_calibration" / f"{key}.json"
        cal = None
        if path.exists():
            try:
                cal = Calibration.from_dict(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError):
                cal = None
        if cal is None:
            cal = nn.calibrate(self.probe_queries(), k)
            try:
                atomic_write_text(path, json.dumps(cal.to_dict()) + "\n")
            except OSError:
                pass
        attr = "_ef_cal" if kind == "hnsw" else "_nprobe_cal"
        nn.__dict__[attr] = int(cal.value)
        return cal

    def _k_needed(self) -> int:
        return int(self.n_candidates)

    def index_report(self) -> dict[str, Any]:
        """What index answers the nearest-neighbour queries and why (for the sidecar)."""
        nn = self._nn()
        kind = self.__dict__["_index_kind"]
        rep: dict[str, Any] = {
            "requested": self.index,
            "kind": kind,
            "why": self.__dict__.get("_index_why"),
        }
        if kind == "faiss":
            rep["factory"] = nn.resolved_factory()
            rep["nprobe"] = nn.resolved_nprobe()
        elif kind == "hnsw":
            rep["ef"] = nn.resolved_ef()
        cal = self.__dict__.get("_calibration")
        if cal is not None:
            rep["calibration"] = {
                **cal.to_dict(),
                "probe": f"{cal.probe_queries} noisy vocabulary vectors (frequency-weighted words, "
                f"this mechanism's noise at epsilon={float(self.epsilon):g}, public seed {_PROBE_SEED})",
            }
        elif kind != "exact":
            rep["calibration"] = None  # fixed by the caller: recall not measured here
        return rep

    def params(self) -> dict[str, Any]:
        p = super().params()
        if isinstance(self.embeddings, Embeddings):
            p["embeddings"] = (
                f"Embeddings({self.embeddings.source or 'in-memory'}, n={len(self.embeddings)}, "
                f"dim={self.embeddings.dim}, sha={self.embeddings.fingerprint()})"
            )
        if self.redactable is not None:
            p["redactable"] = f"{len(self.redactable)} words"
        return p

    # -- noise ---------------------------------------------------------------------------
    def _shape_noise(self, u: np.ndarray) -> np.ndarray:
        """Map unit directions to the metric's unit ball (identity for Euclidean)."""
        return u

    #: rows per noise chunk; batches above one chunk are drawn by child generators (seeded from
    #: ``rng``, so the result depends on ``rng`` only, never on the thread count) on up to
    #: ``noise_threads`` threads (numpy releases the GIL while filling)
    noise_chunk: ClassVar[int] = 2048
    noise_threads: ClassVar[int] = max(1, min(8, os.cpu_count() or 1))

    def sample_noise(self, n: int, *, rng: Any = None, dtype: Any = np.float32) -> np.ndarray:
        """``n`` noise vectors with density ∝ exp(-eps d(z, 0)): uniform direction x Gamma(d, 1/eps)."""
        return self._draw_noise(n, _noise_rng(rng), dtype)

    def _draw_noise(self, n: int, g: np.random.Generator, dtype: Any = np.float32) -> np.ndarray:
        d = self.resolve_embeddings().dim
        ft = np.float32 if dtype == np.float32 else np.float64
        u = np.empty((n, d), dtype=ft)
        r = g.gamma(shape=d, scale=1.0 / float(self.epsilon), size=n)
        ch = int(self.noise_chunk)

        def fill(gen: np.random.Generator, lo: int, hi: int) -> None:
            v = u[lo:hi]
            gen.standard_normal(out=v, dtype=ft)
            nrm = np.sqrt(np.einsum("ij,ij->i", v, v))
            nrm[nrm == 0] = 1.0
            v *= (r[lo:hi] / nrm).astype(ft)[:, None]

        if n <= ch:
            fill(g, 0, n)
        else:
            spans = [(a, min(n, a + ch)) for a in range(0, n, ch)]
            seeds = g.integers(0, 2**63 - 1, size=len(spans))
            kids = [np.random.default_rng(int(sd)) for sd in seeds]
            nt = min(int(self.noise_threads), len(spans))
            if nt > 1:
                with ThreadPoolExecutor(nt) as pool:
                    list(pool.map(lambda i: fill(kids[i], *spans[i]), range(len(spans))))
            else:
                for kid, (a, b) in zip(kids, spans):
                    fill(kid, a, b)
        return self._shape_noise(u).astype(dtype, copy=False)

    def _shape_noise_t(self, u: Any) -> Any:
        """:meth:`_shape_noise` in torch (identity for Euclidean)."""
        return u

    def sample_noise_torch(self, n: int, generator: Any) -> Any:
        """:meth:`sample_noise` drawn by a torch ``generator`` on its device: ``(n, d)`` float32, density
        ∝ exp(-eps d(z, 0)) (uniform direction x Gamma(d, 1/eps) radius, then :meth:`_shape_noise`).

        The radius is ``||N(0, I_2d)||^2 / (2 eps)`` from float64 normals: exactly Gamma(d, 1/eps) for the
        integer d (a chi-square with 2d degrees of freedom is Gamma(d, 2)), public torch API, and no
        float32 uniforms inside (torch's CUDA gamma kernel draws float32 ``curand`` variates)."""
        import torch  # heavy: only for the device path

        check_range("n", n, 0, math.inf, integer=True)
        d = self.resolve_embeddings().dim
        dev = generator.device
        u = torch.randn((int(n), d), generator=generator, device=dev, dtype=torch.float32)
        g2 = torch.randn((int(n), 2 * d), generator=generator, device=dev, dtype=torch.float64)
        r = (g2 * g2).sum(1) / (2.0 * float(self.epsilon))
        del g2
        nrm = torch.linalg.vector_norm(u, dim=1).to(torch.float64)
        nrm = torch.where(nrm == 0, torch.ones_like(nrm), nrm)
        u *= (r / nrm).to(torch.float32)[:, None]
        return self._shape_noise_t(u)

    # -- the whole mechanism on a device (issue #31 item 3) -----------------------------------
    def _on_device(self) -> bool:
        """Whether the device pipeline runs this mechanism exactly: a device index, ``device_noise``,
        and noise / search / selection that all have their torch twins here (a subclass that overrides
        one without the other, such as a leaky twin, keeps the host path)."""
        if not self.device_noise or not isinstance(self._nn(), TorchIndex):
            return False
        cls = type(self)

        def owner(name: str) -> type:
            return next(c for c in cls.__mro__ if name in c.__dict__)

        return (
            owner("sample_noise") is WordMetricDP
            and owner("_draw_noise") is WordMetricDP
            and owner("_shape_noise") is owner("_shape_noise_t")
            and all(
                owner(name) is owner("_selection_probs_t")
                for name in ("selection_probs", "first_probability", "_choice_window")
                if hasattr(cls, name)
            )
            and owner("_neighbors") is owner("_search_k")
            and owner("_choose_u") is WordMetricDP
            and owner("_choose") is WordMetricDP
        )

    def _torch_generator(self, g: np.random.Generator) -> Any:
        """The device generator of a run: fresh OS entropy when ``g`` is the secure generator, else
        seeded from ``g`` (a reproducible simulation stays one)."""
        import torch

        dev = self._nn()._prep()["E"].device
        if is_secure(g):
            return secure_torch(dev)
        return torch.Generator(device=dev).manual_seed(int(g.integers(0, 2**63 - 1)))

    def _perturb_on_device(self, ids: np.ndarray, generator: Any, *, keep: bool = False) -> Any:
        """Perturb vocabulary rows with noise, search and choice on the device, in blocks of the
        index's ``block`` queries. Returns the output ids (numpy); with ``keep`` also the noisy vectors
        and the selection uniforms (numpy), for the equality check against the CPU exact path."""
        import torch

        nn = self._nn()
        E = nn._prep()["E"]
        k = self._search_k()
        n = int(ids.size)
        ids_t = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(E.device)
        out = torch.empty(n, dtype=torch.int64, device=E.device)
        kept_q, kept_u = [], []
        n_bad = 0
        for s in range(0, n, int(nn.block)):
            b = ids_t[s : s + int(nn.block)]
            q = E[b] + self.sample_noise_torch(b.numel(), generator)
            u = torch.rand(b.numel(), generator=generator, device=E.device, dtype=torch.float64)
            cid, d2, bad = nn.search_device(q, k)
            dist = torch.sqrt(d2)
            p = self._selection_probs_t(dist)
            if p.shape[1] == 1:
                out[s : s + b.numel()] = cid[:, 0]
            else:
                c = torch.cumsum(p, dim=1)[:, :-1]
                r = (u[:, None] >= c).sum(dim=1)
                out[s : s + b.numel()] = cid.gather(1, r[:, None])[:, 0]
                # a uniform within rounding of a boundary: the CPU's float64 probabilities decide
                win = self._choice_window(dist)
                win = win[:, None] if isinstance(win, torch.Tensor) else win
                bad |= ((u[:, None] - c).abs() <= win).any(dim=1)
            if bool(
                bad.any()
            ):  # rare: the CPU exact path for these rows, same noisy vectors, same u
                rows = torch.nonzero(bad)[:, 0]
                qb = q[rows].cpu().numpy()
                nb = ExactIndex(self.resolve_embeddings()).query(qb, k)
                fix = self._choose_u(nb, u[rows].cpu().numpy())
                out[s + rows] = torch.from_numpy(fix).to(E.device)
                n_bad += int(rows.numel())
            if keep:
                kept_q.append(q.cpu().numpy())
                kept_u.append(u.cpu().numpy())
        self.__dict__["_last_device_fallback"] = n_bad
        res = out.cpu().numpy()
        if not keep:
            return res
        d = self.resolve_embeddings().dim
        q_all = np.concatenate(kept_q) if kept_q else np.zeros((0, d), np.float32)
        u_all = np.concatenate(kept_u) if kept_u else np.zeros(0)
        return res, q_all, u_all

    # -- selection (the part that differs between mechanisms) ---------------------------
    def _neighbors(self, noisy: np.ndarray, ids: np.ndarray) -> NeighborResult:
        return self._nn().query(noisy, self.n_candidates)

    def selection_probs(self, nb: NeighborResult) -> np.ndarray:
        """``(B, k)`` probabilities of returning each candidate (functions of the noisy vector only)."""
        return np.ones((nb.ids.shape[0], 1))

    def _selection_probs_t(self, d: Any) -> Any:
        """:meth:`selection_probs` in torch, from the ``(B, k)`` float64 distances on the device."""
        return d[:, :1].new_ones((d.shape[0], 1))

    def _search_k(self) -> int:
        """Neighbours per query of :meth:`_neighbors`."""
        return int(self.n_candidates)

    def _choice_window(self, d: Any) -> Any:
        """Per row, a bound on how far the device's cumulative selection probabilities can be from the
        CPU's (the distances differ by a few ulps between summation orders): a uniform closer than this
        to a boundary is decided on the CPU. Only used with more than one candidate."""
        return 1e-12

    def _choose(self, nb: NeighborResult, g: np.random.Generator) -> np.ndarray:
        p = self.selection_probs(nb)
        if p.shape[1] == 1:
            return nb.ids[:, 0].copy()
        c = np.cumsum(p, axis=1)
        r = (g.random(p.shape[0])[:, None] >= c[:, :-1]).sum(axis=1)
        return nb.ids[np.arange(p.shape[0]), r]

    def _choose_u(self, nb: NeighborResult, u: np.ndarray) -> np.ndarray:
        """:meth:`_choose` with the selection uniforms given (one per row)."""
        p = self.selection_probs(nb)
        if p.shape[1] == 1:
            return nb.ids[:, 0].copy()
        c = np.cumsum(p, axis=1)
        r = (u[:, None] >= c[:, :-1]).sum(axis=1)
        return nb.ids[np.arange(p.shape[0]), r]

    # -- tokenisation that fits the vectors -----------------------------------------------
    def _key(self, piece: str) -> str:
        """The vocabulary key of a word unit: Unicode NFC (so NFD "cafe\u0301" is "café"), the
        typographic apostrophe as ASCII, lower-cased when ``lowercase``."""
        k = nfc(piece).replace("\u2019", "'")
        return k.lower() if self.lowercase else k

    def pieces(self, token: str) -> list[tuple[int, int]]:
        """Split a word token into vector-vocabulary units, as (start, end) offsets in ``token``.

        The whole token first ("don't" in a vocabulary that has it, "well-known", "1,000"); else a
        trailing clitic of the Stanford/GloVe tokenizer ("do"+"n't", "john"+"'s", "we"+"'ll");
        else the runs between hyphens / apostrophes / number separators ("state-of-the-art" ->
        state, of, the, art; "3.75" -> 3, 75). The separators are released verbatim."""
        emb = self.resolve_embeddings()
        k = self._key(token)
        if len(token) <= 1 or k in emb:
            return [(0, len(token))]
        for cl in CLITICS:
            if k.endswith(cl) and len(k) > len(cl) and cl in emb:
                cut = len(token) - len(cl)
                return self.pieces(token[:cut]) + [(cut, len(token))]
        runs = [m.span() for m in _RUN_RE.finditer(token)]
        return runs if len(runs) > 1 else [(0, len(token))]

    def coverage(self, texts: Iterable[str]) -> tuple[int, int]:
        """``(units, oov)``: vocabulary units of ``texts`` as :meth:`sanitize` sees them and how many
        have no vector (no noise drawn, no index built)."""
        emb = self.resolve_embeddings()
        n = o = 0
        for t in texts:
            for mt in WORD_RE.finditer(t):
                a = mt.start()
                for pa, pb in self.pieces(mt.group()):
                    n += 1
                    o += emb.id_of(self._key(t[a + pa : a + pb])) < 0
        return n, o

    # -- the operation -------------------------------------------------------------------
    def perturb_ids(self, ids: Sequence[int] | np.ndarray, *, rng: Any = None) -> np.ndarray:
        """Perturb vocabulary row ids (all in range); vectorised in batches of ``batch_tokens``."""
        g = _noise_rng(rng)
        emb = self.resolve_embeddings()
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= len(emb)):
            raise InvalidArgument(f"ids must be in [0, {len(emb) - 1}]")
        if "_index_kind" not in self.__dict__:
            self.plan_index(int(ids.size))
        if self._on_device():
            return self._perturb_on_device(ids, self._torch_generator(g))
        out = np.empty_like(ids)
        bt = int(self.batch_tokens)
        for s in range(0, ids.size, bt):
            b = ids[s : s + bt]
            noisy = emb.vectors[b] + self.sample_noise(b.size, rng=g)
            out[s : s + bt] = self._choose(self._neighbors(noisy, b), g)
        return out

    def perturb_vectors(self, vectors: np.ndarray, *, rng: Any = None) -> np.ndarray:
        """Perturb arbitrary points of R^d (``phi(w)`` of words not in the vocabulary, tests)."""
        g = _noise_rng(rng)
        emb = self.resolve_embeddings()
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2 or v.shape[1] != emb.dim:
            raise InvalidArgument(
                f"vectors must have shape (n, {emb.dim}); got {v.shape} (mismatched dims)"
            )
        noisy = v + self.sample_noise(v.shape[0], rng=g)
        return self._choose(self._nn().query(noisy, self.n_candidates), g)

    def perturb_words(self, words: Sequence[str], *, rng: Any = None) -> list[str]:
        """Perturb a list of words (each one independently); OOV words follow ``oov``."""
        return self._perturb_tokens(list(words), [True] * len(words), _noise_rng(rng))[0]

    def _selected(self, key: str) -> bool:
        if self.redactable is not None and key not in self.redactable:
            return False
        if self.skip_stopwords and key in DEFAULT_STOPWORDS:
            return False
        return True

    def _perturb_tokens(
        self, tokens: list[str], select: list[bool], g: np.random.Generator
    ) -> tuple[list[str], dict]:
        emb = self.resolve_embeddings()
        keys = [self._key(t) for t in tokens]
        out = list(tokens)
        pos, vid, oov_pos = [], [], []
        n_kept = 0
        for i, (k, sel) in enumerate(zip(keys, select)):
            if not (sel and self._selected(k)):
                n_kept += 1
                continue
            j = emb.id_of(k)
            if j < 0:
                oov_pos.append(i)
            else:
                pos.append(i)
                vid.append(j)
        if vid:
            res = self.perturb_ids(np.asarray(vid), rng=g)
            for i, j_out in zip(pos, res):
                out[i] = emb.words[j_out]
            n_changed = int(np.count_nonzero(res != np.asarray(vid)))
        else:
            n_changed = 0
        if oov_pos:
            if self.oov == "random":
                r = g.integers(0, len(emb), size=len(oov_pos))
                for i, j in zip(oov_pos, r):
                    out[i] = emb.words[j]
            elif self.oov == "mask":
                for i in oov_pos:
                    out[i] = self.mask_token
            else:
                n_kept += len(oov_pos)
        return out, {
            "n_perturbed": len(vid),
            "n_changed": n_changed,
            "n_oov": len(oov_pos),
            "n_kept": n_kept,
        }

    def sanitize_many(
        self, texts: Sequence[str], *, rng: Any = None, seed: int | None = None, start: int = 0
    ) -> list[SanitizedText]:
        """Sanitize many texts with one batched perturbation pass (order and count preserved).

        Randomness: ``rng`` (``None`` = OS entropy) is drawn sequentially over all texts; or, with
        ``seed``, record ``i`` draws from its own generator ``default_rng([seed, start + i])`` —
        output independent of how a corpus is chunked or split across processes (``--num-proc``,
        ``datasets.map(num_proc=N)``). A seed is an explicit reproducible simulation ("noise seeded")."""
        for t in texts:
            if not isinstance(t, str):
                raise InvalidArgument(f"texts must be strings; got {type(t).__name__}")
        if seed is not None:
            if rng is not None:
                raise InvalidArgument("pass either rng or seed, not both")
            check_range("seed", seed, 0, 2**63 - 1, integer=True)
            check_range("start", start, 0, 2**63 - 1, integer=True)
            check_noise_seed_allowed(seed)
            gens: Any = [
                np.random.default_rng([int(seed), int(start) + i]) for i in range(len(texts))
            ]
        else:
            gens = _noise_rng(rng)
        return self._sanitize(list(texts), gens)

    def _units_memo(self) -> dict:
        """token -> its units (see :meth:`_token_units`), valid while the vocabulary and the selection
        settings stay the same (a changed attribute starts a new memo)."""
        emb = self.resolve_embeddings()
        sig = (self.lowercase, self.skip_stopwords, self.redactable)
        cur = self.__dict__.get("_memo")
        if cur is None or cur[0] is not emb or cur[1] != sig:
            cur = self.__dict__["_memo"] = (emb, sig, {})
        return cur[2]

    def _token_units(self, tok: str, emb: Embeddings) -> tuple[tuple, int, int]:
        """A word token's vocabulary units ``((start, end, kind, id), ...)`` with kind 0 = released
        verbatim (not selected), 1 = perturbed (``id`` = its vocabulary row), 2 = out of vocabulary;
        and the numbers of perturbed and OOV units."""
        out, m, o = [], 0, 0
        for pa, pb in self.pieces(tok):
            k = self._key(tok[pa:pb])
            if not self._selected(k):
                out.append((pa, pb, 0, -1))
                continue
            j = emb.id_of(k)
            if j < 0:
                out.append((pa, pb, 2, -1))
                o += 1
            else:
                out.append((pa, pb, 1, j))
                m += 1
        return tuple(out), m, o

    def _sanitize(self, texts: list[str], gens: Any) -> list[SanitizedText]:
        emb = self.resolve_embeddings()
        V = len(emb)
        # 1. tokens -> vocabulary units; what happens to each unit
        units = []  # per text: list of (abs_start, abs_end, kind, vocab id) kind: 0 kept, 1 perturbed, 2 oov
        n_m, n_o = [], []
        prot: list[list[tuple[int, int]]] = [[] for _ in texts]
        if self.redact_pii:  # PII -> placeholders first; the placeholders are released verbatim
            texts, prot = self._redact(texts)
        memo = self._units_memo()
        idl: list[int] = []  # vocabulary rows of the perturbed units, in order
        push = idl.append
        for t, pr in zip(texts, prot):
            us, m0, o = [], len(idl), 0
            add = us.append
            for mt in WORD_RE.finditer(t):
                a, e = mt.span()
                if pr and any(x <= a < y for x, y in pr):
                    add((a, e, 0, -1))
                    continue
                tok = t[a:e]
                ent = memo.get(tok)
                if ent is None:  # a deterministic function of the token: computed once per run
                    u, mm, oo = self._token_units(tok, emb)
                    # (units, perturbed, oov, (kind, id) when the token is one unit, else None)
                    one = (u[0][2], u[0][3]) if len(u) == 1 and u[0][1] - u[0][0] == e - a else None
                    ent = memo[tok] = (u, mm, oo, one)
                    if len(memo) > 500_000:  # bounded memory on corpora with many rare tokens
                        memo.clear()
                one = ent[3]
                if one is not None:  # the common case: the token is one unit
                    add((a, e, one[0], one[1]))
                    if one[0] == 1:
                        push(one[1])
                    else:
                        o += ent[2]
                    continue
                for pa, pb, kind, j in ent[0]:
                    add((a + pa, a + pb, kind, j))
                    if kind == 1:
                        push(j)
                o += ent[2]
            units.append(us)
            n_m.append(len(idl) - m0)
            n_o.append(o)
        ids = np.array(idl, dtype=np.int64)
        if "_index_kind" not in self.__dict__:  # not planned by a caller: plan for this input
            self.plan_index(int(ids.size))
        nn = self._nn()
        # 2. randomness: noise, selection uniforms, OOV draws (shared generator or one per record)
        dev_gen = None
        if not isinstance(gens, list) and self._on_device():  # noise and choice on the device
            dev_gen = self._torch_generator(gens)
            oovr = gens.integers(0, V, size=sum(n_o))
        elif isinstance(gens, list):
            noise = np.concatenate(
                [self.sample_noise(m, rng=g) for m, g in zip(n_m, gens)]
                or [np.zeros((0, emb.dim), np.float32)]
            )
            uni = np.concatenate([g.random(m) for m, g in zip(n_m, gens)] or [np.zeros(0)])
            oovr = np.concatenate(
                [g.integers(0, V, size=o) for o, g in zip(n_o, gens)] or [np.zeros(0, np.int64)]
            )
        else:
            noise = self.sample_noise(int(ids.size), rng=gens)
            uni = gens.random(int(ids.size))
            oovr = gens.integers(0, V, size=sum(n_o))
        if dev_gen is not None:
            out = self._perturb_on_device(ids, dev_gen)
        else:
            out = np.empty_like(ids)
            bt = int(self.batch_tokens)
            if isinstance(nn, TorchIndex):
                # host noise (device_noise=False or per-record seeds): the noise is drawn above, so the
                # search batch changes no output: the device index overlaps a block's CPU re-rank with
                # the next block's GEMM only within one query (a 4,096-token batch is one block: device
                # and CPU take turns; perturb_ids' batches measured 77.6k words/s on an H100 where one
                # large query ran 115k). The blocks stay batch_tokens queries (_nn), so the device
                # memory does not grow with the search batch.
                bt = max(bt, DEVICE_SEARCH_BLOCKS * nn.block)
            for s in range(0, ids.size, bt):
                b = ids[s : s + bt]
                noisy = emb.vectors[b] + noise[s : s + bt]
                out[s : s + bt] = self._choose_u(self._neighbors(noisy, b), uni[s : s + bt])
        # 3. detokenise in place, casing of the input applied to the output word
        results, ci, co = [], 0, 0
        words, outl, oovl = emb.words, out.tolist(), oovr.tolist()  # Python ints: fast indexing
        oov_pol, mask = self.oov, self.mask_token
        for t, us in zip(texts, units):
            parts, last = [], 0
            add = parts.append
            n_pert = n_changed = n_oov = n_kept = 0
            oov_words = []
            for a, b, kind, j in us:
                src = t[a:b]
                if kind == 0:
                    nw = src
                    n_kept += 1
                elif kind == 1:
                    w = outl[ci]
                    nw = words[w]
                    n_pert += 1
                    n_changed += w != j
                    ci += 1
                else:
                    n_oov += 1
                    oov_words.append(src)
                    if oov_pol == "random":
                        nw = words[oovl[co]]
                    elif oov_pol == "mask":
                        nw = mask
                    else:
                        nw = src
                        n_kept += 1
                    co += 1
                if kind and nw is not src and nw != mask:
                    if not src.islower():  # all-lowercase input: the word as the vocabulary has it
                        nw = _apply_case(src, nw)
                    if a == last and parts and _is_clitic(src) and not _is_clitic(nw):
                        nw = " " + nw  # "john's" -> "john the" rather than "johnthe"
                add(t[last:a])
                add(nw)
                last = b
            add(t[last:])
            results.append(
                SanitizedText(
                    "".join(parts),
                    len(us),
                    n_perturbed=n_pert,
                    n_changed=int(n_changed),
                    n_oov=n_oov,
                    n_kept=n_kept,
                    oov_words=tuple(oov_words),
                )
            )
        return results

    def _redact(self, texts: list[str]) -> tuple[list[str], list[list[tuple[int, int]]]]:
        """The PII step of ``redact_pii=True``: privnlp's PII redaction (regex recognizers: e-mail,
        phone, SSN, card numbers with Luhn, dates; placeholders), and the placeholder spans."""
        red = self.__dict__.get("_redactor")
        if red is None:
            from privnlp.mechanisms.pii import PIIRedactor  # only when asked for

            red = self.__dict__["_redactor"] = PIIRedactor(regex=True, mode="placeholder")
        out, prot = [], []
        for t in texts:
            r = red.redact(t)
            reps = {rep for _, rep, _ in r.replacements}
            spans = []
            for rep in reps:
                i = r.text.find(rep)
                while i >= 0:
                    spans.append((i, i + len(rep)))
                    i = r.text.find(rep, i + len(rep))
            out.append(r.text)
            prot.append(sorted(spans))
        return out, prot

    def sanitize(self, text: str, *, rng: Any = None, seed: int | None = None) -> SanitizedText:
        """Sanitize one text: perturb the selected words, keep whitespace and punctuation."""
        return self.sanitize_many([text], rng=rng, seed=seed)[0]

    def as_map_function(
        self, column: str = "text", *, rng: Any = None, seed: int | None = None
    ) -> Callable[..., dict]:
        """A function for ``datasets.Dataset.map(fn, batched=True, ...)`` replacing ``column``.

        With ``seed``: call ``ds.map(fn, batched=True, with_indices=True, num_proc=N)``; record ``i``
        draws from ``default_rng([seed, i])``, so the output is the CLI's (``privnlp sanitize
        --seed``) for every ``N`` and batch size. Without it, draws come from ``rng`` (``None`` = OS
        entropy) sequentially."""
        if seed is not None:
            if rng is not None:
                raise InvalidArgument("pass either rng or seed, not both")
            check_range("seed", seed, 0, 2**63 - 1, integer=True)

            def fn_seeded(batch: Mapping[str, Any], indices: Any = None) -> dict:
                if indices is None:
                    raise InvalidArgument(
                        "as_map_function(seed=...) needs ds.map(..., with_indices=True)"
                    )
                vals = batch[column]
                if isinstance(vals, str):
                    return {
                        column: self.sanitize_many([vals], seed=seed, start=int(indices))[0].text
                    }
                idx = [int(i) for i in indices]
                res: list[str] = []
                i = 0
                while i < len(idx):  # runs of consecutive indices share one batched pass
                    j = i + 1
                    while j < len(idx) and idx[j] == idx[j - 1] + 1:
                        j += 1
                    res += [
                        s.text for s in self.sanitize_many(list(vals[i:j]), seed=seed, start=idx[i])
                    ]
                    i = j
                return {column: res}

            return fn_seeded
        g = _noise_rng(rng)

        def fn(batch: Mapping[str, Any]) -> dict:
            vals = batch[column]
            if isinstance(vals, str):
                return {column: self.sanitize(vals, rng=g).text}
            return {column: [s.text for s in self.sanitize_many(list(vals), rng=g)]}

        return fn

    # -- claim ---------------------------------------------------------------------------
    def _claim_notes(self) -> list[str]:
        notes = [
            "released unchanged: the input's word tokens' number and positions, the whitespace and "
            "punctuation between them, and for each token the number of vector-vocabulary units it is "
            "split into (a token with no vector is split at a clitic n't/'s/'ll/... or at hyphens, "
            "apostrophes and number separators, which are released verbatim); each unit is one "
            "perturbed word, so the released word count is the number of units",
            "NOT preserved: the number of whitespace-separated tokens (or of word tokens re-read from the "
            "output); a clitic unit replaced by a word that is not a clitic is set off by a space "
            '("don\'t promise" -> "do did promise": 2 -> 3 whitespace tokens)',
            "a word is a run of Unicode word characters including combining marks, looked up in Unicode "
            'NFC ("cafe\\u0301" is the one word "café" and is replaced whole), lower-cased; the '
            "input's capitalisation pattern is applied to the output word (capitalisation is released)",
        ]
        if self.oov == "keep":
            notes.append(
                "out-of-vocabulary words are released VERBATIM (oov='keep', opt-in): no protection for them"
            )
        elif self.oov == "mask":
            notes.append(
                f"out-of-vocabulary words are replaced by {self.mask_token!r} (reveals that a word was OOV)"
            )
        else:
            notes.append(
                "out-of-vocabulary words are replaced by a uniformly random vocabulary word"
            )
        if self.redactable is not None:
            notes.append(
                f"only the {len(self.redactable)} redactable words are perturbed; other words are released verbatim"
            )
        if self.skip_stopwords:
            notes.append("stop words are released verbatim")
        if self.redact_pii:
            notes.append(
                "PII step first (privnlp PII redaction, regex recognizers: e-mail, phone, SSN, card "
                "numbers, dates): each detected span is replaced by its placeholder ([EMAIL], ...), released "
                "verbatim (it reveals that and where a span of that kind was); the words around it are "
                "perturbed under the metric-DP claim above. The redaction is heuristic (no formal "
                "guarantee): a PII mention the recognizers miss, such as a person's name, is protected "
                "only by the word perturbation, which protects a word against its near neighbours in the "
                "embedding space, so rare names can survive"
            )
        notes.append(self._index_note())
        return notes

    def _index_note(self) -> str:
        kind = self.__dict__.get("_index_kind")
        if kind is None:  # not planned yet
            if self.index == "exact":
                return "exact nearest neighbours"
            return (
                f"nearest neighbours: index={self.index!r} (exact for small inputs / vocabularies; else an "
                f"approximate index calibrated to top-k recall >= {self.recall_target:g}, recorded in the "
                "sidecar); any index is post-processing of the noisy vector, same guarantee"
            )
        if kind in ("exact", "torch"):
            return f"exact nearest neighbours ({self.__dict__.get('_index_why')})"
        rep = self.index_report()
        cal = rep.get("calibration")
        what = (
            f"faiss {rep['factory']}, nprobe={rep['nprobe']}"
            if kind == "faiss"
            else f"hnswlib, ef={rep['ef']}"
        )
        meas = (
            f"top-{cal['k']} recall {cal['recall']:.4f} (95% lower bound {cal['recall_lower95']:.4f}) "
            f"on a probe of {cal['probe_queries']} noisy vocabulary vectors at epsilon={float(self.epsilon):g}"
            if cal
            else "recall not measured (parameter fixed by the caller)"
        )
        return (
            f"approximate nearest neighbours ({what}; {meas}): post-processing of the noisy vector, "
            "same guarantee; a missed neighbour changes which word is released, not the privacy"
        )

    def claim(self, n_words: int | None = None) -> PrivacyClaim:
        """Per word: ``epsilon``-metric-DP w.r.t. the metric. With ``n_words``: the composed claim for
        a text of ``n_words`` perturbed words (sum of per-word distances)."""
        notes = self._claim_notes()
        extra: dict[str, Any] = {"mechanism": self.name}
        extra.update(self._claim_extra())
        e = self.resolve_embeddings()
        extra["embeddings"] = {
            "source": e.source,
            "sha256_16": e.fingerprint(),
            "n_words": len(e),
            "dim": e.dim,
        }
        # issue #28 item 1: the claim names who sees the sanitized text (the same bound for each)
        adversaries = metric_dp_adversary_bounds(
            epsilon=float(self.epsilon),
            metric=self.metric_name,
            words=1 if n_words is None else max(int(n_words), 1),
            threat_models=self.threat_models,
        )
        if n_words is None:
            return PrivacyClaim.metric_dp(
                self.epsilon,
                self.metric_name,
                "word",
                notes=tuple(notes),
                extra=extra,
                adversaries=adversaries,
            )
        check_range("n_words", n_words, 0, math.inf, integer=True)
        extra.update(
            {
                "epsilon_per_word": float(self.epsilon),
                "n_perturbed_words": int(n_words),
                "composition": "sequential over word positions: ratio <= exp(eps * sum_i d(w_i, w'_i))",
            }
        )
        return PrivacyClaim.metric_dp(
            self.epsilon,
            f"{self.metric_name} summed over {int(n_words)} word positions",
            "text",
            notes=tuple(notes),
            extra=extra,
            adversaries=adversaries,
        )

    def _claim_extra(self) -> dict[str, Any]:
        return {}

    @classmethod
    def example(cls, preset: str = "quick") -> WordMetricDP:
        return cls(epsilon=10.0, vocab_limit=EXAMPLE_VOCAB[preset])

    @classmethod
    def sweep_grid(cls, preset: str = "quick") -> tuple[str, tuple[float, ...]]:
        """The epsilon sweep of the report's privacy-utility curve (inference accuracy vs words kept)."""
        return (
            "epsilon",
            (5.0, 10.0, 20.0, 40.0, 80.0)
            if preset == "quick"
            else (2.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0),
        )


@MECHANISMS.register("laplace_metric")
class LaplaceMetric(WordMetricDP):
    """Multivariate Laplace noise + nearest neighbour (Feyisetan et al. 2020): ``t = 0`` of Vickrey.

    Paper: Feyisetan et al. 2020, as the ``t = 0`` case of ``vickrey-mechanism-metric-dp.txt`` Sec. 2
    (Algorithm 1). Claim: epsilon-metric-DP per word (Euclidean metric).

    Args:
        epsilon: the privacy parameter per word, > 0, in units of the embedding metric (Euclidean distance).
        embeddings: an :class:`Embeddings`, a path loadable by :func:`load_embeddings`, or ``None`` (default vectors).
        index: ``"exact"``, ``"hnsw"`` or ``"faiss"`` (approximate search is post-processing of the noisy vector).
        oov: ``"random"``, ``"mask"`` or ``"keep"`` (opt-in, recorded in the claim).
        mask_token: the token used by ``oov="mask"``.
        redactable: only these words are perturbed; ``None`` = all.
        skip_stopwords: release stop words verbatim (recorded in the claim).
        lowercase: look words up lower-cased.
        ann_ef: hnswlib query breadth, an integer in [1, 100000].
        batch_tokens: tokens per noise / search batch, an integer in [1, 2**24].
        ann_nprobe: faiss IVF lists scanned per query, an integer in [1, 2**20].
        vocab_limit: keep only the N most frequent words, an integer >= 2; ``None`` = all.

    Raises:
        InvalidPrivacyParameter: ``epsilon`` not > 0 and finite.
        InvalidArgument: an unknown ``index`` / ``oov`` or another argument out of range.
    """


@MECHANISMS.register("vickrey")
class Vickrey(WordMetricDP):
    """The Vickrey mechanism (Algorithm 1): choose between the first and second nearest neighbours
    of the noisy vector with ``p(first) = (1-t) d2 / (t d1 + (1-t) d2)``; ``t = 0`` is Laplace,
    ``t = 1`` always returns the second neighbour. epsilon-metric-DP for every t (Theorem 1).

    Paper: ``vickrey-mechanism-metric-dp.txt`` Sec. 2 (Algorithm 1, Theorem 1). Claim: epsilon-metric-DP per
    word (Euclidean metric); ``claim(n_words)`` gives the composed claim of a text.

    Args:
        epsilon: the privacy parameter per word, > 0, in units of the Euclidean embedding distance.
        t: the tuning parameter, in [0, 1].
        **kw: the keyword arguments of :class:`WordMetricDP` (``embeddings``, ``vocab_limit``, ``index``,
            ``oov``, ``mask_token``, ``redactable``, ``skip_stopwords``, ``lowercase``, ``ann_ef``,
            ``ann_nprobe``, ``batch_tokens``).

    Raises:
        InvalidPrivacyParameter: ``epsilon`` not > 0 and finite.
        InvalidArgument: ``t`` outside [0, 1], or a keyword argument of :class:`WordMetricDP` out of range.
    """

    n_candidates = 2

    def __init__(self, epsilon: float = 10.0, t: float = 0.5, **kw: Any) -> None:
        check_range("t", t, 0.0, 1.0)
        super().__init__(epsilon, **kw)
        self.t = t

    def first_probability(self, d1: np.ndarray, d2: np.ndarray) -> np.ndarray:
        t = float(self.t)
        num = (1.0 - t) * d2
        den = t * d1 + num
        return np.divide(num, den, out=np.full_like(num, 1.0 - t, dtype=np.float64), where=den > 0)

    def selection_probs(self, nb: NeighborResult) -> np.ndarray:
        p = self.first_probability(nb.dists[:, 0], nb.dists[:, 1])
        return np.stack([p, 1.0 - p], axis=1)

    def _choice_window(self, d: Any) -> Any:
        # p = (1-t) d2 / (t d1 + (1-t) d2): a relative error of a few ulps per distance, ~(dim + 2) 2^-53
        return 1e-12 + 8.0 * (self.resolve_embeddings().dim + 2) * 2.0**-53

    def _selection_probs_t(self, d: Any) -> Any:
        import torch

        t = float(self.t)
        num = (1.0 - t) * d[:, 1]
        den = t * d[:, 0] + num
        p = torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 1.0 - t)
        return torch.stack([p, 1.0 - p], dim=1)

    def _claim_extra(self) -> dict[str, Any]:
        return {"t": float(self.t)}

    @classmethod
    def example(cls, preset: str = "quick") -> Vickrey:
        return cls(epsilon=10.0, t=0.5, vocab_limit=EXAMPLE_VOCAB[preset])


@MECHANISMS.register("vickrey_k")
class VickreyK(WordMetricDP):
    """Generalized Vickrey mechanism (Algorithm 3): among the k nearest neighbours of the noisy
    vector choose the r-th with probability ∝ exp(-t_r d_r). epsilon-metric-DP (Theorem 2).

    Paper: ``vickrey-mechanism-metric-dp.txt`` Sec. 5 (Algorithm 3, Theorem 2). Claim: epsilon-metric-DP per word.

    Args:
        epsilon: the privacy parameter per word, > 0, in units of the Euclidean embedding distance.
        ts: ``t_1 .. t_k`` (k >= 1 candidates), each in [0, inf); a single number means k = 1.
        **kw: the keyword arguments of :class:`WordMetricDP` (``embeddings``, ``vocab_limit``, ``index``,
            ``oov``, ``mask_token``, ``redactable``, ``skip_stopwords``, ``lowercase``, ``ann_ef``,
            ``ann_nprobe``, ``batch_tokens``).

    Raises:
        InvalidPrivacyParameter: ``epsilon`` not > 0 and finite.
        InvalidArgument: ``ts`` empty or an entry outside [0, inf); (at use) k larger than the vocabulary; or
            a keyword argument of :class:`WordMetricDP` out of range.
    """

    def __init__(
        self, epsilon: float = 10.0, ts: Sequence[float] = (0.0, 0.0, 0.0), **kw: Any
    ) -> None:
        ts = tuple(float(x) for x in ts) if not isinstance(ts, (int, float)) else (float(ts),)
        if len(ts) < 1:
            raise InvalidArgument("ts (t_1..t_k) must have k >= 1 entries")
        for i, x in enumerate(ts):
            check_range(f"ts[{i}]", x, 0.0, math.inf, hi_inclusive=False)
        super().__init__(epsilon, **kw)
        self.ts = ts

    @property
    def k(self) -> int:
        return len(self.ts)

    def _k_needed(self) -> int:
        return min(self.k, len(self.resolve_embeddings()))

    def _search_k(self) -> int:
        k = self.k
        if k > len(self.resolve_embeddings()):
            raise InvalidArgument(f"k = len(ts) must be <= the vocabulary size; got {k}")
        return k

    def _neighbors(self, noisy: np.ndarray, ids: np.ndarray) -> NeighborResult:
        return self._nn().query(noisy, self._search_k())

    def perturb_vectors(
        self, vectors: np.ndarray, *, rng: Any = None
    ) -> np.ndarray:  # k candidates here too
        g = _noise_rng(rng)
        v = np.asarray(vectors, dtype=np.float32)
        emb = self.resolve_embeddings()
        if v.ndim != 2 or v.shape[1] != emb.dim:
            raise InvalidArgument(
                f"vectors must have shape (n, {emb.dim}); got {v.shape} (mismatched dims)"
            )
        return self._choose(self._neighbors(v + self.sample_noise(v.shape[0], rng=g), None), g)

    def selection_probs(self, nb: NeighborResult) -> np.ndarray:
        logits = -np.asarray(self.ts)[None, :] * nb.dists
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def _choice_window(self, d: Any) -> Any:
        # softmax of -t_r d_r: a relative error e of the distances moves the logits by t_r d_r e, and
        # the probabilities by about twice the largest of those (reviewed: a fixed 1e-12 was too tight
        # for t d in the hundreds)
        e = 8.0 * (self.resolve_embeddings().dim + 2) * 2.0**-53
        return 1e-12 + e * (1.0 + (d.new_tensor(self.ts)[None, :] * d).amax(dim=1))

    def _selection_probs_t(self, d: Any) -> Any:
        logits = -d.new_tensor(self.ts)[None, :] * d
        logits = logits - logits.max(dim=1, keepdim=True).values
        p = logits.exp()
        return p / p.sum(dim=1, keepdim=True)

    def _claim_extra(self) -> dict[str, Any]:
        return {"ts": list(self.ts), "k": self.k}

    @classmethod
    def example(cls, preset: str = "quick") -> VickreyK:
        return cls(epsilon=10.0, ts=(1.0, 1.0, 1.0), vocab_limit=EXAMPLE_VOCAB[preset])


@MECHANISMS.register("mahalanobis")
class Mahalanobis(WordMetricDP):
    """Regularized Mahalanobis mechanism (Xu et al. 2020): noise density ∝ exp(-eps ||Sigma_l^{-1/2} z||)
    with ``Sigma_l = lam * Sigma + (1 - lam) * I`` (Sigma = sample covariance of the embeddings,
    normalised to trace d), then the Euclidean nearest neighbour. Metric DP w.r.t. the
    regularized Mahalanobis metric ``||Sigma_l^{-1/2}(x - y)||``.

    Paper: Xu et al. 2020 (the regularized Mahalanobis mechanism; cited by ``vickrey-mechanism-metric-dp.txt``).
    Claim: epsilon-metric-DP per word w.r.t. the regularized Mahalanobis metric.

    Args:
        epsilon: the privacy parameter per word, > 0, in units of the regularized Mahalanobis distance.
        lam: lambda, the weight of the sample covariance in ``Sigma_l``, in [0, 1].
        **kw: the keyword arguments of :class:`WordMetricDP` (``embeddings``, ``vocab_limit``, ``index``,
            ``oov``, ``mask_token``, ``redactable``, ``skip_stopwords``, ``lowercase``, ``ann_ef``,
            ``ann_nprobe``, ``batch_tokens``).

    Raises:
        InvalidPrivacyParameter: ``epsilon`` not > 0 and finite.
        InvalidArgument: ``lam`` outside [0, 1], or a keyword argument of :class:`WordMetricDP` out of range.
    """

    metric_name = "mahalanobis"

    def __init__(self, epsilon: float = 10.0, lam: float = 0.2, **kw: Any) -> None:
        check_range("lam", lam, 0.0, 1.0)
        super().__init__(epsilon, **kw)
        self.lam = lam

    def sigma_sqrt(self) -> np.ndarray:
        """``Sigma_lambda^{1/2}`` (symmetric), computed once per vocabulary and lambda."""
        emb = self.resolve_embeddings()
        key = ("mahalanobis_sqrt", float(self.lam))
        if key not in emb._cache:
            X = emb.vectors.astype(np.float64)
            d = X.shape[1]
            if X.shape[0] > 1:
                S = np.atleast_2d(np.cov(X, rowvar=False))
            else:
                S = np.eye(d)
            tr = np.trace(S)
            S = S * (d / tr) if tr > 0 else np.eye(d)
            S = float(self.lam) * S + (1.0 - float(self.lam)) * np.eye(d)
            w, V = np.linalg.eigh(S)
            w = np.clip(w, 0.0, None)
            root = (V * np.sqrt(w)) @ V.T
            inv_root = (V * np.where(w > 1e-12, 1.0 / np.sqrt(np.maximum(w, 1e-300)), 0.0)) @ V.T
            emb._cache[key] = (root.astype(np.float32), inv_root)
        return emb._cache[key][0]

    def metric(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The regularized Mahalanobis distance ``||Sigma_l^{-1/2}(x - y)||`` (row-wise)."""
        self.sigma_sqrt()
        inv_root = self.resolve_embeddings()._cache[("mahalanobis_sqrt", float(self.lam))][1]
        diff = (np.atleast_2d(x) - np.atleast_2d(y)).astype(np.float64) @ inv_root
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))

    def _shape_noise(self, u: np.ndarray) -> np.ndarray:
        return u @ self.sigma_sqrt().astype(u.dtype)

    def _shape_noise_t(self, u: Any) -> Any:
        import torch

        return u @ torch.from_numpy(self.sigma_sqrt()).to(u.device, u.dtype)

    def _claim_extra(self) -> dict[str, Any]:
        return {"lambda": float(self.lam), "sigma": "sample covariance normalised to trace d"}

    @classmethod
    def example(cls, preset: str = "quick") -> Mahalanobis:
        return cls(epsilon=10.0, lam=0.2, vocab_limit=EXAMPLE_VOCAB[preset])


@LEAKY_TWINS.register("vickrey")
class LeakyVickreyWrongRadius(Vickrey):
    """LEAKY TWIN: a frequent implementation bug — the 1-D Laplace radius Gamma(1, 1/eps) used in d
    dimensions instead of Gamma(d, 1/eps), i.e. about d times too little noise, under the same claim.
    The Bayesian adversary's inference accuracy and the metric-DP audit both catch it.

    Args:
        epsilon: the claimed privacy parameter per word; > 0.
        t: the tuning parameter, in [0, 1].
        **kw: the keyword arguments of :class:`WordMetricDP` (``embeddings``, ``vocab_limit``, ``index``,
            ``oov``, ``mask_token``, ``redactable``, ``skip_stopwords``, ``lowercase``, ``ann_ef``,
            ``ann_nprobe``, ``batch_tokens``).

    Raises:
        InvalidPrivacyParameter: ``epsilon`` not > 0 and finite.
        InvalidArgument: ``t`` outside [0, 1], or a keyword argument of :class:`WordMetricDP` out of range.
    """

    def sample_noise(self, n: int, *, rng: Any = None, dtype: Any = np.float32) -> np.ndarray:
        g = _noise_rng(rng)
        z = super().sample_noise(n, rng=g, dtype=np.float64)
        nrm = np.linalg.norm(z, axis=1)
        nrm[nrm == 0] = 1.0
        z *= (g.gamma(1.0, 1.0 / float(self.epsilon), size=n) / nrm)[:, None]
        return z.astype(dtype)


class LeakyVickreyExcludesInput(Vickrey):
    """LEAKY TWIN (tests only): the literal reading of Algorithm 1 step 5 that excludes the input
    word from the candidates. ``P[M(w) = w] = 0`` breaks metric DP; the metric-DP audit catches it
    (a MAP adversary's accuracy does not: it even drops, so the registered twin is the wrong-radius one).

    Args:
        epsilon: the claimed privacy parameter per word; > 0.
        t: the tuning parameter, in [0, 1].
        **kw: the keyword arguments of :class:`WordMetricDP` (``embeddings``, ``vocab_limit``, ``index``,
            ``oov``, ``mask_token``, ``redactable``, ``skip_stopwords``, ``lowercase``, ``ann_ef``,
            ``ann_nprobe``, ``batch_tokens``).

    Raises:
        InvalidPrivacyParameter: ``epsilon`` not > 0 and finite.
        InvalidArgument: ``t`` outside [0, 1], or a keyword argument of :class:`WordMetricDP` out of range.
    """

    def _neighbors(self, noisy: np.ndarray, ids: np.ndarray) -> NeighborResult:
        nb = self._nn().query(noisy, 3)
        keep = nb.ids != ids[:, None]
        # first two candidates that are not the input word
        order = np.argsort(~keep, axis=1, kind="stable")[:, :2]
        return NeighborResult(
            np.take_along_axis(nb.ids, order, axis=1), np.take_along_axis(nb.dists, order, axis=1)
        )


_RUN_RE = re.compile(r"[^\-'\u2019.,]+")


def _is_clitic(w: str) -> bool:
    return w.replace("\u2019", "'").lower() in CLITICS


def _apply_case(src: str, out: str) -> str:
    """The input's capitalisation on the output word: ``Capitalized`` in, ``Capitalized`` out;
    ``UPPER`` (2+ letters) in, ``UPPER`` out; anything else as the vocabulary has it."""
    if len(src) > 1 and src.isupper():
        return out.upper()
    if src[:1].isupper():
        return out[:1].upper() + out[1:]
    return out
