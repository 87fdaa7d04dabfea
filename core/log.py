"""Logging for every command: a concise console handler and a DEBUG file handler, both secret-masked.

The console shows INFO lines (rich when a TTY, plain timestamped lines otherwise), with control characters of
user text escaped; the file keeps everything, tracebacks included, in the run's folder or the user log folder.
Neither can fail on text a locale cannot encode (a `--set` key in `LC_ALL=C`): it is escaped, never an error.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

FILE_FORMAT = "%(asctime)s | %(levelname)-8s | %(funcName)s:%(lineno)d | %(message)s"
PLAIN_CONSOLE_FORMAT = "%(asctime)s %(levelname)s %(message)s"
SECRET_ENV_VARS = ("OPENAI_API_KEY", "DEVOPS_RL_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")
MASK = "***"

_SECRET_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}"),  # OpenAI-style keys
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),  # Hugging Face tokens
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),  # GitHub tokens
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._\-]{8,}"),
    re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://[^/\s:@]*:)[^/\s@]+(?=@)"),  # the password of user:password@ in a URL
    re.compile(r"(?i)(\b(?:api[_-]?key|(?:access[_-]?|auth[_-]?)?token|secret[_-]?key|password|passwd)\b\s*[=:]\s*)[\"']?[^\s\"',;]{4,}"),
]

_handlers: dict[str, logging.Handler] = {}


def secret_values() -> list[str]:
    """The secret values currently in the environment (long enough to mask without false hits)."""
    return [v for v in (os.environ.get(name, "") for name in SECRET_ENV_VARS) if len(v) >= 6]


def mask_secrets(text: str, *, patterns: bool = True) -> str:
    """Replace every secret from the environment, and anything that looks like an API key, by ***.

    `patterns=False` replaces only the environment's values: for text that is already JSON, where a key
    pattern's match could swallow the backslash of an escaped quote and break the document.
    """
    for value in secret_values():
        text = text.replace(value, MASK)
    if not patterns:
        return text
    for pattern in _SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text


def mask_nested(value: Any) -> Any:
    """`value` with every string inside it (through dicts, lists and tuples) passed through `mask_secrets`."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, dict):
        return {k: mask_nested(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_nested(v) for v in value]
    return value


class SecretMaskFilter(logging.Filter):
    """Masks secrets in the formatted message (arguments included) before any handler writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_secrets(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_secrets(record.exc_text)
        return True


class TerminalFormatter(logging.Formatter):
    """A console line with user text made terminal-safe (`core.errors.printable`: no escape sequences, no
    surrogates a non-UTF-8 locale cannot encode); newlines stay, for tracebacks shown with -v."""

    def format(self, record: logging.LogRecord) -> str:
        from core.errors import printable

        return printable(super().format(record), keep="\n\t")


def _console_handler(verbose: bool) -> logging.Handler:
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(show_path=False, show_time=False, markup=False, rich_tracebacks=False)
        handler.setFormatter(TerminalFormatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(TerminalFormatter(PLAIN_CONSOLE_FORMAT, datefmt="%H:%M:%S"))
    handler.setLevel(logging.DEBUG if verbose else logging.INFO)
    handler.addFilter(SecretMaskFilter())
    return handler


def setup_logging(*, verbose: bool = False, console: bool = True, log_file: Path | None = None) -> Path | None:
    """Configure the root logger once per process; returns the log file in use (None: console only).

    Without `log_file` the log goes to `<user log dir>/devops-rl.log` until `use_log_file` moves it
    into a run folder. When that file cannot be written (a read-only home, a log folder that is a file),
    logging stays on the console and one warning says why: no command fails for want of a log file.
    """
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    for name in ("console", "file"):
        old = _handlers.pop(name, None)
        if old is not None:
            root.removeHandler(old)
            old.close()
    if console:
        _handlers["console"] = _console_handler(verbose)
        root.addHandler(_handlers["console"])
    for noisy in ("httpx", "httpcore", "urllib3", "filelock", "asyncio", "markdown_it", "PIL", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        if log_file is None:
            from core.paths import log_dir

            log_file = log_dir() / "devops-rl.log"
        return use_log_file(log_file)
    except OSError as exc:
        where = exc.filename or log_file or "the log folder"
        logging.getLogger(__name__).warning("cannot write the log file (%s: %s); logging to the console only "
                                            "(set DEVOPS_RL_LOG_DIR to a writable folder)", where, exc.strerror or exc)
        return None


def use_log_file(path: Path) -> Path:
    """Send the DEBUG log to `path` (appending), replacing the previous file handler; OSError when it cannot be opened
    (the previous handler is then kept)."""
    root = logging.getLogger()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8", errors="backslashreplace")  # a surrogate never fails a line
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter(FILE_FORMAT))
    handler.addFilter(SecretMaskFilter())
    old = _handlers.pop("file", None)
    if old is not None:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    _handlers["file"] = handler
    return path


def current_log_file() -> Path | None:
    """The file the DEBUG log currently goes to, if logging was set up."""
    handler = _handlers.get("file")
    return Path(handler.baseFilename) if isinstance(handler, logging.FileHandler) else None
