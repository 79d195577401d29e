"""The graph and step pages, computed by the engine's own functions; the server only turns them into JSON.

The graph: the pattern's steps and all they need, each with ``cache status``'s state, target and last duration;
``dep_failed`` is a step not built whose dependency failed (or a DEP_FAILED status, which Marin writes). A step: ``cache
show``'s facts, ``why``'s text, files, log tails, traceback and code record. Each request analyses the workspace afresh,
serialised by a lock (a session is not made for threads)."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from marinbuild.analysis.session import Session
from marinbuild.cache import probe as pb
from marinbuild.cache.commands import cache_show, cache_status
from marinbuild.cache.why import format_why, why
from marinbuild.serve import history
from marinbuild.serve.facts import read_json, relative, shown_state
from marinbuild.serve.files import check_relative
from marinbuild.store import fs
from marinbuild.store.prefix_walk import Store

MAX_FILES = 500  # a step page's output files
MAX_TRACEBACK = 64 * 1024
MAX_LOGS = 8  # a step page shows the last LOG_TAIL bytes of each of at most MAX_LOGS log files
LOG_TAIL = 32 * 1024


class PrefixUnreadable(Exception):
    """The prefix exists but cannot be read (permissions, not a folder, an unreachable bucket)."""


class ViewModel:
    def __init__(self, root: str, patterns: list[str], prefix: str | None = None):
        self.root, self.patterns = root, list(patterns)
        probe_session = Session.open(root, prefix=prefix)
        self.prefix = probe_session.settings.prefix
        self.cache_dir = probe_session.workspace.cache_dir
        self._lock = threading.Lock()
        self._session()  # a bad pattern or BUILD file is the user's mistake: said at start, not on every page

    def _session(self) -> Any:
        session = Session.open(self.root, prefix=self.prefix)
        session.load(self.patterns)
        session.analyse()
        return session

    def check_prefix(self) -> None:
        """PrefixUnreadable if the prefix exists and cannot be listed (a prefix not made yet is fine: nothing built)."""
        if fs.is_local(self.prefix) and os.path.exists(self.prefix) and not os.path.isdir(self.prefix):
            raise PrefixUnreadable(f"the prefix {self.prefix} is not a folder")
        try:
            Store(self.prefix).names(self.prefix)
        except Exception as exc:
            raise PrefixUnreadable(f"cannot read the prefix {self.prefix}: {exc}") from exc

    def graph(self) -> dict[str, Any]:
        self.check_prefix()
        with self._lock:
            session = self._session()
            engine = session.engine
            analysis = session.analysis
            named = reversed(analysis.steps_of.items())  # each step's first target
            label_of = {engine.canonicalize(step): str(label) for label, steps in named for step in steps}
            states = {s.output_path: s for row in cache_status(session, list(analysis.steps_of)) for s in row.steps}
            table = engine.table
            steps = list(dict.fromkeys(engine.canonicalize(s) for s in engine.steps))
            durations = history.durations(self.cache_dir, self.prefix)
            nodes: list[dict[str, Any]] = []
            edges: list[list[str]] = []
            shown: dict[str, str] = {}
            for step in steps:  # dependencies first
                path = engine.output_paths[step]
                state = states.get(path)
                deps = [engine.output_paths[engine.canonicalize(d)] for d in table.dependencies.get(step, ())]
                shown[path] = shown_state(state.state, state.status) if state else "missing"
                if shown[path] in (pb.MISSING, "stale") and any(
                    shown.get(d) in (pb.FAILED, "dep_failed") for d in deps
                ):
                    shown[path] = "dep_failed"  # not built, and a dependency's last run failed
                nodes.append(
                    {
                        "id": path,
                        "name": step.name,
                        "label": label_of.get(step),
                        "relative": self.relative(path),
                        "state": shown[path],
                        "holder": state.holder if state else None,
                        "detail": state.detail if state else None,
                        "duration": durations.get(path),
                    }
                )
                edges.extend([dep, path] for dep in deps)
        return {"prefix": self.prefix, "patterns": self.patterns, "nodes": nodes, "edges": edges}

    def relative(self, output_path: str) -> str:
        return relative(self.prefix, output_path)

    def step(self, relative: str) -> dict[str, Any] | None:
        """Everything about the step whose output is ``<prefix>/<relative>``; None if no step is there."""
        parts = check_relative(relative)
        output_path = fs.join(self.prefix, "/".join(parts))
        self.check_prefix()
        with self._lock:
            session = self._session()
            engine = session.engine
            step = next((s for s in engine.steps if engine.output_paths[s] == output_path), None)
            label, rule, current = None, None, None
            if step is not None:
                for lab, steps in session.analysis.steps_of.items():
                    if any(engine.canonicalize(s) == step for s in steps):
                        label = str(lab)
                        rule = getattr(session.loaded.targets[lab].rule, "name", None)
                        break
                current = json.loads(engine.info_text(step))  # what .executor_info holds once built
            shown = cache_show(self.prefix, output_path)["outputs"][0]
            why_text = None
            if label is not None:
                (row,) = cache_status(session, [label])
                state = next(s for s in row.steps if s.output_path == output_path)
                shown["state"], shown["status"] = state.state, state.status
                why_text = format_why([e for e in why(session, label) if e.output_path == output_path])
        if step is None and not shown["exists"]:
            return None
        info = current or (shown.get("info") if isinstance(shown.get("info"), dict) else {})
        config = info.get("config")
        raw_version = info.get("version")
        version: dict[str, Any] = raw_version if isinstance(raw_version, dict) else {}
        return {
            "output_path": output_path,
            "relative": "/".join(parts),
            "name": shown["name"],
            "label": label,
            "in_graph": step is not None,
            "rule": rule or (config.get("rule") if isinstance(config, dict) else None),
            "fn_name": info.get("fn_name"),
            "state": shown_state(shown["state"], shown.get("status")),
            "status": shown.get("status"),
            "config": config,
            "versioned": sorted(version["config"]) if isinstance(version.get("config"), dict) else [],
            "version": version,
            "hash": output_path.rsplit("-", 1)[-1] if "-" in output_path else None,
            "dependencies": info.get("dependencies") or [],
            "why": why_text,
            "lease": shown.get("lease"),
            "artifact": shown.get("artifact"),
            "traceback_file": shown.get("traceback"),
            "traceback": _read_small(shown["traceback"]) if shown.get("traceback") else None,
            "size": shown.get("size"),
            "errors": shown.get("errors"),
            "code": read_json(fs.join(output_path, ".marinbuild_code.json")),
            "files": (files := self.files(output_path) if shown["exists"] else []),
            "logs": self.logs(output_path, files),
        }

    def files(self, output_path: str) -> list[dict[str, Any]]:
        import fsspec

        filesystem, root = fsspec.core.url_to_fs(output_path)
        out: list[dict[str, Any]] = []
        for path, details in sorted(filesystem.find(root, detail=True).items()):
            if len(out) >= MAX_FILES:
                break
            relative = path[len(root) :].lstrip("/")
            out.append(
                {"path": self.relative(fs.join(output_path, relative)), "name": relative, "size": details.get("size")}
            )
        return out

    def logs(self, output_path: str, files: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The step's log files (under ``logs/`` or named ``*.log``), each with its last ``LOG_TAIL`` bytes."""
        out: list[dict[str, Any]] = []
        for f in files:
            name = f["name"]
            if not (name.startswith("logs/") or name.endswith(".log")) or len(out) >= MAX_LOGS:
                continue
            data = _read_tail(fs.join(output_path, name), f.get("size") or 0)
            out.append({**f, "tail": data, "cut": (f.get("size") or 0) > LOG_TAIL})
        return out

    def runs(self) -> dict[str, Any]:
        self.check_prefix()
        return {
            "prefix": self.prefix,
            "builds": history.builds(self.cache_dir, self.prefix),
            "run_infos": history.run_infos(self.prefix),
        }

    def training(self, chosen: list[str] | None = None) -> dict[str, Any]:
        """The curves of ``chosen`` outputs (paths relative to the prefix), else of the graph's built steps."""
        if chosen:
            outputs = [fs.join(self.prefix, "/".join(check_relative(c))) for c in chosen]
        else:
            outputs = [n["id"] for n in self.graph()["nodes"] if n["state"] == "built"]
        return {"prefix": self.prefix, "runs": _training_runs(self.prefix, outputs)}


