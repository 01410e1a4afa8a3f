"""A node's persistent privacy ledger: every release it makes, charged on its own disk (docs/threat_model.md §4).

The ledger is a JSON file the node alone writes. Each release is charged *before* it leaves the
node, under an exclusive lock, after checking that

* the lifetime budget (the policy's ``[budget]``) still covers it: releases compose by basic
  composition, ε_total = Σ ε_i and δ_total = Σ δ_i, which bounds the spend of any sequence of
  (ε_i, δ_i)-DP releases, adaptively chosen or not (Dwork and Roth 2014, Theorem 3.16);
* within one run its steps never go back, none is charged twice, and none is beyond the run's
  steps (a server relabelling rounds gets a refusal, not fresh noise).

Runs, restarts and new processes share the file, so the spend persists across all of them. A crash
after the charge and before the reply leaves over-reports (never under-reports) what was released.
The file and its lock are opened without following symlinks and created with mode 0600 in a
directory the node creates with mode 0700; the file is replaced atomically (write, fsync, rename).
A ledger that cannot be read refuses every release.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpriv.errors import FedprivError
from fedpriv.node.policy import PolicyRefusal
from fedpriv.node.terms import Release

__all__ = ["LEDGER_SCHEMA", "LedgerError", "NodeLedger", "Spend", "default_ledger_path", "state_dir"]

LEDGER_SCHEMA = 1
#: Environment variable naming the directory of a node's default ledger.
STATE_ENV = "FEDPRIV_NODE_STATE"


class LedgerError(FedprivError):
    """The ledger file cannot be read or written (the node then refuses every release)."""


@dataclass(frozen=True)
class Spend:
    """What a ledger has charged: composed ε and δ (basic composition) over its releases."""

    epsilon: float
    delta: float
    releases: int


def state_dir() -> Path:
    """Where nodes on this machine keep their state by default: ``$FEDPRIV_NODE_STATE``, else ``~/.local/state/fedpriv``."""
    return Path(os.environ.get(STATE_ENV) or Path("~/.local/state/fedpriv").expanduser())


def default_ledger_path(partition: Any = None) -> Path:
    """Where a node without a ``[budget] ledger`` keeps its ledger: :func:`state_dir` /
    ``ledger-partition-<id>.json`` (``ledger.json`` without a partition id)."""
    return state_dir() / ("ledger.json" if partition is None else f"ledger-partition-{int(partition)}.json")


def _open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that refuses a symlink at ``path`` with a :class:`LedgerError` naming it."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LedgerError(f"{path} is a symbolic link: the node ledger never follows one (remove it)") from None
        raise LedgerError(f"the node ledger {path} cannot be opened: {exc.strerror}") from None


class NodeLedger:
    """The ledger file at ``path`` (created on the first charge); see the module docstring."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"NodeLedger({str(self.path)!r})"

    # ------------------------------------------------------------------ reading

    def releases(self) -> list[dict[str, Any]]:
        """Every release charged so far, oldest first."""
        return self._read()["releases"]

    def spent(self) -> Spend:
        """ε and δ composed over every release charged so far."""
        return _spend(self.releases())

    def _read(self) -> dict[str, Any]:
        try:
            fd = _open_nofollow(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return {"schema": LEDGER_SCHEMA, "releases": []}
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read()
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LedgerError(f"the node ledger {self.path} is not valid JSON ({exc}); it is kept as it is, and "
                              "no release is made until it is repaired or moved away") from None
        if not isinstance(doc, dict) or doc.get("schema") != LEDGER_SCHEMA or not isinstance(doc.get("releases"), list):
            raise LedgerError(f"the node ledger {self.path} is not a fedpriv node ledger of schema {LEDGER_SCHEMA}")
        return doc

    # ------------------------------------------------------------------ charging

    def check(self, release: Release, *, run: str, task: str, steps: int,
              budget: tuple[float, float], step_key: str = "round") -> None:
        """Raise :class:`PolicyRefusal` if :meth:`charge` would refuse ``release`` now (nothing is written)."""
        _check(self._read()["releases"], release, run=run, task=task, steps=steps, budget=budget, step_key=step_key)

    def charge(self, release: Release, *, run: str, task: str, steps: int,
               budget: tuple[float, float], step_key: str = "round") -> Spend:
        """Charge ``release`` of run ``run`` (at most ``steps`` steps) within ``budget`` = (ε, δ); the new spend.

        Checked and written under the ledger's lock: two processes of one node never both spend the
        last of the budget. Raises :class:`PolicyRefusal` (nothing charged) or :class:`LedgerError`.
        """
        with self._locked():
            doc = self._read()
            _check(doc["releases"], release, run=run, task=task, steps=steps, budget=budget, step_key=step_key)
            doc["releases"].append({
                "run": str(run), "task": task, "step": int(release.step), "part": release.part,
                "epsilon": float(release.epsilon), "delta": float(release.delta),
                "time": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            })
            spend = _spend(doc["releases"])
            doc["spent"] = {"epsilon": spend.epsilon, "delta": spend.delta, "releases": spend.releases}
            self._write(doc)
        return spend

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        directory = self.path.parent
        if not directory.exists():
            directory.mkdir(mode=0o700, parents=True)
        fd = _open_nofollow(directory / (self.path.name + ".lock"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write(self, doc: dict[str, Any]) -> None:
        data = json.dumps(doc, indent=1).encode("utf-8")
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
        fd = _open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _spend(releases: list[dict[str, Any]]) -> Spend:
    return Spend(epsilon=math.fsum(float(r["epsilon"]) for r in releases),
                 delta=math.fsum(float(r["delta"]) for r in releases), releases=len(releases))


def _check(releases: list[dict[str, Any]], release: Release, *, run: str, task: str, steps: int,
           budget: tuple[float, float], step_key: str) -> None:
    """The ledger's rules (module docstring); raises :class:`PolicyRefusal`."""
    if release.step > steps:
        raise PolicyRefusal(step_key, release.step, f"this run has {steps} steps; the node releases none beyond them")
    own = [r for r in releases if r["run"] == str(run)]
    if own:
        if any(r["task"] != task for r in own):
            raise PolicyRefusal("task", task, f"run {run} released for task {own[0]['task']!r} on this node before")
        last = max(int(r["step"]) for r in own)
        if release.step < last:
            raise PolicyRefusal(step_key, release.step, f"this node released step {last} of run {run} already; "
                                "steps of a run never go back")
        if any(int(r["step"]) == release.step and r["part"] == release.part for r in own):
            raise PolicyRefusal(step_key, release.step, f"this node released step {release.step}"
                                f"{' (' + release.part + ')' if release.part else ''} of run {run} already; a "
                                "second release of it would let the noise be averaged away")
    spend = _spend(releases)
    eps_budget, delta_budget = budget
    if spend.epsilon + release.epsilon > eps_budget:
        raise PolicyRefusal(release.key, release.asked, f"it would spend ε = {release.epsilon:.6g} and this node's "
                            f"lifetime budget ε = {eps_budget:g} has {max(eps_budget - spend.epsilon, 0.0):.6g} left "
                            f"({spend.releases} releases so far)")
    if spend.delta + release.delta > delta_budget:
        raise PolicyRefusal(release.key, release.asked, f"it would spend δ = {release.delta:.3g} and this node's "
                            f"lifetime budget δ = {delta_budget:g} has {max(delta_budget - spend.delta, 0.0):.3g} left")
