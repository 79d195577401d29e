"""What a step's folder costs the file system: ``mkdir`` plus N file creations, per step.

A cold marinbuild step makes its output folder and six files (lease, status, info, action
record, artifact, output), as Marin's layout asks; a ninja action writes one file into one
shared folder. This loop does the same file-system work with no Python engine around it, so
the README can say how much of a cold run is the disk, and how much that varies by folder.

    python bench/fs_bench.py [--dirs DIR ...] [--steps 1000] [--files 6] [--after-delete [--settle 30]]

Prints, per folder, wall and kernel (system) time per step, for one shared folder (ninja's
layout) and a folder per step (Marin's), then removes what it wrote.

``--after-delete`` measures instead how deleting files changes the cost of creating them: the
folder-per-step layout in a fresh folder; again right after deleting that first one; and again
``--settle`` seconds later. (On this project's VM, ext4 mounted with ``discard``, creations right
after a delete of a few thousand files cost several times more; this is why ``bench/run.py`` and
``bench/engine_bench.py`` delete old outputs only when they end.)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time

DATA = b"x" * 200


def one_layout(root: str, steps: int, files: int, per_step_folder: bool) -> tuple[float, float]:
    """(wall, kernel) seconds per step for writing ``files`` files per step."""
    os.makedirs(os.path.join(root, "shared"), exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for i in range(steps):
        if per_step_folder:
            folder = os.path.join(root, "steps", f"n{i}-abcdef")
            os.makedirs(folder)
            names = [os.path.join(folder, f"f{k}") for k in range(files)]
        else:
            names = [os.path.join(root, "shared", f"n{i}")]
        for name in names:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, DATA)
            os.close(fd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    return wall / steps, (after.ru_stime - before.ru_stime) / steps


def after_delete(base: str, steps: int, files: int, settle: float) -> None:
    """The folder-per-step layout: fresh, right after deleting a copy of it, and ``settle`` seconds later."""
    label = f"a folder per step, {files} files (Marin)"
    roots = [tempfile.mkdtemp(prefix="marinbuild-fs-bench-", dir=base) for _ in range(3)]
    try:
        wall, kernel = one_layout(roots[0], steps, files, True)
        print(f"| {base} | {label} | fresh | {wall * 1e3:.3f} ms | {kernel * 1e3:.3f} ms |")
        shutil.rmtree(roots[0])
        wall, kernel = one_layout(roots[1], steps, files, True)
        print(
            f"| {base} | {label} | right after deleting {steps * (files + 1)} entries | {wall * 1e3:.3f} ms "
            f"| {kernel * 1e3:.3f} ms |"
        )
        time.sleep(settle)  # the point of this row: what the file system is like once the delete has settled
        wall, kernel = one_layout(roots[2], steps, files, True)
        print(f"| {base} | {label} | {settle:g} s after that | {wall * 1e3:.3f} ms | {kernel * 1e3:.3f} ms |")
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dirs", nargs="+", default=[tempfile.gettempdir()], help="folders to measure under (default: the temp dir)"
    )
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--files", type=int, default=6, help="files per step in the folder-per-step layout")
    parser.add_argument(
        "--after-delete",
        action="store_true",
        help="measure file creation fresh, right after a delete, and once the delete settled",
    )
    parser.add_argument("--settle", type=float, default=30.0, help="seconds to let a delete settle (--after-delete)")
    args = parser.parse_args()

    print(f"{args.steps} steps; load average {os.getloadavg()[0]:.2f}\n")
    if args.after_delete:
        print("| under | layout | when | wall per step | kernel per step |")
        print("| --- | --- | --- | ---: | ---: |")
        for base in args.dirs:
            after_delete(base, args.steps, args.files, args.settle)
        return
    print("| under | layout | wall per step | kernel per step |")
    print("| --- | --- | ---: | ---: |")
    for base in args.dirs:
        root = tempfile.mkdtemp(prefix="marinbuild-fs-bench-", dir=base)
        try:
            for per_step, label in (
                (False, "one shared folder, 1 file per step (ninja)"),
                (True, f"a folder per step, {args.files} files (Marin)"),
            ):
                wall, kernel = one_layout(root, args.steps, 1 if not per_step else args.files, per_step)
                print(f"| {base} | {label} | {wall * 1e3:.3f} ms | {kernel * 1e3:.3f} ms |")
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
