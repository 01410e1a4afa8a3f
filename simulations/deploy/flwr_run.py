"""Flower's ``flwr run`` without a walk of ignored folders: ``python -m simulations.deploy.flwr_run ARGS``.

``flwr run APP`` packs the app into a bundle (FAB) from every file below ``APP``: flwr 1.39 lists
the whole tree, resolving each path, and only then drops what the app's ``.gitignore`` excludes.
For fedpriv's own app (the repository root) that is a checkout's ``.venv``, about 50,000 files and
3.4 s of CPU per run here. This launcher runs the unchanged ``flwr`` command line (``ARGS``) with that
listing replaced by :func:`collect_app_files`, which does not enter a folder the ``.gitignore``
excludes; every other rule of Flower's build applies as before, so the bundle is the same
(docs/deployment.md §1).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["collect_app_files", "main"]


def collect_app_files(root: Path) -> dict[str, Path]:
    """The files below ``root`` as flwr's ``collect_files`` lists them, less those in folders ``.gitignore`` excludes.

    As flwr does: symbolic links are skipped, and so is a path that resolves outside ``root``. A folder
    is left unwalked only when ``root/.gitignore`` excludes it and has no ``!`` pattern (with one, a file
    below an excluded folder may be included again, so every folder is walked).
    """
    from flwr.cli.utils import build_pathspec, load_gitignore_patterns

    root = root.expanduser()
    resolved_root = root.resolve()
    patterns = load_gitignore_patterns(root / ".gitignore")
    prune = build_pathspec(patterns) if not any(p.startswith("!") for p in patterns) else None
    files: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        if prune is not None:
            dirnames[:] = [d for d in dirnames
                           if not prune.match_file((here / d).relative_to(root).as_posix() + "/")]
        for filename in filenames:
            path = here / filename
            if path.is_symlink() or not path.resolve().is_relative_to(resolved_root):
                continue
            files[path.relative_to(root).as_posix()] = path
    return files


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``flwr ARGS`` with the app's files listed by :func:`collect_app_files`."""
    import flwr.cli.build as build

    if not hasattr(build, "collect_files"):
        raise SystemExit("simulations.deploy.flwr_run: this flwr release has no flwr.cli.build.collect_files to "
                         "replace; run `flwr` itself")
    build.collect_files = collect_app_files
    from flwr.cli.app import app

    sys.argv = ["flwr", *(sys.argv[1:] if argv is None else argv)]
    app()


if __name__ == "__main__":
    main()
