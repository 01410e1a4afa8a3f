"""The one fedpriv ClientApp: routes every message to the client handler of the run's workload (docs/architecture.md).

The workload comes from the run config's ``task`` (``flwr run``: ``[tool.flwr.app.config]`` plus
``--run-config``; :func:`make_client_app` may fix a config for ``run_simulation``, whose run config
is empty). A node serves the client id of its node config (``partition-id``; a workload may read
more keys, e.g. a party's key file) and loads only its own data (:meth:`Workload.load_client`),
once per process and configuration. Each message becomes a :class:`fedpriv.workloads.Request`;
the handler's reply message goes back as a ``RecordDict``; its state persists in
``context.state``. A refusal, a bad node config or a handler error is answered with an ``Error``
reply naming the workload, the client and the reason (``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``).

The run config is a request: every message passes the node's gate
(:class:`fedpriv.workloads.gate.NodeGate`, docs/threat_model.md) — the node's own policy checks what
the run asks before the node sets it up, imports a model or opens a file, each release is checked
against the policy's ceiling and charged to the node's ledger before the answer leaves, and the
handler draws from the node's randomness (secret on a deployed node; keyed by the run seed only
where the node's policy allows it). An error reply names what was refused; the text of an error
raised by local data stays in the node's log unless its policy allows ``error-details``.

The question ``{"op": "fedpriv-whoami"}`` (a QUERY) is answered here for every workload with the
node's client id: Flower's node ids are random, the server addresses clients by id.

Mods (``ldp_mod``, ``SecAggMod``) wrap the handler as Flower mods; each passes through the messages
that are not its own.
"""

from __future__ import annotations

import json
import traceback
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from logging import WARNING
from typing import Any

from flwr.app import ConfigRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.common.constant import ErrorCode
from flwr.supercore import log

from clients.contract import CLIENT_ID, OP, WHOAMI, run_config_from, whoami_request
from clients.records import from_recorddict, load_state, save_state, to_recorddict
from fedpriv.config import RunConfig
from fedpriv.errors import FedprivError
from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.registry import additions, restore
from fedpriv.workloads import Node, Refusal, Request, Setup, Workload, get_workload
from fedpriv.workloads.gate import NodeGate
from fedpriv.workloads.messages import Kind

__all__ = ["CLIENT_ID", "WHOAMI", "app", "default_mods", "make_client_app", "whoami_request"]

_KIND: dict[str, Kind] = {"train": "train", "evaluate": "evaluate", "query": "query"}

_CACHE: OrderedDict[tuple[str, str, tuple[tuple[str, Any], ...]], tuple[Setup, int, Any]] = OrderedDict()
_CACHE_SIZE = 2


class _DataError(FedprivError):
    """A node's own data could not be loaded (the cause is chained; its text may quote the data)."""


def _node(config: RunConfig, node_config: dict[str, Any], workload: Workload) -> tuple[Setup, int, Any]:
    """The workload's setup, this node's client id and its own data (built once per process and config).

    A bad config or node config raises ValueError (its message names keys, never data); the data's own
    errors raise :class:`_DataError` (the node's log keeps their text).
    """
    key = (json.dumps(config.to_dict(), sort_keys=True), workload.name, tuple(sorted(node_config.items())))
    if key not in _CACHE:
        setup = workload.setup(config)
        client = workload.deployment.client_of(setup, node_config, workload.clients(setup))
        try:
            data = workload.load_client(setup, client, node_config)
        except (ValueError, OSError) as exc:
            raise _DataError(f"{workload.name} client {client} cannot load its data") from exc
        _CACHE[key] = (setup, client, data)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return _CACHE[key]


def _error(msg: Message, reason: str, detail: BaseException | None = None) -> Message:
    """An Error reply carrying ``reason``; ``detail`` (which the server is not told) goes to the node's log only."""
    if detail is not None:
        log(WARNING, "fedpriv ClientApp: %s\n%s", reason, "".join(traceback.format_exception(detail)))
    else:
        log(WARNING, "fedpriv ClientApp: %s", reason)
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)


def default_mods(config: RunConfig | None = None, policy: NodePolicy | None = None) -> list[Mod]:
    """The mods every fedpriv ClientApp installs: ``ldp_mod`` privatizes the release of a train reply (model
    updates of federated LDP-SGD), ``SecAggMod`` runs the client side of secure aggregation (messages with a
    ``"secagg"`` record: secure-sum, LFL matrix factorization); each passes every other message through.
    ``policy`` as in :func:`make_client_app`."""
    from clients.mods import LdpMod
    from clients.secagg_mod import SecAggMod

    return [LdpMod(config, policy=policy), SecAggMod(policy=policy)]


