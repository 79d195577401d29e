"""Loading workspaces: targets, attributes, load(), rules modules, laziness, patterns, the graph."""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from marinbuild.core.labels import Label, PatternError
from marinbuild.load import (
    BuildFileError,
    FrozenDict,
    Loader,
    Struct,
    Workspace,
    load_packages,
    load_patterns,
    load_workspace,
    marinbuild_rules_dir,
)

WriteWorkspace = Callable[..., Workspace]
LOAD = 'load("//rules:test.py", "tokenize", "train", "needs_data")\n'


def test_targets_attributes_and_locations(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "exp/a/data/x.jsonl": "{}",
            "exp/a/data/y.jsonl": "{}",
            "exp/a/BUILD.marin": LOAD
            + """
tokenize(name = "raw", srcs = glob(["data/*.jsonl"]))
model = train(
    name = "model",
    data = {":raw": 0.7, "//exp/b:other": 1},
    deps = ["data/x.jsonl"],
    steps = 5,
    lr = 1,
    config = {"steps": 3, "optim": {"lr": 0.5}},
    resources = {"tpu": "v4-8"},
)
train(name = "after", dep = model, tags = ["a", "b"])
""",
            "exp/b/BUILD.marin": LOAD + 'tokenize(name = "other")\n',
        }
    )
    loaded = load_workspace(ws.root)
    assert list(loaded.targets) == [
        Label("exp/a", "raw"),
        Label("exp/a", "model"),
        Label("exp/a", "after"),
        Label("exp/b", "other"),
    ]
    raw = loaded["//exp/a:raw"]
    assert raw.kind == "tokenize" and raw.name == "raw"
    assert str(raw.location) == "exp/a/BUILD.marin:3:1"
    assert raw.attrs == {
        "srcs": (Label("exp/a", "data/x.jsonl"), Label("exp/a", "data/y.jsonl")),
        "tokenizer": "llama3",
    }
    assert raw.deps == ()
    assert raw.source_files() == (ws.root / "exp/a/data/x.jsonl", ws.root / "exp/a/data/y.jsonl")

    model = loaded.target(Label("exp/a", "model"))
    assert str(model.location) == "exp/a/BUILD.marin:4:9"
    assert model.attrs["data"] == {Label("exp/a", "raw"): 0.7, Label("exp/b", "other"): 1.0}
    assert isinstance(model.attrs["data"], FrozenDict)
    assert isinstance(model.attrs["lr"], float) and model.attrs["lr"] == 1.0
    config = model.attrs["config"]
    assert type(config).__name__ == "TrainConfig" and config.steps == 3 and config.optim.lr == 0.5
    assert model.deps == (Label("exp/a", "raw"), Label("exp/b", "other"))
    assert model.srcs == (Label("exp/a", "data/x.jsonl"),)
    assert model.source_files() == (ws.root / "exp/a/data/x.jsonl",)
    assert model.attrs["dep"] is None and model.attrs["flag"] is False and model.attrs["tags"] == ()

    after = loaded["//exp/a:after"]
    assert after.deps == (Label("exp/a", "model"),)
    assert after.attrs["tags"] == ("a", "b")
    assert loaded.deps("//exp/a:after") == (Label("exp/a", "model"),)
    assert loaded.packages == {
        "exp/a": (Label("exp/a", "raw"), Label("exp/a", "model"), Label("exp/a", "after")),
        "exp/b": (Label("exp/b", "other"),),
    }
    assert len(loaded) == 4 and Label("exp/b", "other") in loaded


def test_graph_and_closure(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "a/BUILD.marin": LOAD
            + """
tokenize(name = "t1")
tokenize(name = "t2")
train(name = "m", deps = [":t2", ":t1"])
train(name = "top", deps = [":m", ":t1"])
""",
        }
    )
    loaded = Loader(ws).load_all()
    graph = loaded.graph
    assert set(graph.successors(Label("a", "m"))) == {Label("a", "t1"), Label("a", "t2")}
    assert graph.number_of_nodes() == 4 and graph.number_of_edges() == 4
    assert loaded.closure(["//a:top"]) == [Label("a", "t2"), Label("a", "t1"), Label("a", "m"), Label("a", "top")]
    assert loaded.closure([Label("a", "t1"), "//a:t1"]) == [Label("a", "t1")]
    with pytest.raises(KeyError, match="not loaded"):
        loaded.target("//a:nope")


