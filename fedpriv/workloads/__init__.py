"""Workloads: one home per workload, one registry, one protocol loop for every runtime (docs/architecture.md).

:class:`Workload` is the interface (config, node-side data, client handler, server protocol,
summary), :class:`WorkloadReport` its report and :class:`WorkloadDeployment` its deployment;
:func:`get_workload` and :func:`register` the registry; :mod:`~fedpriv.workloads.messages` the
Flower-free messages; :mod:`~fedpriv.workloads.protocol` the protocol steps and
:func:`~fedpriv.workloads.protocol.drive`; :mod:`~fedpriv.workloads.driver` the in-process transport
and :func:`~fedpriv.workloads.driver.run_workload`.
"""

from fedpriv.workloads.base import BatchHandler, Handler, Node, RelayHandler, Setup, Workload
from fedpriv.workloads.deployment import WorkloadDeployment
from fedpriv.workloads.messages import Arrays, Config, Message, Metrics, Refusal, Reply, Request
from fedpriv.workloads.protocol import Batch, Broadcast, Commit, Exchange, Outcome, ProtocolError, Relay, drive
from fedpriv.workloads.registry import entries, get_workload, names, register, table, unregister
from fedpriv.workloads.report import CellRun, WorkloadReport

__all__ = ["Arrays", "Batch", "BatchHandler", "Broadcast", "CellRun", "Commit", "Config", "Exchange", "Handler",
           "Message", "Metrics", "Node", "Outcome", "ProtocolError", "Refusal", "Relay", "RelayHandler", "Reply",
           "Request", "Setup", "Workload", "WorkloadDeployment", "WorkloadReport", "drive", "entries", "get_workload",
           "names", "register", "table", "unregister"]
