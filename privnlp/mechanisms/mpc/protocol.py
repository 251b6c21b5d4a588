"""The protocol pi_TEXT and its launchers (embedded multiprocess and TCP ``serve``).

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (Sec. 3, "MPC Protocol pi_TEXT"):
Bob secret-shares his embedding, Alice secret-shares her CNN weights, both evaluate the network
layer by layer on additive shares over Z_{2^64} (16-bit fixed point), and only the class label is
opened — to Bob only. Beaver triples come from a trusted third party (``provider="TTP"``, a third
process, as in the paper) or from CrypTen's default ``"TFP"`` (trusted *first* party: Alice, rank 0,
deals the triples — a testing mode, not secure against Alice).

Ranks: Alice = 0, Bob = 1, TTP = 2 (``WORLD_SIZE`` = 2 computing parties, as CrypTen counts).

Cost (CrypTen's comparisons dominate; see docs/readme/70-mpc.md): the label is opened as the sign
bit of the logit straight from its binary sharing (no sigmoid, no conversion back to arithmetic);
with the TTP provider and several texts in sequential mode, each text's Beaver triples come from
the TTP in one batched request (``offline.py``: the paper's offline phase) instead of one round
trip per AND gate; CrypTen's omegaconf config is read through a plain snapshot while a party runs
(omegaconf lookups were ~15% of a party's CPU time).

Embedded mode re-implements ``crypten.mpc.run_multiprocess`` (same env-based rendezvous, same
``TTPServer``) with what it lacks: a deadline, draining results before ``join`` and killing every
party when one fails (``run_multiprocess`` joins forever when a party dies).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import multiprocessing as mp
import os
import queue as queue_mod
import socket
import tempfile
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from privnlp.core.errors import InvalidArgument, ProtocolError
from privnlp.mechanisms.federated.tls import make_certs

from ._crypten_shim import import_crypten
from .channels import PartyTLS, TLSSettings, use_tls_channels
from .crypten_model import build_crypten_textcnn, plaintext_state
from .offline import BatchingTTPServer, OfflinePhase

crypten = import_crypten()

__all__ = [
    "ALICE",
    "BOB",
    "TTP",
    "ROLES",
    "PartyOutput",
    "run_party",
    "run_embedded",
    "free_port",
    "check_port_free",
    "validate_embeddings",
    "MAX_RECORDED",
    "PartyTLS",
    "plaintext_state",
    "parse_tcp",
    "transport",
    "run_model",
    "ephemeral_tls",
]

ALICE, BOB, TTP = 0, 1, 2
ROLES = {"alice": ALICE, "bob": BOB, "ttp": TTP}
PROVIDERS = ("TTP", "TFP")
MAX_RECORDED = 4096  # elements kept per recorded message
MAX_MESSAGES = 400  # messages kept per party


@dataclass(frozen=True)
class PartyOutput:
    """What one party returns (plain numpy, picklable)."""

    role: str
    labels: Any = None  # Bob only: int array (n,)
    logits: Any = None  # Bob only, and only when reveal="logits"
    received: Mapping[str, Any] = field(default_factory=dict)  # recorded view (int64 arrays)
    opened: Mapping[str, Any] = field(default_factory=dict)
    comm: Mapping[str, float] = field(default_factory=dict)  # rounds, bytes, time
    seconds: float = 0.0  # weight sharing + all batches
    batch_seconds: tuple = ()  # wall time of each batch (text, in sequential mode)
    transport: str = "gloo"  # the channels the party ran on: "gloo" (plain TCP) or "tls"


def validate_embeddings(x: Any, embed_dim: int | None = None) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise InvalidArgument(f"embeddings must have shape (n, embed_dim); got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise InvalidArgument("embeddings must hold at least one row (n >= 1); got an empty batch")
    if embed_dim is not None and arr.shape[1] != embed_dim:
        raise InvalidArgument(
            f"embeddings must have embed_dim={embed_dim} columns (the model's input size); "
            f"got {arr.shape[1]}"
        )
    if not np.all(np.isfinite(arr)):
        raise InvalidArgument("embeddings must be finite (no NaN/inf)")
    return arr


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise ProtocolError(
                f"rendezvous port {port} on {host} is already in use ({e.strerror}); "
                f"pick another with --rendezvous tcp://{host}:PORT"
            ) from None


# --------------------------------------------------------------------------------------------
# inside a party process


def _patch_dist_timeout(seconds: float) -> None:
    """CrypTen calls ``init_process_group`` without a timeout (default 30 min): inject ours, so
    a missing party or a dead peer fails the rendezvous / a collective instead of hanging."""
    orig = getattr(dist.init_process_group, "_privnlp_orig", dist.init_process_group)

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", datetime.timedelta(seconds=float(seconds)))
        return orig(*args, **kwargs)

    init_process_group._privnlp_orig = orig  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group
    crypten.communicator.distributed_communicator.dist.init_process_group = init_process_group


class _Recorder:
    """Wraps the party's communicator so that every tensor it *receives* is logged."""

    def __init__(self, comm: Any, rank: int) -> None:
        self.comm, self.rank = comm, rank
        self.messages: dict[str, np.ndarray] = {}
        self.paused = False
        self._n = 0
        for op in ("all_reduce", "reduce", "broadcast", "recv", "gather", "all_gather"):
            setattr(comm, op, self._wrap(op, getattr(comm, op)))

    def _log(self, op: str, out: Any) -> None:
        if self.paused or self._n >= MAX_MESSAGES:
            return
        items = out if isinstance(out, (list, tuple)) else [out]
        for t in items:
            if torch.is_tensor(t) and t.dtype == torch.int64 and t.numel() > 0:
                self.messages[f"msg/{self._n:04d}/{op}"] = (
                    t.detach().flatten()[:MAX_RECORDED].numpy().copy()
                )
                self._n += 1

    def _wrap(self, op: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if op == "reduce":
                dst = args[1] if len(args) > 1 else kwargs.get("dst")
                if dst != self.rank:
                    return out
            if op == "broadcast":
                src = args[1] if len(args) > 1 else kwargs.get("src")
                if src == self.rank:
                    return out
            self._log(op, out)
            return out

        return wrapped


class _NS:
    """Plain attribute tree (a snapshot of CrypTen's omegaconf config: fast lookups)."""

    def __init__(self, d: Mapping[str, Any]) -> None:
        for k, v in d.items():
            object.__setattr__(self, k, _NS(v) if isinstance(v, Mapping) else v)


@contextlib.contextmanager
def _fast_config() -> Any:
    cfg = crypten.cfg
    old = cfg.config
    cfg.set_config(_NS(OmegaConf.to_container(old, resolve=True)))
    try:
        yield
    finally:
        cfg.set_config(old)


def _open_label(logit: Any, dst: int) -> Any:
    """``logit > 0`` opened to ``dst`` only: the sign bit of ``-logit`` taken from its binary
    sharing (one A2B; CrypTen's ``gt`` would convert the bit back to arithmetic first)."""
    b = (-logit)._to_ptype(crypten.mpc.ptype.binary)._tensor
    b.share = (b.share >> 63) & 1
    return b.reveal(dst=dst)


def run_party(
    rank: int,
    *,
    config: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    embeddings: Any = None,
    mode: str = "batched",
    reveal: str = "label",
    record: bool = False,
    leak: str | None = None,
    pool_method: str = "tournament",
    offline: bool = True,
) -> PartyOutput:
    """Alice's (rank 0) or Bob's (rank 1) side of pi_TEXT. CrypTen must be initialised.

    Public handshake first (Alice: architecture config; Bob: number of texts and embedding size),
    so that both sides reject bad input together instead of one of them hanging.
    """
    torch.set_num_threads(1)
    with _fast_config():
        return _run_party(
            rank,
            config=config,
            state=state,
            embeddings=embeddings,
            mode=mode,
            reveal=reveal,
            record=record,
            leak=leak,
            pool_method=pool_method,
            offline=offline,
        )


def _run_party(
    rank: int,
    *,
    config: Mapping[str, Any] | None,
    state: Mapping[str, Any] | None,
    embeddings: Any,
    mode: str,
    reveal: str,
    record: bool,
    leak: str | None,
    pool_method: str,
    offline: bool,
) -> PartyOutput:
    comm = crypten.communicator.get()
    role = "alice" if rank == ALICE else "bob"
    # -- public handshake ------------------------------------------------------------------
    if rank == ALICE:
        shape = None
        pub_cfg = dict(config or {})
    else:
        arr = (
            np.asarray(embeddings, dtype=np.float32)
            if embeddings is not None
            else np.zeros((0, 0), np.float32)
        )
        if arr.ndim == 1:
            arr = arr[None, :]
        shape = tuple(arr.shape)
        pub_cfg = None
    pub_cfg = comm.broadcast_obj(pub_cfg, ALICE)
    shape = comm.broadcast_obj(shape, BOB)
    pub = comm.broadcast_obj(
        {"mode": mode, "reveal": reveal, "leak": leak} if rank == ALICE else None, ALICE
    )
    if (pub["mode"], pub["reveal"], pub["leak"]) != (mode, reveal, leak):
        raise ProtocolError(
            f"parties disagree on the protocol settings: alice={pub}, "
            f"{role}={{'mode': {mode!r}, 'reveal': {reveal!r}, 'leak': {leak!r}}}"
        )
    embed_dim = int(pub_cfg["embed_dim"])
    if len(shape) != 2 or shape[0] == 0:
        raise InvalidArgument(
            f"embeddings must hold at least one row of size {embed_dim}; Bob sent shape {shape}"
        )
    if shape[1] != embed_dim:
        raise InvalidArgument(
            f"embeddings must have embed_dim={embed_dim} columns (Alice's model input); "
            f"Bob's have {shape[1]}"
        )
    n = int(shape[0])
    rec = _Recorder(comm, rank) if record else None
    crypten.cfg.communicator.verbose = True  # CrypTen only counts rounds/bytes in verbose mode
    crypten.reset_communication_stats()
    t0 = time.perf_counter()

    # -- Alice secret-shares her weights -----------------------------------------------------
    st = (
        {k: torch.as_tensor(v) for k, v in state.items()}
        if (rank == ALICE and state is not None)
        else None
    )
    model = build_crypten_textcnn(pub_cfg, st, pool_method=pool_method)
    model.encrypt(src=ALICE)
    model.eval()
    received: dict[str, np.ndarray] = {}
    opened: dict[str, np.ndarray] = {}
    if record and rank == BOB:
        for name, p in model.named_parameters():
            received[f"share/alice_weights/{name}"] = p.share.flatten().numpy().copy()

    # -- Bob secret-shares his embeddings ---------------------------------------------------
    x_plain = torch.as_tensor(arr) if rank == BOB else torch.zeros(n, embed_dim)
    x_plain = x_plain.unsqueeze(1)

    def share_input(xp: torch.Tensor) -> Any:
        if leak == "unmasked_shares":
            # LEAKY: Bob hands Alice his fixed-point encoded input and keeps a zero share.
            enc = crypten.encoder.FixedPointEncoder().encode(xp)
            if rank == BOB:
                comm.send(enc, ALICE)
                sh = torch.zeros_like(enc)
            else:
                sh = comm.recv(torch.zeros_like(enc), BOB)
            t = crypten.mpc.MPCTensor([])
            t._tensor = crypten.mpc.primitives.ArithmeticSharedTensor.from_shares(sh)
            return t
        return crypten.cryptensor(xp, src=BOB)

    labels: list[Any] = []
    logits: list[Any] = []
    batches = [slice(0, n)] if mode == "batched" else [slice(i, i + 1) for i in range(n)]
    pre = None
    if offline and len(batches) > 1 and str(crypten.cfg.mpc.provider) == "TTP":
        pre = OfflinePhase(rank)
    batch_seconds: list[float] = []
    for bi, sl in enumerate(batches):
        tb = time.perf_counter()
        if pre is not None:
            pre.start_trace() if bi == 0 else pre.fill()
        x = share_input(x_plain[sl])
        if record and rank == ALICE and bi < 64:
            received[f"share/bob_input/{bi:04d}"] = x.share.flatten().numpy().copy()
        if leak == "open_intermediate":
            z = model.features(x)
            if rec is not None:
                rec.paused = True
            v = z.get_plain_text(dst=ALICE)  # LEAKY: Alice sees Bob's conv activations
            if rec is not None:
                rec.paused = False
            if rank == ALICE and bi < 64:
                opened[f"conv_features/{bi:04d}"] = v.numpy().copy()
            z = model.relu(model.fc1(z))
            logit = model.fc2(z)
        else:
            logit = model(x)
        if rec is not None:
            rec.paused = True  # openings are logged as `opened`, not as masked messages
        if reveal == "logits":
            v = logit.get_plain_text(dst=BOB)
            if rank == BOB:
                logits.append(v.flatten().numpy().copy())
                labels.append((v.flatten() > 0).long().numpy())
        else:
            lab = _open_label(logit, BOB)  # the label only, to Bob only (no sigmoid)
            if rank == BOB:
                labels.append(lab.flatten().long().numpy())
        if rec is not None:
            rec.paused = False
        if pre is not None:
            pre.stop_trace() if bi == 0 else pre.clear()
        batch_seconds.append(time.perf_counter() - tb)
    seconds = time.perf_counter() - t0
    stats = comm.get_communication_stats()
    if rec is not None:
        received.update(rec.messages)
    out_labels = out_logits = None
    if rank == BOB:
        out_labels = np.concatenate(labels).astype(np.int64)
        opened["label"] = out_labels
        if reveal == "logits":
            out_logits = np.concatenate(logits)
            opened["logit"] = out_logits
    return PartyOutput(
        role=role,
        labels=out_labels,
        logits=out_logits,
        received=received,
        opened=opened,
        comm={
            "rounds": float(stats["rounds"]),
            "bytes": float(stats["bytes"]),
            "comm_time": float(stats.get("time", 0.0)),
        },
        seconds=seconds,
        batch_seconds=tuple(batch_seconds),
    )


def parse_tcp(rendezvous: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` -> ``(HOST, PORT)``; anything else is refused naming the argument."""
    if not rendezvous.startswith("tcp://"):
        raise InvalidArgument(f"rendezvous must be tcp://HOST:PORT; got {rendezvous!r}")
    host, _, port = rendezvous[len("tcp://") :].rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(
            f"rendezvous must be tcp://HOST:PORT (port 1-65535); got {rendezvous!r}"
        )
    return host.strip("[]"), int(port)


def init_party(rank: int, *, rendezvous: str, provider: str, timeout: float) -> Any:
    """Set the env-based rendezvous and initialise CrypTen in this process."""
    torch.set_num_threads(1)  # a forked party hangs in its first conv otherwise
    os.environ.update(
        {
            "RENDEZVOUS": rendezvous,
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "DISTRIBUTED_BACKEND": "gloo",
        }
    )
    crypten.cfg.mpc.provider = provider
    _patch_dist_timeout(timeout)
    return crypten


@contextlib.contextmanager
def transport(
    rank: int,
    *,
    rendezvous: str,
    timeout: float,
    tls: Any = None,
    bind: tuple[str, int] | None = None,
) -> Any:
    """The channels ``crypten.init()`` connects through inside this block: torch.distributed (gloo,
    plain TCP) without ``tls``; with ``tls`` (a :class:`~.channels.PartyTLS`), the mutually authenticated
    TLS mesh of :mod:`.channels` (Alice listens on the rendezvous, or on ``bind``). Yields the
    transport's name (``"gloo"`` or ``"tls"``)."""
    if tls is None:
        yield "gloo"
        return
    host, port = parse_tcp(rendezvous)
    with use_tls_channels(TLSSettings(rank, host, port, tls, float(timeout), bind)):
        yield "tls"


def run_ttp(
    *, rendezvous: str, timeout: float, tls: Any = None, bind: tuple[str, int] | None = None
) -> None:
    """The trusted third party (rank 2): deals Beaver triples until Alice says "terminate"."""
    crypten = init_party(TTP, rendezvous=rendezvous, provider="TTP", timeout=timeout)
    with transport(TTP, rendezvous=rendezvous, timeout=timeout, tls=tls, bind=bind):
        try:
            BatchingTTPServer()  # CrypTen's TTPServer + batched requests; crypten.init(), serves until terminated
        finally:
            with contextlib.suppress(Exception):
                crypten.uninit()


def _child(
    rank: int,
    rendezvous: str,
    provider: str,
    timeout: float,
    q: Any,
    kwargs: dict,
    tls: Any = None,
    bind: tuple[str, int] | None = None,
) -> None:
    try:
        if rank == TTP:
            run_ttp(rendezvous=rendezvous, timeout=timeout, tls=tls, bind=bind)
            q.put((rank, "ok", None))
            return
        crypten = init_party(rank, rendezvous=rendezvous, provider=provider, timeout=timeout)
        with transport(rank, rendezvous=rendezvous, timeout=timeout, tls=tls, bind=bind) as name:
            crypten.init()
            try:
                out = dataclasses.replace(run_party(rank, **kwargs), transport=name)
            finally:
                crypten.uninit()
        q.put((rank, "ok", out))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put((rank, "error", (type(e).__name__, str(e), traceback.format_exc())))
        q.close()
        q.join_thread()  # flush the report before the hard exit (else the parent sees only "died")
        os._exit(1)


def run_embedded(
    *,
    config: Mapping[str, Any],
    state: Mapping[str, Any],
    embeddings: Any,
    provider: str = "TTP",
    mode: str = "batched",
    reveal: str = "label",
    record: bool = False,
    leak: str | None = None,
    pool_method: str = "tournament",
    timeout: float = 120.0,
    rendezvous: str | None = None,
    offline: bool = True,
    tls: Mapping[int, Any] | None = None,
    bind: tuple[str, int] | None = None,
) -> dict[str, PartyOutput]:
    """Run pi_TEXT with Alice, Bob (and the TTP) as forked processes on this machine.

    ``tls``: ``{rank: PartyTLS}`` runs the parties over the mutually authenticated TLS mesh
    (:mod:`.channels`) on ``rendezvous`` (default: a free loopback port; Alice listens on ``bind`` if
    given) instead of gloo. Each party's material is used as given (the tests hand a party another
    CA's or another rank's certificate to check that its peers refuse it).

    Returns ``{"alice": PartyOutput, "bob": PartyOutput}``. Raises ``InvalidArgument`` for bad
    input and ``ProtocolError`` when a party fails or the deadline passes; every child is killed
    before returning.
    """
    if provider not in PROVIDERS:
        raise InvalidArgument(f"provider must be one of {PROVIDERS}; got {provider!r}")
    if mode not in ("batched", "sequential"):
        raise InvalidArgument(f"mode must be 'batched' or 'sequential'; got {mode!r}")
    if reveal not in ("label", "logits"):
        raise InvalidArgument(f"reveal must be 'label' or 'logits'; got {reveal!r}")
    x = validate_embeddings(embeddings, int(config["embed_dim"]))
    if tls is not None:
        need = {ALICE, BOB} | ({TTP} if provider == "TTP" else set())
        if set(tls) != need:
            raise InvalidArgument(f"tls must map every party's rank {sorted(need)} to its PartyTLS")
        rendezvous = rendezvous or f"tcp://127.0.0.1:{free_port()}"
        parse_tcp(rendezvous)
    elif rendezvous is None:
        rendezvous = "file://" + os.path.join(tempfile.mkdtemp(prefix="privnlp-mpc-"), "rendezvous")
    tls = dict(tls or {})
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    common = dict(
        config=dict(config),
        mode=mode,
        reveal=reveal,
        record=record,
        leak=leak,
        pool_method=pool_method,
        offline=offline,
    )
    procs = [
        ctx.Process(
            target=_child,
            args=(ALICE, rendezvous, provider, timeout, q, dict(common, state=dict(state))),
            kwargs={"tls": tls.get(ALICE), "bind": bind},
            daemon=False,
        ),
        ctx.Process(
            target=_child,
            args=(BOB, rendezvous, provider, timeout, q, dict(common, embeddings=x)),
            kwargs={"tls": tls.get(BOB)},
            daemon=False,
        ),
    ]
    if provider == "TTP":
        procs.append(
            ctx.Process(
                target=_child,
                args=(TTP, rendezvous, provider, timeout, q, {}),
                kwargs={"tls": tls.get(TTP)},
            )
        )
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.start()
        while len(results) < len(procs):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError(
                    f"MPC run did not finish within timeout={timeout} s; all parties stopped"
                )
            try:
                rank, status, payload = q.get(timeout=min(left, 0.5))
            except queue_mod.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and q.empty():
                    time.sleep(0.2)
                    if q.empty():
                        raise ProtocolError(
                            f"an MPC party died (exit code {dead[0].exitcode}); all parties stopped"
                        ) from None
                continue
            if status == "error":
                name, msg, tb = payload
                if name in ("InvalidArgument", "MalformedInput"):
                    raise InvalidArgument(msg)
                raise ProtocolError(f"MPC party {_role(rank)} failed: {name}: {msg}")
            results[rank] = payload
    finally:
        for p in procs:
            p.join(timeout=2.0 if len(results) == len(procs) else 0.1)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5.0)
        q.close()
        if rendezvous.startswith("file://"):
            with contextlib.suppress(OSError):
                os.unlink(rendezvous[len("file://") :])
    return {"alice": results[ALICE], "bob": results[BOB]}


def ephemeral_tls(d: str | os.PathLike, parties: int) -> dict[int, PartyTLS]:
    """A CA and one certificate per party made in the (private, temporary) folder ``d``:
    ``{rank: PartyTLS}`` for an embedded run over the TLS channels."""
    make_certs(d, days=1, parties=parties)
    return {r: PartyTLS.in_dir(d, r).check(r) for r in range(parties)}


def run_model(
    model: Any, embeddings: Any, *, transport: str = "gloo", **kwargs: Any
) -> dict[str, PartyOutput]:
    """:func:`run_embedded` for a plaintext TextCNN ``model`` (its public config and weights are
    handed to Alice); ``transport="tls"`` runs the parties over the TLS channels with certificates of
    a CA made for this run (removed afterwards)."""
    kw = dict(
        kwargs,
        config=model.public_config(),
        state={k: v.numpy() for k, v in plaintext_state(model).items()},
        embeddings=embeddings,
    )
    if transport == "gloo":
        return run_embedded(**kw)
    if transport != "tls":
        raise InvalidArgument(f"transport must be 'gloo' or 'tls'; got {transport!r}")
    parties = 3 if kw.get("provider", "TTP") == "TTP" else 2
    with tempfile.TemporaryDirectory(prefix="privnlp-mpc-tls-") as d:
        return run_embedded(tls=ephemeral_tls(d, parties), **kw)


def _role(rank: int) -> str:
    return {ALICE: "alice", BOB: "bob", TTP: "ttp"}.get(rank, str(rank))
