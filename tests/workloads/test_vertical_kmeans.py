"""The vertical k-means workload: a party's ops and refusals, and the parties' key."""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from fedpriv.clustering.methods import budget_for, count_epsilon
from fedpriv.clustering.vertical import party_count, party_encode, party_rng
from fedpriv.node.randomness import KeyedRandomness
from fedpriv.workloads import Node, Refusal
from fedpriv.workloads.vertical_kmeans import KEY_FILE_NAME
from fedpriv.workloads.vertical_kmeans.client import COUNTED, ENCODED, N_HAT_TAIL
from fedpriv.workloads.vertical_kmeans.contract import N_HAT, PARTY_INFO, PARTY_MESSAGE
from fedpriv.workloads.vertical_kmeans.party_key import HASH_KEY_FILE, SALT, PartyKey, read_key_file, write_key_file
from tests.workloads._vertical_kmeans import (
    CFG,
    DATA,
    KEY,
    SECRET,
    SETUP,
    WORKLOAD,
    _ask,
    _count,
    _encode,
    _node,
    _setup,
)

# --------------------------------------------------------------------------- a party's ops


def test_count_is_party_count_with_the_partys_budget_and_the_repetitions_seed_once_per_repetition():
    node, eps0 = _node(1), count_epsilon(SETUP.kmeans)
    for r in (1, 2):
        reply = _ask(node, op="count", repetition=r, eps0=eps0)
        expected = party_count(DATA.blocks[1], eps0, party_rng(SETUP.seed + r - 1, 1, "count"))
        assert dict(reply["metrics"]) == {N_HAT: expected, "repetition": r} and expected != DATA.n
    with pytest.raises(Refusal, match="second 'count' of repetition 2.*more privacy budget"):
        _ask(node, op="count", repetition=2, eps0=eps0)
    assert node.state[COUNTED] == [1, 2]


@pytest.mark.parametrize("eps0", [0.5, 0.0, 0.02 * 2.0 * (1 + 1e-9)])
def test_count_refuses_another_epsilon0_and_stays_unanswered(eps0):
    node = _node(0)
    with pytest.raises(Refusal, match=f"expected eps0 = 0.04.*got {eps0!r}"):
        _ask(node, op="count", repetition=1, eps0=eps0)
    assert COUNTED not in node.state
    _count(node)  # the honest request still gets its answer


def test_exact_count_for_the_methods_without_an_n_hat_query():
    setup = _setup(**{"kmeans-method": "ldp-agg-2pest"})
    with pytest.raises(Refusal, match="expected eps0 = 0.0"):
        _ask(_node(0, setup), setup, op="count", repetition=1, eps0=0.04)
    assert _ask(_node(0, setup), setup, op="count", repetition=1, eps0=0.0)["metrics"][N_HAT] == DATA.n


def test_encode_is_party_encode_with_the_repetitions_key_and_seed_once_per_repetition():
    node = _node(1)
    for r in (1, 3):
        reply = _encode(node, repetition=r, kprime=3, n_hat=610.5)
        expected = party_encode(DATA.blocks[1], DATA.ids, 1, SETUP.kmeans, 3, budget_for(SETUP.kmeans, 610.5, 2),
                                KEY.repetition_key(SETUP.digest, r), seed=SETUP.seed + r - 1)
        want = expected.to_arrays()
        assert set(reply[PARTY_MESSAGE]) == set(want) == {"centers", "sketch"}
        for name in want:
            np.testing.assert_array_equal(reply[PARTY_MESSAGE][name], want[name])
            assert reply[PARTY_MESSAGE][name].dtype == want[name].dtype
        assert dict(reply[PARTY_INFO]) == {"party": 1, "m_l": DATA.widths[1], "k_l": expected.k, "repetition": r}
    with pytest.raises(Refusal, match="second 'encode' of repetition 3"):
        _encode(node, repetition=3, kprime=3, n_hat=610.5)
    assert node.state[ENCODED] == [1, 3]


def test_each_repetition_uses_its_own_hash_key():
    a, b = _encode(_node(0), repetition=1), _encode(_node(0), repetition=2)
    same_seed = party_encode(DATA.blocks[0], DATA.ids, 0, SETUP.kmeans, 3, budget_for(SETUP.kmeans, 600.0, 2),
                             KEY.repetition_key(SETUP.digest, 1), seed=SETUP.seed + 1)
    # repetition 2 with repetition 1's key would release these registers: the key differs, so the sketch does
    assert not np.array_equal(b[PARTY_MESSAGE]["sketch"], same_seed.sketch)
    assert not np.array_equal(a[PARTY_MESSAGE]["sketch"], b[PARTY_MESSAGE]["sketch"])