def _restoring(added: dict[str, dict[str, object]]) -> Mod:
    """A mod that registers ``added`` (:func:`fedpriv.registry.additions`) in this process before anything reads the config."""

    def restore_registrations(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        restore(added)
        return call_next(msg, context)

    return restore_registrations


def make_client_app(config: RunConfig | None = None, *, mods: Sequence[Mod] | None = None,
                    workload: Workload | None = None,
                    node_configs: Mapping[int, Mapping[str, Any]] | None = None,
                    policy: NodePolicy | None = None) -> ClientApp:
    """The ClientApp of every workload; ``config`` fixes the configuration (None: ``context.run_config``).

    ``mods`` default to :func:`default_mods` of the config.

    ``workload`` fixes the workload object (the Flower simulation engine passes it, so a workload
    registered in the driver process reaches Ray's actors); None looks ``task`` up in the registry.
    ``node_configs`` (Flower's simulation engine, whose nodes get only ``partition-id`` and
    ``num-partitions``) adds to the node config of partition ``p`` what a deployed node of client
    ``p`` is started with (the workload's deployment's
    :meth:`~fedpriv.workloads.deployment.WorkloadDeployment.node_config`, e.g. the path of a key file).
    ``policy`` fixes the node policy (fedpriv's simulation runtimes pass
    :meth:`~fedpriv.node.policy.NodePolicy.simulation`); None: each node's own — the file its node config
    names under ``fedpriv-policy``, else :meth:`~fedpriv.node.policy.NodePolicy.default`
    (docs/threat_model.md). A request beyond the policy is answered with an Error reply naming the key,
    the value asked and the node's limit.
    """
    if config is not None and not isinstance(config, RunConfig):
        raise TypeError(f"config must be a fedpriv.config.RunConfig or None, got {type(config).__name__}")
    if policy is not None and not isinstance(policy, NodePolicy):
        raise TypeError(f"policy must be a fedpriv.node.NodePolicy or None, got {type(policy).__name__}")
    chosen = list(default_mods(config, policy) if mods is None else mods)
    added = additions()  # names registered in this (the driver's) process: a simulated node in a Ray actor lacks them
    app = ClientApp(mods=[_restoring(added), *chosen] if added else chosen)
    fixed = workload
    extra = {int(p): dict(c) for p, c in (node_configs or {}).items()}

    def handle(msg: Message, context: Context) -> Message:
        """Answer one message with the workload's handler (or the whoami question), within the node's policy."""
        node_config = dict(context.node_config)
        node_config.update(extra.get(node_config.get("partition-id"), {}))  # type: ignore[arg-type]
        try:
            gate = NodeGate.for_node(node_config, policy)
        except ValueError as exc:
            return _error(msg, "this node's policy cannot be used, so it answers nothing (see the node's log)", exc)
        try:
            cfg = config if config is not None else run_config_from(context.run_config)
            work = fixed if fixed is not None else get_workload(cfg["task"])
        except ValueError as exc:
            return _error(msg, f"this node cannot read the run config: {exc}")
        try:
            cfg = gate.admit(work, cfg)  # before the node sets the run up, imports a model or opens a file
            setup, client, data = _node(cfg, node_config, work)
        except _DataError as exc:
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            return _error(msg, f"{exc}: {gate.reason(cause)}", cause)
        except (PolicyRefusal, ValueError) as exc:
            return _error(msg, f"this node cannot serve task {cfg['task']!r}: {exc}")
        request_config = msg.content.config_records.get("config", ConfigRecord())
        if request_config.get(OP) == WHOAMI:
            return Message(RecordDict({"metrics": MetricRecord({CLIENT_ID: client})}), reply_to=msg)
        kind = _KIND.get(str(msg.metadata.message_type), "query")
        node = Node(client=client, data=data, state=load_state(context.state), randomness=gate.randomness(cfg))
        request = Request(client=client, kind=kind, message=from_recorddict(msg.content))
        try:
            release = gate.check(work, setup, cfg, request, node, run=context.run_id)
            reply = work.handler(setup)(request, node)
            gate.charge(release, work, cfg, run=context.run_id)  # before the answer leaves the node
        except (Refusal, PolicyRefusal) as exc:
            return _error(msg, f"{work.name} client {client} refused: {exc}")
        except Exception as exc:  # noqa: BLE001 - a failing client answers with an error reply
            return _error(msg, f"{work.name} client {client}: {gate.reason(exc)}", exc)
        save_state(context.state, node.state)
        return Message(to_recorddict(reply), reply_to=msg)

    app.train()(handle)
    app.evaluate()(handle)
    app.query()(handle)
    return app


#: The ClientApp of ``flwr run .``: configuration from ``context.run_config``, the node's own policy.
app = make_client_app()
