"""Scale benchmark of `privnlp sanitize` (issue #31 item 6): a JSONL corpus generated from the real
English on the machine (Debian license texts and copyright files), sanitized with the CLI's defaults
by whole processes: `--num-proc 1`, `--num-proc 2`, and the Dask engine with 2 local workers.

Paper: ../shared/papers/vickrey-mechanism-metric-dp.txt. For each run it prints wall time, words/s,
words/s per core (CPU seconds of the process tree: user + sys), peak resident memory of the largest
process, and the time to first output (the first byte in the run's temporary output or part file).
The same-run ratio against `--num-proc 1` is what carries to another machine; the machine's load is
printed before and after.

    python benchmarks/sanitize_corpus.py --size-mb 1024     # the issue's 1 GB (hours on 2 cores)
    python benchmarks/sanitize_corpus.py --size-mb 2        # reduced size
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path


def english_lines() -> list[str]:
    """Non-blank lines of the Debian license texts and copyright files on this machine."""
    files = sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(
        glob.glob("/usr/share/doc/*/copyright")
    )
    out = []
    for f in files:
        try:
            text = Path(f).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        out += [ln.strip() for ln in text.split("\n") if ln.strip()]
    if not out:
        sys.exit("no English text found under /usr/share/common-licenses or /usr/share/doc")
    return out


def make_corpus(path: Path, size_mb: float) -> int:
    """A JSONL file of about ``size_mb`` MB: records of 8 consecutive lines; returns its word count."""
    lines = english_lines()
    target = int(size_mb * (1 << 20))
    words = 0
    with open(path, "w", encoding="utf-8") as f:
        i = n = 0
        while n < target:
            text = " ".join(lines[(i + j) % len(lines)] for j in range(8))
            rec = json.dumps({"id": i, "text": text}, ensure_ascii=False) + "\n"
            f.write(rec)
            n += len(rec.encode())
            words += len(text.split())
            i += 8
    return words


def first_output_watch(folder: Path, name: str, t0: float, box: dict) -> None:
    while "t" not in box and not box.get("stop"):
        for p in folder.glob(f".{name}*"):
            try:
                if p.is_file() and p.stat().st_size > 0 or p.is_dir() and any(p.iterdir()):
                    box["t"] = time.perf_counter() - t0
                    return
            except OSError:
                pass
        time.sleep(0.05)


def run(cmd: list[str], out: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    box: dict = {}
    t0 = time.perf_counter()
    th = threading.Thread(target=first_output_watch, args=(out.parent, out.name, t0, box))
    th.start()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    box["stop"] = True
    th.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    side = json.loads(Path(str(out) + ".privnlp.json").read_text())
    return {
        "wall": wall,
        "cpu": cpu,
        "words": side["counts"]["words"],
        "maxrss_mib": after.ru_maxrss / 1024,
        "first_output": box.get("t"),
        "index": side["index"]["kind"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=float, default=1024.0)
    ap.add_argument("--workdir", default="/tmp/privnlp-sanitize-corpus")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    wd = Path(args.workdir)
    wd.mkdir(parents=True, exist_ok=True)
    corpus = wd / f"corpus-{args.size_mb:g}MB.jsonl"
    if not corpus.exists():
        make_corpus(corpus, args.size_mb)
    exe = [sys.executable, "-m", "privnlp.cli.main"]
    print(f"corpus {corpus} ({corpus.stat().st_size / 2**20:.1f} MiB); load {os.getloadavg()}")
    base = None
    for name, extra in (
        ("--num-proc 1", ["--num-proc", "1"]),
        ("--num-proc 2", ["--num-proc", "2"]),
        ("--engine dask --workers 2", ["--engine", "dask", "--workers", "2"]),
    ):
        out = wd / f"out-{name.replace(' ', '').replace('-', '')}.jsonl"
        cmd = exe + ["sanitize", str(corpus), "-o", str(out), "--seed", str(args.seed)]
        res = run(cmd + ["--no-progress"] + extra, out)
        wps = res["words"] / res["wall"]
        base = base or wps
        fo = res["first_output"]
        print(
            f"{name:28s} {res['words']:,} words  wall {res['wall']:.1f} s  {wps:,.0f} words/s "
            f"({wps / base:.2f}x of --num-proc 1)  {res['words'] / max(res['cpu'], 1e-9):,.0f} words "
            f"per CPU-second  peak RSS {res['maxrss_mib']:.0f} MiB  first output "
            f"{'n/a' if fo is None else f'{fo:.1f} s'}  index {res['index']}",
            flush=True,
        )
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
