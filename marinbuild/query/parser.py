"""Query parser: recursive descent from tokens to a ``Query`` syntax tree, checking every call.

Grammar (Bazel's; functions listed in docs/cli.md)::

    expr    := primary (op primary)*            # op: union + intersect ^ except -
    primary := word | $name | ( expr ) | let name = expr in expr | func ( args )

Calls are checked against the function table and variables against the enclosing lets, so evaluation never starts on a
malformed query. Operator chains are parsed in a loop; only parentheses, lets and calls nest."""

from __future__ import annotations

import re
from collections.abc import Callable

from marinbuild.query.errors import QueryError, did_you_mean
from marinbuild.query.functions import BAZEL_ONLY, FUNCTIONS, Arg, FunctionSpec
from marinbuild.query.lexer import Tok, Token, tokenize
from marinbuild.query.syntax import KEYWORDS, OPERATORS, BinOp, Call, Expr, Let, Query, SetOf, Target, Var

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DIGITS = re.compile(r"[0-9]+\Z")
_OP_TOKENS = {Tok.PLUS: "union", Tok.CARET: "intersect", Tok.MINUS: "except"}


def parse(source: str) -> Query:
    """Parse query text; raises ``QueryError`` pointing at the first problem."""
    try:
        return _Parser(source).parse()
    except RecursionError:
        raise QueryError("query is nested too deeply", 0, source) from None


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = tokenize(source)
        self.i = 0
        self.scope: list[str] = []

    def error(self, message: str, pos: int) -> QueryError:
        return QueryError(message, pos, self.source)

    def where(self, pos: int) -> str:
        err = QueryError("", pos, self.source)
        return f"{err.line}:{err.column}"

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind is not Tok.EOF:
            self.i += 1
        return tok

    def expect(self, ok: Callable[[Token], bool], expected: str) -> Token:
        """Take the next token if ``ok`` says it is right; else the error ``<expected>, found <it>``."""
        tok = self.peek()
        if not ok(tok):
            raise self.error(f"{expected}, found {tok.describe()}", tok.pos)
        return self.advance()

    @staticmethod
    def operator(tok: Token) -> str | None:
        if tok.kind in _OP_TOKENS:
            return _OP_TOKENS[tok.kind]
        return OPERATORS[tok.text] if tok.kind is Tok.WORD and not tok.quoted and tok.text in OPERATORS else None

    def parse(self) -> Query:
        if self.peek().kind is Tok.EOF:
            raise self.error("empty query", 0)
        root = self.expr()
        tok = self.peek()
        if tok.kind is not Tok.EOF:
            if tok.kind is Tok.RPAREN:
                raise self.error("unbalanced ')': no '(' to close", tok.pos)
            raise self.error(
                f"unexpected {tok.describe()} after a complete expression; "
                "expected an operator (union/+, intersect/^, except/-) or end of query",
                tok.pos,
            )
        return Query(self.source, root)

    def expr(self) -> Expr:
        left = self.primary()
        while (op := self.operator(self.peek())) is not None:
            tok = self.advance()
            left = BinOp(op, left, self.primary(), tok.pos)
        return left

    def primary(self) -> Expr:
        tok = self.peek()
        if tok.kind is Tok.LPAREN:
            self.advance()
            inner = self.expr()
            self.expect(lambda t: t.kind is Tok.RPAREN, f"expected ')' to close '(' at {self.where(tok.pos)}")
            return inner
        if tok.kind is not Tok.WORD:
            raise self.error(f"expected an expression, found {tok.describe()}", tok.pos)
        if tok.quoted:
            self.advance()
            return Target(tok.text, tok.pos)
        word = tok.text
        if word == "let":
            return self.let()
        if word in KEYWORDS:
            raise self.error(
                f"expected an expression, found keyword '{word}' (quote it to mean a target named '{word}')", tok.pos
            )
        if word.startswith("$"):
            return self.var()
        if word == "set" and self.peek(1).kind is Tok.LPAREN:
            return self.set_of()
        if self.peek(1).kind is Tok.LPAREN:
            return self.call()
        if word in FUNCTIONS:
            raise self.error(
                f"missing '(' after function '{word}'; usage: {FUNCTIONS[word].usage} "
                f"(quote it to mean a target named '{word}')",
                tok.pos + len(word),
            )
        self.advance()
        return Target(word, tok.pos)

    def set_of(self) -> SetOf:
        """``set(word word ...)``: target patterns separated by spaces, no commas."""
        start = self.advance()
        self.advance()
        words: list[Target] = []
        while (tok := self.peek()).kind is not Tok.RPAREN:
            if tok.kind is not Tok.WORD:
                raise self.error(f"set() takes target patterns separated by spaces, found {tok.describe()}", tok.pos)
            self.advance()
            words.append(Target(tok.text, tok.pos))
        self.advance()
        return SetOf(tuple(words), start.pos)

    def var(self) -> Var:
        tok = self.advance()
        name = tok.text[1:]
        if not _NAME.match(name):
            raise self.error(f"bad variable reference {tok.text!r}: expected $ and a name", tok.pos)
        if name not in self.scope:
            hint = did_you_mean(name, self.scope).replace("'", "'$", 1)  # the suggestion spelled as a reference
            raise self.error(f"undefined variable '${name}'{hint}", tok.pos)
        return Var(name, tok.pos)

    def let(self) -> Let:
        let_tok = self.advance()
        name = self.expect(_is_name, "expected a variable name after 'let'").text
        self.expect(lambda t: t.kind is Tok.EQUALS, f"expected '=' after 'let {name}'")
        value = self.expr()
        self.expect(
            lambda t: t.kind is Tok.WORD and not t.quoted and t.text == "in",
            f"expected 'in' to finish 'let {name} = ...'",
        )
        self.scope.append(name)
        try:
            body = self.expr()
        finally:
            self.scope.pop()
        return Let(name, value, body, let_tok.pos)

    def call(self) -> Call:
        name_tok = self.advance()
        name = name_tok.text
        spec = FUNCTIONS.get(name)
        if spec is None:
            if name in BAZEL_ONLY:
                raise self.error(f"function '{name}' is Bazel's; marinbuild query does not support it", name_tok.pos)
            hint = did_you_mean(name, FUNCTIONS) or f"; functions are: {', '.join(sorted(FUNCTIONS))}"
            raise self.error(f"unknown function '{name}'{hint}", name_tok.pos)
        self.advance()  # (
        args: list[Expr | str | re.Pattern[str] | int] = []
        for index, (pname, kind) in enumerate(spec.params):
            tok = self.peek()
            if index > 0 or tok.kind is Tok.RPAREN:
                if tok.kind is Tok.RPAREN:
                    if index >= spec.required:
                        break
                    raise self.arg_count_error(spec, index, tok.pos)
                if tok.kind is not Tok.COMMA:
                    raise self.separator_error(spec, name_tok, index, tok)
                self.advance()
            args.append(self.argument(spec, index, pname, kind))
        tok = self.peek()
        if tok.kind is Tok.COMMA:
            raise self.arg_count_error(spec, len(args) + self.count_extra_args(), tok.pos)
        if tok.kind is not Tok.RPAREN:
            raise self.separator_error(spec, name_tok, len(args), tok)
        self.advance()
        return Call(name, tuple(args), name_tok.pos)

    def argument(self, spec: FunctionSpec, index: int, pname: str, kind: Arg) -> Expr | str | re.Pattern[str] | int:
        if kind is Arg.EXPR:
            return self.expr()
        tok = self.peek()
        if kind in (Arg.INT, Arg.POSITIVE):
            text = tok.text
            if tok.kind is Tok.MINUS and self.peek(1).kind is Tok.WORD:
                text = "-" + self.peek(1).text
            if tok.kind is Tok.WORD and _DIGITS.match(text):
                value = int(text)
                if kind is Arg.INT or value > 0:
                    self.advance()
                    return value
            shown = repr(text) if tok.kind in (Tok.WORD, Tok.MINUS) else tok.describe()
            raise self.error(f"{pname} of '{spec.name}' must be a {kind.value}, got {shown}", tok.pos)
        if tok.kind is not Tok.WORD:
            raise self.error(
                f"argument {index + 1} of '{spec.name}' ({pname}) must be a word, found {tok.describe()}; "
                f"usage: {spec.usage}",
                tok.pos,
            )
        self.advance()
        if kind is Arg.WORD:
            return tok.text
        try:
            return re.compile(tok.text)
        except re.error as exc:
            offset = tok.pos + (1 if tok.quoted else 0) + (exc.pos or 0)
            raise self.error(f"invalid regular expression {tok.text!r} in '{spec.name}': {exc.msg}", offset) from None

    def separator_error(self, spec: FunctionSpec, name_tok: Token, index: int, tok: Token) -> QueryError:
        hint = ""
        if index > 0 and spec.params[index - 1][1] in (Arg.WORD, Arg.REGEX) and tok.kind is not Tok.EOF:
            hint = f" (quote the {spec.params[index - 1][0]} if it contains {tok.text!r})"
        opened = self.where(name_tok.pos)
        if tok.kind is Tok.EOF:
            return self.error(f"missing ')' to close '{spec.name}(' opened at {opened}", tok.pos)
        what = "',' or ')'" if index < len(spec.params) else "')'"
        return self.error(
            f"expected {what} in '{spec.name}(' opened at {opened}, found {tok.describe()}{hint}", tok.pos
        )

    def arg_count_error(self, spec: FunctionSpec, got: int, pos: int) -> QueryError:
        plural = "" if spec.arity() == "1" else "s"
        return self.error(f"'{spec.name}' takes {spec.arity()} argument{plural}, got {got}; usage: {spec.usage}", pos)

    def count_extra_args(self) -> int:
        """Top-level commas from here to the call's ')' (or end): how many more arguments follow."""
        depth, extra = 0, 0
        for tok in self.tokens[self.i :]:
            if tok.kind is Tok.LPAREN:
                depth += 1
            elif tok.kind is Tok.RPAREN:
                if depth == 0:
                    break
                depth -= 1
            elif tok.kind is Tok.COMMA and depth == 0:
                extra += 1
        return extra


def _is_name(tok: Token) -> bool:
    return tok.kind is Tok.WORD and not tok.quoted and bool(_NAME.match(tok.text)) and tok.text not in KEYWORDS
