"""What is recorded about a step and a run, in Marin's schema (its dataclasses): ``.executor_info``, as the exact
text Marin writes, and the run info's head (worker, git commit read from files, caller script, date, user)."""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marinbuild.core.jsonenc import dumps_indented

if TYPE_CHECKING:
    from marinbuild.core.placeholders import ExecutorFunction, ExecutorStep
    from marinbuild.core.versions import VersionTable


@dataclass(frozen=True, slots=True)
class ExecutorStepInfo:
    """What is recorded about a step in ``.executor_info``; slots: an engine holds one per step for the whole run."""

    name: str
    fn_name: str
    config: Any
    description: str | None
    override_output_path: str | None
    version: dict[str, Any]
    dependencies: list[str]
    output_path: str


@dataclass(frozen=True)
class ExecutorInfo:
    """What is recorded about a run in ``<executor_info_base_path>/<script>-<hash>.json``."""

    worker_id: str
    git_commit: str | None
    caller_path: str
    created_date: str
    user: str | None
    prefix: str
    description: str | None
    steps: list[ExecutorStepInfo]


def get_fn_name(fn: ExecutorFunction, short: bool = False) -> str:
    """A name for ``fn`` that is the same in every run: ``module.qualname`` (Marin printed a memory address)."""
    if fn is None:
        return "None"
    inner = getattr(fn, "fn", None)  # Marin's RemoteCallable and similar wrappers
    if inner is not None and callable(inner) and not hasattr(fn, "__qualname__"):
        fn = inner
    target = fn.func if hasattr(fn, "func") and hasattr(fn, "args") else fn  # functools.partial
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    if short:
        return qualname.rsplit(".", 1)[-1]
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{qualname}"


def git_commit() -> str | None:
    """HEAD's commit of the current directory's repository, read from ``.git`` (a worktree's too), no subprocess."""
    try:
        git = os.path.join(os.getcwd(), ".git")  # (a current directory removed meanwhile: no commit)
        if os.path.isfile(git):
            with open(git) as f:
                pointer = f.read().strip()
            if not pointer.startswith("gitdir: "):
                return None
            git = os.path.join(os.getcwd(), pointer[len("gitdir: ") :])
        common = git
        if os.path.exists(os.path.join(git, "commondir")):  # a worktree's refs live in the main repository
            with open(os.path.join(git, "commondir")) as f:
                common = os.path.join(git, f.read().strip())
        with open(os.path.join(git, "HEAD")) as f:
            head = f.read().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        for folder in (git, common):
            ref_file = os.path.join(folder, ref)
            if os.path.exists(ref_file):
                with open(ref_file) as f:
                    return f.read().strip()
        with open(os.path.join(common, "packed-refs")) as f:
            for line in f:
                if line.strip().endswith(" " + ref):
                    return line.split()[0]
    except OSError:
        return None
    return None


def caller_path() -> str:
    """The outermost real file on the stack: the experiment script (as Marin records it)."""
    frame: Any = sys._getframe()
    outermost = sys.argv[0] if sys.argv and sys.argv[0] else "<unknown>"
    while frame is not None:
        if not frame.f_code.co_filename.startswith("<"):
            outermost = frame.f_code.co_filename
        frame = frame.f_back
    return outermost


def user() -> str | None:
    try:
        import getpass

        return getpass.getuser()
    except Exception:
        return None


def step_info(table: VersionTable, step: ExecutorStep) -> ExecutorStepInfo:
    """``step``'s record (a step the table has versioned)."""
    output_paths = table.output_paths
    return ExecutorStepInfo(
        name=step.name,
        fn_name=get_fn_name(step.fn),
        config=table.configs[step],
        description=step.description,
        override_output_path=step.override_output_path,
        version=table.versions[step],
        dependencies=[output_paths[dep] for dep in table.dependencies[step]],
        output_path=output_paths[step],
    )


def step_info_text(table: VersionTable, step: ExecutorStep) -> str:
    """The ``.executor_info`` Marin writes: ``json.dumps(info, indent=2)`` of the step info's fields in order, without
    description. Not kept: a step deep in a wide graph nests its ancestors' versions."""
    info = step_info(table, step)
    fields = ("name", "fn_name", "config", "override_output_path", "version", "dependencies", "output_path")
    return dumps_indented({f: getattr(info, f) for f in fields})  # one encoder for the whole text


def run_info(
    table: VersionTable, *, worker_id: str, prefix: str, description: str | None
) -> tuple[list[ExecutorStepInfo], ExecutorInfo]:
    """Every versioned step's record and the run's record, taken now (Marin's ``get_infos``)."""
    step_infos = [step_info(table, step) for step in table.steps]
    return step_infos, ExecutorInfo(
        worker_id=worker_id,
        git_commit=git_commit(),
        caller_path=caller_path(),
        created_date=datetime.datetime.now().isoformat(),  # local time, as Marin records it
        user=user(),
        prefix=prefix,
        description=description,
        steps=step_infos,
    )
