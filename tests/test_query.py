"""Tests for marinbuild.query: parsing, evaluation, ordering, cache-aware functions, output, errors."""

from __future__ import annotations

import ast
import json
import re
import sys
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

from marinbuild.query import (
    FUNCTIONS,
    OUTPUT_FORMATS,
    QueryError,
    QueryUniverse,
    check_output,
    evaluate,
    format_result,
    parse,
    run_query,
)


class UnknownPattern(Exception):
    """The caller's own error type for unknown target patterns."""


def expander(graph: nx.DiGraph, default_package: str = "//pkg"):
    """A small Bazel-like pattern expander over the graph's labels (the caller's job in real use)."""
    labels = sorted(graph)
    calls: Counter[str] = Counter()

    def expand(word: str) -> list[str]:
        calls[word] += 1
        if word.startswith(":"):
            word = default_package + word
        if word == "//...":
            return labels
        if word.endswith("/..."):
            base = word[: -len("/...")]
            return [x for x in labels if x.startswith(base + ":") or x.startswith(base + "/")]
        if word.endswith((":all", ":*")):
            pkg = word.rsplit(":", 1)[0]
            found = [x for x in labels if x.split(":", 1)[0] == pkg]
            if not found:
                raise UnknownPattern(word)
            return found
        if word in graph:
            return [word]
        raise UnknownPattern(word)

    expand.calls = calls  # type: ignore[attr-defined]
    return expand


def make_universe(
    graph: nx.DiGraph, states: dict[str, str] | None = None, default_package: str = "//pkg"
) -> QueryUniverse:
    states = states or {}
    calls: Counter[str] = Counter()

    def state_of(label: str) -> str:
        calls[label] += 1
        return states.get(label, "missing")

    universe = QueryUniverse(graph, state_of, expander(graph, default_package))
    universe.state_calls = calls  # type: ignore[attr-defined]
    return universe


def add(graph: nx.DiGraph, label: str, kind: str = "python_step", deps: tuple[str, ...] = (), **attrs) -> None:
    graph.add_node(label, kind=kind, attrs=attrs)
    for dep in deps:
        graph.add_edge(label, dep)


@pytest.fixture
def diamond() -> QueryUniverse:
    """top -> left, right -> base; plus an unrelated island. Kinds and attributes vary."""
    g = nx.DiGraph()
    add(g, "//data:base", kind="download", url="gs://bucket/raw", tags=["raw", "big"])
    add(g, "//data:left", kind="tokenize", deps=("//data:base",), tokenizer="llama3", inputs=[":base"])
    add(g, "//data:right", kind="tokenize", deps=("//data:base",), tokenizer="gpt2", inputs=["//data:base"])
    add(
        g,
        "//exp:top",
        kind="train_lm",
        deps=("//data:left", "//data:right"),
        lr=3e-4,
        use_flash=True,
        inputs=["//data:left", "//data:right"],
        config={"steps": 10},
        extra=object(),
    )
    add(g, "//exp/sub:island", kind="python_step")
    states = {"//data:base": "built", "//data:left": "stale", "//exp:top": "failed"}
    return make_universe(g, states, default_package="//data")


def q(universe: QueryUniverse, expr: str) -> list[str]:
    return evaluate(expr, universe)


def err(expr: str, universe: QueryUniverse | None = None) -> QueryError:
    with pytest.raises(QueryError) as info:
        if universe is None:
            parse(expr)
        else:
            evaluate(expr, universe)
    return info.value


# -- words, ordering ---------------------------------------------------------------------------


def test_words_and_patterns(diamond):
    assert q(diamond, "//exp:top") == ["//exp:top"]
    assert q(diamond, ":right") == ["//data:right"]  # relative to the expander's current package
    assert q(diamond, "//data/...") == ["//data:base", "//data:left", "//data:right"]
    assert q(diamond, "'//data:left'") == ["//data:left"]
    assert q(diamond, '"//data:all"') == ["//data:base", "//data:left", "//data:right"]


def test_unknown_pattern_propagates_callers_error(diamond):
    with pytest.raises(UnknownPattern):
        q(diamond, "//nope:x")


def test_result_order_is_dependencies_first_ties_by_label(diamond):
    assert q(diamond, "//...") == ["//data:base", "//data:left", "//data:right", "//exp/sub:island", "//exp:top"]
    assert q(diamond, "//exp:top + //data:base") == ["//data:base", "//exp:top"]


