"""The messages of the online-SGD workload: what the server asks a user, what the user answers, the stream state.

Request (kind ``train``) to client c, user c + 1 of the stream, at step i = c + 1:

* Arrays ``"arrays"``: ``theta`` — θ_{i−1} of every replication, float64 of shape (R, p);
* Config ``"config"``: ``op = "gradient"``, ``step`` (i), ``replications`` (R) and the model, noise
  law, budget, convention, bounding and C0 the server assumes (:func:`request_fields`) — each user
  checks them against its own configuration and refuses a request naming another.

Reply: Arrays ``"arrays"``: ``noisy-grad`` — g̃_i of every replication, float64 (R, p); Metrics
``"metrics"``: ``client-id`` and ``step``. Nothing else leaves the node: not the datum, not the
clean gradient.

:class:`StreamState` is the server state a :class:`~fedpriv.workloads.protocol.Relay` carries
along the stream (θ, θ̄, the last step absorbed, σ projections); both sides import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.federated.online_sgd import OnlineSgdConfig, c0
from fedpriv.workloads.messages import Arrays, Config, Message

__all__ = ["BUDGET_FIELDS", "CLIENT_ID", "GRADIENT_OP", "NOISY_GRAD", "OP", "REPLICATIONS", "STEP", "THETA",
           "StreamState", "gradient_request", "request_fields"]

OP = "op"
GRADIENT_OP = "gradient"
STEP = "step"
REPLICATIONS = "replications"
THETA = "theta"
NOISY_GRAD = "noisy-grad"
CLIENT_ID = "client-id"
#: Request fields a user checks against its own configuration (absent budget names read as None).
BUDGET_FIELDS: tuple[str, ...] = ("model", "classes", "d", "noise", "epsilon", "delta", "mu", "budget-law",
                                  "budget-low", "budget-high", "budget-groups", "convention", "bounding", "c0",
                                  REPLICATIONS)


def request_fields(cfg: OnlineSgdConfig) -> dict[str, Any]:
    """The fields of a gradient request the user checks: model, d, noise law and budget, convention, bounding, C0, R.

    Only the budget the noise law uses is present (a Flower ConfigRecord holds no None), with a
    heterogeneous law its fields (``budget-law``, ``budget-low``/``budget-high`` or ``budget-groups``:
    each user derives its own budget from them and the run seed), and ``classes`` for the multinomial
    model; C0 travels exactly, both sides compute it with :func:`fedpriv.federated.online_sgd.c0`.
    """
    classes = {} if cfg.classes is None else {"classes": int(cfg.classes)}
    return {"model": cfg.model, **classes, "d": int(cfg.d), "noise": cfg.noise, **cfg.budget, **cfg.law.fields(),
            "convention": cfg.convention, "bounding": cfg.bounding, "c0": float(c0(cfg)),
            REPLICATIONS: int(cfg.replications)}


def gradient_request(cfg: OnlineSgdConfig, step: int, theta: np.ndarray) -> Message:
    """The request of step ``step``: θ_{step−1} of every replication (R, p) and the fields the user checks."""
    return Message({"arrays": Arrays({THETA: theta}),
                    "config": Config({OP: GRADIENT_OP, STEP: int(step), **request_fields(cfg)})})


@dataclass(frozen=True)
class StreamState:
    """The server's state along the stream: θ_step and θ̄_step (R, p), the last step absorbed, σ projections so far."""

    theta: np.ndarray
    theta_bar: np.ndarray
    step: int
    projections: int = 0
