"""Which run a user means: a run folder, a run id under the runs folder, or a unique prefix of one.

Every command that takes a run goes through here; names are compared as plain text, never as globs.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import UserError
from core.runs.folder import META_FILE


def find_run(spec: str | Path, *, root: Path | None = None) -> Path | None:
    """The run folder `spec` names, or None when it names none (it may be a model folder or a file).

    `spec` is a folder holding meta.json, or a bare name (no path separator): a run id under `root`
    (default: the runs folder), or, unless something of that name is here, the unique start of one.
    UserError when the start fits more than one run.
    """
    from core.paths import runs_root

    path = Path(spec).expanduser()
    if (path / META_FILE).is_file():
        return path
    text = str(spec)
    if not text or "/" in text or "\\" in text or text in (".", ".."):
        return None
    root = Path(root) if root is not None else runs_root()
    if (root / text / META_FILE).is_file():
        return root / text
    if path.exists():
        return None  # a model folder or file of that name: a start of a run id would only be a guess
    try:
        matches = sorted(p for p in root.iterdir() if p.name.startswith(text) and (p / META_FILE).is_file())
    except OSError:
        return None
    if len(matches) > 1:
        shown = ", ".join(p.name for p in matches[:4]) + ("..." if len(matches) > 4 else "")
        raise UserError(f"run '{text}' is ambiguous: {shown}; give more of the id")
    return matches[0] if matches else None


def resolve_run(spec: str | Path, *, root: Path | None = None, files: bool = False) -> Path:
    """`find_run`, or a UserError naming what was tried; with `files`, an existing file (a verl file-logger
    JSONL) is returned as it is, for the commands that read one directly."""
    from core.paths import runs_root

    path = Path(spec).expanduser()
    if files and path.is_file():
        return path
    found = find_run(spec, root=root)
    if found is not None:
        return found
    root = Path(root) if root is not None else runs_root()
    if path.is_dir():
        hint = "; for a verl run pass its metrics .jsonl file" if files else ""
        raise UserError(f"{spec}: not a run folder (no {META_FILE} in it){hint}; see 'devops-rl runs list'")
    raise UserError(f"no run '{spec}' (no {META_FILE} in {path} or under {root}); see 'devops-rl runs list'")
