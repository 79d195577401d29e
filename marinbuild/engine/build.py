"""One build, whichever face asked for it: ``build(engine, steps, ...)`` runs the steps and returns what happened.

The CLI prints the result; ``executor_main`` raises its failure, as Marin does. A failed step is part of the result;
what refuses a build before any step runs is raised."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from marinbuild.engine.errors import PreviousTaskFailedError, StepFailedError

if TYPE_CHECKING:
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.engine.engine import Engine
    from marinbuild.store.lease import LeaseRecord


class PlanRow(NamedTuple):
    """A planned step: state, output path, another worker's lease (or None), and whether this build runs it."""

    step: ExecutorStep
    state: str
    output_path: str
    lease: LeaseRecord | None
    will_run: bool


@dataclass
class BuildResult:
    """What a build did: ``requested``, (name, output path) of what was asked for (a label, or a step's name); ``plan``,
    None if the run ended before planning; ``failure``, the step failure that ended it; ``dry_run_problems``, why the
    local backend could not run some steps of a dry run; ``code_changed``, built outputs whose code (not part of their
    key) changed since, with the files; ``succeeded``, the steps run successfully, in the order they finished."""

    engine: Engine
    requested: list[tuple[str, str]]
    plan: list[PlanRow] | None = None
    failure: Exception | None = None
    dry_run_problems: list[str] = field(default_factory=list)
    code_changed: dict[ExecutorStep, list[str]] = field(default_factory=dict)
    succeeded: list[ExecutorStep] = field(default_factory=list)

    @property
    def would_run(self) -> list[str]:
        """Names of the planned steps that run (or would, in a dry run)."""
        return [row.step.name for row in self.plan or () if row.will_run]


def build(
    engine: Engine,
    steps: Sequence[ExecutorStep],
    *,
    requested: list[tuple[str, str]] | None = None,
    dry_run: bool = False,
    run_only: list[str] | None = None,
    force_run_failed: bool = True,
    max_concurrent: int | None = None,
    rebuild: Sequence[ExecutorStep] = (),
) -> BuildResult:
    """Run ``steps`` on ``engine`` into a ``BuildResult``; ``requested``: what the caller asked for (default: steps)."""
    result = BuildResult(engine, [])
    try:
        engine.run(
            steps,
            dry_run=dry_run,
            run_only=run_only,
            force_run_failed=force_run_failed,
            max_concurrent=max_concurrent,
            rebuild=list(rebuild),
        )
    except (StepFailedError, PreviousTaskFailedError) as exc:
        result.failure = exc
    finally:
        result.succeeded = list(engine.succeeded)
    result.requested = (
        requested if requested is not None else [(s.name, engine.output_paths[engine.canonicalize(s)]) for s in steps]
    )
    result.dry_run_problems = list(engine.dry_run_problems)
    result.code_changed = dict(engine.code_changed)
    if engine.plan is not None:
        result.plan = [
            PlanRow(step, p.state, engine.output_paths[step], p.lease, p.will_run)
            for step, p in engine.plan.steps.items()
        ]
    return result
