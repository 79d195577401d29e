"""A ``tokenize`` target's attribute mistakes are load errors: the real CLI in a child process exits 2 with one
line naming the BUILD file, the line and column of the attribute at fault (or of the call), and runs nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from workspaces import assert_one_line_load_error, write_workspace

TRAIN = 'train = [":docs"]'
# (what is wrong, the attributes after name, the attribute the error points at or None for the call, message)
CASES = [
    ("no tokenizer", TRAIN, None, "give exactly one of tokenizer (a train_tokenizer target) and tokenizer_name"),
    ("two tokenizers", f'{TRAIN}, tokenizer = ":tok", tokenizer_name = "gpt2"', "tokenizer_name", "exactly one of"),
    (
        "negative shard size",
        f'{TRAIN}, tokenizer_name = "gpt2", shard_bytes = -1',
        "shard_bytes",
        "shard_bytes must be at least 0, got -1",
    ),
    (
        "empty batches",
        f'{TRAIN}, tokenizer_name = "gpt2", batch_size = 0',
        "batch_size",
        "batch_size must be at least 1, got 0",
    ),
    ("no text key", f'{TRAIN}, tokenizer_name = "gpt2", text_key = ""', "text_key", "text_key is empty"),
]


def _build_file(attrs: str) -> str:
    return textwrap.dedent(f"""\
        load("@marinbuild//rules:data.py", "raw_data")
        load("@marinbuild//rules:tokenize.py", "tokenize")

        raw_data(name = "docs", srcs = ["docs.jsonl"])
        tokenize(
            name = "tok_cache",
            {attrs},
        )
        """)


def _location(text: str, attribute: str | None) -> str:
    if attribute is None:
        return "5:1"
    line = text.splitlines()[6]
    return f"7:{line.index(attribute + ' =') + 1}"


@pytest.mark.parametrize(("attrs", "attribute", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_tokenize_attribute_mistake_is_a_load_error(
    tmp_path: Path, attrs: str, attribute: str | None, message: str
) -> None:
    text = _build_file(attrs)
    root = write_workspace(tmp_path / "ws", {"pipe/BUILD.marin": text, "pipe/docs.jsonl": '{"text": "a"}\n'})
    assert_one_line_load_error(root, "//pipe:tok_cache", f"pipe/BUILD.marin:{_location(text, attribute)}", message)
