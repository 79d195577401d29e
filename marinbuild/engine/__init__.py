"""marinbuild's engine: versioned steps -> plan -> run -> records. The CLI session and the Marin facade call it.

Modules, one job each:
- ``engine``: ``Engine``, the public API (versions, plan, run, records of the last run);
- ``planning``: targets and each needed step's state; what refuses a run before it starts;
- ``execute``: the step jobs, the backend, the resource check, the schedule, failures -> ``StepFailedError``;
- ``backend_choice``: which backend a run uses; resource checks;
- ``calls``: what a step's job calls;
- ``commit``: the run info and the ``.executor_info`` of steps not run;
- ``infos``: Marin's records of a step and a run, and the ``.executor_info`` text;
- ``errors``: the errors a run raises (Marin's names).

Importing this package loads no storage, backend or execution module: ``run`` loads what it needs.
"""

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
