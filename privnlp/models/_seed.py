"""Seeded construction without global RNG side effects.

Hugging Face and ``torch.nn.init`` draw from torch's *global* generator and offer no
``generator=`` argument, so we fork the CPU RNG (``torch.random.fork_rng``), seed the fork, and
the global state is restored on exit: the caller's ``torch.random.get_rng_state()`` is unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from privnlp.core.errors import check_range


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the body with torch's CPU RNG seeded to ``seed``; restore the caller's state afterwards."""
    import torch  # deferred: torch: builders/tokenization (light paths) import this module

    check_range("seed", seed, 0, 2**63 - 1, integer=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


@contextlib.contextmanager
def hf_quiet() -> Iterator[None]:
    """Hide transformers' progress bars ("Loading weights", "Writing model shards") for the body."""
    # deferred: transformers: light path, as above
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
