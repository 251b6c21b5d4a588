#!/usr/bin/env python
"""CI check (issue #17): regenerate the quick leakage cards from scratch and compare them with the
committed ``cards/mechanisms/<name>/report.json``.

Every headline number (each paired attack's headline metric on the undefended system, the defense
and its leaky twin) must fall inside the committed report's stated 95% interval
``[ci_low, ci_high]`` widened by ``--atol`` (default 1e-6: with torch threads pinned, see
``privnlp.core.numerics``, a run on the same kind of CPU is bit-identical). A committed report may
state a wider, CPU-dependent interval for a number in ``config["cpu_intervals"][attack][system] =
[low, high]``; the card then says so. Failures name the card, the attack, the metric and the system.
The privacy-utility sweeps of the committed cards are not regenerated (nothing compares them; ``privnlp evaluate --defense NAME --cards``
regenerates a card with its sweep).

The model cache (``PRIVNLP_CACHE_DIR``) and the result cache start empty in a temporary folder, as
in a clean clone, unless ``--model-cache`` / ``--work`` say otherwise. ``--only a,b`` checks a subset. ``--jobs N`` (default: 2, or 1 on a
one-core machine) regenerates N cards at a time in separate processes, each with one pinned torch thread,
so the numbers do not depend on N; the slowest cards start first (``SLOW_FIRST``).

    python scripts/check_cards.py --only dp_sgd,gaussian_noise_update
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: cards that take longest to regenerate, slowest first, started first so that the two workers finish together
#: (the others follow in name order). Measured 2026-11-27 with --jobs 2 and no sweeps (make check-cards, 2-core
#: Xeon @ 2.50GHz, 255.5 s in all; 400.9 s when the sweeps were regenerated too): mahalanobis 71 s,
#: adversarial_embedding 64 s, pii_redaction 58 s, vickrey_k 54 s, dp_sgd 46 s, lstm_dropout 32 s, laplace_metric
#: 28 s, noised_embedding 27 s, vickrey 26 s, dropout_embedding 24 s, the rest <= 12 s. vickrey_k runs before
#: laplace_metric and vickrey: those two ask the same exact nearest-neighbour queries (same noise; k = 1, 2 within
#: vickrey_k's 3) and read vickrey_k's answers from the memo (PRIVNLP_EXACT_MEMO below); started while vickrey_k
#: still runs, they would wait for its answers, so the two ~60-s cards go between
SLOW_FIRST = (
    "mahalanobis",
    "vickrey_k",
    "pii_redaction",
    "adversarial_embedding",
    "laplace_metric",
    "vickrey",
    "dp_sgd",
    "lstm_dropout",
    "noised_embedding",
    "dropout_embedding",
    "crypten_textcnn",
    "dp_fedavg",
    "fedavg",
)


def widen(name: str, folder: Path, committed: dict, fresh: dict) -> None:
    """Record the moved numbers as CPU-dependent in ``folder/report.json`` and re-render the card."""
    from privnlp.core.report import LeakageReport, atomic_write_text
    from privnlp.evaluation.cards import card_text
    from privnlp.evaluation.reproducibility import widen_intervals

    report = LeakageReport.from_dict(widen_intervals(committed, fresh))
    atomic_write_text(folder / "report.json", report.to_json())
    atomic_write_text(folder / "README.md", card_text(name, report, folder))


def _env_note(committed: dict, fresh: dict) -> str:
    a, b = (
        committed.get("config", {}).get("environment", {}),
        fresh.get("config", {}).get("environment", {}),
    )
    keys = ("torch_threads", "cpu_capability", "torch", "transformers", "tokenizers", "numpy")
    diff = [
        f"{k}: committed {a.get(k, '?')} vs now {b.get(k, '?')}"
        for k in keys
        if a.get(k) != b.get(k)
    ]
    return ("; environment differs (" + "; ".join(diff) + ")") if diff else ""


def _check_one(name: str, opts: dict) -> tuple[str, list[str], dict | None, dict, list[str]]:
    """Regenerate one card and compare it: ``(name, errors, fresh report, committed report, log lines)``.
    Runs in a worker process with ``--jobs`` > 1 (the environment is inherited)."""
    from privnlp.evaluation.cards import evaluate_defense
    from privnlp.evaluation.reproducibility import SYSTEMS, compare

    cards, work = Path(opts["cards"]), Path(opts["work"])
    path = cards / name / "report.json"
    if not path.exists():
        return name, [f"cards/mechanisms/{name}: no committed report.json"], None, {}, []
    committed = json.loads(path.read_text())
    if committed.get("config", {}).get("preset", "quick") != opts["preset"]:
        msg = f"skip {name}: committed report is preset {committed['config'].get('preset')!r}"
        return name, [], None, committed, [msg]
    t0 = time.perf_counter()
    try:
        out = evaluate_defense(
            name,
            preset=opts["preset"],
            report_dir=work / "reports",
            cards_dir=None,
            cache_dir=work / "results",
            progress=False,
            # only the headline numbers are compared (`compare`), not the privacy-utility sweep: regenerating
            # the sweep was more than half of the metric-DP cards' time (mahalanobis 114 of 203 s) for numbers
            # nothing read; the sweep's code is tested in tests/evaluation/test_audit.py
            sweeps=False,
        )
    except Exception as exc:  # noqa: BLE001 - reported as a failing card
        err = f"cards/mechanisms/{name}: regeneration failed: {type(exc).__name__}: {exc}"
        return name, [err], None, committed, [f"FAIL {name}: {err}"]
    fresh = json.loads(out.report.to_json())
    errs = [e + _env_note(committed, fresh) for e in compare(name, committed, fresh, opts["atol"])]
    dt = time.perf_counter() - t0
    if errs:
        return name, errs, fresh, committed, [f"FAIL {name} ({dt:.1f}s)"]
    n = sum(
        1
        for a in committed.get("attacks", [])
        for s in SYSTEMS
        if a["headline_metric"] in a.get(s, {})
    )
    return (
        name,
        [],
        fresh,
        committed,
        [f"ok   {name} ({dt:.1f}s): {n} headline numbers inside the committed intervals"],
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated defenses (default: every card with a report.json)",
    )
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--cards-dir", default=str(ROOT / "cards" / "mechanisms"))
    ap.add_argument(
        "--work",
        default=None,
        help="folder for regenerated reports + result cache (default: temporary)",
    )
    ap.add_argument(
        "--model-cache",
        default=None,
        help="PRIVNLP_CACHE_DIR to use (default: empty, under --work)",
    )
    ap.add_argument("--atol", type=float, default=1e-6)
    ap.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="cards regenerated at a time, one process each (default: 2, or 1 on a one-core machine)",
    )
    ap.add_argument(
        "--widen",
        action="store_true",
        help="record a number that moved as CPU-dependent: write the interval spanning the committed "
        "and the new value into report.json config['cpu_intervals'] and re-render the card",
    )
    args = ap.parse_args(argv)

    work = Path(args.work or tempfile.mkdtemp(prefix="privnlp-check-cards-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["PRIVNLP_CACHE_DIR"] = str(
        Path(args.model_cache) if args.model_cache else work / "model-cache"
    )
    # the exact nearest-neighbour search memoises its answers here, shared by the workers: the quick cards
    # of laplace_metric, vickrey and vickrey_k ask the same Monte Carlo queries (same noise, k = 1, 2, 3),
    # and a memoised answer is the exact one, bit for bit (privnlp.mechanisms.text.neighbors.MEMO_ENV)
    os.environ.setdefault("PRIVNLP_EXACT_MEMO", str(work / "exact-memo"))
    for k, v in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MPLBACKEND": "Agg",
    }.items():
        os.environ.setdefault(k, v)

    cards = Path(args.cards_dir)
    names = [n for n in args.only.split(",") if n] or sorted(
        p.parent.name for p in cards.glob("*/report.json")
    )
    t_all = time.perf_counter()
    failures: dict[str, list[str]] = {}
    names = sorted(
        names, key=lambda n: (SLOW_FIRST.index(n) if n in SLOW_FIRST else len(SLOW_FIRST), n)
    )
    jobs = max(1, min(int(args.jobs), len(names) or 1))
    opts = {"cards": str(cards), "preset": args.preset, "work": str(work), "atol": args.atol}
    if jobs == 1:
        results = (_check_one(name, opts) for name in names)
    else:
        pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))
        futures = [pool.submit(_check_one, name, opts) for name in names]
        results = (f.result() for f in as_completed(futures))
    for res in results:
        name, errs, fresh, committed, lines = res
        for line in lines:
            print(line, flush=True)
        if errs and args.widen and fresh is not None:
            widen(name, cards / name, committed, fresh)
            print(
                f"widened {name}: CPU-dependent intervals written to {cards / name / 'report.json'}",
                flush=True,
            )
            for e in errs:
                print("   ", e, flush=True)
        elif errs:
            failures[name] = errs
            for e in errs:
                print("   ", e, flush=True)
    if jobs > 1:
        pool.shutdown()
    if (
        args.work is None
    ):  # the memo only serves this run (~100 MB for the four word-mechanism cards)
        shutil.rmtree(work / "exact-memo", ignore_errors=True)
    total = time.perf_counter() - t_all
    print(
        f"check_cards: {len(names) - len(failures)}/{len(names)} cards reproduce; {total:.1f}s "
        f"with {jobs} job(s) (load {os.getloadavg()[0]:.2f}); work dir {work}",
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
