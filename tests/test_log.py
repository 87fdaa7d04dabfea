"""Logging: API keys are masked everywhere, the file handler keeps DEBUG lines in the agreed format."""

from __future__ import annotations

import logging
import re

from core.log import mask_secrets, setup_logging


def test_masks_key_shapes_and_environment_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "my-very-private-value-42")
    text = (
        "key sk-proj-AbCdEf0123456789xyz aws AKIAIOSFODNN7EXAMPLE token=abcd1234efgh "
        "Authorization: Bearer eyJhbGciOi.x.y password: hunter22 env my-very-private-value-42"
    )
    masked = mask_secrets(text)
    for secret in ("sk-proj-AbCdEf0123456789xyz", "AKIAIOSFODNN7EXAMPLE", "abcd1234efgh", "eyJhbGciOi", "hunter22",
                   "my-very-private-value-42"):
        assert secret not in masked, secret
    assert "Authorization: Bearer ***" in masked and "password: ***" in masked


def test_plain_text_is_left_alone():
    text = "step 12 reward 0.61 on k8s-001; tokens=512 secret manager: Vault"
    assert mask_secrets(text) == text


def test_file_handler_format_and_masking(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVOPS_RL_API_KEY", "sk-test-0123456789abcdef")
    path = setup_logging(console=False, log_file=tmp_path / "run.log")
    log = logging.getLogger("core.test")
    log.debug("calling endpoint with %s", "sk-test-0123456789abcdef")
    try:
        raise ValueError("bad key sk-test-0123456789abcdef")
    except ValueError:
        log.exception("request failed")
    for handler in logging.getLogger().handlers:
        handler.flush()
    text = path.read_text()
    assert "sk-test-0123456789abcdef" not in text
    first = text.splitlines()[0]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \| DEBUG    \| "
                    r"test_file_handler_format_and_masking:\d+ \| calling endpoint with \*\*\*", first), first
    assert "Traceback" in text
