"""The Flower ServerApp's round logic without processes (a fake Grid in memory, milliseconds per round):
fail closed on a missing reply, checkpoint + resume of the ledger, refusals of a mismatched / unwanted resume,
retry after a replacement node, one user per partition. The same code runs across real processes in
test_flower_faults (integration)."""

from __future__ import annotations

import itertools
import json
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("flwr")


@pytest.fixture(autouse=True)
def _run_identity(monkeypatch):
    """flwr 1.42 Messages read the run id of the process (set by the ServerApp runtime)."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


class FakeGrid:
    """get_node_ids / push_messages / pull_messages of a Flower Grid; nodes answer at once unless dead."""

    def __init__(
        self, partitions: dict[int, int], nparts: int = 3, client_dp: bool = False
    ) -> None:
        self.partitions = dict(partitions)  # node id -> partition id
        self.nparts = nparts
        self.client_dp = (
            client_dp  # replies carry the record-level accounting metrics of client DP-SGD
        )
        self.dead: set[int] = set()
        self.replies: dict[str, SimpleNamespace] = {}
        self.ids = itertools.count()
        self.on_train = None  # hook(grid, node_id) called when a train message is pushed
        self.trained: list[int] = []
        self.pushes: list[
            list[int]
        ] = []  # partitions asked to train, per push (one push = one round attempt)

    def get_node_ids(self):
        return list(self.partitions)

    def push_messages(self, msgs):
        import torch

        out = []
        if any(m.metadata.message_type == "train" for m in msgs):
            self.pushes.append(sorted(self.partitions[m.metadata.dst_node_id] for m in msgs))
        for m in msgs:
            mid = f"m{next(self.ids)}"
            out.append(mid)
            nid = m.metadata.dst_node_id
            kind = m.metadata.message_type
            if kind == "train" and self.on_train:
                self.on_train(self, nid)
            if nid in self.dead:
                continue
            meta = SimpleNamespace(reply_to_message_id=mid, src_node_id=nid)
            if kind == "query":
                content = {
                    "config": {"partition-id": self.partitions[nid], "num-partitions": self.nparts}
                }
            else:
                self.trained.append(nid)
                arrays = m.content["arrays"].to_torch_state_dict()
                content = {
                    "arrays": SimpleNamespace(
                        to_torch_state_dict=lambda a=arrays: {
                            k: torch.zeros_like(v) for k, v in a.items()
                        }
                    ),
                    "metrics": {"num-examples": 16.0, "loss": 1.0},
                }
                if self.client_dp:
                    content["metrics"].update(
                        {"dp-steps": 2.0, "dp-sample-rate": 0.5, "dp-noise-multiplier": 1.0}
                    )
            self.replies[mid] = SimpleNamespace(
                metadata=meta, content=content, has_error=lambda: False, error=None
            )
        return out

    def pull_messages(self, ids):
        return [self.replies.pop(i) for i in list(ids) if i in self.replies]


def _run(out, grid, **cfg):
    from privnlp.mechanisms.federated import flower as fl

    run_config = dict(
        fl.DEFAULT_RUN_CONFIG,
        **{"out-dir": str(out), "round-timeout": 0.5, "node-wait": 1.0},
        **cfg,
    )
    try:
        fl._server_main(grid, SimpleNamespace(run_config=run_config))
    except Exception:  # noqa: BLE001 - the ServerApp re-raises after writing error.json
        pass
    for name in ("result.json", "error.json"):
        if (out / name).exists():
            return json.loads((out / name).read_text())
    raise AssertionError("no result")


def _grid():
    return FakeGrid({101: 0, 102: 1, 103: 2})


def test_missing_reply_fails_closed_and_checkpoint_keeps_accounted_rounds(tmp_path):
    from privnlp.mechanisms.federated.flower import CHECKPOINT_NAME, load_checkpoint

    g = _grid()
    g.on_train = lambda grid, nid: (
        grid.dead.add(103) if len(grid.trained) >= 3 else None
    )  # dies in round 2
    res = _run(tmp_path, g, **{"num-server-rounds": 3})
    assert "fails closed" in res["error"] and "missing users ['2']" in res["error"]
    ck = load_checkpoint(tmp_path / CHECKPOINT_NAME)
    assert ck["round"] == 1 and ck["ledger"]["rounds"][0]["rounds"] == 1


def test_resume_continues_the_ledger(tmp_path):
    from privnlp.mechanisms.federated.accounting import dp_fedavg_adversary_bounds

    first = _run(tmp_path, _grid(), **{"num-server-rounds": 2})
    assert first["resumed_from_round"] == 0 and first["ledger"]["rounds"][0]["rounds"] == 2
    res = _run(tmp_path, _grid(), **{"num-server-rounds": 3})
    assert res["resumed_from_round"] == 2
    assert [h["round"] for h in res["history"]] == [1, 2, 3]
    assert res["ledger"]["rounds"][0]["rounds"] == 3
    assert float(res["claim"]["epsilon"]) == pytest.approx(
        max(  # the headline: the strongest named adversary (issue #28)
            b.epsilon
            for b in dp_fedavg_adversary_bounds(
                noise_multiplier=1.0,
                clients_per_round=3,
                population=3,
                rounds=3,
                delta=1e-3,
                sampling="fixed",
            )
        ),
        rel=1e-9,
    )


@pytest.mark.parametrize(
    "change, msg",
    [
        ({"clip-norm": 1.0}, "different run config"),
        ({"resume": False}, "never restarts its accounting at epsilon 0"),
    ],
)
def test_resume_refusals(tmp_path, change, msg):
    _run(tmp_path, _grid(), **{"num-server-rounds": 1})
    res = _run(tmp_path, _grid(), **{"num-server-rounds": 2}, **change)
    assert msg in res["error"]


def test_failed_round_is_rerun_after_a_replacement_joins(tmp_path):
    g = _grid()

    def die_and_replace(grid, nid):
        if (
            len(grid.trained) == 3 and 101 not in grid.dead
        ):  # round 2: node 101 (partition 0) dies ...
            grid.dead.add(101)
            grid.partitions[201] = 0  # ... and a replacement for partition 0 registers

    g.on_train = die_and_replace
    res = _run(tmp_path, g, **{"num-server-rounds": 2, "round-retries": 1})
    assert "error" not in res, res
    assert [h["attempts"] for h in res["history"]] == [1, 2]
    assert res["ledger"]["rounds"][0]["rounds"] == 2
    assert res["nodes"]["0"] == 201


def test_two_nodes_of_one_partition_count_once(tmp_path):
    g = FakeGrid({101: 0, 102: 1, 103: 2, 104: 2})
    res = _run(tmp_path, g, **{"num-server-rounds": 1})
    assert "error" not in res, res
    assert res["history"][0]["replies"] == 3 and len(g.trained) == 3


def test_selection_is_not_predictable_from_the_run_config():
    from privnlp.core.rng import is_secure
    from privnlp.mechanisms.federated import flower as fl
    from privnlp.mechanisms.federated.simulator import round_seeds

    seeded = round_seeds(0, 1)[0]
    assert is_secure(fl._selection_generator(dict(fl.DEFAULT_RUN_CONFIG), seeded))
    assert (
        fl._selection_generator(dict(fl.DEFAULT_RUN_CONFIG, **{"seeded-noise": True}), seeded)
        is seeded
    )


def test_a_retry_reasks_the_same_selected_users(tmp_path):
    """Adversary: the SuperNode of a selected user drops out whenever it is selected, hoping the retry re-draws a
    selection without its user. Releasing the first draw that succeeded would condition the sample on who failed
    (inclusion probabilities off the accounted m/N); the retry must re-ask exactly the users of the failed
    attempt (their partitions served by replacement nodes). 2 of 6 users, 3 rounds, each failing once: a re-draw
    would match by chance with probability (1/15)^3."""
    g = FakeGrid({101 + i: i for i in range(6)}, nparts=6)
    failed: set[int] = set()

    def drop_first_selected(grid, nid):
        r = len(grid.pushes)  # the attempt being pushed (1-based)
        if (
            r % 2 == 1 and r not in failed
        ):  # the first attempt of every round: its first node drops out
            failed.add(r)
            grid.dead.add(nid)
            grid.partitions[1000 + nid] = grid.partitions[
                nid
            ]  # a replacement for that user registers

    g.on_train = drop_first_selected
    res = _run(
        tmp_path,
        g,
        **{"num-server-rounds": 3, "num-clients": 6, "clients-per-round": 2, "round-retries": 1},
    )
    assert "error" not in res, res
    assert [h["attempts"] for h in res["history"]] == [2, 2, 2]
    assert len(g.pushes) == 6
    for r in range(3):
        failed_attempt, retry = g.pushes[2 * r], g.pushes[2 * r + 1]
        assert retry == failed_attempt, g.pushes  # the same users, not a new draw
        assert [int(u) for u in res["history"][r]["selected"]] == retry
    assert res["ledger"]["rounds"][0]["rounds"] == 3  # discarded attempts are not rounds


def test_discarded_attempt_still_charges_client_dp_steps(tmp_path):
    """Client DP-SGD protects records against the server: the replies of a discarded attempt reached the server,
    so they are charged to those clients' record-level ledgers (and checkpointed), though nothing was released."""
    from privnlp.mechanisms.federated.flower import CHECKPOINT_NAME, load_checkpoint

    g = FakeGrid({101: 0, 102: 1, 103: 2}, client_dp=True)

    def die_and_replace(grid, nid):
        if len(grid.pushes) == 1 and nid == 103 and 103 not in grid.dead:  # round 1, attempt 1
            grid.dead.add(103)
            grid.partitions[203] = 2

    g.on_train = die_and_replace
    cfg = {
        "num-server-rounds": 1,
        "round-retries": 1,
        "client-max-grad-norm": 1.0,
        "client-noise-multiplier": 1.0,
    }
    res = _run(tmp_path, g, **cfg)
    assert "error" not in res, res
    steps = {
        u: sum(run["steps"] for run in led["runs"])
        for u, led in res["ledger"]["client_ledgers"].items()
    }
    assert steps == {
        "0": 4,
        "1": 4,
        "2": 2,
    }  # users 0 and 1 replied twice (attempt 1 discarded), user 2 once
    # the charge of the discarded attempt is checkpointed before the retry: a crash there cannot lose it
    g2 = FakeGrid({101: 0, 102: 1, 103: 2}, client_dp=True)
    g2.on_train = lambda grid, nid: grid.dead.add(103)  # dies in round 1, no replacement, no retry
    out2 = tmp_path / "crash"
    out2.mkdir()
    res2 = _run(out2, g2, **dict(cfg, **{"round-retries": 0}))
    assert "fails closed" in res2["error"]
    ck = load_checkpoint(out2 / CHECKPOINT_NAME)
    assert ck["round"] == 0 and ck["ledger"]["rounds"] == []
    assert sorted(ck["ledger"]["client_ledgers"]) == ["0", "1"]


