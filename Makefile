# The front door: `make demo` runs the appliance with a demo job; `make test` runs the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo serve test lint proto bench clean

# Quiet, as a newcomer's first screen should be: one line, then pip's errors if any. setuptools
# says on every editable install that a folder named like a package takes precedence (true of
# every editable install): filtered.
$(STAMP): pyproject.toml
	@echo "installing the appliance and its tools into $(VENV) (a minute, once)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

WEB_ASSETS := appliance/server/web/static/vendor/.installed

# The dashboard's and /docs' browser assets, from the npm packages pinned in deploy/web.
$(WEB_ASSETS): deploy/web/package-lock.json deploy/web/build.sh
	@deploy/web/build.sh
	@touch $(WEB_ASSETS)

install: $(STAMP) $(WEB_ASSETS)

demo: $(STAMP) $(WEB_ASSETS)  ## start the appliance (SQLite + local processes) and run a demo job
	@$(BIN)/appliance demo

serve: $(STAMP) $(WEB_ASSETS)
	$(BIN)/appliance serve

test: $(STAMP) $(WEB_ASSETS)  ## unit, integration (SQLite and PostgreSQL) and end-to-end tests
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python proto/generate.py --check

proto: $(STAMP)  ## regenerate appliance/_proto/v1 from proto/
	$(BIN)/python proto/generate.py

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .appliance build *.egg-info deploy/web/node_modules appliance/server/web/static/vendor
