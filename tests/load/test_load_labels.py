"""Labels and target patterns (pure functions)."""

from __future__ import annotations

import pickle

import pytest

from marinbuild.core.labels import (
    Label,
    LabelError,
    PatternError,
    expand_patterns,
    parse_label,
    parse_pattern,
)


@pytest.mark.parametrize(
    ("text", "current", "expected"),
    [
        ("//experiments/tutorials:hello_world", None, Label("experiments/tutorials", "hello_world")),
        ("//experiments/tutorials", None, Label("experiments/tutorials", "tutorials")),
        ("//:root_target", None, Label("", "root_target")),
        (":x", "pkg/sub", Label("pkg/sub", "x")),
        ("x", "pkg", Label("pkg", "x")),
        ("data/a.jsonl", "pkg", Label("pkg", "data/a.jsonl")),
        ("//pkg:data/a.jsonl", None, Label("pkg", "data/a.jsonl")),
        ("@marinbuild//rules:python.py", None, Label("rules", "python.py", "marinbuild")),
        ("//a-b/c_d.e:n+1=2,x~y@z", None, Label("a-b/c_d.e", "n+1=2,x~y@z")),
    ],
)
def test_parse_label(text: str, current: str | None, expected: Label) -> None:
    assert parse_label(text, current) == expected


@pytest.mark.parametrize(
    ("label", "text"),
    [
        (Label("experiments/tutorials", "hello_world"), "//experiments/tutorials:hello_world"),
        (Label("", "x"), "//:x"),
        (Label("rules", "python.py", "marinbuild"), "@marinbuild//rules:python.py"),
    ],
)
def test_label_str_round_trips(label: Label, text: str) -> None:
    assert str(label) == text
    assert parse_label(text) == label


@pytest.mark.parametrize(
    ("text", "current", "words"),
    [
        ("", None, ["empty label"]),
        ("//", None, ["missing package or target name"]),
        ("//a/../b:c", None, ["'..'"]),
        ("//a/./b:c", None, ["'.'"]),
        ("//a:../x", None, ["'..'", "escape"]),
        ("//a:b/../c", None, ["'..'"]),
        ("//a:./c", None, ["'.'"]),
        ("/abs/path", None, ["absolute paths"]),
        ("/abs/path", "pkg", ["absolute paths"]),
        ("//a\\b:c", None, ["backslash"]),
        ("//a/:b", None, ["end with '/'"]),
        ("//a/", None, ["end with '/'"]),
        ("//a:b/", None, ["end with '/'"]),
        ("//a:/b", None, ["start with '/'"]),
        ("//a//b:c", None, ["package has an empty segment"]),
        ("//a:b//c", None, ["target name has an empty segment"]),
        ("//a b:c", None, ["illegal character ' '"]),
        ("//a:b*c", None, ["illegal character '*'"]),
        ("//a:b:c", None, ["more than one ':'"]),
        ("//a:", None, ["empty target name"]),
        (":x", None, ["needs a current package"]),
        ("x", None, ["needs a current package"]),
        ("a:b", "pkg", ["misplaced ':'"]),
        ("@re po//a:b", None, ["invalid repository name"]),
        ("@repo", None, ["'@repo//pkg:name'"]),
        (" //a:b", None, ["whitespace"]),
    ],
)
def test_parse_label_errors(text: str, current: str | None, words: list[str]) -> None:
    with pytest.raises(LabelError) as info:
        parse_label(text, current)
    message = str(info.value)
    assert repr(text) in message or text == ""
    for word in words:
        assert word in message


def test_parse_label_rejects_non_strings() -> None:
    with pytest.raises(LabelError, match="expected a label string"):
        parse_label(3)  # type: ignore[arg-type]


def test_label_properties_order_hash_and_pickle() -> None:
    a = parse_label("//b:a")
    b = Label("a", "z")
    assert sorted([a, b]) == [b, a]
    assert {a: 1}[Label("b", "a")] == 1
    assert Label("pkg", "data/x.jsonl").path == "pkg/data/x.jsonl"
    assert Label("", "x").path == "x"
    copy = pickle.loads(pickle.dumps(a))
    assert copy == a and hash(copy) == hash(a)
    assert repr(a) == "Label('//b:a')"