def test_rule_returns_label_and_name_can_contain_slashes(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "a/BUILD.marin": LOAD
            + """
t = tokenize(name = "tok/llama3")
train(name = "m", dep = t)
print("declared", t, package_name())
""",
        }
    )
    loaded = Loader(ws).load_all()
    assert loaded["//a:m"].deps == (Label("a", "tok/llama3"),)


def test_root_package(make_ws: WriteWorkspace) -> None:
    ws = make_ws({"BUILD.marin": LOAD + 'tokenize(name = "x")\ntrain(name = "y", dep = ":x")\n'})
    loaded = load_workspace(ws.root)
    assert loaded["//:y"].deps == (Label("", "x"),)


def test_print_goes_to_the_log(make_ws: WriteWorkspace, caplog: pytest.LogCaptureFixture) -> None:
    ws = make_ws({"a/BUILD.marin": 'print("hello", 1, [2])\n'})
    with caplog.at_level(logging.INFO, logger="marinbuild.build"):
        Loader(ws).load_all()
    assert "a/BUILD.marin: hello 1 [2]" in caplog.text


def test_dialect_allows_starlark_constructs(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "lib/util.star": """
def names(prefix, n):
    return [prefix + str(i) for i in range(n)]

def pick(xs, key = lambda x: x):
    return sorted(xs, key = key)

CONFIG = struct(size = 3, kinds = ["a", "b"])
""",
            "a/BUILD.marin": LOAD
            + """
load("//lib:util.star", "names", "pick", cfg = "CONFIG")
out = []
for n in names("t", cfg.size):
    if n != "t1":
        tokenize(name = n)
        out.append(n)
total = len("".join(out))
d = {k: v for k, v in zip(["a"], [1])}
d.pop("a")
s = "%s-%d" % (package_name(), total)
tokenize(name = s)
tokenize(name = pick(["z", "y"])[0] + "-" + "-".join(cfg.kinds))
""",
        }
    )
    loaded = Loader(ws).load_all()
    assert [t.name for t in loaded.targets.values()] == ["t0", "t2", "a-4", "y-a-b"]


def test_load_aliases_and_relative_labels(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "lib/base.star": "SIZE = 3\n",
            "lib/more.star": 'load(":base.star", "SIZE")\nDOUBLE = SIZE * 2\n',
            "a/defs.star": "LOCAL = 'here'\n",
            "a/BUILD.marin": """
load("//rules:test.py", tok = "tokenize")
load("//lib:more.star", "DOUBLE", single = "SIZE")
load(":defs.star", "LOCAL")
tok(name = "x" + str(DOUBLE) + str(single) + LOCAL)
""",
        }
    )
    loaded = Loader(ws).load_all()
    assert [str(label) for label in loaded.targets] == ["//a:x63here"]
    assert loaded["//a:x63here"].kind == "tokenize"


def test_loaded_module_is_evaluated_once_and_shared(make_ws: WriteWorkspace, caplog: pytest.LogCaptureFixture) -> None:
    ws = make_ws(
        {
            "lib/x.star": 'print("evaluating x")\nITEMS = [1, 2]\n',
            "a/BUILD.marin": (  # the rules module loaded after x.star: the first child stops there to have it imported
                'load("//lib:x.star", "ITEMS")\n'
                + LOAD
                + 'copy = list(ITEMS) + [3]\ncopy.append(4)\nprint("a", copy)\n'
            ),
            "b/BUILD.marin": 'load("//lib:x.star", "ITEMS")\nx = ITEMS + [5]\nprint("b", x)\n',
        }
    )
    with caplog.at_level(logging.INFO, logger="marinbuild.build"):
        Loader(ws).load_all()
    said = [r.getMessage().split(": ", 1)[1] for r in caplog.records if r.name == "marinbuild.build"]
    assert said == ["evaluating x", "a [1, 2, 3, 4]", "b [1, 2, 5]"]  # x once; a's copy left the shared list alone


def test_workspace_rules_module_with_relative_import(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "rules/common.py": "DEFAULT_TOKENIZER = 'gpt2'\n",
            "rules/sub/extra.py": """
from marinbuild.load import attr, rule

from ..common import DEFAULT_TOKENIZER


def _impl(ctx):
    return DEFAULT_TOKENIZER


special = rule(implementation=_impl, attrs={"tokenizer": attr.string(default=DEFAULT_TOKENIZER)})
__all__ = ["special"]
""",
            "a/BUILD.marin": 'load("//rules/sub:extra.py", "special")\nspecial(name = "s")\n',
        }
    )
    target = Loader(ws).load_all()["//a:s"]
    assert target.kind == "special"
    assert target.rule.defined_in == "//rules/sub:extra.py"
    assert target.attrs == {"tokenizer": "gpt2"}
    assert target.rule.implementation(None) == "gpt2"


