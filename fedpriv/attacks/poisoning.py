"""Model and data poisoning of federated LDP-SGD by the run's attackers (docs/attacks.md §2–3).

Both act in the one place each runtime shares, so the fast, batched and Flower engines and a
deployment give the same uploads:

* **data poisoning** (``label-flip``): an attacker trains on its own examples with every label y
  replaced by ``C − 1 − y`` (:func:`flip_labels`), then releases through its LDP mechanism as an
  honest client does: the attack acts *before* the mechanism;
* **model poisoning** (``sign-flip``, ``scaling``, ``gaussian``): an attacker first forms its honest
  upload ``w + Δ`` (local training *and* its LDP mechanism, with its own keyed noise), then replaces
  the update Δ = upload − w (w the broadcast global model) by

  - ``sign-flip``: ``−s · Δ`` (s = ``attack-scale``, default 1; Fang et al. 2020, Li et al. 2019),
  - ``scaling``: ``γ · Δ``, model replacement (Bagdasaryan et al. 2020, γ = n/η with the server rate
    η = 1: γ defaults to the clients sampled per round, so under FedAvg with uniform weights the
    attacker's update replaces the average),
  - ``gaussian``: a random update ``N(0, attack-std² I)`` drawn from
    ``stream(seed, round, client, "attack-gaussian")`` (the mechanism's output is discarded).

  The transformation comes *after* the mechanism (docs/attacks.md §2 says why: the perturbations
  clip their input to C, so a boost applied before them would be clipped away — the bound LDP puts on
  what a client can do through its mechanism; Cheu, Smith, Ullman 2021).

:func:`poison_uploads` works on a ``(clients × d)`` block, one client per row, so the per-client
path (a block of one row) and the batched engine run the same arithmetic on each row: honest rows
are returned untouched, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedpriv.attacks.keys import MODEL_POISONING, AttackSettings
from fedpriv.attacks.parameters import attack_scale
from fedpriv.attacks.selection import attacker_rows, is_attacker
from fedpriv.rng import RowStreams

__all__ = ["ATTACK_NOISE", "flip_labels", "label_flip_rows", "poison_uploads"]

#: Purpose of the keyed stream of a ``gaussian`` attacker's random update.
ATTACK_NOISE = "attack-gaussian"


def flip_labels(y: Tensor, num_classes: int) -> Tensor:
    """``label-flip``'s labels: y → C − 1 − y (a bijection of the C classes with no fixed point for even C)."""
    return (num_classes - 1) - y


def label_flip_rows(config: AttackSettings, client_ids: Any) -> np.ndarray:
    """Per client id, whether it trains on flipped labels this run (``attack = "label-flip"`` and an attacker)."""
    ids = np.asarray(client_ids, dtype=np.int64)
    if config["attack"] != "label-flip":
        return np.zeros(ids.shape, dtype=bool)
    return is_attacker(config, ids)


def poison_uploads(config: AttackSettings, uploads: Tensor, global_params: Tensor, client_ids: Any, *,
                   server_round: int) -> Tensor:
    """The uploads (N, d) with the attackers' rows poisoned (module docstring); the honest rows are the input's.

    ``uploads[i]`` is client ``client_ids[i]``'s privatized upload ``w + Δ_i``; ``global_params`` is w.
    Returns ``uploads`` itself when no row attacks (or the attack is not a model poisoning).
    """
    if config["attack"] not in MODEL_POISONING:
        return uploads
    ids, rows = attacker_rows(config, uploads, client_ids)
    if rows.size == 0:
        return uploads
    sel = torch.from_numpy(rows)
    w = torch.as_tensor(global_params).to(uploads.dtype)
    if config["attack"] == "gaussian":
        draws = RowStreams.keyed(config["seed"], server_round, ids[rows].tolist(), ATTACK_NOISE).standard_normal(
            (rows.size, uploads.shape[1]))
        poisoned = w + (config["attack-std"] * torch.from_numpy(draws)).to(uploads.dtype)
    else:
        factor = attack_scale(config) * (-1.0 if config["attack"] == "sign-flip" else 1.0)
        poisoned = w + factor * (uploads[sel] - w)
    out = uploads.clone()
    out[sel] = poisoned
    return out
