"""The run directory: crash-consistent round commits, one writer, strict resume (docs/runs.md).

A run directory holds

* ``run.json`` — the manifest, written once when the directory is made: the configuration as
  written to ``config.toml`` and its digest (and, for a fork, where it came from);
* ``config.toml`` — the resolved configuration (must keep matching the manifest);
* ``checkpoint.npz`` — **the commit record** of the last finished round: the round number, its
  metrics line, the task's arrays (the global model, ...), the privacy ledger, any task state, and a
  hash chain over every metrics line committed so far;
* ``metrics.jsonl`` — one line per committed round, derived from the commit records;
* ``ledger.json`` — a readable copy of the committed ledger;
* ``summary.json`` and plots, written at the end of a run.

**Atomic round commit** (:meth:`RunDirectory.commit`): a round's commit record is written to a
temporary file, fsynced and renamed over ``checkpoint.npz`` (the commit point: the model, the
ledger entry and the metrics line become durable together or not at all); then its metrics line is
appended (fsynced) and ``ledger.json`` rewritten. A kill at any instant leaves either the previous
commit or this one, and :meth:`RunDirectory.recover` brings the other files in line with the last
commit: it drops metrics lines past it (a line written before its commit could not happen, but a
torn line or a stale file can), re-appends its line if the kill came between the rename and the
append, rewrites ``ledger.json``, and refuses with a clear message anything inconsistent below it
(a metrics line edited or lost). So a resumed run has every round exactly once and its ledger equals
the uninterrupted run's, entry for entry.

**One writer**: a process that writes a run directory holds an OS lock (``fcntl.flock``) on its
``.lock`` file, which names the holder's pid; a second writer fails at once. The kernel releases the
lock when the holder dies, so a lock left by a killed process is simply taken over (:mod:`fedpriv.rundir_lock`).

**Private, and never through a link**: the directory is made with mode 0700 and every file written
here with mode 0600 (temporary files exclusively, ``O_EXCL``); every file of the run is opened with
``O_NOFOLLOW``, so a symbolic link where a run file is expected (``.lock``, ``metrics.jsonl``, ...)
is refused with a :class:`RunDirectoryError` naming it, and its target is never read or written.
Files other code writes into the directory (plots, ...) are set to 0600, and folders to 0700,
whenever a writer opens or closes the directory (:mod:`fedpriv.rundir_files`).

Everything that can go wrong with the files raises :class:`RunDirectoryError` with one line naming
the file, what is wrong and what to do. Nothing here imports Flower.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import tomllib
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np
import tomli_w

from fedpriv.private_files import PRIVATE_DIR_MODE
from fedpriv.rundir_files import (
    RunDirectoryError,
    _append,
    _create_temp,
    _file,
    _fsync_dir,
    _read_bytes,
    _read_json,
    _read_text,
    _tighten,
    _write_atomic,
)
from fedpriv.rundir_lock import DEPLOY_LOCK, LOCK, _acquire_lock, acquire_lock, lock_holder

__all__ = ["DEPLOY_LOCK", "LOCK", "Committed", "RunDirectory", "RunDirectoryError", "changed_keys", "acquire_lock", "fork_run", "from_json", "json_safe", "lock_holder"]

#: Version of the commit record (``checkpoint.npz``) and the manifest (``run.json``).
SCHEMA_VERSION = 2
MANIFEST = "run.json"
CONFIG = "config.toml"
CHECKPOINT = "checkpoint.npz"
METRICS = "metrics.jsonl"
LEDGER = "ledger.json"
_META = "__commit__"

#: Test seam: called with (step, round) at each step of a commit (``commit-start``,
#: ``checkpoint-written``, ``checkpoint-committed``, ``metrics-partial`` — half of the line
#: written —, ``metrics-appended``, ``ledger-written``). The fault-injection tests set it to kill the
#: process there; it is None otherwise.
fault_hook: Callable[[str, int], None] | None = None


class ConfigLike(Protocol):
    """What a run directory needs of a configuration: its flat values and their digest."""

    def to_dict(self) -> dict[str, Any]: ...

    def digest(self) -> str: ...


def json_safe(value: Any) -> Any:
    """Replace non-finite floats by strings ("inf", "nan") so the file stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    return value


