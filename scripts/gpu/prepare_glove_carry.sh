#!/usr/bin/env bash
# Prepare, here on the CPU machine, GloVe 6B 50-d for the GPU machine (issue #31 item 3: the device path's figure on
# GloVe itself, not a synthetic vocabulary): .gpu_carry31/glove_fp16.npz holds the 400k words and their vectors in
# fp16 (40 MB; the fp32 package is 80 MB, over the 64 MiB one call may carry). Git-ignored. Then, with the device tool:
#     run(command="python3 benchmarks/sanitize_throughput.py --device cuda --vectors-file .gpu_carry31/glove_fp16.npz \
#         --tokens 262144 --check 10000 > $OUT/glove.txt 2>&1; cat $OUT/glove.txt", carry=[".whl", ".gpu_carry31"])
# after `bash scripts/gpu/fetch_wheels.sh` and with PYTHONPATH set as scripts/gpu/issue29.sh sets it.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpu_carry31/' .git/info/exclude 2>/dev/null || echo /.gpu_carry31/ >> .git/info/exclude
mkdir -p .gpu_carry31
${PYTHON:-.venv/bin/python} - <<'PYEOF'
import numpy as np

from privnlp.mechanisms.text.embeddings import glove_embeddings

emb = glove_embeddings()
words = np.frombuffer("\n".join(emb.words).encode(), dtype=np.uint8)  # one UTF-8 string: fixed-width <U arrays are 3x
np.savez(".gpu_carry31/glove_fp16.npz", words=words, vectors=np.asarray(emb.vectors, dtype=np.float16))
print(f"{len(emb)} words x {emb.dim}")
PYEOF
du -sh .gpu_carry31
