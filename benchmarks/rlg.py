"""RLG speed: 16k-label output layer, S = 8 (target <= 5 s on 2 cores; paper: < 5 min per inference).

Baseline in the same process: the same LPs without the exact cone screening (on a 2k-label slice,
extrapolated linearly to 16k), i.e. Algorithm 1 as written.
"""

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")
import numpy as np
import torch

from privnlp.attacks.gradient.rlg import reveal_labels

torch.manual_seed(0)
C, d, S = 16000, 256, 8
net = torch.nn.Sequential(torch.nn.Linear(32, d), torch.nn.Tanh(), torch.nn.Linear(d, C))
x, y = torch.randn(S, 32), torch.randint(0, C, (S,))
g = torch.autograd.grad(torch.nn.functional.cross_entropy(net(x), y), [net[2].weight, net[2].bias])
dW = np.concatenate([g[0].double().numpy(), g[1].double().numpy()[:, None]], 1)
reveal_labels(dW[:500], rng=0)  # warm-up (scipy import)
t = time.perf_counter()
res = reveal_labels(dW, rng=0)
t_fast = time.perf_counter() - t
ok = set(res.labels) == set(y.tolist())
t = time.perf_counter()
sub = 2000
reveal_labels(dW[:sub], screen=False, rng=0, num_labels=S, generate=False)
t_slow = (time.perf_counter() - t) * C / sub
print(
    f"RLG C={C} d={d} S={S}: {t_fast:.2f} s (exact: {ok}, LPs solved: {res.num_lp}); "
    f"without screening ~{t_slow:.1f} s (extrapolated); speed-up x{t_slow / t_fast:.0f}"
)
