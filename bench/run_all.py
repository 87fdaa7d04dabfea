"""Runs every benchmark in bench/ (each `bench_*.py` exposing `run() -> list[dict]`) and prints one table.

Each row names the figure, this project's value, the peer or yardstick measured in the same run, the
ratio and the goal. `make bench` calls this; `python bench/run_all.py NAME...` runs a subset.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from core.formatting import format_number  # noqa: E402 - the repository is importable only from here on

COLUMNS = ("benchmark", "figure", "value", "unit", "peer", "ratio", "goal")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # registered: a benchmark's process pool pickles its functions by module name
    spec.loader.exec_module(module)
    return module


def _fmt(value) -> str:
    return format_number(value, digits=3, grouped=True, missing="")


def print_table(rows: list[dict]) -> None:
    cells = [[_fmt(row.get(c)) for c in COLUMNS] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))


def main(names: list[str]) -> int:
    sys.path.insert(0, str(BENCH_DIR))
    paths = sorted(BENCH_DIR.glob("bench_*.py"))
    if names:
        paths = [p for p in paths if p.stem.removeprefix("bench_") in names or p.stem in names]
    rows: list[dict] = []
    failed = 0
    for path in paths:
        started = time.perf_counter()
        print(f"running {path.stem} ...", file=sys.stderr, flush=True)
        try:
            rows.extend(_load(path).run())
        except Exception:
            failed += 1
            traceback.print_exc()
            rows.append({"benchmark": path.stem, "figure": "FAILED (see above)"})
        print(f"  {path.stem}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print_table(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
