# Mimic2DM developer commands. `make demo` and `make test` each do all set-up first.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup test test-slow test-all demo bench lint clean docker-cpu docker-gpu

setup: $(STAMP)

# torch first, from the local CPU wheel: any other torch spec would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# `make test` stays under 15 minutes on 2 cores: tests marked `slow` (minutes-long learning and
# end-to-end runs) are left to `make test-slow`, which CI (.ci/run) runs after it.
test: setup
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

test-all: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

demo: setup
	$(BIN)/mimic2dm demo --out runs/demo

bench: setup
	mkdir -p runs/bench
	$(BIN)/mimic2dm bench engine --character humanoid --num-envs 64 --json runs/bench/engine_humanoid.json
	$(BIN)/mimic2dm bench engine --character dog --num-envs 64 --json runs/bench/engine_dog.json
	$(BIN)/mimic2dm bench train --json runs/bench/train.json
	$(BIN)/mimic2dm bench generate --json runs/bench/generate.json
	$(BIN)/mimic2dm bench pose --json runs/bench/pose.json

lint: setup
	$(BIN)/ruff check mimic2dm tasks generators tests
	$(BIN)/ruff format --check mimic2dm tasks generators tests
	$(BIN)/hadolint docker/cpu.Dockerfile docker/gpu.Dockerfile

# Images (docker/README.md); the build context is the repository root (.dockerignore).
DOCKER ?= docker
IMAGE  ?= mimic2dm

docker-cpu:
	$(DOCKER) build -f docker/cpu.Dockerfile -t $(IMAGE):cpu .

docker-gpu:
	$(DOCKER) build -f docker/gpu.Dockerfile -t $(IMAGE):gpu .

clean:
	rm -rf runs .pytest_cache