@pytest.mark.parametrize("changes, fragment", [
    ({"eps2": 0.98}, "expected eps2 = 0.49"),
    ({"eps1": 0.98}, "expected eps1 = 0.49"),
    ({"delta2": 0.01}, "expected delta2 = "),
    ({"method": "ind-lap"}, "expected method = 'dpfmps-2pest'"),
    ({"M": 4096}, "expected M = 64"),
    ({"gamma": 0.5}, "expected gamma = 1.0"),
    ({"hash-backend": "datasketch"}, "expected hash-backend = 'prf'"),
    ({"dplsf-preset": "tuned"}, "expected dplsf-preset = 'library'"),
    ({"kprime": 0}, "expected an int 'kprime' >= 1"),
    ({"kprime": 2.5}, "expected an int 'kprime' >= 1"),
    ({"n-hat": float("nan")}, "expected a finite number 'n-hat'"),
    ({"op": "decode"}, "expected op in \\('count', 'encode'\\), got 'decode'"),
    ({"repetition": 0}, "expected an int 'repetition' in 1..3"),
    ({"repetition": 4}, "expected an int 'repetition' in 1..3"),
    ({"repetition": True}, "expected an int 'repetition' in 1..3"),
    ({"repetition": None}, "expected an int 'repetition' in 1..3"),
])
def test_encode_refuses_a_budget_parameters_or_a_repetition_it_does_not_hold(changes, fragment):
    node = _node(0)
    with pytest.raises(Refusal, match=fragment):
        _encode(node, changes=changes)
    assert ENCODED not in node.state
    _encode(node)  # the honest request still gets its answer


def test_encode_refuses_an_n_hat_that_would_weaken_delta():
    setup = _setup(**{"budget-b": 0.5})  # ε_0 = 1: the tail bound is n − 40
    with pytest.raises(Refusal, match="it would weaken delta = 1/n-hat"):
        _encode(_node(0, setup), setup, n_hat=DATA.n - N_HAT_TAIL - 1)
    _encode(_node(0, setup), setup, n_hat=DATA.n - N_HAT_TAIL + 1)
    with pytest.raises(Refusal, match="expected delta2 = "):
        _encode(_node(0, setup), setup, n_hat=DATA.n + 1e9, changes={"delta2": 1.0})
    # the counting party checks the n̂ is its own answer of that repetition
    node = _node(1, setup)
    answer = _count(node, setup, repetition=2)
    with pytest.raises(Refusal, match=f"expected n-hat = {answer!r} \\(this party's count answer of repetition 2\\)"):
        _encode(node, setup, repetition=2, n_hat=answer + 1)
    _encode(node, setup, repetition=1, n_hat=answer + 1)  # another repetition: not its answer to check
    _encode(node, setup, repetition=2, n_hat=answer)


def test_exact_count_methods_take_only_the_public_n():
    setup = _setup(**{"kmeans-method": "ldp-agg"})
    with pytest.raises(Refusal, match=f"expected n-hat = {DATA.n} \\(the exact public n"):
        _encode(_node(0, setup), setup, n_hat=DATA.n - 1.0)
    assert {"ldp_ids", "ldp_values"} <= set(_encode(_node(0, setup), setup, n_hat=float(DATA.n))[PARTY_MESSAGE])


def test_an_n_hat_without_a_budget_is_refused():
    with pytest.raises(Refusal, match="expected an n-hat this party can derive its budget from"):
        _encode(_node(0), changes={"n-hat": 0.5})


def test_a_sketch_method_needs_the_key_and_the_others_do_not():
    with pytest.raises(Refusal, match="needs the parties' key, and this node has none"):
        _encode(_node(0, key=None))
    setup = _setup(**{"kmeans-method": "ind-lap"})
    assert "histogram" in _encode(_node(0, setup, key=None), setup)[PARTY_MESSAGE]


# --------------------------------------------------------------------------- the parties' key


def _hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869 §2.2–2.3 written out with hmac (an oracle independent of ``cryptography``)."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        out, i = out + block, i + 1
    return out[:length]


