"""The configuration keys of numerical distribution estimation (the ``dist-*`` keys)."""

from __future__ import annotations

from fedpriv.keys import Key, at_least, empty_or_number

__all__ = ["DIST_DATASETS", "DIST_METHODS", "DISTRIBUTION"]

#: Built-in value generators of task = "distribution" (fedpriv.data.distributions.DISTRIBUTION_DATASETS).
DIST_DATASETS: tuple[str, ...] = ("beta-5-2", "uniform", "bimodal", "income-like")
#: Methods of task = "distribution" (fedpriv.estimation.distribution.METHODS).
DIST_METHODS: tuple[str, ...] = ("sw-ems", "sw-em", "grr", "olh", "oue", "cfo-16", "cfo-32", "cfo-64", "hh",
                                 "haar-hrr", "hh-admm", "sr", "pm")

DISTRIBUTION: dict[str, Key] = {
    "dist-data": Key("beta-5-2", str, "distribution: the users' values (a built-in generator on [0, 1], or a "
                     "numeric CSV column rescaled by the public bounds dist-lo/dist-hi)",
                     choices=DIST_DATASETS + ("csv",)),
    "dist-csv": Key("", str, "distribution: path of the CSV file for dist-data = 'csv' (header row)"),
    "dist-column": Key("", str, "distribution: column of the CSV file holding the numeric attribute"),
    "dist-lo": Key("", str, "distribution: public lower bound of the CSV column (required for dist-data = "
                   "'csv'; values below it are an error, never clipped)", check=empty_or_number,
                   allowed="'' or a finite number"),
    "dist-hi": Key("", str, "distribution: public upper bound of the CSV column (required for dist-data = "
                   "'csv', > dist-lo)", check=empty_or_number, allowed="'' or a finite number"),
    "dist-buckets": Key(256, int, "distribution: histogram buckets d on [0, 1] (hh, hh-admm: a power of 4; "
                        "haar-hrr: a power of 2)", check=at_least(2), allowed=">= 2"),
    "dist-method": Key("sw-ems", str, "distribution: estimation method (docs/square_wave_ems.md §5, §7; sr and pm "
                       "estimate the mean only)", choices=DIST_METHODS),
    "dist-range-queries": Key(1000, int, "distribution: random range queries per trial and α (§9.4)",
                              check=at_least(1), allowed=">= 1"),
}
