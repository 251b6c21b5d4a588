"""Issue #30 item 3: one interface per mechanism family (runtime-checkable Protocols in core.protocols);
scenarios dispatch with isinstance, so a family is a set of methods, not a class name."""

from __future__ import annotations

import pytest

from privnlp.core import PrivacyClaim
from privnlp.core.protocols import (
    MECHANISM_FAMILIES,
    EmbeddingFreezer,
    ModelDefense,
    PrivateTrainer,
    UpdateTransformer,
)
from privnlp.core.registry import LEAKY_TWINS, MECHANISMS
from privnlp.evaluation import FunctionMechanism


@pytest.mark.parametrize("name", MECHANISMS.names())
def test_every_mechanism_belongs_to_a_family(name):
    mech = MECHANISMS.get(name).example("quick")
    fams = [f.__name__ for f in MECHANISM_FAMILIES if isinstance(mech, f)]
    assert fams, f"{name}: implements none of the mechanism families in privnlp.core.protocols"


@pytest.mark.parametrize("name", LEAKY_TWINS.names())
def test_twin_is_in_the_family_of_its_mechanism(name):
    real = MECHANISMS.get(name).example("quick")
    twin_cls = LEAKY_TWINS.get(name)
    twin = twin_cls.example("quick") if hasattr(twin_cls, "example") else twin_cls()
    for fam in MECHANISM_FAMILIES:
        if isinstance(real, fam):
            assert isinstance(twin, fam), f"twin of {name} is not a {fam.__name__}"


def test_families_of_the_gradient_defenses():
    assert isinstance(MECHANISMS.get("dp_sgd")(noise_multiplier=1.0), PrivateTrainer)
    frozen = MECHANISMS.get("frozen_embeddings")()
    assert isinstance(frozen, EmbeddingFreezer) and not isinstance(frozen, UpdateTransformer)
    prune = MECHANISMS.get("gradient_pruning").example("quick")
    assert isinstance(prune, UpdateTransformer) and not isinstance(prune, EmbeddingFreezer)
    assert not isinstance(prune, PrivateTrainer)


def test_user_callables_join_a_family_by_the_operation_they_declare():
    t = FunctionMechanism(
        lambda g, *, rng=None: g, claim=PrivacyClaim.none(), operation="transform"
    )
    assert isinstance(t, UpdateTransformer) and not isinstance(t, (ModelDefense, PrivateTrainer))
    bare = FunctionMechanism(len, claim=PrivacyClaim.none())
    assert not any(isinstance(bare, f) for f in MECHANISM_FAMILIES)


class _NotADefense:
    def claim(self):
        return PrivacyClaim.none()


def test_scenario_refuses_an_object_of_no_family_with_the_families_named():
    torch = pytest.importorskip("torch")
    from privnlp.core.errors import InvalidArgument
    from privnlp.evaluation.scenarios.gradient import client_update

    model = torch.nn.Linear(2, 2)
    with pytest.raises(
        InvalidArgument, match="PrivateTrainer.*EmbeddingFreezer.*UpdateTransformer"
    ):
        client_update(model, {"input_ids": torch.zeros(1, 2)}, _NotADefense(), rng=0)
