"""What a run asks of a node, and what one request would release: the facts a node policy is checked against.

A workload describes a run's demands on one node as :class:`NodeTerms` (from the run config alone,
before the node opens a file, imports a module or allocates anything), and each request that
releases something derived from the node's data as a :class:`Release` (its step in the run and the
(ε, δ) it spends). :class:`fedpriv.node.policy.NodePolicy` checks both; the node's ledger
(:mod:`fedpriv.node.ledger`) charges the releases. Every fact carries the config key (and value)
that asked for it, so a refusal names them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fedpriv._validation import check_int

__all__ = ["NodeTerms", "Release"]

KeyValue = tuple[str, Any]


@dataclass(frozen=True)
class NodeTerms:
    """What a run of a workload asks of one node.

    Attributes
    ----------
    task : str
        The workload.
    perturbations, mechanisms : tuple of (key, name)
        The perturbations and mechanisms the node would run, with the key naming each.
    features : mapping switch → (key, value)
        The simulation-only switches (:data:`fedpriv.node.policy.SIMULATION_SWITCHES`) the run needs, with
        the key and value that ask for each.
    sigmas, clip_norms : tuple of (key, value)
        Noise multipliers and clip norms the noise is calibrated with.
    uncovered : (key, value) or None
        Set when some of the upload is released without noise (e.g. ``noise-schedule = "last_step"``).
    models : tuple of (key, "package.module:factory")
        User model factories the node would import.
    paths : tuple of (key, path)
        Files or directories the node would open.
    sizes : tuple of (cap, what, value)
        Sizes checked against the policy's caps (:data:`fedpriv.node.policy.CAPS`), ``what`` naming the keys.
    release : (key, ε, δ) or None
        One release's (ε, δ) as the keys state it, with the key that sets it; None where it depends on the
        node's data (e.g. GeoDP's sampling rate B/n_k). Checked before the run is set up; each request's
        :class:`Release` is checked again when it comes.
    steps : int
        The most releasing steps (rounds, repetitions, ...) one run may ask of the node.
    step_key : str
        What a step is called in the workload's requests (``"server-round"``, ``"repetition"``, ...).
    """

    task: str
    perturbations: tuple[KeyValue, ...] = ()
    mechanisms: tuple[KeyValue, ...] = ()
    features: Mapping[str, KeyValue] = field(default_factory=dict)
    sigmas: tuple[KeyValue, ...] = ()
    clip_norms: tuple[KeyValue, ...] = ()
    uncovered: KeyValue | None = None
    models: tuple[KeyValue, ...] = ()
    paths: tuple[KeyValue, ...] = ()
    sizes: tuple[tuple[str, str, int], ...] = ()
    release: tuple[str, float, float] | None = None
    steps: int = 1
    step_key: str = "round"

    def __post_init__(self) -> None:
        check_int(self.steps, "steps", minimum=1)


@dataclass(frozen=True)
class Release:
    """One release a request asks for: its step in the run, the (ε, δ) it spends, and the key behind the spend.

    ``part`` tells apart several releases of one step (e.g. two secure-aggregation uploads of one iteration).
    """

    step: int
    epsilon: float
    delta: float = 0.0
    key: str = "epsilon"
    asked: Any = None
    part: str = ""

    def __post_init__(self) -> None:
        check_int(self.step, "step", minimum=1)
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, (int, float)) or not (
                self.epsilon >= 0 and not math.isnan(self.epsilon)):
            raise ValueError(f"epsilon of a release must be >= 0 (inf: no guarantee), got {self.epsilon!r}")
        if isinstance(self.delta, bool) or not isinstance(self.delta, (int, float)) or not 0 <= self.delta <= 1:
            raise ValueError(f"delta of a release must be in [0, 1], got {self.delta!r}")
