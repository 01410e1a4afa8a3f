"""The configuration keys of federated matrix factorization (the ``mf-*`` keys); defaults are :class:`MfConfig`'s."""

from __future__ import annotations

from fedpriv.config_aliases import common_keys
from fedpriv.keys import (
    ConfigView,
    Key,
    at_least,
    compose,
    empty_or_number,
    in_table,
    non_negative,
    open_unit,
    positive,
    unit_closed_right,
)
from fedpriv.mf import config as mf
from fedpriv.secagg.config import SECAGG

__all__ = ["MF", "MF_ALGORITHMS", "MfRunConfig"]

#: Algorithms of task = "mf": every algorithm of some setting (which ones a setting allows: mf.ALGORITHMS).
MF_ALGORITHMS: tuple[str, ...] = tuple(dict.fromkeys(a for algs in mf.ALGORITHMS.values() for a in algs))
#: The mf-* keys' defaults are MfConfig's (§7), so the two never disagree.
_MF = mf.MfConfig()

MF: dict[str, Key] = {
    **in_table("privacy", {
        "party-epsilon": Key(1.0, float, "mf: target ε per party of the whole run (mf-private = 'off' for no noise)",
                             check=positive, allowed="> 0 and finite"),
        "party-delta": Key(1e-5, float, "mf: δ per party of the whole run", check=open_unit, allowed="in (0, 1)"),
    }),
    **in_table("mf", {
        "mf-setting": Key(_MF.setting, str, "mf: federated setting (§1.2): parties with the same users and disjoint items, "
                          "parties with disjoint users, or one device per user", choices=mf.SETTINGS),
        "mf-algorithm": Key(_MF.algorithm, str, "mf: algorithm (VFL/HFL/LFL-SGDMF or a §8.5 baseline; which ones a setting "
                            "allows: fedpriv.mf.config.ALGORITHMS)", choices=MF_ALGORITHMS),
        "mf-notion": Key("auto", str, "mf: privacy notion (§1.3; auto = per-rating for vfl, per-user for hfl/lfl, "
                         "§9 A21; per-rating-paper = the source's per-rating analysis where it does not hold)",
                         choices=("auto", *mf.NOTIONS)),
        "mf-private": Key("on", str, "mf: add DP noise calibrated to party-epsilon (off = no noise: the non-private "
                          "baselines and 'clipping without noise')", choices=("on", "off")),
        "mf-parties": Key(_MF.parties, int, "mf: parties s (vfl: item blocks, hfl: user blocks; lfl: ignored, s = n)",
                          check=at_least(1), allowed=">= 1"),
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
        "mf-r-min": Key("", str, "mf: declared lowest rating ('' = the format's known range)", check=empty_or_number,
                        allowed="'' or a finite number"),
        "mf-r-max": Key("", str, "mf: declared highest rating R, the embedding bound ('' = the format's known range)",
                        check=empty_or_number, allowed="'' or a finite number"),
        "mf-test-fraction": Key(0.1, float, "mf: share of each user's ratings held out for the test MSE (§8.2)",
                                check=open_unit, allowed="in (0, 1)"),
        "mf-rank": Key(_MF.rank, int, "mf: embedding dimension p", check=at_least(1), allowed=">= 1"),
        "mf-rounds": Key(0, int, "mf: synchronisations T (lfl: iterations; 0 = 100 for vfl/hfl, 10 for lfl)",
                         check=at_least(0), allowed=">= 0 (0 means the setting's default)"),
        "mf-local-steps": Key(_MF.local_steps, int, "mf: local steps T′ per synchronisation", check=at_least(1), allowed=">= 1"),
        "mf-finetune-steps": Key(_MF.finetune_steps, int, "mf (vfl): κ noisy Stage-3 steps on V only", check=at_least(0),
                                 allowed=">= 0"),
        "mf-sampling-rate": Key(_MF.sampling_rate, float, "mf: user-level sampling rate η inside a party (§3.4)",
                                check=unit_closed_right, allowed="in (0, 1]"),
        "mf-sampling": Key(_MF.sampling, str, "mf: Poisson user sampling, or fixed-size sampling without replacement "
                           "(approximate accounting)", choices=mf.SAMPLINGS),
        "mf-theta": Key(0, int, "mf: per-user trimming θ (per-user notion; 0 = §7 default: vfl 10/5/2 by s, hfl 10)",
                        check=at_least(0), allowed=">= 0 (0 means the default)"),
        "mf-step-size": Key(_MF.step_size, float, "mf: per-rating step β, γ = β·L̄ at the start of the linear decay (§3.8)",
                            check=positive, allowed="> 0 and finite"),
        "mf-pretrain-u": Key("off", str, "mf (hfl, synsgd only): pre-train U and freeze it (on), or update U jointly "
                             "with V (off, §9 A12)", choices=("off", "on")),
        "mf-lfl-step-size": Key(_MF.lfl_step_size, float, "mf (lfl): γ of the server update V ← V − (γ/|U¹|)·S (§6.3)",
                                check=positive, allowed="> 0 and finite"),
        "mf-clip": Key(_MF.clip, str, "mf: sensitivity bound, embedding clipping (§3.1), per-rating gradient "
                       "clipping (§3.2 baseline) or none (non-private runs only)", choices=mf.CLIPS),
        "mf-clip-threshold": Key(_MF.clip_threshold, float, "mf: C of gradient clipping", check=positive, allowed="> 0 and finite"),
        "mf-l2": Key(_MF.l2, float, "mf: L2 penalty λ (non-private baselines, §9 A1; DP-SGLD's prior and "
                     "ObjPertb's λ, > 0 there, §11)", check=non_negative, allowed=">= 0 and finite"),
        "mf-pretrain-steps": Key(_MF.pretrain_steps, int, "mf (hfl, lfl): Stage-1 non-private steps on U with V⁰ fixed",
                                 check=at_least(0), allowed=">= 0"),
        "mf-pretrain-rate": Key(_MF.pretrain_rate, float, "mf (hfl, lfl): step size ρ of the local non-private full-batch steps "
                                "(Stage-1 pre-training and Stage-3 fine-tuning)", check=positive, allowed="> 0 and finite"),
        "mf-local-finetune-steps": Key(_MF.local_finetune_steps, int, "mf (hfl, lfl): Stage-3 non-private local fine-tuning steps",
                                       check=at_least(0), allowed=">= 0"),
        "mf-noise-on": Key(_MF.noise_on, str, "mf: Gaussian noise on the summed gradient, then normalised (DP-SGD), or on "
                           "the normalised gradient (§3.5, §9 A3)", choices=mf.NOISE_ON),
        "mf-conversion": Key(_MF.conversion, str, "mf: RDP → (ε, δ) conversion (§3.7.2)", choices=mf.CONVERSIONS),
        "mf-composition": Key(_MF.vfl_composition, str, "mf (vfl, per-user): global ε from the summed RDP curves or the "
                              "source's √Σε_k² (§3.7.3)", choices=mf.VFL_COMPOSITIONS),
        "mf-accountant": Key(_MF.accountant, str, "mf: calibrate z with the numerical RDP accountant, or the source's "
                             "closed form with constant mf-source-constant (§3.7.1)", choices=mf.ACCOUNTANTS),
        "mf-source-constant": Key(_MF.source_constant, float, "mf: constant c of the source's closed form z² = c·η²·steps·ln(1/δ)/ε²",
                                  check=positive, allowed="> 0 and finite"),
        "mf-clip-predictions": Key("off", str, "mf: clip predictions to the rating range in the test MSE (§8.3)",
                                   choices=("off", "on")),
        "mf-evaluate": Key("on", str, "mf (parties, devices): the evaluation channel (§10.2): each round every party or "
                           "device sends its squared test errors (at the end also its training errors), without noise; "
                           "off = no such message (the records carry no test MSE), what a deployed node needs unless "
                           "its policy allows no-noise", choices=("on", "off")),
        "mf-synthetic-users": Key(300, int, "mf: users of the synthetic generator", check=at_least(2), allowed=">= 2"),
        "mf-synthetic-items": Key(200, int, "mf: items of the synthetic generator", check=at_least(2), allowed=">= 2"),
        "mf-synthetic-rank": Key(5, int, "mf: rank of the synthetic ground truth", check=at_least(1), allowed=">= 1"),
        "mf-synthetic-density": Key(0.1, float, "mf: share of observed (user, item) cells of the synthetic generator",
                                    check=unit_closed_right, allowed="in (0, 1]"),
        "mf-synthetic-noise": Key(0.5, float, "mf: std of the synthetic ratings' Gaussian noise", check=non_negative,
                                  allowed=">= 0 and finite"),
    }),
}


class MfRunConfig(ConfigView):
    """The typed configuration of a matrix-factorization run: the ``mf-*`` keys, ε, δ, seed and (LFL) secure aggregation."""

    KEYS = compose(common_keys("mf"), MF, SECAGG)
