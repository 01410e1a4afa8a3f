"""Reproductions of federated matrix factorization, Zitao Li thesis ch. 4: clipping, the central baselines, HFL, LFL.

docs/federated_mf.md describes the algorithms (§2–§6), the baselines (§8.5, §11) and the experiment matrix
(§8.4). The source tunes the learning rate per method and ε on the training loss (§3.8; not private, §9 A31):
the entries that sweep ``mf-step-size`` keep, per method and ε, the step with the lowest training MSE and
judge the test MSE of that cell (:func:`tuned`). Small and tiny scales run on the synthetic low-rank ratings
of §8.1 (the source's ML10M, ML25M and LibimSeTi are user-supplied files); full runs on MovieLens-100k, which
needs ``fedpriv datasets fetch movielens-100k`` once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulations.reproduce.entry import Entry, Rows, Scale, Series, Verdict, grouped
from simulations.reproduce.figures import lines
from simulations.reproduce.judging import beats, every, lowest, metric_lines

__all__ = ["ENTRIES", "Keyed", "swept", "tuned"]

_SOURCE = "Zitao Li thesis ch. 4"
_STEP = "mf-step-size"
_COLUMNS = ("setting", "algorithm", "notion", "clip", "clip_threshold", "step_size", "l2", "epsilon", "parties",
            "dropout_rate", "test_mse", "test_mse_before_finetune", "train_mse", "epsilon_spent")
_EPS = (1.0, 2.0, 4.0, 8.0)
_FULL_EPS = (0.5, 1.0, 2.0, 4.0, 8.0)  # §9 A11: the source gives its ε only on figure axes
_FULL_STEPS = (0.001, 0.003, 0.01, 0.03, 0.1)  # §3.8's β grid


@dataclass(frozen=True)
class Keyed(Scale):
    """A sweep whose cells take extra keys by the value of one grid axis (ObjPertb's λ, synSGD's T·T′ syncs)."""

    axis: str = ""
    extra: Mapping[Any, Mapping[str, Any]] = field(default_factory=dict)

    def cells(self) -> list[dict[str, Any]]:
        """The cells of :meth:`Scale.cells`, each with the extra keys of its ``axis`` value."""
        return [{**cell, **self.extra.get(cell.get(self.axis), {})} for cell in super().cells()]


def _train(row: Mapping[str, Any]) -> float:
    """A row's training MSE, +inf when missing or not finite (a diverged step never wins the tuning)."""
    value = row.get("train_mse")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.inf


