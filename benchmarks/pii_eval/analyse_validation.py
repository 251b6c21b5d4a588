"""Error analysis on the hand-written VALIDATION set only (issue 32): the tuning loop's view.

Prints recall / precision per type for the three pipelines and lists every missed item and every wrong
span of the default pipeline on ``validation.txt``. It never loads ``test.txt`` (the test set is measured
only by ``benchmarks/pii_redaction.py --evalset``).

    .venv/bin/python benchmarks/pii_eval/analyse_validation.py [--quiet]
"""

from __future__ import annotations

import argparse

from privnlp.mechanisms.pii.crf import crf_tagger
from privnlp.mechanisms.pii.evalset import load_evalset, score_spans
from privnlp.mechanisms.pii.redact import PIIRedactor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet", action="store_true", help="tables only, no error listing")
    args = ap.parse_args()
    val = load_evalset("validation")
    tagger = crf_tagger(progress=True)
    pipelines = {
        "recognizers only": PIIRedactor(None).analyze,
        "CRF tagger only": PIIRedactor(tagger, regex=False).analyze,
        "recognizers + CRF tagger": PIIRedactor(tagger).analyze,
    }
    for name, fn in pipelines.items():
        sc = score_spans(val, [fn(d.text) for d in val])
        print(f"\n### {name} (validation, {len(val)} texts, {sc.n_gold} items)")
        print(sc.table())
        print(f"non-PII words kept: {sc.kept_words:.3f}")
        if name == "recognizers + CRF tagger" and not args.quiet:
            print("\nmissed:")
            for m in sc.missed:
                print("  ", m)
            print("wrong:")
            for w in sc.wrong:
                print("  ", w)


if __name__ == "__main__":
    main()
