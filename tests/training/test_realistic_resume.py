"""``privnlp evaluate --preset realistic`` on CPU (issue #29 item 8): the expected time is known before the run
starts, and an interrupted run resumes from its cache (the second run skips the steps the first one finished).

The resume test interrupts a realistic-preset audit (a cheap defense: its scenario has no realistic victim, so a
step takes a second) after its first step with the KeyboardInterrupt a user's Ctrl-C raises, then reruns it.
"""

from __future__ import annotations

import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.core.registry import SCENARIOS
from privnlp.evaluation import audit
from privnlp.evaluation.realistic import (
    LM_BUILD_SECONDS,
    STEP_SECONDS,
    realistic_plan,
)

NAME = "phrase_fragmentation"  # fragmentation.reconstruction: defended, undefended, leaky twin = 3 steps


def test_the_plan_counts_the_audit_steps_and_says_the_expected_time():
    plan = realistic_plan(["dp_sgd"], lm_cached=True)
    # dp_sgd audits lm.canary and fedsgd.eavesdropper, each with the defense, the baseline and the leaky twin
    assert [(s.scenario, s.system) for s in plan.steps] == [
        (sc, sy)
        for sc in ("lm.canary", "fedsgd.eavesdropper")
        for sy in ("defended", "undefended", "leaky_twin")
    ]
    dp_retrain = [s for s in plan.steps if s.expected_seconds == STEP_SECONDS["lm.canary+dp"]]
    assert [s.system for s in dp_retrain] == [
        "defended",
        "leaky_twin",
    ]  # the baseline reads the cached LM
    # issue #29 saw a first estimate of 49 min for this run (2 of 6 steps after 15 min): same order here
    assert 30 * 60 < plan.expected_seconds < 70 * 60
    line = plan.describe()
    assert "6 audit steps" in line and "min" in line and "resumes" in line
    cold = realistic_plan(["dp_sgd"], lm_cached=False)
    assert cold.expected_seconds == pytest.approx(plan.expected_seconds + LM_BUILD_SECONDS)
    assert "building the realistic LM" in cold.describe()
    assert len(realistic_plan([NAME], lm_cached=True).steps) == 3
    with pytest.raises(InvalidArgument, match="unknown defense"):
        realistic_plan(["nope"])


def test_an_interrupted_realistic_run_resumes_from_its_cache(tmp_path, monkeypatch):
    scen_cls = type(SCENARIOS.get("fragmentation.reconstruction")())
    original = scen_cls.run
    calls: list[str] = []

    def counting_run(self, mechanism, *, rng):
        calls.append(type(mechanism).__name__ if mechanism is not None else "undefended")
        if interrupt_after is not None and len(calls) > interrupt_after:
            raise KeyboardInterrupt  # Ctrl-C during step k + 1
        return original(self, mechanism, rng=rng)

    monkeypatch.setattr(scen_cls, "run", counting_run)
    cache = tmp_path / "cache"
    kw = dict(preset="realistic", leaky_twin=True, cache_dir=cache, seeds=[0], progress=False)

    interrupt_after = 1
    with pytest.raises(KeyboardInterrupt):
        audit(NAME, **kw)
    assert len(calls) == 2  # step 1 finished (cached), step 2 interrupted
    done = sorted(p.name for p in cache.iterdir())
    assert done  # step 1's results are on disk

    calls.clear()
    interrupt_after = None
    resumed = audit(NAME, **kw)
    assert len(calls) == 2  # steps 2 and 3 only: step 1 came from the cache
    assert "undefended" in calls and len(set(calls)) == 2

    calls.clear()
    again = audit(NAME, **kw)
    assert calls == []  # everything cached now
    assert again.to_dict()["attacks"] == resumed.to_dict()["attacks"]