def test_order_with_cycle_is_deterministic():
    g = nx.DiGraph([("//a:x", "//a:y"), ("//a:y", "//a:x"), ("//a:z", "//a:x"), ("//a:y", "//a:w")])
    u = make_universe(g)
    assert q(u, "//...") == ["//a:w", "//a:x", "//a:y", "//a:z"]
    assert q(u, "deps(//a:z)") == ["//a:w", "//a:x", "//a:y", "//a:z"]


def test_pattern_expanded_once_per_evaluation(diamond):
    q(diamond, "//data:left + //data:left + deps(//data:left)")
    assert diamond.expand_pattern.calls["//data:left"] == 1


# -- deps / rdeps ------------------------------------------------------------------------------


def test_deps_and_depth(diamond):
    assert q(diamond, "deps(//exp:top)") == ["//data:base", "//data:left", "//data:right", "//exp:top"]
    assert q(diamond, "deps(//exp:top, 0)") == ["//exp:top"]
    assert q(diamond, "deps(//exp:top, 1)") == ["//data:left", "//data:right", "//exp:top"]
    assert q(diamond, "deps(//exp:top, 2)") == q(diamond, "deps(//exp:top)")
    assert q(diamond, "deps(//exp:top, 99)") == q(diamond, "deps(//exp:top)")
    assert q(diamond, "deps(//data:base)") == ["//data:base"]


def test_rdeps_and_depth(diamond):
    assert q(diamond, "rdeps(//..., //data:base)") == ["//data:base", "//data:left", "//data:right", "//exp:top"]
    assert q(diamond, "rdeps(//..., //data:base, 0)") == ["//data:base"]
    assert q(diamond, "rdeps(//..., //data:base, 1)") == ["//data:base", "//data:left", "//data:right"]
    # The universe is deps(universe): only targets in that closure are returned.
    assert q(diamond, "rdeps(//data:left, //data:base)") == ["//data:base", "//data:left"]
    assert q(diamond, "rdeps(//exp/sub:island, //data:base)") == []


# -- paths -------------------------------------------------------------------------------------


def test_somepath(diamond):
    assert q(diamond, "somepath(//exp:top, //data:base)") == ["//data:base", "//data:left", "//exp:top"]
    assert q(diamond, "somepath(//data:base, //exp:top)") == []
    assert q(diamond, "somepath(//exp:top, //exp:top)") == ["//exp:top"]
    assert q(diamond, "somepath(//exp:top, //exp/sub:island)") == []


def test_allpaths(diamond):
    assert q(diamond, "allpaths(//exp:top, //data:base)") == [
        "//data:base",
        "//data:left",
        "//data:right",
        "//exp:top",
    ]
    assert q(diamond, "allpaths(//exp:top, //data:left)") == ["//data:left", "//exp:top"]
    assert q(diamond, "allpaths(//data:base, //exp:top)") == []


# -- filters -----------------------------------------------------------------------------------


def test_kind(diamond):
    assert q(diamond, "kind(train_lm, //...)") == ["//exp:top"]
    assert q(diamond, 'kind("train_lm rule", //...)') == ["//exp:top"]
    assert q(diamond, "kind('^tokenize rule$', //...)") == ["//data:left", "//data:right"]
    assert q(diamond, "kind(rule, //data:base)") == ["//data:base"]
    assert q(diamond, "kind(nothing, //...)") == []


def test_attr(diamond):
    assert q(diamond, "attr(tokenizer, llama, //...)") == ["//data:left"]
    assert q(diamond, "attr(tags, '\\[raw, big\\]', //...)") == ["//data:base"]
    assert q(diamond, "attr(lr, 0.0003, //...)") == ["//exp:top"]
    assert q(diamond, "attr(use_flash, True, //...)") == ["//exp:top"]
    assert q(diamond, "attr(config, 'steps: 10', //...)") == ["//exp:top"]
    assert q(diamond, "attr(inputs, '//data:base', //...)") == ["//data:right"]
    assert q(diamond, "attr(missing_attr, '.*', //...)") == []


def test_filter(diamond):
    assert q(diamond, "filter('^//data:', //...)") == ["//data:base", "//data:left", "//data:right"]
    assert q(diamond, "filter(island, //...)") == ["//exp/sub:island"]


