"""``stop_all``: the SuperNodes, then their SuperExecs, then the SuperLink and the rest; each group in parallel.

Stand-in daemons (``sh`` loops) write the time their SIGTERM arrived, then take 0.6 s to exit, as
a SuperNode that deactivates itself does: one after the other, two of them would be signalled at
least 0.6 s apart; signalled together, within a few milliseconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simulations.deploy.processes import alive, start_daemon, stop_all

pytestmark = pytest.mark.subprocess

#: Each stand-in: on SIGTERM, write the time (ns) to its file, wait 0.6 s, exit.
SCRIPT = 'trap \'date +%s%N > "$1"; sleep 0.6; exit 0\' TERM; echo ready > "$1.up"; while :; do sleep 0.05; done'
EXIT = 0.6


@pytest.mark.timeout(120)
def test_each_group_is_signalled_at_once_and_the_groups_in_order(tmp_path: Path) -> None:
    roles = ["superlink", "launcher", "superexec", "superexec", "supernode", "supernode"]  # any order given
    daemons = [start_daemon(f"{role} {i}", role, ["sh", "-c", SCRIPT, "sh", str(tmp_path / f"{i}")], os.environ,
                            tmp_path / f"{i}.log") for i, role in enumerate(roles)]
    try:
        for i in range(len(roles)):  # every trap is set before the stop begins
            while not (tmp_path / f"{i}.up").exists():
                pass
        stop_all(daemons, grace=10.0)
    finally:
        for d in daemons:
            d.process.kill()
    assert not any(alive(d.pid) for d in daemons)
    signalled = {i: int((tmp_path / f"{i}").read_text()) / 1e9 for i in range(len(roles))}
    by_role = {role: [signalled[i] for i, r in enumerate(roles) if r == role] for role in set(roles)}
    for group in (by_role["supernode"], by_role["superexec"], by_role["superlink"] + by_role["launcher"]):
        assert max(group) - min(group) < EXIT / 2, by_role  # one SIGTERM each before any is waited for
    # a group is signalled once the one before has exited: at least its exit time later
    assert min(by_role["superexec"]) - max(by_role["supernode"]) >= EXIT * 0.9
    assert min(by_role["superlink"] + by_role["launcher"]) - max(by_role["superexec"]) >= EXIT * 0.9
