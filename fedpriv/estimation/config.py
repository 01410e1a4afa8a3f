"""The configuration keys of numerical distribution estimation (the ``dist-*`` keys)."""

from __future__ import annotations

from fedpriv.keys import Key, at_least, empty_or_number, in_table

__all__ = ["DIST_DATASETS", "DIST_METHODS", "DISTRIBUTION", "SW_BUCKETIZE", "SW_SHAPES"]

#: Built-in value generators of task = "distribution" (fedpriv.data.distributions.DISTRIBUTION_DATASETS).
DIST_DATASETS: tuple[str, ...] = ("beta-5-2", "uniform", "bimodal", "income-like")
#: Methods of task = "distribution" (fedpriv.estimation.distribution.METHODS).
DIST_METHODS: tuple[str, ...] = ("sw-ems", "sw-em", "grr", "olh", "oue", "cfo-16", "cfo-32", "cfo-64", "hh",
                                 "haar-hrr", "hh-admm", "sr", "pm")
#: Wave shapes of the shape ablation (fedpriv.estimation.waves.WAVE_SHAPES, §3.3).
SW_SHAPES: tuple[str, ...] = ("square", "triangle", "trapezoid-0.2", "trapezoid-0.4", "trapezoid-0.6", "trapezoid-0.8")
#: Randomize before bucketize (continuous SW) or bucketize before randomize (discrete SW) (fedpriv.estimation.sw_ems.BUCKETIZE).
SW_BUCKETIZE: tuple[str, ...] = ("R-B", "B-R")


def _auto_or_positive(v: str) -> bool:
    """'auto' or a finite number > 0 written as text."""
    return v == "auto" or (bool(v.strip()) and empty_or_number(v) and float(v) > 0)


DISTRIBUTION: dict[str, Key] = in_table("distribution", {
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
    "sw-b": Key("auto", str, "distribution, sw-ems and sw-em: the wave's half-width b ('auto' is b(ε), the closed form of §2.1 "
                "that maximizes the mutual-information bound; a number overrides it, for the width ablation of §10)",
                check=_auto_or_positive, allowed="'auto' or a number > 0"),
    "sw-shape": Key("square", str, "distribution, sw-ems and sw-em: the wave's shape (§3.3; only the square wave is "
                    "the Square Wave mechanism, the others are the shape ablation of §10)", choices=SW_SHAPES),
    "sw-bucketize": Key("R-B", str, "distribution, sw-ems and sw-em: randomize the value then bucketize the report "
                        "(R-B, continuous SW, §4.1) or bucketize the value then randomize its bucket (B-R, discrete "
                        "SW, §2.5); B-R needs sw-shape = 'square'", choices=SW_BUCKETIZE),
})
