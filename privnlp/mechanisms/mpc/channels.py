"""Mutually authenticated TLS channels between the pi_TEXT parties (issue #33 item 5).

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (Sec. 3: additive secret sharing is
secure only over private, authenticated channels between Alice, Bob and the trusted initializer).

Why not torch.distributed: CrypTen's ``DistributedCommunicator`` runs on gloo, and the gloo of the PyPI
torch wheels has no TLS transport (no ``TCP_TLS`` device in libtorch_cpu); its pair connections go
straight between the processes, so no TLS tunnel can be slid under them without a VPN. This module is a
CrypTen ``Communicator`` that carries every call CrypTen makes (send / recv / isend / irecv / broadcast /
all_reduce / reduce / gather / all_gather / scatter / barrier / *_obj) over a full mesh of Python
``ssl`` sockets:

* TLS 1.3 with mutual authentication: every party presents the certificate ``privnlp fl certs DIR
  --parties 3`` made for its rank (``party-<rank>.pem``, common name ``privnlp mpc party <rank>``) and
  checks that its peer's certificate is signed by the deployment's CA **and names the rank it expects**.
  A peer with a certificate of another CA, or with a valid certificate of another rank (or a second
  connection for a rank already present), is refused during the set-up: the mesh -- and with it the
  communicator -- exists only once every party is authenticated, so no share is ever sent before.
* The mesh: Alice (rank 0) listens on the rendezvous address; every other party connects to her and
  announces (over the authenticated channel) a listening port for the higher ranks; Alice hands out the
  roster, the higher ranks connect to the lower ones. Alice can only misdirect a connection, which then
  fails its certificate check (fail closed). Host names are not checked: the identity is the rank.
* Wire format: a frame is ``(channel: u8, length: u64)`` + payload; a tensor travels as its raw bytes
  (the receiver knows the shape and dtype, as with gloo, and refuses a frame of the wrong length), so
  nothing but CrypTen's own ``*_obj`` messages is unpickled, through CrypTen's restricted unpickler and
  only from an authenticated peer. One channel per process group (main, TTP, TTP-comm) keeps their
  messages apart, as gloo's separate pair connections do.
* One thread: sockets are non-blocking and every wait drives all sends and receives (a select loop), so
  two parties sending large tensors to each other never deadlock and no SSL object is touched by two
  threads. Every wait is bounded by ``timeout``.

Install with :func:`use_tls_channels` inside a party process before ``crypten.init()``. Imports torch and
CrypTen: load lazily (only MPC work imports this module).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import select
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.distributed as dist
from cryptography import x509
from cryptography.x509.oid import NameOID

from privnlp.core.errors import InvalidArgument, ProtocolError
from privnlp.mechanisms.federated.tls import CA_CERT, check_party_certificate

from ._crypten_shim import import_crypten

crypten = import_crypten()

__all__ = [
    "PartyTLS",
    "TLSSettings",
    "TLSCommunicator",
    "Mesh",
    "connect_mesh",
    "party_common_name",
    "use_tls_channels",
    "ROLE_NAMES",
]

ROLE_NAMES = {0: "alice", 1: "bob", 2: "ttp"}
MAIN, TTP_GROUP, TTP_COMM, CONTROL = 0, 1, 2, 255
_HDR = struct.Struct("!BQ")
_CHUNK = 1 << 20  # bytes handed to one SSL write
_SMALL = 1 << 16  # frames up to this size are written as one buffer (header + payload)
_SCRATCH = 1 << 18  # receive buffer for headers and small frames
_MAX_CONTROL = 1 << 16  # a set-up message is small; a bigger one is refused
_CN_PREFIX = "privnlp mpc party "


def party_common_name(rank: int) -> str:
    """The common name ``privnlp fl certs --parties`` writes into ``party-<rank>.pem``."""
    return f"{_CN_PREFIX}{rank}"


def _role(rank: int) -> str:
    return f"{ROLE_NAMES.get(rank, 'party')} (rank {rank})"


def _rank_of_cn(cn: str | None) -> int | None:
    if cn and cn.startswith(_CN_PREFIX) and cn[len(_CN_PREFIX) :].isdigit():
        return int(cn[len(_CN_PREFIX) :])
    return None


def _peer_rank(sock: ssl.SSLSocket) -> tuple[int | None, str | None]:
    cert = sock.getpeercert() or {}
    cn = None
    for rdn in cert.get("subject", ()):
        for k, v in rdn:
            if k == "commonName":
                cn = v
    return _rank_of_cn(cn), cn


@dataclass(frozen=True)
class PartyTLS:
    """One party's TLS material: the deployment's CA certificate, its own certificate and key."""

    ca_certfile: Path
    certfile: Path
    keyfile: Path

    @classmethod
    def in_dir(cls, d: str | os.PathLike, rank: int) -> PartyTLS:
        """``ca.crt``, ``party-<rank>.pem`` and ``party-<rank>.key`` in ``d`` (``privnlp fl certs d
        --parties 3``)."""
        p = Path(d)
        return cls(p / CA_CERT, p / f"party-{rank}.pem", p / f"party-{rank}.key")

    def check(self, rank: int) -> PartyTLS:
        """Present, not expired, signed by the CA, the key matching the certificate, and the certificate
        naming ``rank``: else :class:`InvalidArgument` naming the file (before anything is sent)."""
        check_party_certificate(self.certfile, self.keyfile, self.ca_certfile)
        cert = x509.load_pem_x509_certificate(Path(self.certfile).read_bytes())
        cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        cn = str(cns[0].value) if cns else None
        if _rank_of_cn(cn) != rank:
            raise InvalidArgument(
                f"party certificate: {self.certfile} names {cn!r}, not {party_common_name(rank)!r}: it "
                f"is not the certificate of {_role(rank)}; use party-{rank}.pem of `privnlp fl certs DIR "
                "--parties 3`"
            )
        return self

    def context(self, *, server: bool) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.check_hostname = False  # the identity is the rank in the certificate, checked by hand
        ctx.verify_mode = ssl.CERT_REQUIRED  # both directions: mutual authentication
        ctx.load_verify_locations(cafile=str(self.ca_certfile))
        ctx.load_cert_chain(str(self.certfile), str(self.keyfile))
        return ctx


@dataclass(frozen=True)
class TLSSettings:
    """What a party needs to join the mesh: its rank, Alice's address (``host``, ``port``), its TLS
    material, the deadline of the set-up and of every later wait, and, for Alice only, the address she
    listens on (``bind``, default: ``(host, port)``)."""

    rank: int
    host: str
    port: int
    tls: PartyTLS
    timeout: float = 60.0
    bind: tuple[str, int] | None = None


# --------------------------------------------------------------------------------------------
# set-up (blocking sockets with deadlines)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _recv_exact(sock: ssl.SSLSocket, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        sock.settimeout(_left(deadline))
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


def _send_control(sock: ssl.SSLSocket, msg: Mapping[str, Any]) -> None:
    data = json.dumps(dict(msg)).encode()
    sock.sendall(_HDR.pack(CONTROL, len(data)) + data)


def _recv_control(sock: ssl.SSLSocket, deadline: float) -> dict:
    ch, n = _HDR.unpack(_recv_exact(sock, _HDR.size, deadline))
    if ch != CONTROL or n > _MAX_CONTROL:
        raise ProtocolError(f"unexpected set-up message (channel {ch}, {n} bytes)")
    msg = json.loads(_recv_exact(sock, n, deadline))
    if not isinstance(msg, dict):
        raise ProtocolError("malformed set-up message")
    return msg


def _tcp_nodelay(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _accept_peers(
    lsock: socket.socket,
    ctx: ssl.SSLContext,
    expected: set[int],
    me: int,
    deadline: float,
    refusals: list[str],
    world: list[int] | None = None,
) -> dict[int, tuple[ssl.SSLSocket, dict, str]]:
    """Accept until every rank of ``expected`` is connected with a certificate naming it; refuse (and
    record) everything else. Returns ``{rank: (socket, hello, peer address)}``."""
    got: dict[int, tuple[ssl.SSLSocket, dict, str]] = {}
    while set(got) != expected:
        try:
            lsock.settimeout(_left(deadline))
            raw, addr = lsock.accept()
        except TimeoutError:
            missing = ", ".join(_role(r) for r in sorted(expected - set(got)))
            why = f"; refused: {'; '.join(refusals)}" if refusals else ""
            raise ProtocolError(
                f"{_role(me)}: {missing} did not join with a valid certificate before the timeout{why}"
            ) from None
        _tcp_nodelay(raw)
        try:
            raw.settimeout(_left(deadline))
            s = ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError, TimeoutError) as e:
            refusals.append(f"{addr[0]}:{addr[1]} failed the TLS handshake ({_ssl_reason(e)})")
            raw.close()
            continue
        r, cn = _peer_rank(s)
        why = None
        if r is None or r not in expected:
            why = f"its certificate ({cn!r}) is not that of a party expected here"
        elif r in got:
            why = f"{_role(r)} is already connected"
        else:
            try:
                hello = _recv_control(s, deadline)
            except (ssl.SSLError, OSError, TimeoutError, ProtocolError, ValueError) as e:
                why = f"no valid hello ({_ssl_reason(e)})"
            else:
                if hello.get("rank") != r:
                    why = f"it claims rank {hello.get('rank')!r} with the certificate of {_role(r)}"
                elif world is not None and hello.get("world") != world:
                    why = (
                        f"its parties {hello.get('world')} differ from {world} (both must use the "
                        "same --provider)"
                    )
        if why is not None:
            refusals.append(f"{addr[0]}:{addr[1]} refused: {why}")
            with contextlib.suppress(OSError):
                s.close()
            continue
        got[r] = (s, hello, addr[0])
    return got


def _ssl_reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {e.verify_message}"
    if isinstance(e, ssl.SSLError):
        return str(e.reason or e)
    if isinstance(e, TimeoutError):
        return "timed out"
    return f"{type(e).__name__}: {e}"


def _connect(
    ctx: ssl.SSLContext,
    host: str,
    port: int,
    want: int,
    me: int,
    deadline: float,
) -> ssl.SSLSocket:
    """Connect to ``want``'s listener (retrying while nobody listens), check its certificate names
    ``want`` and say hello."""
    while True:
        try:
            raw = socket.create_connection((host, port), timeout=_left(deadline))
            break
        except TimeoutError:
            raise ProtocolError(
                f"{_role(me)}: {_role(want)} at {host}:{port} did not answer before the timeout"
            ) from None
        except OSError:  # refused / unreachable: it may not listen yet
            time.sleep(0.05)
    _tcp_nodelay(raw)
    try:
        raw.settimeout(_left(deadline))
        s = ctx.wrap_socket(raw, server_side=False)
    except ssl.SSLCertVerificationError as e:
        raw.close()
        raise ProtocolError(
            f"{_role(me)}: the party at {host}:{port} presented a certificate not signed by the "
            f"deployment's CA ({e.verify_message}); refused, nothing sent"
        ) from None
    except (ssl.SSLError, OSError, TimeoutError) as e:
        raw.close()
        raise ProtocolError(
            f"{_role(me)}: TLS handshake with {host}:{port} failed ({_ssl_reason(e)})"
        ) from None
    r, cn = _peer_rank(s)
    if r != want:
        s.close()
        raise ProtocolError(
            f"{_role(me)}: the party at {host}:{port} presented the certificate {cn!r}, expected "
            f"{party_common_name(want)!r} ({_role(want)}); refused, nothing sent"
        )
    return s


@dataclass
class Mesh:
    """The authenticated sockets of one party: ``socks[rank]`` for every other party."""

    rank: int
    ranks: tuple[int, ...]
    socks: dict[int, ssl.SSLSocket]

    def close(self) -> None:
        for s in self.socks.values():
            with contextlib.suppress(OSError):
                s.close()


def connect_mesh(settings: TLSSettings, ranks: list[int] | tuple[int, ...]) -> Mesh:
    """Build the full mesh of mutually authenticated TLS connections between ``ranks`` (rank 0 listens
    on the rendezvous). Raises :class:`ProtocolError` on a refused peer, a refused own certificate or
    the deadline; nothing but the set-up messages (ranks, ports) is sent before it returns."""
    me, ranks = settings.rank, sorted(int(r) for r in ranks)
    if me not in ranks or ranks[0] != 0:
        raise InvalidArgument(f"rank must be one of {ranks}; got {me}")
    deadline = time.monotonic() + float(settings.timeout)
    refusals: list[str] = []
    socks: dict[int, ssl.SSLSocket] = {}
    try:
        if me == 0:
            srv = settings.tls.context(server=True)
            bind = settings.bind or (settings.host, settings.port)
            try:
                lsock = socket.create_server(bind)
            except OSError as e:
                raise ProtocolError(
                    f"alice: cannot listen on {bind[0]}:{bind[1]} ({e.strerror}); pick another port"
                ) from None
            with lsock:
                got = _accept_peers(lsock, srv, set(ranks) - {0}, 0, deadline, refusals, ranks)
            roster = {
                str(r): [addr, int(h["listen"])]
                for r, (_, h, addr) in got.items()
                if h.get("listen")
            }
            for r, (s, _, _) in got.items():
                socks[r] = s
                _send_control(s, {"roster": roster})
        else:
            cli = settings.tls.context(server=False)
            srv = settings.tls.context(server=True)
            s0 = _connect(cli, settings.host, settings.port, 0, me, deadline)
            socks[0] = s0
            higher = [r for r in ranks if r > me]
            lsock = None
            if higher:
                lsock = socket.create_server((s0.getsockname()[0], 0))
            with lsock or contextlib.nullcontext():
                try:
                    _send_control(
                        s0,
                        {
                            "rank": me,
                            "world": ranks,
                            "listen": lsock.getsockname()[1] if lsock else None,
                        },
                    )
                    roster = _recv_control(s0, deadline)["roster"]
                except TimeoutError:
                    raise ProtocolError(
                        f"{_role(me)}: alice did not complete the set-up before the timeout (another "
                        "party missing or refused)"
                    ) from None
                except (ssl.SSLError, ConnectionError) as e:
                    raise ProtocolError(
                        f"{_role(me)}: alice refused this party during the set-up ({_ssl_reason(e)}): "
                        "is the certificate signed by the deployment's CA and the one of this rank? "
                        "Nothing was sent"
                    ) from None
                for r in ranks:
                    if 0 < r < me:
                        host, port = roster[str(r)]
                        s = _connect(cli, host, int(port), r, me, deadline)
                        _send_control(s, {"rank": me, "world": ranks, "listen": None})
                        socks[r] = s
                if lsock is not None:
                    got = _accept_peers(lsock, srv, set(higher), me, deadline, refusals, ranks)
                    socks.update({r: s for r, (s, _, _) in got.items()})
    except TimeoutError:
        for s in socks.values():
            s.close()
        raise ProtocolError(
            f"{_role(me)}: the TLS set-up did not finish before the timeout"
        ) from None
    except OSError as e:  # ssl.SSLError included: a peer refused us or vanished
        for s in socks.values():
            with contextlib.suppress(OSError):
                s.close()
        raise ProtocolError(
            f"{_role(me)}: the TLS set-up failed ({_ssl_reason(e)}); nothing was sent"
        ) from None
    except BaseException:
        for s in socks.values():
            with contextlib.suppress(OSError):
                s.close()
        raise
    for s in socks.values():
        s.setblocking(False)
    return Mesh(me, tuple(ranks), socks)


# --------------------------------------------------------------------------------------------
# the communicator


@dataclass(frozen=True)
class _Group:
    ranks: tuple[int, ...]
    channel: int


class _Work:
    """What ``isend`` / ``irecv`` return: ``wait()`` completes the operation."""

    def __init__(self, fn: Callable[[], Any] | None = None) -> None:
        self._fn = fn

    def wait(self) -> bool:
        if self._fn is not None:
            fn, self._fn = self._fn, None
            fn()
        return True

    def is_completed(self) -> bool:
        return self._fn is None


def _reducer(op: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    R = dist.ReduceOp
    for known, fn in (
        (R.SUM, torch.add),
        (R.BXOR, torch.bitwise_xor),
        (R.BAND, torch.bitwise_and),
        (R.BOR, torch.bitwise_or),
        (R.PRODUCT, torch.mul),
        (R.MAX, torch.maximum),
        (R.MIN, torch.minimum),
    ):
        if op == known:
            return fn
    raise ProtocolError(f"reduce op {op!r} is not supported by the TLS channels")


_log = crypten.communicator.communicator._logging


class TLSCommunicator(crypten.communicator.Communicator):  # type: ignore[misc, name-defined]
    """CrypTen communicator over the authenticated TLS mesh (same calls, same statistics as CrypTen's
    ``DistributedCommunicator``; groups: ``main_group`` = the computing parties, ``ttp_group`` = all,
    ``ttp_comm_group`` = Alice and the TTP)."""

    BYTES_PER_ELEMENT = 8
    instance: ClassVar[Any] = None
    settings: ClassVar[TLSSettings | None] = None
    transport = "tls"

    def __init__(self, mesh: Mesh, world_size: int, init_ttp: bool, timeout: float) -> None:
        self.rank, self.world_size = mesh.rank, int(world_size)
        self.mesh, self.timeout, self.ttp_initialized = mesh, float(timeout), init_ttp
        total = self.world_size + (1 if init_ttp else 0)
        self.main_group = _Group(tuple(range(self.world_size)), MAIN)
        self.ttp_group = _Group(tuple(range(total)), TTP_GROUP)
        self.ttp_comm_group = _Group((0, total - 1), TTP_COMM)
        self._name = f"rank{self.rank}"
        self._socks = dict(mesh.socks)
        self._out: dict[int, deque] = {r: deque() for r in self._socks}
        self._in: dict[int, bytearray] = {r: bytearray() for r in self._socks}
        self._big: dict[int, list | None] = {}  # peer -> [channel, payload, view, bytes filled]
        self._scratch = bytearray(_SCRATCH)
        self._frames: dict[tuple[int, int], deque] = {}
        self._closed: dict[int, str] = {}
        self._bye: set[int] = set()
        self.reset_communication_stats()

    # -- CrypTen's class interface ----------------------------------------------------------
    @classmethod
    def is_initialized(cls) -> bool:
        return cls.instance is not None

    @classmethod
    def initialize(cls, rank: int = 0, world_size: int = 2, init_ttp: bool = False) -> None:
        s = cls.settings
        if s is None:
            raise ProtocolError("TLS channels are not configured (use_tls_channels)")
        ws = int(os.environ.get("WORLD_SIZE", 2))
        ranks = list(range(ws + (1 if init_ttp else 0)))
        cls.instance = cls(connect_mesh(s, ranks), ws, init_ttp, s.timeout)

    @classmethod
    def get(cls) -> Any:
        return cls.instance

    @classmethod
    def shutdown(cls) -> None:
        inst = cls.instance
        if inst is None:
            return
        try:
            if inst.rank == 0 and inst.ttp_initialized:
                inst.send_obj("terminate", inst.get_ttp_rank(), inst.ttp_group)
            inst._goodbye()
        finally:
            inst.mesh.close()
            cls.instance = None

    # -- the event loop ---------------------------------------------------------------------
    def _enqueue(self, peer: int, channel: int, payload: bytes) -> None:
        if peer not in self._socks:
            raise ProtocolError(f"{_role(self.rank)} has no channel to rank {peer}")
        if peer in self._closed:
            raise ProtocolError(f"{_role(peer)} closed the connection ({self._closed[peer]})")
        q = self._out[peer]
        if len(payload) <= _SMALL:
            q.append(memoryview(_HDR.pack(channel, len(payload)) + bytes(payload)))
        else:
            q.append(memoryview(_HDR.pack(channel, len(payload))))
            mv = memoryview(payload)
            q.extend(mv[i : i + _CHUNK] for i in range(0, len(mv), _CHUNK))
        self._write(peer)

    def _write(self, peer: int) -> None:
        q, s = self._out[peer], self._socks[peer]
        while q:
            try:
                n = s.send(q[0])
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                return
            except OSError as e:
                self._closed[peer] = _ssl_reason(e)
                q.clear()
                return
            if n < len(q[0]):
                q[0] = q[0][n:]
            else:
                q.popleft()

    def _read(self, peer: int) -> None:
        """Drain what ``peer`` sent: small frames through a fixed scratch buffer (no allocation per
        read), the body of a large frame straight into its own buffer (``recv_into``, no copies)."""
        s, buf, scratch = self._socks[peer], self._in[peer], self._scratch
        while peer not in self._closed:
            big = self._big.get(peer)
            try:
                if big is not None:
                    n = s.recv_into(big[2][big[3] :])
                else:
                    n = s.recv_into(scratch)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                break
            except OSError as e:
                self._closed[peer] = _ssl_reason(e)
                break
            if not n:
                self._closed[peer] = "end of stream"
                break
            if big is not None:
                big[3] += n
                if big[3] == len(big[1]):
                    self._frames.setdefault((peer, big[0]), deque()).append(big[1])
                    self._big[peer] = None
                continue
            buf += memoryview(scratch)[:n]
            off = 0
            while len(buf) - off >= _HDR.size:
                ch, size = _HDR.unpack_from(buf, off)
                have = len(buf) - off - _HDR.size
                start = off + _HDR.size
                if have < size:
                    if size > _SMALL:  # a large frame: read the rest of it into its own buffer
                        payload = bytearray(size)
                        payload[:have] = buf[start:]
                        self._big[peer] = [ch, payload, memoryview(payload), have]
                        off = len(buf)
                    break
                payload = buf[start : start + size]
                off = start + size
                if ch == CONTROL:
                    if bytes(payload) == b"bye":
                        self._bye.add(peer)
                    continue
                self._frames.setdefault((peer, ch), deque()).append(payload)
            if off:
                del buf[:off]

    def _progress(self, ready: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            for p in self._socks:
                if self._out[p]:
                    self._write(p)
                self._read(p)
            if ready():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError(
                    f"{_role(self.rank)}: {what} did not arrive within timeout={self.timeout} s"
                )
            if any(self._socks[p].pending() for p in self._socks if p not in self._closed):
                continue
            rl = [s for p, s in self._socks.items() if p not in self._closed]
            wl = [s for p, s in self._socks.items() if self._out[p] and p not in self._closed]
            if not rl and not wl:
                if ready():
                    return
                raise ProtocolError(f"{_role(self.rank)}: every peer closed; {what} never came")
            select.select(rl, wl, [], min(left, 1.0))

    def _payload(self, src: int, group: _Group) -> bytearray:
        q = self._frames.setdefault((src, group.channel), deque())

        def ready() -> bool:
            if q:
                return True
            if src in self._closed:
                raise ProtocolError(
                    f"{_role(self.rank)}: {_role(src)} closed the connection ({self._closed[src]})"
                )
            return False

        self._progress(ready, f"a message from {_role(src)}")
        return q.popleft()

    def _flush(self, timeout: float | None = None) -> None:
        self._progress(
            lambda: all(not q for p, q in self._out.items() if p not in self._closed),
            "flushing the outgoing messages",
            timeout,
        )

    def _goodbye(self) -> None:
        for p in self._socks:
            if p not in self._closed:
                with contextlib.suppress(ProtocolError):
                    self._enqueue(p, CONTROL, b"bye")
        with contextlib.suppress(ProtocolError):
            self._progress(
                lambda: all(
                    (p in self._bye or p in self._closed) and not self._out[p] for p in self._socks
                ),
                "the peers' goodbye",
                timeout=min(self.timeout, 10.0),
            )

    # -- tensors on the wire ----------------------------------------------------------------
    def _send_tensor(self, t: torch.Tensor, dst: int, group: _Group) -> None:
        if dst == self.rank:
            raise ProtocolError(f"{_role(self.rank)} cannot send to itself")
        a = t.detach().contiguous().cpu()
        if not a.numel():
            self._enqueue(dst, group.channel, b"")
        elif a.numel() * a.element_size() <= _SMALL:
            self._enqueue(dst, group.channel, a.numpy().tobytes())
        else:  # no copy: the queue holds the tensor's memory until sent (every call flushes)
            self._enqueue(dst, group.channel, memoryview(a.numpy()).cast("B"))

    def _checked(self, payload: bytearray, shape: Any, dtype: torch.dtype, src: int) -> None:
        n = int(np.prod(tuple(shape), dtype=np.int64))
        want = n * torch.empty((), dtype=dtype).element_size()
        if len(payload) != want:
            raise ProtocolError(
                f"{_role(self.rank)}: {_role(src)} sent {len(payload)} bytes where a "
                f"{tuple(shape)} {dtype} tensor ({want} bytes) was expected; refusing"
            )

    def _recv_tensor(self, out: torch.Tensor, src: int, group: _Group) -> torch.Tensor:
        """Receive into ``out`` (in place)."""
        payload = self._payload(src, group)
        self._checked(payload, out.shape, out.dtype, src)
        if len(payload):
            out.copy_(torch.frombuffer(payload, dtype=out.dtype).reshape(out.shape))
        return out

    def _recv_new(self, shape: Any, dtype: torch.dtype, src: int, group: _Group) -> torch.Tensor:
        """Receive a new tensor (its memory is the received buffer: no copy)."""
        payload = self._payload(src, group)
        self._checked(payload, shape, dtype, src)
        if not len(payload):
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(payload, dtype=dtype).reshape(shape)

    def _members(self, group: _Group | None) -> tuple[int, ...]:
        return (group or self.main_group).ranks

    # -- CrypTen's calls --------------------------------------------------------------------
    @_log
    def send(self, tensor: torch.Tensor, dst: int, group: _Group | None = None) -> None:
        self._send_tensor(tensor.data, dst, group or self.main_group)
        self._flush()

    @_log
    def recv(
        self, tensor: torch.Tensor, src: int | None = None, group: _Group | None = None
    ) -> torch.Tensor:
        g = group or self.main_group
        if src is None:
            others = [r for r in g.ranks if r != self.rank]
            self._progress(
                lambda: any(self._frames.get((r, g.channel)) for r in others),
                "a message from any party",
            )
            src = next(r for r in others if self._frames.get((r, g.channel)))
        return self._recv_new(tensor.shape, tensor.dtype, src, g)

    @_log
    def isend(self, tensor: torch.Tensor, dst: int, group: _Group | None = None) -> _Work:
        self._send_tensor(tensor.data, dst, group or self.main_group)
        return _Work(self._flush)

    @_log
    def irecv(
        self, tensor: torch.Tensor, src: int | None = None, group: _Group | None = None
    ) -> _Work:
        g = group or self.main_group
        if src is None:
            raise ProtocolError("irecv needs the source rank on the TLS channels")
        return _Work(lambda: self._recv_tensor(tensor.data, src, g))

    @_log
    def scatter(
        self, scatter_list: list, src: int, size: Any = None, device: Any = None
    ) -> torch.Tensor:
        g = self.main_group
        if src == self.rank:
            for r in g.ranks:
                if r != self.rank:
                    self._send_tensor(scatter_list[r].data, r, g)
            self._flush()
            return scatter_list[self.rank]
        if size is None:
            size = scatter_list[self.rank].size()
        return self._recv_new(size, torch.long, src, g)

    def _reduce_from_all(self, mine: torch.Tensor, op: Any) -> torch.Tensor:
        """Receive every other member's tensor and reduce in rank order (the same result on every
        party, also for floats)."""
        fn = _reducer(op)
        acc = None
        for r in self.main_group.ranks:
            v = (
                mine
                if r == self.rank
                else self._recv_new(mine.shape, mine.dtype, r, self.main_group)
            )
            acc = v.clone() if acc is None else fn(acc, v)
        return acc

    @_log
    def reduce(
        self, input: Any, dst: int, op: Any = dist.ReduceOp.SUM, batched: bool = False
    ) -> Any:
        items = list(input) if batched else [input]
        if self.rank != dst:
            for t in items:
                self._send_tensor(t.data, dst, self.main_group)
            self._flush()
            return None
        out = [self._reduce_from_all(t.data, op) for t in items]
        return out if batched else out[0]

    @_log
    def all_reduce(self, input: Any, op: Any = dist.ReduceOp.SUM, batched: bool = False) -> Any:
        items = list(input) if batched else [input]
        for t in items:
            for r in self.main_group.ranks:
                if r != self.rank:
                    self._send_tensor(t.data, r, self.main_group)
        out = [self._reduce_from_all(t.data, op) for t in items]
        self._flush()
        return out if batched else out[0]

    @_log
    def gather(self, tensor: torch.Tensor, dst: int) -> list:
        g = self.main_group
        if self.rank != dst:
            self._send_tensor(tensor.data, dst, g)
            self._flush()
            return [None]
        return [
            tensor.data.clone()
            if r == self.rank
            else self._recv_new(tensor.size(), torch.long, r, g)
            for r in g.ranks
        ]

    @_log
    def all_gather(self, tensor: torch.Tensor) -> list:
        g = self.main_group
        for r in g.ranks:
            if r != self.rank:
                self._send_tensor(tensor.data, r, g)
        out = [
            tensor.data.clone()
            if r == self.rank
            else self._recv_new(tensor.size(), torch.long, r, g)
            for r in g.ranks
        ]
        self._flush()
        return out

    @_log
    def broadcast(
        self, input: Any, src: int, group: _Group | None = None, batched: bool = False
    ) -> Any:
        g = group or self.main_group
        items = list(input) if batched else [input]
        if self.rank == src:
            for t in items:
                for r in g.ranks:
                    if r != self.rank:
                        self._send_tensor(t.data, r, g)
            self._flush()
        else:
            for t in items:
                self._recv_tensor(t.data, src, g)
        return input

    @_log
    def barrier(self, group: _Group | None = None) -> None:
        g = group or self.main_group
        others = [r for r in g.ranks if r != self.rank]
        for r in others:
            self._enqueue(r, g.channel, b"")
        for r in others:
            if len(self._payload(r, g)):
                raise ProtocolError(f"{_role(self.rank)}: malformed barrier from {_role(r)}")

    @_log
    def send_obj(self, obj: Any, dst: int, group: _Group | None = None) -> None:
        self._enqueue(dst, (group or self.main_group).channel, pickle.dumps(obj))
        self._flush()

    @_log
    def recv_obj(self, src: int, group: _Group | None = None) -> Any:
        # CrypTen's restricted unpickler, and only from an authenticated peer
        return crypten.common.serial.restricted_loads(
            bytes(self._payload(src, group or self.main_group))
        )

    @_log
    def broadcast_obj(self, obj: Any, src: int, group: _Group | None = None) -> Any:
        g = group or self.main_group
        if self.rank == src:
            if obj is None:
                raise ProtocolError("the source party must provide obj for broadcast_obj")
            buf = pickle.dumps(obj)
            for r in g.ranks:
                if r != self.rank:
                    self._enqueue(r, g.channel, buf)
            self._flush()
            return obj
        return crypten.common.serial.restricted_loads(bytes(self._payload(src, g)))

    def get_world_size(self) -> int:
        return self.world_size

    def get_rank(self) -> int:
        return self.rank

    def get_ttp_rank(self) -> int:
        return self.world_size

    def set_name(self, name: str) -> None:
        self._name = str(name)

    def get_name(self) -> str:
        return self._name

    def get_distributed_backend(self) -> str:
        return "tls"


# --------------------------------------------------------------------------------------------
# installing it into CrypTen


def _client_setup_generators(self: Any) -> None:
    """TTPClient: receive the generator seed the TTP shares with this party (TLS channels)."""
    c = crypten.communicator.get()
    seed = torch.empty(size=(), dtype=torch.long)
    c.irecv(seed, c.get_ttp_rank(), c.ttp_group).wait()
    c.barrier(c.ttp_group)
    self.generator = torch.Generator(device="cpu")
    self.generator.manual_seed(seed.item())
    self.generator_cuda = None


@contextlib.contextmanager
def use_tls_channels(settings: TLSSettings) -> Iterator[None]:
    """Within this block, ``crypten.init()`` connects through the authenticated TLS mesh instead of
    torch.distributed (CrypTen's communicator class and the TTP client's seed set-up are swapped; both
    are restored on exit)."""
    comm_pkg = crypten.communicator
    client_cls = crypten.mpc.provider.ttp_provider.TTPClient._TTPClient__TTPClient
    old_cls, old_setup = comm_pkg.DistributedCommunicator, client_cls._setup_generators
    TLSCommunicator.settings = settings
    comm_pkg.DistributedCommunicator = TLSCommunicator
    client_cls._setup_generators = _client_setup_generators
    try:
        yield
    finally:
        comm_pkg.DistributedCommunicator = old_cls
        client_cls._setup_generators = old_setup
        TLSCommunicator.settings = None


def is_tls_active() -> bool:
    """True when CrypTen currently runs on the TLS channels."""
    return isinstance(TLSCommunicator.instance, TLSCommunicator)
