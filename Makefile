# deploykit: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
BASE   := $(VENV)/.installed-base
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-e2e test-hostile test-all fuzz bench lint plugins gpu-check clean constraints

# The venv's own pip (23.x) crashes in the resolver on these dependencies: upgrade it first.
# torch==2.13.0 next: pip then takes the local CPU build; an unpinned torch pulls a multi-GB CUDA build.
# constraints.txt pins every package to the versions the suite passed with (a reproducible green run).
# The base install is what the FP32 CPU demo needs (no extras); the full one adds the test tools,
# ModelOpt (quant) and Ray on top of it.
$(BASE): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e .
	touch $(BASE)

$(STAMP): $(BASE)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,quant,ray]'
	touch $(STAMP)

install: $(STAMP)

demo: $(BASE)
	$(VENV)/bin/deploykit convert examples/detector/deploykit.yaml --report-dir reports/detector

# The TensorRT plugin glue is compile-checked against NVIDIA's public headers (fetched from PyPI into build/).
TRT_HEADERS := build/kernel-lens/kernel_lens/include/tensorrt/NvInfer.h
$(TRT_HEADERS):
	PYTHON=$(PY) plugins/tools/fetch_trt_headers.sh >/dev/null || echo "warning: TensorRT headers not fetched; the plugin glue compile test will skip"

# The default suite on JOBS workers (pytest-xdist; each worker has its own tmp folders and session
# fixtures); the tests that need the whole machine (marked serial: concurrent runs and SIGKILLs timed
# against each other) after it, alone; then the matrix's Ray tests (a real two-node cluster) and its
# slow tests, so the default suite stays fast and CI still runs them.
JOBS ?= 2
test: $(STAMP) $(TRT_HEADERS)
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -m "not slow and not ray and not serial"
	$(PY) -m pytest -m "serial and not slow and not ray"
	$(PY) -m pytest -m "ray or slow" tests/matrix

# The heavy end-to-end runs (marked e2e, also slow): CI runs them after `make test`.
test-e2e: $(STAMP) $(TRT_HEADERS)
	$(PY) -m pytest -n $(JOBS) -m "e2e and not ray"

# The hostile cases and fuzz tests beyond the default suite's bounded share (marked slow): CI runs them.
test-hostile: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -m "slow and not ray and not e2e" tests/hostile tests/fuzz

test-all: $(STAMP) $(TRT_HEADERS)
	$(PY) -m pytest -m ""

# The fuzzers beyond the default suite's bounded run: random examples (FUZZ_EXAMPLES per test), and
# the hostile cases marked slow; failing examples are kept in build/hypothesis and replayed first.
FUZZ_EXAMPLES ?= 2000
fuzz: $(STAMP)
	DEPLOYKIT_FUZZ_PROFILE=fuzz DEPLOYKIT_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -p no:cacheprovider -m "" tests/fuzz tests/hostile

# Each benchmark prints a table and writes bench/results/<name>.json; ratios are measured in one run.
BENCHES := pipeline surgery quantize plugins gate profile matrix
bench: $(STAMP)
	for b in $(BENCHES); do $(PY) bench/bench_$$b.py || exit 1; done

# The TensorRT glue is compiled against the headers of the installed TensorRT's major (TRT_INCLUDE=DIR to
# choose); without TensorRT, against the fetched public headers, as a compile check.
TRT_INCLUDE ?=
plugins: $(STAMP) $(TRT_HEADERS)
	$(VENV)/bin/deploykit plugins build $(if $(TRT_INCLUDE),--tensorrt-include $(TRT_INCLUDE))

# On a machine with an NVIDIA GPU, with or without TensorRT, in under 8 minutes, on that machine's own
# Python (no venv, no pip, no network: GPU_PYTHON=... picks another): plugin kernels and the plugin glue's
# enqueue path vs the CPU reference (bandwidth vs the HBM floor), compute-sanitizer, the TensorRT session
# on a stand-in engine; with TensorRT, the lint corpus through the real parser and engines vs ONNX Runtime.
# One report: build/gpu-check/{gpu_check.json,summary.md}. TRT_INCLUDE=DIR: headers for the glue.
GPU_PYTHON ?= python3
gpu-check:
	$(GPU_PYTHON) scripts/gpu_check.py --out build/gpu-check $(if $(TRT_INCLUDE),--tensorrt-include $(TRT_INCLUDE))

# After a dependency change passes the suite: pin what the venv holds (less deploykit itself).
constraints: $(STAMP)
	{ head -2 constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -vi '^deploykit=='; } > constraints.new
	mv constraints.new constraints.txt

# ruff's rules and its formatter, at the 120-column width in pyproject.toml (CI runs this).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts examples
	$(VENV)/bin/ruff format --check src tests bench scripts examples

clean:
	rm -rf .deploykit reports build bench/results