def _tune(rows: Rows) -> list[Mapping[str, Any]]:
    """Per cell without its ``mf-step-size`` value, the row of the lowest training MSE (§3.8, non-private, A31)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        key = " ".join(t for t in str(r["cell"]).split() if not t.startswith(f"{_STEP}="))
        groups.setdefault(key, []).append(r)
    return [min(rs, key=_train) for rs in groups.values()]


def _swept(rows: Rows) -> list[Mapping[str, Any]]:
    """Rows whose ε is None (a non-private baseline: no noise) given the ε of their cell, so they sit beside the rest."""
    def epsilon(r: Mapping[str, Any]) -> Any:
        tokens = [t.removeprefix("epsilon=") for t in str(r["cell"]).split() if t.startswith("epsilon=")]
        return float(tokens[0]) if r.get("epsilon") is None and tokens else r.get("epsilon")

    return [{**r, "epsilon": epsilon(r)} for r in rows]


def swept(judge: Callable[[Rows], Verdict]) -> Callable[[Rows], Verdict]:
    """``judge`` applied to :func:`_swept` rows."""
    return lambda rows: judge(_swept(rows))


def tuned(judge: Callable[[Rows], Verdict]) -> Callable[[Rows], Verdict]:
    """``judge`` applied to the step-size-tuned rows (:func:`_tune`); the evidence names the steps chosen."""

    def judge_tuned(rows: Rows) -> Verdict:
        kept = _tune(rows)
        verdict = judge(kept)
        picks = "; ".join(f"{' '.join(t for t in str(r['cell']).split() if not t.startswith(_STEP))}: "
                          f"β = {r['step_size']:g}" for r in kept)
        return Verdict(verdict.verdict, f"{verdict.evidence}. Steps chosen on the training MSE: {picks}")

    return judge_tuned


def _tuned_lines(metric: str, by: str, group: str, *, panels: Sequence[str] = ()) -> Callable[[Rows], Series]:
    """:func:`metric_lines` of the step-size-tuned rows."""
    series = metric_lines(metric, by, group, panels=panels)
    return lambda rows: series(_tune(rows))


def _before_after(by: str) -> Callable[[Rows], Series]:
    """Tuned test MSE after and before Stage-3 fine-tuning against ``by``, one pair of lines per algorithm."""

    def series(rows: Rows) -> Series:
        out: Series = {}
        for alg, rs in grouped(_tune(rows), by, "algorithm").items():
            out[f"{alg} after fine-tuning"] = ([float(r[by]) for r in rs], [float(r["test_mse"]) for r in rs])
            out[f"{alg} before"] = ([float(r[by]) for r in rs], [float(r["test_mse_before_finetune"]) for r in rs])
        return out

    return series


def _synthetic(users: int, items: int) -> dict[str, Any]:
    """The §8.1 low-rank generator: rank 5, 20 % of the cells rated; embeddings p = 5."""
    return {"mf-data": "synthetic", "mf-synthetic-users": users, "mf-synthetic-items": items,
            "mf-synthetic-rank": 5, "mf-synthetic-density": 0.2, "mf-rank": 5}


#: The source's data replaced by MovieLens-100k at full scale; p = 20, T = 100, T′ = 10, η = 0.01 (§7).
_ML100K = {"mf-data": "movielens-100k", "mf-rank": 20, "mf-rounds": 100, "mf-local-steps": 10,
           "mf-sampling-rate": 0.01}


def _base(data: Mapping[str, Any], rounds: int, local: int, rate: float, **keys: Any) -> dict[str, Any]:
    """The keys every MF cell of a scale shares (δ = 1e-5, §9 A11; seed 0)."""
    return {"task": "mf", **data, "mf-rounds": rounds, "mf-local-steps": local, "mf-sampling-rate": rate,
            "delta": 1e-5, "seed": 0, **keys}


def _small(**keys: Any) -> dict[str, Any]:
    """Small: 1,000 users × 400 items, T = 20, T′ = 4, η = 0.2."""
    return _base(_synthetic(1000, 400), 20, 4, 0.2, **keys)


def _tiny(**keys: Any) -> dict[str, Any]:
    """Tiny: 200 users × 100 items, T = 5, T′ = 4, η = 0.2."""
    return _base(_synthetic(200, 100), 5, 4, 0.2, **keys)


def _full(**keys: Any) -> dict[str, Any]:
    """Full: MovieLens-100k with §7's p, T, T′ and η."""
    return {"task": "mf", **_ML100K, "delta": 1e-5, "seed": 0, **keys}


_REDUCED_CENTRAL = ("Synthetic low-rank ratings (§8.1) instead of ML10M/ML25M/LibimSeTi: small 1,000 users × 400 "
                    "items, p = 5, T·T′ = 20·4 steps at η = 0.2 (source p = 20, 100·10 at η = 0.01), ε ∈ {1, 2, 4, "
                    "8}, β ∈ {0.001, 0.003, 0.01}; tiny 200 × 100, T = 5, ε = 4, β = 0.001; full "
                    "MovieLens-100k with p = 20, T = 100, T′ = 10, η = 0.01, ε ∈ {0.5, 1, 2, 4, 8}, §3.8's β grid. "
                    "One seed per cell.")

_OBJPERT_L2 = 20.0  # ObjPertb's λ: the lowest training MSE on MovieLens-100k among {1, 5, 20, 50} (README)
_KEYED_CENTRAL = {"dp-sgld": {}, "objpert": {"mf-l2": _OBJPERT_L2}}


def _central(base: dict[str, Any], steps: Sequence[float], eps: Sequence[float]) -> Keyed:
    """Fig. 4.4's sweep: VFL-SGDMF with s = 1 against DP-SGLD and ObjPertb (λ = 20), per rating."""
    return Keyed({**base, "mf-setting": "vfl", "mf-parties": 1, "mf-notion": "per-rating"},
                 {"mf-algorithm": ("sgdmf", "dp-sgld", "objpert"), "epsilon": tuple(eps), _STEP: tuple(steps)},
                 axis="mf-algorithm", extra=_KEYED_CENTRAL)


