import numpy as np
from privnlp.mechanisms.text import Vickrey

mech = Vickrey(epsilon=20.0, t=0.5)     # metric DP per word (Xu et al. 2021); bundled word vectors
out = mech.sanitize("The nurse called about my appointment on Friday.", rng=np.random.default_rng(0))
print(out.text)
print(mech.claim(n_words=out.n_perturbed).statement())
