"""The JSON encoders give exactly the text ``json.dumps`` gives with Marin's encoder."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import pathlib
import random

from marinbuild.core.jsonenc import MarinJsonEncoder, dumps_sorted


class Color(enum.Enum):
    RED = "red"
    TWO = 2


class Level(enum.IntEnum):
    HIGH = 3


class Text(str):
    pass


class Opaque:
    def __str__(self) -> str:
        return "opaque"


@dataclasses.dataclass
class Config:
    x: int
    items: list
    extra: dict = dataclasses.field(default_factory=dict)


def _random_value(rng: random.Random, depth: int = 0):
    choice = rng.randrange(16 if depth < 4 else 9)
    if choice == 0:
        return rng.choice(["", "a", 'é\n"x', Text("sub"), "\u2603"])
    if choice == 1:
        return None
    if choice == 2:
        return rng.choice([True, False])
    if choice == 3:
        return rng.choice([0, -5, 10**20, Level.HIGH])
    if choice == 4:
        return rng.choice([0.1, -0.0, 1e300, float("nan"), float("inf"), -float("inf"), 3.0])
    if choice == 5:
        return rng.choice([Color.RED, Color.TWO, datetime.timedelta(seconds=5), pathlib.PurePath("/a/b")])
    if choice == 6:
        return Opaque()
    if choice in (7, 8):
        return rng.choice([[], {}, ()])
    if choice in (9, 10):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if choice == 11:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    if choice in (12, 13):
        keys = ["k", "a", Text("s"), 1, 2.5, True, False, None, "z"]
        return {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return Config(rng.randrange(3), [_random_value(rng, depth + 1)], {"q": _random_value(rng, depth + 1)})


def _outcome(encode, value):
    try:
        return encode(value)
    except TypeError as exc:  # sorting keys of mixed types
        return type(exc)


def test_sorted_texts_are_jsons():
    rng = random.Random(7)
    for _ in range(5000):
        value = _random_value(rng)
        expected = _outcome(lambda v: json.dumps(v, sort_keys=True, cls=MarinJsonEncoder), value)
        assert _outcome(dumps_sorted, value) == expected
