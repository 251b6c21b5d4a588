"""``crypten_textcnn``: private text classification with a 1D CNN under MPC (pi_TEXT).

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt — Bob (text owner) and Alice
(model owner) run Alice's multi-channel 1D CNN on secret-shared inputs and weights (CrypTen,
additive secret sharing over Z_{2^64}, 16-bit fixed point, Beaver triples from a trusted
initializer); only the label is opened, to Bob. Semi-honest (honest-but-curious) security.

Also here: the deliberately leaky twin (``LEAKY_TWINS["crypten_textcnn"]``) used by the tests.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from privnlp.core.claims import Adversary, PrivacyClaim, ThreatModel
from privnlp.core.errors import InvalidArgument, check_positive
from privnlp.core.observations import PartyView
from privnlp.core.protocols import Mechanism
from privnlp.core.registry import LEAKY_TWINS, MECHANISMS
from privnlp.data import generate_sentiment
from privnlp.models.cnn import PRESETS, TextCNN, train_textcnn

from .encoder import PublicEncoder

__all__ = [
    "CryptenTextCNN",
    "LeakyCryptenTextCNN",
    "MPCResult",
    "AliceModel",
    "train_alice_model",
    "save_alice_model",
    "load_alice_model",
    "PAPER",
]

TRANSPORTS = ("gloo", "tls")
TRANSPORT_NOTES = {
    "gloo": "channels: the parties are local processes on torch.distributed (gloo, plain TCP on this machine, "
    "no TLS); across machines use `privnlp mpc serve --tls-dir`",
    "tls": "channels: TLS 1.3 between every pair of parties, mutually authenticated (certificates of one CA, "
    "each naming its party's rank; a peer with another CA's or another rank's certificate is refused before "
    "any share is sent)",
}

PAPER = "mpc-cnn-private-text-classification.txt (Adams et al., privacy-preserving text classification with CNNs and MPC)"

THREAT_BOB = ThreatModel(
    adversary=Adversary.MPC_PARTY,
    observes=("Bob's shares of Alice's weights", "every message Bob receives", "the opened label"),
    knows=("the architecture", "the public encoder", "his own text"),
    goal="learn Alice's model parameters",
)
THREAT_ALICE = ThreatModel(
    adversary=Adversary.MPC_PARTY,
    observes=("Alice's shares of Bob's embedding", "every message Alice receives"),
    knows=("her model", "the public encoder"),
    goal="learn Bob's text / embedding",
)


@dataclass(frozen=True)
class MPCResult:
    """Output of one private classification run.

    Attributes:
        labels: the predicted labels (what Bob learns).
        logits: the opened logits, only with ``reveal="logits"`` (testing).
        views: what each party received, when recorded (``record=True``).
        comm: per party, rounds and bytes communicated.
        seconds: the protocol's wall time inside the parties.
        batch_seconds: Bob's wall time per batch (per text in ``"sequential"`` mode).
    """

    labels: np.ndarray  # what Bob learns
    logits: np.ndarray | None = None  # only with reveal="logits" (testing)
    views: tuple[PartyView, ...] = ()  # recorded party views (record=True)
    comm: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # per party rounds/bytes
    seconds: float = 0.0  # protocol wall time (inside the parties)
    batch_seconds: tuple[float, ...] = ()  # Bob's wall time per batch (per text when sequential)
    transport: str = "gloo"  # the parties' channels: "gloo" (plain local TCP) or "tls"


@dataclass(frozen=True)
class AliceModel:
    """Alice's trained plaintext TextCNN plus the public encoder used by Bob."""

    model: Any
    encoder: Any
    accuracy: float = float("nan")


