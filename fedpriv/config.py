"""The run configuration of federated LDP-SGD: one flat table of kebab-case keys.

The same keys are read from TOML files (``simulations/configs/*.toml``), overridden on the command
line (``--set key=value``), and passed as Flower's run config, so the fast engine, the Flower
simulation engine and a deployment all see one configuration (DESIGN.md §6). Every key has a type,
a default and an allowed set or range; an unknown key or a bad value raises ``ValueError`` naming
the key and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpriv.mf import config as mf
from fedpriv.secagg.graph import CORRUPT_FRACTION, GRAPHS

__all__ = ["DEPLOY_KEYS", "KEYS", "MF_ALGORITHMS", "RunConfig", "parse_override"]


@dataclass(frozen=True)
class Key:
    """One configuration key: its default, type and the values it allows."""

    default: Any
    type: type
    help: str
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], bool] | None = None
    allowed: str = ""


def _positive(v: float) -> bool:
    return math.isfinite(v) and v > 0


def _open_unit(v: float) -> bool:
    return 0.0 < v < 1.0


def _unit_closed_right(v: float) -> bool:
    return 0.0 < v <= 1.0


def _unit_closed_left(v: float) -> bool:
    return 0.0 <= v < 1.0


def _non_negative(v: float) -> bool:
    return math.isfinite(v) and v >= 0


def _empty_or_number(v: str) -> bool:
    if not v.strip():
        return True
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


#: Built-in value generators of task = "distribution" (fedpriv.data.distributions.DISTRIBUTION_DATASETS).
DIST_DATASETS: tuple[str, ...] = ("beta-5-2", "uniform", "bimodal", "income-like")
#: Methods of task = "distribution" (fedpriv.estimation.distribution.METHODS).
DIST_METHODS: tuple[str, ...] = ("sw-ems", "sw-em", "grr", "olh", "oue", "cfo-16", "cfo-32", "cfo-64", "hh",
                                 "haar-hrr", "hh-admm", "sr", "pm")


#: Algorithms of task = "mf": every algorithm of some setting (which ones a setting allows: mf.ALGORITHMS).
MF_ALGORITHMS: tuple[str, ...] = tuple(dict.fromkeys(a for algs in mf.ALGORITHMS.values() for a in algs))
#: The mf-* keys' defaults are MfConfig's (§7), so the two never disagree.
_MF = mf.MfConfig()


def _at_least(k: int) -> Callable[[int], bool]:
    return lambda v: v >= k


KEYS: dict[str, Key] = {
    # run
    "task": Key("ldp-sgd", str, "workload: federated LDP-SGD training, one-shot mean estimation, a secure sum "
                "with distributed DP noise (rounds = iterations T, mean-dims = d, mean-data = the clients' vectors), "
                "or DP vertical federated k-means (epsilon, seed, repetitions and the k-means keys), numerical "
                "distribution estimation under LDP (num-clients = n users, repetitions = trials, the dist-* keys), "
                "or online LDP-SGD over a stream of users (repetitions = replications, the online-* keys), "
                "or federated matrix factorization (epsilon, delta, seed, the mf-* keys; LFL also the secagg-* keys "
                "and dropout-rate)",
                choices=("ldp-sgd", "mean", "secure-sum", "vertical-kmeans", "distribution", "online-sgd", "mf")),
    "seed": Key(0, int, "run seed of every keyed random stream", check=_at_least(0), allowed=">= 0"),
    "rounds": Key(30, int, "number of federated rounds R (secure-sum: two-round iterations T)", check=_at_least(1), allowed=">= 1"),
    # data
    "dataset": Key("digits", str, "dataset name", choices=("digits", "synthetic", "mnist", "cifar10")),
    "data-dir": Key("", str, "directory holding MNIST IDX or CIFAR-10 pickle files"),
    "labels": Key("multiclass", str, "label task: all classes, or digits 0-4 vs 5-9",
                  choices=("multiclass", "low_vs_high")),
    "test-fraction": Key(0.25, float, "held-out test share (digits and synthetic)", check=_open_unit,
                         allowed="in (0, 1)"),
    "synthetic-samples": Key(6000, int, "samples of the synthetic dataset", check=_at_least(10), allowed=">= 10"),
    "synthetic-features": Key(784, int, "features of the synthetic dataset", check=_at_least(2), allowed=">= 2"),
    "synthetic-classes": Key(10, int, "classes of the synthetic dataset", check=_at_least(2), allowed=">= 2"),
    "partition": Key("classes", str, "how samples are split over clients", choices=("iid", "classes", "dirichlet")),
    "classes-per-client": Key(2, int, "classes per client for partition=classes", check=_at_least(1),
                              allowed=">= 1"),
    "dirichlet-alpha": Key(0.5, float, "concentration for partition=dirichlet", check=_positive, allowed="> 0"),
    "num-clients": Key(100, int, "number of clients N", check=_at_least(1), allowed=">= 1"),
    # model and local training
    "model": Key("lr", str, "model", choices=("lr", "mlp", "cnn")),
    "local-steps": Key(5, int, "local SGD iterations per round E", check=_at_least(1), allowed=">= 1"),
    "batch-size": Key(32, int, "local minibatch size B", check=_at_least(1), allowed=">= 1"),
    "lr": Key(0.1, float, "learning rate η0", check=_positive, allowed="> 0"),
    "lr-schedule": Key("constant", str, "η^t = η0, or η0/(1+t) with t the global local-iteration counter",
                       choices=("constant", "inverse")),
    "clip-norm": Key(1.0, float, "L2 clipping bound C of the local (minibatch or per-sample) gradient; secure-sum: of each client's vector",
                     check=_positive, allowed="> 0"),
    # privacy
    "perturbation": Key("none", str, "how the noisy step is privatized",
                        choices=("none", "coordinatewise", "ldpvec", "geodp")),
    "mechanism": Key("piecewise", str, "base LDP mechanism",
                     choices=("laplace", "gaussian", "piecewise", "duchi", "square_wave")),
    "epsilon": Key(1.0, float, "ε per client per round (per noisy step for last_step); secure-sum: central ε of the whole run; "
                   "mf: target ε per party of the whole run (mf-private = 'off' for no noise)", check=_positive,
                   allowed="> 0 and finite"),
    "delta": Key(1e-5, float, "δ (Gaussian mechanism, GeoDP accounting; secure-sum: central δ of the whole run; mf: δ per "
                 "party)", check=_open_unit, allowed="in (0, 1)"),
    "budget-mode": Key("split", str, "coordinatewise budget: ε per update, or ε per coordinate",
                       choices=("split", "per_coordinate")),
    "noise-schedule": Key("last_step", str, "noise on the last local step only, or on every step with ε/E",
                          choices=("last_step", "every_step")),
    "beta": Key(1.0, float, "LDPVec/GeoDP bounding factor β", check=_unit_closed_right, allowed="in (0, 1]"),
    "region": Key("default", str, "angle region (default: centered for LDPVec, none for GeoDP)",
                  choices=("default", "none", "thesis", "centered")),
    "magnitude": Key("normalize", str, "LDPVec magnitude", choices=("normalize", "keep", "perturb")),
    "sigma": Key(1.0, float, "GeoDP noise multiplier σ", check=lambda v: math.isfinite(v) and v >= 0,
                 allowed=">= 0"),
    "angle-noise-scale": Key("source", str, "GeoDP angle noise divided by B or not", choices=("source", "unscaled")),
    "sample-dims": Key(0, int, "coordinatewise/mean: each client reports m of the d coordinates (0: all d)",
                       check=_at_least(0), allowed=">= 0 (0 means all d)"),
    # server-side analysis (federated_ldp_sgd.md §7, hdr4me.md §9)
    "analyzer": Key("off", str, "predict each round's noise-induced deviation (FedLDPAnalyzer)",
                    choices=("off", "on")),
    "analyzer-oracle": Key("off", str, "simulation only: clients also send their clean update so the realized "
                           "deviation is logged next to the prediction (never in deployment)",
                           choices=("off", "on")),
    "analyzer-moments": Key("bound", str, "data moments of bounded mechanisms: worst case, server-held proxy "
                            "gradients, or (piecewise, E = 1) the reports", choices=("bound", "proxy", "reports")),
    "analyzer-alpha": Key(0.95, float, "quantile level of the predicted squared deviation", check=_open_unit,
                          allowed="in (0, 1)"),
    "recalibration": Key("none", str, "HDR4ME re-calibration of the aggregated update (coordinatewise, E=1)",
                         choices=("none", "l1", "l2", "hdr4me*")),
    "recalibration-alpha": Key(0.95, float, "confidence level α of the HDR4ME error bound", check=_open_unit,
                               allowed="in (0, 1)"),
    "l2-proxy": Key("domain", str, "HDR4ME L2 weight proxy for |θ̄_j|", choices=("domain", "estimate", "as_printed")),
    # mean-estimation task (clt_utility_analyzer.md, hdr4me.md experiment settings)
    "mean-data": Key("gaussian", str, "mean and secure-sum tasks: users' data distribution",
                     choices=("uniform", "gaussian", "poisson", "cov19-surrogate")),
    "mean-dims": Key(100, int, "mean and secure-sum tasks: dimensions d", check=_at_least(1), allowed=">= 1"),
    "repetitions": Key(20, int, "mean task: independent repetitions of the collection", check=_at_least(1),
                       allowed=">= 1"),
    # secure-sum task (federated_mf.md §6.2–§6.6): central (ε, δ) over the whole run, clip-norm = L2 bound
    "secagg": Key("oracle", str, "secure-sum and mf (lfl): the SA_ω implementation, the ideal functionality (exact "
                  "float sum) or the Bonawitz et al. protocol with fixed-point encoding over the graph of "
                  "secagg-graph", choices=("oracle", "protocol")),
    "secagg-omega": Key(0.3, float, "secure-sum and mf (lfl): tolerated drop-out fraction ω (an instance halts below "
                        "t = ⌈(1−ω)n⌉ present clients; mf needs ω > 0)", check=_unit_closed_left, allowed="in [0, 1)"),
    "secagg-noise": Key("corrected", str, "secure-sum and mf (lfl): two-round noise of spec §6.4, the corrected "
                        "scheme or the source's (leaky round 2, charged at its true σ_eff)",
                        choices=("corrected", "paper")),
    "dropout-rate": Key(0.0, float, "secure-sum and mf (lfl): per-step drop-out probability at key sharing and "
                        "masked upload (secure-sum: <= secagg-omega; mf: < secagg-omega)", check=_unit_closed_left,
                        allowed="in [0, 1)"),
    "secagg-graph": Key("auto", str, "secure-sum and mf (lfl), secagg = 'protocol': masking graph, every client with "
                        "every other (Bonawitz et al.) or SecAgg+'s random Harary graph of degree k (Bell et al.); auto = "
                        "harary from 100 clients on (docs/secagg.md)", choices=GRAPHS),
    "secagg-corrupt": Key(CORRUPT_FRACTION, float, "secure-sum and mf (lfl), secagg = 'protocol': fraction γ of clients "
                          "that may collude with the honest-but-curious server; sets the Harary graph's (k, t)",
                          check=_unit_closed_left, allowed="in [0, 1)"),
    "secagg-degree": Key(0, int, "secure-sum and mf (lfl), secagg-graph = 'harary': degree k override (even; 0 = the "
                         "smallest k meeting 2^-40 security and 2^-20 correctness, docs/secagg.md)",
                         check=lambda v: v >= 0 and v % 2 == 0, allowed="an even integer >= 0"),
    "secagg-threshold": Key(0, int, "secure-sum and mf (lfl), secagg-graph = 'harary': Shamir threshold t override "
                            "(0 = the smallest t meeting the bounds)", check=_at_least(0), allowed=">= 0"),
    # vertical k-means task (vertical_kmeans.md §3, §14, §15): epsilon = total ε of one protocol run,
    # seed = run seed (repetition r uses seed + r), repetitions = independent protocol runs
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
                          check=_at_least(0), allowed=">= 0 (0 means the dataset's default)"),
    "kmeans-dims": Key(8, int, "vertical-kmeans: attributes m of the mixed-gaussian generator",
                       check=_at_least(2), allowed=">= 2"),
    "k": Key(5, int, "vertical-kmeans: final centers k (and mixed-gaussian components)", check=_at_least(1),
             allowed=">= 1"),
    "parties": Key(2, int, "vertical-kmeans: data parties S (column blocks)", check=_at_least(2), allowed=">= 2"),
    "split-ratios": Key("", str, "vertical-kmeans: columns per party as ratios, e.g. '3:5' ('' = even split)"),
    "kmeans-method": Key("dpfmps-2pest", str, "vertical-kmeans: method (§15.3 and the §9.3 ablations)",
                         choices=("dpfmps-2pest", "dpfmps-basic", "ind-lap", "ldp-agg-2pest", "ldp-agg",
                                  "central-dplsf", "central-kmeans", "vfl-kmeans", "kmeans+dpfmps-2pest",
                                  "dplsf+exact")),
    "kmeans-delta": Key(0.0, float, "vertical-kmeans: total δ of the sketches (0 = 1/n, §14)",
                        check=_unit_closed_left, allowed="in [0, 1) (0 means 1/n)"),
    "kprime": Key(0, int, "vertical-kmeans: local centers k' per party (0 = auto by kprime-rule, or k for "
                  "kprime-rule = 'fixed')", check=_at_least(0), allowed=">= 0 (0 means auto)"),
    "kprime-rule": Key("R1", str, "vertical-kmeans: auto-k' rule of §8.2 (R1 corrected, R2 literal) or fixed",
                       choices=("R1", "R2", "fixed")),
    "budget-b": Key(0.98, float, "vertical-kmeans: share b of ε for the parties (ε_0 = (1 − b)ε estimates n)",
                    check=_unit_closed_right, allowed="in (0, 1]"),
    "sketch-repetitions": Key(4096, int, "vertical-kmeans: sketch repetitions M", check=_at_least(1),
                              allowed=">= 1"),
    "sketch-gamma": Key(1.0, float, "vertical-kmeans: base γ of the geometric hash", check=_positive,
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
                              check=_at_least(0), allowed=">= 0 (0 means the default)"),
    # distribution task (square_wave_ems.md §9, §10, §12): num-clients = n users, each answers one query
    # per trial; repetitions = trials (fresh keys per trial, not composed); epsilon = ε per report
    "dist-data": Key("beta-5-2", str, "distribution: the users' values (a built-in generator on [0, 1], or a "
                     "numeric CSV column rescaled by the public bounds dist-lo/dist-hi)",
                     choices=DIST_DATASETS + ("csv",)),
    "dist-csv": Key("", str, "distribution: path of the CSV file for dist-data = 'csv' (header row)"),
    "dist-column": Key("", str, "distribution: column of the CSV file holding the numeric attribute"),
    "dist-lo": Key("", str, "distribution: public lower bound of the CSV column (required for dist-data = "
                   "'csv'; values below it are an error, never clipped)", check=_empty_or_number,
                   allowed="'' or a finite number"),
    "dist-hi": Key("", str, "distribution: public upper bound of the CSV column (required for dist-data = "
                   "'csv', > dist-lo)", check=_empty_or_number, allowed="'' or a finite number"),
    "dist-buckets": Key(256, int, "distribution: histogram buckets d on [0, 1] (hh, hh-admm: a power of 4; "
                        "haar-hrr: a power of 2)", check=_at_least(2), allowed=">= 2"),
    "dist-method": Key("sw-ems", str, "distribution: estimation method (square_wave_ems.md §5, §7; sr and pm "
                       "estimate the mean only)", choices=DIST_METHODS),
    "dist-range-queries": Key(1000, int, "distribution: random range queries per trial and α (§9.4)",
                              check=_at_least(1), allowed=">= 1"),
    # online-sgd task (online_ldp_sgd.md §4, §5, §8): epsilon, delta (Laplace/Gaussian), repetitions =
    # replications batched in one simulation, seed = run seed
    "online-model": Key("linear-huber", str, "online-sgd: model (§8.1 linear regression with Huber loss and "
                        "joint scale, §8.4 logistic regression)", choices=("linear-huber", "logistic")),
    "online-dims": Key(5, int, "online-sgd: covariate dimension d of z (the gradient has d + 2 (huber) or "
                       "d + 1 (logistic) coordinates)", check=_at_least(1), allowed=">= 1"),
    "online-steps": Key(20000, int, "online-sgd: stream length n (one user per step, each used once)",
                        check=_at_least(2), allowed=">= 2"),
    "online-noise": Key("gdp", str, "online-sgd: noise law of §5 (gdp uses online-mu; laplace epsilon; gaussian "
                        "epsilon and delta) or none (C0 = 0: non-private SGD)",
                        choices=("gdp", "laplace", "gaussian", "none")),
    "online-mu": Key(1.0, float, "online-sgd: μ of μ-GDP noise", check=_positive, allowed="> 0 and finite"),
    "online-alpha": Key(0.5, float, "online-sgd: step-size decay α of η_i = η·i^(−α) (the bounds cover [0, 1); "
                        "other values run with a warning)", check=_non_negative, allowed=">= 0 and finite"),
    "online-eta": Key(0.2, float, "online-sgd: initial step size η", check=_positive, allowed="> 0 and finite"),
    "online-bounding": Key("mallows", str, "online-sgd: gradient bounding (§3: Mallows weights, or clipping, "
                           "which biases the estimate)", choices=("mallows", "clip")),
    "online-convention": Key("standard", str, "online-sgd: noise variance convention (§5, §12.1: squared "
                             "standard forms, or the paper's as printed)", choices=("standard", "as_printed")),
    # mf task (federated_mf.md §7 defaults): epsilon = target ε per party, delta, seed; LFL also reads the
    # secagg-* keys and dropout-rate. 0 means "the setting's default" where a key says so.
    "mf-setting": Key(_MF.setting, str, "mf: federated setting (§1.2): parties with the same users and disjoint items, "
                      "parties with disjoint users, or one device per user", choices=mf.SETTINGS),
    "mf-algorithm": Key(_MF.algorithm, str, "mf: algorithm (VFL/HFL/LFL-SGDMF or a §8.5 baseline; which ones a setting "
                        "allows: fedpriv.mf.config.ALGORITHMS)", choices=MF_ALGORITHMS),
    "mf-notion": Key("auto", str, "mf: privacy notion (§1.3; auto = per-rating for vfl, per-user for hfl/lfl, "
                     "§9 A21; per-rating-paper = the source's per-rating analysis where it does not hold)",
                     choices=("auto", *mf.NOTIONS)),
    "mf-private": Key("on", str, "mf: add DP noise calibrated to epsilon (off = no noise: the non-private "
                      "baselines and 'clipping without noise')", choices=("on", "off")),
    "mf-parties": Key(_MF.parties, int, "mf: parties s (vfl: item blocks, hfl: user blocks; lfl: ignored, s = n)",
                      check=_at_least(1), allowed=">= 1"),
    "mf-partition": Key(_MF.partition, str, "mf (vfl): item split, uniformly random or one party per genre (§8.2)",
                        choices=mf.PARTITIONS),
    "mf-data": Key("synthetic", str, "mf: ratings (the §8.1 low-rank generator, MovieLens-100k from the cache of "
                   "`fedpriv datasets fetch movielens-100k`, or a local ratings file at mf-path)",
                   choices=("synthetic", "movielens-100k", "file")),
    "mf-path": Key("", str, "mf: the ratings file (mf-data = 'file') or the MovieLens-100k cache directory "
                   "('' = the default cache)"),
    "mf-format": Key("auto", str, "mf: reader format of the ratings file: auto (from the file name), "
                     "movielens-tab, movielens-dat, movielens-csv, recbole or libimseti "
                     "(fedpriv.data.ratings.FORMATS, checked when the run starts)"),
    "mf-r-min": Key("", str, "mf: declared lowest rating ('' = the format's known range)", check=_empty_or_number,
                    allowed="'' or a finite number"),
    "mf-r-max": Key("", str, "mf: declared highest rating R, the embedding bound ('' = the format's known range)",
                    check=_empty_or_number, allowed="'' or a finite number"),
    "mf-test-fraction": Key(0.1, float, "mf: share of each user's ratings held out for the test MSE (§8.2)",
                            check=_open_unit, allowed="in (0, 1)"),
    "mf-rank": Key(_MF.rank, int, "mf: embedding dimension p", check=_at_least(1), allowed=">= 1"),
    "mf-rounds": Key(0, int, "mf: synchronisations T (lfl: iterations; 0 = 100 for vfl/hfl, 10 for lfl)",
                     check=_at_least(0), allowed=">= 0 (0 means the setting's default)"),
    "mf-local-steps": Key(_MF.local_steps, int, "mf: local steps T′ per synchronisation", check=_at_least(1), allowed=">= 1"),
    "mf-finetune-steps": Key(_MF.finetune_steps, int, "mf (vfl): κ noisy Stage-3 steps on V only", check=_at_least(0),
                             allowed=">= 0"),
    "mf-sampling-rate": Key(_MF.sampling_rate, float, "mf: user-level sampling rate η inside a party (§3.4)",
                            check=_unit_closed_right, allowed="in (0, 1]"),
    "mf-sampling": Key(_MF.sampling, str, "mf: Poisson user sampling, or fixed-size sampling without replacement "
                       "(approximate accounting)", choices=mf.SAMPLINGS),
    "mf-theta": Key(0, int, "mf: per-user trimming θ (per-user notion; 0 = §7 default: vfl 10/5/2 by s, hfl 10)",
                    check=_at_least(0), allowed=">= 0 (0 means the default)"),
    "mf-step-size": Key(_MF.step_size, float, "mf: per-rating step β, γ = β·L̄ at the start of the linear decay (§3.8)",
                        check=_positive, allowed="> 0 and finite"),
    "mf-pretrain-u": Key("off", str, "mf (hfl, synsgd only): pre-train U and freeze it (on), or update U jointly "
                         "with V (off, §9 A12)", choices=("off", "on")),
    "mf-lfl-step-size": Key(_MF.lfl_step_size, float, "mf (lfl): γ of the server update V ← V − (γ/|U¹|)·S (§6.3)",
                            check=_positive, allowed="> 0 and finite"),
    "mf-clip": Key(_MF.clip, str, "mf: sensitivity bound, embedding clipping (§3.1), per-rating gradient "
                   "clipping (§3.2 baseline) or none (non-private runs only)", choices=mf.CLIPS),
    "mf-clip-threshold": Key(_MF.clip_threshold, float, "mf: C of gradient clipping", check=_positive, allowed="> 0 and finite"),
    "mf-l2": Key(_MF.l2, float, "mf: L2 penalty λ (non-private baselines only, §9 A1)", check=_non_negative,
                 allowed=">= 0 and finite"),
    "mf-pretrain-steps": Key(_MF.pretrain_steps, int, "mf (hfl, lfl): Stage-1 non-private steps on U with V⁰ fixed",
                             check=_at_least(0), allowed=">= 0"),
    "mf-pretrain-rate": Key(_MF.pretrain_rate, float, "mf (hfl, lfl): step size ρ of the local non-private full-batch steps "
                            "(Stage-1 pre-training and Stage-3 fine-tuning)", check=_positive, allowed="> 0 and finite"),
    "mf-local-finetune-steps": Key(_MF.local_finetune_steps, int, "mf (hfl, lfl): Stage-3 non-private local fine-tuning steps",
                                   check=_at_least(0), allowed=">= 0"),
    "mf-noise-on": Key(_MF.noise_on, str, "mf: Gaussian noise on the summed gradient, then normalised (DP-SGD), or on "
                       "the normalised gradient (§3.5, §9 A3)", choices=mf.NOISE_ON),
    "mf-conversion": Key(_MF.conversion, str, "mf: RDP → (ε, δ) conversion (§3.7.2)", choices=mf.CONVERSIONS),
    "mf-composition": Key(_MF.vfl_composition, str, "mf (vfl, per-user): global ε from the summed RDP curves or the "
                          "source's √Σε_k² (§3.7.3)", choices=mf.VFL_COMPOSITIONS),
    "mf-accountant": Key(_MF.accountant, str, "mf: calibrate z with the numerical RDP accountant, or the source's "
                         "closed form with constant mf-source-constant (§3.7.1)", choices=mf.ACCOUNTANTS),
    "mf-source-constant": Key(_MF.source_constant, float, "mf: constant c of the source's closed form z² = c·η²·steps·ln(1/δ)/ε²",
                              check=_positive, allowed="> 0 and finite"),
    "mf-clip-predictions": Key("off", str, "mf: clip predictions to the rating range in the test MSE (§8.3)",
                               choices=("off", "on")),
    "mf-synthetic-users": Key(300, int, "mf: users of the synthetic generator", check=_at_least(2), allowed=">= 2"),
    "mf-synthetic-items": Key(200, int, "mf: items of the synthetic generator", check=_at_least(2), allowed=">= 2"),
    "mf-synthetic-rank": Key(5, int, "mf: rank of the synthetic ground truth", check=_at_least(1), allowed=">= 1"),
    "mf-synthetic-density": Key(0.1, float, "mf: share of observed (user, item) cells of the synthetic generator",
                                check=_unit_closed_right, allowed="in (0, 1]"),
    "mf-synthetic-noise": Key(0.5, float, "mf: std of the synthetic ratings' Gaussian noise", check=_non_negative,
                              allowed=">= 0 and finite"),
    # server
    "strategy": Key("fedavg", str, "aggregation",
                    choices=("fedavg", "fedmedian", "fedtrimmedavg", "krum", "multikrum")),
    "weights": Key("num_examples", str, "FedAvg client weights p_k", choices=("num_examples", "uniform")),
    "trim-beta": Key(0.2, float, "FedTrimmedAvg fraction cut at each end", check=lambda v: 0 <= v < 0.5,
                     allowed="in [0, 0.5)"),
    "num-malicious": Key(0, int, "Krum/MultiKrum assumed malicious clients", check=_at_least(0), allowed=">= 0"),
    "fraction-train": Key(1.0, float, "share of clients sampled per round", check=_unit_closed_right,
                          allowed="in (0, 1]"),
    "min-clients": Key(2, int, "fewest valid replies a round needs", check=_at_least(1), allowed=">= 1"),
    # deployment (`fedpriv deploy`): where the deployed ServerApp writes, where it resumes, how long it waits
    "run-dir": Key("", str, "deployment: directory the ServerApp writes the run directory into, on the "
                   "SuperLink's host ('' = none; the simulation engines write theirs themselves)"),
    "resume-round": Key(0, int, "deployment: continue after this finished round from run-dir's checkpoint "
                        "(0 = a fresh run)", check=_at_least(0), allowed=">= 0"),
    "run-dir-owner": Key(0, int, "deployment: pid of the `fedpriv deploy` that supervises run-dir (set by it; 0 = "
                         "none)", check=_at_least(0), allowed=">= 0"),
    "node-wait-timeout": Key(0.0, float, "deployment: seconds the ServerApp waits for min-clients nodes to be "
                             "connected before a round stops the run (0 = wait forever, as Flower does)",
                             check=_non_negative, allowed=">= 0 and finite (0 means no limit)"),
}

#: Keys that say where and how a deployment runs, not what it computes: left at their defaults in the
#: run directory's config.toml and its digest, so a deployment and a simulation of one config agree.
DEPLOY_KEYS: tuple[str, ...] = ("run-dir", "resume-round", "run-dir-owner", "node-wait-timeout")


def _field_name(key: str) -> str:
    return key.replace("-", "_")


def _coerce(key: str, value: Any) -> Any:
    """Check ``value`` against ``KEYS[key]`` and return it with the key's type."""
    spec = KEYS[key]
    if spec.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if spec.type is float and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{key} must be a number, got {value!r}") from None
    if spec.type is int and isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"{key} must be an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, spec.type):
        raise ValueError(f"{key} must be of type {spec.type.__name__}, got {value!r}")
    if spec.choices is not None and value not in spec.choices:
        raise ValueError(f"{key} must be one of {', '.join(map(repr, spec.choices))}, got {value!r}")
    if spec.check is not None and not spec.check(value):
        raise ValueError(f"{key} must be {spec.allowed}, got {value!r}")
    return value


