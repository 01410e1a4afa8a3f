"""``LdpFedAvg``: Flower's message-based FedAvg with fedpriv's aggregation rules and reply checks.

What it changes in :class:`flwr.serverapp.strategy.FedAvg`:

* ``configure_train`` samples *clients* from the server's keyed stream
  (:func:`fedpriv.federated.sampling.sample_clients`, ``stream(seed, round, SERVER, "sample")``),
  never Flower's global ``random``: positions into the connected clients sorted by client id
  (= partition id), so the Flower engine picks the same clients as the fast engine. Node ids are
  random in Flower, so with ``fraction-train < 1`` the strategy first learns each node's client id:
  from earlier train replies, else by one ``MessageType.QUERY`` message per unknown node (the
  ClientApp answers with its ``client-id``); a node that does not answer is left out of that round's
  draw. With ``fraction-train = 1`` every connected node is sent the round. It sends the global model
  (``arrays``, in the layout it was given) and ``config["server-round"]``.
* ``aggregate_train`` validates every reply on its own (error replies → *failed*; a missing
  record, wrong keys, wrong length, NaN/inf, a missing or duplicate ``client-id`` → *rejected*),
  drops the bad ones and counts them; fewer valid replies than ``min-clients`` raise
  :class:`~strategies.strategy_utils.RoundFailedError`. The valid ones are sorted by their
  ``client-id`` and aggregated with :func:`fedpriv.federated.aggregate.aggregate` (``strategy``:
  fedavg, fedmedian, fedtrimmedavg, krum, multikrum, bulyan; ``weights``: num-examples or uniform).
* Federated evaluation is off by default (``fraction_evaluate = 0``): the model is evaluated on the server's
  held-out test set (:func:`strategies.evaluation.make_evaluate_fn`).
* Any model layout: an ArrayRecord of named arrays (a torch ``state_dict``, or fedpriv's single flat
  ``params``) is flattened in key order for the rules and the result is returned in the same layout
  (:class:`~strategies.strategy_utils.Layout`); Flower's ``FedAvg`` arguments are accepted as keywords.

The per-round report (who was aggregated, who was rejected and why) is kept in
:attr:`LdpFedAvg.reports` and the round's train metrics in :attr:`LdpFedAvg.train_metrics`; the
round's MetricRecord carries the counts (``num-replies``, ``num-valid``, ``rejected``, ``failed``,
``num-examples``) and the clients' metrics averaged weighted by examples (``privacy-claim`` by min, ``guarantee-epsilon``/``-delta`` by max).

Privacy: every reply that reached the server (valid, or rejected but carrying a ``client-id``) spent its
client's reported per-round guarantee (``guarantee-epsilon``/``-delta``; none stated: ε = ∞). The
strategy records it in a :class:`fedpriv.accounting.guarantees.GuaranteeLedger` and the round's
MetricRecord carries ``epsilon-round`` (the worst client's ε of this round alone) and
``epsilon-composed`` (the worst client's ε composed over the run), both at the run's ``delta``, by the
tightest valid accountant of :func:`fedpriv.accounting.accountant.compose`, which the log names
(:attr:`LdpFedAvg.privacy` keeps each round's compositions). With ``target_epsilon``,
``configure_train`` refuses a round whose predicted spend (the largest per-round guarantee seen so far,
charged to every client the round would send to) would take a client's composed ε above the target:
it raises :class:`BudgetExhaustedError` (a :class:`RoundFailedError`) with the reason and sends nothing.
The first round is never refused (its spend is unknown before any reply); a client's spend the server
cannot foresee (a larger guarantee than any earlier one) is reported, never hidden.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from numbers import Real

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import log

from clients.contract import (
    ARRAYS,
    CLIENT_ID,
    CONFIG,
    NUM_EXAMPLES,
    PARAMS,
    SERVER_ROUND,
    whoami_request,
)
from fedpriv._validation import check_choice, check_int, check_probability
from fedpriv.accounting.accountant import Composition
from fedpriv.accounting.guarantees import GuaranteeLedger, guarantee_event
from fedpriv.config import RunConfig
from fedpriv.federated.aggregate import AGGREGATORS, NEEDS_REFERENCE, aggregate, assumption_violation
from fedpriv.federated.rules import rule_parameters
from fedpriv.federated.sampling import sample_clients
from fedpriv.federated.server_analysis import RoundInputs, ServerAnalysis
from strategies.strategy_utils import (
    Layout,
    ParsedReply,
    RoundFailedError,
    RoundReport,
    aggregate_reply_metrics,
    metric_record,
    parse_train_reply,
    report_metrics,
)

__all__ = ["WEIGHTS", "BudgetExhaustedError", "LdpFedAvg"]

#: Client weightings (the ``weights`` config key).
WEIGHTS: tuple[str, ...] = ("num_examples", "uniform")

#: Flower's metrics reduction hook: the replies' contents and the weighting key to one MetricRecord.
_MetricsAggrFn = Callable[[list[RecordDict], str], MetricRecord]
#: The reply metrics carrying a client's per-round guarantee (clients.mods, fedpriv.workloads.ldp_sgd.client).
GUARANTEE_EPSILON, GUARANTEE_DELTA = "guarantee-epsilon", "guarantee-delta"


class BudgetExhaustedError(RoundFailedError):
    """A round was not started: its predicted spend would take a client's composed ε above ``target_epsilon``."""

    def __init__(self, server_round: int, min_clients: int, reason: str) -> None:
        super().__init__(RoundReport(server_round=server_round, num_replies=0), min_clients)
        self.args = (f"round {server_round} not started: {reason}. Raise target_epsilon or stop the run here.",)


