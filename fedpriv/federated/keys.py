"""Purposes of the keyed random streams of federated local training (docs/design.md §4).

Every draw of a client in round ``r`` comes from ``fedpriv.rng.stream(seed, r, client_id, purpose)``
with one of these purposes, so a Flower ClientApp, its mod and the fast engine draw identical bits.
Defined once here and imported by every runtime.

* ``BATCH`` — the minibatch indices of all E local steps of one round (one stream, drawn in step order).
* ``RELEASE_NOISE`` — the noise of the released (E-th) step, privatized by
  :func:`fedpriv.federated.local.finish_update`.
* ``MODEL_UPDATE_NOISE`` — the noise of a whole model update privatized by the drop-in Flower ``LdpMod``
  (:func:`fedpriv.federated.model_update.privatize_model_update`) when a seed is configured.
* :func:`step_noise_purpose` — the noise of step ``k`` (1-based, k = 1..E−1) under
  ``noise-schedule = "every_step"``, drawn inside :func:`fedpriv.federated.local.local_update`.
"""

from __future__ import annotations

from fedpriv._validation import check_int

__all__ = ["BATCH", "MODEL_UPDATE_NOISE", "RELEASE_NOISE", "step_noise_purpose"]

BATCH = "batch"
RELEASE_NOISE = "noise"
MODEL_UPDATE_NOISE = "model-update-noise"


def step_noise_purpose(step: int) -> str:
    """Purpose of the inner-step noise of local step ``step`` (1-based): ``"noise-step-{step}"``."""
    return f"noise-step-{check_int(step, 'step', minimum=1)}"