def test_rules_module_all_limits_exports(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "rules/limited.py": "A = 1\nB = 2\n__all__ = ['A']\n",
            "a/BUILD.marin": 'load("//rules:limited.py", "B")\n',
        }
    )
    with pytest.raises(BuildFileError, match="'//rules:limited.py' has no symbol 'B'"):
        Loader(ws).load_all()


def test_marinbuild_repository_with_override(make_ws: WriteWorkspace, tmp_path: Path) -> None:
    shipped = tmp_path / "shipped_rules"
    shipped.mkdir()
    (shipped / "python.py").write_text(
        "from marinbuild.load import attr, rule\n"
        "py_step = rule(implementation=lambda ctx: None, attrs={'fn': attr.string(mandatory=True)})\n"
    )
    (shipped / "defs.star").write_text("FN = 'main'\n")
    ws = make_ws(
        {
            "a/BUILD.marin": 'load("@marinbuild//rules:python.py", "py_step")\n'
            'load("@marinbuild//rules:defs.star", "FN")\n'
            'py_step(name = "p", fn = FN)\n'
        },
        rules=False,
    )
    loaded = Loader(ws, repo_dirs={"marinbuild": shipped}).load_all()
    target = loaded["//a:p"]
    assert target.kind == "py_step" and target.rule.defined_in == "@marinbuild//rules:python.py"
    assert target.attrs == {"fn": "main"}
    assert marinbuild_rules_dir(shipped) == shipped.resolve()


def test_marinbuild_rules_dir_default_is_the_checkout_rules_folder() -> None:
    import marinbuild.load.repos as repos

    default = marinbuild_rules_dir()
    packaged = repos._PACKAGE_ROOT / "_rules"
    assert default == (packaged if packaged.is_dir() else repos._PACKAGE_ROOT.parent / "rules")
    assert default.name in ("rules", "_rules")


def test_loading_one_package_loads_only_it_and_what_it_refers_to(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "a/BUILD.marin": LOAD + 'train(name = "x", dep = "//b:y")\n',
            "b/BUILD.marin": LOAD + 'tokenize(name = "y")\n',
            "c/BUILD.marin": "this is not python\n",
        }
    )
    loaded = load_packages(ws, ["a"])
    assert set(loaded.packages) == {"a", "b"}
    assert loaded["//a:x"].deps == (Label("b", "y"),)
    only = load_packages(ws, ["a"], transitive=False)
    assert set(only.packages) == {"a"}
    assert only["//a:x"].deps == (Label("b", "y"),)  # taken on trust: package b exists
    with pytest.raises(BuildFileError, match="c/BUILD.marin:1"):
        load_workspace(ws.root)


def test_load_packages_rejects_unknown_package(make_ws: WriteWorkspace) -> None:
    ws = make_ws({"a/BUILD.marin": ""})
    with pytest.raises(PatternError, match="no such package 'nope'"):
        load_packages(ws, ["nope"])


def test_load_patterns(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "exp/a/BUILD.marin": LOAD + 'tokenize(name = "x")\ntokenize(name = "y")\n',
            "exp/a/old/BUILD.marin": LOAD + 'tokenize(name = "z")\n',
            "other/BUILD.marin": LOAD + 'train(name = "w", dep = "//exp/a:x")\n',
            "broken/BUILD.marin": "import os\n",
        }
    )
    loaded, labels = load_patterns(ws, ["//exp/...", "-//exp/a/old/..."])
    assert labels == [Label("exp/a", "x"), Label("exp/a", "y")]
    assert "broken" not in loaded.packages
    loaded, labels = load_patterns(ws, ["//other:all"])
    assert labels == [Label("other", "w")]
    assert set(loaded.packages) == {"other", "exp/a"}
    _, labels = load_patterns(ws, [":y", "-:y", ":x"], current_package="exp/a")
    assert labels == [Label("exp/a", "x")]
    with pytest.raises(PatternError, match="no such package 'nope'"):
        load_patterns(ws, ["//nope:x"])
    with pytest.raises(PatternError, match="no such target '//exp/a:q'"):
        load_patterns(ws, ["//exp/a:q"])
    with pytest.raises(BuildFileError, match="broken/BUILD.marin:1:1"):
        load_patterns(ws, ["//..."])


