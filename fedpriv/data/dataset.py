"""The :class:`Dataset` container every loader returns, and the task relabelling (docs/design.md §7).

``x`` is float32 in ``[0, 1]`` with images channel-first and ``y`` int64 class ids; the arrays a
loader returns are read-only. :func:`apply_task` relabels a 10-class set for the binary
``low_vs_high`` task of docs/federated_ldp_sgd.md §6. The loaders are :mod:`fedpriv.data.datasets`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpriv._validation import check_choice, check_int

__all__ = ["TASKS", "Dataset", "apply_task"]

#: Values of the ``task`` config key.
TASKS: tuple[str, ...] = ("multiclass", "low_vs_high")


@dataclass(frozen=True)
class Dataset:
    """Samples and labels of one split: ``x`` float32 ``(n, *input_shape)``, ``y`` int64 ``(n,)``.

    Parameters
    ----------
    x : np.ndarray
        Features, float32, shape ``(n, *input_shape)``; images are channel-first.
    y : np.ndarray
        Class ids, int64, shape ``(n,)``, each in ``[0, num_classes)``.
    num_classes : int
        Number of classes of the task (not only those present in ``y``).
    name : str
        Human-readable name, e.g. ``"mnist"`` or ``"mnist-low_vs_high"``.
    original_y : np.ndarray or None (default: None)
        The labels before :func:`apply_task` relabelled them (``None`` when ``y`` is the original
        labelling). Partitioners split on these, so a non-IID client of the binary task still
        holds two *digits* (docs/federated_ldp_sgd.md, "Experiment settings").

    ``x`` is cast to float32 and ``y`` to int64 without a copy when they already have those
    dtypes; the arrays are never written to. Arrays returned by the loaders of this module are
    read-only.
    """

    x: np.ndarray
    y: np.ndarray
    num_classes: int
    name: str
    original_y: np.ndarray | None = None

    def __post_init__(self) -> None:
        x = np.asarray(self.x)
        y = np.asarray(self.y)
        if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
            raise TypeError(f"x must be a numeric array, got dtype {x.dtype}")
        if not np.issubdtype(y.dtype, np.integer):
            raise TypeError(f"y must be an integer array of class ids, got dtype {y.dtype}")
        if x.ndim < 2:
            raise ValueError(f"x must have shape (n, *input_shape), got shape {x.shape}")
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise ValueError(f"y must have shape ({x.shape[0]},) to match x, got shape {y.shape}")
        num_classes = check_int(self.num_classes, "num_classes", minimum=1)
        if y.size and (int(y.min()) < 0 or int(y.max()) >= num_classes):
            raise ValueError(
                f"y must lie in [0, {num_classes - 1}] (num_classes={num_classes}), "
                f"got values in [{int(y.min())}, {int(y.max())}]"
            )
        object.__setattr__(self, "x", x.astype(np.float32, copy=False))
        object.__setattr__(self, "y", y.astype(np.int64, copy=False))
        object.__setattr__(self, "num_classes", num_classes)
        if self.original_y is not None:
            orig = np.asarray(self.original_y)
            if not np.issubdtype(orig.dtype, np.integer) or orig.shape != y.shape:
                raise ValueError(
                    f"original_y must be an integer array of shape {y.shape}, "
                    f"got dtype {orig.dtype} and shape {orig.shape}"
                )
            object.__setattr__(self, "original_y", orig.astype(np.int64, copy=False))

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 28, 28)`` for MNIST or ``(784,)`` for synthetic."""
        return tuple(self.x.shape[1:])

    def __len__(self) -> int:
        return int(self.x.shape[0])


def _frozen(ds: Dataset) -> Dataset:
    """Mark the arrays of a dataset this module created as read-only, and return it."""
    for arr in (ds.x, ds.y, ds.original_y):
        if arr is not None:
            arr.flags.writeable = False
    return ds

def apply_task(ds: Dataset, task: str) -> Dataset:
    """Relabel for ``task``: ``"multiclass"`` keeps ``ds``; ``"low_vs_high"`` maps 0–4 → 0 and 5–9 → 1.

    The binary task is the case study's (docs/federated_ldp_sgd.md §6) and needs a 10-class dataset.
    The relabelled dataset shares ``x`` with ``ds`` and keeps the old labels as ``original_y``.
    """
    check_choice(task, "task", TASKS)
    if task == "multiclass":
        return ds
    if ds.num_classes != 10:
        raise ValueError(
            f"task must be 'multiclass' for {ds.name!r} with {ds.num_classes} classes "
            f"('low_vs_high' needs 10 classes), got {task!r}"
        )
    y = (ds.y >= 5).astype(np.int64)
    y.flags.writeable = False  # only the new array: ds's own arrays are shared, their flags untouched
    original = ds.original_y if ds.original_y is not None else ds.y
    return Dataset(ds.x, y, 2, f"{ds.name}-{task}", original_y=original)


