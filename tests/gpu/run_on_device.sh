#!/usr/bin/env bash
# The one-call GPU check, on a lent GPU machine (the device tool), under 5 minutes:
#   device run: bash tests/gpu/run_on_device.sh      (carry: [".whl"]; timeout_s: 420)
# Build .whl here first with tests/gpu/fetch_wheels.sh: the wheels the device lacks (it reaches no index).
# It installs them, prints the device, runs the GPU suite (one line per test, and the GPU-* figure lines)
# and the W3 GPU benchmark (airflowless against plain PyTorch on the same GPU, in this one call).
# XGBoost-on-GPU is left untested: its GPU wheel (131 MB) is over the 64 MiB one call carries, and
# carrying it across two calls would spend a second machine start of the 15 minutes on one library.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp}"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "installing .whl failed"; exit 1; }
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export PYTHONUNBUFFERED=1 AIRFLOWLESS_HOME="$(mktemp -d)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import sys, torch, dask, distributed; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| cuda', torch.cuda.is_available(), '| dask', dask.__version__, '| distributed', distributed.__version__)"
started=$SECONDS
timeout 270 python3 -m pytest tests/gpu -p no:cacheprovider -o addopts="" -rA -s -q --timeout 240 \
  > "$out/gpu-suite.log" 2>&1
suite=$?
grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|GPU-|[0-9]+ (passed|failed)" "$out/gpu-suite.log"
[ $suite -eq 0 ] || tail -n 60 "$out/gpu-suite.log"
echo "suite exit $suite in $((SECONDS - started)) s"
timeout 150 python3 tests/gpu/bench_w3_gpu.py 400000 2>&1 | tee "$out/w3-gpu.log" | grep -E "^W3-GPU|Error|error" \
  || tail -n 30 "$out/w3-gpu.log"
echo "total $SECONDS s"
exit $suite
