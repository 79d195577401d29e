"""The ``marinbuild`` command line (click): parses, calls the library, formats. Nothing more.

It owns the exit codes: 0 success; 1 a step failed (or ``--check_up_to_date`` found work); 2 bad usage or a bad BUILD
file (one line on stderr saying what to fix, nothing run); 36 a problem of this machine (a local Ray that does not
start; Bazel's code); 37 an internal error (the traceback and a request for a bug report; Bazel's code). Results go to
stdout, progress and logs to stderr."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from typing import Any

import click

from marinbuild.cli.args import rewrite, unknown_command
from marinbuild.core.gc_control import skip_final_collection
from marinbuild.core.labels import LabelError, parse_pattern
from marinbuild.load.errors import BuildFileError, WorkspaceError
from marinbuild.load.workspace import find_workspace
from marinbuild.run.backends import BACKEND_NAMES

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ENVIRONMENT, EXIT_INTERNAL = 0, 1, 2, 36, 37


class UsageProblem(Exception):
    """Bad input from the user: printed as one line, exit 2."""


_PATTERN_COMMANDS = ("build", "why", "serve")
"""Subcommands whose arguments are target patterns, where ``-PATTERN`` subtracts."""


class DefaultBuildGroup(click.Group):
    """``marinbuild PATTERN...`` means ``marinbuild build PATTERN...``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            meant = unknown_command(args[0], list(self.commands))
            if meant is not None:
                raise UsageProblem(
                    f"unknown command '{args[0]}'; did you mean '{meant}'? (marinbuild --help lists the commands)"
                )
            args = ["build", *args]
        args = rewrite(args)
        if args and args[0] in _PATTERN_COMMANDS and "--" not in args:
            # A subtracted pattern (-//pkg:x) is not an option: pass it after "--", as Bazel users write it.
            negative = [a for a in args if a.startswith(("-//", "-:", "-@"))]
            if negative:
                args = [a for a in args if a not in negative] + ["--", *negative]
        return super().parse_args(ctx, args)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        """Subcommands, and target labels (``marinbuild //pkg:<TAB>`` is ``marinbuild build //pkg:<TAB>``)."""
        results = super().shell_complete(ctx, incomplete)
        if not incomplete.startswith("-"):
            results.extend(_complete_labels(ctx, self, incomplete))
        return results


