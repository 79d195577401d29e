"""marinbuild: a content-addressed build system for machine-learning pipelines.

The names of Marin's executor API import from here as from ``marinbuild.executor``, on first use (PEP 562): every
submodule import runs this file first, so it imports none of the package's own (nor any storage, execution or ML
library)."""

import importlib
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The facade's names (``executor.__all__``), imported from it once (``from marinbuild import executor`` aside)."""
    executor = importlib.import_module("marinbuild.executor")

    if name == "__all__":
        return list(executor.__all__)
    if name in executor.__all__:
        value = getattr(executor, name)
        globals()[name] = value  # later lookups find it without this function
        return value
    raise AttributeError(f"module 'marinbuild' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *importlib.import_module("marinbuild.executor").__all__})
