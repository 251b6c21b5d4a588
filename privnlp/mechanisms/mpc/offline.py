"""Offline phase for the TTP provider: one round trip to the trusted initializer per text.

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (Sec. 4: "the TI's activities are
independent of the data ... MPC protocols can be separated in an off-line phase — during which
the TI generates correlated randomness and distributes it to Alice and Bob — and an online phase").

CrypTen 0.4.1's TTP provider asks the TTP for every Beaver triple / random bit separately, at the
moment it is needed: one blocking round trip Alice <-> TTP per AND gate of every comparison
circuit (~47 per text for the TextCNN, more than the Alice <-> Bob rounds). The requests only
depend on tensor *shapes*, so after tracing one forward pass (CrypTen's own
``TupleProvider.trace`` / ``fill_cache``), each further forward of the same shape gets all its
tuples ahead of time in **one** batched request (:meth:`OfflinePhase.fill`). The randomness is the
same as CrypTen's (same PRG streams, consumed in the same order on Alice, Bob and the TTP); only
the number of messages changes. Imports CrypTen: load lazily.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from privnlp.core.errors import ProtocolError

from ._crypten_shim import import_crypten

crypten = import_crypten()

__all__ = ["OfflinePhase", "BatchingTTPServer", "BATCH_FUNCTION"]

BATCH_FUNCTION = "privnlp_batch"


def _broadcast(s0: Any, s1: Any) -> torch.Size:
    """``torch.broadcast_shapes`` without its first-call import of sympy (seconds)."""
    a, b = tuple(s0), tuple(s1)
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    return torch.Size(max(x, y) if min(x, y) == 1 else x for x, y in zip(a, b))


def _result_size(func: str, args: tuple, kwargs: dict) -> torch.Size:
    """Shape of what the TTP returns for one request (Bob computes it the same way in CrypTen's
    TTP provider; meta tensors would be free but their first use imports sympy: seconds)."""
    if func == "additive":
        size0, size1, op, *rest = args
        if op == "mul":
            return _broadcast(size0, size1)
        a = torch.zeros(size0, dtype=torch.long)
        b = torch.zeros(size1, dtype=torch.long)
        return getattr(torch, op)(a, b, *rest, **kwargs).size()
    if func == "binary":
        return _broadcast(args[0], args[1])
    if func in ("square", "wraps", "B2A"):
        return torch.Size(args[0])
    raise ProtocolError(
        f"unknown TTP request {func!r}: the offline phase cannot size it, refusing (fail closed)"
    )


class OfflinePhase:
    """Trace the first forward, then pre-fetch each later forward's tuples in one TTP request."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.provider = crypten.mpc.get_default_provider()
        self.traced = False

    def start_trace(self) -> None:
        self.provider.request_cache = []
        self.provider.tuple_cache = {}
        self.provider.trace(True)

    def stop_trace(self) -> None:
        self.provider.trace(False)
        self.traced = True

    def fill(self) -> None:
        """Generate this party's halves of all traced tuples; Alice (rank 0) gets the TTP's
        corrections for all of them in one message."""
        self.provider.tuple_cache = {}
        if self.rank != 0:
            self.provider.fill_cache()
            return
        client = crypten.mpc.provider.ttp_provider.TTPClient.get()
        pending: list[tuple[dict, torch.Tensor]] = []

        def deferred(func_name: str, device: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            ph = torch.empty(_result_size(func_name, args, kwargs), dtype=torch.long)
            pending.append(({"function": func_name, "args": args, "kwargs": kwargs}, ph))
            return ph

        client.ttp_request = deferred  # instance attribute shadows the method during the fill
        try:
            self.provider.fill_cache()
        finally:
            del client.ttp_request
        if not pending:
            return
        flat = client.ttp_request(BATCH_FUNCTION, None, [m for m, _ in pending])
        off = 0
        for _, ph in pending:
            k = ph.numel()
            ph.copy_(flat[off : off + k].view(ph.shape))
            off += k

    def clear(self) -> None:
        """Drop unused tuples (a forward consumes exactly the traced ones)."""
        self.provider.tuple_cache = {}


def _secret_seed() -> torch.Tensor:
    return torch.tensor(int.from_bytes(os.urandom(8), "big") - 2**63, dtype=torch.long)


class BatchingTTPServer(crypten.mpc.provider.TTPServer):  # type: ignore[misc, name-defined]
    """CrypTen's TTPServer plus one request kind: a list of requests answered in one message
    (the results flattened and concatenated in request order). Serves until "terminate".

    The generator seeds it shares with each party come from ``os.urandom``: CrypTen draws them with
    ``torch.randint`` from the process's global torch generator, which a forked TTP inherits from its
    parent (predictable after a ``torch.manual_seed``; whoever knows Alice's seed knows her triple
    shares and unmasks Bob's input from the opened ``x - a``). Over the TLS channels the seeds travel on
    the authenticated mesh (``channels.py``) instead of torch.distributed."""

    def _setup_generators(self) -> None:
        c = crypten.communicator.get()
        ws = c.get_world_size()
        seeds = [_secret_seed() for _ in range(ws)]
        tls = getattr(c, "transport", "gloo") == "tls"
        if tls:
            reqs = [c.isend(seeds[i], i, c.ttp_group) for i in range(ws)]
        else:
            reqs = [dist.isend(tensor=seeds[i], dst=i, group=self.ttp_group) for i in range(ws)]
        self.generators = [torch.Generator(device="cpu") for _ in range(ws)]
        self.generators_cuda = [None for _ in range(ws)]
        for i in range(ws):
            self.generators[i].manual_seed(seeds[i].item())
            reqs[i].wait()
        if tls:
            c.barrier(c.ttp_group)
        else:
            dist.barrier(group=self.ttp_group)

    def privnlp_batch(self, requests: list) -> torch.Tensor:
        outs = []
        for m in requests:
            self.device = "cpu"
            outs.append(getattr(self, m["function"])(*m["args"], **m["kwargs"]).flatten())
        return torch.cat(outs) if outs else torch.zeros(0, dtype=torch.long)
