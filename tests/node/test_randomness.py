"""A node's randomness: keyed draws are the run seed's streams bit for bit; secret draws are a CSPRNG's, per node."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpriv.config import RunConfig
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import local_update, minibatch_indices
from fedpriv.models import get_flat
from fedpriv.node.randomness import KeyedRandomness, SecretRandomness, secret_generator
from fedpriv.rng import CounterRows, stream
from fedpriv.workloads.ldp_sgd.workload import _own_partition

N = 200_000


def test_keyed_draws_are_the_run_seeds_streams() -> None:
    keyed = KeyedRandomness(7)
    np.testing.assert_array_equal(keyed.numpy(2, 3, "noise").random(5), stream(7, 2, 3, "noise").random(5))
    draws = keyed.draws(2, 3, "noise")
    assert isinstance(draws, CounterRows)
    np.testing.assert_array_equal(draws.random((1, 5)), CounterRows.keyed(7, 2, [3], "noise").random((1, 5)))


def test_secret_draws_differ_per_node_and_repeat_only_under_the_same_secret() -> None:
    a, b = SecretRandomness(), SecretRandomness()
    assert not np.array_equal(a.numpy(1, 0, "noise").random(8), b.numpy(1, 0, "noise").random(8))
    again = SecretRandomness(a.secret)
    np.testing.assert_array_equal(a.numpy(1, 0, "noise").random(8), again.numpy(1, 0, "noise").random(8))
    draws = {tuple(a.numpy(r, c, p).random(4)) for r, c, p in [(1, 0, "noise"), (2, 0, "noise"), (1, 1, "noise"),
                                                                 (1, 0, "batch")]}
    assert len(draws) == 4  # another round, client or purpose: another stream
    assert "secret" not in repr(a) or "<secret>" in repr(a)
    with pytest.raises(ValueError, match="secret must be 32 bytes"):
        SecretRandomness(b"short")
    with pytest.raises(ValueError, match="key must be 32 bytes"):
        secret_generator(b"x")


def test_secret_draws_have_the_laws_numpy_promises() -> None:
    """ChaCha20 under numpy's distributions: the mean and variance of normals and uniforms within 5 standard errors."""
    gen = SecretRandomness().numpy(1, 0, "check")
    z = gen.standard_normal(N)
    assert abs(z.mean()) < 5 / np.sqrt(N)
    assert abs(z.var() - 1.0) < 5 * np.sqrt(2.0 / N)
    u = gen.random(N)
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / N)
    other = SecretRandomness().numpy(1, 0, "check").standard_normal(N)
    assert abs(np.corrcoef(z, other)[0, 1]) < 5 / np.sqrt(N)  # two nodes' streams uncorrelated


def test_local_training_draws_from_the_nodes_randomness() -> None:
    cfg = LdpSgdConfig.of(RunConfig.from_mapping({"num-clients": 3, "local-steps": 3, "batch-size": 8, "seed": 4}))
    data = _own_partition(cfg, 1)
    w = get_flat(data.model)

    def update(randomness):  # noqa: ANN001, ANN202
        return local_update(data.model, w, data.x, data.y, cfg, server_round=2, client_id=1,
                            num_classes=data.num_classes, randomness=randomness).release.vector

    default = update(None)
    torch.testing.assert_close(update(KeyedRandomness(4)), default, rtol=0, atol=0)  # keyed: today's bits
    secret = SecretRandomness()
    torch.testing.assert_close(update(secret), update(SecretRandomness(secret.secret)), rtol=0, atol=0)
    assert not torch.equal(update(secret), default) and not torch.equal(update(SecretRandomness()), update(secret))
    batches = minibatch_indices(4, 2, 1, num_examples=20, batch_size=8, steps=3, randomness=secret)
    assert batches.shape == (3, 8) and all(len(set(row)) == 8 for row in batches.tolist())
