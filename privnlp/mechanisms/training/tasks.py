"""A real-text classification task for DP fine-tuning at real size (issue #29 item 6): Debian package sections.

``apt-cache dumpavail`` lists every package the machine's APT sources know (63k on this machine), each with a
``Section`` and a description written by its maintainer -- thousands of authors, real English text, no model hub
needed. :func:`debian_sections_task` keeps the ``top_k`` most common sections, at most ``max_per_section``
descriptions each (exact duplicate descriptions dropped: one copy kept, so no text is in two splits), and splits
them into train / validation / test with a seeded stratified split (hyperparameters are chosen on validation only).
With the defaults (10 sections, 2,500 each) it gives about 18.5k training and 4.6k test examples (issue #29).

The data comes from the local APT lists: another machine with other sources gives another task, so a result
names the machine's package count (``n_packages``) next to its numbers.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from privnlp.core.errors import InvalidArgument, check_range

__all__ = [
    "TextClassificationTask",
    "parse_dumpavail",
    "debian_sections_task",
    "DEBIAN_SECTION_DESCRIPTIONS",
    "section_descriptions",
]

#: A public description of each common Debian section, after packages.debian.org's section list (written before any
#: fine-tuning result was seen): the ``label_texts`` of ``fine_tune(..., recipe=FineTuneRecipe(head="mean"))``, which
#: start the head as the encoder's zero-shot classifier (data-independent: no privacy cost).
DEBIAN_SECTION_DESCRIPTIONS = {
    "admin": "Administration utilities: utilities to administer system resources, manage user accounts, etc.",
    "comm": "Communication programs: software for using your modem in the old fashioned style.",
    "database": "Databases: database servers and clients.",
    "debug": "Debug: packages providing debugging information for executables and shared libraries.",
    "devel": "Development: development utilities, compilers, development environments, libraries, etc.",
    "doc": "Documentation: FAQs, HOWTOs and other documents trying to explain everything related to Debian, and "
    "software needed to browse documentation (man, info, etc).",
    "editors": "Editors: software to edit files, programming environments.",
    "education": "Education: software for learning and teaching.",
    "electronics": "Electronics: electronics utilities.",
    "fonts": "Fonts: font packages.",
    "games": "Games: programs to spend a nice time with after all this setting up.",
    "gnome": "GNOME: the GNOME desktop environment, a powerful, easy to use environment.",
    "golang": "Go: Go programming language, libraries, and development tools.",
    "graphics": "Graphics: editors, viewers, converters... Everything to become an artist.",
    "hamradio": "Ham Radio: software for ham radio.",
    "haskell": "Haskell: everything about Haskell, a purely functional programming language.",
    "httpd": "Web servers: web servers and their modules.",
    "interpreters": "Interpreters: interpreters for interpreted languages.",
    "introspection": "Introspection: machine readable introspection data for use by development tools.",
    "java": "Java: everything about Java.",
    "javascript": "JavaScript: JavaScript programming language, libraries, and development tools.",
    "kde": "KDE: the K Desktop Environment, a powerful, easy to use environment.",
    "kernel": "Kernels: operating system kernels and related modules.",
    "libdevel": "Library development: libraries necessary for developers to write programs that use them.",
    "libs": "Libraries: libraries to make other programs work. They provide special features to developers.",
    "lisp": "Lisp: everything about Lisp.",
    "localization": "Language packs: localization support for big software packages.",
    "mail": "Mail: programs to route, read, and compose E-mail messages.",
    "math": "Mathematics: math software.",
    "metapackages": "Meta packages: packages that mainly provide dependencies on other packages.",
    "misc": "Miscellaneous: miscellaneous utilities that did not fit well anywhere else.",
    "net": "Network: daemons and clients to connect your system to the world.",
    "news": "Newsgroups: software to access Usenet, to set up news servers, etc.",
    "ocaml": "OCaml: everything about OCaml, an ML language implementation.",
    "oldlibs": "Old Libraries: old versions of libraries, kept for backward compatibility with old applications.",
    "otherosfs": "Other OS's and file systems: software to run programs compiled for other operating systems, and to "
    "use their filesystems.",
    "perl": "Perl: everything about Perl, an interpreted scripting language.",
    "php": "PHP: everything about PHP.",
    "python": "Python: everything about Python, an interpreted, interactive object oriented language.",
    "ruby": "Ruby: everything about Ruby, an interpreted object oriented language.",
    "rust": "Rust: the Rust programming language, its library crates and tools.",
    "science": "Science: basic tools for scientific work.",
    "shells": "Shells: command shells. Friendly user interfaces for beginners.",
    "sound": "Sound: utilities to deal with sound: mixers, players, recorders, CD players, etc.",
    "tex": "TeX: the famous typesetting software and related programs.",
    "text": "Text processing: text processing utilities: spell checkers, dictionaries, converters, etc.",
    "utils": "Utilities: utilities for file/disk manipulation, backup and archive tools, system monitoring, input "
    "systems, etc.",
    "vcs": "Version Control Systems: version control systems and related utilities.",
    "video": "Video: video viewers, editors, recording, streaming.",
    "web": "Web Software: web servers, browsers, proxies, download tools etc.",
    "x11": "X Window System software: X servers, libraries, window managers, terminal emulators and many related "
    "applications.",
    "xfce": "Xfce: Xfce, a fast and lightweight Desktop Environment.",
}


def section_descriptions(label_names: Iterable[str]) -> dict[str, str]:
    """``{section: description}`` for ``label_names`` (:data:`DEBIAN_SECTION_DESCRIPTIONS`; a section it lacks is
    described by its own name)."""
    return {
        n: DEBIAN_SECTION_DESCRIPTIONS.get(n, f"{n.capitalize()}: packages of the {n} section.")
        for n in label_names
    }


@dataclass(frozen=True)
class TextClassificationTask:
    """A labelled text task: texts and integer labels per split, the label names, and where it came from.

    Attributes:
        train_texts / train_labels, validation_texts / validation_labels, test_texts / test_labels: the splits.
        label_names: ``label_names[i]`` is the name of label ``i``.
        n_packages: the number of packages the source listed (for the record).
    """

    train_texts: tuple[str, ...]
    train_labels: tuple[int, ...]
    validation_texts: tuple[str, ...]
    validation_labels: tuple[int, ...]
    test_texts: tuple[str, ...]
    test_labels: tuple[int, ...]
    label_names: tuple[str, ...]
    n_packages: int


def parse_dumpavail(lines: Iterable[str]) -> list[tuple[str, str, str]]:
    """``(package, section, description)`` of each paragraph of ``apt-cache dumpavail`` output.

    The description is the synopsis line and the extended description joined with spaces (a ``" ."`` line, an
    empty line of the extended description, is dropped); the section is its last component (``contrib/games`` ->
    ``games``). Paragraphs without a section or a description are skipped.
    """
    out: list[tuple[str, str, str]] = []
    pkg = section = None
    desc: list[str] = []
    in_desc = False

    def flush() -> None:
        if pkg and section and desc:
            out.append((pkg, section.rsplit("/", 1)[-1], " ".join(desc)))

    for raw in lines:
        line = raw.rstrip("\n")
        if not line.strip():
            flush()
            pkg = section = None
            desc, in_desc = [], False
            continue
        if line[0] in " \t":
            if in_desc and line.strip() != ".":
                desc.append(line.strip())
            continue
        key, _, value = line.partition(":")
        in_desc = key == "Description"
        if key == "Package":
            pkg = value.strip()
        elif key == "Section":
            section = value.strip()
        elif in_desc:
            desc = [value.strip()]
    flush()
    return out


def _dumpavail() -> list[str]:
    exe = shutil.which("apt-cache")
    if exe is None:
        raise InvalidArgument(
            "debian_sections_task needs apt-cache (a Debian / Ubuntu machine with APT lists)"
        )
    res = subprocess.run([exe, "dumpavail"], capture_output=True, text=True, check=True)
    return res.stdout.splitlines()


def debian_sections_task(
    *,
    top_k: int = 10,
    max_per_section: int = 2500,
    test_fraction: float = 0.2,
    validation_fraction: float = 0.1,
    seed: int = 0,
    lines: Iterable[str] | None = None,
) -> TextClassificationTask:
    """The Debian-sections classification task (see the module docstring).

    Args:
        top_k: how many of the most common sections become labels (>= 2).
        max_per_section: at most this many descriptions per section (>= 2; a seeded sample).
        test_fraction: share of each section held out for test, in (0, 1).
        validation_fraction: share of each section's remaining examples held out for validation, in [0, 1).
        seed: seed of the sampling and of the split (non-private randomness).
        lines: ``apt-cache dumpavail`` output to use instead of running it (tests).

    Returns:
        The :class:`TextClassificationTask`.

    Raises:
        InvalidArgument: an argument out of range, no apt-cache, or fewer than ``top_k`` sections.
    """
    check_range("top_k", top_k, 2, 10_000, integer=True)
    check_range("max_per_section", max_per_section, 2, 10**7, integer=True)
    check_range("test_fraction", test_fraction, 0.0, 1.0, lo_inclusive=False, hi_inclusive=False)
    check_range("validation_fraction", validation_fraction, 0.0, 1.0, hi_inclusive=False)
    rows = parse_dumpavail(_dumpavail() if lines is None else lines)
    n_packages = len(rows)
    seen: set[str] = set()
    unique = []
    # package order: which copy of a duplicate is kept does not depend on the APT lists' order
    for _pkg, sec, desc in sorted(rows):
        if desc not in seen:
            seen.add(desc)
            unique.append((sec, desc))
    counts = Counter(sec for sec, _ in unique)
    if len(counts) < top_k:
        raise InvalidArgument(
            f"top_k must be <= the number of sections ({len(counts)}); got {top_k}"
        )
    names = tuple(sorted(sec for sec, _ in counts.most_common(top_k)))
    rng = np.random.default_rng(seed)
    split: dict[str, tuple[list[str], list[int]]] = {k: ([], []) for k in ("train", "val", "test")}
    for label, name in enumerate(names):
        texts = [d for s, d in unique if s == name]
        order = rng.permutation(len(texts))[:max_per_section]
        chosen = [texts[i] for i in order]
        n_test = max(1, int(round(test_fraction * len(chosen))))
        n_val = int(round(validation_fraction * (len(chosen) - n_test)))
        parts = {
            "test": chosen[:n_test],
            "val": chosen[n_test : n_test + n_val],
            "train": chosen[n_test + n_val :],
        }
        for k, part in parts.items():
            split[k][0].extend(part)
            split[k][1].extend([label] * len(part))
    shuffled = {}
    for k, (texts, labels) in split.items():
        perm = rng.permutation(len(texts))
        shuffled[k] = (tuple(texts[i] for i in perm), tuple(int(labels[i]) for i in perm))
    return TextClassificationTask(
        *shuffled["train"], *shuffled["val"], *shuffled["test"], names, n_packages
    )
