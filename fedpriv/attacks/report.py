"""A run's attack in its results: the summary entry, the line ``fedpriv run`` prints, and a comparison's attack
columns and title line (docs/attacks.md §1); every task with attacks uses these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fedpriv.attacks.keys import AttackSettings
from fedpriv.attacks.parameters import attack_scale
from fedpriv.attacks.selection import attackers_of

__all__ = ["attack_line", "attack_row", "attack_summary", "attackers_column", "describe_attack"]


def attack_summary(config: AttackSettings, resolved: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The run's attack for ``summary.json``: its name, the attackers (ids, count, share of the clients) and parameters.

    ``resolved`` adds parameters a workload resolves itself (the estimation tasks' ``attack-value``).
    """
    ids = attackers_of(config)
    out: dict[str, Any] = {"attack": config["attack"], "attack-fraction": float(config["attack-fraction"]),
                           "attackers": [int(c) for c in ids], "attacker-count": int(ids.size),
                           "attacker-share": ids.size / config["num-clients"]}
    if config["attack"] in ("sign-flip", "scaling"):
        out["attack-scale"] = attack_scale(config)
    elif config["attack"] == "gaussian":
        out["attack-std"] = float(config["attack-std"])
    elif config["attack"] == "backdoor":
        out["backdoor-target"] = int(config["backdoor-target"])
        out["backdoor-fraction"] = float(config["backdoor-fraction"])
    out.update({k: float(v) for k, v in (resolved or {}).items()})
    return out


def describe_attack(summary: Mapping[str, Any]) -> str:
    """One line for a run's printout: "attack sign-flip by 2 of 10 clients (20%): ids 3, 7" (or "no attack")."""
    if summary.get("attack", "none") == "none":
        return "attack: none (every client honest)"
    ids = summary["attackers"]
    shown = ", ".join(map(str, ids[:20])) + (", …" if len(ids) > 20 else "")
    return (f"attack: {summary['attack']} by {summary['attacker-count']} client(s), "
            f"{100 * summary['attacker-share']:.3g}% of all: ids {shown}")


def attack_row(cell: Any) -> dict[str, Any]:
    """A comparison row's attack columns of a cell (a :class:`fedpriv.workloads.base.CellRun`): the attack and its attackers."""
    return {"attack": cell.config["attack"], "attackers": cell.summary.get("attack", {}).get("attacker-count", 0)}


def attackers_column(rows: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """The ``attackers`` column of a comparison table, one entry per row; None when no row attacks (no column)."""
    if not any(r.get("attack", "none") != "none" for r in rows):
        return None
    return [str(r.get("attackers", 0)) for r in rows]


def attack_line(cells: Sequence[Any]) -> str:
    """"attackers: 20 of 100 clients (attack-fraction 0.2)" for a comparison's plot titles; "" when no cell attacks."""
    attacked = [c for c in cells if c.config["attack"] != "none"]
    if not attacked:
        return ""
    parts = sorted({(float(c.config["attack-fraction"]), int(c.summary.get("attack", {}).get("attacker-count", 0)),
                     int(c.config["num-clients"])) for c in attacked})
    return "; ".join(f"attackers: {k} of {n} clients (attack-fraction {f:g})" for f, k, n in parts)
