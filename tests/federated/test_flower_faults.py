"""Issue #20 part 3 (and #15 item 1 end to end): DP-FedAvg rounds across real Flower processes under faults.

One loopback deployment (a SuperLink with its state in SQLite + 3 SuperNodes, separate processes) is shared by
every case; the cases run in file order and each repairs what it needs (dead SuperNodes are restarted):

1. a SuperNode SIGKILLed mid-run: the DP-FedAvg round fails closed (no round with fewer clients and the same
   noise) and the run stops with a clear error within the stated ``round-timeout``; the checkpoint keeps the
   accounted rounds only;
2. the SuperNode restarted (a new node id) rejoins and the server restarts (a new ServerApp on the same
   out-dir): it resumes from the checkpoint and continues the ledger (epsilon of all rounds, never restarted
   at 0); the released model has every round's noise exactly once (seeded-noise run: a participant that knows
   the seed recomputes it exactly -- the end-to-end twin of the OS-entropy case in test_flower_integration);
3. (slow) the whole server side (SuperLink, SuperExec, ServerApp) SIGKILLed mid-round and restarted: resumes;
4. (slow) with ``round-retries=1`` a killed SuperNode's round is discarded and re-run once a replacement
   SuperNode joined; that run's noise is from OS entropy: the participant's recomputation fails;
5. closing the deployment leaves no Flower process behind (SuperExec / ServerApp / ClientApp included).

Every wait is bounded; a round of the tiny task costs ~5-7 s in Flower 1.42 (a SuperNode polls every 3 s and
starts a ClientApp process per message).
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("flwr")
pytestmark = pytest.mark.integration

ROUND_TIMEOUT = 25.0  # the stated bound: a round waits this long for a missing node, then fails closed (a healthy
# round takes ~5-7 s on 2 cores; at load ~10 the first one took > 15 s)
SLACK = 25.0  # one more round in flight + process start-up on a loaded 2-core machine
SEEDED = {
    "round-timeout": ROUND_TIMEOUT,
    "node-wait": 60.0,
    "seeded-noise": True,
    "lr": 1e-9,
    "seed": 7,
}
STD = (
    1.0 * 0.5 / 3
)  # z * S / m of the default run config (noise-multiplier 1, clip-norm 0.5, 3 of 3 users)


def _ck(out: Path):
    from privnlp.mechanisms.federated.flower import CHECKPOINT_NAME, load_checkpoint

    p = out / CHECKPOINT_NAME
    try:
        return load_checkpoint(p) if p.exists() else None
    except Exception:  # noqa: BLE001 - being replaced right now
        return None


def _wait_round(dep, out: Path, r: int, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ck = _ck(out)
        if ck is not None and ck["round"] >= r:
            return ck
        for name in ("error.json", "result.json"):
            assert not (out / name).exists(), (out / name).read_text()
        assert dep.superlink.poll() is None, "the SuperLink died"
        time.sleep(0.1)
    raise TimeoutError(f"round {r} not checkpointed in {out} within {timeout}s")


def _revive(dep) -> None:
    for i, p in list(dep.nodes.items()):
        if p.poll() is not None:
            dep.start_node(i)


def _residual(out: Path, cfg: dict, rounds: int):
    """A participant's attack: the run config (seed) is public; recompute the server's noise of every round as
    the seeded ServerApp draws it and subtract it from the released model. Client updates are ~1e-9 (lr)."""
    import torch

    from privnlp.mechanisms.federated import flower as fl
    from privnlp.mechanisms.federated.client import trainable_state
    from privnlp.mechanisms.federated.simulator import round_seeds

    full = dict(fl.DEFAULT_RUN_CONFIG, **cfg)
    task, _ = fl._task_and_data(full, 0, 3)
    guess = trainable_state(task.model_factory())
    for r in range(1, rounds + 1):
        g = torch.Generator().manual_seed(round_seeds(int(full["seed"]), r)[2])
        for k in guess:
            guess[k] = guess[k] + STD * torch.randn(guess[k].shape, generator=g)
    final = torch.load(out / "final.pt", weights_only=True)
    return torch.cat([(final[k] - guess[k]).flatten() for k in guess])


def user_epsilon(sampling, n, m, z, rounds, delta):
    """The deployment's headline epsilon: the strongest named adversary's (issue #28), recomputed."""
    from privnlp.mechanisms.federated.accounting import dp_fedavg_adversary_bounds

    return max(
        b.epsilon
        for b in dp_fedavg_adversary_bounds(
            noise_multiplier=z,
            clients_per_round=m,
            population=n,
            rounds=rounds,
            delta=delta,
            sampling=sampling,
        )
    )


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    from privnlp.mechanisms.federated.flower import LoopbackDeployment

    with LoopbackDeployment(tmp_path_factory.mktemp("flower_faults"), 3, database=True) as d:
        yield d


@pytest.fixture(scope="module")
def killed(dep):
    _revive(dep)
    out = Path(dep.work_dir) / "resumed_run"
    cfg = dict(SEEDED, **{"num-server-rounds": 3})
    dep.submit(cfg, out)
    _wait_round(dep, out, 1)
    t = time.monotonic()
    dep.kill_node(2)  # SIGKILL: the SuperNode and its ClientApp, mid-round
    res = dep.wait(out, ROUND_TIMEOUT + SLACK + 15)
    return SimpleNamespace(out=out, res=res, waited=time.monotonic() - t, ck=_ck(out))


@pytest.mark.timeout(150)
def test_killed_supernode_fails_the_round_closed_within_the_timeout(killed):
    err = killed.res.get("error", "")
    assert "fails closed" in err and "missing users ['2']" in err, killed.res
    assert "round-timeout=25.0s" in err
    assert killed.waited <= ROUND_TIMEOUT + SLACK, killed.waited
    ck = killed.ck
    assert ck is not None and ck["round"] >= 1
    assert (
        sum(r["rounds"] for r in ck["ledger"]["rounds"]) == ck["round"]
    )  # only completed rounds are accounted
    assert all(h["replies"] == 3 for h in ck["history"])  # never a round with fewer clients
    assert not (killed.out / "result.json").exists() and not (killed.out / "final.pt").exists()


@pytest.fixture(scope="module")
def resumed(dep, killed):
    k = killed.ck["round"]
    cfg = dict(SEEDED, **{"num-server-rounds": k + 2})
    dep.start_node(2)  # the restarted SuperNode: a new node id for partition 2
    _revive(dep)
    dep.submit(cfg, killed.out)  # the server restarts (a new ServerApp) on the same out-dir
    return SimpleNamespace(k=k, cfg=cfg, out=killed.out, res=dep.wait(killed.out, 120))


@pytest.mark.timeout(200)
def test_restarted_supernode_rejoins_and_restarted_server_continues_the_ledger(resumed):
    res, k = resumed.res, resumed.k
    assert "error" not in res, res
    total = k + 2
    assert res["resumed_from_round"] == k
    assert [h["round"] for h in res["history"]] == list(range(1, total + 1))
    assert all(h["replies"] == 3 and h["selected"] == ["0", "1", "2"] for h in res["history"])
    assert res["ledger"]["rounds"][0]["rounds"] == total
    eps = float(res["claim"]["epsilon"])
    assert eps == pytest.approx(user_epsilon("fixed", 3, 3, 1.0, total, 1e-3), rel=1e-9)
    assert eps > user_epsilon(
        "fixed", 3, 3, 1.0, 2, 1e-3
    )  # the resumed server did not restart at 0
    assert res["claim"]["noise_seeded"] is True
    assert (
        f"resumed from server_checkpoint.pt after round {k} "
        in (resumed.out / "server.log").read_text()
    )


def test_participant_recomputes_seeded_noise_exactly_across_the_restart(resumed):
    # every round's noise is in the released model exactly once: the resume neither replayed nor skipped any
    res = _residual(resumed.out, resumed.cfg, resumed.k + 2)
    assert float(res.abs().max()) < 1e-4


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_server_side_crash_mid_round_resumes_the_ledger(dep):
    """SIGKILL of the whole server side (SuperLink, SuperExec, ServerApp) mid-round, SuperLink restarted on the
    same port (its SQLite state keeps the SuperNodes registered), run resubmitted: it resumes. Slow: after such
    a restart Flower 1.42 SuperNodes took ~45 s to answer again (they first finish the dead run's messages)."""

    _revive(dep)
    out = Path(dep.work_dir) / "crash_run"
    cfg = dict(SEEDED, **{"num-server-rounds": 3})
    dep.submit(cfg, out)
    _wait_round(dep, out, 1)
    dep.restart_superlink()
    dep.submit(cfg, out)
    res = dep.wait(out, 180)
    assert "error" not in res, res
    k = res["resumed_from_round"]
    assert 1 <= k < 3 and res["ledger"]["rounds"][0]["rounds"] == 3
    assert [h["round"] for h in res["history"]] == [1, 2, 3] and all(
        h["replies"] == 3 for h in res["history"]
    )
    assert float(res["claim"]["epsilon"]) == pytest.approx(
        user_epsilon("fixed", 3, 3, 1.0, 3, 1e-3), rel=1e-9
    )
    assert float(_residual(out, cfg, 3).abs().max()) < 1e-4


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_failed_round_waits_for_a_replacement_supernode(dep):
    _revive(dep)
    out = Path(dep.work_dir) / "retry_run"
    cfg = {
        "num-server-rounds": 2,
        "round-timeout": ROUND_TIMEOUT,
        "round-retries": 1,
        "node-wait": 60.0,
        "lr": 1e-9,
        "seed": 7,
    }
    dep.submit(cfg, out)
    _wait_round(dep, out, 1)
    dep.kill_node(0)
    dep.start_node(0)  # the replacement joins while the round waits for the dead node
    res = dep.wait(out, ROUND_TIMEOUT + 120)
    assert "error" not in res, res
    hist = res["history"]
    assert [h["round"] for h in hist] == [1, 2] and all(h["replies"] == 3 for h in hist)
    assert (
        hist[1]["attempts"] == 2
    )  # round 2 failed closed once (nothing released), then ran in full
    assert res["ledger"]["rounds"][0]["rounds"] == 2  # the discarded attempt is not a round
    assert res["claim"]["noise_seeded"] is False
    assert "discarded (nothing released)" in (out / "server.log").read_text()
    # the same participant's attack on this OS-entropy run fails: residual of the order of the noise
    r = _residual(out, cfg, 2)
    assert float(r.abs().max()) > 0.05 and 0.3 * STD < float(r.std()) < 6 * STD


def test_closing_the_deployment_leaves_no_process(dep):
    from privnlp.mechanisms.federated.flower import _descendants, _running

    procs = [dep.superlink, *dep.nodes.values()]
    tree = {d for p in procs if p.poll() is None for d in _descendants(p.pid)} | {
        p.pid for p in procs
    }
    assert len(tree) > len(procs)  # SuperExec processes at least
    dep.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_running(p) for p in tree):
        time.sleep(0.1)
    assert not [p for p in tree if _running(p)]
