"""What a run of federated MF asks of a deployed node, and what each of its answers releases.

docs/federated_mf.md ("On a deployed node", §1.2, §3.7, §6, §10.2). :func:`node_terms` reads the run
config alone (no data, no file): the simulation-only features the run needs — ``no-noise`` for a
run that sends something derived from a node's ratings without a DP guarantee (``mf-private =
"off"`` or a non-private algorithm; HFL's per-rating analysis, which does not hold, §9 A21; the
evaluation channel's squared errors, ``mf-evaluate = "on"``, §10.2), ``secagg-oracle`` for LFL with
``secagg = "oracle"`` (each device's report goes to the server in the clear) — the clip norm of the
gradient-clipping baseline, the ratings file, the sizes, and the rounds (the releasing steps).
:func:`request_release` is what one request spends.

What each stage sends to the server:

* VFL/HFL ``setup`` (Stage 1): the party's aggregation weight m_k or n_k — public metadata (§9 A5);
  HFL's non-private pre-training of U stays in the party.
* ``train`` round t (Stage 2): the party's copy U^(k) (VFL) or V^(k) (HFL) after T′ noisy steps, and
  the public (q, z, steps) triple: the DP release.
* ``finetune`` (Stage 3): the (q, z, steps) triple and the party's public facts (counts, θ, Δ, z, σ,
  §9 A5); VFL's κ noisy V_{F_k} steps and HFL's non-private fine-tuning stay in the party.
* LFL ``pretrain`` and ``finetune``: the device's client id only (u_i never leaves it); ``report``
  round 1 of iteration t: ``G_i + ξ_i`` (through secure aggregation), round 2: ``−ξ_i + ξ'_i``.
* ``evaluate`` (every party or device, every round): Σ squared errors and the count on its test
  (at the end also training) ratings, without noise.

:class:`MfDeployment` is the workload's deployment: one node per party or device with the default
node config, these node terms and releases.
"""

from __future__ import annotations

import math
from typing import Any

from fedpriv.accounting.distributed import rdp_accountant_epsilon
from fedpriv.accounting.parties import PartyAccount, party_epsilon
from fedpriv.mf.config import MfConfig
from fedpriv.mf.keys import MfRunConfig
from fedpriv.mf.run import CENTRAL_ALGORITHMS, mf_config_from_run
from fedpriv.node.terms import NodeTerms, Release
from fedpriv.workloads.base import Node, Setup
from fedpriv.workloads.deployment import WorkloadDeployment
from fedpriv.workloads.messages import Config, Refusal, Request
from fedpriv.workloads.mf.client import DEVICE_OPS, EVALUATIONS, PARTY_OPS, schedule
from fedpriv.workloads.mf.contract import CONFIG, ITERATION, OP, ROUND

__all__ = ["MfDeployment", "device_run_spend", "node_terms", "party_run_spend", "request_release"]

KeyValue = tuple[str, Any]


def _unguarded(view: Any, cfg: MfConfig) -> KeyValue | None:
    """The key and value that make a run release without a DP guarantee (not counting the evaluation channel)."""
    if view["mf-private"] == "off":
        return ("mf-private", "off")
    if not cfg.private:
        return ("mf-algorithm", cfg.algorithm)
    if cfg.setting == "hfl" and cfg.notion == "per-rating-paper":  # §9 A21: the per-rating bound does not hold
        return ("mf-notion", cfg.notion)
    return None


def node_terms(config: Any) -> NodeTerms:
    """What a run of ``config`` asks of one party's or device's node (module docstring)."""
    view = MfRunConfig.of(config)
    cfg, _ = mf_config_from_run(view)
    features: dict[str, KeyValue] = {}
    central = cfg.algorithm in CENTRAL_ALGORITHMS  # one trusted party on the server's data: no node releases
    if not central:
        unguarded = _unguarded(view, cfg) or (("mf-evaluate", "on") if view["mf-evaluate"] == "on" else None)
        if unguarded is not None:
            features["no-noise"] = unguarded
        if cfg.setting == "lfl" and cfg.aggregator == "oracle":
            features["secagg-oracle"] = ("secagg", "oracle")
    paths: tuple[KeyValue, ...] = ()
    if view["mf-data"] == "file" or (view["mf-data"] == "movielens-100k" and view["mf-path"].strip()):
        paths = (("mf-path", view["mf-path"]),)
    run = schedule(cfg)
    rounds_what = "mf-rounds × mf-local-steps" if run.total_rounds != cfg.total_rounds else "mf-rounds"
    sizes: list[tuple[str, str, int]] = [("rounds", rounds_what, run.total_rounds)]
    if cfg.setting != "lfl":
        sizes.append(("steps", "mf-local-steps", run.local_steps))
    if cfg.setting == "vfl":
        sizes.append(("steps", "mf-finetune-steps", cfg.finetune_steps))
    else:
        sizes += [("steps", "mf-pretrain-steps", cfg.pretrain_steps),
                  ("steps", "mf-local-finetune-steps", cfg.local_finetune_steps)]
    synthetic = view["mf-data"] == "synthetic"
    users, items = int(view["mf-synthetic-users"]), int(view["mf-synthetic-items"])
    if cfg.setting != "lfl":
        sizes.append(("clients", "mf-parties", cfg.parties))
    elif synthetic:
        sizes.append(("clients", "mf-synthetic-users", users))
    if synthetic:
        sizes.append(("data-values", "mf-synthetic-users × mf-synthetic-items", users * items))
        rows = ("mf-synthetic-users", users) if cfg.setting == "vfl" else ("mf-synthetic-items", items)
        sizes.append(("dims", f"{rows[0]} × mf-rank", rows[1] * cfg.rank))
    clip = (("mf-clip-threshold", float(cfg.clip_threshold)),) if cfg.clip == "gradient" and cfg.private else ()
    return NodeTerms(task="mf", features=features, clip_norms=clip, paths=paths, sizes=tuple(sizes),
                     steps=run.total_rounds if not central else 1, step_key=ROUND)


