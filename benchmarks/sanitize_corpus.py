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
    python benchmarks/sanitize_corpus.py --size-mb 100 --configs 1   # one configuration, whole
        # (the generator is deterministic: the 100 MB file is the first 100 MB of the 1 GB one)
    python benchmarks/sanitize_corpus.py --size-mb 1024 --max-seconds 180 --delete
        # the real 1 GB file, each configuration stopped after 180 s (SIGINT: the CLI removes its
        # temporary output): the output bytes written are sampled every second, so it prints the
        # steady-state words/s (slope over the last 2/3 of the budget, bytes -> words at the corpus's
        # words per byte) and per core, the fraction of the file done, the extrapolated time for the
        # whole file, the time to first output, and the peak resident memory of the process tree
        # (summed over the workers) within the first third of the budget and within the whole budget
        # (streaming: the two stay about equal while the file is read further)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import signal
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


def _session_pids(sid: int) -> list[int]:
    """The live processes of session ``sid`` (the run and its workers)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.getsid(int(d)) == sid:
                pids.append(int(d))
        except (OSError, ProcessLookupError):
            continue
    return pids


def _tree_rss_kib(sid: int) -> int:
    """Resident memory (KiB) summed over the processes of session ``sid`` (the run and its workers)."""
    tot = 0
    for pid in _session_pids(sid):
        try:
            with open(f"/proc/{pid}/status") as fh:
                for ln in fh:
                    if ln.startswith("VmRSS:"):
                        tot += int(ln.split()[1])
                        break
        except (OSError, ValueError):
            continue
    return tot


def _out_bytes(folder: Path, name: str) -> int:
    """Bytes written so far: the run's temporary output file, or the Dask engine's part files."""
    n = 0
    for p in folder.glob(f".{name}*"):
        try:
            if p.is_file():
                n += p.stat().st_size
            elif p.is_dir():
                n += sum(q.stat().st_size for q in p.rglob("*") if q.is_file())
        except OSError:
            pass
    return n


def run_budget(cmd: list[str], out: Path, budget: float) -> dict:
    """Run ``cmd`` for at most ``budget`` seconds, sampling output bytes and tree RSS every second."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        # a job started with `&` inherits SIGINT ignored, and Python then installs no
        # KeyboardInterrupt handler: restore the default so the stop below cleans up
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    samples: list[tuple[float, int, int]] = []  # (t, output bytes, tree RSS KiB)
    first = None
    while proc.poll() is None and time.perf_counter() - t0 < budget:
        time.sleep(1.0)
        t = time.perf_counter() - t0
        b = _out_bytes(out.parent, out.name)
        samples.append((t, b, _tree_rss_kib(proc.pid)))
        if first is None and b > 0:
            first = t
    finished = proc.poll() is not None
    t_end = time.perf_counter() - t0
    cpu = _tree_cpu(proc.pid)
    # a finished run's output is in place under its own name (no temporary file left to count)
    words, nbytes = _out_words(out.parent, out.name, whole=finished)
    total = None
    if finished:
        if proc.returncode != 0:
            sys.exit(f"failed (exit {proc.returncode}): {' '.join(cmd)}")
        # the temporary output was renamed: the samples after the rename count 0 bytes. Keep the
        # samples taken while it was written and end on the complete output, so the slope and the
        # words done come from the run's own records; the whole-run rate uses the sidecar's count.
        samples = [x for x in samples if x[1] > 0]
        rss = max((x[2] for x in samples), default=0)
        samples.append((t_end, nbytes, rss))
        total = json.loads(Path(str(out) + ".privnlp.json").read_text())["counts"]["words"]
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the reaped tree's CPU
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if not finished:
        # KeyboardInterrupt: the CLI removes its temporary output
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = samples[-1][0] if samples else time.perf_counter() - t0
    return {
        "released_words": total,
        "samples": samples,
        "first_output": first,
        "finished": finished,
        "wall": wall,
        "cpu": cpu,
        "words_per_out_byte": words / nbytes if nbytes else 0.0,
    }


def _out_words(folder: Path, name: str, whole: bool = False) -> tuple[int, int]:
    """Words in the ``text`` of the complete records written so far, and their bytes (the released
    word count equals the input's up to split clitics: 2,305,696 vs 2,304,790 on 78,336 records)."""
    words = nbytes = 0
    for p in [folder / name] if whole else folder.glob(f".{name}*"):
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
        for f in files:
            try:
                data = f.read_bytes()
            except OSError:
                continue
            for ln in data[: data.rfind(b"\n") + 1].splitlines():
                try:
                    words += len(json.loads(ln)["text"].split())
                    nbytes += len(ln) + 1
                except (ValueError, KeyError, TypeError):
                    continue
    return words, nbytes


def _tree_cpu(sid: int) -> float:
    """CPU seconds (user + sys) of the live processes of session ``sid``."""
    tick = os.sysconf("SC_CLK_TCK")
    tot = 0.0
    for pid in _session_pids(sid):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
            tot += (int(f[11]) + int(f[12])) / tick  # utime, stime
        except (OSError, ValueError, IndexError):
            continue
    return tot


#: the configurations measured: (name, extra CLI arguments, processes doing the work)
CONFIGS = (
    ("--num-proc 1", ["--num-proc", "1"], 1),
    ("--num-proc 2", ["--num-proc", "2"], 2),
    ("--engine dask --workers 2", ["--engine", "dask", "--workers", "2"], 2),
)


