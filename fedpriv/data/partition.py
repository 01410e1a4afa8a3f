"""Horizontal partitioners: which training samples each simulated client holds.

Three schemes (the ``partition`` config key):

* ``"iid"`` — a uniform random permutation cut into ``num_clients`` parts whose sizes differ by
  at most one (the first ``n mod N`` clients get the extra sample).
* ``"classes"`` — the sort-and-shard non-IID split of docs/federated_ldp_sgd.md ("Experiment
  settings"): sort by label (random order within a label), cut into ``classes_per_client · N``
  shards whose sizes differ by at most one, give each client ``classes_per_client`` shards with
  distinct labels. With MNIST, N = 500 and two classes per client this is 120 images per client.
* ``"dirichlet"`` — for every class, client proportions ``p ~ Dirichlet(α·1_N)``; the class's
  samples (in random order) are cut at ``floor(cumsum(p) · n_c)``. Small α → few classes per
  client; large α → close to IID.

Every draw comes from ``fedpriv.rng.stream(seed, 0, SERVER, "partition-<scheme>")``: the same
labels, scheme, parameters and seed give the same split in every process. Each function returns
one ascending int64 index array per client; every sample belongs to exactly one client and every
client holds at least one sample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedpriv._validation import check_choice, check_int, check_positive
from fedpriv.data.config import DataConfig
from fedpriv.rng import SERVER, stream

if TYPE_CHECKING:
    from fedpriv.data.datasets import Dataset

__all__ = ["SCHEMES", "partition", "partition_for"]

#: Values of the ``partition`` config key.
SCHEMES: tuple[str, ...] = ("iid", "classes", "dirichlet")

#: Vectorized re-draw sweeps of the ``"classes"`` split before its guaranteed fallback (see
#: :func:`partition`, Notes); a sweep removes most remaining collisions, ~5-15 sweeps are typical.
_MAX_SWEEPS = 300
#: Exchange sweeps that randomize the fallback's round-robin deal (each proposes N exchanges).
_MIX_SWEEPS = 100


def partition(
    labels: np.ndarray,
    num_clients: int,
    scheme: str,
    *,
    seed: int,
    classes_per_client: int = 2,
    alpha: float = 0.5,
) -> list[np.ndarray]:
    """Split sample indices ``0..n-1`` over ``num_clients`` clients by ``scheme``.

    Parameters
    ----------
    labels : np.ndarray
        Integer class ids, shape ``(n,)`` (any integer values; classes are the distinct values).
    num_clients : int
        Number of clients N, ``1 <= N <= n``.
    scheme : {"iid", "classes", "dirichlet"}
        How samples are split (module docstring).
    seed : int
        Run seed of the keyed stream ``stream(seed, 0, SERVER, "partition-<scheme>")``.
    classes_per_client : int (default: 2)
        ``"classes"`` only: shards (with distinct labels) per client, at most the number of
        classes and at most ``n // N``.
    alpha : float (default: 0.5)
        ``"dirichlet"`` only: concentration α > 0.

    Returns
    -------
    list of np.ndarray
        ``N`` ascending int64 index arrays, disjoint, covering ``0..n-1``, none empty.

    Notes
    -----
    ``"classes"``: a shard's label is its most frequent label (a shard straddles two labels only
    where a class size is not a multiple of the shard size, so such a client may hold a few
    samples of one more label). The shards are dealt by a uniform random permutation; then every
    client holding a label twice has that shard *re-drawn*: exchanged with a shard in a uniformly
    random slot, accepted only if neither client ends up with a repeated label. All collisions
    are re-drawn at once per sweep (vectorized, O(N) per sweep), and the number left shrinks
    geometrically, so the split costs O(n log n) for the sort plus ~5-15 sweeps. A split exists
    only if no label fills more than N shards (else a ``ValueError`` says so). When every label
    fills exactly N shards, each client needs one shard of each label; the shards are then dealt
    round-robin (labels sorted in random order, shards in random order, clients permuted), which
    is uniform over those splits. If :data:`_MAX_SWEEPS` sweeps leave a collision (seen only
    when nearly every client must hold nearly every label), the same round-robin deal is used,
    randomized by :data:`_MIX_SWEEPS` sweeps of label-preserving random exchanges.

    ``"dirichlet"``: a client that the draw leaves empty receives one sample, drawn uniformly at
    random among the samples not needed to keep their own client non-empty (one random sample of
    each non-empty client is kept). No re-drawing, so the split always terminates.
    """
    labels = _check_labels(labels)
    n = labels.shape[0]
    num_clients = check_int(num_clients, "num-clients", minimum=1)
    if num_clients > n:
        raise ValueError(f"num-clients must be <= the number of training samples ({n}), got {num_clients}")
    scheme = check_choice(scheme, "partition", SCHEMES)
    seed = check_int(seed, "seed", minimum=0)
    label_values, label_ids = np.unique(labels, return_inverse=True)
    label_ids = label_ids.reshape(-1)
    num_classes = int(label_ids.max()) + 1
    if scheme == "classes":
        classes_per_client = check_int(classes_per_client, "classes-per-client", minimum=1)
        if classes_per_client > num_classes:
            raise ValueError(
                f"classes-per-client must be <= the number of classes ({num_classes}), got {classes_per_client}"
            )
        if classes_per_client * num_clients > n:
            raise ValueError(
                f"classes-per-client must be <= n // num-clients ({n // num_clients}) so that every shard "
                f"holds a sample, got {classes_per_client}"
            )
    if scheme == "dirichlet":
        alpha = check_positive(alpha, "dirichlet-alpha")
    rng = stream(seed, 0, SERVER, f"partition-{scheme}")
    if scheme == "iid":
        owner = _iid_owner(n, num_clients, rng)
    elif scheme == "classes":
        owner = _shard_owner(label_ids, label_values, num_clients, classes_per_client, rng)
    else:
        owner = _dirichlet_owner(label_ids, num_classes, num_clients, alpha, rng)
    return _group(owner, num_clients)


def partition_for(config: DataConfig, train: Dataset) -> list[np.ndarray]:
    """Each client's indices into ``train`` as ``config`` asks (keys ``partition``, ``num-clients``, ``seed``, ...).

    The split is drawn on ``train.original_y`` when a task relabelled the data (so with
    ``task="low_vs_high"`` and ``partition="classes"`` a client holds two *digits*, as in the
    paper's non-IID setting), else on ``train.y``.
    """
    config = DataConfig.of(config)
    labels = train.original_y if train.original_y is not None else train.y
    return partition(
        labels,
        config["num-clients"],
        config["partition"],
        seed=config["seed"],
        classes_per_client=config["classes-per-client"],
        alpha=config["dirichlet-alpha"],
    )


# --------------------------------------------------------------------------------------------
# helpers: each returns ``owner``, the client of every sample
# --------------------------------------------------------------------------------------------


def _check_labels(labels: np.ndarray) -> np.ndarray:
    arr = np.asarray(labels)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"labels must be an integer array of class ids, got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array, got shape {arr.shape}")
    return arr


def _group(owner: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Ascending sample indices of each client, from the client of every sample."""
    order = np.argsort(owner, kind="stable").astype(np.int64, copy=False)
    sizes = np.bincount(owner, minlength=num_clients)
    return np.split(order, np.cumsum(sizes)[:-1])


def _grouped_order(label_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sample indices sorted by label, in uniformly random order within each label."""
    perm = rng.permutation(label_ids.shape[0])
    return perm[np.argsort(label_ids[perm], kind="stable")]


def _iid_owner(n: int, num_clients: int, rng: np.random.Generator) -> np.ndarray:
    sizes = np.full(num_clients, n // num_clients)
    sizes[: n % num_clients] += 1
    owner = np.empty(n, dtype=np.intp)
    owner[rng.permutation(n)] = np.repeat(np.arange(num_clients), sizes)
    return owner


def _shard_owner(
    label_ids: np.ndarray, label_values: np.ndarray, num_clients: int, per_client: int, rng: np.random.Generator
) -> np.ndarray:
    n = label_ids.shape[0]
    num_classes = label_values.shape[0]
    num_shards = per_client * num_clients
    order = _grouped_order(label_ids, rng)
    sizes = np.full(num_shards, n // num_shards)
    sizes[: n % num_shards] += 1
    shard_of_pos = np.repeat(np.arange(num_shards), sizes)
    counts = np.bincount(shard_of_pos * num_classes + label_ids[order], minlength=num_shards * num_classes)
    shard_label = counts.reshape(num_shards, num_classes).argmax(axis=1)
    per_label = np.bincount(shard_label, minlength=num_classes)
    if int(per_label.max()) > num_clients:
        worst = int(per_label.argmax())
        raise ValueError(
            f"classes-per-client must let every client hold distinct labels, but label {label_values[worst]} "
            f"fills {int(per_label[worst])} of the {num_shards} shards and there are only "
            f"{num_clients} clients; use fewer classes per client or partition='dirichlet', got {per_client}"
        )
    slots = _assign_shards(shard_label, num_clients, per_client, rng)
    client_of_shard = np.empty(num_shards, dtype=np.intp)
    client_of_shard[slots] = np.arange(num_shards) // per_client
    owner = np.empty(n, dtype=np.intp)
    owner[order] = client_of_shard[shard_of_pos]
    return owner


def _duplicate_slots(slot_labels: np.ndarray) -> np.ndarray:
    """Flat slot indices whose label already occurs earlier (in sorted order) in the same row."""
    per_client = slot_labels.shape[1]
    order = np.argsort(slot_labels, axis=1, kind="stable")
    ranked = np.take_along_axis(slot_labels, order, axis=1)
    rows, cols = np.nonzero(ranked[:, 1:] == ranked[:, :-1])
    return rows * per_client + order[rows, cols + 1]


def _assign_shards(
    shard_label: np.ndarray, num_clients: int, per_client: int, rng: np.random.Generator
) -> np.ndarray:
    """Shard held in each slot (slot ``s`` belongs to client ``s // per_client``), labels distinct per client."""
    num_shards = shard_label.shape[0]
    per_label = np.bincount(shard_label)
    if np.all(per_label[per_label > 0] == num_clients):
        # every client must hold one shard of each label: round-robin is uniform over those splits
        return _round_robin(shard_label, num_clients, per_client, rng)
    slots = rng.permutation(num_shards)
    for _ in range(_MAX_SWEEPS):
        dup = _duplicate_slots(shard_label[slots].reshape(num_clients, per_client))
        if dup.size == 0:
            return slots
        _, first = np.unique(dup // per_client, return_index=True)  # one collision per client
        dup = dup[first]
        _exchange(slots, shard_label, dup, rng.integers(num_shards, size=dup.size), per_client)
    slots = _round_robin(shard_label, num_clients, per_client, rng)
    half = num_clients // 2
    for _ in range(_MIX_SWEEPS):  # randomize the dealt split by exchanges that keep labels distinct
        pairs = rng.permutation(num_clients)[: 2 * half].reshape(2, half) * per_client
        cols = rng.integers(per_client, size=(2, half))
        _exchange(slots, shard_label, pairs[0] + cols[0], pairs[1] + cols[1], per_client)
    return slots


def _exchange(
    slots: np.ndarray, shard_label: np.ndarray, slot_a: np.ndarray, slot_b: np.ndarray, per_client: int
) -> None:
    """Exchange (in place) the shards of slots ``slot_a[i]`` and ``slot_b[i]`` wherever allowed.

    An exchange is made only if its two clients differ, take part in no other exchange of this
    call, and neither ends up with a label it already holds in another slot; so no collision is
    ever created, and a slot in ``slot_a`` that was a collision stops being one.
    """
    held = shard_label[slots].reshape(-1, per_client)
    row_a, row_b = slot_a // per_client, slot_b // per_client
    k = slot_a.size
    _, inverse, uses = np.unique(np.concatenate([row_a, row_b]), return_inverse=True, return_counts=True)
    alone = (uses[inverse[:k]] == 1) & (uses[inverse[k:]] == 1)
    lab_a, lab_b = shard_label[slots[slot_a]], shard_label[slots[slot_b]]
    cols = np.arange(per_client)
    fits_a = ~np.any((held[row_a] == lab_b[:, None]) & (cols != (slot_a % per_client)[:, None]), axis=1)
    fits_b = ~np.any((held[row_b] == lab_a[:, None]) & (cols != (slot_b % per_client)[:, None]), axis=1)
    ok = alone & fits_a & fits_b
    a, b = slot_a[ok], slot_b[ok]
    slots[a], slots[b] = slots[b], slots[a]


def _round_robin(shard_label: np.ndarray, num_clients: int, per_client: int, rng: np.random.Generator) -> np.ndarray:
    """Deal label-sorted shards round-robin: distinct labels whenever no label fills more than N shards."""
    num_classes = int(shard_label.max()) + 1
    label_rank = rng.permutation(num_classes)[shard_label]
    perm = rng.permutation(shard_label.shape[0])
    dealt = perm[np.argsort(label_rank[perm], kind="stable")]  # position i goes to client i mod N
    by_client = dealt.reshape(per_client, num_clients).T
    return by_client[rng.permutation(num_clients)].reshape(-1)


def _dirichlet_owner(
    label_ids: np.ndarray, num_classes: int, num_clients: int, alpha: float, rng: np.random.Generator
) -> np.ndarray:
    n = label_ids.shape[0]
    class_counts = np.bincount(label_ids, minlength=num_classes)
    props = rng.dirichlet(np.full(num_clients, alpha), size=num_classes)  # (C, N), rows sum to 1
    cuts = np.floor(np.cumsum(props, axis=1) * class_counts[:, None]).astype(np.int64)
    cuts = np.minimum(cuts, class_counts[:, None])
    cuts[:, -1] = class_counts
    per_class_client = np.diff(cuts, axis=1, prepend=0)
    order = _grouped_order(label_ids, rng)
    owner = np.empty(n, dtype=np.intp)
    owner[order] = np.repeat(np.tile(np.arange(num_clients), num_classes), per_class_client.reshape(-1))
    empty = np.flatnonzero(np.bincount(owner, minlength=num_clients) == 0)
    if empty.size:
        perm = rng.permutation(n)
        _, first = np.unique(owner[perm], return_index=True)
        keep = np.zeros(n, dtype=bool)
        keep[perm[first]] = True  # one random sample per non-empty client stays put
        donors = rng.choice(np.flatnonzero(~keep), size=empty.size, replace=False)
        owner[donors] = empty
    return owner