def _clipping(base: dict[str, Any], steps: Sequence[float], eps: Sequence[float]) -> Scale:
    """Fig. 4.3's sweep: one party (central-dp), embedding vs gradient clipping (C = 10), per rating and per user."""
    return Scale({**base, "mf-setting": "vfl", "mf-algorithm": "central-dp", "mf-clip-threshold": 10.0},
                 {"mf-notion": ("per-rating", "per-user"), "mf-clip": ("embedding", "gradient"),
                  "epsilon": tuple(eps), _STEP: tuple(steps)})


#: HFL's non-private local stages, shortened at small and tiny scale (§7 [P]: 1000 and 200 steps).
_HFL_SHORT = {"mf-pretrain-steps": 200, "mf-local-finetune-steps": 50}


def _hfl_small(**keys: Any) -> dict[str, Any]:
    """HFL small: 500 users × 200 items, T = 10, T′ = 4, η = 0.2, shortened local stages."""
    return _base(_synthetic(500, 200), 10, 4, 0.2, **_HFL_SHORT, **keys)


def _hfl_tiny(**keys: Any) -> dict[str, Any]:
    """HFL tiny: 200 users × 100 items, T = 3, T′ = 4, η = 0.2, shortened local stages."""
    return _base(_synthetic(200, 100), 3, 4, 0.2, **{**_HFL_SHORT, "mf-pretrain-steps": 50,
                                                        "mf-local-finetune-steps": 20}, **keys)


def _pretrain(base: dict[str, Any], parties: Sequence[int], steps: Sequence[float]) -> Scale:
    """Fig. 4.7's sweep: HFL-SGDMF (pre-trained U) vs train-both over s, per user, ε = 2."""
    return Scale({**base, "mf-setting": "hfl", "epsilon": 2.0},
                 {"mf-parties": tuple(parties), "mf-algorithm": ("sgdmf", "train-both"), _STEP: tuple(steps)})


def _synsgd(base: dict[str, Any], parties: Sequence[int], eps: Sequence[float], steps: Sequence[float]) -> Keyed:
    """Fig. 4.8's sweep: HFL-SGDMF vs HFL-synSGD (T·T′ synchronisations of one step: the same data accesses)."""
    syncs = {"mf-rounds": base["mf-rounds"] * base["mf-local-steps"], "mf-local-steps": 1}
    return Keyed({**base, "mf-setting": "hfl"},
                 {"mf-parties": tuple(parties), "mf-algorithm": ("sgdmf", "synsgd"), "epsilon": tuple(eps),
                  _STEP: tuple(steps)}, axis="mf-algorithm", extra={"synsgd": syncs})


def _lfl(base: dict[str, Any], dropouts: Sequence[float], eps: Sequence[float]) -> Scale:
    """Fig. 4.9's sweep: LFL-SGDMF vs Stage-1-only vs LDP-level noise, ω = 0.3, drop-out rates r < ω."""
    return Scale({**base, "mf-setting": "lfl", "secagg-omega": 0.3},
                 {"mf-algorithm": ("sgdmf", "stage1-only", "ldp-noise"), "dropout-rate": tuple(dropouts),
                  "epsilon": tuple(eps)})


def _plot(series: Callable[[Rows], Series], xlabel: str) -> Callable[[Rows, Path, str], Path]:
    """Lines of the test MSE."""
    return lines(series, xlabel=xlabel, ylabel="test MSE")


_TUNING_NOTE = ("β is chosen per method and ε by the lowest training MSE, as the source tunes its learning rate "
                "(docs/federated_mf.md §3.8); that tuning is not private (§9 A31). ")

