"""Loading a training config: presets, YAML files and `--set` overrides merged in order, remembering where each value came from.

Precedence is preset < config file < `--set a.b.c=VALUE`; unknown keys are errors with a "did you mean",
except keys verl itself knows, which are passed through to verl in `verl_overrides`.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.errors import UserError, did_you_mean, shorten
from core.files import read_text
from core.training.config.schema import VERL_OVERRIDES, TrainingConfig, flatten, is_model, model_node
from core.yamlfile import YamlSyntaxError, parse_yaml

log = logging.getLogger(__name__)

PRESETS = ("default", "ci-fast", "single-gpu")
PRESETS_DIR = Path(__file__).parents[1] / "presets"
# verl's top-level sections; unknown keys under them pass through to verl when verl is not installed to check.
VERL_SECTIONS = ("algorithm", "data", "actor_rollout_ref", "trainer", "critic", "reward_model", "reward",
                 "custom_reward_function", "ray_kwargs", "global_profiler", "transfer_queue", "distillation")


# ---- verl's own keys ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def verl_key_tree() -> dict | None:
    """verl's full ppo_trainer config as nested dicts (without `_target_`), or None if verl is absent.

    Read from the installed package's generated YAML without importing verl (which pulls in ray and torch).
    """
    import yaml

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "trainer" / "config" / "_generated_ppo_trainer.yaml"
        if path.is_file():
            return _strip_targets(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return None


def _strip_targets(node):
    if isinstance(node, dict):
        return {k: _strip_targets(v) for k, v in node.items() if k != "_target_"}
    return node


def _verl_node(parts: list[str]):
    """(found, node) for a dotted path in verl's config tree; found is None when verl is not installed."""
    tree = verl_key_tree()
    if tree is None:
        return None, None
    node: Any = tree
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def verl_value_problem(value: Any, default: Any) -> str | None:
    """What is wrong with `value` for a verl key this project does not model, judged by the type of verl's default
    (as verl's dataclass configs would refuse it): a number for a number (finite: verl's maths has no use for inf or
    NaN), true/false for a flag, text for text, a list for a list. None when it fits, or verl's default is null or an
    interpolation (`${oc.select:...}`: its type is another key's) or `value` is null (verl's own default applies)."""
    if value is None or default is None or (isinstance(default, str) and default.startswith("${")):
        return None
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "verl expects true or false here"
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"verl expects a number here (its default is {default})"
        if isinstance(value, float) and not math.isfinite(value):
            return f"verl expects a finite number here (its default is {default})"
        if isinstance(default, int) and isinstance(value, float) and not value.is_integer():
            return f"verl expects a whole number here (its default is {default})"
        return None
    if isinstance(default, str):
        return None if isinstance(value, str) else f"verl expects text here (its default is {default!r})"
    if isinstance(default, list):
        return None if isinstance(value, list) else f"verl expects a list here (its default is {default})"
    if isinstance(default, dict):
        return None if isinstance(value, dict) else "verl expects a mapping here"
    return None


# ---- reading the layers -----------------------------------------------------------------------------


class _Layer:
    """Where a value came from, for error messages: a file (with line numbers) or a --set option."""

    def __init__(self, name: str, lines: dict[str, int] | None = None) -> None:
        self.name, self.lines = name, lines or {}

    def where(self, dotted: str) -> str:
        line = self.lines.get(dotted)
        return f"{self.name}:{line}" if line else self.name


def yaml_key_lines(text: str) -> dict[str, int]:
    """Dotted key -> 1-based line of that key in a YAML mapping document ({} when it does not parse)."""
    try:
        return parse_yaml(text, "<config>").key_lines()
    except UserError:
        return {}