def _read_small(path: str) -> str | None:
    data = fs.read_bytes(path)
    return None if data is None else data[-MAX_TRACEBACK:].decode("utf-8", errors="replace")


def _read_tail(path: str, size: int) -> str:
    import fsspec

    filesystem, stripped = fsspec.core.url_to_fs(path)
    start = max(0, size - LOG_TAIL)
    try:
        with filesystem.open(stripped, "rb") as f:
            f.seek(start)
            data = f.read(LOG_TAIL)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return text.split("\n", 1)[1] if start and "\n" in text else text


def _training_runs(prefix: str, outputs: list[str]) -> list[dict[str, Any]]:
    """Loss curves and key settings of the ``outputs`` whose ``metrics.jsonl`` has training losses, read as the report
    rule reads them; the validation curve is the overall ``eval/loss``, else the first dataset's."""
    from marinbuild.ml.report import collect, key_settings, settings_line  # lazy: fsspec

    runs = []
    for output in outputs:
        if not fs.exists(fs.join(output, "metrics.jsonl")):
            continue
        metrics = collect(output, [])
        if not metrics["train_loss"]:
            continue
        settings = key_settings(output, metrics.get("parameter_count"))
        runs.append(
            {
                "output_path": output,
                "relative": relative(prefix, output),
                "name": metrics["model"],
                "settings": settings,
                "settings_line": settings_line(settings),
                "train_loss": metrics["train_loss"],
                "validation_loss": metrics["overall_validation_loss"]
                or next(iter(metrics["validation_loss"].values()), []),
            }
        )
    return runs
