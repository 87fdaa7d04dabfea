"""The training config: one pydantic model shaped like verl's ppo_trainer.yaml, presets, YAML and --set overrides.

`schema` is the model and each key's help, `loading` merges presets, files and overrides, `validation` checks a
config the way verl would, `model_info` reads a model's config.json; callers import from this package.
"""

from core.training.config.loading import (
    PRESETS,
    PRESETS_DIR,
    config_from_yaml,
    load_config,
    parse_override,
    preset_data,
    verl_key_tree,
    yaml_key_lines,
)
from core.training.config.model_info import KNOWN_MODELS, model_config_json, model_context_length
from core.training.config.schema import (
    ADV_ESTIMATORS,
    GROUP_ESTIMATORS,
    KL_TYPES,
    LOSS_AGG_MODES,
    VERL_OVERRIDES,
    KeyHelp,
    TrainingConfig,
    key_help,
)
from core.training.config.validation import native_ignored_settings, total_steps, validate

__all__ = [
    "ADV_ESTIMATORS", "GROUP_ESTIMATORS", "KL_TYPES", "KNOWN_MODELS", "LOSS_AGG_MODES", "PRESETS", "PRESETS_DIR",
    "VERL_OVERRIDES", "KeyHelp", "TrainingConfig", "config_from_yaml", "key_help", "load_config", "model_config_json",
    "model_context_length", "native_ignored_settings", "parse_override", "preset_data", "total_steps", "validate",
    "verl_key_tree", "yaml_key_lines",
]
