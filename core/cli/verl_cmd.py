"""`devops-rl config verl`: print the exact config verl 0.9.1 would receive, after the project's own checks (the
ones `train` applies) and verl's own validate_config.

Composed from the installed verl package's ppo_trainer config; runs on a CPU machine (no GPU is touched).
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(config_app: typer.Typer) -> None:
    @config_app.command(
        "verl",
        help="Print the exact config verl would receive (YAML), after the checks train runs and verl's validate_config.",
    )
    def _verl(
        preset: str = typer.Option("default", "--preset", "-p", help="Preset to start from: default, ci-fast, single-gpu."),
        config: Path | None = typer.Option(None, "--config", "-c", help="A config file over the preset."),
        overrides: list[str] = typer.Option([], "--set", "-s", metavar="KEY=VALUE",
                                            help="Dotted override, e.g. --set data.train_batch_size=8 (repeatable)."),
        ray_address: str | None = typer.Option(None, "--ray-address", help="Show the config for an existing Ray cluster."),
    ) -> None:
        from core.cli.config_cmd import refuse_invalid
        from core.training.config import load_config
        from core.training.verl_backend.compose import RUN_PLACEHOLDER, compose_verl_config, to_yaml

        cfg = load_config(preset, config_file=config, overrides=list(overrides))
        refuse_invalid(cfg)  # what train would refuse is never shown as what verl would receive
        composed = compose_verl_config(cfg, ray_address=ray_address)
        source = f"preset {preset}" + (f" + {config}" if config else "") + "".join(f" --set {o}" for o in overrides)
        print(f"# verl ppo_trainer config for {source}; passed devops-rl's checks and verl's validate_config.")
        print(f"# {RUN_PLACEHOLDER} is the run folder 'devops-rl train --backend verl' creates.")
        print(to_yaml(composed), end="")