def _complete_labels(ctx: click.Context, param: Any, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    try:
        from marinbuild.load import Loader, find_workspace  # lazy: the loader loads starlark

        loaded = Loader(find_workspace(".")).load_all()
    except Exception:
        return []
    return [CompletionItem(w) for w in label_words(loaded) if w.startswith(incomplete)]


def label_words(loaded: Any) -> list[str]:
    """Every label and pattern of the loaded workspace, sorted: what the shell completes."""
    words = {f"//{p}/..." if p else "//..." for p in loaded.packages}
    words |= {str(label) for label in loaded.targets}
    words |= {f"//{p}:all" for p in loaded.packages}
    return sorted(words)


@click.group(cls=DefaultBuildGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="marinbuild")
def cli() -> None:
    """marinbuild: build ML pipeline targets; only what is not already built runs.

    \b
    marinbuild //experiments/tutorials:hello_world     build a target
    marinbuild -n //experiments/...                    dry run: what would run, and why
    marinbuild query 'deps(//experiments:tootsie_8b)'  query the target graph
    """


class _Prefix(click.ParamType):
    """A ``--prefix``: a ``gs://`` URL as given, a local folder made absolute (relative to the current folder)."""

    name = "prefix"

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        text = str(value)
        return text if "://" in text else os.path.abspath(text)


PREFIX = _Prefix()


def _workspace_pins(session: Any) -> list[str]:
    """The pins files ``[tool.marinbuild] gc_pins`` names (a path or a list, relative to the workspace root)."""
    given = session.workspace.config.get("gc_pins", [])
    names = [given] if isinstance(given, str) else given
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise click.UsageError("[tool.marinbuild] gc_pins must be a path or a list of paths")
    paths = [session.workspace.root / n for n in names]
    for path in paths:
        if not path.is_file():
            raise click.UsageError(f"[tool.marinbuild] gc_pins: {path} does not exist")
    return [str(p) for p in paths]


def _open_session(**settings: Any) -> Any:
    from marinbuild.analysis.session import Session  # lazy here and below: the CLI start loads no command's modules

    return Session.open(".", **settings)


def _run_only(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    """``--run_only`` as Marin users write it (a JSON list of regexes) or one regex."""
    if value is None:
        return None
    import re

    if value.lstrip().startswith("["):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f'not a JSON list ({exc.msg}): write e.g. \'["tokenize", "train"]\'') from exc
        if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
            raise click.BadParameter('a JSON list of regexes, e.g. \'["tokenize", "train"]\'')
    else:
        parsed = [value]
    for regex in parsed:
        try:
            re.compile(regex)
        except re.error as exc:
            raise click.BadParameter(f"{regex!r} is not a regular expression ({exc})") from exc
    return parsed


@cli.command("build")
@click.argument("patterns", nargs=-1, required=True, shell_complete=_complete_labels)
@click.option(
    "--prefix", type=PREFIX, help="Where outputs go (a folder or gs://...); default $MARIN_PREFIX or [tool.marinbuild]."
)
@click.option("-n", "--dry_run", is_flag=True, help="Say what would run (reads statuses), run and write nothing.")
@click.option("--check_up_to_date", is_flag=True, help="Run nothing; exit 1 if any step would run (for CI).")
@click.option(
    "-j", "--jobs", "--max_concurrent", type=int, help="At most this many steps at once (default: every ready step)."
)
@click.option(
    "-k",
    "--keep_going/--nokeep_going",
    default=False,
    help="After a failure, keep running steps that do not need it (default: stop starting steps).",
)
@click.option(
    "--run_only",
    callback=_run_only,
    metavar="JSON|REGEX",
    help="Only steps whose name matches one of these regexes (Marin's run_only: '[\"tokenize\", ...]'), "
    "and what they need.",
)
@click.option(
    "--rebuild",
    multiple=True,
    metavar="TARGET|STEP",
    shell_complete=_complete_labels,
    help="Run TARGET's steps (or the step named STEP, e.g. one inside an executor_script) again even though they "
    "are built (repeatable).",
)
@click.option(
    "--force_run_failed/--no-force_run_failed",
    default=None,
    help="Rerun steps that failed before (default) or stop with an error.",
)
@click.option("--backend", type=click.Choice(BACKEND_NAMES), help="Where steps run.")
@click.option(
    "--ray_address",
    help="The Ray cluster to run steps on (implies --backend ray; default $RAY_ADDRESS or "
    "[tool.marinbuild] ray_address; none: --backend ray starts a local Ray on 127.0.0.1).",
)
@click.option("--explain", is_flag=True, help="Print why each step runs.")
@click.option("--build_event_json_file", type=click.Path(dir_okay=False), help="Write every event as a JSON line.")
@click.option("--profile", type=click.Path(dir_okay=False), help="Write a Chrome/Perfetto trace of the build.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", help="Format of the result.")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Also show Ray's own messages (always in .marinbuild/logs/ray.log) "
    "and every line the ML steps' helper processes print.",
)
def build_command(
    explain: bool,
    build_event_json_file: str | None,
    profile: str | None,
    output: str,
    verbose: bool,
    check_up_to_date: bool,
    **request: Any,
) -> None:
    """Build the targets that PATTERN... name (//pkg:name, //pkg/..., //pkg:all, -PATTERN subtracts).

    Marin's spellings work too: --dry_run true|false, --force_run_failed false, --max_concurrent N,
    --run_only '["regex", ...]'."""
    if verbose:
        os.environ["MARINBUILD_VERBOSE"] = "1"  # the Ray backend, and the ML steps' helper processes, read it
    from marinbuild.analysis.build import BuildRequest, run_build
    from marinbuild.ui.build_report import BuildReport, failure_text

    request["dry_run"] = request["dry_run"] or check_up_to_date  # the other options are a BuildRequest's fields
    report = BuildReport(request["dry_run"], explain, output, build_event_json_file, profile)
    session, result = run_build(BuildRequest(**request), report)
    report.print_result(result, session)
    if result.failure is not None:
        click.echo(f"marinbuild: {failure_text(result.failure)}", err=True)
        raise SystemExit(EXIT_FAILED)
    if check_up_to_date and result.would_run:
        click.echo(
            f"marinbuild: not up to date: {len(result.would_run)} step(s) would run: {', '.join(result.would_run)}",
            err=True,
        )
        raise SystemExit(EXIT_FAILED)


