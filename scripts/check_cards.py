#!/usr/bin/env python
"""CI check (issue #17): regenerate the quick leakage cards from scratch and compare them with the
committed ``cards/mechanisms/<name>/report.json``.

Every headline number (each paired attack's headline metric on the undefended system, the defense
and its leaky twin) must fall inside the committed report's stated 95% interval
``[ci_low, ci_high]`` widened by ``--atol`` (default 1e-6: with torch threads pinned, see
``privnlp.core.numerics``, a run on the same kind of CPU is bit-identical). A committed report may
state a wider, CPU-dependent interval for a number in ``config["cpu_intervals"][attack][system] =
[low, high]``; the card then says so. Failures name the card, the attack, the metric and the system.

The model cache (``PRIVNLP_CACHE_DIR``) and the result cache start empty in a temporary folder, as
in a clean clone, unless ``--model-cache`` / ``--work`` say otherwise. ``--only a,b`` checks a subset.

    python scripts/check_cards.py --only dp_sgd,gaussian_noise_update
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    for k, v in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MPLBACKEND": "Agg",
    }.items():
        os.environ.setdefault(k, v)

    from privnlp.evaluation.cards import evaluate_defense
    from privnlp.evaluation.reproducibility import SYSTEMS, compare

    cards = Path(args.cards_dir)
    names = [n for n in args.only.split(",") if n] or sorted(
        p.parent.name for p in cards.glob("*/report.json")
    )
    t_all = time.perf_counter()
    failures: dict[str, list[str]] = {}
    for name in names:
        path = cards / name / "report.json"
        if not path.exists():
            failures[name] = [f"cards/mechanisms/{name}: no committed report.json"]
            continue
        committed = json.loads(path.read_text())
        if committed.get("config", {}).get("preset", "quick") != args.preset:
            print(
                f"skip {name}: committed report is preset {committed['config'].get('preset')!r}",
                flush=True,
            )
            continue
        t0 = time.perf_counter()
        try:
            out = evaluate_defense(
                name,
                preset=args.preset,
                report_dir=work / "reports",
                cards_dir=None,
                cache_dir=work / "results",
                progress=False,
            )
        except Exception as exc:  # noqa: BLE001 - reported as a failing card
            failures[name] = [
                f"cards/mechanisms/{name}: regeneration failed: {type(exc).__name__}: {exc}"
            ]
            print(f"FAIL {name}: {failures[name][0]}", flush=True)
            continue
        fresh = json.loads(out.report.to_json())
        errs = compare(name, committed, fresh, args.atol)
        dt = time.perf_counter() - t0
        if errs and args.widen:
            widen(name, cards / name, committed, fresh)
            print(
                f"widened {name}: CPU-dependent intervals written to {cards / name / 'report.json'}",
                flush=True,
            )
            for e in errs:
                print("   ", e + _env_note(committed, fresh), flush=True)
        elif errs:
            failures[name] = [e + _env_note(committed, fresh) for e in errs]
            print(f"FAIL {name} ({dt:.1f}s)", flush=True)
            for e in failures[name]:
                print("   ", e, flush=True)
        else:
            n = sum(
                1
                for a in committed.get("attacks", [])
                for s in SYSTEMS
                if a["headline_metric"] in a.get(s, {})
            )
            print(
                f"ok   {name} ({dt:.1f}s): {n} headline numbers inside the committed intervals",
                flush=True,
            )
    total = time.perf_counter() - t_all
    print(
        f"check_cards: {len(names) - len(failures)}/{len(names)} cards reproduce; {total:.1f}s "
        f"(load {os.getloadavg()[0]:.2f}); work dir {work}",
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
