"""tests/vllm_constraints.py: the constraints ``make serve-venv`` installs synco's test deps into .venv-vllm with."""

from __future__ import annotations

from vllm_constraints import canonical, missing


def test_only_packages_not_installed_are_pinned() -> None:
    lines = ["# pinned", "torch==2.13.0", "Transformers==5.30.0", "pytest==9.2.0", "latex2sympy2_extended==1.11.0",
             "peft==0.21.2  # LoRA", "", "PyYAML==6.0.4"]
    installed = {canonical(n) for n in ("torch", "transformers", "pyyaml", "latex2sympy2-extended")}
    assert missing(lines, installed) == ["pytest==9.2.0", "peft==0.21.2"]
    assert canonical("Latex2Sympy2_Extended") == canonical("latex2sympy2.extended") == "latex2sympy2-extended"