@cli.command("query")
@click.argument("expression")
@click.option(
    "--output",
    type=click.Choice(["label", "label_kind", "location", "json", "graph"]),
    default="label",
    help="label, label_kind, location (file:line:col), json, or graph (DOT, coloured by cache state).",
)
@click.option("--prefix", type=PREFIX, help="The prefix cache-aware functions (built, stale, ...) look at.")
@click.option(
    "--outputs",
    is_flag=True,
    help="Query the outputs recorded under the prefix (every version, Marin's too) instead of the targets: "
    "'kind(train_lm, rdeps(//..., tokenized/dclm-*))'.",
)
def query_command(expression: str, output: str, prefix: str | None, outputs: bool) -> None:
    """Query the target graph: deps, rdeps, somepath, allpaths, kind, attr, filter, built, stale, ..."""
    from marinbuild.query import run_query
    from marinbuild.query.session_universe import outputs_universe, universe_for

    session = _open_session(prefix=prefix)
    if outputs:
        if output in ("location", "graph"):
            raise click.UsageError(f"--output {output} needs targets; with --outputs use label, label_kind or json")
        click.echo(run_query(expression, outputs_universe(session.settings.prefix), output), nl=False)
        return
    session.load_all()
    click.echo(run_query(expression, universe_for(session), output), nl=False)


@cli.command("why")
@click.argument("patterns", nargs=-1, required=True, shell_complete=_complete_labels)
@click.option("--prefix", type=PREFIX, help="The prefix to compare with (default as for builds).")
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
def why_command(patterns: tuple[str, ...], prefix: str | None, output: str) -> None:
    """Say exactly why each target PATTERN... names would (re)run: never built, output deleted, failed before, or
    what changed. One label gives that target's steps; a pattern (//pkg:all, //pkg/..., -PATTERN subtracts) a
    section per matched target."""
    from marinbuild.cache import why

    session = _open_session(prefix=prefix)
    groups = why.why_targets(session, list(patterns))
    if not groups:
        raise UsageProblem(f"no targets match {' '.join(patterns)}")
    if len(patterns) == 1 and parse_pattern(patterns[0], session.current_package()).kind == "label":
        (group,) = groups
        text = (
            json.dumps(why.why_as_dict(group.target, group.steps), indent=2)
            if output == "json"
            else why.format_why(group.steps)
        )
    elif output == "json":
        text = json.dumps(why.why_targets_as_dict(list(patterns), groups, why.step_paths(session)), indent=2)
    else:
        text = why.format_why_targets(groups)
    click.echo(text)


@cli.group("cache")
def cache_group() -> None:
    """Look at and tidy the outputs under the prefix (the action cache)."""


@cache_group.command("status")
@click.argument("patterns", nargs=-1, required=True, shell_complete=_complete_labels)
@click.option("--prefix", type=PREFIX)
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
def cache_status_command(patterns: tuple[str, ...], prefix: str | None, output: str) -> None:
    """Each target's state: built, stale, missing, failed, running (lease holder and age); its output path."""
    from marinbuild.cache.commands import cache_status, format_table

    session = _open_session(prefix=prefix)
    rows = cache_status(session, session.load(patterns))
    click.echo(json.dumps([asdict(r) for r in rows], indent=2) if output == "json" else format_table(rows))


@cache_group.command("show")
@click.argument("target_or_path", shell_complete=_complete_labels)
@click.option("--prefix", type=PREFIX)
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
def cache_show_command(target_or_path: str, prefix: str | None, output: str) -> None:
    """Info, status, lease, artifact and size of a target's outputs (or of an output path)."""
    from marinbuild.cache.commands import cache_show, format_show

    shown = cache_show(_open_session(prefix=prefix), target_or_path)
    click.echo(json.dumps(shown, indent=2, default=str) if output == "json" else format_show(shown))


