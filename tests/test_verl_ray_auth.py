"""The local Ray cluster's auth token: the file Ray reads, in Ray's own order, written owner-only before Ray
would write it world-readable into HOME, and kept out of HOME through Ray's own `RAY_AUTH_TOKEN_PATH`
(checked against a real `ray.init()`).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import UserError
from core.training.verl_backend.ray_auth import ensure_token, prepare_local_token, token_file
from tests.conftest import REPO


def test_the_token_file_is_the_one_ray_reads(tmp_path):
    home = {"HOME": str(tmp_path / "home")}
    assert token_file(home, None) == tmp_path / "home" / ".ray" / "auth_token"
    assert token_file({**home, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "t")}, None) == tmp_path / "t"
    assert token_file({**home, "RAY_AUTH_MODE": "token"}, None) == tmp_path / "home" / ".ray" / "auth_token"
    assert token_file({**home, "RAY_AUTH_TOKEN_PATH": "tok"}, None) == Path.cwd() / "tok"  # Ray's processes see it whole
    # no file: the token is in the environment, authentication is off, or the cluster is someone else's
    assert token_file({**home, "RAY_AUTH_TOKEN": "abc"}, None) is None
    assert token_file({**home, "RAY_AUTH_MODE": "disabled"}, None) is None
    assert token_file(home, "10.0.0.1:6379") is None


def test_the_token_is_written_owner_only_once(tmp_path):
    path = tmp_path / "private" / "token"
    assert ensure_token(path) is True
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0  # Ray's own format: 256 bits as hex
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert ensure_token(path) is False and path.read_text() == token  # an existing token is kept
    path.write_text("")
    path.chmod(0o644)
    assert ensure_token(path) is True and stat.S_IMODE(path.stat().st_mode) == 0o600  # an empty file is not a token


def test_an_unwritable_token_path_is_one_line_naming_it(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="afile/token: cannot write the local Ray cluster's auth token") as info:
        prepare_local_token({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "afile" / "token")}, None)
    assert "\n" not in str(info.value)


# What the verl child does before verl's run_ppo calls ray.init(): a real local Ray cluster starts on the token
# file outside HOME; without the preparation Ray refuses a RAY_AUTH_TOKEN_PATH that names no file yet.
START_RAY = r"""
import os, sys, ray
from core.training.verl_backend.ray_auth import prepare_local_token
if sys.argv[1] == "prepared":
    print(prepare_local_token(os.environ, None), flush=True)
try:
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    print("ray started", flush=True)
finally:
    ray.shutdown()
"""


@pytest.mark.parametrize("prepared", [True, False])
def test_ray_starts_on_a_token_kept_out_of_home(tmp_path, prepared):
    home, token = tmp_path / "home", tmp_path / "private" / "token"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "RAY_AUTH_TOKEN_PATH": str(token), "PYTHONPATH": str(REPO)}
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_AUTH_MODE", None)
    result = subprocess.run([sys.executable, "-c", START_RAY, "prepared" if prepared else "bare"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=180)
    assert not (home / ".ray").exists()  # nothing in the (shared) HOME either way
    if prepared:
        assert result.returncode == 0 and "ray started" in result.stdout, result.stderr[-2000:]
        assert f"Ray auth token of the local cluster: {token} (written now, owner-only" in result.stdout
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
    else:
        assert result.returncode != 0 and "RAY_AUTH_TOKEN_PATH is set but file cannot be opened" in result.stderr
