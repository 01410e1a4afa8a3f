"""The configuration keys of federated LDP-SGD and of online LDP-SGD, and their typed views.

``LDP_SGD`` holds the model, local training, privatization, server-side analysis and aggregation
keys; :class:`LdpSgdConfig` is the typed view the client update, the batched engine and the
server protocol take (with the :data:`fedpriv.keys.COMMON` and dataset keys). ``ONLINE`` holds the
keys of online LDP-SGD over a stream of users.
"""

from __future__ import annotations

import math

from fedpriv.attacks.keys import ATTACK
from fedpriv.data.config import DATA, DataConfig
from fedpriv.federated.rules.registry import RULES, rule_keys
from fedpriv.keys import COMMON, Key, at_least, compose, in_table, non_negative, open_unit, positive, unit_closed_right
from fedpriv.mechanisms.registry import MECHANISMS
from fedpriv.model_names import MODEL_NAMES, is_factory_spec
from fedpriv.perturbation.registry import PERTURBATIONS

__all__ = ["LDP_SGD", "MODEL_NAMES", "ONLINE", "PER_SAMPLE_PERTURBATIONS", "LdpSgdConfig", "is_factory_spec"]

#: Perturbations of per-sample clipped gradients (central, sample-level DP; docs/geodp.md §2, §4): they share
#: the per-sample gradient, clipping, batching and accounting code and differ only in how the clipped mean is noised.
PER_SAMPLE_PERTURBATIONS: tuple[str, ...] = ("geodp", "dpsgd")


def _model_name(value: str) -> bool:
    """A built-in model, or a factory (imported and checked when the model is built)."""
    return value in MODEL_NAMES or is_factory_spec(value)


LDP_SGD: dict[str, Key] = {**in_table("training", {
    "model": Key("lr", str, "model: a built-in, or your own 'package.module:factory' (a callable returning a "
                 "torch.nn.Module, called with (input_shape, num_classes) when it takes arguments)",
                 check=_model_name, allowed="'lr', 'mlp', 'cnn', 'cnn-thesis' or 'package.module:factory'"),
    "local-steps": Key(5, int, "local SGD iterations per round E", check=at_least(1), allowed=">= 1"),
    "batch-size": Key(32, int, "local minibatch size B", check=at_least(1), allowed=">= 1"),
    "lr": Key(0.1, float, "learning rate η0", check=positive, allowed="> 0"),
    "lr-schedule": Key("constant", str, "η^t = η0, or η0/(1+t) with t the global local-iteration counter",
                       choices=("constant", "inverse")),
    "clip-norm": Key(1.0, float, "L2 clipping bound C of the local (minibatch or per-sample) gradient",
                     check=positive, allowed="> 0"),
    "device": Key("cpu", str, "where the batched engine trains and draws its noise: 'cpu', 'cuda', or 'auto' (cuda "
                  "when available); uploads return to the CPU for aggregation", choices=("cpu", "cuda", "auto")),
}), **in_table("ldp", {
    "perturbation": Key("coordinatewise", str, "how the noisy step is privatized ('none' adds no noise: ask for it)",
                        choices=PERTURBATIONS.names),
    "mechanism": Key("piecewise", str, "base LDP mechanism", choices=MECHANISMS.names),
    "budget-mode": Key("split", str, "coordinatewise budget: ε per update, or ε per coordinate",
                       choices=("split", "per_coordinate")),
    "noise-schedule": Key("every_step", str, "noise on every step with ε/E (the whole upload is an LDP release), or "
                          "on the last local step only (the source's schedule: E - 1 clean steps uncovered)",
                          choices=("last_step", "every_step")),
    "beta": Key(1.0, float, "LDPVec/GeoDP bounding factor β", check=unit_closed_right, allowed="in (0, 1]"),
    "region": Key("default", str, "angle region (default: centered for LDPVec, none for GeoDP)",
                  choices=("default", "none", "thesis", "centered")),
    "magnitude": Key("normalize", str, "LDPVec magnitude", choices=("normalize", "keep", "perturb")),
    "ldpvec-control": Key("none", str, "LDPVec control in place of the release (docs/ldpvec.md §8): skip the noisy "
                          "step, a random direction or a random coordinate order; a control is not private",
                          choices=("none", "skip", "random-direction", "permute")),
    "sigma": Key(1.0, float, "GeoDP/DP-SGD noise multiplier σ", check=lambda v: math.isfinite(v) and v >= 0,
                 allowed=">= 0"),
    "clipping": Key("flat", str, "per-sample clipping of geodp/dpsgd: flat g·min(1, C/‖g‖), or AUTO-S "
                    "C·g/(‖g‖ + auto-s-gamma) (Bu et al. 2023); the sensitivity is C either way",
                    choices=("flat", "auto-s")),
    "auto-s-gamma": Key(0.01, float, "AUTO-S stability constant γ (clipping = 'auto-s' only)", check=positive,
                        allowed="> 0"),
    "angle-noise-scale": Key("source", str, "GeoDP angle noise divided by B or not", choices=("source", "unscaled")),
    "sample-dims": Key(0, int, "coordinatewise/mean: each client reports m of the d coordinates (0: all d)",
                       check=at_least(0), allowed=">= 0 (0 means all d)"),
}), **in_table("analyzer", {
    "analyzer": Key("off", str, "predict each round's noise-induced deviation (FedLDPAnalyzer)",
                    choices=("off", "on")),
    "analyzer-oracle": Key("off", str, "simulation only: clients also send their clean update so the realized "
                           "deviation is logged next to the prediction (never in deployment)",
                           choices=("off", "on")),
    "analyzer-moments": Key("bound", str, "data moments of bounded mechanisms: worst case, server-held proxy "
                            "gradients, or (piecewise, E = 1) the reports", choices=("bound", "proxy", "reports")),
    "analyzer-alpha": Key(0.95, float, "quantile level of the predicted squared deviation", check=open_unit,
                          allowed="in (0, 1)"),
}), **in_table("ldp", {
    "recalibration": Key("none", str, "HDR4ME re-calibration of the aggregated update (coordinatewise, E=1)",
                         choices=("none", "l1", "l2", "hdr4me*")),
    "recalibration-alpha": Key(0.95, float, "confidence level α of the HDR4ME error bound", check=open_unit,
                               allowed="in (0, 1)"),
    "l2-proxy": Key("domain", str, "HDR4ME L2 weight proxy for |θ̄_j|", choices=("domain", "estimate", "as_printed")),
}), **in_table("aggregation", {
    "strategy": Key("fedavg", str, "aggregation (docs/robust_aggregation.md)", choices=RULES.names),
    "weights": Key("num_examples", str, "FedAvg client weights p_k", choices=("num_examples", "uniform")),
    "num-malicious": Key(0, int, "assumed malicious clients f per round: Krum/MultiKrum/Bulyan's f, and every robust "
                         "rule refuses a round whose size it cannot defend against f", check=at_least(0), allowed=">= 0"),
    **rule_keys(),  # each rule's own parameters (trim-beta, server-clip-norm, cc-tau, cc-iters), declared with it
    "fraction-train": Key(1.0, float, "share of clients sampled per round", check=unit_closed_right,
                          allowed="in (0, 1]"),
    "min-clients": Key(2, int, "fewest valid replies a round needs", check=at_least(1), allowed=">= 1"),
    "evaluate-every": Key(1, int, "the server tests the global model every this many rounds and at the last "
                          "round; the rounds between carry no test-* (nor backdoor-asr) metrics", check=at_least(1),
                          allowed=">= 1"),
})}