def test_the_oracle_reproduces_rfc_5869_test_case_1():
    okm = _hkdf_sha256(bytes([0x0B] * 22), bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")


def test_repetition_keys_are_hkdf_sha256_of_the_secret_distinct_per_repetition_and_config():
    keys = {}
    for digest in ("0123456789abcdef", "fedcba9876543210"):
        for r in (1, 2, 3):
            want = _hkdf_sha256(SECRET, SALT, f"config {digest}|repetition {r}".encode(), 32)
            got = KEY.repetition_key(digest, r)
            assert got == PartyKey(SECRET).repetition_key(digest, r)  # every party derives the same K_r
            assert got._secret == want  # noqa: SLF001 - the derivation itself is what is under test
            keys[digest, r] = want
    assert len(set(keys.values())) == 6 and SECRET not in keys.values()
    assert PartyKey(bytes(32)).repetition_key("0123456789abcdef", 1) != KEY.repetition_key("0123456789abcdef", 1)
    with pytest.raises(ValueError, match="repetition must be >= 1, got 0"):
        KEY.repetition_key("0123456789abcdef", 0)


def test_the_setups_digest_is_the_run_configs():
    assert SETUP.digest == CFG.digest()
    assert _setup(seed=5).digest == CFG.with_values({"seed": 5}).digest() != SETUP.digest


def test_a_party_key_is_inert():
    assert SECRET.hex() not in repr(KEY) and str(SECRET) not in str(KEY)
    with pytest.raises(TypeError, match="PartyKey cannot be pickled"):
        pickle.dumps(KEY)
    with pytest.raises(AttributeError, match="immutable"):
        KEY._secret = b"x"  # noqa: SLF001
    with pytest.raises(ValueError, match="16 to 64 bytes"):
        PartyKey(b"short")


def test_key_files_are_private_and_checked(tmp_path: Path):
    path = write_key_file(tmp_path / "k", SECRET)
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_bytes() == SECRET
    assert read_key_file(path).repetition_key("ab", 1) == KEY.repetition_key("ab", 1)
    with pytest.raises(FileExistsError):
        write_key_file(path)
    fresh = write_key_file(tmp_path / "fresh")
    assert len(fresh.read_bytes()) == 32 and fresh.read_bytes() != SECRET
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="readable by its owner only \\(mode 0600\\), got mode 0644: run chmod 600"):
        read_key_file(path)
    short = tmp_path / "short"
    short.write_bytes(b"x" * 8)
    short.chmod(0o600)
    with pytest.raises(ValueError, match="must hold 16 to 64 bytes of secret, got 8"):
        read_key_file(short)
    with pytest.raises(ValueError, match="cannot be read"):
        read_key_file(tmp_path / "absent")
    with pytest.raises(ValueError, match="must be a regular file"):
        (tmp_path / "dir").mkdir(mode=0o700)
        read_key_file(tmp_path / "dir")


def test_only_the_parties_node_configs_name_the_key_file(tmp_path: Path):
    deployment, parties = WORKLOAD.deployment, WORKLOAD.clients(SETUP)
    assert deployment.node_config(SETUP, 1, parties) == {"partition-id": 1, "num-partitions": 2}  # not provisioned
    provisioned = deployment.provision(SETUP, tmp_path)
    assert provisioned.key_file == tmp_path / KEY_FILE_NAME and provisioned.key_file.stat().st_mode & 0o077 == 0
    assert deployment.node_config(provisioned, 1, parties) == {"partition-id": 1, "num-partitions": 2,
                                                               HASH_KEY_FILE: str(tmp_path / KEY_FILE_NAME)}
    # the server's setup (rebuilt from the run config) has no key file, and what it loads holds no key
    assert WORKLOAD.setup(CFG).key_file is None and str(tmp_path) not in repr(CFG.to_dict())
    server = WORKLOAD.load_server(SETUP)
    assert not any(isinstance(v, PartyKey) for v in vars(server).values()) if hasattr(server, "__dict__") else True
    # in process, the parties' key comes from the provisioned file
    data = WORKLOAD.load_clients(provisioned)
    secret = provisioned.key_file.read_bytes()
    assert data[0].key.repetition_key("ab", 1) == PartyKey(secret).repetition_key("ab", 1)


def test_a_node_loads_only_its_own_block_and_its_key_from_the_file(tmp_path: Path):
    path = write_key_file(tmp_path / "k", SECRET)
    party = WORKLOAD.load_client(SETUP, 1, {"partition-id": 1, "num-partitions": 2, HASH_KEY_FILE: str(path)})
    np.testing.assert_array_equal(party.block, DATA.blocks[1])
    assert party.block.shape == (DATA.n, DATA.widths[1])
    by_file, by_key = Node(client=1, data=party, randomness=KeyedRandomness(SETUP.seed)), _node(1)
    np.testing.assert_array_equal(_encode(by_file)[PARTY_MESSAGE]["sketch"], _encode(by_key)[PARTY_MESSAGE]["sketch"])
