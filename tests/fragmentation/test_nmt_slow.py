"""Table 2-style end-to-end check (slow: `make repro`): tiny GRU seq2seq, BLEU with sacrebleu."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_table2_like():
    pytest.importorskip("torch")
    from privnlp.mechanisms.fragmentation.nmt import table2

    rows = {r.system: r for r in table2(seed=0)}
    for r in rows.values():
        print(
            f"{r.system:28s} BLEU {r.bleu:6.2f}  mean len {r.mean_output_length:5.2f}  pairs {r.train_pairs}"
        )
    full, base = rows["full sentences"].bleu, rows["baseline (no fine-tuning)"].bleu
    frag = [r for k, r in rows.items() if k.startswith("fragments")]
    assert full > base and all(full > r.bleu for r in frag)
    # tagging helps with max length 4 (paper: in most cases), and tagged outputs are longer
    assert rows["fragments max 4 tag"].bleu > rows["fragments max 4 no tag"].bleu
    assert (
        rows["fragments max 4 tag"].mean_output_length
        > rows["fragments max 4 no tag"].mean_output_length
    )
