"""Where the token of the local Ray cluster a verl run starts lives, and writing it there readable by its owner only.

Ray 2.60's `ray.init()` turns token authentication on for a new local cluster (`RAY_AUTH_MODE` unset) and
reads the token from, in order, `RAY_AUTH_TOKEN`, the file `RAY_AUTH_TOKEN_PATH`, `$HOME/.ray/auth_token`
(ray `src/ray/rpc/authentication/authentication_token_loader.cc`); when none holds one, it writes a new one
to `$HOME/.ray/auth_token` with the process umask (0644: readable by everyone who can enter that HOME), and
a `RAY_AUTH_TOKEN_PATH` naming a missing file is an error (`ray/_private/authentication/authentication_token_setup.py`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from core.errors import UserError

MODE, TOKEN, TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


def token_file(environ: Mapping[str, str], ray_address: str | None) -> Path | None:
    """The file Ray will take the local cluster's token from (None: no file: joining a cluster, a token in
    `RAY_AUTH_TOKEN`, or authentication off)."""
    if ray_address or environ.get(TOKEN) or environ.get(MODE, "token").lower() != "token":
        return None
    if environ.get(TOKEN_PATH):
        return Path(os.path.abspath(environ[TOKEN_PATH]))  # as Ray opens it: no `~` expansion
    return Path(environ.get("HOME") or Path.home()) / ".ray" / "auth_token"


def ensure_token(path: Path) -> bool:
    """A token in `path` (Ray's format: 64 hex digits), written owner-only when the file is missing or empty;
    True when it was written now. UserError naming the path when it cannot be."""
    try:
        if path.is_file() and path.read_text(encoding="utf-8", errors="replace").strip():
            return False
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(handle, 0o600)  # an empty file that was there keeps no wider mode
            os.write(handle, secrets.token_hex(32).encode())
        finally:
            os.close(handle)
    except OSError as exc:
        raise UserError(f"{path}: cannot write the local Ray cluster's auth token there "
                        f"({exc.strerror or exc}); point {TOKEN_PATH} at a file in a folder you can write, "
                        f"or export {TOKEN}") from None
    return True


def prepare_local_token(environ: MutableMapping[str, str], ray_address: str | None) -> str | None:
    """Before `ray.init()` starts a local cluster: the token file Ray will read, written owner-only when
    missing (and `RAY_AUTH_TOKEN_PATH` made absolute for Ray's own processes); the line saying where it is."""
    path = token_file(environ, ray_address)
    if path is None:
        return None
    written = ensure_token(path)
    if environ.get(TOKEN_PATH):
        environ[TOKEN_PATH] = str(path)
    return (f"Ray auth token of the local cluster: {path} ({'written now, owner-only' if written else 'already there'}; "
            f"{TOKEN_PATH}=FILE keeps it out of a shared HOME)")