def test_labels(diamond):
    assert q(diamond, "labels(inputs, //exp:top)") == ["//data:left", "//data:right"]
    # ':base' is relative to the owner's package.
    assert q(diamond, "labels(inputs, //data:left)") == ["//data:base"]
    assert q(diamond, "labels(inputs, //data/...)") == ["//data:base"]
    assert q(diamond, "labels(url, //data:base)") == []  # not a label: ignored
    assert q(diamond, "labels(nope, //...)") == []


def test_labels_naming_unknown_target_is_an_error():
    g = nx.DiGraph()
    add(g, "//a:x", inputs=["//a:ghost"])
    e = err("labels(inputs, //a:x)", make_universe(g))
    assert "'//a:ghost'" in e.message and "inputs" in e.message and e.column == 1


def test_some(diamond):
    assert q(diamond, "some(//data/...)") == ["//data:base"]
    assert q(diamond, "some(//data/..., 2)") == ["//data:base", "//data:left"]
    e = err("//data:base + some(kind(nothing, //...))", diamond)
    assert "empty" in e.message and e.column == 15


# -- operators, precedence, let ----------------------------------------------------------------


def test_set_operators(diamond):
    assert q(diamond, "//data:left union //data:right") == ["//data:left", "//data:right"]
    assert q(diamond, "//data:left + //data:right") == ["//data:left", "//data:right"]
    assert q(diamond, "deps(//data:left) intersect deps(//data:right)") == ["//data:base"]
    assert q(diamond, "deps(//data:left) ^ deps(//data:right)") == ["//data:base"]
    assert q(diamond, "deps(//exp:top) except //data/...") == ["//exp:top"]
    assert q(diamond, "deps(//exp:top) - //data/...") == ["//exp:top"]
    assert q(diamond, "deps(//exp:top) -//data:base") == ["//data:left", "//data:right", "//exp:top"]


def test_operators_are_left_associative_equal_precedence(diamond):
    # (a + b) ^ c, not a + (b ^ c)
    assert q(diamond, "//data:left + //data:right ^ //data:right") == ["//data:right"]
    assert q(diamond, "//data:left + (//data:right ^ //data:right)") == ["//data:left", "//data:right"]
    # (a - b) + b, not a - (b + b)
    assert q(diamond, "//data/... - //data:base + //data:base") == ["//data:base", "//data:left", "//data:right"]
    assert q(diamond, "//data/... - (//data:base + //data:left)") == ["//data:right"]


def test_hyphen_inside_word_is_not_except():
    g = nx.DiGraph()
    add(g, "//a:x-y")
    add(g, "//a:x")
    u = make_universe(g)
    assert q(u, "//a:x-y") == ["//a:x-y"]
    assert q(u, "//a:x-y - //a:x") == ["//a:x-y"]


def test_let(diamond):
    assert q(diamond, "let v = deps(//data:left) in $v ^ deps(//data:right)") == ["//data:base"]
    # the let body extends as far right as possible
    assert q(diamond, "let v = //data:left in $v + //data:right") == ["//data:left", "//data:right"]
    assert q(diamond, "(let v = //data:left in $v) + //data:right") == ["//data:left", "//data:right"]
    # shadowing and nesting
    assert q(diamond, "let v = //data:left in let v = //data:right in $v") == ["//data:right"]
    assert q(diamond, "let a = //data:left in let b = //data:right in $a + $b") == ["//data:left", "//data:right"]
    # the value is evaluated once even if used twice
    q(diamond, "let v = //data:base in $v + $v + deps($v)")
    assert diamond.expand_pattern.calls["//data:base"] == 1


def test_keywords_and_function_names_can_be_quoted_targets():
    g = nx.DiGraph()
    for name in ("//pkg:let", "//pkg:deps", "//pkg:in"):
        add(g, name)
    u = make_universe(g)
    assert q(u, '":let" + ":deps" + ":in"') == ["//pkg:deps", "//pkg:in", "//pkg:let"]


# -- cache-aware functions ---------------------------------------------------------------------


def test_cache_aware_functions(diamond):
    assert q(diamond, "built(//...)") == ["//data:base"]
    assert q(diamond, "stale(//...)") == ["//data:left"]
    assert q(diamond, "failed(deps(//exp:top))") == ["//exp:top"]
    assert q(diamond, "missing(//...)") == ["//data:right", "//exp/sub:island"]
    assert q(diamond, "running(//...)") == []
    assert q(diamond, "deps(//exp:top) - built(deps(//exp:top))") == ["//data:left", "//data:right", "//exp:top"]


