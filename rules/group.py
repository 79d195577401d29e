"""``group``: one name for several targets, as Marin's ``executor_main(steps=[...])`` lists a run's steps.

    group(name = "tootsie_8b", targets = ["//experiments/tootsie:kestrel", "//experiments/tootsie:ocelot"])

Building, querying or explaining it does so for each listed target; it has no step of its own."""

from __future__ import annotations

from typing import Any

from marinbuild.analysis.analyze import AnalysisContext
from marinbuild.load import attr, rule


def _group_analyze(actx: AnalysisContext) -> list[Any]:
    try:
        return [actx.step_of(label) for label in actx.attr.targets]
    except KeyError as exc:
        raise actx.error(f"group: {exc.args[0]} is itself several steps (a group); list its targets instead") from None


group = rule(
    attrs={"targets": attr.label_list(mandatory=True, doc="the targets the group's name stands for")},
    analyze=_group_analyze,
    doc="One name for several targets: building it builds each of them.",
)