def test_a_stale_server_cannot_release_a_round_the_new_one_did_not_load(tmp_path):
    """Adversary: an older ServerApp (orphaned after a SuperLink restart) passes its ownership check and is about to
    write checkpoint r (after which it releases round r's model) just as a resubmitted ServerApp takes over. The
    take-over must either see checkpoint r or stop the older server from writing: never load r-1 while round r
    leaves the old one (the new server would re-run round r with fresh noise and its ledger would miss one)."""
    import threading

    from privnlp.mechanisms.federated import flower as fl

    old, new = fl._Owner(tmp_path), fl._Owner(tmp_path)
    old.take_over(lambda: None)
    ck = tmp_path / "ck.json"
    ck.write_text("0")
    inside, loaded = threading.Event(), {}

    def old_server_commits_round_1():
        with old.commit():
            inside.set()
            time.sleep(0.3)  # a slow checkpoint write: the newer server arrives meanwhile
            ck.write_text("1")

    t = threading.Thread(target=old_server_commits_round_1)
    t.start()
    assert inside.wait(5)
    loaded["round"] = new.take_over(lambda: int(ck.read_text()))
    t.join(5)
    assert loaded["round"] == 1  # the take-over waited for the commit in progress
    with pytest.raises(fl._Superseded):
        with old.commit():
            ck.write_text(
                "2"
            )  # never reached: the older server stops without writing (so without releasing)
    assert ck.read_text() == "1" and new.owned() and not old.owned()