def party_run_spend(setup: Any) -> tuple[float, float, KeyValue]:
    """A VFL/HFL party's (ε, δ) for its whole run, and the key behind it (∞ where no guarantee holds).

    §3.7.2–§3.7.3, §4.3, §5.2: the party's releases are its T copies, each after T′ Poisson(η)-subsampled
    Gaussian steps with multiplier z (VFL also κ fine-tuning steps: TT′ + κ; HFL TT′); composed on the
    RDP curve they are (ε^(k), δ)-DP w.r.t. the party's ratings at its notion — the ε the run reports per
    party, at most the target ε, computed here from the z the run uses (so the ``source`` accountant's
    closed form is charged at its true ε). Fixed-size sampling (accounted as Poisson by the run,
    "approximate accounting") is charged without amplification (q = 1), which bounds any sampling.
    The ε is at the run's neighbouring relation (``mf-notion``: one rating, VFL's default, or one
    user's ratings after trimming, §1.3); the node's ledger adds it to the others as it is.
    """
    cfg: MfConfig = setup.cfg
    unguarded = _unguarded(setup.config, cfg)
    if unguarded is not None:
        return math.inf, 0.0, unguarded
    if cfg.setting == "hfl":
        from fedpriv.mf.hfl import effective_config, noise_multiplier

        eff = effective_config(cfg)
        z, steps = noise_multiplier(eff), eff.total_rounds * eff.local_steps
    else:
        from fedpriv.mf.plan import step_plan

        plan = step_plan(cfg, float(setup.split.train.r_max))
        z, steps = float(plan.z or 0.0), plan.total_steps
    if not z > 0:
        return math.inf, 0.0, ("mf-algorithm", cfg.algorithm)
    q = float(cfg.sampling_rate) if cfg.sampling == "poisson" else 1.0
    epsilon = party_epsilon(PartyAccount(q=q, z=z, steps=steps), cfg.delta, conversion=cfg.conversion)
    return epsilon, float(cfg.delta), ("party-epsilon", cfg.epsilon)


def device_run_spend(setup: Any) -> tuple[float, float, KeyValue]:
    """An LFL device's (ε, δ) for its whole run, and the key behind it (∞ where no guarantee holds).

    §3.7.3, §6.3–§6.4, §6.7: T Gaussian releases of sensitivity Δ_{2,v} = 2R^{3/2} (q = 1), composed by
    RDP at the device's worst-case per-iteration noise, taken over everything the node cannot check —
    whatever survivor count n1 ∈ [t, n] the server claims in round 2 and whatever the true one is:

    * ``sgdmf`` through the secure-aggregation protocol: the server learns sums of at least
      t = ⌈(1−ω)n⌉ devices (the protocol's threshold), so
      σ_eff² ≥ t·ζ₁ζ₂/(ζ₁+ζ₂)·σ_v² with ζ₂ = ζ₂(n) its smallest value (§6.4; with an honest server that
      reports the true n1 this is the run's own ledger's σ_eff ≥ σ_v in corrected mode);
    * ``sgdmf`` with the oracle (the clear reports): one device's two reports, residual
      ζ₁ζ₂(n)/(ζ₁+ζ₂(n))·σ_v²;
    * ``ldp-noise``: each report carries the full σ_v (the run's ``local_epsilon``, §6.7).

    It assumes the other devices add their noise shares (§6.1 (b)).
    """
    cfg: MfConfig = setup.cfg
    unguarded = _unguarded(setup.config, cfg)
    if unguarded is not None:
        return math.inf, 0.0, unguarded
    from fedpriv.mf.lfl import lfl_plan

    train = setup.split.train
    plan = lfl_plan(cfg, num_devices=int(setup.roster.size), n_items=int(train.n_items), R=float(train.r_max))
    noise = plan.noise
    if noise is None or plan.sigma is None:
        return math.inf, 0.0, ("mf-algorithm", cfg.algorithm)
    key: KeyValue = ("party-epsilon", cfg.epsilon)
    if cfg.algorithm == "ldp-noise":
        std = noise.round1_std()  # σ_v
    else:
        z1, z2 = noise.zeta1, noise.zeta2(noise.num_clients)
        residual = z1 if z2 is None else z1 * z2 / (z1 + z2)  # the server's best combination of the two rounds
        if cfg.aggregator == "oracle":
            key = ("secagg", "oracle")
        else:
            residual *= noise.threshold
        std = math.sqrt(residual) * noise.sigma
    epsilon = rdp_accountant_epsilon([std / plan.sensitivity] * cfg.total_rounds, cfg.delta)
    return epsilon, float(cfg.delta), key


