"""The Debian-sections task loader (issue #29 item 6): parsing, deduplication, a stratified split."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.training.tasks import debian_sections_task, parse_dumpavail

DUMP = """Package: a
Section: games
Description: a game of chess
 with a long description
 .
 and a second paragraph

Package: b
Section: contrib/games
Description: a game of go

Package: c
Section: net
Description: a game of chess
 with a long description
 .
 and a second paragraph

Package: d
Section: net
Description: a web server

Package: e
Description: no section here
"""


def test_parse_dumpavail_joins_descriptions_and_normalises_sections():
    rows = parse_dumpavail(DUMP.splitlines())
    assert rows[0] == (
        "a",
        "games",
        "a game of chess with a long description and a second paragraph",
    )
    assert rows[1] == ("b", "games", "a game of go")  # contrib/games -> games
    assert len(rows) == 4  # e has no section


def test_duplicates_dropped_and_splits_disjoint():
    lines = []
    for i in range(30):
        for sec in ("games", "net", "devel"):
            lines += [
                f"Package: {sec}{i}",
                f"Section: {sec}",
                f"Description: {sec} tool number {i}",
                "",
            ]
    lines += ["Package: dup", "Section: net", "Description: games tool number 0", ""]
    t = debian_sections_task(top_k=2, max_per_section=20, seed=1, lines=lines)
    assert len(t.label_names) == 2 and set(t.label_names) <= {"games", "net", "devel"}
    everything = t.train_texts + t.validation_texts + t.test_texts
    assert len(everything) == len(set(everything)) == 40  # 20 per section, no text twice
    assert Counter(t.test_labels) == {0: 4, 1: 4}  # 20% of each section
    assert not set(t.train_texts) & set(t.test_texts)
    again = debian_sections_task(top_k=2, max_per_section=20, seed=1, lines=lines)
    assert again == t  # seeded
    with pytest.raises(InvalidArgument, match="top_k"):
        debian_sections_task(top_k=5, lines=lines)
    with pytest.raises(InvalidArgument, match="test_fraction"):
        debian_sections_task(test_fraction=1.0, lines=lines)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="needs apt-cache (Debian / Ubuntu)")
def test_debian_sections_task_on_this_machine_subset():
    t = debian_sections_task(max_per_section=60, seed=0)
    assert len(t.label_names) == 10 and t.n_packages > 10_000
    n = Counter(t.train_labels) + Counter(t.validation_labels) + Counter(t.test_labels)
    assert all(v <= 60 for v in n.values()) and len(n) == 10
    assert len(set(t.train_texts) & set(t.test_texts)) == 0
    assert all(len(x) > 10 for x in t.test_texts)


def test_section_descriptions_are_public_texts_for_the_common_sections_and_a_fallback():
    from privnlp.mechanisms.training.tasks import DEBIAN_SECTION_DESCRIPTIONS, section_descriptions

    # the ten sections of this machine's task (issue #29) all have packages.debian.org's description
    ten = ("devel", "doc", "haskell", "libdevel", "libs", "net", "perl", "python", "rust", "utils")
    got = section_descriptions(ten)
    assert list(got) == list(ten) and all(got[s] == DEBIAN_SECTION_DESCRIPTIONS[s] for s in ten)
    assert len(set(got.values())) == 10  # ten distinct texts: ten distinct zero-shot prototypes
    assert section_descriptions(["zzz"]) == {"zzz": "Zzz: packages of the zzz section."}
