"""Synthetic classification data generated per client: client i's examples rebuilt from (seed, i) alone.

``dataset = "synthetic-clients"`` (docs/federated_ldp_sgd.md, "Data generated per client"): no pooled
training set exists, so a run of 100,000 clients never holds more than the chunk of clients it trains
(:mod:`fedpriv.data.client_source`). The model, all float32:

* the class structure, drawn once from ``stream(seed, 0, SERVER, "data-classes")`` and small: class
  ``c``'s pattern ``b_c``, a uniformly random vertex of ``{0, 1}^k`` on the first ``k`` features
  (``k`` as :func:`fedpriv.data.make_synthetic` picks it: 78 of 784 features);
* client ``i``'s ``n`` examples, from ``stream(seed, 0, i, "data-client")``: its labels (by the
  ``partition`` key, below), then ``n · features`` random bytes, read as pixels ``u = byte / 255``
  (uniform on {0, 1/255, …, 1}, as MNIST's are quantized); an example of class ``y`` is
  ``x = (1 − s)·u + s·b_y`` on the first ``k`` features and ``x = u`` on the others, so every feature
  lies in [0, 1] like the built-in sets';
* the server's test set of :data:`TEST_SAMPLES` examples, drawn the same way with uniform labels from
  ``stream(seed, 0, SERVER, "data-test")``.

A client's labels: ``"iid"`` — each uniform over the classes; ``"classes"`` — ``classes-per-client``
distinct classes drawn uniformly, each label uniform among them; ``"dirichlet"`` — class proportions
``p ~ Dirichlet(α·1)``, each label drawn from ``p``. On a feature where two patterns differ, the two
classes' means differ by ``s`` and each has standard deviation ``(1 − s)/√12``; with :data:`CLASS_SEP`
``s = 0.2`` and the ~30 features where the closest of the 45 pairs of the default set differ, the
pair lies about 4.7 standard deviations apart: a logistic regression learns the set to well above
chance but not perfectly (tests/data/test_client_synthetic.py). Bytes, not Gaussian draws: a client's
47,040 values cost one Philox call of 5,880 words, so generating a chunk costs less than training it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedpriv._validation import check_choice, check_int, check_positive
from fedpriv.rng import SERVER, stream

__all__ = ["CLASS_SEP", "TEST_SAMPLES", "ClientSynthetic"]

#: Examples of the server's test set.
TEST_SAMPLES = 10_000
#: The weight ``s`` of a class's pattern in its examples' informative features (module docstring).
CLASS_SEP = 0.2
#: Label schemes, as the ``partition`` key names them.
_SCHEMES = ("iid", "classes", "dirichlet")


@dataclass(frozen=True)
class ClientSynthetic:
    """The per-client generator of ``dataset = "synthetic-clients"`` (module docstring).

    Parameters
    ----------
    seed : int
        Run seed of every keyed stream the generator draws from.
    samples_per_client : int
        Examples ``n`` of every client (>= 1).
    features, classes : int
        Features per example (>= 2) and classes (>= 2, at most ``2**k``).
    scheme : {"iid", "classes", "dirichlet"}
        How a client's labels are drawn (module docstring).
    classes_per_client : int (default: 2)
        ``"classes"``: distinct classes per client, at most ``classes``.
    alpha : float (default: 0.5)
        ``"dirichlet"``: concentration α > 0.
    """

    seed: int
    samples_per_client: int
    features: int
    classes: int
    scheme: str
    classes_per_client: int = 2
    alpha: float = 0.5

    def __post_init__(self) -> None:
        check_int(self.seed, "seed", minimum=0)
        check_int(self.samples_per_client, "samples-per-client", minimum=1)
        check_int(self.features, "synthetic-features", minimum=2)
        check_int(self.classes, "synthetic-classes", minimum=2)
        check_choice(self.scheme, "partition", _SCHEMES)
        if self.scheme == "classes":
            check_int(self.classes_per_client, "classes-per-client", minimum=1, maximum=self.classes)
        if self.scheme == "dirichlet":
            check_positive(self.alpha, "dirichlet-alpha")
        if self.classes > 2 ** min(self.informative, 62):
            raise ValueError(f"synthetic-classes must be <= 2**{self.informative} (one hypercube vertex per class "
                             f"on the {self.informative} informative features), got {self.classes}")
        bits = stream(self.seed, 0, SERVER, "data-classes").integers(2, size=(self.classes, self.informative))
        patterns = (CLASS_SEP * bits).astype(np.float32)  # s·b_c
        patterns.flags.writeable = False
        object.__setattr__(self, "_patterns", patterns)

    @property
    def informative(self) -> int:
        """Features ``k`` that carry the class (the first ``k``): as :func:`fedpriv.data.make_synthetic` picks them."""
        return min(self.features, max(math.ceil(math.log2(self.classes)), self.features // 10))

    @property
    def patterns(self) -> np.ndarray:
        """``s·b_c`` of every class on the informative features, float32 ``(classes, k)``, read-only."""
        return self._patterns  # type: ignore[attr-defined]

    def _labels(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """One client's ``n`` labels by the scheme (module docstring), drawn first from its stream."""
        if self.scheme == "iid":
            return rng.integers(self.classes, size=n)
        if self.scheme == "classes":
            own = rng.choice(self.classes, size=self.classes_per_client, replace=False)
            return own[rng.integers(self.classes_per_client, size=n)]
        p = rng.dirichlet(np.full(self.classes, float(self.alpha)))
        return rng.choice(self.classes, size=n, p=p)

    def _examples(self, streams: Sequence[np.random.Generator], n: int, *,
                  uniform: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``n`` examples from each stream, stacked: labels (uniform for the test set), then the features."""
        pixels = np.empty((len(streams) * n, self.features), dtype=np.uint8)
        y = np.empty(len(streams) * n, dtype=np.int64)
        for j, rng in enumerate(streams):  # one keyed stream per client: its draws are its own
            rows = slice(j * n, (j + 1) * n)
            y[rows] = rng.integers(self.classes, size=n) if uniform else self._labels(rng, n)
            pixels[rows] = np.frombuffer(rng.bytes(n * self.features), dtype=np.uint8).reshape(n, self.features)
        x = pixels.astype(np.float32)
        x *= np.float32(1.0 / 255.0)
        k = self.informative
        x[:, :k] *= np.float32(1.0 - CLASS_SEP)
        x[:, :k] += self.patterns[y]
        return x, y

    def clients(self, client_ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The examples of ``client_ids``, client after client: ``x`` float32 ``(m·n, features)``, ``y`` int64.

        Client ``client_ids[j]`` holds rows ``j·n … (j+1)·n − 1``; they are the same bits whichever
        clients come with it.
        """
        ids = [check_int(int(c), "client id", minimum=0) for c in np.asarray(client_ids).reshape(-1)]
        return self._examples([stream(self.seed, 0, c, "data-client") for c in ids], self.samples_per_client)

    def test_set(self) -> tuple[np.ndarray, np.ndarray]:
        """The server's :data:`TEST_SAMPLES` test examples, uniform labels, from ``"data-test"``."""
        return self._examples([stream(self.seed, 0, SERVER, "data-test")], TEST_SAMPLES, uniform=True)