def test_state_of_called_lazily_only_for_argument_labels(diamond):
    q(diamond, "deps(//exp:top) + stale(//data:left + //data:right)")
    assert diamond.state_calls == Counter({"//data:left": 1, "//data:right": 1})


def test_state_of_called_at_most_once_per_label(diamond):
    q(diamond, "built(//data/...) + stale(//data/...) + missing(deps(//data:left))")
    assert set(diamond.state_calls) == {"//data:base", "//data:left", "//data:right"}
    assert set(diamond.state_calls.values()) == {1}


def test_state_of_not_called_without_cache_functions(diamond):
    q(diamond, "deps(//...) + kind(train_lm, //...)")
    assert not diamond.state_calls


def test_state_of_bad_return_value():
    g = nx.DiGraph()
    add(g, "//a:x")
    u = QueryUniverse(g, lambda label: "SUCCESS", expander(g))
    with pytest.raises(ValueError, match="SUCCESS"):
        evaluate("built(//a:x)", u)


# -- deep graphs: nothing recurses -------------------------------------------------------------

N = 10_000


@pytest.fixture(scope="module")
def chain() -> QueryUniverse:
    """//c:n0 -> //c:n1 -> ... -> //c:n9999 (n0 depends on everything)."""
    g = nx.DiGraph()
    labels = [f"//c:n{i}" for i in range(N)]
    g.add_nodes_from(labels, kind="python_step", attrs={})
    g.add_edges_from(zip(labels, labels[1:], strict=False))
    return make_universe(g)


def test_long_chain_traversals(chain):
    top, bottom = "//c:n0", f"//c:n{N - 1}"
    result = q(chain, f"deps({top})")
    assert len(result) == N and result[0] == bottom and result[-1] == top
    assert len(q(chain, f"rdeps(//..., {bottom})")) == N
    assert len(q(chain, f"somepath({top}, {bottom})")) == N
    assert len(q(chain, f"allpaths({top}, {bottom})")) == N
    assert q(chain, f"deps({top}, 2)") == ["//c:n2", "//c:n1", "//c:n0"]
    assert q(chain, f"rdeps(//..., {bottom}, 1)") == [bottom, f"//c:n{N - 2}"]
    dot = format_result(result, chain, "graph")
    assert dot.count(" -> ") == N - 1


def test_long_operator_chain(chain):
    text = " + ".join(f"//c:n{i}" for i in range(3000))
    assert len(q(chain, text)) == 3000


def test_deep_nesting_is_a_query_error_not_a_crash():
    e = err("(" * 5000 + "a" + ")" * 5000)
    assert "nested too deeply" in e.message


# -- output formats ----------------------------------------------------------------------------


def test_output_label(diamond):
    result = q(diamond, "deps(//data:left)")
    assert format_result(result, diamond, "label") == "//data:base\n//data:left\n"
    assert format_result([], diamond, "label") == ""


def test_output_label_kind(diamond):
    result = q(diamond, "deps(//data:left)")
    assert format_result(result, diamond, "label_kind") == "download rule //data:base\ntokenize rule //data:left\n"


def test_output_json(diamond):
    doc = json.loads(run_query("deps(//exp:top, 1)", diamond, "json"))
    assert [o["label"] for o in doc] == ["//data:left", "//data:right", "//exp:top"]
    top = doc[-1]
    assert top["kind"] == "train_lm"
    assert top["deps"] == ["//data:left", "//data:right"]
    assert top["attrs"]["lr"] == 3e-4 and top["attrs"]["use_flash"] is True
    assert top["attrs"]["config"] == {"steps": 10}
    assert isinstance(top["attrs"]["extra"], str)
    assert doc[0]["deps"] == ["//data:base"]  # all direct deps, even outside the result


def test_output_graph(diamond):
    dot = run_query("deps(//exp:top) - //data:right", diamond, "graph")
    assert dot.startswith("digraph mygraph {\n") and dot.endswith("}\n")
    edges = set(re.findall(r'"([^"]+)" -> "([^"]+)"', dot))
    assert edges == {("//exp:top", "//data:left"), ("//data:left", "//data:base")}
    colours = {"//exp:top": "lightcoral", "//data:left": "khaki", "//data:base": "palegreen"}  # failed, stale, built
    for label, colour in colours.items():
        assert f'  "{label}" [fillcolor={colour}]\n' in dot
    assert "//data:right" not in dot


