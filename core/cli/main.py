"""Entry point of `devops-rl`: builds the typer app and turns errors into one line and an exit code.

User errors print `error: ...` and exit 2; unexpected errors print one line pointing at the log file
and exit 1 (the traceback goes to the log); Ctrl-C exits 130.
"""

from __future__ import annotations

import errno
import logging
import sys

import typer
from typer.exceptions import TyperException

from core import __version__
from core.errors import UserError, printable, shorten

# Errors of the user's files and folders (permissions, a read-only disk, a full disk, a file where a folder
# belongs, a name too long): whatever raised them, they are the user's to fix, so exit 2 naming the path.
USER_ERRNOS = frozenset((errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG,
                         errno.EISDIR, errno.ENOTDIR, errno.EEXIST))

log = logging.getLogger(__name__)

app = typer.Typer(
    name="devops-rl",
    help="Train, evaluate and watch an RL-fine-tuned DevOps Architect agent (GRPO on torch or verl).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"devops-rl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show DEBUG messages on the console too."),
) -> None:
    from core.log import setup_logging

    setup_logging(verbose=verbose)


def _register_commands() -> None:
    # Order here is the order in `devops-rl --help`.
    from core.cli import (
        config_cmd,
        eval_cmd,
        export_cmd,
        reward_cmd,
        runs_cmd,
        tail_cmd,
        tasks_cmd,
        train_cmd,
        tui_cmd,
    )

    for module in (train_cmd, tail_cmd, eval_cmd, tasks_cmd, reward_cmd, config_cmd, runs_cmd, export_cmd, tui_cmd):
        module.register(app)


_register_commands()


def _fail(message: str, code: int) -> int:
    """Print the one `error:` line: flat, secrets masked (a password in a URL included), terminal-safe."""
    from core.log import mask_secrets

    flat = printable(mask_secrets(" ".join(message.split())))  # one line, whatever a library's message held
    print(f"error: {flat}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code instead of raising."""
    try:
        result = app(args=argv, prog_name="devops-rl", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except UserError as exc:
        log.debug("user error", exc_info=True)
        return _fail(str(exc), exc.exit_code)
    except TyperException as exc:  # bad arguments and options (typer's vendored click errors)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if exc.exit_code == 2 and ctx is not None else ""
        return _fail(f"{exc.format_message()}{hint}", exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        print("interrupted", file=sys.stderr)
        return 130
    except typer.Exit as exc:
        return exc.exit_code
    except OSError as exc:
        if exc.errno not in USER_ERRNOS or not exc.filename:
            return _unexpected(exc)
        log.debug("file error", exc_info=True)
        return _fail(f"{shorten(exc.filename)}: {exc.strerror}; check the path and its permissions", 2)
    except Exception as exc:
        if _interrupted(exc):
            print("interrupted", file=sys.stderr)
            return 130
        return _unexpected(exc)


def _interrupted(exc: BaseException) -> bool:
    """Whether `exc` is a Ctrl-C in disguise: a library that catches KeyboardInterrupt during an import and raises
    its own error from it (transformers: "Could not import module ...")."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _unexpected(exc: Exception) -> int:
    """The last resort: one line here, the traceback in the log file (or, without one, on the console with -v)."""
    from core.log import current_log_file, setup_logging

    if current_log_file() is None:
        setup_logging(console=False)
    log.debug("unexpected error: %s", exc, exc_info=True)  # the file only: the console gets one line
    where = current_log_file()
    hint = f"traceback in {where}" if where is not None else "no log file; run with -v to see the traceback"
    return _fail(f"unexpected {type(exc).__name__}: {shorten(exc, 300)} ({hint})", 1)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
