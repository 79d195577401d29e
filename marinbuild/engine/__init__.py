"""marinbuild's engine: versioned steps -> plan -> run -> records. The CLI session and the Marin facade call it.
``Engine`` is the public API; ``planning`` gives each needed step's state, ``execute`` runs the step jobs, ``commit``
and ``infos`` write Marin's records. Importing this package loads no storage, backend or execution module:
``Engine.run`` loads what it needs."""

from marinbuild.engine.engine import Engine
from marinbuild.engine.errors import PreviousStepFailedError, PreviousTaskFailedError, StepFailedError
from marinbuild.engine.infos import ExecutorInfo, ExecutorStepInfo

__all__ = [
    "Engine",
    "ExecutorInfo",
    "ExecutorStepInfo",
    "PreviousStepFailedError",
    "PreviousTaskFailedError",
    "StepFailedError",
]
