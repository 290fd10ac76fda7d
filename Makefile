# The front door: `make demo` runs the appliance with a demo job; `make test` runs the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: install demo serve test test-unit lint proto bench clean

# Quiet, as a newcomer's first screen should be: one line, then pip's errors if any. setuptools
# says on every editable install that a folder named like a package takes precedence (true of
# every editable install): filtered.
$(RUN_STAMP): pyproject.toml
	@echo "installing the appliance into $(VENV) (a minute, once)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install -q -e .
	@touch $(RUN_STAMP)

# The tools for tests, lint and benchmarks (pytest, mypy, ruff, selenium, grpcio-tools, ...):
# `make demo` and `make serve` do without them.
$(STAMP): $(RUN_STAMP)
	@echo "installing the test and lint tools into $(VENV) (a minute, once)"
	@PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# axe-core, the browser tests' accessibility checker (a devDependency in deploy/web). The
# dashboard's own assets are committed (appliance/server/web/static/vendor): no Node.js is needed
# to install or run the appliance. Without npm the accessibility test says it cannot run.
TEST_ASSETS := deploy/web/node_modules/.installed

$(TEST_ASSETS): deploy/web/package-lock.json deploy/web/build.sh
	@deploy/web/build.sh --deps && touch $(TEST_ASSETS) || \
	  echo "make: no axe-core for the browser tests (see above); they will say so"

install: $(STAMP)

# Ports: `make demo GRPC_PORT=50052 HTTP_PORT=8081` (0 = any free port).
PORTS = $(if $(GRPC_PORT),--grpc-port $(GRPC_PORT)) $(if $(HTTP_PORT),--http-port $(HTTP_PORT))

demo: $(RUN_STAMP)  ## start the appliance (SQLite + local processes) and run a demo job
	@$(BIN)/appliance demo $(PORTS)

serve: $(RUN_STAMP)
	$(BIN)/appliance serve $(PORTS)

# Two lanes side by side (tests/tiers.py): the real-node tier beside everything else. Each run
# prints its slowest tests (--durations), so that CI's log says where its time goes (CI must
# stay under 45 minutes on a fresh 2-core machine). `make test ARGS="-x -k name"` passes
# arguments to every run.
test: $(STAMP) $(TEST_ASSETS)  ## unit, integration (SQLite and PostgreSQL) and end-to-end tests
	$(BIN)/python -m tests.tiers $(ARGS)

test-unit: $(STAMP)  ## the unit tier alone: no servers, about a minute (make test runs it too)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python proto/generate.py --check
	deploy/web/build.sh --check

proto: $(STAMP)  ## regenerate appliance/_proto/v1 from proto/
	$(BIN)/python proto/generate.py

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .appliance build *.egg-info deploy/web/node_modules