def test_macro_declared_targets_point_at_the_build_file(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "lib/macros.star": LOAD
            + """
def tokenized(name, files):
    tokenize(name = name + "_tok", srcs = files)
    train(name = name, dep = ":" + name + "_tok")
""",
            "a/f.txt": "x",
            "a/BUILD.marin": 'load("//lib:macros.star", "tokenized")\n\ntokenized("m", ["f.txt"])\n',
        }
    )
    loaded = Loader(ws).load_all()
    assert str(loaded["//a:m_tok"].location) == "a/BUILD.marin:3:1"
    assert loaded["//a:m"].deps == (Label("a", "m_tok"),)
    assert loaded["//a:m_tok"].source_files() == (ws.root / "a" / "f.txt",)


def test_struct_values() -> None:
    s = Struct(a=1, b=[2])
    assert s.a == 1 and s == Struct(a=1, b=[2]) and repr(s) == "struct(a=1, b=[2])"
    with pytest.raises(AttributeError, match="no field 'c'"):
        _ = s.c
    with pytest.raises(AttributeError, match="immutable"):
        s.a = 2


def test_config_attr_takes_dicts_and_rules_modules_do_not_export_instances(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "rules/cfg.py": """
from dataclasses import dataclass
from marinbuild.load import attr, rule

@dataclass(frozen=True)
class C:
    x: int = 1

DEFAULT = C(x=5)
r = rule(implementation=print, attrs={"c": attr.config(C, default={"x": 2})})
""",
            "a/BUILD.marin": 'load("//rules:cfg.py", "r")\nr(name = "a", c = {"x": 5})\nr(name = "b")\n',
            "b/BUILD.marin": 'load("//rules:cfg.py", "r", "DEFAULT")\n',
        }
    )
    loaded = Loader(ws).load_packages(["a"])
    assert loaded["//a:a"].attrs["c"].x == 5
    assert loaded["//a:b"].attrs["c"].x == 2
    with pytest.raises(BuildFileError, match="does not export 'DEFAULT': a rules module exports only"):
        Loader(ws).load_packages(["b"])


def test_rule_definition_errors() -> None:
    from marinbuild.load import attr, rule

    with pytest.raises(TypeError, match="callable"):
        rule(implementation=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="implicit"):
        rule(implementation=print, attrs={"name": attr.string()})
    with pytest.raises(TypeError, match="attr"):
        rule(implementation=print, attrs={"x": str})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="public identifier"):
        rule(implementation=print, attrs={"_x": attr.string()})
    with pytest.raises(ValueError, match="mandatory"):
        attr.string(mandatory=True, default="x")
    with pytest.raises(TypeError, match="dataclass"):
        attr.config(dict)
    with pytest.raises(TypeError, match="attr"):
        attr.list(of=list)
    with pytest.raises(TypeError, match="namespace"):
        attr()


def test_string_attr_values_constraint(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "rules/choice.py": "from marinbuild.load import attr, rule\n"
            "pick = rule(implementation=print, attrs={'mode': attr.string(values=['fast', 'slow'])})\n",
            "a/BUILD.marin": 'load("//rules:choice.py", "pick")\n'
            'pick(name = "a", mode = "fast")\npick(name = "b", mode = "x")\n',
        }
    )
    with pytest.raises(BuildFileError, match=r"a/BUILD.marin:3:\d+: .*'x' is not one of 'fast', 'slow'"):
        Loader(ws).load_all()


def test_rules_module_is_reimported_when_it_changes(make_ws: WriteWorkspace) -> None:
    import os

    ws = make_ws(
        {
            "rules/v.py": "VALUE = 'one'\n",
            "a/BUILD.marin": LOAD + 'load("//rules:v.py", "VALUE")\ntokenize(name = VALUE)\n',
        }
    )
    assert list(Loader(ws).load_all().targets) == [Label("a", "one")]
    path = ws.root / "rules" / "v.py"
    path.write_text("VALUE = 'second'\n")
    os.utime(path, ns=(1, 1))
    assert list(Loader(ws).load_all().targets) == [Label("a", "second")]


def test_a_rule_type_passed_on_by_a_loaded_file_keeps_its_name(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "lib/r.star": 'load("//rules:test.py", "train")\ncustom = train\n',
            "a/BUILD.marin": 'load("//lib:r.star", "custom")\ncustom(name = "c", steps = 2)\n',
        }
    )
    target = Loader(ws).load_all()["//a:c"]
    assert target.kind == "train" and target.rule.defined_in == "//rules:test.py"
    assert target.attrs["steps"] == 2
    with pytest.raises(KeyError, match="not loaded"):
        Loader(ws).load_all().closure(["//a:zz"])


