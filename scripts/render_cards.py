"""Re-render every mechanism card (cards/mechanisms/<name>/README.md) from its report.json and NOTES.md
without re-running any audit — after editing a NOTES.md or a mechanism's docstring.

    .venv/bin/python scripts/render_cards.py

The numbers still come only from the report files (`privnlp evaluate --all --cards` regenerates those);
the conformance test checks every card equals this rendering.
"""

from __future__ import annotations

from pathlib import Path

from privnlp.core.registry import MECHANISMS
from privnlp.core.report import LeakageReport, atomic_write_text
from privnlp.evaluation.cards import card_text

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    for name in MECHANISMS.names():
        folder = ROOT / "cards" / "mechanisms" / name
        rep = folder / "report.json"
        if not rep.exists():
            print(f"skip {name}: no report.json (run `privnlp evaluate --defense {name} --cards`)")
            continue
        atomic_write_text(folder / "README.md", card_text(name, LeakageReport.load(rep), folder))
        print(f"rendered cards/mechanisms/{name}/README.md")


if __name__ == "__main__":
    main()
