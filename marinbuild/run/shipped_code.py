"""Modules whose code a Ray task must receive by value: they cannot be imported by name on a worker.

cloudpickle pickles by value only ``__main__`` and modules registered with ``register_pickle_by_value``. A worker can
import neither a Marin script the CLI loads for ``executor_script`` (a made-up module name) nor the modules it imports
by bare name from its folder, so their code goes by value; the workspace's packages stay by reference. The Ray backend
registers the recorded modules before pickling a step (``register_with_ray``)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Process-wide on purpose: the modules recorded and those registered with cloudpickle, whose by-value registry
# is itself per process.
_NAMES: set[str] = set()
_REGISTERED: set[str] = set()
_LOCK = threading.Lock()


def ship_by_value(module_name: str) -> None:
    """Send the code of module ``module_name`` (in ``sys.modules``) to Ray tasks by value."""
    with _LOCK:
        _NAMES.add(module_name)


def ship_imported_through(folder: str | Path, names: Iterable[str] | None = None) -> None:
    """Ship by value each module (of ``names``, default all imported) imported through the ``sys.path`` entry
    ``folder`` (spelt as there): its file is its dotted name below ``folder`` (``folder/helpers.py``)."""
    base = str(folder).rstrip(os.sep) + os.sep
    for name in list(sys.modules if names is None else names):
        module = sys.modules.get(name)
        if module is not None and _imported_through(module, base):
            ship_by_value(name)


def _imported_through(module: Any, base: str) -> bool:
    namespace = getattr(module, "__dict__", {})  # (not getattr: a lazy module would import on it)
    file, name = namespace.get("__file__"), namespace.get("__name__")
    if not isinstance(file, str) or not isinstance(name, str) or not file.startswith(base):
        return False
    below = os.path.join(*name.split("."))
    return file[len(base) :] in (below + ".py", os.path.join(below, "__init__.py"))


def ship_main_siblings(workspace: str | os.PathLike[str] | None) -> None:
    """For a script run as ``__main__`` (``python script.py``): ship by value the modules it imported by bare name
    from its own folder, unless that folder is ``workspace`` (whose modules a worker imports by name)."""
    file = getattr(sys.modules.get("__main__"), "__file__", None)
    if not file:
        return
    folder = os.path.dirname(os.path.abspath(file))
    if workspace is not None and os.path.realpath(folder) == os.path.realpath(workspace):
        return
    for spelling in dict.fromkeys([folder, os.path.realpath(folder)]):  # (Python resolves links in sys.path[0])
        ship_imported_through(spelling)


def register_with_ray() -> None:
    """Register every recorded module with Ray's cloudpickle (each once); call before pickling a step."""
    with _LOCK:
        todo = [name for name in _NAMES - _REGISTERED if name in sys.modules]
        if not todo:
            return
        from ray import cloudpickle

        for name in todo:
            cloudpickle.register_pickle_by_value(sys.modules[name])
            _REGISTERED.add(name)