def test_output_location(diamond):
    diamond.location_of = lambda label: f"{label[2:].split(':')[0]}/BUILD.marin:3:1"
    text = run_query("deps(//exp:top, 1) - //data:right", diamond, "location")
    assert text == ("data/BUILD.marin:3:1: tokenize rule //data:left\nexp/BUILD.marin:3:1: train_lm rule //exp:top\n")


def test_set_is_the_union_of_its_words(diamond):
    assert run_query("set(//data:left //exp:top)", diamond) == "//data:left\n//exp:top\n"
    assert run_query("set()", diamond) == ""
    assert run_query("deps(set(//data:left))", diamond) == "//data:base\n//data:left\n"
    with pytest.raises(QueryError, match="separated by spaces"):
        run_query("set(//data:left, //exp:top)", diamond)


def test_unknown_output_lists_valid_formats(diamond):
    with pytest.raises(QueryError) as info:
        format_result([], diamond, "jsn")
    text = str(info.value)
    assert "did you mean 'json'?" in text
    for name in OUTPUT_FORMATS:
        assert name in text
    with pytest.raises(QueryError):
        check_output("xml")


def test_run_query_checks_output_before_evaluating(diamond):
    with pytest.raises(QueryError, match="unknown output format"):
        run_query("//nope:nothing", diamond, "xml")
    assert not diamond.expand_pattern.calls


# -- errors ------------------------------------------------------------------------------------


def test_unknown_function_suggests():
    e = err("deps(//a:b) + depz(//a:b)")
    assert str(e) == "query:1:15: unknown function 'depz'; did you mean 'deps'?"
    assert (e.line, e.column, e.position) == (1, 15, 14)
    assert "functions are:" in err("zzzzzz(x)").message
    assert "Bazel" in err("tests(//...)").message


def test_errors_with_positions():
    cases = {
        "": (1, "empty query"),
        "deps(//a:b": (11, "missing ')'"),
        "deps //a:b": (5, "missing '('"),
        "(//a:b + //c:d": (15, "expected ')' to close '(' at 1:1"),
        "//a:b )": (7, "unbalanced ')'"),
        "//a:b //c:d": (7, "expected an operator"),
        "//a:b +": (8, "expected an expression, found end of query"),
        "deps()": (6, "'deps' takes 1 or 2 arguments, got 0"),
        "rdeps(//a:b)": (12, "'rdeps' takes 2 or 3 arguments, got 1"),
        "deps(//a, 1, 2, 3)": (12, "'deps' takes 1 or 2 arguments, got 4"),
        "somepath(a, b, c)": (14, "'somepath' takes 2 arguments, got 3"),
        "built(a, b)": (8, "'built' takes 1 argument, got 2"),
        "deps(a, -1)": (9, "depth of 'deps' must be a non-negative integer, got '-1'"),
        "deps(a, x)": (9, "got 'x'"),
        "deps(a, 1.5)": (9, "got '1.5'"),
        "deps(a, (1))": (9, "got '('"),
        "some(a, 0)": (9, "count of 'some' must be a positive integer"),
        "kind('[a', x)": (7, "invalid regular expression '[a' in 'kind'"),
        "filter(a(b, x)": (9, "expected ',' or ')'"),
        "kind(deps(x), y)": (10, "expected ',' or ')'"),
        "kind(a+b, x)": (7, "quote the regex"),
        "attr((x), a, b)": (6, "must be a word"),
        "$v": (1, "undefined variable '$v'"),
        "let value = a in $valeu": (18, "undefined variable '$valeu'; did you mean '$value'?"),
        "let = a in b": (5, "expected a variable name after 'let'"),
        "let v a in b": (7, "expected '=' after 'let v'"),
        "let v = a $v": (11, "expected 'in'"),
        "a + in": (5, "keyword 'in'"),
        "//a:b & c": (7, "unexpected character '&'"),
        "'abc": (1, "unclosed quote"),
    }
    for text, (column, fragment) in cases.items():
        e = err(text)
        assert fragment in e.message, (text, str(e))
        assert e.column == column, (text, str(e))
        assert str(e).startswith(f"query:1:{column}: "), (text, str(e))


def test_error_line_and_column_on_multiline_query():
    e = err("deps(//a:b)\n  + depz(//c:d)")
    assert (e.line, e.column) == (2, 5)
    assert str(e).startswith("query:2:5: unknown function 'depz'")


