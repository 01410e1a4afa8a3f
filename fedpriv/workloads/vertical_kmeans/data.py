"""The data of a vertical k-means run and its typed configuration (docs/vertical_kmeans.md §15.1, §15.4 item 2).

:class:`VerticalKMeansView` is the workload's typed view of its keys; :func:`kmeans_config` maps it
to the core's :class:`~fedpriv.clustering.methods.VerticalKMeansConfig`. :func:`load_data` draws
the users' attributes (the §15.1 generator from ``seed``, a bundled scikit-learn set or a CSV file),
normalizes and splits them into the parties' column blocks — what every node and the server
rebuild from the configuration alone. :func:`ground_truth` is the V-measure's reference labeling,
needed only by the server's offline evaluation (§16).
"""

from __future__ import annotations

import numpy as np

from fedpriv.clustering.config import VERTICAL_KMEANS
from fedpriv.clustering.kmeans import assign, kmeans
from fedpriv.clustering.methods import VerticalKMeansConfig
from fedpriv.clustering.vertical import server_rng
from fedpriv.data.vertical import VerticalData, load_vertical
from fedpriv.keys import COMMON, ConfigView, compose

__all__ = ["VerticalKMeansView", "check_truth", "ground_truth", "kmeans_config", "load_data", "parse_ratios"]


class VerticalKMeansView(ConfigView):
    """The typed configuration of a vertical k-means run (the common keys and the ``kmeans-*``, sketch, party keys)."""

    KEYS = compose(COMMON, VERTICAL_KMEANS)


def parse_ratios(text: str, parties: int) -> tuple[int, ...] | None:
    """``split-ratios`` as integers (``"3:5"`` → (3, 5)); ``""`` → None (even split)."""
    if not text.strip():
        return None
    try:
        ratios = tuple(int(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"split-ratios must look like '3:5' (one positive integer per party), got {text!r}") from None
    if len(ratios) != parties or min(ratios) < 1:
        raise ValueError(f"split-ratios must hold {parties} positive integers (one per party, parties = {parties}), "
                         f"got {text!r}")
    return ratios


def kmeans_config(config: VerticalKMeansView) -> VerticalKMeansConfig:
    """The :class:`VerticalKMeansConfig` of a run configuration (0 means "default" for δ, k', T)."""
    return VerticalKMeansConfig(
        k=config["k"], epsilon=config["epsilon"], delta=config["kmeans-delta"] or None, method=config["kmeans-method"],
        kprime=config["kprime"] or None, kprime_rule=config["kprime-rule"], b=config["budget-b"],
        M=config["sketch-repetitions"], gamma=config["sketch-gamma"], estimator=config["sketch-estimator"],
        dplsf_preset=config["dplsf-preset"], hash_backend=config["hash-backend"],
        twopest_iterations=config["twopest-iterations"] or None, update=config["twopest-update"])


def load_data(config: VerticalKMeansView) -> VerticalData:
    """The §15.1 generator with m = ``kmeans-dims`` and k components, or a named set (normalized, split)."""
    name, parties, samples, seed = config["kmeans-data"], config["parties"], config["kmeans-samples"], config["seed"]
    ratios = parse_ratios(config["split-ratios"], parties)
    if name == "mixed-gaussian":
        m = config["kmeans-dims"]
        if parties > m:
            raise ValueError(f"parties must be <= kmeans-dims = {m} (each party holds at least one column), "
                             f"got {parties}")
        n = samples or 20000
        if config["k"] > n:
            raise ValueError(f"k must be <= n = {n} (kmeans-samples), got {config['k']}")
        return load_vertical(name, parties, seed=seed, n=n, ratios=ratios, m=m, k=config["k"])
    if name != "csv" and (config["kmeans-csv"] or config["kmeans-csv-label"]):
        raise ValueError(f"kmeans-csv and kmeans-csv-label apply only to kmeans-data = 'csv', got {name!r}")
    if name == "csv" and not config["kmeans-csv"]:
        raise ValueError("kmeans-csv must name a CSV file for kmeans-data = 'csv', got ''")
    csv = {"csv_path": config["kmeans-csv"], "label_column": config["kmeans-csv-label"] or None} if name == "csv" else {}
    data = load_vertical(name, parties, seed=seed, n=samples or None, ratios=ratios, **csv)
    if config["k"] > data.n:
        raise ValueError(f"k must be <= n = {data.n} (the users of {name!r}), got {config['k']}")
    return data


def _uses_labels(data: VerticalData, config: VerticalKMeansView) -> bool:
    truth = config["kmeans-truth"]
    return truth == "labels" or (truth == "auto" and data.name == "mixed-gaussian")


def check_truth(data: VerticalData, config: VerticalKMeansView) -> None:
    """Raise unless ``kmeans-truth`` can be computed for ``data`` (labels need a labeled set)."""
    if _uses_labels(data, config) and data.labels is None:
        raise ValueError(f"kmeans-truth must be 'central-kmeans' or 'auto' for data without labels "
                         f"({data.name!r}), got {config['kmeans-truth']!r}")


def ground_truth(data: VerticalData, config: VerticalKMeansView) -> np.ndarray:
    """``kmeans-truth``: the data's labels, or the labels of central non-private k-means with k centers (§15.4 item 2).

    ``"auto"`` keeps the generating components of ``mixed-gaussian`` and uses central k-means for the
    real sets, as the thesis does. Central k-means runs on the server's stream ``"ground-truth"`` of ``seed``.
    """
    check_truth(data, config)
    if _uses_labels(data, config):
        return data.labels  # type: ignore[return-value]
    x = data.x
    return assign(x, kmeans(x, config["k"], rng=server_rng(config["seed"], "ground-truth")))