_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def from_json(value: Any) -> Any:
    """Undo :func:`json_safe`: the strings "inf", "-inf" and "nan" back to floats (records read back from disk)."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ between two flat configurations (added and removed keys included)."""
    return sorted(k for k in set(old) | set(new) if old.get(k, _MISSING) != new.get(k, _MISSING))


_MISSING = object()


def _describe_changes(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 6) -> str:
    """``key: old → new`` for the first ``limit`` changed keys."""
    keys = changed_keys(old, new)
    shown = [f"{k}: {old.get(k, '(absent)')!r} → {new.get(k, '(absent)')!r}" for k in keys[:limit]]
    return ", ".join(shown) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _chain(previous: str, line: bytes) -> str:
    """The hash chain over metrics lines: h_k = sha256(h_{k-1} ‖ line_k)."""
    return hashlib.sha256(previous.encode() + line).hexdigest()


def _fault(step: str, server_round: int) -> None:
    if fault_hook is not None:
        fault_hook(step, server_round)


@dataclass(frozen=True)
class Committed:
    """What the last commit of a run directory holds (round 0 and nothing else for a fresh run).

    Attributes
    ----------
    round : int
        The last committed round (0: none).
    records : list of dict
        Every committed metrics record, in order.
    arrays : dict of str to ndarray
        The task's arrays of the last commit (e.g. ``params``, the global model).
    ledger : dict or None
        The privacy ledger's state after the last commit.
    state : dict or None
        Any other task state of the last commit.
    notes : list of str
        What :meth:`RunDirectory.recover` repaired (lines dropped past the commit, a line re-appended).
    """

    round: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    ledger: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


