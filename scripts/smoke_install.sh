#!/usr/bin/env bash
# Smoke test of an installed deploykit (a wheel or `pip install .`, not editable), run outside the
# checkout: the console script's usage errors, INT8 of a model without plugin nodes, the plugin op
# descriptions the package carries, and (without ModelOpt) the one-line error naming the extra.
# usage: scripts/smoke_install.sh VENV
set -euo pipefail
venv=$(cd "$1" && pwd)
dk="$venv/bin/deploykit" py="$venv/bin/python"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "smoke: FAILED: $*" >&2; exit 1; }
expect() {  # expect CODE NEEDLE -- command...: exit CODE, NEEDLE in the output, no traceback
    local code=$1 needle=$2; shift 3
    set +e; out=$("$@" 2>&1); rc=$?; set -e
    [ "$rc" -eq "$code" ] || fail "$* exited $rc, not $code: $out"
    grep -qF -- "$needle" <<<"$out" || fail "$* did not say '$needle': $out"
    ! grep -q Traceback <<<"$out" || fail "$* printed a traceback: $out"
}

"$dk" --version | grep -q "^deploykit " || fail "--version"
expect 2 "did you mean --precision?" -- "$dk" convert x.yaml --precison int8
expect 2 "(did you mean 'int8'?)" -- "$dk" convert x.yaml --precision INT8
"$py" -c 'import deploykit; print(deploykit.__file__)' | grep -q site-packages \
    || fail "deploykit imports from somewhere else than the install"

"$py" - <<'PY'
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
rng = np.random.default_rng(0)
w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w")
b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
graph = helper.make_graph(nodes, "smoke", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [w, b])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 10  # what exporters write; a newer onnx's default IR can be ahead of ONNX Runtime's
onnx.save(model, "model.onnx")
import os
os.makedirs("calib")
for i in range(16):
    np.save(f"calib/s{i:02d}.npy", rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
PY

"$dk" quantize model.onnx --precision int8 --target onnxruntime --calib-data calib -o out -w store >/dev/null \
    || fail "INT8 quantize of a model without plugin nodes"
[ -f out/model.onnx ] && [ -f out/ranges.json ] || fail "quantize -o wrote no model and ranges"
"$dk" convert model.onnx --precision int8 --set quantize.target=onnxruntime --set calibration.files=calib \
    --set gate.iterations=20 -w store --report-dir rep > convert.txt || fail "convert --precision int8: $(cat convert.txt)"
grep -q "result: PASS (exit 0)" convert.txt || fail "convert did not end with its verdict: $(cat convert.txt)"
for f in run.json junit.xml summary.md parity.json gate.json; do [ -f "rep/$f" ] || fail "report-dir lacks $f"; done
"$dk" plugins list --json | grep -q '"BEVPoolV2"' || fail "the package does not carry the plugin op descriptions"

if ! "$py" -c "import modelopt" 2>/dev/null; then
    expect 3 "pip install 'deploykit[quant]'" -- "$dk" convert model.onnx --precision fp8 --set calibration.files=calib -w store
    expect 3 "pip install 'deploykit[quant]'" -- "$dk" convert model.onnx --precision int8 --set quantize.target=tensorrt \
        --set calibration.files=calib -w store
fi
echo "smoke: passed ($("$dk" --version), $("$py" -c 'import onnxruntime, onnx; print("onnxruntime", onnxruntime.__version__, "onnx", onnx.__version__)'))"
