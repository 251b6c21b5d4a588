"""Error analysis on the hand-written DEVELOPMENT sets (issue 32, third round): the tuning loop's view.

The development sets are ``validation.txt`` and the three sets that were scored and read in earlier rounds
(``test.txt``, ``test_fresh.txt``, ``test_blind.txt`` and, since issue 32's seventh round, ``test_blind4.txt`` to
``test_blind7.txt``; each blind set was scored once by the lead before it became development data, and those
first figures stay its only held-out ones). This script prints recall / precision of the three pipelines on each
and on their union, and lists (with context) every missed item and every wrong span of the default
pipeline. There is no held-out set left: every figure this script prints is a development figure.

    .venv/bin/python benchmarks/pii_eval/analyse_dev.py [--quiet] [--sets validation,test_blind6]
"""

from __future__ import annotations

import argparse

from privnlp.mechanisms.pii.crf import crf_tagger
from privnlp.mechanisms.pii.evalset import default_evalset_dir, parse_evalset, score_spans
from privnlp.mechanisms.pii.redact import PIIRedactor

DEV_SETS = (
    "validation",
    "test",
    "test_fresh",
    "test_blind",
    "test_blind4",
    "test_blind5",
    "test_blind6",
    "test_blind7",
)


def _ctx(text: str, item: str, width: int = 40) -> str:
    i = text.find(item)
    if i < 0:
        return ""
    return text[max(0, i - width) : i + len(item) + width].replace("\n", " / ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet", action="store_true", help="tables only, no error listing")
    ap.add_argument("--sets", default=",".join(DEV_SETS), help="comma-separated development sets")
    args = ap.parse_args()
    names = [s for s in args.sets.split(",") if s]
    if any(n not in DEV_SETS for n in names):
        raise SystemExit(f"--sets: only the development sets {DEV_SETS} may be analysed")
    d = default_evalset_dir()
    sets = {n: parse_evalset((d / f"{n}.txt").read_text(encoding="utf-8"), n) for n in names}
    tagger = crf_tagger(progress=True)
    pipelines = {
        "recognizers only": PIIRedactor(None).analyze,
        "CRF tagger only": PIIRedactor(tagger, regex=False).analyze,
        "recognizers + CRF tagger": PIIRedactor(tagger).analyze,
    }
    every = [doc for docs in sets.values() for doc in docs]
    for name, fn in pipelines.items():
        for sname, docs in list(sets.items()) + [("all development sets", every)]:
            sc = score_spans(docs, [fn(x.text) for x in docs])
            print(f"{name:26s} {sname:22s} recall {sc.recall:.3f} precision {sc.precision:.3f}")
    sc = score_spans(every, [pipelines["recognizers + CRF tagger"](x.text) for x in every])
    print(
        f"\n### recognizers + CRF tagger, all development sets ({len(every)} texts, {sc.n_gold} items)"
    )
    print(sc.table())
    if not args.quiet:
        text = {x.id: x.text for x in every}
        print("\nmissed:")
        for doc_id, t, item in sc.missed:
            print(f"   {doc_id} {t:10s} {item!r:34s} | {_ctx(text[doc_id], item)}")
        print("wrong:")
        for doc_id, t, item in sc.wrong:
            print(f"   {doc_id} {t:10s} {item!r:34s} | {_ctx(text[doc_id], item)}")


if __name__ == "__main__":
    main()
