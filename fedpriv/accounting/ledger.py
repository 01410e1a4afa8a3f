"""The privacy ledger of a federated run: per-client ε per round and composed over the run.

Local DP (``coordinatewise``, ``ldpvec``): each participating client makes one privatized release
per round (``noise-schedule="last_step"``) or E releases at ε/E (``"every_step"``).

* Pure ε-LDP mechanisms compose sequentially: ε_total = Σ ε over the releases a client made.
* Gaussian releases are (ε, δ): the ledger composes them at the summed δ = Σδ with
  :func:`fedpriv.accounting.accountant.compose` — basic composition (Σε), and, where the releases
  carry their noise multiplier z = σ/Δ, dp-accounting's RDP and the Gaussians' PLD; the tightest
  valid ε is the total and ``composition`` names its accountant (docs/architecture.md, "Privacy
  accounting").

GeoDP (central, sample-level DP per client; docs/geodp.md §5.3): each noisy step is a Gaussian
mechanism on a batch of B of the client's n_k examples, the event
``GaussianRelease(σ_eff, steps, q = B/n_k)`` composed by :func:`~fedpriv.accounting.accountant.compose`
(dp-accounting's RDP for q < 1; at q = 1 the Gaussians' PLD when tighter) in both modes
(``conservative``, the stated one, and ``paper``). fedpriv draws fixed-size batches without
replacement, so the Poisson accountant is the reproduction setting of docs/geodp.md Ambiguity 8 and is
labelled as such.

DP-SGD (``kind = "dpsgd"``, docs/geodp.md §2) is accounted the same way: one Gaussian mechanism with
multiplier σ per noisy step, so both modes carry σ (the two coincide for DP-SGD).

A ledger serializes with a schema version (``state_dict``/``load_state_dict``) so that a resumed
run restores its spend exactly. A round's participants are written as runs of consecutive ids
(``{"runs": [start, stop, ...]}``, half-open) when that is shorter than the list: a run commits its
ledger every round, so a list of every user per round (distribution estimation: 100,000 users per
trial) would make the commits quadratic in the rounds. Schema version 1 (plain lists) still loads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fedpriv._validation import check_delta, check_int
from fedpriv.accounting.accountant import Composition, compose
from fedpriv.accounting.events import ApproxRelease, Event, GaussianRelease, PureRelease

__all__ = ["CENTRAL_KINDS", "SCHEMA_VERSION", "PrivacyLedger", "RoundSpend", "epsilon_lines"]

SCHEMA_VERSION = 2
#: Versions :meth:`PrivacyLedger.from_state_dict` reads (1: participation as plain lists only).
READABLE_VERSIONS = (1, 2)
#: Ledger kinds of central, sample-level DP per client (Poisson-subsampled Gaussian RDP at q = B/n_k).
CENTRAL_KINDS = ("geodp", "dpsgd")


def encode_ids(ids: list[int]) -> list[int] | dict[str, list[int]]:
    """Sorted client ids as ``{"runs": [start, stop, ...]}`` (runs of consecutive ids) when shorter, else the list."""
    if len(ids) < 3:
        return list(ids)
    a = np.asarray(ids, dtype=np.int64)
    breaks = np.flatnonzero(np.diff(a) != 1) + 1  # a repeated id starts a new run, so repeats survive
    if 2 * (breaks.size + 1) >= a.size:
        return list(ids)
    starts = a[np.concatenate(([0], breaks))]
    stops = a[np.concatenate((breaks - 1, [a.size - 1]))] + 1
    return {"runs": np.column_stack((starts, stops)).ravel().tolist()}


def decode_ids(entry: Any) -> list[int]:
    """Undo :func:`encode_ids`: the sorted client ids of one round."""
    if isinstance(entry, dict):
        runs = entry.get("runs")
        if set(entry) != {"runs"} or not isinstance(runs, list) or len(runs) % 2:
            raise ValueError(f"a ledger participation entry must be a list of ids or {{'runs': [start, stop, ...]}}, "
                             f"got {str(entry)[:80]}")
        pairs = np.asarray(runs, dtype=np.int64).reshape(-1, 2)
        return np.concatenate([np.arange(a, b) for a, b in pairs]).tolist() if pairs.size else []
    return [int(c) for c in entry]


def epsilon_lines(totals: dict[str, Any]) -> list[str]:
    """The printed ε of a run's :meth:`PrivacyLedger.totals`, each saying what it is, and why the per-round one is
    above the total when it is."""
    lines = [f"ε per round {totals['epsilon_per_round']:.4g}: "
             f"{totals.get('epsilon_per_round_is', 'one client in the last round')}",
             f"ε composed over the run {totals['epsilon_total_max']:.4g}: "
             f"{totals.get('epsilon_total_is', 'the worst client, ' + str(totals.get('composition', '')))}"]
    if totals.get("epsilon_explanation"):
        lines.append(f"why the per-round ε is above the run's total: {totals['epsilon_explanation']}")
    return lines


@dataclass(frozen=True)
class RoundSpend:
    """What one participating client spent in one round."""

    server_round: int
    epsilon: float  # per release
    delta: float  # per release
    releases: int  # releases per round (E under every_step)
    holds: bool
    noise_multiplier: float | None = None  # z = σ/Δ of a Gaussian release, when it is one
    note: str = ""  # why the claim does not hold (empty when it does)


def release_event(spend: RoundSpend) -> Event:
    """One client's releases of one round as an event: Gaussian (z and the stated (ε, δ)), else (ε, δ), else pure ε."""
    if spend.noise_multiplier is not None:
        return GaussianRelease(spend.noise_multiplier, spend.releases, epsilon=spend.epsilon, delta=spend.delta)
    if spend.delta > 0:
        return ApproxRelease(spend.epsilon, spend.delta, spend.releases)
    return PureRelease(spend.epsilon, spend.releases)


