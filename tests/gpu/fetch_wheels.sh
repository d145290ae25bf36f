#!/usr/bin/env bash
# Builds .whl/, the wheels a lent GPU machine lacks, for tests/gpu/run_on_device.sh (run it here, not there).
# That machine has Python 3.12 with PyTorch (CUDA), numpy, pandas, pyarrow, scikit-learn, click, fsspec,
# jinja2, msgpack, psutil, pyyaml, rich, tqdm, httpx and prometheus-client, and reaches no package index.
# What it lacks of airflowless's needs is fetched here at the versions of constraints.txt (the suite's),
# for CPython 3.12 on manylinux x86_64, without dependencies (each one is named). About 15 MB: one call
# carries at most 64 MiB. XGBoost's GPU wheel (131 MB) cannot travel, so XGBoost-on-GPU is not checked.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
rm -rf .whl && mkdir .whl
packages=(dask distributed tornado sqlalchemy bokeh xyzservices partd locket tblib zict cloudpickle toolz
          starlette uvicorn httptools)
pins=()
for name in "${packages[@]}"; do
  pin=$(grep -i "^${name}==" constraints.txt || true)
  [ -n "$pin" ] || { echo "no pin for $name in constraints.txt" >&2; exit 1; }
  pins+=("$pin")
done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${pins[@]}"
du -sh .whl
