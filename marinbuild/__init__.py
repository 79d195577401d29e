"""marinbuild: a content-addressed build system for machine-learning pipelines.

The names of Marin's executor API import from here as from ``marinbuild.executor``.
Importing the package loads no storage, execution or ML library.
"""

from marinbuild.executor import *  # noqa: F403
from marinbuild.executor import __all__ as _executor_all

__all__ = list(_executor_all)
__version__ = "0.1.0"
