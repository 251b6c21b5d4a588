"""Benchmark: pi_TEXT (crypten_textcnn) seconds per instance, sequential vs batched, on loopback.

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (Tab. 2: 0.74 s sequential,
0.11 s batched per instance, 3 x 16-vCPU Azure VMs, 768-d embeddings). Here: Alice + Bob + TTP
as local processes (one thread each), all-MiniLM-L6-v2 embeddings (384-d) when installed,
else the hashed public fallback; both architecture presets (``paper``, ``fast``).

Per preset it prints: plaintext held-out accuracy; **sequential** per-text latency with warm
parties (one party session, texts streamed one at a time; each text's time includes its offline
phase = one batched TTP request; the first text, which is traced, and the one-off weight sharing
are reported apart); **batched** seconds per text; CrypTen's rounds and bytes (deterministic,
independent of machine load) per text; and, in the same process, the baselines: CrypTen's
per-AND-gate TTP requests (``offline=False``) and plaintext inference.

Transport (issue #33 item 5): the same runs over the mutually authenticated TLS 1.3 channels
(``transport="tls"``, ``channels.py``) and over CrypTen's torch.distributed / gloo on plain TCP,
interleaved ``--repeats`` times in the same process; it prints the median seconds of each and the
ratio TLS / plain (rounds and bytes are identical on both: the same protocol).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mpc_inference.py [--n 200] [--n-seq 20] [--preset both]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mpc_inference.py --transport-only [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _fmt_comm(c: dict, n: int) -> str:
    return (
        f"bob {c['bob']['rounds'] / n:.1f} rounds {c['bob']['bytes'] / n / 1e3:.0f} kB, "
        f"alice {c['alice']['rounds'] / n:.1f} rounds {c['alice']['bytes'] / n / 1e3:.0f} kB per text"
    )


def _transport_ratio(model, x, ns: int, provider: str, repeats: int) -> None:
    """Interleaved gloo / TLS runs (sequential on ``ns`` texts, batched on all of ``x``)."""
    import numpy as np

    from privnlp.mechanisms.mpc import CryptenTextCNN

    for mode, xs in (("sequential", x[:ns]), ("batched", x)):
        secs: dict[str, list[float]] = {"gloo": [], "tls": []}
        comm: dict[str, dict] = {}
        for _ in range(repeats):
            for tr in ("gloo", "tls"):
                r = CryptenTextCNN(
                    provider=provider, mode=mode, transport=tr, timeout=600
                ).classify(model, xs)
                secs[tr].append(r.seconds / len(xs))
                comm[tr] = {k: (v["rounds"], v["bytes"]) for k, v in r.comm.items()}
        g, t = float(np.median(secs["gloo"])), float(np.median(secs["tls"]))
        print(
            f"transport {mode} n={len(xs)} ({repeats} interleaved runs each, session incl. weight sharing): "
            f"plain gloo {g:.4f} s/text, TLS {t:.4f} s/text -> TLS/plain = {t / g:.2f}x  "
            f"(same rounds/bytes: {comm['gloo'] == comm['tls']}; load average {os.getloadavg()[0]:.1f})"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200, help="texts in the batched run")
    ap.add_argument("--n-seq", type=int, default=20, help="texts in the sequential run")
    ap.add_argument(
        "--n-train", type=int, default=2000, help="labeled texts (75%% train, 25%% held out)"
    )
    ap.add_argument("--encoder", default="auto")
    ap.add_argument("--provider", default="TTP")
    ap.add_argument("--preset", default="both", choices=["paper", "fast", "both"])
    ap.add_argument(
        "--no-baseline", action="store_true", help="skip the offline=False sequential baseline"
    )
    ap.add_argument(
        "--transport-only",
        action="store_true",
        help="only the TLS vs plain-gloo comparison (skips the sequential/batched/baseline section)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per transport")
    a = ap.parse_args()
    import numpy as np
    import torch

    from privnlp.data import generate_sentiment
    from privnlp.mechanisms.mpc import CryptenTextCNN, train_alice_model
    from privnlp.mechanisms.mpc.crypten_model import plaintext_state
    from privnlp.mechanisms.mpc.encoder import PublicEncoder
    from privnlp.mechanisms.mpc.protocol import run_embedded

    ds = generate_sentiment(max(a.n_train, 4 * a.n), seed=0)
    enc = PublicEncoder(a.encoder)
    t = time.perf_counter()
    emb = enc.encode(ds.texts)
    print(
        f"encoder={enc.resolved} embed_dim={emb.shape[1]} ({time.perf_counter() - t:.1f} s for {len(emb)} texts); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )

    presets = ["paper", "fast"] if a.preset == "both" else [a.preset]
    torch.set_num_threads(1)
    for preset in presets:
        alice, xt, yt = train_alice_model(
            texts=ds.texts,
            labels=ds.labels,
            embeddings=emb,
            encoder=a.encoder,
            seed=0,
            held_out=0.25,
            preset=preset,
        )
        model = alice.model
        x = xt[: a.n]
        print(
            f"\n== preset {preset}: {model.config()}  held-out accuracy {alice.accuracy:.3f} (n={len(xt)})"
        )
        t = time.perf_counter()
        for _ in range(10):
            ref = model.predict(torch.tensor(x)).numpy()
        plain = (time.perf_counter() - t) / 10 / len(x)

        ns = min(a.n_seq, len(x))
        _transport_ratio(model, x, ns, a.provider, a.repeats)
        if a.transport_only:
            continue
        res = CryptenTextCNN(provider=a.provider, mode="sequential", timeout=600).classify(
            model, x[:ns]
        )
        bs = np.asarray(res.batch_seconds)
        warm = float(bs[1:].mean()) if len(bs) > 1 else float(bs[0])
        agree = float((res.labels == ref[:ns]).mean())
        print(
            f"sequential n={ns}: {warm:.4f} s/text warm (median {np.median(bs[1:]) if len(bs) > 1 else bs[0]:.4f}; "
            f"first/traced text {bs[0]:.3f} s; session incl. weight sharing {res.seconds:.2f} s)  "
            f"agreement={agree:.3f}  {_fmt_comm(res.comm, ns)}"
        )
        if not a.no_baseline and a.provider == "TTP":
            out = run_embedded(
                config=model.public_config(),
                state={k: v.numpy() for k, v in plaintext_state(model).items()},
                embeddings=x[:ns],
                mode="sequential",
                timeout=600,
                offline=False,
            )
            bb = np.asarray(out["bob"].batch_seconds)
            c = {r: dict(o.comm) for r, o in out.items()}
            print(
                f"  baseline offline=False (a TTP round trip per AND gate): {bb[1:].mean():.4f} s/text warm  "
                f"{_fmt_comm(c, ns)}  -> offline phase speed-up {bb[1:].mean() / warm:.2f}x"
            )
        resb = CryptenTextCNN(provider=a.provider, mode="batched", timeout=600).classify(model, x)
        bat = resb.seconds / len(x)
        agree = float((resb.labels == ref).mean())
        print(
            f"batched n={len(x)}: {bat:.4f} s/text (session {resb.seconds:.2f} s)  agreement={agree:.3f}  "
            f"{_fmt_comm(resb.comm, len(x))}"
        )
        print(
            f"plaintext {plain * 1e6:.1f} us/text; MPC/plaintext (batched) = {bat / plain:.0f}x; "
            f"batched/sequential = {bat / warm:.3f} (paper: 0.11/0.74 = {0.11 / 0.74:.3f})"
        )
        print(
            f"targets: sequential {warm:.3f} <= 0.15 s: {warm <= 0.15};  batched {bat:.4f} <= 0.01 s: {bat <= 0.01}"
        )


if __name__ == "__main__":
    main()