@pytest.mark.parametrize(
    ("text", "current", "kind", "package", "negative"),
    [
        ("//...", "", "recursive", "", False),
        ("//experiments/...", "", "recursive", "experiments", False),
        ("-//experiments/old/...", "", "recursive", "experiments/old", True),
        ("//pkg:all", "", "all", "pkg", False),
        ("//pkg:*", "", "all", "pkg", False),
        ("//pkg:x", "", "label", "pkg", False),
        ("//pkg", "", "label", "pkg", False),
        (":x", "here", "label", "here", False),
        ("...", "here", "recursive", "here", False),
        ("sub/...", "here", "recursive", "here/sub", False),
        ("-:x", "here", "label", "here", True),
    ],
)
def test_parse_pattern(text: str, current: str, kind: str, package: str, negative: bool) -> None:
    pattern = parse_pattern(text, current)
    assert (pattern.kind, pattern.package, pattern.negative) == (kind, package, negative)
    assert str(pattern) == text


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ["empty pattern"]),
        ("-", ["empty"]),
        ("//a/../b/...", ["'..'"]),
        ("//a:x/...", ["'...'"]),
        ("/abs/...", ["absolute paths"]),
        ("@r//a:b", ["other repositories"]),
        ("//a:b:c", ["more than one ':'"]),
    ],
)
def test_parse_pattern_errors(text: str, words: list[str]) -> None:
    with pytest.raises(LabelError) as info:
        parse_pattern(text)
    for word in words:
        assert word in str(info.value)


PACKAGES = {
    "exp": ["a", "b"],
    "exp/sub": ["c"],
    "experiments": ["d"],
    "": ["top"],
}


def labels(*texts: str) -> list[Label]:
    return [parse_label(t) for t in texts]


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (["//..."], ["//:top", "//exp:a", "//exp:b", "//exp/sub:c", "//experiments:d"]),
        (["//exp/..."], ["//exp:a", "//exp:b", "//exp/sub:c"]),
        (["//exp:all"], ["//exp:a", "//exp:b"]),
        (["//exp:*"], ["//exp:a", "//exp:b"]),
        (["//exp:b", "//exp:a", "//exp:b"], ["//exp:b", "//exp:a"]),
        (["//...", "-//exp/..."], ["//:top", "//experiments:d"]),
        (["//exp/...", "-//exp:a"], ["//exp:b", "//exp/sub:c"]),
        (["//exp:a", "-//exp:a", "//exp:a"], ["//exp:a"]),
        (["-//exp/...", "//exp:a"], ["//exp:a"]),
        (["//exp/sub"], []),  # //exp/sub means //exp/sub:sub, which does not exist
    ],
)
def test_expand_patterns(patterns: list[str], expected: list[str]) -> None:
    if not expected:
        with pytest.raises(PatternError, match="no such target '//exp/sub:sub'"):
            expand_patterns(patterns, PACKAGES)
        return
    assert expand_patterns(patterns, PACKAGES) == labels(*expected)


def test_expand_patterns_accepts_labels_and_relative_patterns() -> None:
    mapping = {"exp": [Label("exp", "a"), Label("exp", "b")]}
    assert expand_patterns([":b", "..."], mapping, current_package="exp") == labels("//exp:b", "//exp:a")


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("//nope:x", ["no such package 'nope'"]),
        ("//nope:all", ["no such package 'nope'"]),
        ("//exp:zz", ["no such target '//exp:zz'", "'zz'"]),
        ("//exp:aa", ["no such target", "did you mean 'a'"]),
        ("//expx", ["no such package 'expx'", "did you mean 'exp'"]),
        ("//nope/...", ["no packages beneath '//nope'"]),
        ("-//nope:x", ["no such package 'nope'"]),
    ],
)
def test_expand_patterns_errors_name_the_missing_thing(pattern: str, words: list[str]) -> None:
    with pytest.raises(PatternError) as info:
        expand_patterns([pattern], PACKAGES)
    for word in words:
        assert word in str(info.value)


def test_negative_recursive_pattern_over_nothing_is_fine() -> None:
    assert expand_patterns(["//exp:a", "-//nope/..."], PACKAGES) == labels("//exp:a")


def test_expand_patterns_on_empty_workspace() -> None:
    assert expand_patterns(["//..."], {}) == []


@pytest.mark.parametrize(
    "text",
    ["//a:b", "//a/b:c.txt", ":x", ":data/a.jsonl", "data/a.jsonl", "x", "//:root", "//a", "//a:..", "..", "./x",
     "a/../b", "/abs", "a/", "//a/..:x", "//a:b/../c", "//a:.hidden", "@r//a:b", ":a..b", "//a:b:c", "//a//b:c",
     "//a:", ":", "a:b", "a b", " a", "//a:b\n"],
)  # fmt: skip
def test_attribute_labels_parse_exactly_as_parse_label(text: str) -> None:
    from marinbuild.core.labels import parse_label
    from marinbuild.load.attrs import AttrValueError, attr

    label_attr = attr.label()  # what a rule's label attribute converts a value with

    try:
        expected = parse_label(text, "pkg")
    except LabelError as exc:
        with pytest.raises(AttrValueError) as info:
            label_attr.convert(text, "pkg")
        assert str(info.value) == str(exc)
        return
    if expected.repo:
        with pytest.raises(AttrValueError):
            label_attr.convert(text, "pkg")
        return
    assert label_attr.convert(text, "pkg") == expected