def parse_override(text: str) -> tuple[str, Any]:
    """Split a ``key=value`` override; the value keeps its string form until it is checked."""
    if "=" not in text:
        raise ValueError(f"override must look like key=value, got {text!r}")
    key, value = (part.strip() for part in text.split("=", 1))
    _check_known([key])
    return key, value


def _check_known(keys: Iterable[str]) -> None:
    unknown = sorted(set(keys) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown config key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(KEYS)}")


@dataclass(frozen=True)
class RunConfig:
    """A validated run configuration; build it with :meth:`from_mapping`, :meth:`from_toml` or defaults."""

    values: Mapping[str, Any] = field(default_factory=lambda: {k: s.default for k, s in KEYS.items()})

    def __post_init__(self) -> None:
        _check_known(self.values)
        merged = {k: s.default for k, s in KEYS.items()}
        merged.update({k: _coerce(k, v) for k, v in self.values.items()})
        object.__setattr__(self, "values", merged)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RunConfig:
        """Validate a flat mapping of kebab-case keys (missing keys take their defaults)."""
        return cls(dict(values))

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        """Read a TOML file of flat keys (an optional ``[run]`` table is flattened)."""
        data = tomllib.loads(Path(path).read_text())
        flat = {**{k: v for k, v in data.items() if not isinstance(v, dict)}, **data.get("run", {})}
        return cls.from_mapping(flat)

    def replace(self, **updates: Any) -> RunConfig:
        """A copy with ``updates`` (kebab keys given with underscores, e.g. ``num_clients=10``)."""
        return self.with_values({k.replace("_", "-"): v for k, v in updates.items()})

    def with_values(self, updates: Mapping[str, Any]) -> RunConfig:
        """A copy with ``updates`` (kebab-case keys) validated and applied."""
        _check_known(updates)
        return RunConfig({**self.values, **updates})

    def with_overrides(self, overrides: Iterable[str]) -> RunConfig:
        """A copy with ``--set key=value`` overrides applied."""
        return self.with_values(dict(parse_override(o) for o in overrides))

    def __getitem__(self, key: str) -> Any:
        if key not in self.values:
            _check_known([key])
        return self.values[key]

    def __getattr__(self, name: str) -> Any:
        key = name.replace("_", "-")
        values = object.__getattribute__(self, "values")
        if key in values:
            return values[key]
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every key (what Flower's run config and the run directory receive)."""
        return dict(self.values)

    def without_deploy_keys(self) -> RunConfig:
        """A copy with the deployment keys (:data:`DEPLOY_KEYS`) at their defaults: the experiment itself."""
        return self.with_values({k: KEYS[k].default for k in DEPLOY_KEYS})

    def changed(self) -> dict[str, Any]:
        """Only the keys that differ from their defaults."""
        return {k: v for k, v in self.values.items() if v != KEYS[k].default}

    def digest(self) -> str:
        """Short SHA-256 of the resolved configuration (written to summary.json)."""
        return hashlib.sha256(json.dumps(self.values, sort_keys=True).encode()).hexdigest()[:16]


def describe_keys() -> list[dict[str, Any]]:
    """Every key with its default, type and allowed values (for ``fedpriv run --help`` and docs)."""
    return [
        {"key": k, "default": s.default, "type": s.type.__name__,
         "allowed": ", ".join(s.choices) if s.choices else s.allowed, "help": s.help}
        for k, s in KEYS.items()
    ]