ENTRIES = [
    Entry(
        name="mf-clipping",
        source=f"{_SOURCE}, Fig. 4.3 (embedding vs gradient clipping, s = 1), synthetic ratings",
        chapter=_SOURCE,
        claim="With one party, bounding the sensitivity by embedding clipping (projecting every embedding onto "
              "{x ≥ 0, ‖x‖² ≤ R}) gives a lower test MSE than per-rating gradient clipping with threshold C = 10 "
              "at every ε, per rating (Fig. 4.3a) and per user (Fig. 4.3b).",
        reduced=_REDUCED_CENTRAL + " Gradient clipping at C = 10 only (the source also ran C = 50; 10 was its best).",
        scales={"tiny": _clipping(_tiny(), (0.001,), (4.0,)),
                "small": _clipping(_small(), (0.001, 0.003, 0.01), _EPS),
                "full": _clipping(_full(), _FULL_STEPS, _FULL_EPS)},
        judge=tuned(lowest("test_mse", "clip", "embedding", panels=("notion",))),
        plot=_plot(_tuned_lines("test_mse", "epsilon", "clip", panels=("notion",)), "ε"),
        notes=_TUNING_NOTE + "The source's runs without noise (both clippings at σ = 0) are not part of this entry. "
              "Per user, every user is trimmed to θ = 10 ratings (§3.3). Gradient clipping has no embedding "
              "projection (§3.2), so a large step can diverge; the tuning then picks a smaller one.",
        columns=_COLUMNS),
    Entry(
        name="mf-central-baselines",
        source=f"{_SOURCE}, Fig. 4.4 (VFL-SGDMF s = 1 vs DP-SGLD vs ObjPertb), synthetic ratings",
        chapter=_SOURCE,
        claim="With one party, VFL-SGDMF reaches a lower test MSE than the published private MF baselines DP-SGLD "
              "(Liu, Wang, Smola 2015) and ObjPertb (Hua, Xia, Zhong 2015) at every ε, per rating.",
        reduced=_REDUCED_CENTRAL + " Per rating only (ObjPertb's guarantee protects one rating's value); the "
              "source's per-user panel is not run.",
        scales={"tiny": _central(_tiny(), (0.001,), (4.0,)),
                "small": _central(_small(), (0.001, 0.003, 0.01), _EPS),
                "full": _central(_full(), _FULL_STEPS, _FULL_EPS)},
        judge=tuned(lowest("test_mse", "algorithm", "sgdmf")),
        plot=_plot(_tuned_lines("test_mse", "epsilon", "algorithm"), "ε"),
        notes=_TUNING_NOTE + "ObjPertb takes no step size (alternating exact solves, mf-rounds of them), so its cells "
              "repeat over β with the same result; its λ = 20 (mf-l2) is the one with the lowest training MSE on "
              "MovieLens-100k among {1, 5, 20, 50} (README). ObjPertb's ε is pure ε-DP for replacing one rating's "
              "value, proved for one round only (docs/federated_mf.md §11.2): not the same promise as the (ε, δ) of "
              "the other two. DP-SGLD runs with a flat prior (λ = 0). GD-DR, the LFL baseline of Fig. 4.9, is not "
              "implemented (docs/federated_mf.md §11.3).",
        columns=_COLUMNS),
    Entry(
        name="mf-hfl-pretrain",
        source=f"{_SOURCE}, Fig. 4.7 (HFL: pre-trained U vs train-both, s = 2 to 40), synthetic ratings",
        chapter=_SOURCE,
        claim="In HFL, pre-training U and then learning V privately (HFL-SGDMF) gives a lower test MSE than "
              "updating U and V together (train-both, where V's noise leaks into U), both before and after the "
              "local fine-tuning, for every number of parties s.",
        reduced="Synthetic low-rank ratings: small 500 users × 200 items, p = 5, T = 10, T′ = 4, η = 0.2, 200 "
                "pre-training and 50 fine-tuning steps (§7: 1000 and 200), s ∈ {2, 5, 10}, β ∈ {0.003, 0.03}; "
                "tiny 200 × 100, T = 3, s = 2, β = 0.003; full MovieLens-100k, §7's parameters, s ∈ {2, 5, 10, 20, 40}. "
                "ε = 2 per party (the source does not state the figure's ε), per user (θ = 10).",
        scales={"tiny": _pretrain(_hfl_tiny(), (2,), (0.003,)),
                "small": _pretrain(_hfl_small(), (2, 5, 10), (0.003, 0.03)),
                "full": _pretrain(_full(), (2, 5, 10, 20, 40), _FULL_STEPS)},
        judge=tuned(every(beats("test_mse_before_finetune", "algorithm", "sgdmf", "train-both", by="parties"),
                         beats("test_mse", "algorithm", "sgdmf", "train-both", by="parties"))),
        plot=_plot(_before_after("parties"), "parties s"),
        notes=_TUNING_NOTE + "The fine-tuning (Stage 3) is local and non-private and its result unpublished (§5.2).",
        columns=_COLUMNS),
    Entry(
        name="mf-hfl-synsgd",
        source=f"{_SOURCE}, Fig. 4.8 (HFL-SGDMF vs HFL-synSGD, s ∈ {{10, 40}}), synthetic ratings",
        chapter=_SOURCE,
        claim="In HFL, HFL-SGDMF (T synchronisations of T′ local steps) gives a lower test MSE than HFL-synSGD "
              "(T·T′ synchronisations of one noisy gradient step: the same data accesses) at every ε, before and "
              "after the local fine-tuning, for s = 10 and s = 40.",
        reduced="Synthetic low-rank ratings: small 500 users × 200 items, p = 5, T = 10, T′ = 4 (synSGD 40 × 1), "
                "η = 0.2, 200 pre-training and 50 fine-tuning steps, ε = 2, β ∈ {0.003, 0.03}; tiny 200 × "
                "100, T = 3, s = 10 only, ε = 2, β = 0.003; full MovieLens-100k, §7's parameters (synSGD 1000 × 1), ε ∈ {0.5, "
                "1, 2, 4, 8}. Per user (θ = 10) only; the source also shows per rating.",
        scales={"tiny": _synsgd(_hfl_tiny(), (10,), (2.0,), (0.003,)),
                "small": _synsgd(_hfl_small(), (10, 40), (2.0,), (0.003, 0.03)),
                "full": _synsgd(_full(), (10, 40), _FULL_EPS, _FULL_STEPS)},
        judge=tuned(every(beats("test_mse_before_finetune", "algorithm", "sgdmf", "synsgd", panels=("parties",)),
                         beats("test_mse", "algorithm", "sgdmf", "synsgd", panels=("parties",)))),
        plot=_plot(_tuned_lines("test_mse_before_finetune", "epsilon", "algorithm", panels=("parties",)),
                   "ε (test MSE before fine-tuning)"),
        notes=_TUNING_NOTE + "synSGD does not pre-train U (mf-pretrain-u = off, §9 A12) and fine-tunes as many "
              "steps as HFL-SGDMF. The plot shows the MSE before fine-tuning; the after-fine-tuning MSE is in the "
              "table. The source's reference line, local non-private SGD, is not run.",
        columns=_COLUMNS),
    Entry(
        name="mf-lfl",
        source=f"{_SOURCE}, Fig. 4.9 (LFL-SGDMF vs Stage-1-only vs LDP-level noise, drop-outs), synthetic ratings",
        chapter=_SOURCE,
        claim="In LFL, LFL-SGDMF (distributed Gaussian noise through secure aggregation) gives a lower test MSE "
              "than keeping the pre-trained embeddings (Stage 1 only) and than every device adding the full noise "
              "itself (LDP level), at every ε, with no drop-outs and with a drop-out rate r = 0.2 below the "
              "tolerated ω = 0.3.",
        reduced="Synthetic low-rank ratings: small 300 users (devices) × 100 items, p = 5, T = 10 (the source's), "
                "ε ∈ {1, 4}, r ∈ {0, 0.2}; tiny 100 × 50, T = 3, ε = 2, r = 0; full MovieLens-100k, T = 10, "
                "ε ∈ {0.5, 1, 2, 4, 8}, r ∈ {0, 0.1, 0.2}. ω = 0.3 only (the source also ran ω = 0.6). "
                "The secure aggregation is the oracle (exact sums, the same drop-out semantics).",
        scales={"tiny": _lfl(_base(_synthetic(100, 50), 3, 1, 1.0), (0.0,), (2.0,)),
                "small": _lfl(_base(_synthetic(300, 100), 10, 1, 1.0), (0.0, 0.2), (1.0, 4.0)),
                "full": _lfl(_full(**{"mf-rounds": 10}), (0.0, 0.1, 0.2), _FULL_EPS)},
        judge=swept(lowest("test_mse", "algorithm", "sgdmf", panels=("dropout_rate",))),
        plot=_plot(lambda rows: metric_lines("test_mse", "epsilon", "algorithm", panels=("dropout_rate",))(
            _swept(rows)), "ε"),
        notes="GD-DR (Shin et al., TKDE 2018), the source's LDP baseline of Fig. 4.9, is not implemented: what is "
              "published of it does not pin down its projection, clipping and stabilising factor "
              "(docs/federated_mf.md §11.3). The round-2 noise is fedpriv's corrected scheme (§6.4); the source's "
              "leaks. LFL takes its own server step (mf-lfl-step-size), not tuned here. The judged MSE is after each "
              "device's local non-private fine-tuning (Stage 3); the table also holds the MSE before it. Stage 1 only "
              "adds no noise, so its cells repeat over ε with one result. One seed per cell.",
        columns=_COLUMNS),
]