@cache_group.command("ls")
@click.option("--prefix", type=PREFIX)
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
def cache_ls_command(prefix: str | None, output: str) -> None:
    """Every step output under the prefix, with status, size and age."""
    from marinbuild.cache.commands import cache_ls, format_ls

    entries = cache_ls(_open_session(prefix=prefix).settings.prefix)
    click.echo(json.dumps([asdict(e) for e in entries], indent=2) if output == "json" else format_ls(entries))


@cache_group.command("gc")
@click.argument("patterns", nargs=-1, required=True, shell_complete=_complete_labels)
@click.option("--prefix", type=PREFIX)
@click.option(
    "--keep_only_used_by_patterns",
    is_flag=True,
    help="Keep only what PATTERN... uses: every other output under the prefix is listed, the current outputs of "
    "the workspace's other targets too.",
)
@click.option("--older_than", metavar="AGE", help="Keep what was written less than AGE ago (30d, 12h).")
@click.option("--keep_last", type=click.IntRange(min=1), help="Keep the N newest versions of each step, used or not.")
@click.option("--max_bytes", metavar="SIZE", help="Delete the oldest only until the prefix holds SIZE (500G, 2TiB).")
@click.option(
    "--pins",
    "pins_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A file of pins, never deleted: a label pattern or an output path glob under the prefix a line.",
)
@click.option("--yes", is_flag=True, help="Really delete (without it, only list what would go).")
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
def cache_gc_command(
    patterns: tuple[str, ...],
    prefix: str | None,
    keep_only_used_by_patterns: bool,
    older_than: str | None,
    keep_last: int | None,
    max_bytes: str | None,
    pins_files: tuple[str, ...],
    yes: bool,
    output: str,
) -> None:
    """Delete the outputs under the prefix that no current target of the workspace (//...) uses: old versions of
    the steps PATTERN... uses, and with //... outputs no target makes any more. Lists them first, each with why it
    may go; deletes with --yes."""
    from marinbuild.cache.gc import Policy, cache_gc, format_gc
    from marinbuild.cache.text import parse_age, parse_size

    try:
        age = None if older_than is None else parse_age(older_than)
        size = None if max_bytes is None else parse_size(max_bytes)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    session = _open_session(prefix=prefix)
    pins = (*_workspace_pins(session), *pins_files)
    policy = Policy(older_than=age, keep_last=keep_last, max_bytes=size, pins_files=pins)
    result = cache_gc(session, patterns, yes=yes, keep_only_used_by_patterns=keep_only_used_by_patterns, policy=policy)
    click.echo(json.dumps(result.to_dict(), indent=2) if output == "json" else format_gc(result))


@cache_group.command("stats")
@click.argument("patterns", nargs=-1, shell_complete=_complete_labels)
@click.option("--prefix", type=PREFIX)
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
def cache_stats_command(patterns: tuple[str, ...], prefix: str | None, output: str) -> None:
    """Per target of PATTERN (default //...) and per rule type: hit rate over the recorded runs (this workspace's
    build logs), compute reused and spent, bytes stored, the oldest and newest outputs."""
    from marinbuild.cache.stats import cache_stats, format_stats
    from marinbuild.ui.event_log import logs_for

    session = _open_session(prefix=prefix)
    logs = logs_for(session.workspace.cache_dir, session.settings.prefix)
    runs = [e.get("data") or {} for log in logs for e in log.events if e.get("kind") == "compute"]
    stats = cache_stats(session, list(patterns) or ["//..."], runs)
    click.echo(json.dumps(stats, indent=2) if output == "json" else format_stats(stats), nl=output == "json")


