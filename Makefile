# deploykit: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-all bench lint plugins gpu-check clean constraints

# The venv's own pip (23.x) crashes in the resolver on these dependencies: upgrade it first.
# torch==2.13.0 next: pip then takes the local CPU build; an unpinned torch pulls a multi-GB CUDA build.
# constraints.txt pins every package to the versions the suite passed with (a reproducible green run).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,quant]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/deploykit convert examples/detector/deploykit.yaml --report-dir reports/detector

# The TensorRT plugin glue is compile-checked against NVIDIA's public headers (fetched from PyPI into build/).
TRT_HEADERS := build/kernel-lens/kernel_lens/include/tensorrt/NvInfer.h
$(TRT_HEADERS):
	PYTHON=$(PY) plugins/tools/fetch_trt_headers.sh >/dev/null || echo "warning: TensorRT headers not fetched; the plugin glue compile test will skip"

test: $(STAMP) $(TRT_HEADERS)
	$(PY) -m pytest

test-all: $(STAMP) $(TRT_HEADERS)
	$(PY) -m pytest -m ""

# Each benchmark prints a table and writes bench/results/<name>.json; ratios are measured in one run.
BENCHES := pipeline surgery quantize plugins gate
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

# After a dependency change passes the suite: pin what the venv holds (less deploykit itself).
constraints: $(STAMP)
	{ head -2 constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -vi '^deploykit=='; } > constraints.new
	mv constraints.new constraints.txt

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench

clean:
	rm -rf .deploykit reports build bench/results
