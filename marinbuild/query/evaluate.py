"""Query evaluation: a parsed ``Query`` against a ``QueryUniverse`` -> labels, dependencies first, ties by label.

Values are frozensets of labels, ordered once at the end. Each distinct target pattern is expanded once and each label's
cache state asked for at most once. Operator chains are evaluated in a loop and graph work in ``graphops`` is iterative
(no recursion on deep graphs)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from marinbuild.query.errors import QueryError
from marinbuild.query.functions import CACHE_STATES
from marinbuild.query.graphops import backward_closure, forward_closure, some_path
from marinbuild.query.parser import parse
from marinbuild.query.syntax import BinOp, Call, Expr, Let, Query, SetOf, Target, Var
from marinbuild.query.universe import QueryUniverse
from marinbuild.query.values import attr_text, label_strings, resolve_label

Labels = frozenset[str]


def evaluate(query: str | Query, universe: QueryUniverse) -> list[str]:
    """``QueryError`` for a malformed query or evaluation error; ``expand_pattern``'s, ``state_of``'s pass through."""
    parsed = parse(query) if isinstance(query, str) else query
    evaluator = _Evaluator(parsed, universe)
    try:
        result = evaluator.eval(parsed.root, {})
    except RecursionError:
        raise QueryError("query is nested too deeply", 0, parsed.source) from None
    return universe.order(result)


class _Evaluator:
    def __init__(self, query: Query, universe: QueryUniverse) -> None:
        self.source = query.source
        self.universe = universe
        self.graph = universe.graph
        self.patterns: dict[str, Labels] = {}
        self.states: dict[str, str] = {}

    def error(self, message: str, pos: int) -> QueryError:
        return QueryError(message, pos, self.source)

    def eval(self, node: Expr, env: Mapping[str, Labels]) -> Labels:
        if isinstance(node, Target):
            if node.word not in self.patterns:
                self.patterns[node.word] = frozenset(self.universe.expand_pattern(node.word))
            return self.patterns[node.word]
        if isinstance(node, Var):
            return env[node.name]
        if isinstance(node, Let):
            return self.eval(node.body, {**env, node.name: self.eval(node.value, env)})
        if isinstance(node, BinOp):
            return self.binop(node, env)
        if isinstance(node, SetOf):
            return frozenset().union(*(self.eval(word, env) for word in node.words))
        return getattr(self, "fn_" + node.name)(node, env)

    def binop(self, node: BinOp, env: Mapping[str, Labels]) -> Labels:
        spine: list[BinOp] = []
        left: Expr = node
        while isinstance(left, BinOp):
            spine.append(left)
            left = left.left
        acc = self.eval(left, env)
        for op in reversed(spine):
            right = self.eval(op.right, env)
            if op.op == "union":
                acc = acc | right
            elif op.op == "intersect":
                acc = acc & right
            else:
                acc = acc - right
        return acc

    def expr_arg(self, node: Call, index: int, env: Mapping[str, Labels]) -> Labels:
        arg = node.args[index]
        assert not isinstance(arg, (str, int, re.Pattern))
        return self.eval(arg, env)

    def opt_int(self, node: Call, index: int) -> int | None:
        if index >= len(node.args):
            return None
        value = node.args[index]
        assert isinstance(value, int)
        return value

    def fn_deps(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        return frozenset(forward_closure(self.graph, self.expr_arg(node, 0, env), self.opt_int(node, 1)))

    def fn_rdeps(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        universe = forward_closure(self.graph, self.expr_arg(node, 0, env))
        start = self.expr_arg(node, 1, env) & universe
        return frozenset(backward_closure(self.graph, start, self.opt_int(node, 2), within=universe))

    def fn_somepath(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        return frozenset(some_path(self.graph, self.expr_arg(node, 0, env), self.expr_arg(node, 1, env)))

    def fn_allpaths(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        sources, targets = self.expr_arg(node, 0, env), self.expr_arg(node, 1, env)
        return frozenset(forward_closure(self.graph, sources) & backward_closure(self.graph, targets))

    def fn_some(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        labels = self.expr_arg(node, 0, env)
        if not labels:
            raise self.error("some(): argument set is empty", node.pos)
        return frozenset(self.universe.order(labels)[: self.opt_int(node, 1) or 1])

    def fn_kind(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        pattern = node.args[0]
        assert isinstance(pattern, re.Pattern)
        kind_of = self.universe.kind_of
        return frozenset(x for x in self.expr_arg(node, 1, env) if pattern.search(f"{kind_of(x)} rule"))

    def fn_attr(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        name, pattern = node.args[0], node.args[1]
        assert isinstance(name, str) and isinstance(pattern, re.Pattern)
        out = set()
        for label in self.expr_arg(node, 2, env):
            attrs = self.universe.attrs_of(label)
            if name in attrs and pattern.search(attr_text(attrs[name])):
                out.add(label)
        return frozenset(out)

    def fn_filter(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        pattern = node.args[0]
        assert isinstance(pattern, re.Pattern)
        return frozenset(x for x in self.expr_arg(node, 1, env) if pattern.search(x))

    def fn_labels(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        name = node.args[0]
        assert isinstance(name, str)
        out = set()
        for owner in sorted(self.expr_arg(node, 1, env)):
            refs = self.universe.labels_in(owner, name)
            if refs is None:
                attrs = self.universe.attrs_of(owner)
                if name not in attrs:
                    continue
                refs = label_strings(attrs[name])
            for ref in refs:
                if ref in self.graph:
                    out.add(ref)
                    continue
                resolved = resolve_label(ref, owner)
                if resolved in self.graph:
                    out.add(resolved)
                elif ref.startswith(("//", ":", "@")):  # meant as a label
                    raise self.error(
                        f"labels(): {ref!r} in attribute '{name}' of {owner} is not a target in the graph", node.pos
                    )
        return frozenset(out)

    def state(self, label: str) -> str:
        if label not in self.states:
            state = self.universe.state_of(label)
            if state not in CACHE_STATES:
                raise ValueError(f"state_of({label!r}) returned {state!r}; expected one of {', '.join(CACHE_STATES)}")
            self.states[label] = state
        return self.states[label]

    def cache_filter(self, node: Call, env: Mapping[str, Labels]) -> Labels:
        return frozenset(x for x in sorted(self.expr_arg(node, 0, env)) if self.state(x) == node.name)


for _state in CACHE_STATES:
    setattr(_Evaluator, "fn_" + _state, _Evaluator.cache_filter)
