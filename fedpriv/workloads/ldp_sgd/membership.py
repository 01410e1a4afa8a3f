"""Membership inference on a finished federated LDP-SGD run (``membership-attack``; docs/attacks.md §9).

Members are every client's training examples (the run's data regenerated from its config: a
simulation oracle, as the test set is), non-members the server's held-out test set, drawn from
the same distribution. The attack sees the final global model only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedpriv.attacks.membership import loss_threshold_attack
from fedpriv.data import client_source
from fedpriv.federated.config import LdpSgdConfig

__all__ = ["membership_summary"]


def _members(config: LdpSgdConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Every client's training examples, client after client (x, y)."""
    source = client_source(config)
    chunk = source.chunk(np.arange(len(source)))
    index = np.concatenate(chunk.parts)
    return torch.from_numpy(np.asarray(chunk.x)[index]), torch.from_numpy(np.asarray(chunk.y)[index])


def membership_summary(config: LdpSgdConfig, server: Any, params: np.ndarray) -> dict[str, Any]:
    """``{"attack": ..., "auc", "auc_null_se", "advantage", "members", "non_members"}`` of the configured attack on the model at
    ``params`` (only ``{"attack": "none"}`` when none is configured)."""
    attack = config["membership-attack"]
    if attack == "none":
        return {"attack": "none"}
    flat = torch.from_numpy(np.asarray(params, dtype=np.float32))
    result = loss_threshold_attack(server.model, flat, _members(config), (server.x_test, server.y_test),
                                   num_classes=server.num_classes)
    return {"attack": attack, "auc": result.auc, "auc_null_se": result.null_se, "advantage": result.advantage,
            "members": result.members, "non_members": result.non_members}
