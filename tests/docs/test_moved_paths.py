"""Old module paths keep importing for one release (``streams/_moved.py``): each is the very
module at its new home, with one DeprecationWarning that names the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from streams._moved import MOVED
from tests.helpers import ROOT, python_env


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_module_at_its_new_home(old: str) -> None:
    assert importlib.import_module(MOVED[old]) is not None  # every new home exists
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        sys.modules.pop(old, None)
        moved = importlib.import_module(old)
    home = importlib.import_module(MOVED[old])
    if any(other.startswith(f"{old}.") for other in MOVED) and not hasattr(home, "__path__"):
        assert moved.__path__ == [] and all(getattr(moved, n) is getattr(home, n) for n in dir(home) if n[0] != "_")
    else:
        assert moved is home


def test_a_module_inside_a_moved_package_moves_with_it_and_loads_once() -> None:
    # streams.backends was a package: its modules now live in streams.runtime.backends.
    script = (
        "import warnings, sys; warnings.simplefilter('ignore')\n"
        "from streams.backends.embedded import EmbeddedBackend\n"
        "import streams.runtime.backends as home\n"
        "print(EmbeddedBackend is home.EmbeddedBackend, EmbeddedBackend.__module__)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=python_env(), capture_output=True, text=True)
    assert done.stdout.split() == ["True", "streams.runtime.backends"], done.stderr


def test_a_path_that_never_existed_is_still_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("streams.adapters.nothing_here")
