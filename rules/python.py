"""Python rule types: plain functions as steps, and Marin experiment scripts as targets.

``executor_script`` imports the script (not as ``__main__``, so its ``executor_main`` does not run); its steps are those
no other step of the script depends on, or those named in ``steps``, with the output paths running the script gives.
``python_step`` calls ``fn(config)``, the config plus ``output_path``, ``deps`` and ``srcs``; ``fn``, ``config``, the
sources' contents and ``fn``'s module file (unless ``code_in_key = False``) are versioned. ``fn`` is checked at
analysis: its module must be found from the workspace root and define it at top level."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from marinbuild.analysis.analyze import AnalysisContext, RuleContext, leaf_steps, load_script_steps
from marinbuild.load import attr, rule

_FN_RESOLUTION = (
    "fn is 'module:function', the module named by its import path from the workspace root "
    "(pipe/steps.py is 'pipe.steps'), not relative to the BUILD file's folder"
)


def _module_file(module_name: str, workspace: Path, workspace_only: bool = False) -> Path | None:
    """``module_name``'s file as ``fn`` resolves it: below the workspace root, else (unless ``workspace_only``)
    installed; None if neither. Nothing is imported (another workspace's module is not taken for it)."""
    base = workspace.joinpath(*module_name.split("."))
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    if workspace_only:
        return None
    if (workspace / module_name.split(".")[0]).exists():
        return None  # the top package is in the workspace, so the module would be too
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return Path(spec.origin) if spec.origin not in (None, "built-in", "frozen") else Path(".")


@functools.lru_cache(maxsize=4096)
def _top_level_names(path: Path, mtime_ns: int, size: int) -> frozenset[str] | None:
    """Names a file defines or imports at top level; None if not statically clear; cached per file version."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None  # the import at run time reports it
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.If | ast.Try | ast.With):
            return None
    return frozenset(names)


def _defines(module_file: Path, name: str) -> bool:
    """Whether the Python file defines or imports ``name`` at top level (True when it cannot tell)."""
    if module_file.suffix != ".py":
        return True
    try:
        st = module_file.stat()
    except OSError:
        return True
    names = _top_level_names(module_file, st.st_mtime_ns, st.st_size)
    return names is None or name in names


def _python_step_analyze(actx: AnalysisContext) -> Any:
    spec = actx.attr_value("fn")
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise actx.error(f"python_step: fn must look like 'package.module:function', got {spec!r} ({_FN_RESOLUTION})")
    root = actx.workspace.root
    found = actx.once(
        ("python_step fn", module_name, function_name), lambda: _find_fn(actx, module_name, function_name, True)
    )
    if found is None:  # not a file of the workspace: found per target, as the import system answers now
        found = _find_fn(actx, module_name, function_name, False)
    module_file, defined, in_workspace = found
    if module_file is None:
        hint = ""
        package = actx.target.label.package
        local = (actx.package_dir / module_name.replace(".", "/")).with_suffix(".py")
        if package and local.is_file():
            hint = f"; did you mean '{package.replace('/', '.')}.{module_name}:{function_name}'?"
        raise actx.error(
            f"python_step: fn {spec!r}: no module {module_name!r} importable from the workspace root "
            f"{root} ({_FN_RESOLUTION}){hint}"
        )
    if not defined:
        raise actx.error(f"python_step: fn {spec!r}: {module_file} defines no top-level {function_name!r}")
    return actx.target_step({"fn": (module_file, actx.attr_value("code_in_key"))} if in_workspace else {})


def _find_fn(
    actx: AnalysisContext, module_name: str, function_name: str, workspace_only: bool
) -> tuple[Path | None, bool, bool] | None:
    """(module file or None, defines the function, inside the workspace). ``workspace_only``: below the root only, an
    answer for the analysis (``once``); else per target, as imports change the answer."""
    root = actx.workspace.root
    module_file = _module_file(module_name, root, workspace_only)
    if module_file is None:
        return None if workspace_only else (None, False, False)
    if not module_file.is_file():
        return module_file, True, False
    resolve = actx.stat_cache.resolve if actx.stat_cache is not None else Path.resolve
    return module_file, _defines(module_file, function_name), resolve(module_file).is_relative_to(resolve(root))


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
        "code_in_key": attr.bool(
            default=True,
            versioned=False,
            doc="whether the content of fn's module file is part of the key (editing it "
            "rebuilds the target); False: only fn and config are",
        ),
    },
    analyze=_python_step_analyze,
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
