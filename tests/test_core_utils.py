"""The small shared helpers every face uses: number and duration text, atomic file writes, secret masking.

Each expected string is what the CLI tables, the compare report, the progress line and the cockpit showed
before they shared one function, so merging them changed no output.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from core.files import atomic_path, write_atomic
from core.formatting import format_duration, format_number
from core.log import mask_nested, mask_secrets


def test_numbers_as_tables_reports_and_charts_show_them():
    # tables (`runs list`, `tail`): 4 significant digits, counts whole, anything else as text
    assert [format_number(v) for v in (None, 0.61234, 12345.6, 1e-4, 3, "k8s-001", math.nan)] == \
        ["-", "0.6123", "1.235e+04", "0.0001", "3", "k8s-001", "nan"]
    # the compare report: fixed decimals, differences signed
    assert format_number(0.61234, style="fixed", digits=3) == "0.612"
    assert [format_number(v, style="fixed", digits=3, signed=True) for v in (0.1, -0.25, None)] == \
        ["+0.100", "-0.250", "-"]
    # charts and narrow cockpit cells: short at every magnitude
    assert [format_number(v, style="compact") for v in (0.0, 0.61234, 12.345, 123.4, 123456.0, 1e-4, math.inf)] == \
        ["0", "0.612", "12.3", "123", "1.23e+05", "1.00e-04", "inf"]
    assert [format_number(v, style="compact", signed=True) for v in (0.2, 0.0, -0.2)] == ["+0.200", "0", "-0.200"]
    # the benchmark table: thousands grouped, three digits below
    assert [format_number(v, digits=3, grouped=True, missing="") for v in (1234567.8, 0.12345, None)] == \
        ["1,234,568", "0.123", ""]
    with pytest.raises(ValueError, match="style"):
        format_number(1.0, style="wide")


def test_durations_as_ages_etas_and_clocks():
    assert [format_duration(s) for s in (0, 59.9, 61, 7200, 3 * 86400 + 5, -5)] == ["0s", "59s", "1m", "2h", "3d", "0s"]
    assert [format_duration(s, parts=2) for s in (7, 125, 3725)] == ["0m07s", "2m05s", "1h02m"]
    assert format_duration(90000, parts=2) == "1d01h"
    assert [format_duration(s, clock=True) for s in (70, 3725, 100 * 3600)] == ["0:01:10", "1:02:05", "100:00:00"]
    assert [format_duration(v) for v in (None, math.nan, math.inf)] == ["-", "-", "-"]
    assert format_duration(None, missing="?") == "?"


def test_atomic_write_replaces_whole_and_leaves_the_old_file_on_error(tmp_path):
    path = tmp_path / "meta.json"
    write_atomic(path, '{"status": "running"}\n')
    write_atomic(path, '{"status": "finished"}\n')
    assert json.loads(path.read_text()) == {"status": "finished"}
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half a fi")
        raise RuntimeError("the writer died")
    assert json.loads(path.read_text()) == {"status": "finished"}
    assert os.listdir(tmp_path) == ["meta.json"]  # no temporary file left behind


def test_masking_of_text_json_and_nested_values(monkeypatch):
    key = "sk-env-secret-0123456789abcdef"
    monkeypatch.setenv("DEVOPS_RL_API_KEY", key)
    answer = 'DB password=abcd"ef and token sk-proj-AbCdEf0123456789xyz'
    document = json.dumps({"answer": answer, "base_url": f"http://h/?k={key}"})
    # in JSON text only the environment's values go: a pattern would eat the escaped quote and break the JSON
    kept = json.loads(mask_secrets(document, patterns=False))
    assert kept["answer"] == answer and key not in kept["base_url"]
    with pytest.raises(ValueError):
        json.loads(mask_secrets(document))
    masked = mask_nested({"samples": [{"response": answer, "n": 3}], "note": (f"key {key}",)})
    assert masked == {"samples": [{"response": "DB password=***\"ef and token ***", "n": 3}], "note": ["key ***"]}