def _int(fields: Any, key: str, what: str, low: int, high: int) -> int:
    """``fields[key]`` as an int in [low, high], else a refusal (the handler refuses it too)."""
    value = fields.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Refusal(f"expected an int {key!r} in {low}..{high} in the {what} request, got {value!r}")
    return int(value)


def request_release(setup: Any, request: Request, node: Node) -> Release | None:
    """What answering ``request`` releases from ``node``'s ratings, as its ledger is charged (module docstring).

    The target ε of a run is per party for the whole run (docs/federated_mf.md §3.7.3): a party's or
    device's first release of a run — a party's round 1, a device's first round-1 report — is charged
    the whole run's (ε, δ) (:func:`party_run_spend`, :func:`device_run_spend`), its later releases 0:
    basic composition over the node's charges then bounds its spend, and the rounds a run may ask are
    bounded by its calibration (T rounds; T iterations of a device: the ledger's steps per run and the
    handler's once-per-round checks). A device's round-2 report (−ξ_i + ξ'_i, accounted in σ_eff) is
    charged 0. Each evaluate request is a release without noise: ε = ∞ (§10.2). Requests whose answer
    holds nothing derived from the ratings beyond public metadata (setup, fine-tuning, LFL pre-training)
    release nothing (None). Step: the round (LFL: iteration + 1).
    """
    if setup.kind == "central":
        raise Refusal(f"expected no request: mf-algorithm {setup.cfg.algorithm!r} is a central baseline on the "
                      "server's data, with no clients")
    fields = request.message.get(CONFIG) or Config()
    op = fields.get(OP)
    party = setup.kind == "party"
    ops = (PARTY_OPS if party else DEVICE_OPS)[request.kind]
    if op not in ops:
        raise Refusal(f"expected op in {ops!r} on a {request.kind} request, got {op!r}")
    st = node.state
    rounds = schedule(setup.cfg).total_rounds
    if op == "evaluate":
        done = int(st.get("round", 0)) if party else int(st.get("round1", -1)) + 1
        n = int(st.get(EVALUATIONS, 0)) + 1
        return Release(step=min(max(done, 1), rounds), epsilon=math.inf, key="mf-evaluate",
                       asked=setup.config["mf-evaluate"], part=f"evaluate {n}")
    if party:
        if op != "train":
            return None
        t = _int(fields, ROUND, "train", 1, rounds)
        epsilon, delta, (key, asked) = party_run_spend(setup)
        if t > 1 and math.isfinite(epsilon):
            epsilon = delta = 0.0  # charged with round 1
        return Release(step=t, epsilon=epsilon, delta=delta, key=key, asked=asked, part="train")
    if op != "report":
        return None
    t = _int(fields, ITERATION, "report", 0, rounds - 1)
    rnd = fields.get(ROUND)
    if rnd not in (1, 2) or isinstance(rnd, bool):
        raise Refusal(f"expected {ROUND!r} in (1, 2), got {rnd!r}")
    epsilon, delta, (key, asked) = device_run_spend(setup)
    if (rnd == 2 or "round1" in st) and math.isfinite(epsilon):
        epsilon = delta = 0.0  # charged with the device's first round-1 report of the run
    return Release(step=t + 1, epsilon=epsilon, delta=delta, key=key, asked=asked, part=f"round{rnd}")


class MfDeployment(WorkloadDeployment):
    """An MF run on deployed nodes: its node terms and each request's release (module docstring)."""

    def node_terms(self, config: Any) -> NodeTerms:
        return node_terms(config)

    def release_of(self, setup: Setup, request: Request, node: Node) -> Release | None:
        """A party's train round, a device's report and every evaluate release (:func:`request_release`)."""
        return request_release(setup, request, node)
