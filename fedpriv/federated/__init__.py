"""Federated LDP-SGD: the pure client step and (separately) the server aggregation.

``local.py`` — :func:`local_update` (E local clipped SGD steps, the last one returned as a
:class:`Release`), :func:`finish_update` (the one place the release is privatized), the perturbation
built from a :class:`~fedpriv.config.RunConfig`, and :func:`privacy_scope` for run logs.
``model_update.py`` — :func:`privatize_model_update`: a whole model update in named arrays (any layout), privatized
against the model the client received (the drop-in Flower ``LdpMod``'s arithmetic).
``keys.py`` — the purposes of the keyed random streams every runtime shares.

Nothing here imports Flower.
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy), so a light submodule loads alone
    from fedpriv.federated.aggregate import (
        AGGREGATORS,
        aggregate,
        krum_scores,
        validate_update,
    )
    from fedpriv.federated.keys import BATCH, MODEL_UPDATE_NOISE, RELEASE_NOISE, step_noise_purpose
    from fedpriv.federated.local import (
        LocalResult,
        Release,
        build_perturbation,
        clip_per_sample,
        effective_batch_size,
        finish_update,
        learning_rate,
        local_update,
        minibatch_indices,
        per_sample_grads,
        privacy_scope,
        release_rng,
        step_budget,
    )
    from fedpriv.federated.model_update import PrivatizedModel, privatize_model_update

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "BATCH",
    "MODEL_UPDATE_NOISE",
    "RELEASE_NOISE",
    "LocalResult",
    "Release",
    "build_perturbation",
    "clip_per_sample",
    "effective_batch_size",
    "finish_update",
    "learning_rate",
    "local_update",
    "minibatch_indices",
    "per_sample_grads",
    "PrivatizedModel",
    "privacy_scope",
    "privatize_model_update",
    "release_rng",
    "step_budget",
    "step_noise_purpose",
]
# Server-side aggregation (aggregate.py): FedAvg, FedMedian, FedTrimmedAvg, Krum, MultiKrum.
__all__ += ["AGGREGATORS", "aggregate", "krum_scores", "validate_update"]