def _selected(args) -> list[tuple[str, list[str], int]]:
    """The configurations named by ``--configs`` (indices into :data:`CONFIGS`; default all)."""
    if not args.configs:
        return list(CONFIGS)
    try:
        return [CONFIGS[int(i)] for i in args.configs.split(",")]
    except (ValueError, IndexError):
        sys.exit(
            f"--configs: comma-separated indices in 0..{len(CONFIGS) - 1}, got {args.configs!r}"
        )


def _command(
    exe: list[str], corpus: Path, wd: Path, name: str, seed: int
) -> tuple[Path, list[str]]:
    """The output path of configuration ``name`` and its ``privnlp sanitize`` command (defaults)."""
    out = wd / f"out-{name.replace(' ', '').replace('-', '')}.jsonl"
    return out, exe + ["sanitize", str(corpus), "-o", str(out), "--seed", str(seed)]


def budget_main(args, corpus: Path, wd: Path, words_per_byte: float, exe: list[str]) -> None:
    size = corpus.stat().st_size
    total_words = args.corpus_words
    if not total_words:
        with open(corpus, encoding="utf-8") as fh:  # the file's words (text fields), ~25 s per GB
            total_words = sum(len(json.loads(ln)["text"].split()) for ln in fh)
    print(
        f"corpus {corpus} ({size / 2**20:.1f} MiB, {total_words:,} words); budget "
        f"{args.max_seconds:.0f} s per configuration; load {os.getloadavg()}; {os.cpu_count()} CPUs",
        flush=True,
    )
    for name, extra, cores in _selected(args):
        out, cmd = _command(exe, corpus, wd, name, args.seed)
        load = os.getloadavg()[0]
        r = run_budget(cmd + ["--no-progress"] + extra, out, args.max_seconds)
        S = r["samples"]
        t_a = r["wall"] / 3  # steady state: the last two thirds of the budget
        a = next((x for x in S if x[0] >= t_a and x[1] > 0), S[0])
        z = S[-1]
        wpob = r["words_per_out_byte"] or words_per_byte
        if z[0] - a[0] >= 1.0:
            wps = (z[1] - a[1]) / (z[0] - a[0]) * wpob
        else:  # finished inside the first third: only the whole-run rate exists
            wps = (r["released_words"] or 0) / max(r["wall"], 1e-9)
        done_words = z[1] * wpob if r["released_words"] is None else r["released_words"]
        third = max((x[2] for x in S if x[0] <= t_a), default=0) / 1024
        peak = max((x[2] for x in S), default=0) / 1024
        done = done_words / total_words
        fo = r["first_output"]
        print(
            f"{name:28s} steady {wps:,.0f} words/s ({wps / cores:,.0f} per process, {cores} process(es); "
            f"{done_words / max(r['cpu'], 1e-9):,.0f} words per CPU-second over the run); "
            f"{z[1] / 2**20:.1f} MiB ({done_words:,.0f} words) written in {z[0]:.0f} s = {100 * done:.2f}% "
            f"of the file's words; whole file extrapolated {total_words / max(wps, 1e-9) / 3600:.1f} h; first output "
            f"{'n/a' if fo is None else f'{fo:.0f} s'}; peak tree RSS {third:.0f} MiB in the first "
            f"{t_a:.0f} s, {peak:.0f} MiB in {z[0]:.0f} s; CPU {r['cpu']:.0f} s of live processes at "
            f"the stop; load before {load:.2f}"
            + (
                f"; FINISHED in {r['wall']:.1f} s: {r['released_words']:,} words released, "
                f"{r['released_words'] / max(r['wall'], 1e-9):,.0f} words/s over the whole run"
                if r["finished"]
                else ""
            ),
            flush=True,
        )
    print(f"load after: {os.getloadavg()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=float, default=1024.0)
    ap.add_argument("--workdir", default="/tmp/privnlp-sanitize-corpus")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=0.0,
        help="stop each configuration after this (0: run whole)",
    )
    ap.add_argument("--delete", action="store_true", help="delete the corpus at the end")
    ap.add_argument(
        "--corpus-words",
        type=int,
        default=0,
        help="the corpus's word count when known (printed when it was generated; 0: count it)",
    )
    ap.add_argument(
        "--configs",
        default="",
        help="comma-separated indices of the configurations to run (0: --num-proc 1, 1: --num-proc 2, "
        "2: dask with 2 workers; default: all)",
    )
    args = ap.parse_args()
    wd = Path(args.workdir)
    wd.mkdir(parents=True, exist_ok=True)
    corpus = wd / f"corpus-{args.size_mb:g}MB.jsonl"
    if not corpus.exists():
        t0 = time.perf_counter()
        w = make_corpus(corpus, args.size_mb)
        print(f"generated {corpus} ({w:,} words) in {time.perf_counter() - t0:.0f} s", flush=True)
    exe = [sys.executable, "-m", "privnlp.cli.main"]
    if args.max_seconds > 0:
        with open(corpus, "rb") as fh:  # words per byte of the records' text, from the first 16 MiB
            head = fh.read(16 << 20).decode("utf-8", "ignore").split("\n")[:-1]
        nb = sum(len(ln.encode()) + 1 for ln in head)
        nw = sum(len(json.loads(ln)["text"].split()) for ln in head)
        try:
            budget_main(args, corpus, wd, nw / nb, exe)
        finally:
            if args.delete:
                corpus.unlink()
        return
    print(f"corpus {corpus} ({corpus.stat().st_size / 2**20:.1f} MiB); load {os.getloadavg()}")
    base = None
    for name, extra, _ in _selected(args):
        out, cmd = _command(exe, corpus, wd, name, args.seed)
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
