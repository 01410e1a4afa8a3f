"""What a node trusts: its SuperExec's secret and the signers of the apps it runs.

The SuperExec test starts a real ``flower-supernode`` (no SuperLink needed: its Runtime API listens
before it dials) and checks that fedpriv's command line makes it refuse a caller without the secret.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from typer.testing import CliRunner

from simulations.cli import app
from simulations.deploy.flwr_cli import flower_env, supernode_argv
from simulations.deploy.processes import free_port, start_daemon, stop_all, tail, wait_listening
from simulations.deploy.trust import (
    check_superexec_secret,
    check_trusted_entities,
    generate_superexec_secret,
)

cli = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------------ SuperExec secret


def test_a_generated_secret_is_32_random_bytes_0600_and_never_overwritten(tmp_path: Path) -> None:
    a, b = generate_superexec_secret(tmp_path / "a"), generate_superexec_secret(tmp_path / "b")
    assert len(a.read_bytes()) == 32 and a.read_bytes() != b.read_bytes()
    assert stat.S_IMODE(a.stat().st_mode) == 0o600
    check_superexec_secret(a)
    with pytest.raises(ValueError, match=rf"{a} already exists"):
        generate_superexec_secret(a)


@pytest.mark.parametrize("case, match", [
    ("missing", "cannot be read"),
    ("empty", "is empty"),
    ("shared", r"readable by other users \(mode 0644\); it must be 0600: `chmod 600"),
    ("link", "must be a regular file, not a link"),
])
def test_a_bad_secret_file_is_refused_naming_it(tmp_path: Path, case: str, match: str) -> None:
    path = tmp_path / "secret"
    if case == "empty":
        path.touch(mode=0o600)
    elif case == "shared":
        path.write_bytes(b"x" * 32)
        path.chmod(0o644)
    elif case == "link":
        generate_superexec_secret(tmp_path / "real")
        path.symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match=rf"--superexec-auth-secret-file {path} .*{match}"):
        check_superexec_secret(path)


def _acquire(address: str, secret: bytes | None) -> str:
    """Call the Runtime API's AcquireTask (with the SuperExec's HMAC when ``secret``): "ok" or the HTTP error."""
    import httpx
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.interceptors.http.superexec_auth import SuperExecAuthHttpInterceptor
    from flwr.supercore.runtime.runtime_http_client import RuntimeHttpClient

    interceptors = [] if secret is None else [SuperExecAuthHttpInterceptor(
        master_secret=secret, protected_methods={"/flwr.proto.Runtime/AcquireTask"})]
    client = RuntimeHttpClient.from_server_address(address, insecure=True, root_certificates=None,
                                                   interceptors=interceptors)
    try:
        client.AcquireTask(AcquireTaskRequest())
    except httpx.HTTPStatusError as exc:
        return str(exc.response.status_code)
    return "ok"


@pytest.mark.subprocess
@pytest.mark.timeout(120)
def test_fedpriv_s_supernode_serves_its_tasks_only_to_the_holder_of_its_secret(tmp_path: Path) -> None:
    secret = generate_superexec_secret(tmp_path / "node0.secret")
    port = free_port()
    argv = supernode_argv(f"127.0.0.1:{free_port()}", port, {"partition-id": 0, "num-partitions": 1},
                          ca_cert=None, private_key=None, max_wait=60, superexec_secret=secret)
    assert argv[argv.index("--isolation") + 1] == "process"  # Flower ignores the secret in its default isolation
    node = start_daemon("supernode 0", "supernode", argv, flower_env(tmp_path / "home"), tmp_path / "node.log",
                        (port,))
    try:
        wait_listening(node, "127.0.0.1", (port,), 60)
        address = f"127.0.0.1:{port}"
        assert _acquire(address, None) == "401", tail(node.log)
        assert _acquire(address, os.urandom(32)) == "401"
        assert _acquire(address, secret.read_bytes()) == "ok", tail(node.log)
    finally:
        stop_all([node])
    assert "SuperExec authentication failed" in tail(node.log, 200)


# ------------------------------------------------------------------ trusted entities


def _ssh(key: object) -> str:
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH,  # type: ignore[attr-defined]
                                         serialization.PublicFormat.OpenSSH).decode()


def test_a_mapping_of_ed25519_keys_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "trusted.yaml"
    a, b = _ssh(ed25519.Ed25519PrivateKey.generate()), _ssh(ed25519.Ed25519PrivateKey.generate())
    path.write_text(f'fpk_a: "{a} signer-a"\nfpk_b: "{b}"\n')
    assert check_trusted_entities(path) == {"fpk_a": f"{a} signer-a", "fpk_b": b}


@pytest.mark.parametrize("content, match", [
    ("{}", r"got an empty mapping \(Flower would then verify nothing\)"),
    ("", "got NoneType"),
    ("- a\n- b\n", "got list"),
    ("fpk_a: 3\n", "entry 'fpk_a' must map a string id to a string key"),
    ("fpk_a: 'ssh-ed25519 not-base64'\n", "the key of 'fpk_a' is not an OpenSSH public key"),
    ("fpk_a: [unclosed\n", "cannot be read as YAML"),
    ("ECDSA", "the key of 'fpk_a' is an ecdsa-sha2-nistp384 key, but Flower verifies app signatures with "
              "ssh-ed25519 keys only"),
])
def test_a_bad_trusted_entities_file_is_refused_before_start(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "trusted.yaml"
    if content == "ECDSA":
        content = f'fpk_a: "{_ssh(ec.generate_private_key(ec.SECP384R1()))}"\n'
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"--trusted-entities {path}.*{match}"):
        check_trusted_entities(path)


def test_deploy_supernode_refuses_bad_trust_files_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "trusted.yaml"
    bad.write_text("{}")
    args = ["deploy", "supernode", "--superlink", "127.0.0.1:9", "--partition-id", "0", "--num-partitions", "1",
            "--insecure", "--port", str(free_port()), "--max-wait", "1"]
    result = cli.invoke(app, [*args, "--trusted-entities", str(bad)])
    assert result.exit_code == 2 and "got an empty mapping" in _flat(result.output), result.output
    shared = tmp_path / "secret"
    shared.write_bytes(b"s" * 32)
    shared.chmod(0o644)
    result = cli.invoke(app, [*args, "--superexec-auth-secret-file", str(shared)])
    assert result.exit_code == 2 and "it must be 0600" in _flat(result.output), result.output
    assert "$ " not in result.output  # no command was started
