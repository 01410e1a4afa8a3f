"""The tests' Ray nodes never repeat a port: not the GCS port, not a port of another node of the cluster.

Ray refuses to start a node whose ports repeat ("is trying to use a port number ... that is used by
other components"); a port free when the node is started may still be promised to the cluster, so the
draw must leave those out. The draw is replaced by one that offers the promised ports first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tests._ray as ray_helpers


def _ports_of(argv: list[str]) -> list[int]:
    """Every port a ``ray start`` command line names."""
    ports: list[int] = []
    for flag, value in zip(argv, argv[1:]):
        if flag == "--worker-port-list":
            ports += [int(p) for p in value.split(",")]
        elif flag.endswith("-port") and flag != "--port":
            ports.append(int(value))
    return ports


@pytest.mark.parametrize("head", [True, False])
def test_a_node_draws_none_of_the_ports_promised_to_its_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               head: bool) -> None:
    gcs, other_node = 20000, [20001, 20002]
    monkeypatch.setattr(ray_helpers, "free_ports", lambda host, count: [gcs, *other_node, *range(21000, 21000 + count)])
    started: dict[str, object] = {}
    monkeypatch.setattr(ray_helpers, "start_daemon", lambda name, role, argv, env, log, ports: started.update(
        argv=argv, ports=list(ports)))
    ray_helpers.ray_node(head, tmp_path, gcs, tmp_path / "log", worker_ports=8, avoid=other_node)
    drawn = _ports_of(started["argv"])  # type: ignore[arg-type]
    assert len(drawn) == 6 + 8 + (1 if head else 0)
    assert len(set(drawn)) == len(drawn) and not set(drawn) & {gcs, *other_node}
    assert set(started["ports"]) == {*drawn, gcs}  # type: ignore[arg-type]
