"""MovieLens-100k from PyPI: fetch once into a local cache, then read offline (docs/design.md §7).

The ``recbole==1.2.1`` wheel on PyPI ships MovieLens-100k in RecBole's atomic format
(``recbole/dataset_example/ml-100k/ml-100k.inter`` with 943 users, 1,682 items, 100,000 ratings,
and ``ml-100k.item`` with the genres). :func:`fetch_movielens_100k` downloads that wheel with
``pip download`` (no install, no dependencies) — or takes a wheel the user already has — and
extracts only those two members into the cache. It is the only function here that touches the
network, and it runs only when asked (``fedpriv datasets fetch movielens-100k``); loading a run's
data goes through :func:`movielens_100k_path`, which never downloads.

Cache directory: ``$FEDPRIV_DATA_DIR/movielens-100k`` when the variable is set, else
``~/.cache/fedpriv/movielens-100k``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from fedpriv.data.files import user_file_errors
from fedpriv.data.wheels import data_cache_dir, fetch_from_wheel, write_atomically

__all__ = [
    "ML100K_INTER",
    "ML100K_ITEM",
    "ML100K_MEMBERS",
    "RECBOLE_WHEEL",
    "default_cache_dir",
    "fetch_movielens_100k",
    "movielens_100k_path",
]

#: The PyPI distribution that carries MovieLens-100k.
RECBOLE_WHEEL = "recbole==1.2.1"
ML100K_INTER = "ml-100k.inter"
ML100K_ITEM = "ml-100k.item"
#: Members of the wheel extracted into the cache (the ratings and the item genres).
ML100K_MEMBERS: tuple[str, ...] = tuple(f"recbole/dataset_example/ml-100k/{n}" for n in (ML100K_INTER, ML100K_ITEM))


def default_cache_dir() -> Path:
    """``$FEDPRIV_DATA_DIR/movielens-100k`` or ``~/.cache/fedpriv/movielens-100k``."""
    return data_cache_dir("movielens-100k")


def movielens_100k_path(cache_dir: Path | None = None) -> Path:
    """Path of the cached ``ml-100k.inter``; raises ``FileNotFoundError`` (never downloads) when absent."""
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    path = cache / ML100K_INTER
    if not path.is_file():
        raise FileNotFoundError(
            f"MovieLens-100k is not in the cache {str(cache)!r} (no {ML100K_INTER}); run "
            f"`fedpriv datasets fetch movielens-100k` once (add --cache-dir {cache} for this directory), "
            "or use dataset='file' with the path of a MovieLens u.data / .inter file"
        )
    return path


def fetch_movielens_100k(cache_dir: Path | None = None, *, wheel: Path | None = None, quiet: bool = True) -> Path:
    """Put ``ml-100k.inter`` (+ ``ml-100k.item``) into the cache from the recbole wheel; return its path."""
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return fetch_from_wheel(cache / ML100K_INTER, RECBOLE_WHEEL, lambda w: _extract(w, cache), wheel=wheel,
                            quiet=quiet, offline_error=_offline_error)


def _offline_error(tried: str, detail: str) -> RuntimeError:
    return RuntimeError(
        f"could not download MovieLens-100k: tried `{tried}` and it failed ({detail}). This machine seems "
        f"offline or cannot reach PyPI. Two ways out: (1) download the wheel {RECBOLE_WHEEL} elsewhere "
        "(`pip download recbole==1.2.1 --no-deps --only-binary=:all:`) and run "
        "`fedpriv datasets fetch movielens-100k --wheel PATH/recbole-1.2.1-py3-none-any.whl`; or (2) point the "
        "run's data path at an extracted MovieLens-100k file (dataset='file', path='.../u.data' or "
        "'.../ml-100k.inter')"
    )


def _extract(wheel: Path, cache: Path) -> None:
    """Copy the two ML-100k members of ``wheel`` into ``cache`` (each written atomically)."""
    # both members read (a few MB) before anything is written: a corrupt archive fails as the wheel's error
    with user_file_errors(wheel, f"the {RECBOLE_WHEEL} wheel (a .whl/.zip archive)"), zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        missing = [m for m in ML100K_MEMBERS if m not in names]
        if missing:
            raise ValueError(f"wheel {str(wheel)!r} lacks {', '.join(missing)}; it must be the {RECBOLE_WHEEL} wheel")
        contents = {member: zf.read(member) for member in ML100K_MEMBERS}  # checks each member's CRC
    # the item file first: the ratings file's presence marks a complete cache
    for member in reversed(ML100K_MEMBERS):
        write_atomically(cache / Path(member).name, contents[member])
