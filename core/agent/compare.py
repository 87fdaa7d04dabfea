"""Before/after comparison of two eval results files: deltas overall, per type/difficulty/dimension,
the tasks that improved or regressed most, and the weakest tasks of B with their weakest dimension.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.agent.results import read_results
from core.formatting import format_number


def load_results(path: Path) -> dict:
    """An eval results file, checked key by key; a one-line UserError naming the file (and key) otherwise."""
    return read_results(path, "pass an eval_results_<timestamp>.json file written by 'devops-rl eval'")


def _delta(a: float | None, b: float | None) -> float | None:
    return round(b - a, 6) if a is not None and b is not None else None


def _table(a: dict, b: dict) -> dict[str, dict[str, float | None]]:
    return {key: {"a": a.get(key), "b": b.get(key), "delta": _delta(a.get(key), b.get(key))}
            for key in list(a) + [k for k in b if k not in a]}


def _avg(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def weakest_dimension(breakdown: dict | None) -> tuple[str, float] | None:
    dims = (breakdown or {}).get("dimensions") or {}
    return min(dims.items(), key=lambda item: (item[1], item[0])) if dims else None


def compare(a: dict, b: dict, *, top: int = 5) -> dict[str, Any]:
    """The comparison of results A (before) and B (after) as plain data (what `--json` prints)."""
    sa, sb = a["summary"], b["summary"]
    ra = {r["task_id"]: r for r in a["results"] if r.get("reward") is not None}
    rb = {r["task_id"]: r for r in b["results"] if r.get("reward") is not None}
    common = sorted(set(ra) & set(rb))
    changes = [{"task_id": t, "type": rb[t].get("type"), "a": ra[t]["reward"], "b": rb[t]["reward"],
                "delta": round(rb[t]["reward"] - ra[t]["reward"], 6)} for t in common]
    improved = sorted((c for c in changes if c["delta"] > 0), key=lambda c: (-c["delta"], c["task_id"]))[:top]
    regressed = sorted((c for c in changes if c["delta"] < 0), key=lambda c: (c["delta"], c["task_id"]))[:top]
    lowest = []
    for entry in sorted(rb.values(), key=lambda r: (r["reward"], r["task_id"]))[:top]:
        weak = weakest_dimension(entry.get("breakdown"))
        penalties = {k: v for k, v in ((entry.get("breakdown") or {}).get("penalties") or {}).items() if v}
        lowest.append({"task_id": entry["task_id"], "type": entry.get("type"), "reward": entry["reward"],
                       "weakest_dimension": weak[0] if weak else None, "weakest_score": weak[1] if weak else None,
                       "penalties": penalties})
    return {
        "a": {"model": (a.get("settings") or {}).get("model"), "count": sa.get("count"), "failures": sa.get("failures")},
        "b": {"model": (b.get("settings") or {}).get("model"), "count": sb.get("count"), "failures": sb.get("failures")},
        "mean_reward": {"a": sa.get("mean_reward"), "b": sb.get("mean_reward"),
                        "delta": _delta(sa.get("mean_reward"), sb.get("mean_reward"))},
        "mean_reward_common": {"a": _avg([ra[t]["reward"] for t in common]), "b": _avg([rb[t]["reward"] for t in common]),
                               "delta": _avg([c["delta"] for c in changes])},
        "by_type": _table(sa.get("by_type") or {}, sb.get("by_type") or {}),
        "by_difficulty": _table(sa.get("by_difficulty") or {}, sb.get("by_difficulty") or {}),
        "by_dimension": _table(sa.get("by_dimension") or {}, sb.get("by_dimension") or {}),
        "by_penalty": _table(sa.get("by_penalty") or {}, sb.get("by_penalty") or {}),
        "common_tasks": len(common),
        "improved": improved,
        "regressed": regressed,
        "lowest": lowest,
    }


def _num(value: float | None, signed: bool = False) -> str:
    return format_number(value, style="fixed", digits=3, signed=signed)


def format_comparison(result: dict, name_a: str = "A", name_b: str = "B") -> str:
    """The comparison as a plain-text report (fits 100 columns, no colours)."""
    lines = [f"A: {name_a} ({result['a']['count']} scored, {result['a']['failures']} failed)",
             f"B: {name_b} ({result['b']['count']} scored, {result['b']['failures']} failed)", ""]
    m = result["mean_reward"]
    c = result["mean_reward_common"]
    lines.append(f"{'':<28}{'A':>8}{'B':>8}{'B-A':>9}")
    lines.append(f"{'mean reward':<28}{_num(m['a']):>8}{_num(m['b']):>8}{_num(m['delta'], True):>9}")
    label = f"  on the {result['common_tasks']} tasks in both"
    lines.append(f"{label:<28}{_num(c['a']):>8}{_num(c['b']):>8}{_num(c['delta'], True):>9}")
    for title, key in (("by type", "by_type"), ("by difficulty", "by_difficulty"), ("by dimension", "by_dimension"),
                       ("penalties (lower is better)", "by_penalty")):
        rows = result[key]
        if not rows:
            continue
        lines += ["", f"{title:<28}{'A':>8}{'B':>8}{'B-A':>9}"]
        for name, row in rows.items():
            lines.append(f"  {name:<26}{_num(row['a']):>8}{_num(row['b']):>8}{_num(row['delta'], True):>9}")
    for title, key in (("improved most", "improved"), ("regressed most", "regressed")):
        lines += ["", f"{title} ({result['common_tasks']} tasks in both):"]
        lines += [f"  {c['task_id']:<26}{_num(c['a']):>8}{_num(c['b']):>8}{_num(c['delta'], True):>9}"
                  for c in result[key]] or ["  none"]
    lines += ["", "lowest-scoring tasks in B (weakest dimension; penalties applied):"]
    for low in result["lowest"]:
        penalties = ", ".join(f"{k} {v:.2f}" for k, v in low["penalties"].items()) or "no penalties"
        weak = f"{low['weakest_dimension']} {_num(low['weakest_score'])}" if low["weakest_dimension"] else "-"
        lines.append(f"  {low['task_id']:<26}{_num(low['reward']):>8}  weakest: {weak}; {penalties}")
    return "\n".join(lines)