ONLINE: dict[str, Key] = in_table("online_sgd", {
    "online-model": Key("linear-huber", str, "online-sgd: model (§8.1 linear regression with Huber loss and "
                        "joint scale, §8.4 logistic regression, §8.7 K-class multinomial logistic regression on "
                        "generated data)", choices=("linear-huber", "logistic", "multinomial")),
    "online-classes": Key(3, int, "online-sgd: classes K of the multinomial model (the gradient has (K - 1)(d + 1) "
                          "coordinates; used by online-model = multinomial only)", check=at_least(2), allowed=">= 2"),
    "online-dims": Key(5, int, "online-sgd: covariate dimension d of z (the gradient has d + 2 (huber) or "
                       "d + 1 (logistic) coordinates)", check=at_least(1), allowed=">= 1"),
    "online-steps": Key(20000, int, "online-sgd: stream length n (one user per step, each used once)",
                        check=at_least(2), allowed=">= 2"),
    "online-noise": Key("gdp", str, "online-sgd: noise law of §5 (gdp uses online-mu; laplace epsilon; gaussian "
                        "epsilon and delta) or none (C0 = 0: non-private SGD)",
                        choices=("gdp", "laplace", "gaussian", "none")),
    "online-mu": Key(1.0, float, "online-sgd: μ of μ-GDP noise", check=positive, allowed="> 0 and finite"),
    "online-budget-law": Key("constant", str, "online-sgd: per-user budgets (§4.4, §8.5): constant (online-mu or "
                             "epsilon for every user), uniform (each user's μ, or ε for laplace/gaussian, drawn from "
                             "Unif(online-budget-low, online-budget-high)) or groups (online-budget-groups); with "
                             "uniform or groups the law replaces online-mu / epsilon",
                             choices=("constant", "uniform", "groups")),
    "online-budget-low": Key(1.0, float, "online-sgd: lower end of the uniform per-user budget law (used by "
                             "online-budget-law = uniform only)", check=positive, allowed="> 0 and finite"),
    "online-budget-high": Key(2.0, float, "online-sgd: upper end of the uniform per-user budget law, the run's "
                              "guarantee (used by online-budget-law = uniform only)", check=positive,
                              allowed="> 0 and finite"),
    "online-budget-groups": Key("", str, "online-sgd: groups of users with one budget each, 'budget:fraction,...' "
                                "with fractions summing to 1, e.g. '1:0.5,2:0.5' (used by online-budget-law = groups "
                                "only)", allowed="'' or 'budget:fraction,...'"),
    "online-alpha": Key(0.5, float, "online-sgd: step-size decay α of η_i = η·i^(−α) (the bounds cover [0, 1); "
                        "other values run with a warning)", check=non_negative, allowed=">= 0 and finite"),
    "online-eta": Key(0.2, float, "online-sgd: initial step size η", check=positive, allowed="> 0 and finite"),
    "online-bounding": Key("mallows", str, "online-sgd: gradient bounding (§3: Mallows weights, or clipping, "
                           "which biases the estimate)", choices=("mallows", "clip")),
    "online-convention": Key("standard", str, "online-sgd: noise variance convention (§5, §12.1: squared "
                             "standard forms, or the paper's as printed)", choices=("standard", "as_printed")),
})


class LdpSgdConfig(DataConfig):
    """The typed configuration of a federated LDP-SGD run."""

    KEYS = compose(COMMON, DATA, LDP_SGD, ATTACK)
