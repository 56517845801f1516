"""Imports an optional package that tests need (a peer library to compare against, an environment
package). Outside CI a missing package skips the test; under CI (CI set, as .ci/run's runner does) it
fails, so CI cannot pass by skipping."""

import importlib
import os
from types import ModuleType

import pytest


def import_peer(name: str) -> ModuleType:
    if os.environ.get("CI"):
        return importlib.import_module(name)
    return pytest.importorskip(name)
