"""Hello world: generate numbers, then compute their sum, min and max.

Run: python experiments/tutorials/hello_world.py --prefix DIR
Written against Marin's executor API; only the import line differs from Marin's tutorial.
"""

import json
import os
from dataclasses import dataclass

from marinbuild.executor import ExecutorStep, executor_main, output_path_of, this_output_path, versioned


@dataclass(frozen=True)
class GenerateConfig:
    n: int
    seed: int
    output_path: str


@dataclass(frozen=True)
class StatsConfig:
    input_path: str
    output_path: str


def generate_numbers(config: GenerateConfig) -> dict:
    """Write n pseudo-random integers, one JSON list, to numbers.json."""
    state = config.seed
    numbers = []
    for _ in range(config.n):
        state = (1103515245 * state + 12345) % (2**31)
        numbers.append(state % 1000)
    os.makedirs(config.output_path, exist_ok=True)
    with open(os.path.join(config.output_path, "numbers.json"), "w") as f:
        json.dump(numbers, f)
    return {"count": len(numbers)}


def compute_stats(config: StatsConfig) -> dict:
    """Read numbers.json and write their sum, min and max to stats.json."""
    with open(os.path.join(config.input_path, "numbers.json")) as f:
        numbers = json.load(f)
    stats = {"sum": sum(numbers), "min": min(numbers), "max": max(numbers)}
    os.makedirs(config.output_path, exist_ok=True)
    with open(os.path.join(config.output_path, "stats.json"), "w") as f:
        json.dump(stats, f)
    return stats


data = ExecutorStep(
    name="hello_world/data",
    fn=generate_numbers,
    config=GenerateConfig(n=versioned(100), seed=versioned(0), output_path=this_output_path()),
)

stats = ExecutorStep(
    name="hello_world/stats",
    fn=compute_stats,
    config=StatsConfig(input_path=output_path_of(data), output_path=this_output_path()),
)

if __name__ == "__main__":
    executor_main(steps=[stats], description="Generate numbers and compute their statistics.")