def _read_layer(text: str, source: str) -> tuple[dict, _Layer]:
    """A config file's mapping and its layer; UserError for bad YAML, an empty file, a non-mapping, or a key written
    twice (naming both lines: YAML would silently keep only the last)."""
    document = parse_yaml(text, source)
    for dotted, first, again in document.duplicate_keys():
        raise UserError(f"{source}:{again}: {dotted}: written twice in the same mapping (lines {first} and {again}; "
                        "YAML would keep only the last); keep one")
    data = document.data
    if data is None:
        raise UserError(f"{source}: the config file is empty; write the sections to change (see 'devops-rl config "
                        "export'), or leave out --config")
    if not isinstance(data, dict):
        raise UserError(f"{source}: a config must be a YAML mapping of sections (algorithm, data, ...), "
                        f"got {type(data).__name__}")
    return data, _Layer(source, document.key_lines())


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b.c=VALUE` -> ("a.b.c", typed VALUE), VALUE typed as YAML (Hydra-style): 16, 1e-6, true, null, [a, b].

    VALUE that is not YAML at all stays a string; YAML that is refused (an alias bomb, a 5,000-digit number) is a
    UserError, like the same text in a config file.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(f"--set {shorten(text)}: expected KEY=VALUE with a dotted key, e.g. --set data.train_batch_size=8")
    try:
        value = parse_yaml(raw, f"--set {shorten(key)}").data if raw.strip() else ""
    except YamlSyntaxError:
        value = raw
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if math.isfinite(number) and any(c in value for c in ".eE"):
                value = number  # YAML 1.1 reads 1e-6 as a string; Hydra reads it as a float
    return key, value


def _merge(base: dict, update: dict, layer: _Layer, origins: dict[str, _Layer], prefix: str = "") -> None:
    for key, value in update.items():
        key = str(key)
        path = f"{prefix}{key}"
        if key == VERL_OVERRIDES and not prefix:
            if not isinstance(value, dict):
                raise UserError(f"{layer.where(path)}: {VERL_OVERRIDES}: must be a mapping of dotted verl keys to values")
            for sub_key, sub_value in value.items():
                base.setdefault(VERL_OVERRIDES, {})[str(sub_key)] = sub_value
                origins[f"{VERL_OVERRIDES}.{sub_key}"] = layer
            continue
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value, layer, origins, path + ".")
        else:
            base[key] = value
            origins[path] = layer


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    if dotted.startswith(VERL_OVERRIDES + "."):
        data.setdefault(VERL_OVERRIDES, {})[dotted[len(VERL_OVERRIDES) + 1:]] = value
        return
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


# ---- from merged data to the model ----------------------------------------------------------------


def _separate_verl_keys(data: dict, origins: dict[str, _Layer]) -> None:
    """Move keys our model does not know into verl_overrides if verl knows them; otherwise raise with a suggestion."""
    overrides = data.setdefault(VERL_OVERRIDES, {})

    def origin(path: str) -> _Layer:
        probe = path
        while probe:
            if probe in origins:
                return origins[probe]
            probe = probe.rpartition(".")[0]
        return _Layer("config")

    def unknown(path: str, value: Any) -> None:
        parts = path.split(".")
        found, verl_node = _verl_node(parts)
        layer = origin(path)
        if found is None and parts[0] in VERL_SECTIONS:
            log.warning("%s: %s is not a devops-rl key and verl is not installed to check it; passing it to verl",
                        layer.where(path), path)
            overrides[path] = value
            return
        if found:
            if isinstance(value, dict) and isinstance(verl_node, dict) and verl_node:
                for key, sub in value.items():
                    unknown(f"{path}.{key}", sub)
            else:
                problem = verl_value_problem(value, verl_node)
                if problem:
                    raise UserError(f"{layer.where(path)}: {path}: {shorten(repr(value), 60)}: {problem}")
                overrides[path] = value
            return
        parent = ".".join(parts[:-1])
        siblings: set[str] = set()
        model_parent = model_node(parts[:-1]) if parts[:-1] else TrainingConfig
        if is_model(model_parent):
            siblings |= set(model_parent.model_fields)
        found_parent, verl_parent = _verl_node(parts[:-1]) if parts[:-1] else (True, verl_key_tree())
        if found_parent and isinstance(verl_parent, dict):
            siblings |= set(verl_parent)
        where = f" under {parent}" if parent else ""
        raise UserError(
            f"{layer.where(path)}: {path}: unknown key{where}"
            f"{did_you_mean(parts[-1], siblings) or '; see devops-rl config show for the keys'}"
        )

    def walk(node: dict, prefix: str, model) -> None:
        for key in list(node):
            path = f"{prefix}{key}"
            if prefix == "" and key == VERL_OVERRIDES:
                continue
            if not is_model(model) or key not in model.model_fields:
                unknown(path, node.pop(key))
                continue
            child_model = model.model_fields[key].annotation
            if is_model(child_model):
                if isinstance(node[key], dict):
                    walk(node[key], path + ".", child_model)
                elif node[key] is None:
                    node.pop(key)

    walk(data, "", TrainingConfig)
    for key in list(overrides):
        parts = key.split(".")
        found, _ = _verl_node(parts)
        if found is False:
            raise UserError(f"{origin(f'{VERL_OVERRIDES}.{key}').where(f'{VERL_OVERRIDES}.{key}')}: {VERL_OVERRIDES}.{key}: "
                            f"verl has no key '{key}'{did_you_mean(key, flatten(verl_key_tree() or {}))}")
        if model_node(parts) is not None:
            raise UserError(f"{origin(f'{VERL_OVERRIDES}.{key}').where(f'{VERL_OVERRIDES}.{key}')}: {VERL_OVERRIDES}.{key}: "
                            f"devops-rl models this key; set {key} directly instead")


def _build(data: dict, origins: dict[str, _Layer]) -> TrainingConfig:
    _separate_verl_keys(data, origins)
    try:
        return TrainingConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        path = ".".join(str(p) for p in first["loc"])
        probe, layer = path, None
        while probe and layer is None:
            layer = origins.get(probe)
            probe = probe.rpartition(".")[0]
        where = layer.where(path) if layer else "config"
        value = first.get("input")
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        message = first["msg"].removeprefix("Value error, ")
        raise UserError(f"{where}: {path}: {shorten(repr(value), 60)}: {message}{more}") from None


# ---- the entry points -------------------------------------------------------------------------------


def _preset_layer(preset: str) -> tuple[dict, _Layer]:
    if preset not in PRESETS:
        raise UserError(f"unknown preset '{preset}'{did_you_mean(preset, PRESETS)} (presets: {', '.join(PRESETS)})")
    path = PRESETS_DIR / f"{preset}.yaml"
    return _read_layer(path.read_text(encoding="utf-8"), str(path))


def preset_data(preset: str) -> dict:
    """The raw mapping of a preset file (values that differ from the model's defaults)."""
    return _preset_layer(preset)[0]


def load_config(preset: str = "default", config_file: Path | None = None, overrides=()) -> TrainingConfig:
    """Resolve preset < config file < `--set` overrides into one validated config (UserError on any bad key/value)."""
    data: dict = {}
    origins: dict[str, _Layer] = {}
    _merge(data, *_preset_layer(preset), origins)
    if config_file is not None:
        path = Path(config_file)
        if not path.exists() and not path.is_symlink():  # a symlink loop is read, and named as one
            raise UserError(f"{shorten(path)}: no such config file; create one with 'devops-rl config export -o "
                            f"{shorten(path.name, 40)}'")
        _merge(data, *_read_layer(read_text(path, "config file"), str(path)), origins)
    for text in overrides:
        key, value = parse_override(text)
        layer = _Layer(f"--set {shorten(text)}")
        update: dict = {}
        _set_dotted(update, key, value)
        _merge(data, update, layer, origins)
        origins[key] = layer
    return _build(data, origins)


def config_from_yaml(text: str, source: str = "<config>") -> TrainingConfig:
    """A config from YAML text over the model's defaults (no preset), e.g. what `to_yaml` wrote."""
    data: dict = {}
    origins: dict[str, _Layer] = {}
    _merge(data, *_read_layer(text, source), origins)
    return _build(data, origins)
