#!/usr/bin/env bash
# The prepared GPU check of private training (issue #29 items 1, 3, 5): run it on the lent H100 from the repo root
# with the wheels of scripts/gpu/fetch_wheels.sh carried, e.g. with the device tool:
#     run(command="bash scripts/gpu/check_dp_cuda.sh", carry=[".whl"], timeout_s=540)
# It prints (and writes under $OUT) the device, the versions, the CUDA-only tests and the benchmark rows:
# BERT-base 32x128 and GPT-2-small 16x256 (random init), fp32 and bf16 autocast, every privnlp mode and opacus'
# own hooks mode as the anchor. About 5-7 minutes on one H100 (estimate: not yet run).
# PROFILE=1 (session 10's book-keeping changes, unmeasured on a GPU): adds the book-keeping profile
# (`--profile`: forward / backward / clipped sum / noise / AdamW vs the non-private step, synchronized per part)
# for both models and drops the bf16 rows to stay inside one 10-minute call.
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
  python3 -c "import platform, torch; print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
} 2>&1 | tee "$OUT/device.txt"
# the CUDA-only tests (they skip on CPU): noise generator on the device, CUDA checkpoint resume (same kind and on
# CPU), epsilon equal on both device kinds, GPT-2 book-keeping under bf16 on CUDA
timeout 100 python3 -m pytest -q -p no:cacheprovider -rs tests/training/test_devices.py \
  tests/training/test_bookkeeping_norms.py tests/training/test_bookkeeping_review.py \
  tests/training/test_low_precision_sums.py 2>&1 | tee "$OUT/tests.txt"
DTYPES="fp32 bf16"
if [ "${PROFILE:-0}" = 1 ]; then
  DTYPES=fp32
  for cfg in "bert-base 32 128" "gpt2-small 16 256"; do
    set -- $cfg
    timeout 90 python3 benchmarks/dp_sgd_overhead.py --model "$1" --batch "$2" --seq-len "$3" --steps 10 \
      --device cuda --profile 2>&1 | tee -a "$OUT/profile.txt"
  done
fi
for cfg in "bert-base 32 128" "gpt2-small 16 256"; do
  set -- $cfg
  for dtype in $DTYPES; do
    timeout 105 python3 benchmarks/dp_sgd_overhead.py --model "$1" --batch "$2" --seq-len "$3" \
      --dtype "$dtype" --steps 10 --device cuda 2>&1 | tee -a "$OUT/bench.txt"
    echo | tee -a "$OUT/bench.txt"
  done
done
