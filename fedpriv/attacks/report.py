"""A run's attack in its results: the summary entry and the line ``fedpriv run`` prints (docs/attacks.md §1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.attacks.keys import AttackSettings
from fedpriv.attacks.parameters import attack_scale
from fedpriv.attacks.selection import attackers_of

__all__ = ["attack_summary", "describe_attack"]


def attack_summary(config: AttackSettings, resolved: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The run's attack for ``summary.json``: its name, the attackers (ids, count, share of the clients) and parameters.

    ``resolved`` adds parameters a workload resolves itself (the mean task's ``attack-value``).
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