@cache_group.command("verify")
@click.argument("patterns", nargs=-1, required=True, shell_complete=_complete_labels)
@click.option("--prefix", type=PREFIX)
@click.option("-n", "--dry_run", is_flag=True, help="Report only; leave damaged steps marked built.")
@click.option(
    "--repair",
    is_flag=True,
    help="Also remove unparsable statuses, leases and records, and leases left beside built steps.",
)
@click.option("--no_deps", is_flag=True, help="Check only the targets' own steps, not the steps they depend on.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
def cache_verify_command(
    patterns: tuple[str, ...], prefix: str | None, dry_run: bool, repair: bool, no_deps: bool, output: str
) -> None:
    """Check the targets' steps and their dependencies: every metadata file, and output digests against the
    manifests; damaged steps are rebuilt by the next build."""
    from marinbuild.cache.verify import format_verify, verify_cache

    if dry_run and repair:
        raise click.UsageError("--dry_run and --repair contradict each other: give one")
    session = _open_session(prefix=prefix)
    labels = session.load(patterns)
    report = verify_cache(session, labels, repair=not dry_run, deps=not no_deps, repair_metadata=repair)
    click.echo(json.dumps(report.to_dict(), indent=2, default=str) if output == "json" else format_verify(report))
    if report.exit_code:
        raise SystemExit(report.exit_code)


@cli.command("info")
@click.argument("key", required=False)
@click.option("--prefix", type=PREFIX, help="The prefix to report (default as for builds).")
@click.option("--backend", type=click.Choice(BACKEND_NAMES))
@click.option("--ray_address")
def info_command(key: str | None, prefix: str | None, backend: str | None, ray_address: str | None) -> None:
    """Workspace, prefix and where it came from, backend, Ray address, cache folders, version (KEY: one value)."""
    from marinbuild.cli.info import workspace_info
    from marinbuild.engine.settings import Settings

    workspace = find_workspace(".")
    facts = workspace_info(
        workspace, Settings.resolve(workspace, prefix=prefix, backend=backend, ray_address=ray_address), prefix
    )
    if key is None:
        click.echo("".join(f"{name}: {value}\n" for name, value in facts.items()), nl=False)
        return
    if key not in facts:
        from marinbuild.query.errors import did_you_mean

        raise UsageProblem(f"unknown info key {key!r}{did_you_mean(key, facts)}; keys: {', '.join(facts)}")
    click.echo(facts[key])


@cli.command("clean")
def clean_command() -> None:
    """Remove the workspace's .marinbuild/ folder (source file digests, build event logs). Never outputs."""
    from marinbuild.cache.commands import clean, format_clean

    click.echo(format_clean(clean(find_workspace("."))))


@cli.command("serve")
@click.argument("patterns", nargs=-1, shell_complete=_complete_labels)
@click.option("--prefix", type=PREFIX, help="The prefix whose outputs are shown (default as for builds).")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port to listen on (0: a free one)."
)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to listen on (not loopback: reachable by others)."
)
def serve_command(patterns: tuple[str, ...], prefix: str | None, port: int, host: str) -> None:
    """A read-only web view of PATTERN (default //...): the graph and each step's cache state, why, files and
    logs, the runs, training curves; live while builds run."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise UsageProblem(
            "serve needs Starlette and uvicorn: pip install 'marinbuild[serve]'; in a clone of marinbuild, "
            f"pip install -e '.[serve]' (or make run EXTRAS=serve, EXTRAS=ml,serve with the ML rules) ({exc})"
        ) from exc
    from marinbuild.serve.main import CannotListen, serve

    try:
        serve(str(find_workspace(".").root), list(patterns) or ["//..."], prefix, host, port)
    except CannotListen as exc:
        raise UsageProblem(str(exc)) from exc


def _cluster_options(command: Any) -> Any:
    """--address and --cluster, shared by ``submit`` and the ``jobs`` commands."""
    command = click.option(
        "--cluster",
        metavar="CONFIG|NAME",
        help="A Ray cluster config (infra/NAME.yaml) or its name in infra/ (e.g. us-central2): its head's dashboard.",
    )(command)
    return click.option(
        "--address",
        help="The cluster's dashboard URL (wins over --cluster; default "
        "$RAY_API_SERVER_ADDRESS, $RAY_ADDRESS, http://127.0.0.1:8265).",
    )(command)


def _json_resources(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, float] | None:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON ({exc.msg}): write e.g. '{{\"TPU\": 4}}'") from exc
    if not isinstance(parsed, dict) or not all(isinstance(v, int | float) for v in parsed.values()):
        raise click.BadParameter("a JSON object of resource names to numbers, e.g. '{\"TPU\": 4}'")
    return parsed


@cli.command("submit", context_settings={"ignore_unknown_options": True})
@_cluster_options
@click.option("--tpu", metavar="TYPE", help="Run the command on a host of this TPU type (e.g. v4-8), as Marin's --tpu.")
@click.option("--entrypoint_num_cpus", "--entrypoint-num-cpus", type=float, help="CPUs to reserve for the command.")
@click.option(
    "--entrypoint_resources",
    "--entrypoint-resources",
    callback=_json_resources,
    metavar="JSON",
    help="Custom resources to reserve for the command, e.g. '{\"TPU\": 4}'.",
)
@click.option("--submission_id", "--submission-id", help="The job's id (default: Ray picks one).")
@click.option("--no_wait", is_flag=True, help="Print the job id and return; do not follow the job.")
@click.option("-e", "--env", "env", nargs=2, multiple=True, metavar="KEY VALUE", help="An environment variable.")
@click.option(
    "--extra",
    "extras",
    multiple=True,
    metavar="NAME",
    help="Install this extra of the workspace (or a package) into the job's environment.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def submit_command(
    address: str | None,
    cluster: str | None,
    tpu: str | None,
    entrypoint_num_cpus: float | None,
    entrypoint_resources: dict[str, float] | None,
    submission_id: str | None,
    no_wait: bool,
    env: tuple[tuple[str, str], ...],
    extras: tuple[str, ...],
    command: tuple[str, ...],
) -> None:
    """Run COMMAND on a Ray cluster as a job, with this workspace as its working_dir: submit ... -- COMMAND..."""
    from marinbuild.cluster import submit as jobs
    from marinbuild.cluster.jobs import follow_logs

    for key, _ in env:
        if "=" in key or not key:
            raise UsageProblem(f"-e takes KEY VALUE, got key {key!r} (write -e {key.replace('=', ' ', 1)})")
    try:
        submission = jobs.submit(
            list(command),
            address=address,
            cluster=cluster,
            env_vars=dict(env),
            extras=extras,
            submission_id=submission_id,
            tpu=tpu,
            entrypoint_num_cpus=entrypoint_num_cpus,
            entrypoint_resources=entrypoint_resources,
        )
    except ImportError as exc:
        raise UsageProblem(f"submit needs Ray: pip install 'marinbuild[ray]' ({exc})") from exc
    except ValueError as exc:  # a bad --tpu, or an --extra whose pyproject entry is not a requirement
        raise UsageProblem(str(exc)) from exc
    click.echo(submission.job_id)
    if no_wait:
        return
    click.echo(
        f"marinbuild: following job {submission.job_id} on {submission.address} (Ctrl-C stops following; "
        "the job goes on)",
        err=True,
    )
    try:
        follow_logs(submission.client, submission.address, submission.job_id, sys.stdout)
    except KeyboardInterrupt:
        click.echo(
            f"marinbuild: stopped following; the job goes on (stop it: marinbuild jobs stop "
            f"{submission.job_id} --address {submission.address})",
            err=True,
        )
        raise SystemExit(130) from None
    status, code = jobs.final_status(submission)
    click.echo(f"marinbuild: job {submission.job_id} {status}", err=True)
    if code:
        raise SystemExit(code)


@cli.group("jobs")
def jobs_group() -> None:
    """Ray jobs on a cluster: list, status JOB, logs JOB [-f], stop JOB (--address or --cluster)."""


def _job_client(address: str | None, cluster: str | None) -> tuple[Any, str]:
    from marinbuild.cluster import jobs
    from marinbuild.cluster.submit import resolve_address

    resolved = resolve_address(address, cluster)
    try:
        return jobs.job_client(resolved), resolved
    except ImportError as exc:
        raise UsageProblem(f"jobs needs Ray: pip install 'marinbuild[ray]' ({exc})") from exc


@jobs_group.command("list")
@_cluster_options
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
def jobs_list_command(address: str | None, cluster: str | None, output: str) -> None:
    """Every job the cluster knows, oldest first."""
    from marinbuild.cluster import jobs
    from marinbuild.ui.jobs_view import jobs_json, print_jobs

    client, resolved = _job_client(address, cluster)
    rows = jobs.list_jobs(client, resolved)
    click.echo(jobs_json(rows)) if output == "json" else print_jobs(rows, sys.stdout)


@jobs_group.command("status")
@click.argument("job")
@_cluster_options
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
def jobs_status_command(job: str, address: str | None, cluster: str | None, output: str) -> None:
    """JOB's status, entrypoint, times and exit code."""
    from marinbuild.cluster import jobs
    from marinbuild.ui.jobs_view import jobs_json, print_job

    client, resolved = _job_client(address, cluster)
    row = jobs.job_status(client, resolved, job)
    click.echo(jobs_json(row)) if output == "json" else print_job(row, sys.stdout)