class RunDirectory:
    """One run's directory, locked for writing by this process; make it with :meth:`create`, :meth:`open` or :meth:`at`."""

    def __init__(self, path: Path, manifest: dict[str, Any], lock_fd: int | None) -> None:
        self.path = Path(path)
        self.manifest = manifest
        self._lock_fd = lock_fd
        self._round = 0
        self._lines = 0
        self._hash = ""

    # ------------------------------------------------------------------ making and opening
    @classmethod
    def create(cls, root: Path, config: ConfigLike, name: str | None = None, *,
               forked_from: dict[str, Any] | None = None) -> RunDirectory:
        """A fresh, locked directory ``root/<name or timestamp>-<config digest>`` holding the manifest and ``config.toml``."""
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        base = f"{name or stamp}-{config.digest()}"
        path, suffix = Path(root) / base, 1
        while os.path.lexists(path):
            suffix += 1
            path = Path(root) / f"{base}-{suffix}"
        return cls._make(path, config, forked_from)

    @classmethod
    def at(cls, path: Path, config: ConfigLike, *, owner: int | None = None) -> RunDirectory:
        """The run directory exactly at ``path``, locked: created (with ``config``) if it holds no run, else opened.

        An existing directory must hold a run of ``config`` (see :meth:`open`); ``owner`` is the pid
        of the ``fedpriv deploy`` that supervises it, if any.
        """
        path = Path(path)
        if os.path.lexists(path / MANIFEST) or os.path.lexists(path / CONFIG):
            return cls.open(path, config, owner=owner)
        return cls._make(path, config, None, owner)

    @classmethod
    def _make(cls, path: Path, config: ConfigLike, forked_from: dict[str, Any] | None,
              owner: int | None = None) -> RunDirectory:
        values = config.to_dict()
        manifest = {"schema_version": SCHEMA_VERSION, "created": _dt.datetime.now().isoformat(timespec="seconds"),
                    "config_digest": config.digest(), "config": json_safe(values), "forked_from": forked_from}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(path, PRIVATE_DIR_MODE)
            except FileExistsError:
                pass  # ``at``: an empty directory made for this run
            fd = _acquire_lock(path, owner)
            _tighten(path)
            _write_atomic(path / CONFIG, getattr(config, "to_toml", lambda: tomli_w.dumps(values))().encode())
            _write_atomic(path / MANIFEST, json.dumps(manifest, indent=2).encode())
        except OSError as exc:
            raise RunDirectoryError(f"cannot create the run directory {path}: {exc.strerror or exc}: choose a "
                                    "writable --out directory with free space") from None
        return cls(path, manifest, fd)

    @classmethod
    def open(cls, path: Path, config: ConfigLike | None = None, *, lock: bool = True,
             owner: int | None = None) -> RunDirectory:
        """An existing run directory, checked and (with ``lock``) locked for writing.

        Refused, with the keys named: a ``config.toml`` that no longer matches the manifest (edited
        after the run started), and a ``config`` given here that differs from the run's own.
        """
        path = Path(path)
        if not path.is_dir():
            raise RunDirectoryError(f"{path} is not a run directory (no such directory): give the directory that "
                                    f"`fedpriv run` printed")
        fix = "this directory cannot be resumed; start a new run"
        if not os.path.lexists(path / MANIFEST):
            if os.path.lexists(path / CONFIG):
                raise RunDirectoryError(f"{path} has no {MANIFEST}: it was written by an older fedpriv or its "
                                        f"creation was interrupted; {fix}")
            raise RunDirectoryError(f"{path} is not a run directory (no {MANIFEST} or {CONFIG}): give the "
                                    f"directory that `fedpriv run` printed")
        manifest = _read_json(path / MANIFEST, "the run's manifest", fix)
        if not isinstance(manifest, dict) or manifest.get("schema_version") != SCHEMA_VERSION or not isinstance(
                manifest.get("config"), dict):
            raise RunDirectoryError(f"{path / MANIFEST} is not a fedpriv manifest of schema version "
                                    f"{SCHEMA_VERSION}: {fix}")
        written = _read_config_toml(path / CONFIG)
        if written != manifest["config"]:
            raise RunDirectoryError(
                f"{path / CONFIG} was changed after the run started ({_describe_changes(manifest['config'], written)}): "
                f"a run directory keeps the config it started with. Restore the file, or start a new run "
                f"(fedpriv run CONFIG --set ...), or fork this one (fedpriv run --resume {path} --fork --set ...)")
        if config is not None and config.digest() != manifest["config_digest"]:
            raise RunDirectoryError(
                f"{path} holds a run of another configuration ({_describe_changes(manifest['config'], json_safe(config.to_dict()))}): "
                "resume it with its own config, or fork it into a new run directory with the new one (--fork)")
        fd = _acquire_lock(path, owner) if lock else None
        if fd is not None:
            _tighten(path)  # a directory written by an older fedpriv, or files others left 0644
        return cls(path, manifest, fd)

    def config_values(self) -> dict[str, Any]:
        """The flat configuration the run was started with (as written to ``config.toml``)."""
        return dict(self.manifest["config"])

    # ------------------------------------------------------------------ lock
    def close(self) -> None:
        """Make the files 0600 and folders 0700 (plots, ...), then release the write lock (released at exit too)."""
        if self._lock_fd is not None:
            _tighten(self.path)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_lock(self) -> None:
        if self._lock_fd is None:
            raise RunDirectoryError(f"{self.path} was opened read-only (lock=False): it cannot be written")

    # ------------------------------------------------------------------ recovery
    def recover(self) -> Committed:
        """Bring the directory in line with its last commit and return what that commit holds.

        Drops metrics lines past the commit (and a torn last line), re-appends the committed line a
        kill cut off, rewrites ``ledger.json``; raises :class:`RunDirectoryError` when the committed
        lines were edited or lost, or a file is corrupt.
        """
        for leftover in self.path.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)
        meta, arrays = self._load_commit()
        notes: list[str] = []
        records: list[dict[str, Any]] = []
        if meta is not None:
            records = self._reconcile_metrics(meta, notes)
            self._round, self._lines, self._hash = meta["round"], meta["lines"], meta["lines_sha256"]
            if meta.get("ledger") is not None and self._lock_fd is not None:
                self._rewrite_ledger(meta["ledger"], notes)
        elif os.path.lexists(self.path / METRICS):
            size = len(_read_bytes(self.path / METRICS))
            if self._lock_fd is not None and size:
                notes.append(f"dropped {METRICS} ({size} bytes) written before the first commit")
                self._truncate_metrics(0)
        return Committed(round=self._round, records=records, arrays=arrays,
                         ledger=None if meta is None else meta.get("ledger"),
                         state=None if meta is None else meta.get("state"), notes=notes)

    def _load_commit(self) -> tuple[dict[str, Any] | None, dict[str, np.ndarray]]:
        """The last commit record (meta, arrays), or (None, {}) when nothing was committed."""
        path = self.path / CHECKPOINT
        fix = ("it cannot be repaired: start a new run (or restore the file from a backup); the finished rounds are "
               f"listed in {METRICS}")
        if not os.path.lexists(path):
            return None, {}
        with _file(path, os.O_RDONLY, "rb") as fh:
            return self._parse_commit(path, fh, fix)

    def _parse_commit(self, path: Path, fh: IO[bytes], fix: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The commit record (meta, arrays) read from the open ``checkpoint.npz`` ``fh``, checked."""
        if os.fstat(fh.fileno()).st_size == 0:
            raise RunDirectoryError(f"{path} is empty (the commit record of the last finished round): {fix}")
        try:
            with np.load(fh, allow_pickle=False) as data:
                if _META not in data.files:
                    raise RunDirectoryError(f"{path} is not a fedpriv {SCHEMA_VERSION} commit record (no {_META}; "
                                            f"written by an older fedpriv?): {fix}")
                meta = json.loads(data[_META].tobytes().decode())
                arrays = {k: data[k].copy() for k in data.files if k != _META}
        except RunDirectoryError:
            raise
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
            raise RunDirectoryError(f"{path} is truncated or corrupt ({type(exc).__name__}: {exc}): {fix}") from None
        required = {"schema_version": int, "round": int, "lines": int, "lines_sha256": str,
                    "lines_sha256_prev": str, "record": str, "config_digest": str}
        bad = [k for k, t in required.items() if not isinstance(meta.get(k), t)]
        if bad or meta["schema_version"] != SCHEMA_VERSION:
            raise RunDirectoryError(f"{path} is not a valid commit record of schema version {SCHEMA_VERSION} "
                                    f"(bad field(s) {', '.join(bad) or 'schema_version'}): {fix}")
        if meta["config_digest"] != self.manifest["config_digest"]:
            raise RunDirectoryError(f"{path} belongs to another configuration (digest {meta['config_digest']}, this "
                                    f"run {self.manifest['config_digest']}): it was copied in from another run; {fix}")
        return meta, arrays

    def _reconcile_metrics(self, meta: dict[str, Any], notes: list[str]) -> list[dict[str, Any]]:
        """Make ``metrics.jsonl`` hold exactly the committed lines; return them parsed."""
        path = self.path / METRICS
        data = _read_bytes(path) if os.path.lexists(path) else b""
        lines = data.split(b"\n")
        complete, tail = lines[:-1], lines[-1]  # tail: bytes after the last newline (a torn line, or b"")
        want, h = meta["lines"], ""
        good: list[bytes] = []
        for line in complete[:want]:
            nxt = _chain(h, line + b"\n")
            good.append(line)
            h = nxt
        last_line = meta["record"].encode()
        if len(good) == want and h == meta["lines_sha256"]:
            extra = len(complete) - want + (1 if tail else 0)
            if extra:
                notes.append(f"dropped {extra} line(s) of {METRICS} past the last committed round {meta['round']} "
                             "(written or torn after the last commit)")
                self._truncate_metrics(sum(len(x) + 1 for x in good))
        elif (len(good) >= want - 1 and _chain_of(good[:want - 1]) == meta["lines_sha256_prev"]):
            # killed between the commit and its metrics line: the line comes from the commit record
            keep = sum(len(x) + 1 for x in good[:want - 1])
            notes.append(f"re-appended the line of round {meta['round']} to {METRICS} from {CHECKPOINT} "
                         "(the run stopped between the commit and the line)")
            self._truncate_metrics(keep)
            with _append(path) as fh:
                fh.write(last_line + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            good = good[:want - 1] + [last_line]
        else:
            found = len(complete)
            raise RunDirectoryError(
                f"{path} does not match the {want} committed round(s) in {CHECKPOINT} (it holds {found} complete "
                f"line(s){', and a torn one' if tail else ''}; a committed line was edited, lost or reordered): "
                "restore the file, or start a new run")
        try:
            return [from_json(json.loads(x)) for x in good]
        except json.JSONDecodeError as exc:  # unreachable unless the hash matched a non-JSON line
            raise RunDirectoryError(f"{path} holds a committed line that is not JSON ({exc.msg})") from None

    def _truncate_metrics(self, size: int) -> None:
        """Cut ``metrics.jsonl`` to its first ``size`` bytes (durably)."""
        self._require_lock()
        path = self.path / METRICS
        with _file(path, os.O_RDWR | os.O_CREAT, "r+b") as fh:
            fh.truncate(size)
            fh.flush()
            os.fsync(fh.fileno())

    def _rewrite_ledger(self, ledger: dict[str, Any], notes: list[str]) -> None:
        """Make ``ledger.json`` the committed ledger (it is a copy; the commit record is authoritative)."""
        path = self.path / LEDGER
        try:
            current = json.loads(_read_text(path)) if os.path.lexists(path) else None
        except (OSError, ValueError):
            current = "unreadable"
        if current != ledger:
            if current is not None:
                notes.append(f"rewrote {LEDGER} from the last commit ({'torn or unreadable' if current == 'unreadable' else 'stale'})")
            self._write_file(LEDGER, json.dumps(ledger, indent=2).encode())

    # ------------------------------------------------------------------ commit
    def commit(self, record: Mapping[str, Any], *, arrays: Mapping[str, np.ndarray] | None = None,
               ledger: Mapping[str, Any] | None = None, state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Durably commit one finished round: its metrics ``record`` (with its ``"round"``), arrays, ledger and state.

        Returns the record as committed (what ``metrics.jsonl`` holds and a resumed run reads back:
        JSON types, e.g. string keys). Raises :class:`RunDirectoryError` on a write error (disk full,
        ...): the previous commit is then intact and the directory resumable.
        """
        self._require_lock()
        server_round = int(record["round"])
        if server_round <= self._round:
            raise ValueError(f"round must increase from commit to commit, got {server_round} after {self._round}")
        line = json.dumps(json_safe(dict(record))).encode()
        if b"\n" in line:
            raise ValueError("a metrics record must serialize to one line")
        new_hash = _chain(self._hash, line + b"\n")
        meta = {"schema_version": SCHEMA_VERSION, "round": server_round, "lines": self._lines + 1,
                "lines_sha256": new_hash, "lines_sha256_prev": self._hash, "record": line.decode(),
                "ledger": None if ledger is None else json_safe(dict(ledger)),
                "state": None if state is None else json_safe(dict(state)),
                "config_digest": self.manifest["config_digest"]}
        arrays = dict(arrays or {})
        if _META in arrays:
            raise ValueError(f"array name {_META!r} is reserved")
        _fault("commit-start", server_round)
        target = self.path / CHECKPOINT
        try:
            tmp = self.path / f".{CHECKPOINT}.tmp"
            with _create_temp(tmp) as fh:
                payload: dict[str, Any] = {_META: np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays}
                np.savez(fh, **payload)
                fh.flush()
                os.fsync(fh.fileno())
            _fault("checkpoint-written", server_round)
            os.replace(tmp, target)
            _fsync_dir(self.path)
            self._round, self._lines, self._hash = server_round, self._lines + 1, new_hash
            _fault("checkpoint-committed", server_round)
            target = self.path / METRICS
            with _append(target) as fh:
                half = len(line) // 2
                fh.write(line[:half])
                fh.flush()
                _fault("metrics-partial", server_round)
                fh.write(line[half:] + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            _fault("metrics-appended", server_round)
            if ledger is not None:
                target = self.path / LEDGER
                self._write_file(LEDGER, json.dumps(meta["ledger"], indent=2).encode())
            _fault("ledger-written", server_round)
            return from_json(json.loads(line))
        except OSError as exc:
            kept = (f"rounds up to {self._round} are committed and intact" if self._round
                    else "no round was committed yet")
            raise RunDirectoryError(f"cannot write {target}: {exc.strerror or exc}; {kept}: free space (or fix the "
                                    f"cause) and resume with `fedpriv run --resume {self.path}`") from None

    def restart(self) -> str | None:
        """Set the committed rounds aside (``metrics.partial[-k].jsonl``) and start over from round 0.

        For tasks that cannot continue mid-run; returns the file the old lines went to, or None.
        """
        self._require_lock()
        src = self.path / METRICS
        kept = None
        old = _read_bytes(src) if os.path.lexists(src) else b""
        if old:
            k = 1
            while os.path.lexists(target := self.path / ("metrics.partial.jsonl" if k == 1
                                                         else f"metrics.partial-{k}.jsonl")):
                k += 1
            with _file(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, "wb") as fh:
                fh.write(old)  # copy first: a kill now leaves both, and the next restart copies again
                fh.flush()
                os.fsync(fh.fileno())
            kept = target.name
        (self.path / CHECKPOINT).unlink(missing_ok=True)
        (self.path / LEDGER).unlink(missing_ok=True)
        _fsync_dir(self.path)
        self._truncate_metrics(0)
        self._round, self._lines, self._hash = 0, 0, ""
        return kept

    # ------------------------------------------------------------------ reading and end of run
    def rounds(self) -> list[dict[str, Any]]:
        """The complete metrics lines as they are now (for a reader following a run; a torn last line is skipped)."""
        path = self.path / METRICS
        if not os.path.lexists(path):
            return []
        out = []
        for line in _read_bytes(path).split(b"\n")[:-1]:
            try:
                out.append(from_json(json.loads(line)))
            except json.JSONDecodeError:
                break
        return out

    def last_commit(self) -> tuple[int, dict[str, np.ndarray]]:
        """The last committed round and its arrays, read without repairing anything (round 0: none)."""
        meta, arrays = self._load_commit()
        return (0, {}) if meta is None else (int(meta["round"]), arrays)

    def write_json(self, name: str, payload: Mapping[str, Any]) -> Path:
        """Write ``payload`` as indented JSON atomically (a reader never sees half a file)."""
        try:
            return self._write_file(name, json.dumps(json_safe(dict(payload)), indent=2).encode())
        except OSError as exc:
            raise RunDirectoryError(f"cannot write {self.path / name}: {exc.strerror or exc}; the committed rounds "
                                    f"are intact: free space and resume with `fedpriv run --resume {self.path}`") from None

    def read_json(self, name: str) -> Any:
        """A JSON file of the directory (non-finite floats restored), or None if absent; a torn one raises naming it."""
        path = self.path / name
        if not os.path.lexists(path):
            return None
        return from_json(_read_json(path, "written at the end of a run", "delete it; resuming rewrites it"))

    def _write_file(self, name: str, data: bytes) -> Path:
        path = self.path / name
        _write_atomic(path, data)
        return path


def fork_run(source: Path, root: Path, config: ConfigLike, name: str | None = None) -> RunDirectory:
    """A new, locked run directory for ``config`` that starts from the last commit of the run at ``source``.

    The committed rounds, arrays, ledger and state are copied (the source is locked while it is
    read and left unchanged); ``run.json`` records the source, its round and the keys that changed.
    """
    with RunDirectory.open(source) as src:
        committed = src.recover()
        forked_from = {"path": str(Path(source).resolve()), "round": committed.round,
                       "config_digest": src.manifest["config_digest"],
                       "changed_keys": changed_keys(src.config_values(), json_safe(config.to_dict()))}
    if not committed.round:
        raise RunDirectoryError(f"{source} has no committed round to fork from: start a new run instead")
    new = RunDirectory.create(root, config, name, forked_from=forked_from)
    try:
        for record in committed.records[:-1]:  # earlier lines as they were; the last one through a commit
            line = json.dumps(json_safe(record)).encode() + b"\n"
            with _append(new.path / METRICS) as fh:
                fh.write(line)
            new._lines, new._hash, new._round = new._lines + 1, _chain(new._hash, line), int(record["round"])
        new.commit(committed.records[-1], arrays=committed.arrays, ledger=committed.ledger, state=committed.state)
    except BaseException:
        new.close()
        raise
    return new


def _chain_of(lines: list[bytes]) -> str:
    h = ""
    for line in lines:
        h = _chain(h, line + b"\n")
    return h


def _read_config_toml(path: Path) -> dict[str, Any]:
    """``config.toml`` as a flat dict (its tables flattened), or one line naming what is wrong with it."""
    fix = "restore it (run.json holds the config the run started with) or start a new run"
    try:
        text = _read_text(path)
    except FileNotFoundError:
        raise RunDirectoryError(f"{path} is missing (the run's resolved config): {fix}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunDirectoryError(f"{path} cannot be read ({exc}): {fix}") from None
    if not text.strip():
        raise RunDirectoryError(f"{path} is empty (the run's resolved config): {fix}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RunDirectoryError(f"{path} is torn or not TOML ({exc}): {fix}") from None
    parts = (data, *(t for t in data.values() if isinstance(t, dict)))  # the keys flat or each in its table
    return json_safe({k: v for part in parts for k, v in part.items() if not isinstance(v, dict)})


