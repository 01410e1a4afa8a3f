"""What the ``fedpriv`` command groups share: the console, the one-line message printer and config loading.

``simulations.cli`` (the main app), ``simulations.analyze_cli`` and ``simulations.deploy.cli`` all
import from here, so none of them imports another for a helper.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from fedpriv.config import RunConfig

__all__ = ["console", "load_config", "make_console", "print_line"]


def make_console() -> Console:
    """A rich console; off a terminal (a pipe, a log file) 200 columns wide instead of rich's 80, so no column is cropped."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


#: The main app's console (``fedpriv run``, ``compare``, ...), where :func:`print_line` prints.
console = make_console()


def print_line(label: str, text: object, color: str = "red") -> None:
    """Print ``label: text`` as one line: the text is not read as rich markup and never wrapped."""
    console.print(f"[{color}]{label}:[/{color}] {escape(str(text))}", soft_wrap=True)


def load_config(config: Path | None, overrides: list[str], base: dict | None = None) -> RunConfig:
    """The config file (or ``base``) with ``--set`` overrides; a bad key or value exits with its message."""
    try:
        cfg = RunConfig.from_toml(config) if config is not None else RunConfig.from_mapping(base or {})
        return cfg.with_overrides(overrides)
    except tomllib.TOMLDecodeError as exc:
        print_line("error", f"{config} is not valid TOML ({exc})")
        raise typer.Exit(code=2) from exc
    except (ValueError, FileNotFoundError) as exc:
        print_line("error", exc)
        raise typer.Exit(code=2) from exc
