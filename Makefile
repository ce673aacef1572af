# duhl-lab: two commands set everything up on a fresh machine:
#   make experiment    # the default DuHL comparison (creates .venv on first use)
#   make test          # the test suite (without the gpu and slow markers)
# Run `make help` for the rest.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The install is redone only when pyproject.toml changes (or the venv is new).
STAMP  := $(VENV)/.stamp-install-$(shell cksum < pyproject.toml | cut -d' ' -f1)
ARGS   ?=
PORT   ?= 5000
MLFLOW_DB ?= mlflow.db

.DEFAULT_GOAL := help
.PHONY: help install install-gpu experiment reproduce out-of-core out-of-core-big out-of-core-sparse-big sweep ui test test-ui test-multihost test-gpu docs bench bench-solvers bench-gpu bench-gpu-disk bench-gpu-reads bench-data bench-disk-reads

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'
	@echo '  ARGS="..." passes Hydra overrides, e.g. make experiment ARGS="experiment=duhl_svm"'

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -e ".[dev]"
	rm -f $(VENV)/.stamp-install-* && touch $@

install: $(STAMP)  ## create .venv and install the project (once per pyproject.toml)

# PORT: the links printed after a run point at `make ui PORT=...`.
experiment: $(STAMP)  ## run the default experiment (ARGS="key=value ..." for overrides)
	PORT=$(PORT) $(PY) -m pipelines.experiment $(ARGS)

reproduce: $(STAMP)  ## every seed preset, then the papers' claims beside what this machine measured (~3 min)
	PORT=$(PORT) $(PY) -m pipelines.experiment experiment=reproduce $(ARGS)

out-of-core: $(STAMP)  ## 4 GB on disk, a quarter of it in RAM: DuHL vs streaming, random, dask-glm, scikit-learn (~15-20 min)
	$(PY) -c "import dask_glm" 2>/dev/null || $(PY) -m pip install -e ".[out-of-core]"
	PORT=$(PORT) $(PY) -m pipelines.experiment experiment=out_of_core $(ARGS)

# 300,000 x 12,500 float64 = 30 GB: more than this machine's 24 GB of RAM; 7.5 GB of RAM for data.
out-of-core-big: $(STAMP)  ## the same on 30 GB (more than RAM), DuHL vs streaming only (~15 min with making the data, 31 GB of disk)
	PORT=$(PORT) $(PY) -m pipelines.experiment experiment=out_of_core data.n_samples=300000 experiment.max_time=300 \
		experiment.name=out_of_core_30GB "~experiment.arms.peer_daskml" "~experiment.arms.peer_sklearn" \
		"~experiment.arms.random" "experiment.baselines=[sequential]" $(ARGS)

# 180 million click-like rows (synthetic_criteo_8gb's layout): a 28.8 GB sparse store, more than this
# machine's 25 GB of RAM, and more than 2^31 non-zeros; 19 GB of RAM for everything that grows with the
# data (the solver's state alone is 14.5 GB, the block 1.4 GB). A capacity run: each arm stops at the
# preset's max_time, far from its target.
out-of-core-sparse-big: $(STAMP)  ## the sparse preset on more rows than RAM holds: DuHL vs sequential blocks from disk (~45 min with making the data, 30 GB of disk)
	PORT=$(PORT) $(PY) -m pipelines.experiment experiment=out_of_core_sparse data.n_samples=180000000 device.host_budget=19GB \
		experiment.name=out_of_core_sparse_29GB "~experiment.arms.peer_vw" "~experiment.arms.random" \
		"experiment.baselines=[sequential]" $(ARGS)

sweep: $(STAMP)  ## an example multirun: device budgets x models, one MLflow sweep run
	PORT=$(PORT) $(PY) -m pipelines.experiment -m device.memory_budget=0.1,0.25,0.5 model=lasso,svm $(ARGS)

ui: $(STAMP)  ## the MLflow UI on http://127.0.0.1:$(PORT) over ./mlflow.db (PORT=...)
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(VENV)/bin/mlflow ui \
	  --backend-store-uri sqlite:///$(MLFLOW_DB) --host 127.0.0.1 --port $(PORT) --workers 1

JOBS  ?= 2
test: $(STAMP)  ## the tests without the gpu, slow, multihost and ui markers, a module per process (JOBS=2)
	$(PY) -m pytest -m "not gpu and not slow and not multihost and not ui" -n $(JOBS) --dist loadfile $(ARGS)

# NO_MKDOCS_2_WARNING: silences Material's notice of its end of life (docs/explanation/documentation.md)
docs: $(STAMP)  ## build the documentation site into site/ (offline; a warning or a broken link fails it); open site/index.html
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict $(ARGS)

test-multihost: $(STAMP)  ## scheduler and workers on separate hosts (network namespaces; as root; ~3.5 min)
	$(PY) -m pytest -m multihost -rs tests/multihost $(ARGS)

UI_STAMP := $(VENV)/.stamp-ui-$(shell cksum < pyproject.toml | cut -d' ' -f1)
$(UI_STAMP): $(STAMP)
	$(PY) -m pip install -e ".[dev,ui]"
	rm -f $(VENV)/.stamp-ui-* && touch $@

test-ui: $(UI_STAMP)  ## the MLflow UI in a headless Chromium (apt-get installs chromium; screenshots: bench-results/ui/)
	@command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; }
	$(PY) -m pytest -m ui -rs tests/pipelines/test_ui_browser.py $(ARGS)
	@echo "screenshots: bench-results/ui/"

bench: $(STAMP)  ## ours vs peers: time to rel_gap 1e-4/1e-6 (QUICK=1: ~3 min; pip install -e .[peers] first)
	nice -n 5 $(PY) -m benchmarks.peers $(if $(QUICK),--quick) $(ARGS)

install-gpu: $(STAMP)  ## add the CUDA 13 extra (CuPy, numba-cuda, dask-cuda, RMM) on a GPU machine
	$(PY) -m pip install -e ".[gpu,dev]"

test-gpu: install-gpu  ## the tests that need a CUDA GPU (marker gpu)
	NUMBA_ENABLE_CUDASIM=0 $(PY) -m pytest -m gpu -rs $(ARGS)

bench-solvers: $(STAMP)  ## our epoch vs scikit-learn's; DuHL vs streaming (QUICK=1: small)
	$(PY) -m benchmarks.solvers $(if $(QUICK),--quick) $(ARGS)

bench-data: $(STAMP)  ## start-up of shipping the data to the workers vs memory-mapping it (presets)
	$(PY) -m benchmarks.data $(ARGS)

bench-gpu: install-gpu  ## GPU epochs vs the HBM floor, swap GB/s, DuHL vs sequential (needs a GPU)
	$(PY) -m benchmarks.gpu $(if $(QUICK),--quick) $(ARGS)

bench-disk-reads: $(STAMP)  ## the disk tier's scattered reads (Lasso columns, SVM rows) as a share of the disk's cold sequential rate
	nice -n 5 $(PY) -m benchmarks.disk_reads $(ARGS)

bench-gpu-disk: install-gpu  ## disk -> RAM -> GPU: a 4 GB Lasso on disk, gap vs sequential vs the CPU's disk tier (needs a GPU)
	$(PY) -m benchmarks.gpu_disk $(ARGS)

bench-gpu-reads: install-gpu  ## disk -> GPU reads: ours (O_DIRECT, buffered) vs kvikio where installed (needs a GPU)
	$(PY) -m benchmarks.gpu_reads $(ARGS)