def _stated_guarantee(fields: object) -> tuple[float | None, float | None]:
    """(``guarantee-epsilon``, ``guarantee-delta``) of a reply's metrics, None where absent or not a number."""
    def number(key: str) -> float | None:
        value = fields.get(key) if isinstance(fields, (dict, MetricRecord)) else None
        return float(value) if isinstance(value, Real) and not isinstance(value, bool) else None
    return number(GUARANTEE_EPSILON), number(GUARANTEE_DELTA)


class LdpFedAvg(FedAvg):
    """FedAvg over any model layout with keyed sampling, robust rules and reply validation.

    Takes Flower's ``FedAvg`` keyword arguments and fedpriv's. The model may be any ArrayRecord (a torch
    ``state_dict`` or flat arrays): each reply must carry the arrays of the model sent (same keys and shapes);
    the rules run on the arrays flattened in key order and the result goes back in the same layout (integer
    buffers rounded). A reply without ``client-id`` (a ClientApp that does not speak fedpriv's contract) is
    identified by its node id, except with fedpriv's flat ``params`` layout (its contract requires the id) and
    with ``fraction_train < 1`` (the keyed sampling needs every node's client id).

    Parameters
    ----------
    fraction_train, min_available_nodes, weighted_by_key, arrayrecord_key, configrecord_key, train_metrics_aggr_fn
        As in Flower's ``FedAvg`` (``min_available_nodes`` defaults to ``min_clients``; ``train_metrics_aggr_fn``
        replaces fedpriv's reduction of the valid replies' metrics, :func:`aggregate_reply_metrics`).
    fraction_evaluate, min_evaluate_nodes, evaluate_metrics_aggr_fn
        Flower's federated evaluation; off by default (``fraction_evaluate = 0``, unlike Flower's 1.0): fedpriv
        evaluates on the server's held-out test set.
    min_train_nodes : int or None (default: None)
        Flower's name of ``min_clients``; give one of the two.
    strategy : str (default: "fedavg")
        Aggregation rule, one of ``fedavg``, ``fedmedian``, ``fedtrimmedavg``, ``krum``,
        ``multikrum``, ``bulyan`` (see :mod:`fedpriv.federated.aggregate`); ``normbound`` and
        ``centeredclip`` run in fedpriv's ServerApp only (they need the flat global model).
    weights : str (default: "num_examples")
        ``"num_examples"``: p_k ∝ the client's ``num-examples``; ``"uniform"``: p_k = 1/K.
    trim_beta : float (default: 0.2)
        Fraction cut at each end by ``fedtrimmedavg``.
    num_malicious : int (default: 0)
        The assumed number ``f`` of attackers; a round whose valid replies break the rule's assumption
        (:func:`fedpriv.federated.aggregate.assumption_violation`) fails.
    min_clients : int or None (default: None, meaning 2)
        Fewest valid replies a round needs; also the fewest sampled and connected nodes.
    seed : int (default: 0)
        Run seed of the sampling stream.
    node_wait_timeout : float or None (default: None)
        Seconds to wait for ``min_clients`` nodes to connect before raising
        :class:`RoundFailedError`; ``None`` waits forever, as Flower does.
    round_offset : int (default: 0)
        Added to Flower's round counter: a run resumed after round k numbers its rounds k+1, k+2, ...
        so sampling and the clients' keyed streams continue exactly where the interrupted run stopped.
    analysis : ServerAnalysis or None (default: None)
        The server-side evaluator (:mod:`fedpriv.federated.server_analysis`): predicted deviation,
        the oracle's realized deviation, HDR4ME re-calibration; its metrics join the round's.
        With ``analysis.oracle`` replies may carry the clean ``oracle-clean`` array.
    delta : float (default: 1e-5)
        The run's δ, at which ``epsilon-round`` and ``epsilon-composed`` are composed (module docstring).
    target_epsilon : float or None (default: None)
        Composed ε no client may exceed: a round predicted to exceed it is not started
        (:class:`BudgetExhaustedError`).

    Examples
    --------
    >>> from fedpriv.config import RunConfig
    >>> s = LdpFedAvg.from_config(RunConfig().replace(strategy="fedmedian", min_clients=3))
    >>> s.rule, s.min_clients
    ('fedmedian', 3)
    """

    def __init__(
        self,
        *,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 0.0,
        min_train_nodes: int | None = None,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int | None = None,
        weighted_by_key: str = NUM_EXAMPLES,
        arrayrecord_key: str = ARRAYS,
        configrecord_key: str = CONFIG,
        train_metrics_aggr_fn: _MetricsAggrFn | None = None,
        evaluate_metrics_aggr_fn: _MetricsAggrFn | None = None,
        strategy: str = "fedavg",
        weights: str = "num_examples",
        trim_beta: float = 0.2,
        num_malicious: int = 0,
        min_clients: int | None = None,
        seed: int = 0,
        node_wait_timeout: float | None = None,
        round_offset: int = 0,
        analysis: ServerAnalysis | None = None,
        delta: float = 1e-5,
        target_epsilon: float | None = None,
    ) -> None:
        self.rule: str = check_choice(strategy, "strategy", AGGREGATORS)
        if self.rule in NEEDS_REFERENCE:
            raise ValueError(f"strategy {self.rule!r} clips updates relative to the global model, which LdpFedAvg "
                             "(any ArrayRecord layout) does not hold in flat form: run it through fedpriv's ServerApp "
                             f"(strategies.server_app.make_server_app), or pick one of "
                             f"{[a for a in AGGREGATORS if a not in NEEDS_REFERENCE]}")
        self.weights: str = check_choice(weights, "weights", WEIGHTS)
        self.trim_beta: float = rule_parameters()["trim_beta"].check(trim_beta, "trim_beta")  # fedtrimmedavg's own check
        self.num_malicious: int = check_int(num_malicious, "num_malicious", minimum=0)
        if min_clients is not None and min_train_nodes is not None and min_clients != min_train_nodes:
            raise ValueError(f"min_clients ({min_clients!r}) and Flower's name for it, min_train_nodes "
                             f"({min_train_nodes!r}), differ: pass one of them")
        fewest = min_clients if min_clients is not None else (min_train_nodes if min_train_nodes is not None else 2)
        self.min_clients: int = check_int(fewest, "min_clients", minimum=1)
        available = self.min_clients if min_available_nodes is None else check_int(
            min_available_nodes, "min_available_nodes", minimum=1)
        self.seed: int = check_int(seed, "seed", minimum=0)
        if node_wait_timeout is not None and not float(node_wait_timeout) > 0:
            raise ValueError(f"node_wait_timeout must be > 0 or None, got {node_wait_timeout!r}")
        self.node_wait_timeout: float | None = node_wait_timeout
        self.round_offset: int = check_int(round_offset, "round_offset", minimum=0)
        self._sent: tuple[Message, ...] = ()  # this round's train messages (their ids are set when pushed)
        if analysis is not None and not isinstance(analysis, ServerAnalysis):
            raise TypeError(f"analysis must be a ServerAnalysis or None, got {type(analysis).__name__}")
        self.analysis: ServerAnalysis | None = analysis
        self.guarantees: GuaranteeLedger = GuaranteeLedger(delta, target_epsilon)
        self.privacy: dict[int, tuple[Composition, Composition]] = {}  # round -> (this round's, composed)
        self._global: np.ndarray | None = None
        super().__init__(
            fraction_train=check_probability(fraction_train, "fraction_train"),
            fraction_evaluate=check_probability(fraction_evaluate, "fraction_evaluate", low_open=False),
            min_train_nodes=self.min_clients,
            min_evaluate_nodes=check_int(min_evaluate_nodes, "min_evaluate_nodes", minimum=0),
            min_available_nodes=max(available, self.min_clients),
            weighted_by_key=weighted_by_key,
            arrayrecord_key=arrayrecord_key,
            configrecord_key=configrecord_key,
            train_metrics_aggr_fn=train_metrics_aggr_fn,
            evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn,
        )
        self._train_metrics_fn: _MetricsAggrFn | None = train_metrics_aggr_fn
        self.query_timeout: float = 600.0
        self.node_clients: dict[int, int] = {}  # node id -> client id, learnt from replies
        self.reports: dict[int, RoundReport] = {}
        self.train_metrics: dict[int, dict[str, float | int]] = {}
        self._layout: Layout | None = None

    @classmethod
    def from_config(cls, config: RunConfig, **kwargs: object) -> LdpFedAvg:
        """Build from a :class:`RunConfig` (keys strategy, weights, trim-beta, num-malicious,
        fraction-train, min-clients, seed, delta); ``kwargs`` adds ``node_wait_timeout``, ``round_offset``, ``analysis``,
        ``target_epsilon``."""
        return cls(
            strategy=config["strategy"],
            weights=config["weights"],
            trim_beta=config["trim-beta"],
            num_malicious=config["num-malicious"],
            fraction_train=config["fraction-train"],
            min_clients=config["min-clients"],
            seed=config["seed"],
            delta=config["delta"],
            **kwargs,  # type: ignore[arg-type]
        )

    def summary(self) -> None:
        """Log the configuration."""
        log(INFO, "\t├──> Aggregation: %s (weights=%s, trim-beta=%.3g, num-malicious=%d)",
            self.rule, self.weights, self.trim_beta, self.num_malicious)
        log(INFO, "\t├──> Sampling: fraction %.3g of nodes, keyed stream (seed=%d)", self.fraction_train, self.seed)
        log(INFO, "\t└──> Minimum valid replies per round: %d", self.min_clients)

    # ------------------------------------------------------------------------------ train

    def _wait_for_nodes(self, grid: Grid, server_round: int) -> list[int]:
        start = time.monotonic()
        while len(nodes := sorted(int(n) for n in grid.get_node_ids())) < self.min_available_nodes:
            waited = time.monotonic() - start
            if self.node_wait_timeout is not None and waited >= self.node_wait_timeout:
                raise RoundFailedError(
                    RoundReport(server_round=server_round, num_replies=0), self.min_clients,
                    f"only {len(nodes)} node(s) connected after {waited:.0f} s",
                )
            log(INFO, "Waiting for nodes to connect: %d connected (minimum required: %d).",
                len(nodes), self.min_available_nodes)
            remaining = 1.0 if self.node_wait_timeout is None else self.node_wait_timeout - waited
            time.sleep(min(1.0, max(remaining, 0.0)))
        return nodes

    def _nodes_by_client_id(self, grid: Grid, nodes: list[int], server_round: int) -> list[int]:
        """The connected nodes whose client id is known, ordered by client id (asks unknown nodes first)."""
        unknown = [n for n in nodes if n not in self.node_clients]
        if unknown:
            messages = [Message(content=whoami_request(), dst_node_id=n, message_type=MessageType.QUERY) for n in unknown]
            for reply in grid.send_and_receive(messages, timeout=self.query_timeout):
                node = int(reply.metadata.src_node_id)
                if reply.has_error():
                    cid = None
                else:
                    cid = next(iter(reply.content.metric_records.values()), MetricRecord()).get(CLIENT_ID)
                if isinstance(cid, int) and not isinstance(cid, bool) and cid >= 0:
                    self.node_clients[node] = cid
                else:
                    log(WARNING, "\t> node %d did not tell its client-id (%s): left out of this round's draw", node,
                        reply.error.reason if reply.has_error() else "no int 'client-id' in its query reply")
        by_client: dict[int, int] = {}
        for n in nodes:
            cid = self.node_clients.get(n)
            if cid is not None and (cid not in by_client or n < by_client[cid]):
                by_client[cid] = n
        return [by_client[c] for c in sorted(by_client)]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample nodes from the keyed stream and send them the flat global parameters."""
        server_round += self.round_offset
        self._layout = Layout.of(arrays)
        flat = self._layout.flatten(arrays)
        assert not isinstance(flat, str)  # the layout of these very arrays
        self._global = flat
        nodes = self._wait_for_nodes(grid, server_round)
        if self.fraction_train >= 1.0:
            node_ids = nodes
        else:
            candidates = self._nodes_by_client_id(grid, nodes, server_round)
            if not candidates:
                raise RoundFailedError(RoundReport(server_round=server_round, num_replies=0), self.min_clients,
                                       f"none of the {len(nodes)} connected nodes told its client-id")
            picked = sample_clients(self.seed, server_round, len(candidates), self.fraction_train, self.min_clients)
            node_ids = [candidates[i] for i in picked]
        self._check_budget(server_round, node_ids)
        log(INFO, "configure_train: Sampled %s nodes (out of %s)", len(node_ids), len(nodes))
        config[SERVER_ROUND] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        self._sent = tuple(Message(content=record, dst_node_id=nid, message_type=MessageType.TRAIN) for nid in node_ids)
        return list(self._sent)

    def _check_budget(self, server_round: int, node_ids: list[int]) -> None:
        """Raise :class:`BudgetExhaustedError` when the round to these nodes could exceed ``target_epsilon``."""
        clients = [self.node_clients.get(n) for n in node_ids]
        # a node whose client id is unknown may be any client: then every client seen so far is checked too
        known = None if any(c is None for c in clients) else [c for c in clients if c is not None]
        reason = self.guarantees.refusal(known)
        if reason is not None:
            log(WARNING, "configure_train: %s", reason)
            raise BudgetExhaustedError(server_round, self.min_clients, reason)

    def _charge(self, server_round: int, valid: list[ParsedReply], rejected: list[Message]) -> dict[str, float]:
        """Charge the round's releases (valid replies, and rejected ones that name their client); its ε metrics."""
        spends = [(r.client_id, guarantee_event(*_stated_guarantee(r.metrics))) for r in valid]
        spends += [(cid, guarantee_event(*_stated_guarantee(fields))) for m in rejected for cid, fields in _named_spend(m)]
        this_round, composed = self.guarantees.record(spends)
        self.privacy[server_round] = (this_round, composed)
        log(INFO, "privacy: epsilon %.4g this round, %.4g composed over the run at delta %g (worst client; %s)",
            this_round.epsilon, composed.epsilon, composed.delta, composed.summary())
        return {"epsilon-round": this_round.epsilon, "epsilon-composed": composed.epsilon}

    def _origin(self, reply: Message) -> int:
        """The node a reply answers for: the destination of the message it replies to (an error reply for a
        vanished node comes from the SuperLink, not from the node), else its source."""
        sent = {m.metadata.message_id: int(m.metadata.dst_node_id) for m in self._sent if m.metadata.message_id}
        return sent.get(reply.metadata.reply_to_message_id, int(reply.metadata.src_node_id))

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate, drop and count bad replies (and sampled nodes that never replied), aggregate the rest."""
        server_round += self.round_offset
        replies = list(replies)
        if self._layout is None:
            raise RuntimeError("aggregate_train called before configure_train: the model's layout is unknown")
        valid: list[ParsedReply] = []
        rejected: list[tuple[int, str]] = []
        failed: list[tuple[int, str]] = []
        seen: set[int] = set()
        contents_by_client: dict[int, RecordDict] = {}
        for msg in replies:
            node = self._origin(msg)
            if msg.has_error():
                failed.append((node, f"error code {msg.error.code}: {msg.error.reason}"))
                continue
            parsed = parse_train_reply(msg, self._layout, oracle=self.analysis is not None and self.analysis.oracle,
                                       arrays_key=self.arrayrecord_key, weight_key=self.weighted_by_key,
                                       client_id_required=self.fraction_train < 1.0 or self._layout.keys == (PARAMS,))
            if isinstance(parsed, str) or parsed.client_id in seen:
                rejected.append((node, parsed if isinstance(parsed, str) else f"duplicate client-id {parsed.client_id}"))
            else:
                seen.add(parsed.client_id)
                valid.append(parsed)
                contents_by_client[parsed.client_id] = msg.content
                self.node_clients[node] = parsed.client_id
        replied = {self._origin(m) for m in replies}
        failed += [(int(m.metadata.dst_node_id), "no reply before the round's timeout (node lost or hung)")
                   for m in self._sent if int(m.metadata.dst_node_id) not in replied]
        valid.sort(key=lambda r: r.client_id)
        report = RoundReport(
            server_round=server_round,
            num_replies=len(replies),
            client_ids=tuple(r.client_id for r in valid),
            rejected=tuple(rejected),
            failed=tuple(failed),
        )
        self.reports[server_round] = report
        epsilons = self._charge(server_round, valid, [m for m in replies if not m.has_error() and all(
            m.content is not c for c in contents_by_client.values())])  # rejected replies were released too
        log(INFO, "aggregate_train: %d valid, %d rejected, %d failed of %d replies",
            report.num_valid, len(rejected), len(failed), len(replies))
        for node, reason in rejected:
            log(WARNING, "\t> rejected reply from node %d: %s", node, reason)
        for node, reason in failed:
            log(WARNING, "\t> failed reply from node %d: %s", node, reason)
        if len(valid) < self.min_clients:
            raise RoundFailedError(report, self.min_clients)
        violation = assumption_violation(self.rule, len(valid), self.num_malicious, self.trim_beta)
        if violation is not None:
            raise RoundFailedError(report, self.min_clients, f"{violation} valid replies")
        updates = np.stack([r.params for r in valid])
        if self.weights == "num_examples":
            w = np.array([r.num_examples for r in valid], dtype=np.float64)
        else:
            w = np.ones(len(valid))
        new = aggregate(updates, w, self.rule, trim_beta=self.trim_beta, num_malicious=self.num_malicious)
        if self._train_metrics_fn is not None:  # Flower's hook, over the valid replies' contents
            contents = [contents_by_client[r.client_id] for r in valid]
            reduced = {k: v for k, v in dict(self._train_metrics_fn(contents, self.weighted_by_key)).items()
                       if not isinstance(v, list)}
        else:
            reduced = aggregate_reply_metrics(valid)
        metrics = {**reduced, **report_metrics(report, sum(r.num_examples for r in valid)), **epsilons}
        if self.analysis is not None:
            if self._global is None:  # recorded by configure_train, with the layout
                raise RuntimeError("aggregate_train called before configure_train: the global model is unknown")
            cleans = [r.clean for r in valid]
            if self.analysis.oracle and any(c is None for c in cleans):
                log(WARNING, "\t> analyzer-oracle: %d of %d replies lack %r; no realized deviation this round",
                    sum(c is None for c in cleans), len(cleans), "oracle-clean")
            present = [c for c in cleans if c is not None]
            clean = np.stack(present) if cleans and len(present) == len(cleans) else None
            new, extra = self.analysis(RoundInputs(server_round=server_round, global_params=self._global,
                                                   updates=updates, weights=w, aggregated=new, clean=clean))
            metrics.update(extra)
        self.train_metrics[server_round] = dict(metrics)
        return self._layout.record(new), metric_record(metrics)


def _named_spend(msg: Message) -> list[tuple[int, object]]:
    """``[(client id, metrics)]`` of a rejected reply that names its client in its MetricRecord, else ``[]``."""
    records = list(msg.content.metric_records.values()) if msg.content is not None else []
    fields = records[0] if records else None
    cid = fields.get(CLIENT_ID) if fields is not None else None
    if isinstance(cid, int) and not isinstance(cid, bool) and cid >= 0:
        return [(cid, fields)]
    return []
