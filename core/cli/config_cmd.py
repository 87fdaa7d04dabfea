"""`devops-rl config`: show, validate, export, diff and doctor training configs (and `config verl`).

Every command resolves preset < --config FILE < --set KEY=VALUE through `core.training.config.load_config`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

config_app = typer.Typer(help="Show, validate, export, diff and check training configs.", no_args_is_help=True)

PRESET_HELP = "Preset to start from: default | ci-fast | single-gpu."
SET_HELP = "Dotted override typed like YAML, e.g. --set actor_rollout_ref.actor.optim.lr=2e-6 (repeatable)."


def register(app: typer.Typer) -> None:
    from core.cli import verl_cmd

    verl_cmd.register(config_app)
    app.add_typer(config_app, name="config")


def _load(preset: str, config: Path | None, overrides: list[str]):
    from core.training.config import load_config

    return load_config(preset, config_file=config, overrides=overrides)


def refuse_invalid(cfg) -> None:
    """The project's own checks as one `UserError` line (the first problem, and how many more), as `train` and
    `config verl` refuse a config; `config validate` lists every problem instead."""
    from core.errors import UserError
    from core.training.config import validate

    problems = validate(cfg)
    if problems:
        raise UserError(problems[0] + (f" (and {len(problems) - 1} more; run 'devops-rl config validate')"
                                       if len(problems) > 1 else ""))


@config_app.command("show")
def show(
    preset: str = typer.Option("default", "--preset", "-p", help=PRESET_HELP),
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML config file over the preset."),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    flat: bool = typer.Option(False, "--flat", help="One 'dotted.key: value' line per setting."),
    describe: bool = typer.Option(False, "--describe", help="Each key's meaning as a comment (still valid YAML)."),
) -> None:
    """Print the resolved config as YAML."""
    from core.training.config import key_help

    cfg = _load(preset, config, overrides)
    if flat:
        for key, value in cfg.flat().items():
            line = f"{key}: {value!r}" if isinstance(value, str) else f"{key}: {value}"
            help_ = key_help(key) if describe else None
            print(f"{line}  # {help_.meaning}" if help_ and help_.meaning else line)
    else:
        sys.stdout.write(cfg.to_yaml(describe=describe))


@config_app.command("validate")
def validate_cmd(
    config: Path | None = typer.Argument(None, help="YAML config file (omit to check the preset alone)."),
    preset: str = typer.Option("default", "--preset", "-p", help=PRESET_HELP),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    gpus: int | None = typer.Option(None, "--gpus", min=0, help="GPUs available (default: what the config asks for)."),
) -> None:
    """Check a config the way verl would: one line per problem, exit 2 if there is any."""
    from core.training.config import validate, yaml_key_lines

    cfg = _load(preset, config, overrides)
    where = str(config) if config is not None else f"preset {preset}"
    problems = validate(cfg, n_gpus=gpus)
    if not problems:
        print(f"ok: {where} is a valid config")
        return
    from core.files import read_text

    lines = yaml_key_lines(read_text(config, "config file")) if config is not None else {}
    for problem in problems:
        key = problem.split(":", 1)[0]
        line = lines.get(key)
        print(f"error: {where}{':' + str(line) if line else ''}: {problem}", file=sys.stderr)
    raise typer.Exit(2)


@config_app.command("export")
def export(
    preset: str = typer.Option("default", "--preset", "-p", help=PRESET_HELP),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
    force: bool = typer.Option(False, "--force", "-f", help="Replace the --output file if it exists."),
) -> None:
    """Write a complete YAML config that `train --config` and `config validate` accept."""
    from core.training.config import validate

    if output is not None:
        _check_output(output, force)
    cfg = _load(preset, None, overrides)
    header = (f"# devops-rl training config (preset {preset}"
              f"{', ' + ' '.join('--set ' + o for o in overrides) if overrides else ''}).\n"
              "# Use it with: devops-rl train --config FILE   |   check it: devops-rl config validate FILE\n")
    problems = validate(cfg)
    if problems:
        header += "".join(f"# warning: {p}\n" for p in problems)
    text = header + cfg.to_yaml()
    if output is None:
        sys.stdout.write(text)
    else:
        from core.files import write_atomic

        write_atomic(output, text)
        print(f"wrote {output}", file=sys.stderr)


def _check_output(output: Path, force: bool) -> None:
    """Refuse an --output that is a folder, lies in no folder, or (without --force) would replace a file."""
    from core.errors import UserError, shorten
    from core.files import check_replaceable

    if output.is_dir():
        raise UserError(f"--output {shorten(output)}: is a folder; name the file to write, "
                        f"e.g. {shorten(output / 'config.yaml')}")
    if not output.parent.is_dir():
        raise UserError(f"--output {shorten(output)}: no folder {shorten(output.parent)}; create it first")
    check_replaceable(output)  # a device, FIFO or symlink is never replaced, --force or not
    if output.exists() and not force:
        raise UserError(f"--output {shorten(output)}: the file exists; add --force to replace it")


def _resolve_side(spec: str):
    """A diff side: a config file, or a preset name (`ci-fast` or `preset:ci-fast`)."""
    from core.errors import UserError
    from core.training.config import PRESETS, load_config

    name = spec.removeprefix("preset:")
    if Path(spec).is_file():
        return load_config("default", config_file=Path(spec))
    if name in PRESETS:
        return load_config(name)
    raise UserError(f"config diff: '{spec}' is neither a file nor a preset ({', '.join(PRESETS)})")


@config_app.command("diff")
def diff(
    a: str = typer.Argument(..., help="Config file or preset name."),
    b: str = typer.Argument(..., help="Config file or preset name."),
) -> None:
    """Print the settings that differ between two configs (files over the default preset, or presets)."""
    left, right = _resolve_side(a).flat(), _resolve_side(b).flat()
    keys = [k for k in dict.fromkeys([*left, *right]) if left.get(k, "<unset>") != right.get(k, "<unset>")]
    if not keys:
        print(f"no differences between {a} and {b}")
        return
    width = max(len(k) for k in keys)
    print(f"{'key':<{width}}  {a}  ->  {b}")
    for key in keys:
        print(f"{key:<{width}}  {left.get(key, '<unset>')!r}  ->  {right.get(key, '<unset>')!r}")


@config_app.command("doctor")
def doctor(
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML config file over the preset."),
    preset: str = typer.Option("default", "--preset", "-p", help=PRESET_HELP),
    overrides: list[str] = typer.Option([], "--set", help=SET_HELP),
    gpu_mem: float | None = typer.Option(None, "--gpu-mem", min=0.1, help="GPU memory in GiB (default: NVML)."),
) -> None:
    """Estimate GPU memory for the config and print the tuning advice that applies."""
    from core.training.config import validate
    from core.training.doctor import report

    cfg = _load(preset, config, overrides)
    print(report(cfg, gpu_mem_gib=gpu_mem))
    problems = validate(cfg)
    if problems:
        print("\nconfig problems (devops-rl config validate):")
        for problem in problems:
            print(f"  - {problem}")
