import subprocess
import sys

import pytest

import synco


@pytest.mark.parametrize("name", synco.__all__)
def test_public_names_resolve(name):
    assert getattr(synco, name) is not None


def test_unknown_name_raises():
    with pytest.raises(AttributeError):
        synco.not_a_name  # noqa: B018


def test_import_does_not_pull_torch():
    code = "import synco, sys; synco.TaskPool; synco.build_report; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
