"""The configuration keys of DP vertical federated k-means (the ``kmeans-*``, sketch and party keys)."""

from __future__ import annotations

from fedpriv.keys import Key, at_least, in_table, positive, unit_closed_left, unit_closed_right

__all__ = ["VERTICAL_KMEANS"]

VERTICAL_KMEANS: dict[str, Key] = in_table("vertical_kmeans", {
    "kmeans-data": Key("mixed-gaussian", str, "vertical-kmeans: dataset (the §15.1 generator, a bundled "
                       "scikit-learn set or a local CSV file)",
                       choices=("mixed-gaussian", "digits", "wine", "breast_cancer", "iris", "csv")),
    "kmeans-csv": Key("", str, "vertical-kmeans: path of the CSV file for kmeans-data = 'csv' (header row, "
                      "numeric columns)"),
    "kmeans-csv-label": Key("", str, "vertical-kmeans: label column of the CSV file ('' = no labels)"),
    "kmeans-truth": Key("auto", str, "vertical-kmeans: ground truth of the V-measure (§15.4 item 2): the data's "
                        "labels, central non-private k-means labels with k centers, or auto (labels for "
                        "mixed-gaussian, central k-means for the real sets)",
                        choices=("auto", "labels", "central-kmeans")),
    "kmeans-samples": Key(0, int, "vertical-kmeans: users n (mixed-gaussian: n drawn; other sets: the first n "
                          "rows; 0: the set's default, 20000 for mixed-gaussian, all rows otherwise)",
                          check=at_least(0), allowed=">= 0 (0 means the dataset's default)"),
    "kmeans-dims": Key(8, int, "vertical-kmeans: attributes m of the mixed-gaussian generator",
                       check=at_least(2), allowed=">= 2"),
    "k": Key(5, int, "vertical-kmeans: final centers k (and mixed-gaussian components)", check=at_least(1),
             allowed=">= 1"),
    "parties": Key(2, int, "vertical-kmeans: data parties S (column blocks)", check=at_least(2), allowed=">= 2"),
    "split-ratios": Key("", str, "vertical-kmeans: columns per party as ratios, e.g. '3:5' ('' = even split)"),
    "kmeans-method": Key("dpfmps-2pest", str, "vertical-kmeans: method (§15.3 and the §9.3 ablations)",
                         choices=("dpfmps-2pest", "dpfmps-basic", "ind-lap", "ldp-agg-2pest", "ldp-agg",
                                  "central-dplsf", "central-kmeans", "vfl-kmeans", "kmeans+dpfmps-2pest",
                                  "dplsf+exact")),
    "kmeans-delta": Key(0.0, float, "vertical-kmeans: total δ of the sketches (0 = 1/n, §14)",
                        check=unit_closed_left, allowed="in [0, 1) (0 means 1/n)"),
    "kprime": Key(0, int, "vertical-kmeans: local centers k' per party (0 = auto by kprime-rule, or k for "
                  "kprime-rule = 'fixed')", check=at_least(0), allowed=">= 0 (0 means auto)"),
    "kprime-rule": Key("R1", str, "vertical-kmeans: auto-k' rule of §8.2 (R1 corrected, R2 literal) or fixed",
                       choices=("R1", "R2", "fixed")),
    "budget-b": Key(0.98, float, "vertical-kmeans: share b of ε for the parties (ε_0 = (1 − b)ε estimates n)",
                    check=unit_closed_right, allowed="in (0, 1]"),
    "sketch-repetitions": Key(4096, int, "vertical-kmeans: sketch repetitions M", check=at_least(1),
                              allowed=">= 1"),
    "sketch-gamma": Key(1.0, float, "vertical-kmeans: base γ of the geometric hash", check=positive,
                        allowed="> 0 and finite"),
    "sketch-estimator": Key("hm_corrected", str, "vertical-kmeans: cardinality estimator (§5.3; "
                            "literal_power_of_hm is the source's biased form, A1)",
                            choices=("hm_corrected", "hm_raw", "literal_power_of_hm", "geometric_mean")),
    "dplsf-preset": Key("library", str, "vertical-kmeans: DPLSF parameters (§4.2)", choices=("library", "tuned")),
    "hash-backend": Key("prf", str, "vertical-kmeans: keyed hash of the sketches (datasketch: repetitions not "
                        "independent, A9)", choices=("prf", "datasketch")),
    "twopest-update": Key("additive_clip", str, "vertical-kmeans: 2PEst update (additive is the source's "
                          "literal form, A4)", choices=("additive_clip", "additive", "ipf")),
    "twopest-iterations": Key(0, int, "vertical-kmeans: 2PEst iterations T (0 = 200·S(S−1)/2)",
                              check=at_least(0), allowed=">= 0 (0 means the default)"),
})
