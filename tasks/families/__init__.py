"""Task families (docs/families.md): parameterized templates whose instances are ordinary `tasks.Task`s, each
checked on its own values. `families()` lists them; `get_family(id).instance(seed, index)` gives one instance."""

from __future__ import annotations

from tasks.families.base import Choice, Family, IntRange, draw, instance_id


def families(*, drills_only: bool = False) -> list[Family]:
    """Every family (or only the drills), sorted by id."""
    from tasks.families.catalog import FAMILIES

    return sorted((f for f in FAMILIES.values() if f.drill or not drills_only), key=lambda f: f.id)


def get_family(family_id: str) -> Family:
    """The family with this id; UserError naming the closest ids when there is none."""
    from tasks.families.base import lookup
    from tasks.families.catalog import FAMILIES

    return lookup(FAMILIES, family_id)


def instances(family_ids: list[str] | None = None, *, seed: int = 0, per_family: int = 8) -> list:
    """`per_family` instances (indexes 0..per_family-1) of each family, as `tasks.Task`s, family by family."""
    chosen = [get_family(fid) for fid in family_ids] if family_ids else families()
    return [family.instance(seed, index) for family in chosen for index in range(per_family)]


__all__ = ["Choice", "Family", "IntRange", "draw", "families", "get_family", "instance_id", "instances"]