@jobs_group.command("logs")
@click.argument("job")
@_cluster_options
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
def jobs_logs_command(job: str, address: str | None, cluster: str | None, follow: bool) -> None:
    """JOB's logs (its driver's output)."""
    from marinbuild.cluster import jobs

    client, resolved = _job_client(address, cluster)
    if follow:
        try:
            jobs.follow_logs(client, resolved, job, sys.stdout)
        except KeyboardInterrupt:
            raise SystemExit(130) from None
    else:
        click.echo(jobs.job_logs(client, resolved, job), nl=False)


@jobs_group.command("stop")
@click.argument("job")
@_cluster_options
def jobs_stop_command(job: str, address: str | None, cluster: str | None) -> None:
    """Stop JOB (its driver and the tasks it started)."""
    from marinbuild.cluster import jobs

    client, resolved = _job_client(address, cluster)
    stopped = jobs.stop_job(client, resolved, job)
    click.echo(f"marinbuild: {'stopping' if stopped else 'already ended:'} job {job}", err=True)


def _user_error_types() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix (exit 2). Imported only when something was raised."""
    from marinbuild.analysis.build import BuildRequestError
    from marinbuild.cluster.config import ClusterConfigError
    from marinbuild.cluster.jobs import JobsError
    from marinbuild.engine.settings import SettingsError
    from marinbuild.query import QueryError
    from marinbuild.run.ray_auth import RayAuthError

    user = (BuildRequestError, LabelError, WorkspaceError, QueryError, SettingsError, UsageProblem)
    return (*user, ClusterConfigError, JobsError, RayAuthError)


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps every user mistake to one line and exit 2, step failures to exit 1."""
    skip_final_collection()
    try:
        cli.main(args=argv, prog_name="marinbuild", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return EXIT_USAGE
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        click.echo(f"marinbuild: error: {exc.format_message()}{hint}", err=True)
        return EXIT_USAGE
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("marinbuild: interrupted", err=True)
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_FAILED
    except Exception as exc:
        if isinstance(exc, BuildFileError):
            for error in exc.all_errors:
                click.echo(f"marinbuild: error: {error}", err=True)
            return EXIT_USAGE
        if isinstance(exc, _user_error_types()):
            click.echo(f"marinbuild: error: {exc}", err=True)
            return EXIT_USAGE
        from marinbuild.run.ray_connect import LocalRayStartError

        if isinstance(exc, LocalRayStartError):
            click.echo(f"marinbuild: error: {exc}", err=True)
            return EXIT_ENVIRONMENT
        return _internal_error(exc)
    return EXIT_OK


def _internal_error(exc: BaseException) -> int:
    """A bug in marinbuild: its traceback, kept in the workspace's log folder too, then a request for a bug report;
    exit 37 (Bazel's code)."""
    import traceback

    from marinbuild.cli.info import installed_version

    text = "".join(traceback.format_exception(exc))
    sys.stderr.write(text)
    kept = _keep_traceback(text)
    click.echo(
        f"marinbuild: internal error (a bug in marinbuild {installed_version()}): {type(exc).__name__}: {exc}\n"
        + (f"marinbuild: the traceback is kept in {kept}\n" if kept else "")
        + "marinbuild: please report it to marinbuild's issue tracker with the command and the traceback above",
        err=True,
    )
    return EXIT_INTERNAL


def _keep_traceback(text: str) -> str | None:
    """Write an internal error's traceback into ``<workspace>/.marinbuild/logs/`` (where Ray's log goes too), so that
    one seen once on a busy machine can still be read and reported; its path, or None outside a workspace."""
    import time

    try:
        folder = find_workspace(".").cache_dir / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"internal-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        path.write_text(f"marinbuild {' '.join(sys.argv[1:])}\n\n{text}")
    except (WorkspaceError, OSError):
        return None
    return str(path)
