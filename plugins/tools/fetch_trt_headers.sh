#!/usr/bin/env bash
# Fetches NVIDIA's public TensorRT 10.14 headers (Apache-2.0), carried by the kernel-lens wheel, into
# build/ for the compile check of the TensorRT plugin glue, and prints their include directory.
# The wheel is unpacked rather than installed: its dependencies (triton) are large and unused here.
# A real plugin build must use the headers of the TensorRT it runs with (11.x's ABI differs).
#
# usage: plugins/tools/fetch_trt_headers.sh [DEST]   (default build/kernel-lens; PYTHON picks pip)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest=${1:-$root/build/kernel-lens}
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3
wheel=kernel_lens-2.0.1-py3-none-any.whl
sha256=07cc714e8b5e7f34b672f7c7fad93febe7c747be5837ba276b1527370134ffe0

mkdir -p "$dest"
[ -f "$dest/$wheel" ] || "$python" -m pip download --quiet --no-deps kernel-lens==2.0.1 -d "$dest"
echo "$sha256  $dest/$wheel" | sha256sum --check --quiet
"$python" - "$dest/$wheel" "$dest" <<'PY'
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
wheel.extractall(sys.argv[2], [n for n in wheel.namelist() if n.startswith("kernel_lens/include/tensorrt/")])
PY
echo "$dest/kernel_lens/include/tensorrt"
