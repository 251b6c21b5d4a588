"""FILM speed: b = 16, beam 32, tiny GPT-2 (target <= 30 s for bag + beam search + reordering).

Baseline in the same process: beam search without the KV cache (full recomputation per step)."""

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")

from privnlp.attacks.gradient.film import FILM, beam_search, recover_bag
from privnlp.core.observations import GradientObservation
from privnlp.evaluation.scenarios.gradient import _lm_batch_dict, client_update, lm_victim

model, tok, recs = lm_victim("quick", 0)
batch = _lm_batch_dict(tok, [r.text for r in recs[:16]], 40)
grads, _ = client_update(model, batch, None, rng=0)
obs = GradientObservation(model=model, gradients=grads, batch_size=16, tokenizer=tok)
t = time.perf_counter()
res = FILM(beam_size=32, reorder_steps=200).run(obs, rng=0)
t_full = time.perf_counter() - t
bag = recover_bag(grads, model)
t = time.perf_counter()
beam_search(model, tok, bag.token_ids, max_length=bag.max_length, beam_size=32)
t_cache = time.perf_counter() - t
t = time.perf_counter()
beam_search(model, tok, bag.token_ids, max_length=bag.max_length, beam_size=32, use_cache=False)
t_nocache = time.perf_counter() - t
print(
    f"FILM b=16 beam=32 (bag {len(bag.token_ids)} tokens, L={bag.max_length}): full attack {t_full:.1f} s; "
    f"beam search {t_cache:.2f} s with KV cache vs {t_nocache:.2f} s without (x{t_nocache / t_cache:.1f})"
)