def composition_label(comp: Composition, *, pure: bool) -> str:
    """The ledger's name of the accountant that gave ``comp`` (docs/architecture.md, "Privacy accounting")."""
    if comp.accountant == "sequential":
        return "sequential (pure epsilon)" if pure else "basic"
    return {"rdp": "RDP (Gaussian)", "pld": "PLD (privacy loss distribution)"}.get(comp.accountant, comp.accountant)


@dataclass
class PrivacyLedger:
    """Per-client spend of a run. ``kind`` is ``"ldp"``, ``"geodp"``, ``"dpsgd"`` or ``"none"``.

    For GeoDP and DP-SGD give ``geodp_sigmas`` ({mode: σ_eff}; DP-SGD: σ in both modes), ``batch_size``
    and ``delta`` (the δ at which ε is reported).
    """

    kind: str
    num_clients: int
    delta: float = 1e-5
    batch_size: int = 1
    geodp_sigmas: dict[str, float] = field(default_factory=dict)
    rounds: list[RoundSpend] = field(default_factory=list)
    participation: list[list[int]] = field(default_factory=list)
    num_examples: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ("ldp", *CENTRAL_KINDS, "none"):
            raise ValueError(f"kind must be one of 'ldp', 'geodp', 'dpsgd', 'none', got {self.kind!r}")
        check_int(self.num_clients, "num_clients", minimum=1)
        check_delta(self.delta)

    # ------------------------------------------------------------------ recording
    def record(self, spend: RoundSpend, client_ids: list[int], num_examples: dict[int, int] | None = None) -> None:
        """Record that ``client_ids`` each spent ``spend`` in round ``spend.server_round``."""
        if self.rounds and spend.server_round <= self.rounds[-1].server_round:
            raise ValueError(f"server_round must increase, got {spend.server_round} after "
                             f"{self.rounds[-1].server_round}")
        bad = [c for c in client_ids if not 0 <= c < self.num_clients]
        if bad:
            raise ValueError(f"client ids must be in [0, {self.num_clients}), got {bad[:5]}")
        self.rounds.append(spend)
        self.participation.append(sorted(int(c) for c in client_ids))
        self.num_examples.update({int(k): int(v) for k, v in (num_examples or {}).items()})

    # ------------------------------------------------------------------ totals
    def _rounds_by_client(self) -> dict[int, tuple[int, ...]]:
        """Indices (into ``rounds``) of the rounds each client took part in, in one pass."""
        out: dict[int, list[int]] = {}
        for i, ids in enumerate(self.participation):
            for c in ids:
                out.setdefault(c, []).append(i)
        return {c: tuple(v) for c, v in out.items()}

    def _total(self, round_indices: tuple[int, ...], n_k: int | None) -> dict[str, Any]:
        """Composed (ε, δ) over the given rounds (``n_k``: the client's examples, for GeoDP)."""
        mine = [self.rounds[i] for i in round_indices]
        if self.kind == "none":
            return {"epsilon": math.inf if mine else 0.0, "delta": 0.0, "composition": "no privacy"}
        if not mine:
            return {"epsilon": 0.0, "delta": 0.0, "composition": "did not participate"}
        releases = sum(s.releases for s in mine)
        if self.kind in CENTRAL_KINDS:
            return self._central_total(releases, n_k)
        basic_delta = sum(s.delta * s.releases for s in mine)
        # δ ≥ 1 is no guarantee: basic composition is reported at the summed δ as it stands
        comp = compose([release_event(s) for s in mine], min(basic_delta, 1.0))
        tried = {a.accountant: a.epsilon for a in comp.tried}
        out: dict[str, Any] = {"epsilon": comp.epsilon, "delta": basic_delta, "releases": releases,
                               "composition": composition_label(comp, pure=basic_delta == 0),
                               "accountant": comp.accountant, "accountants_tried": comp.summary()}
        if tried.get("rdp") is not None:
            out["epsilon_rdp"] = tried["rdp"]
        return out

    def _central_total(self, releases: int, n_k: int | None) -> dict[str, Any]:
        """GeoDP/DP-SGD: ``releases`` Gaussian steps at q = B/n_k per accounting mode, composed at the ledger's δ."""
        n_k = self.batch_size if n_k is None else n_k
        q = min(1.0, self.batch_size / max(n_k, 1))
        comps = {mode: compose([GaussianRelease(sigma, releases, q)], self.delta)
                 for mode, sigma in self.geodp_sigmas.items()}
        stated = comps.get("conservative")
        label = "RDP" if stated is None else composition_label(stated, pure=False).split(" (")[0]
        sampled = "Poisson-subsampled Gaussian" if q < 1 else "Gaussian (q = 1: no sampling)"
        return {"epsilon": math.inf if stated is None else stated.epsilon, "delta": self.delta,
                "epsilon_claimed_by_source": comps["paper"].epsilon if "paper" in comps else math.inf,
                "q": q, "noisy_steps": releases,
                "accountant": "" if stated is None else stated.accountant,
                "accountants_tried": "" if stated is None else stated.summary(),
                "composition": f"{label}, {sampled} (fixed-size batches: reproduction setting)"}

    def _groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The participating clients (ascending), each one's group and each group's rounds, in array passes.

        Returns ``(clients, group, patterns)``: ``patterns[g]`` is the boolean row over ``rounds`` of
        group g's rounds; the groups of :meth:`_per_client`'s loop (the same rounds; GeoDP's n_k is
        not part of the key here, so GeoDP ledgers, and a round that lists a client twice, take
        the loop: None).
        """
        if self.kind in CENTRAL_KINDS or not self.participation:
            return None
        lengths = [len(p) for p in self.participation]
        ids = np.concatenate([np.asarray(p, dtype=np.int64) for p in self.participation])
        rounds = np.repeat(np.arange(len(lengths)), lengths)
        order = np.lexsort((rounds, ids))
        ids, rounds = ids[order], rounds[order]
        if np.any((ids[1:] == ids[:-1]) & (rounds[1:] == rounds[:-1])):
            return None
        clients, position = np.unique(ids, return_inverse=True)
        member = np.zeros((clients.size, len(lengths)), dtype=bool)
        member[position, rounds] = True
        patterns, group = np.unique(np.packbits(member, axis=1), axis=0, return_inverse=True)
        return clients, group.reshape(-1), np.unpackbits(patterns, axis=1, count=len(lengths)).astype(bool)

    def client_total(self, client_id: int) -> dict[str, Any]:
        """Composed (ε, δ) of one client over the rounds it took part in."""
        return self._total(self._rounds_by_client().get(client_id, ()), self.num_examples.get(client_id))

    def _per_client(self) -> dict[int, dict[str, Any]]:
        """Every participating client's total, composed once per distinct (rounds, n_k) group."""
        grouped = self._groups()
        if grouped is not None:
            clients, group, patterns = grouped
            totals = [self._total(tuple(int(i) for i in np.flatnonzero(row)), None) for row in patterns]
            return dict(zip(clients.tolist(), [totals[g] for g in group.tolist()], strict=True))
        by_group: dict[tuple, dict[str, Any]] = {}
        out = {}
        for c, idx in sorted(self._rounds_by_client().items()):
            n_k = self.num_examples.get(c) if self.kind in CENTRAL_KINDS else None
            key = (idx, n_k)
            if key not in by_group:
                by_group[key] = self._total(idx, n_k)
            out[c] = by_group[key]
        return out

    def totals(self) -> dict[str, Any]:
        """The run's spend: the worst client's composed (ε, δ), per-round spend, and whether claims hold."""
        per_client = self._per_client()
        worst = max(per_client.values(), key=lambda t: t["epsilon"], default={"epsilon": 0.0, "delta": 0.0})
        return {
            "kind": self.kind,
            "epsilon_total_max": worst["epsilon"],
            "delta_total": worst.get("delta", 0.0),
            "composition": worst.get("composition", ""),
            "epsilon_per_round": self.rounds[-1].epsilon * self.rounds[-1].releases if self.rounds else 0.0,
            "rounds_recorded": len(self.rounds),
            "claims_hold": all(s.holds for s in self.rounds),
            "claims_caveats": list(dict.fromkeys(s.note for s in self.rounds if not s.holds)),
            "per_client_epsilon": {str(c): t["epsilon"] for c, t in per_client.items()},
            **({"epsilon_claimed_by_source_max": worst.get("epsilon_claimed_by_source")}
               if self.kind == "geodp" else {}),
            **self._wording(worst),
        }

    def _wording(self, worst: dict[str, Any]) -> dict[str, str]:
        """What the per-round and the total ε are, in words, and why the per-round one can exceed the total.

        ``epsilon_per_round_is`` and ``epsilon_total_is`` name what each figure covers (one client's
        releases in one round; the worst client over the run), whether sampling amplifies it and which
        accountant composed it; ``epsilon_explanation`` is non-empty when the per-round figure is
        above the run's total (GeoDP: the round's steps at q = 1 against the total's subsampled RDP).
        """
        if self.kind == "none" or not self.rounds:
            return {"epsilon_per_round_is": "no privacy" if self.kind == "none" else "no round recorded",
                    "epsilon_total_is": "no privacy" if self.kind == "none" else "no round recorded",
                    "epsilon_explanation": ""}
        last = self.rounds[-1]
        per_round = last.epsilon * last.releases
        steps = f"{last.releases} release(s) of epsilon {last.epsilon:.4g} each" + (
            f" (delta {last.delta:.3g} each)" if last.delta else "")
        if self.kind in CENTRAL_KINDS:
            mode = " (conservative accounting)" if self.kind == "geodp" else ""
            per = (f"one client's noised local steps in the last round ({steps}) at sampling rate q = 1, i.e. NOT "
                   f"amplified by sampling, summed by basic composition{mode}")
            q = worst.get("q", 1.0)
            amplified = f"amplified by sampling at q = {q:.3g}" if q < 1 else "q = 1: not amplified by sampling"
            name = "PLD" if worst.get("accountant") == "pld" else "RDP"
            total = (f"the worst client over the run: {worst.get('noisy_steps', 0)} noised steps composed by the {name} "
                     f"accountant of the {'Poisson-subsampled ' if q < 1 else ''}Gaussian ({amplified}; fixed-size "
                     f"batches: reproduction setting), at delta {self.delta:g}"
                     + (", conservative accounting" if mode else ""))
            why = ("the per-round figure is larger because it charges each step at q = 1 and adds the steps, while "
                   f"the total is {amplified} and composed by {name}; the total is the run's guarantee")
        else:
            per = (f"one client's upload in the last round: {steps}, summed by sequential composition (local DP: "
                   "no amplification by sampling)")
            total = (f"the worst client over the run: {worst.get('releases', 0)} releases composed by "
                     f"{worst.get('composition', '')}")
            why = ("the per-round figure is larger because it adds the round's releases by basic composition, while "
                   f"the total composes all releases with {worst.get('composition', '')}; the total is the run's "
                   "guarantee")
        above = per_round > worst["epsilon"] * (1 + 1e-12)
        return {"epsilon_per_round_is": per, "epsilon_total_is": total, "epsilon_explanation": why if above else ""}

    def running_max_epsilon(self) -> float:
        """Composed ε of the worst client so far (for per-round logs)."""
        return max((t["epsilon"] for t in self._per_client().values()), default=0.0)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state with a schema version."""
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "num_clients": self.num_clients,
            "delta": self.delta,
            "batch_size": self.batch_size,
            "geodp_sigmas": dict(self.geodp_sigmas),
            "rounds": [asdict(s) for s in self.rounds],
            "participation": [encode_ids(p) for p in self.participation],
            "num_examples": {str(k): v for k, v in self.num_examples.items()},
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PrivacyLedger:
        """Restore a ledger written by :meth:`state_dict` (same schema version only)."""
        version = state.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"ledger schema_version must be one of {READABLE_VERSIONS}, got {version!r}")
        ledger = cls(kind=state["kind"], num_clients=state["num_clients"], delta=state["delta"],
                     batch_size=state["batch_size"], geodp_sigmas=dict(state["geodp_sigmas"]))
        ledger.rounds = [RoundSpend(**s) for s in state["rounds"]]
        ledger.participation = [decode_ids(p) for p in state["participation"]]
        ledger.num_examples = {int(k): int(v) for k, v in state["num_examples"].items()}
        return ledger
