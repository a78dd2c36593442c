# deploykit: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-all bench lint plugins gpu-check clean

# torch==2.13.0 first: pip then takes the local CPU build; an unpinned torch pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,quant,ray]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/deploykit convert examples/detector/deploykit.yaml --report-dir reports/detector

# The TensorRT plugin glue is compile-checked against NVIDIA's public headers (fetched from PyPI into build/).
TRT_HEADERS := build/kernel-lens/kernel_lens/include/tensorrt/NvInfer.h
$(TRT_HEADERS):
	PYTHON=$(PY) plugins/tools/fetch_trt_headers.sh >/dev/null || echo "warning: TensorRT headers not fetched; the plugin glue compile test will skip"

# The matrix's Ray tests (a real two-node cluster) and its slow tests: a second step, so the default
# suite stays fast and CI still runs them.
test: $(STAMP) $(TRT_HEADERS)
	$(PY) -m pytest
	$(PY) -m pytest -m "ray or slow" tests/matrix

test-all: $(STAMP) $(TRT_HEADERS)
	$(PY) -m pytest -m ""

# Each benchmark prints a table and writes bench/results/<name>.json; ratios are measured in one run.
BENCHES := pipeline surgery quantize plugins gate matrix
bench: $(STAMP)
	for b in $(BENCHES); do $(PY) bench/bench_$$b.py || exit 1; done

plugins:
	cmake -S plugins -B build/plugins -DTENSORRT_INCLUDE_DIR=$(abspath $(dir $(TRT_HEADERS))) && cmake --build build/plugins -j2

# On a machine with an NVIDIA GPU (and TensorRT for the engine rows): plugin kernels vs the CPU
# reference with timings, then real TensorRT engines built, checked against ONNX Runtime and timed.
gpu-check: $(STAMP) $(TRT_HEADERS)
	mkdir -p build/gpu-check
	plugins/tools/gpu_check.sh build/gpu-check/plugins.json; \
	$(PY) scripts/gpu_check.py --json build/gpu-check/tensorrt.json

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench

clean:
	rm -rf .deploykit reports build bench/results