def train_alice_model(
    *,
    n: int = 600,
    encoder: str = "auto",
    dim: int = 128,
    epochs: int = 20,
    seed: int = 0,
    texts: Sequence[str] | None = None,
    labels: Sequence[int] | None = None,
    held_out: float = 0.25,
    preset: str = "paper",
    embeddings: Any = None,
) -> tuple[AliceModel, np.ndarray, np.ndarray]:
    """Train Alice's TextCNN in plaintext on ``privnlp.data.generate_sentiment`` (or given data).

    ``preset``: ``"paper"`` or ``"fast"`` (:data:`privnlp.models.cnn.PRESETS`). The input is
    rescaled to unit RMS per entry (``input_scale`` = 1 / RMS of the training embeddings, folded
    into the secret conv weights): sentence-encoder outputs are unit-norm vectors with ~0.05
    entries, on which the default init trains badly (held-out accuracy 0.70 instead of 0.84 on
    MiniLM embeddings with 1500 training texts).

    ``embeddings``: the public encoder's output for ``texts`` if already computed (skips encoding).

    Returns ``(AliceModel, x_test, y_test)`` (held-out embeddings for Bob).

    Args:
        n: the number of generated sentiment texts (when ``texts`` is not given).
        encoder: the public sentence encoder: ``"auto"`` (MiniLM if available, else hashed), ``"minilm"`` or
            ``"hashed"``.
        dim: the output dimension of the hashed encoder.
        epochs: training epochs.
        seed: data, initialisation and training seed.
        texts: Alice's training texts (default: generated).
        labels: their labels (required with ``texts``).
        held_out: the fraction of the data kept as Bob's test texts.
        preset: ``"paper"`` or ``"fast"``.
        embeddings: precomputed encoder outputs for ``texts``.

    Raises:
        InvalidArgument: unknown ``preset`` or ``encoder``, or embeddings and labels of different lengths.
    """
    if preset not in PRESETS:
        raise InvalidArgument(f"preset must be one of {sorted(PRESETS)}; got {preset!r}")
    if texts is None:
        ds = generate_sentiment(n, seed=seed)
        texts, labels = ds.texts, ds.labels
    enc = PublicEncoder(encoder, dim)
    x = enc.encode(texts) if embeddings is None else np.asarray(embeddings, np.float32)
    y = np.asarray(labels, np.int64)
    if len(x) != len(y):
        raise InvalidArgument(
            f"embeddings and labels must have equal length; got {len(x)} and {len(y)}"
        )
    k = int(round(len(x) * (1 - held_out)))
    rms = float(np.sqrt(np.mean(np.square(x[:k])))) if k else 1.0
    scale = float(f"{1.0 / rms:.2g}") if rms > 0 else 1.0
    with torch.random.fork_rng():  # seeded init without touching the caller's global RNG
        torch.manual_seed(seed)
        model = TextCNN(x.shape[1], input_scale=scale, **PRESETS[preset])
        train_textcnn(model, torch.tensor(x[:k]), torch.tensor(y[:k]), epochs=epochs, rng=seed)
    xt, yt = x[k:], y[k:]
    acc = float((model.predict(torch.tensor(xt)).numpy() == yt).mean()) if len(xt) else float("nan")
    return AliceModel(model, enc, acc), xt, yt


def save_alice_model(model: Any, path: str) -> None:
    """Save a TextCNN (config + state dict) atomically.

    Args:
        model: the TextCNN.
        path: the destination file.
    """
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save({"config": model.config(), "state_dict": model.state_dict()}, tmp)
    os.replace(tmp, path)


def load_alice_model(path: str) -> Any:
    """Load a TextCNN written by :func:`save_alice_model`, in eval mode.

    Args:
        path: the file (loaded with ``weights_only=True``).

    Returns:
        The model.
    """
    d = torch.load(path, map_location="cpu", weights_only=True)
    cfg = dict(d["config"])
    m = TextCNN(
        cfg.pop("embed_dim"),
        **{k: (tuple(v) if k == "kernel_sizes" else v) for k, v in cfg.items()},
    )
    m.load_state_dict(d["state_dict"])
    m.eval()
    return m


