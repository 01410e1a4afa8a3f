"""Privatize a whole model update given as named arrays: what a drop-in Flower mod does to any ClientApp's reply.

A client received the global model ``w`` and trained it to ``w'``, both as the same named arrays (a torch
``state_dict`` or flat arrays). :func:`privatize_model_update` releases::

    w + perturbation.perturb(flatten(w' - w), rng)

in the layout of ``w'`` (same keys, order, shapes and dtypes). ``perturb`` clips the flattened update to the
perturbation's ``clip_norm`` (L2) and privatizes it, so the release is one ε-LDP (or (ε, δ)-LDP) release of the
client's update per call (:attr:`fedpriv.perturbation.PerturbedUpdate.guarantee`). As Flower's ``LocalDpMod``
does, the update is taken against the model the client *received*, so whatever the local training did (any
number of steps, any optimizer) is covered by the one privatization.

Arrays that are not floating point (e.g. a BatchNorm's ``num_batches_tracked``) cannot carry noise: they are
released as the client received them (their local values never leave the client) and named in the result's
``kept`` so the caller can say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from fedpriv.mechanisms.base import Guarantee
from fedpriv.perturbation import Perturbation

__all__ = ["PrivatizedModel", "privatize_model_update"]


@dataclass(frozen=True)
class PrivatizedModel:
    """The released arrays, the guarantee of the release, the perturbation's metrics and the arrays kept as received."""

    arrays: dict[str, np.ndarray]
    guarantee: Guarantee
    metrics: dict[str, float] = field(default_factory=dict)
    kept: tuple[str, ...] = ()


def _check_layout(received: Mapping[str, np.ndarray], trained: Mapping[str, np.ndarray]) -> None:
    """``ValueError`` naming the first difference between the two layouts, or a non-finite trained array."""
    if set(received) != set(trained):
        missing, extra = sorted(set(received) - set(trained)), sorted(set(trained) - set(received))
        raise ValueError(f"the trained model must have the keys of the received one: missing {missing}, "
                         f"unexpected {extra}")
    if not received:
        raise ValueError("the model holds no arrays")
    for key, new in trained.items():
        old = received[key]
        if new.shape != old.shape:
            raise ValueError(f"array {key!r}: shape {new.shape} differs from the received {old.shape}")
        if np.issubdtype(new.dtype, np.floating) and not np.isfinite(new).all():
            raise ValueError(f"array {key!r}: {int((~np.isfinite(new)).sum())} NaN/inf value(s) after training")


def privatize_model_update(received: Mapping[str, np.ndarray], trained: Mapping[str, np.ndarray],
                           perturbation: Perturbation, rng: np.random.Generator) -> PrivatizedModel:
    """Release ``received + perturb(trained − received)`` in the layout of ``trained``.

    Parameters
    ----------
    received : mapping of str to ndarray
        The global model the client was sent.
    trained : mapping of str to ndarray
        The client's model after local training: the same keys and shapes.
    perturbation : Perturbation
        Clips the flattened float64 update to its ``clip_norm`` and privatizes it.
    rng : numpy.random.Generator
        The noise stream (a keyed :func:`fedpriv.rng.stream` or fresh OS entropy).

    Returns
    -------
    PrivatizedModel
        ``arrays`` keeps ``trained``'s key order, shapes and dtypes; floating arrays carry the privatized update
        (computed in float64, then cast), the others are ``received``'s values (listed in ``kept``).
    """
    if not isinstance(perturbation, Perturbation):
        raise TypeError(f"perturbation must be a fedpriv.perturbation.Perturbation, got {type(perturbation).__name__}")
    _check_layout(received, trained)
    floats = [k for k, v in trained.items() if np.issubdtype(v.dtype, np.floating)]
    if not floats:
        raise ValueError(f"the model holds no floating-point array to privatize (arrays: {sorted(trained)})")
    base = np.concatenate([np.asarray(received[k], dtype=np.float64).ravel() for k in floats])
    update = np.concatenate([np.asarray(trained[k], dtype=np.float64).ravel() for k in floats]) - base
    out = perturbation.perturb(torch.from_numpy(update), rng)
    released = base + out.vector.numpy()
    arrays: dict[str, np.ndarray] = {}
    offsets = np.cumsum([0] + [trained[k].size for k in floats])
    position = dict(zip(floats, offsets[:-1]))
    for key, value in trained.items():
        if key in position:
            start = int(position[key])
            arrays[key] = released[start:start + value.size].reshape(value.shape).astype(value.dtype)
        else:
            arrays[key] = np.array(received[key], copy=True)
    kept = tuple(k for k in trained if k not in position)
    return PrivatizedModel(arrays=arrays, guarantee=out.guarantee, metrics=dict(out.metrics), kept=kept)
