#!/usr/bin/env bash
# One command for a later session with a GPU (issue #29 items 5, 6, 8); prepare first with
# scripts/gpu/prepare_carry.sh, then with the device tool:
#     run(command="bash scripts/gpu/issue29.sh", carry=[".whl", ".gpu_carry"], timeout_s=580)
# Prints every row and writes them under $OUT (device.txt, finetune.json/.txt, bench.txt).
#  * item 6: DP fine-tuning of all-MiniLM-L6-v2 on the Debian-sections task, hyperparameters chosen on the
#    validation split only, test accuracy of the chosen run at epsilon 8 and 3 next to the tuned non-private one
#    (scripts/gpu/dp_finetune_debian.py; about 6 min on one H100: estimate, not yet run).
#  * item 5: the overhead benchmark (BERT-base / GPT-2-small, fp32 / bf16): already measured on an H100
#    (scripts/gpu/results/h100-run2.txt); BENCH=1 reruns it after item 6 (about 5 min more: run it in a second call).
#  * item 8: `privnlp evaluate --all --preset realistic --device cuda` is NOT prepared: privnlp evaluate has no
#    --device option yet and the realistic victims are built on the CPU (see the train engineer's report).
set -uo pipefail
OUT=${OUT:-/tmp/privnlp-gpu}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import platform, torch, transformers, opacus; print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'transformers', transformers.__version__, 'opacus', opacus.__version__)"
} 2>&1 | tee "$OUT/device.txt"
[ -f .gpu_carry/debian_sections.json.gz ] || { echo "run scripts/gpu/prepare_carry.sh first (carry .gpu_carry)"; exit 1; }
timeout ${FINETUNE_TIMEOUT:-420} python3 scripts/gpu/dp_finetune_debian.py --carry .gpu_carry --device cuda \
  --out "$OUT/finetune.json" 2>&1 | tee "$OUT/finetune.txt"
if [ "${BENCH:-0}" = 1 ]; then
  for cfg in "bert-base 32 128" "gpt2-small 16 256"; do
    set -- $cfg
    for dtype in fp32 bf16; do
      timeout 105 python3 benchmarks/dp_sgd_overhead.py --model "$1" --batch "$2" --seq-len "$3" \
        --dtype "$dtype" --steps 10 --device cuda 2>&1 | tee -a "$OUT/bench.txt"
    done
  done
fi
