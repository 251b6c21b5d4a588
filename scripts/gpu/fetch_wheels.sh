#!/usr/bin/env bash
# Download (here, on the CPU machine, with network access to PyPI) the wheels that the GPU machine lacks for
# scripts/gpu/check_dp_cuda.sh: its image has torch, transformers, peft, accelerate, scipy, absl-py, attrs, mpmath,
# opt-einsum, wrapt (see /work/.library/device/KINDS.md), not opacus / dp-accounting / dm-tree. Python there is
# 3.12 (x86-64). The folder .whl is git-ignored locally (echo /.whl/ >> .git/info/exclude) and carried by the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
PY=${PYTHON:-.venv/bin/python}
for spec in opacus==1.6.0 dp-accounting==0.6.0 dm-tree==0.1.10; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$spec"
done
ls -la .whl