def test_references_to_a_target_give_its_label(make_ws: WriteWorkspace, tmp_path: Path) -> None:
    """A target's name, ':name' and '//pkg:name' (from its package or another, loaded before or after it)
    all give labels equal to its own; a label written twice in one list is refused."""
    ws = make_ws(
        {
            "a/BUILD.marin": LOAD
            + 'tokenize(name = "x")\ntrain(name = "y", dep = "x", data = {":x": 1.0}, deps = ["//a:x", "//b:z"])\n',
            "b/BUILD.marin": LOAD + 'tokenize(name = "z")\ntrain(name = "w", dep = "//a:x", deps = [":z"])\n',
        }
    )
    loaded = load_workspace(ws.root)
    x, z = loaded["//a:x"].label, loaded["//b:z"].label
    y, w = loaded["//a:y"], loaded["//b:w"]
    assert y.attrs["dep"] == x and list(y.attrs["data"])[0] == x and y.attrs["deps"][0] == x
    assert y.attrs["deps"] == (x, z) and y.deps == (x, z)
    assert w.attrs["dep"] == x and w.attrs["deps"][0] == z and w.deps == (z, x)  # attribute order: deps, dep
    twice = 'tokenize(name = "x")\ntrain(name = "y", deps = [":x", "//a:x"])\n'
    with pytest.raises(BuildFileError, match="label '//a:x' appears more than once"):
        Loader(make_ws({"a/BUILD.marin": LOAD + twice}, root=tmp_path / "twice")).load_all()


def test_a_folder_name_no_label_can_spell_is_not_made_reachable(make_ws: WriteWorkspace) -> None:
    """Declaring targets in a package whose folder name is not a valid label ('a b') must not make
    '//a b:x' a valid label text elsewhere."""
    ws = make_ws(
        {
            "a b/BUILD.marin": LOAD + 'tokenize(name = "x")\n',
            "c/BUILD.marin": LOAD + 'train(name = "y", deps = ["//a b:x"])\n',
        }
    )
    with pytest.raises(BuildFileError) as info:
        Loader(ws).load_all()
    assert "invalid label '//a b:x'" in str(info.value) and "c/BUILD.marin:2" in str(info.value)


def test_forward_references_and_cycles_with_and_without_declaration_order(
    make_ws: WriteWorkspace, tmp_path: Path
) -> None:
    """Dependencies declared after their dependents (no cycle) load; a cycle is found whichever way round."""
    forward = make_ws(
        {
            "a/BUILD.marin": LOAD + 'train(name = "x", deps = [":y", "//b:z"])\ntokenize(name = "y")\n',
            "b/BUILD.marin": LOAD + 'train(name = "z", dep = "//a:y")\n',
        }
    )
    loaded = Loader(forward).load_all()
    assert loaded["//a:x"].deps == (Label("a", "y"), Label("b", "z"))
    for i, text in enumerate(
        [
            'train(name = "x", dep = ":y")\ntrain(name = "y", dep = ":x")\n',
            'train(name = "y", dep = ":x")\ntrain(name = "x", dep = ":y")\n',
        ]
    ):
        ws = make_ws({"a/BUILD.marin": LOAD + text}, root=tmp_path / f"cycle{i}")
        with pytest.raises(BuildFileError, match=r"dependency cycle: //a:x -> //a:y -> //a:x"):
            Loader(ws).load_all()


