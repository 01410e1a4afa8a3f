"""The ledger of sums released with distributed Gaussian noise, charged at their true σ_eff (docs/federated_mf.md §6.4).

Each successful iteration of the two-round scheme (:mod:`fedpriv.secagg.noise`) is one Gaussian
mechanism on the aggregate with noise multiplier ``z_eff = σ_eff/Δ₂``, where ``σ_eff`` is the
residual std of the server's **best** linear combination of both rounds (§6.4), in both modes: the
paper mode is charged its true, smaller ``σ_eff``, not the σ_v it was calibrated for. Halted
iterations cost nothing: the server learns no sum, and halting depends only on drop-outs (§6.4
item 3, §9 A18: ``T_v`` = number of iterations that released a sum). Each charged iteration is a
``GaussianRelease(z_eff, sampling_rate=q)``; :func:`fedpriv.accounting.accountant.compose` reports the
tightest valid ε of dp-accounting's RDP (§3.7.2, §3.7.3) and, without sampling, the Gaussians' PLD,
and names it (docs/architecture.md, "Privacy accounting").

A ledger serializes with a schema version (``state_dict``/``from_state_dict``) so a resumed run
restores its spend exactly; another version is refused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fedpriv._validation import check_int, check_positive, check_probability, check_scalar_delta
from fedpriv.accounting.accountant import Composition, compose
from fedpriv.accounting.events import GaussianRelease
from fedpriv.secagg.noise import MODES, NoisySum

__all__ = ["SCHEMA_VERSION", "DistributedDpLedger", "IterationSpend"]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class IterationSpend:
    """What one iteration cost: ``sigma_eff`` is ``None`` (no charge) when it halted."""

    iteration: int
    sigma_eff: float | None
    n1: int
    n2: int
    halted: bool
    sigma_target: float | None = None  # σ_v the run was calibrated for (what the source charges)

    def __post_init__(self) -> None:
        if self.halted != (self.sigma_eff is None):
            raise ValueError(f"sigma_eff must be None exactly when the iteration halted, got halted = "
                             f"{self.halted}, sigma_eff = {self.sigma_eff!r} (iteration {self.iteration})")


@dataclass
class DistributedDpLedger:
    """Central (ε, δ) of a sum released with distributed Gaussian noise, charged at σ_eff per successful iteration.

    Parameters
    ----------
    sensitivity : float
        Δ₂, the L2 bound of one client's contribution to the sum (> 0).
    delta : float
        δ in (0, 1) at which ε is reported.
    sampling_rate : float (default: 1.0)
        q in (0, 1] of Poisson client sampling (1.0 = every client every iteration).
    mode : str (default: "corrected")
        The :class:`~fedpriv.secagg.noise.TwoRoundNoise` mode of the run; :meth:`record` refuses a
        result of another mode.
    accountants : tuple of str or None (default: None)
        The accountants :func:`~fedpriv.accounting.accountant.compose` runs (None: its defaults); a
        reproduction names the one its source uses (LFL matrix factorization: ``("rdp",)``).
    """

    sensitivity: float
    delta: float
    sampling_rate: float = 1.0
    mode: str = "corrected"
    records: list[IterationSpend] = field(default_factory=list)
    accountants: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        self.sensitivity = check_positive(self.sensitivity, "sensitivity")
        self.delta = check_scalar_delta(self.delta)
        self.sampling_rate = check_probability(self.sampling_rate, "sampling_rate")
        if self.accountants is not None:
            self.accountants = tuple(self.accountants)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(map(repr, MODES))}, got {self.mode!r}")

    def record(self, iteration: int, result: NoisySum) -> None:
        """Record one iteration's release (a halted one is recorded and costs nothing)."""
        iteration = check_int(iteration, "iteration", minimum=0)
        if self.records and iteration <= self.records[-1].iteration:
            raise ValueError(f"iteration must increase, got {iteration} after {self.records[-1].iteration}")
        if not isinstance(result, NoisySum):
            raise TypeError(f"result must be a NoisySum, got {type(result).__name__}")
        if result.mode != self.mode:
            raise ValueError(f"result.mode must be the ledger's mode {self.mode!r}, got {result.mode!r}")
        sigma_eff: float | None = None
        if not result.halted:
            if result.sigma_eff is None or not result.sigma_eff > 0:
                raise ValueError(f"result.sigma_eff must be > 0 for a released sum, got {result.sigma_eff!r}")
            sigma_eff = float(result.sigma_eff)
        self.records.append(IterationSpend(
            iteration=iteration,
            sigma_eff=sigma_eff,
            n1=int(result.n1), n2=int(result.n2), halted=result.halted,
            sigma_target=None if result.sigma_target is None else float(result.sigma_target),
        ))

    def _charged(self) -> list[IterationSpend]:
        """The iterations that released a sum (those with a ``sigma_eff``: :class:`IterationSpend` checks it)."""
        return [r for r in self.records if not r.halted]

    def noise_multipliers(self) -> list[float]:
        """``z_eff = σ_eff/Δ`` of each charged iteration, in order (docs/federated_mf.md §3.7.3)."""
        return [r.sigma_eff / self.sensitivity for r in self.records if r.sigma_eff is not None]

    def _compose(self, multipliers: list[float]) -> Composition:
        """One Gaussian release per multiplier, composed at ``self.delta`` (the tightest valid accountant)."""
        return compose([GaussianRelease(z, 1, self.sampling_rate) for z in multipliers], self.delta,
                       accountants=self.accountants)

    def composition(self) -> Composition:
        """All charged iterations composed at ``self.delta``: ε, the accountant that gave it, every answer."""
        return self._compose(self.noise_multipliers())

    def epsilon(self) -> float:
        """ε at ``self.delta`` of all charged iterations (the tightest valid accountant, :meth:`composition`)."""
        return self.composition().epsilon

    def totals(self) -> dict[str, Any]:
        """The run's spend: ε, δ, iterations charged/halted, z_eff range, mode, how it was composed."""
        zs = self.noise_multipliers()
        targets = [r.sigma_target / self.sensitivity for r in self._charged() if r.sigma_target is not None]
        sampled = f"Poisson-subsampled (q = {self.sampling_rate:g}) " if self.sampling_rate < 1.0 else ""
        comp = self.composition()
        name = {"rdp": "RDP", "pld": "PLD"}.get(comp.accountant, comp.accountant)
        out: dict[str, Any] = {
            "epsilon": comp.epsilon,
            "delta": self.delta,
            "iterations_charged": len(zs),
            "iterations_halted": len(self.records) - len(zs),
            "noise_multiplier_min": min(zs) if zs else None,
            "noise_multiplier_max": max(zs) if zs else None,
            "sensitivity": self.sensitivity,
            "sampling_rate": self.sampling_rate,
            "mode": self.mode,
            "composition": f"{name}, {sampled}Gaussian at z_eff = sigma_eff/sensitivity per released sum "
                           "(halted iterations not charged)",
            "accountant": comp.accountant,
            "accountants_tried": comp.summary(),
        }
        if len(targets) == len(zs):
            # what the source's analysis (charging σ_v, docs/federated_mf.md §6.3 Thm 4.6.1) would claim for
            # the same run
            out["epsilon_at_target_sigma"] = self._compose(targets).epsilon
        return out

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state with a schema version."""
        return {
            "schema_version": SCHEMA_VERSION,
            "sensitivity": self.sensitivity,
            "delta": self.delta,
            "sampling_rate": self.sampling_rate,
            "mode": self.mode,
            "records": [asdict(r) for r in self.records],
            **({} if self.accountants is None else {"accountants": list(self.accountants)}),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> DistributedDpLedger:
        """Restore a ledger written by :meth:`state_dict` (same schema version only)."""
        version = state.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"ledger schema_version must be {SCHEMA_VERSION}, got {version!r}")
        ledger = cls(sensitivity=state["sensitivity"], delta=state["delta"],
                     sampling_rate=state["sampling_rate"], mode=state["mode"],
                   accountants=None if state.get("accountants") is None else tuple(state["accountants"]))
        ledger.records = [IterationSpend(**r) for r in state["records"]]
        return ledger
