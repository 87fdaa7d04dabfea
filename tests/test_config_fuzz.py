"""Fuzzing configs: whatever a config file or a `--set` value holds, `config validate` and `config show` answer with
exit 0 or exit 2 and `error:` lines, never a traceback nor an "unexpected" error (hypothesis, seeded by its database-
less default settings below so a failure reproduces with the printed example)."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.training.config import TrainingConfig
from tests.conftest import cli_in_process

KEYS = sorted(TrainingConfig().flat())
FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30), st.floats(allow_nan=True),
    st.text(max_size=30), st.sampled_from(["1e-6", "k3+", "grpo", "builtin:tiny", "-1", "0", "null", "~", ""]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                            max_size=4), max_leaves=12)
keys = st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=20).filter(lambda k: "." not in k))
yaml_noise = st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"\n #0123456789.eE+_,?")), max_size=300)


def _nest(flat: dict) -> dict:
    """{"a.b": 1} -> {"a": {"b": 1}}; a key that collides with another's section is left out."""
    out: dict = {}
    for dotted, value in flat.items():
        node, parts = out, dotted.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            if not isinstance(node.get(parts[-1]), dict):
                node[parts[-1]] = value
    return out


def _answered(result) -> None:
    shown = f"exit {result.returncode}\n{result.stdout[-800:]}\n{result.stderr[-800:]}"
    assert result.returncode in (0, 2), shown
    assert "Traceback" not in result.stdout + result.stderr and "error: unexpected " not in result.stderr, shown
    if result.returncode == 2:
        assert any(line.startswith("error: ") for line in result.stderr.splitlines()), shown


@FUZZ
@given(flat=st.dictionaries(keys, values, max_size=6))
def test_any_config_mapping_is_answered(tmp_path, capsys, flat):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(_nest(flat), allow_unicode=True), encoding="utf-8")
    _answered(cli_in_process(capsys, "config", "validate", str(path)))


@FUZZ
@given(text=st.one_of(yaml_noise, st.text(max_size=200)), raw=st.binary(max_size=200))
def test_any_config_text_or_bytes_is_answered(tmp_path, capsys, text, raw):
    path = tmp_path / "fuzz.yaml"
    for data in (text.encode("utf-8", "surrogatepass"), raw):
        path.write_bytes(data)
        _answered(cli_in_process(capsys, "config", "show", "--config", str(path)))


@FUZZ
@given(key=keys, value=st.one_of(yaml_noise, st.text(max_size=40).filter(lambda v: "\x00" not in v)))
def test_any_set_value_is_answered(capsys, key, value):
    _answered(cli_in_process(capsys, "config", "validate", "--preset", "ci-fast", "--set", f"{key}={value}"))
