"""LAMP speed: seconds per sentence, batched (torch.func.vmap) vs unbatched candidate scoring."""

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")

from privnlp.attacks.gradient.lamp import LAMP, aux_lm
from privnlp.evaluation.scenarios.gradient import FedSGDEavesdropper

run = FedSGDEavesdropper(task="classifier", batch_size=1).run(None, rng=0)
obs = run.trials[0].observation
aux_lm(obs.tokenizer)  # train/cache the auxiliary LM outside the timing
out = {}
for batched in (True, False):
    t = time.perf_counter()
    LAMP(n_init=50, n_perm=50, iterations=4, n_c=10, n_d=32, batched=batched).run(obs, rng=0)
    out[batched] = time.perf_counter() - t
print(
    f"LAMP 1 sentence (len {obs.lengths[0]}), n_init=50 n_perm=50 it=4 n_c=10 n_d=32: "
    f"batched {out[True]:.1f} s/sentence vs unbatched {out[False]:.1f} s/sentence (x{out[False] / out[True]:.2f})"
)
