"""Writes the quickstart corpus: short synthetic stories, made here and nowhere else.

    python experiments/quickstart/make_corpus.py            # rewrite data/ (byte-identical every time)
    python experiments/quickstart/make_corpus.py --check    # exit 1 if data/ differs from what it would write

Each story follows a small grammar (a character, a place, a wish, a problem and its
ending) with names, objects and phrasings drawn from fixed lists by a seeded random
generator, so a tiny model can learn something real from a few hundred KB of text and
its loss falls visibly within a hundred steps. The files are JSON lines with ``id`` and
``text`` fields: four gzipped training shards and one plain validation file, so both
formats the ``tokenize`` rule reads are exercised. Gzip headers carry no timestamp or
file name, so the output is byte-identical on every run and machine.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import sys
from pathlib import Path

SEED = 20240611
TRAIN_SHARDS = 4
STORIES_PER_SHARD = 450
VALIDATION_STORIES = 200

NAMES = ["Mia", "Tom", "Lily", "Ben", "Zoe", "Max", "Anna", "Leo", "Ruby", "Sam", "Nora", "Finn", "Ivy", "Jack"]
ANIMALS = ["cat", "dog", "rabbit", "fox", "bird", "bear", "mouse", "duck", "frog", "owl"]
PLACES = [
    "the river",
    "the big forest",
    "a small town",
    "the old farm",
    "the sunny hill",
    "the quiet lake",
    "the busy market",
    "the garden",
    "the beach",
    "the green valley",
]
OBJECTS = [
    "a red ball",
    "a shiny stone",
    "a blue kite",
    "a little boat",
    "a warm hat",
    "a golden key",
    "a yellow flower",
    "a wooden box",
    "a silver bell",
    "a big apple",
]
FEELINGS = ["happy", "sad", "scared", "curious", "tired", "proud", "excited", "calm"]
WEATHER = ["sunny", "rainy", "windy", "cold", "warm", "foggy"]
PROBLEMS = [
    ("the {obj} fell into the water", "a kind {friend} helped to pull it out"),
    ("a strong wind took the {obj} away", "they ran after it and caught it at last"),
    ("the {obj} was stuck in a tall tree", "a friendly {friend} climbed up and brought it down"),
    ("the {obj} got lost in the grass", "they looked very carefully and found it again"),
    ("a storm came and the sky was dark", "they waited under a roof until the sun came back"),
    ("the path was long and the night was near", "the moon showed them the way home"),
]
ENDINGS = [
    "From that day on, {name} always took good care of {obj_short}.",
    '{name} smiled and said, "Thank you, my friend."',
    "That night, {name} slept well and dreamed of {place}.",
    "{name} learned that it is good to ask for help.",
    "And {name} and the {friend} were friends forever.",
]


def _story(rng: random.Random) -> str:
    name = rng.choice(NAMES)
    animal = rng.choice(ANIMALS)
    friend = rng.choice([a for a in ANIMALS if a != animal])
    place = rng.choice(PLACES)
    obj = rng.choice(OBJECTS)
    obj_short = "the " + obj.split(" ", 1)[1]
    feeling = rng.choice(FEELINGS)
    problem, solution = rng.choice(PROBLEMS)
    sentences = [
        rng.choice(
            [
                f"Once upon a time, there was a little {animal} named {name}.",
                f"{name} was a small {animal} who lived near {place}.",
                f"There once was a {animal} called {name}.",
            ]
        ),
        f"One {rng.choice(WEATHER)} day, {name} went to {place}.",
        rng.choice(
            [
                f"There, {name} found {obj}.",
                f"{name} wanted to play with {obj}.",
                f"{name} had {obj} that {rng.choice(['mom', 'dad', 'grandma'])} gave as a gift.",
            ]
        ),
        f"{name} felt {feeling}.",
        f"But then {problem.format(obj=obj_short.removeprefix('the '), friend=friend)}.",
        f"In the end, {solution.format(friend=friend)}.",
        rng.choice(ENDINGS).format(name=name, obj_short=obj_short, place=place, friend=friend),
    ]
    return " ".join(s[0].upper() + s[1:] for s in sentences)


def _lines(rng: random.Random, count: int, prefix: str) -> bytes:
    out = io.StringIO()
    for i in range(count):
        out.write(json.dumps({"id": f"{prefix}-{i:05d}", "text": _story(rng)}) + "\n")
    return out.getvalue().encode()


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


def corpus_files() -> dict[str, bytes]:
    """The corpus: file name (relative to data/) -> exact bytes."""
    rng = random.Random(SEED)
    files = {}
    for shard in range(TRAIN_SHARDS):
        files[f"train-{shard:05d}.jsonl.gz"] = _gzip(_lines(rng, STORIES_PER_SHARD, f"train{shard}"))
    files["validation.jsonl"] = _lines(rng, VALIDATION_STORIES, "validation")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "data"))
    parser.add_argument("--check", action="store_true", help="compare with data/ instead of writing")
    args = parser.parse_args(argv)
    out = Path(args.out)
    files = corpus_files()
    if args.check:
        stale = [n for n, b in files.items() if not (out / n).is_file() or (out / n).read_bytes() != b]
        if stale:
            print(f"differs from make_corpus.py: {', '.join(stale)}", file=sys.stderr)
            return 1
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (out / name).write_bytes(data)
    total = sum(len(gzip.decompress(b)) if n.endswith(".gz") else len(b) for n, b in files.items())
    print(f"wrote {len(files)} files to {out} ({total / 1024:.0f} KiB of JSON lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
