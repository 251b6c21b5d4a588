"""privnlp.core.rng: secure generators are judged by what they are (issue #28 item 6).

The adversary: a caller (or a library between the caller and privnlp) re-seeds a secure generator, so the
"OS entropy" noise becomes reproducible by whoever knows the seed, while the claim still says "secure".
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from privnlp.core.errors import InvalidArgument
from privnlp.core.rng import (
    REFUSE_SEEDED_ENV,
    is_secure,
    noise_is_seeded,
    noise_torch,
    secure_numpy,
    secure_torch,
)
from privnlp.mechanisms.vocab import laplace_threshold, release_histogram

HIST = {f"w{i}": 50 for i in range(200)}


def test_fresh_secure_generators_are_secure_and_independent():
    a, b = secure_torch(), secure_torch()
    assert is_secure(a) and is_secure(b) and not noise_is_seeded(a)
    assert not torch.equal(torch.rand(8, generator=a), torch.rand(8, generator=b))
    assert is_secure(secure_numpy()) and not noise_is_seeded(secure_numpy())
    assert not is_secure(torch.Generator().manual_seed(0))
    assert not is_secure(np.random.default_rng(0))


@pytest.mark.parametrize(
    "reseed",
    [
        lambda g: g.manual_seed(1234),
        lambda g: torch.Generator.manual_seed(
            g, 1234
        ),  # the base method: caught by the seed itself
        lambda g: g.set_state(torch.Generator().manual_seed(1234).get_state()),
        lambda g: torch.Generator.set_state(g, torch.Generator().manual_seed(1234).get_state()),
    ],
)
def test_a_reseeded_secure_torch_generator_is_no_longer_secure(reseed):
    g = secure_torch()
    reseed(g)
    assert not is_secure(g)
    assert noise_is_seeded(g)


def test_release_histogram_refuses_a_reseeded_secure_generator(monkeypatch):
    cal = laplace_threshold(1.0, 1e-5, 1)
    # the adversary's view today: two releases with the "secure" generator re-seeded to 1234 are identical
    h1 = release_histogram(HIST, cal, rng=secure_torch().manual_seed(1234))
    h2 = release_histogram(HIST, cal, rng=secure_torch().manual_seed(1234))
    assert h1.counts == h2.counts  # reproducible noise: it must therefore count as seeded ...
    assert noise_is_seeded(secure_torch().manual_seed(1234))
    # ... so a deployment that refuses seeded privacy noise refuses it
    monkeypatch.setenv(REFUSE_SEEDED_ENV, "1")
    with pytest.raises(InvalidArgument, match="may not be seeded"):
        release_histogram(HIST, cal, rng=secure_torch().manual_seed(1234))
    # a fresh secure generator is still accepted, and two releases differ
    r1 = release_histogram(HIST, cal, rng=secure_torch())
    r2 = release_histogram(HIST, cal, rng=secure_torch())
    assert r1.counts != r2.counts


def test_noise_torch_treats_a_reseeded_secure_generator_as_a_seed():
    gens, seeded = noise_torch(secure_torch().manual_seed(99), 2)
    again, _ = noise_torch(secure_torch().manual_seed(99), 2)
    assert seeded  # the claim says "noise seeded"
    assert torch.equal(torch.rand(4, generator=gens[0]), torch.rand(4, generator=again[0]))
    fresh, seeded = noise_torch(secure_torch(), 2)
    assert not seeded and all(is_secure(g) for g in fresh)


def test_secure_numpy_cannot_be_reseeded_and_copies_are_not_secure():
    g = secure_numpy()
    with pytest.raises(InvalidArgument, match="cannot be re-seeded"):
        g.bit_generator.state = np.random.PCG64DXSM(1234).state
    for dup in (copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        # a copy replays the original's draws: it is a seeded generator
        assert not is_secure(dup) and noise_is_seeded(dup)
        assert dup.random() == copy.deepcopy(g).random()