def test_bad_regex_is_caught_before_any_evaluation(diamond):
    with pytest.raises(QueryError, match="invalid regular expression"):
        evaluate("deps(//data:base) + filter('(', //...)", diamond)
    assert not diamond.expand_pattern.calls


def test_regex_error_points_inside_quoted_word():
    e = err("filter('ab)', x)")
    assert e.column == 11  # the ')' inside the quotes


def test_query_error_without_position():
    e = QueryError("boom")
    assert str(e) == "query: boom" and e.line is None


def test_every_function_has_a_test_and_usage():
    source = Path(__file__).read_text()
    for name, spec in FUNCTIONS.items():
        assert f"{name}(" in source, name
        assert spec.usage.startswith(f"{name}(")


def test_module_is_pure():
    """The query package imports only the standard library, networkx and itself, and none of it imports
    ``session_universe``: that one module builds a session's universe (labels, cache states) for the CLI."""
    allowed = {"networkx", "marinbuild", "__future__"}
    package = Path(__file__).parent.parent / "marinbuild" / "query"
    pure = [path for path in package.glob("*.py") if path.name != "session_universe.py"]
    assert len(pure) == len(list(package.glob("*.py"))) - 1
    for path in pure:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
                assert "session_universe" not in [a.name for a in node.names], path.name
            for name in names:
                top = name.split(".")[0]
                assert top in allowed or top in sys.stdlib_module_names, (path.name, name)
                if top == "marinbuild":
                    assert name.startswith("marinbuild.query"), (path.name, name)
                    assert name != "marinbuild.query.session_universe", (path.name, name)


def test_labels_and_attr_over_label_list_and_label_keyed_dict_attributes(tmp_path):
    """Through the real loader: label, label_list and label_keyed_dict attributes hold ``Label``s."""
    from marinbuild.load import Loader, Workspace
    from marinbuild.query.session_universe import target_graph

    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.py").write_text(
        "from marinbuild.load import attr, rule\n"
        "def _impl(ctx):\n    return None\n"
        'tok = rule(implementation=_impl, attrs={"src": attr.label(), "files": attr.source_files()})\n'
        "train = rule(implementation=_impl, attrs={\n"
        '    "data": attr.label_keyed_dict(value=float), "deps": attr.label_list(), "steps": attr.int()})\n'
    )
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "x.txt").write_text("x\n")
    (tmp_path / "p" / "BUILD.marin").write_text(
        'load("//rules:r.py", "tok", "train")\n'
        'tok(name = "a", files = ["x.txt"])\n'
        'tok(name = "b", src = ":a")\n'
        'train(name = "t", data = {":a": 0.3, "//p:b": 0.7}, deps = [":b", ":a"], steps = 3)\n'
        'train(name = "u", deps = [":t"])\n'
    )
    loaded = Loader(Workspace(tmp_path, {})).load_all()
    universe = QueryUniverse(
        target_graph(loaded), lambda label: "missing", lambda word: [str(x) for x in loaded.expand([word])]
    )
    assert q(universe, "labels(deps, //p:t)") == ["//p:a", "//p:b"]
    assert q(universe, "labels(data, //p:t)") == ["//p:a", "//p:b"]
    assert q(universe, "labels(src, //p:b)") == ["//p:a"]
    assert q(universe, "labels(deps, //p:all)") == ["//p:a", "//p:b", "//p:t"]
    assert q(universe, "labels(files, //p:a)") == []  # source files are not targets of the graph
    assert q(universe, "labels(steps, //p:t)") == []
    assert q(universe, "attr(deps, '//p:a', //...)") == ["//p:t"]
    assert q(universe, "attr(deps, '^\\[//p:b, //p:a\\]$', //...)") == ["//p:t"]
    assert q(universe, "attr(data, '//p:b: 0.7', //...)") == ["//p:t"]
    assert q(universe, "attr(src, '^//p:a$', //...)") == ["//p:b"]
    data = json.loads(run_query("//p:t", universe, "json"))
    assert data[0]["attrs"]["data"] == {"//p:a": 0.3, "//p:b": 0.7}


def test_labels_finds_label_strings_among_dict_keys(diamond):
    g = nx.DiGraph()
    add(g, "//a:x")
    add(g, "//a:m", deps=("//a:x",), mixture={":x": 0.5})
    assert q(make_universe(g, default_package="//a"), "labels(mixture, //a:m)") == ["//a:x"]