@MECHANISMS.register("crypten_textcnn")
class CryptenTextCNN(Mechanism):
    """Private inference of Alice's TextCNN on Bob's embedded text with CrypTen (pi_TEXT).

    Args:
        provider: ``"TTP"`` (trusted initializer as a third process, the paper's setting and the
            one the cryptographic claim is about) or ``"TFP"`` (CrypTen's default "trusted first
            party": Alice deals the triples — protects Alice's model from Bob only; testing).
        mode: ``"batched"`` (all texts in one run) or ``"sequential"`` (one text at a time).
        pool_method: ``"tournament"`` or ``"max_pool2d"`` (CrypTen's, with a (1, k) kernel).
        timeout: seconds before a run is aborted and all parties killed.
        transport: the channels between the local party processes: ``"gloo"`` (torch.distributed on
            plain local TCP, CrypTen's own) or ``"tls"`` (the mutually authenticated TLS 1.3 mesh of
            ``channels.py``, with certificates of a CA made for the run). Across machines, run
            ``privnlp mpc serve --tls-dir``.

    Implements pi_TEXT (paper Sec. 3). Claim: cryptographic (semi-honest, one corrupted party out of Alice
    and Bob, a non-colluding trusted third party with ``provider="TTP"``); see ``claim()`` for what stays
    public.

    Raises:
        InvalidArgument: an unknown ``provider``, ``mode`` or ``pool_method``, or ``timeout`` not > 0.
    """

    paper: ClassVar[str] = PAPER
    paired_attacks: ClassVar[tuple[str, ...]] = ("party_view",)
    threat_models: ClassVar[tuple[ThreatModel, ...]] = (THREAT_BOB, THREAT_ALICE)
    scenario: ClassVar[str | None] = "mpc.inference"
    leak: ClassVar[str | None] = None

    def __init__(
        self,
        provider: str = "TTP",
        mode: str = "batched",
        pool_method: str = "tournament",
        timeout: float = 120.0,
        transport: str = "gloo",
    ) -> None:
        if provider not in ("TTP", "TFP"):
            raise InvalidArgument(f"provider must be 'TTP' or 'TFP'; got {provider!r}")
        if mode not in ("batched", "sequential"):
            raise InvalidArgument(f"mode must be 'batched' or 'sequential'; got {mode!r}")
        if pool_method not in ("tournament", "max_pool2d"):
            raise InvalidArgument(
                f"pool_method must be 'tournament' or 'max_pool2d'; got {pool_method!r}"
            )
        check_positive("timeout", timeout)
        if transport not in TRANSPORTS:
            raise InvalidArgument(f"transport must be one of {TRANSPORTS}; got {transport!r}")
        self.provider = provider
        self.mode = mode
        self.pool_method = pool_method
        self.timeout = timeout
        self.transport = transport

    def claim(self) -> PrivacyClaim:
        notes = [
            "CrypTen additive secret sharing over Z_2^64 with 16-bit fixed point, semi-honest (honest-but-curious) "
            "security, one corrupted party out of Alice and Bob",
            "Bob learns only the label; Alice learns nothing about Bob's embedding; "
            "public: the architecture, the number of texts and the embedding size",
            "the public encoder runs on Bob's side in the clear",
            TRANSPORT_NOTES[self.transport],
        ]
        if self.provider == "TTP":
            notes.append(
                "Beaver triples from a trusted third party that does not collude with either party"
            )
        else:
            notes.append(
                "provider TFP: Alice (the first party) deals the Beaver triples, so she could unmask Bob's "
                "input; only Alice's model is protected (from Bob). Testing only"
            )
        return PrivacyClaim.cryptographic(
            *notes,
            extra={
                "provider": self.provider,
                "ring_bits": 64,
                "precision_bits": 16,
                "transport": self.transport,
            },
        )

    @classmethod
    def example(cls, preset: str = "quick") -> CryptenTextCNN:
        return cls(provider="TTP", mode="batched")

    def classify(
        self,
        model: Any,
        embeddings: Any,
        *,
        rng: Any = None,
        reveal: str = "label",
        record: bool = False,
    ) -> MPCResult:
        """Run pi_TEXT on Bob's ``embeddings`` (n, embed_dim) with Alice's TextCNN ``model``.

        ``rng`` is accepted for the interface and ignored: the shares and triples come from
        CrypTen's generators seeded with ``os.urandom`` (a seeded sharing would not be secret).
        ``reveal="logits"`` opens the logits to Bob too (for testing the fixed-point error).
        """
        from . import protocol  # imports torch and CrypTen (this module is on light paths)

        out = protocol.run_model(
            model,
            embeddings,
            transport=self.transport,
            provider=self.provider,
            mode=self.mode,
            reveal=reveal,
            record=record,
            leak=self.leak,
            pool_method=self.pool_method,
            timeout=self.timeout,
        )
        views = ()
        if record:
            views = tuple(
                PartyView(
                    party=role,
                    received=dict(o.received),
                    opened=dict(o.opened),
                    ring_bits=64,
                    meta={"provider": self.provider, "mode": self.mode, "leak": self.leak},
                )
                for role, o in out.items()
            )
        b = out["bob"]
        return MPCResult(
            labels=b.labels,
            logits=b.logits,
            views=views,
            comm={r: dict(o.comm) for r, o in out.items()},
            seconds=max(o.seconds for o in out.values()),
            batch_seconds=tuple(b.batch_seconds),
            transport=b.transport,
        )


@LEAKY_TWINS.register("crypten_textcnn")
class LeakyCryptenTextCNN(CryptenTextCNN):
    """Deliberately broken pi_TEXT for the tests: ``leak="unmasked_shares"`` (Bob hands Alice
    his fixed-point input as her "share") or ``"open_intermediate"`` (the conv activations are
    opened to Alice). Same predictions; the party-view audit must catch it.

    Args:
        provider: ``"TTP"`` or ``"TFP"`` (see :class:`CryptenTextCNN`).
        mode: ``"batched"`` or ``"sequential"``.
        pool_method: ``"tournament"`` or ``"max_pool2d"``.
        timeout: seconds before a run is aborted; > 0.
        leak: ``"unmasked_shares"`` or ``"open_intermediate"``.
        transport: ``"gloo"`` or ``"tls"`` (see :class:`CryptenTextCNN`).

    Raises:
        InvalidArgument: an argument out of range or an unknown ``leak``.
    """

    leak = "unmasked_shares"

    def __init__(
        self,
        provider: str = "TTP",
        mode: str = "batched",
        pool_method: str = "tournament",
        timeout: float = 120.0,
        leak: str = "unmasked_shares",
        transport: str = "gloo",
    ) -> None:
        super().__init__(provider, mode, pool_method, timeout, transport)
        if leak not in ("unmasked_shares", "open_intermediate"):
            raise InvalidArgument(
                f"leak must be 'unmasked_shares' or 'open_intermediate'; got {leak!r}"
            )
        self.leak = leak  # type: ignore[misc]

    def claim(self) -> PrivacyClaim:
        return PrivacyClaim.none(
            f"leaky twin of crypten_textcnn ({self.leak}) used to test the audit"
        )