def test_the_garbage_collector_is_paused_only_while_loading(
    make_ws: WriteWorkspace, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import gc

    ws = make_ws(
        {
            "rules/gc_probe.py": "import gc\n\nCOLLECTING = gc.isenabled()  # as loading imports this module\n",
            "a/BUILD.marin": LOAD
            + 'load("//rules:gc_probe.py", "COLLECTING")\nprint(COLLECTING)\ntokenize(name = "x")\n',
        }
    )
    broken = make_ws({"b/BUILD.marin": "import os\n"}, root=tmp_path / "broken")
    assert gc.isenabled()
    with caplog.at_level(logging.INFO, logger="marinbuild.build"):
        Loader(ws).load_all()
    assert "a/BUILD.marin: False" in caplog.text and gc.isenabled()
    with pytest.raises(BuildFileError):
        Loader(broken).load_all()
    assert gc.isenabled()
    gc.disable()
    try:
        Loader(ws).load_all()
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_loaded_objects_go_to_the_oldest_generation(make_ws: WriteWorkspace) -> None:
    import gc

    ws = make_ws({"a/BUILD.marin": LOAD + "".join(f'tokenize(name = "x{i}")\n' for i in range(50))})
    loaded = Loader(ws).load_all()
    assert gc.get_count()[0] < 50 and gc.get_freeze_count() == 0  # young generations emptied, nothing frozen
    assert any(o is loaded.targets[next(iter(loaded.targets))] for o in gc.get_objects(2))
    gc.freeze()  # a process that froze objects of its own (say, before forking workers) keeps them frozen
    try:
        frozen = gc.get_freeze_count()
        Loader(ws).load_all()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_attribute_types_with_their_own_value_or_default_still_get_every_value(make_ws: WriteWorkspace) -> None:
    rules = """
from marinbuild.load import attr, rule
from marinbuild.load.attrs import StringAttr


class Shout(StringAttr):
    def value_or_default(self, value, package):
        return "unset" if value is None else "given " + repr(value)


def _impl(ctx):
    return None


say = rule(implementation=_impl, attrs={"word": Shout(), "plain": attr.string()})
"""
    ws = make_ws(
        {
            "rules/custom.py": rules,
            "a/BUILD.marin": 'load("//rules:custom.py", "say")\n'
            'say(name = "x", word = "hi", plain = "p")\nsay(name = "y", word = None)\nsay(name = "z")\n',
        }
    )
    loaded = load_workspace(ws.root)
    assert loaded["//a:x"].attrs == {"word": "given 'hi'", "plain": "p"}
    assert loaded["//a:y"].attrs == {"word": "unset", "plain": ""}
    assert loaded["//a:z"].attrs["word"].startswith("given <object")  # the 'not given' marker, as always


@pytest.mark.parametrize("setting", ["eval_budget_seconds", "eval_memory_mb"])
def test_the_evaluation_budgets_must_be_positive_numbers(setting: str, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "BUILD.marin").write_text("x = 1\n")
    for bad in ("0", "-1", '"10"', "true"):
        with pytest.raises(BuildFileError, match=f"{setting} must be a positive number"):
            Loader(Workspace(tmp_path, {setting: tomllib.loads(f"v = {bad}")["v"]}))
    assert len(Loader(Workspace(tmp_path, {setting: 2.5 * 1024})).load_all()) == 0


def test_a_build_file_ending_its_evaluator_fails_at_the_file_and_loading_goes_on(
    make_ws: WriteWorkspace, caplog: pytest.LogCaptureFixture
) -> None:
    ws = make_ws(
        {
            "a/BUILD.marin": LOAD + 'tokenize(name = "t")\ny = "x" * 300000000\n',
            "b/BUILD.marin": 'fail("b is broken too")\n',
            "c/BUILD.marin": LOAD + 'print("c evaluated")\ntrain(name = "t", config = {"steps": 3})\n',
        }
    )
    loader = Loader(Workspace(ws.root, {"eval_memory_mb": 100}))
    with caplog.at_level(logging.INFO, logger="marinbuild.build"), pytest.raises(BuildFileError) as raised:
        loader.load_all()
    first, second = raised.value.all_errors
    assert str(first).startswith("a/BUILD.marin:1:1: evaluation aborted: it asked for 300,000,000 bytes at once")
    assert str(second) == "b/BUILD.marin:1:1: fail: b is broken too"
    assert "c/BUILD.marin: c evaluated" in caplog.text  # by a new child, which imported the rules module again
    assert Loader(ws).load_packages(["c"]).target("//c:t").attrs["config"].steps == 3


def test_an_attribute_value_that_does_not_pickle_fails_at_its_target(make_ws: WriteWorkspace) -> None:
    rules = """
import threading

from marinbuild.load import rule
from marinbuild.load.attrs import StringAttr


class Locked(StringAttr):
    def convert(self, value, package):
        return threading.Lock()


locked = rule(implementation=lambda ctx: None, attrs={"x": Locked()})
"""
    ws = make_ws(
        {
            "rules/locked.py": rules,
            "a/BUILD.marin": 'load("//rules:locked.py", "locked")\nlocked(name = "t", x = "1")\n',
        }
    )
    with pytest.raises(
        BuildFileError, match=r"^a/BUILD.marin:2:1: locked\(name='t'\): a value of its attributes does not pickle"
    ):
        load_workspace(ws.root)
