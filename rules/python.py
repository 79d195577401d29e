"""Python rule types: plain functions as steps, and Marin experiment scripts as targets.

    load("@marinbuild//rules:python.py", "executor_script", "python_step")

    executor_script(name = "hello_world", script = "hello_world.py")
    python_step(name = "count", fn = "mypkg.stats:count_words", config = {"min_len": 3},
                deps = [":hello_world"], srcs = glob(["data/*.txt"]))

``executor_script`` imports the script (not as ``__main__``, so its ``executor_main`` does
not run) and makes its ``ExecutorStep``s the target's steps: by default the ones no other
step of the script depends on, or those named in ``steps`` (variable names). Their output
paths are exactly what running the script gives.

``python_step`` calls ``fn(config)``: ``config`` is a dict of the ``config`` attribute plus
``output_path``, ``deps`` (the dependencies' output paths, in order) and ``srcs`` (paths of
the source files). ``fn`` and ``config`` are versioned; so are the sources' contents.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from marinbuild.analysis import AnalysisContext, RuleContext, leaf_steps, load_script_steps
from marinbuild.load import attr, rule


def _import_function(spec: str, workspace: Path) -> Any:
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ValueError(f"fn must look like 'package.module:function', got {spec!r}")
    if str(workspace) not in sys.path:
        sys.path.insert(0, str(workspace))
    return getattr(importlib.import_module(module_name), function_name)


def _python_step_impl(ctx: RuleContext) -> Any:
    fn = _import_function(ctx.attr.fn, ctx.workspace)
    config = dict(ctx.attr.config)
    config.update(output_path=ctx.output_path, deps=list(ctx.attr.deps), srcs=list(ctx.attr.srcs))
    return fn(config)


python_step = rule(
    implementation=_python_step_impl,
    attrs={
        "fn": attr.string(mandatory=True, doc="'package.module:function', importable from the workspace root"),
        "config": attr.dict(doc="keyword configuration passed to fn; versioned"),
        "deps": attr.label_list(doc="targets whose output paths fn reads"),
        "srcs": attr.source_files(doc="workspace files fn reads; their contents are versioned"),
        "resources": attr.dict(versioned=False, doc="what the step asks the backend for (cpu, memory, tpu)"),
    },
    doc="A plain Python function as a build step.",
)


def _executor_script_analyze(actx: AnalysisContext) -> list[Any]:
    script = actx.package_dir / actx.attr.script
    if not script.is_file():
        raise actx.error(f"executor_script: no script {actx.attr.script!r} in {actx.package_dir}")
    try:
        found = load_script_steps(script, actx.workspace.root)
    except Exception as exc:
        raise actx.error(f"executor_script: importing {actx.attr.script} failed: {type(exc).__name__}: {exc}") from exc
    wanted = list(actx.attr.steps or [])
    if not wanted:
        steps = leaf_steps(found)
        if not steps:
            raise actx.error(f"executor_script: {actx.attr.script} defines no ExecutorStep at module level")
        return steps
    missing = [w for w in wanted if w not in found]
    if missing:
        known = ", ".join(sorted(found)) or "none"
        raise actx.error(f"executor_script: {actx.attr.script} has no step variable(s) {missing}; it has: {known}")
    return [found[w] for w in wanted]


executor_script = rule(
    attrs={
        "script": attr.string(mandatory=True, doc="the experiment script, relative to the package"),
        "steps": attr.list(of=str, doc="module-level step variables to build (default: the final ones)"),
    },
    analyze=_executor_script_analyze,
    doc="The ExecutorSteps of a Marin-style experiment script, as one target.",
)
