"""Keyed random streams (docs/design.md §4): same key → same bits, any other key → another stream."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
import torch

from fedpriv.rng import (
    SERVER,
    KeyedRNG,
    StreamRows,
    purpose_id,
    seed_sequence,
    stream,
    torch_stream,
)


def test_same_key_same_bits() -> None:
    a = stream(11, 3, 42, "noise").random(1000)
    b = stream(11, 3, 42, "noise").random(1000)
    assert np.array_equal(a, b)


@pytest.mark.parametrize(
    "other",
    [(12, 3, 42, "noise"), (11, 4, 42, "noise"), (11, 3, 43, "noise"), (11, 3, 42, "batch"), (11, 3, SERVER, "noise")],
)
def test_any_other_key_gives_another_stream(other: tuple) -> None:
    a = stream(11, 3, 42, "noise").random(64)
    b = stream(*other).random(64)
    assert not np.array_equal(a, b)


def test_keys_do_not_alias_across_positions() -> None:
    # (round=1, client=2) and (round=2, client=1) are different keys
    assert not np.array_equal(stream(0, 1, 2, "x").random(8), stream(0, 2, 1, "x").random(8))


def test_streams_are_uncorrelated() -> None:
    n = 200_000
    x = stream(0, 0, 0, "a").standard_normal(n)
    y = stream(0, 0, 1, "a").standard_normal(n)
    # correlation of independent normals has sd 1/sqrt(n): 5 standard errors
    assert abs(np.corrcoef(x, y)[0, 1]) < 5 / np.sqrt(n)


def test_purpose_id_is_stable_across_processes() -> None:
    # SHA-256 based, not Python's salted hash(): a fixed value
    assert purpose_id("noise") == int.from_bytes(__import__("hashlib").sha256(b"noise").digest()[:8], "little")


def test_torch_stream_reproducible_and_keyed() -> None:
    a = torch.rand(100, generator=torch_stream(5, 1, 2, "init"))
    b = torch.rand(100, generator=torch_stream(5, 1, 2, "init"))
    c = torch.rand(100, generator=torch_stream(5, 1, 3, "init"))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_keyed_rng_facade_matches_functions() -> None:
    keyed = KeyedRNG(9)
    assert np.array_equal(keyed.numpy(1, 2, "p").random(5), stream(9, 1, 2, "p").random(5))
    assert torch.equal(torch.rand(5, generator=keyed.torch(1, 2, "p")), torch.rand(5, generator=torch_stream(9, 1, 2, "p")))


def test_seed_sequence_key_layout() -> None:
    ss = seed_sequence(1, 2, 3, "noise")
    assert ss.entropy == 1
    assert ss.spawn_key == (2, 3, purpose_id("noise"))


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((-1, 0, 0, "n"), ValueError, "run_seed must be >= 0"),
        ((0, -1, 0, "n"), ValueError, "server_round must be >= 0"),
        ((0, 0, -5, "n"), ValueError, "client_id must be >= 0"),
        ((1.5, 0, 0, "n"), TypeError, "run_seed must be an integer"),
        ((0, 0, 0, ""), TypeError, "purpose must be a non-empty string"),
        ((0, 0, 0, 3), TypeError, "purpose must be a non-empty string"),
        ((True, 0, 0, "n"), TypeError, "run_seed must be an integer"),
    ],
)
def test_bad_keys(args: tuple, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        stream(*args)


BANNED = {
    ("np", "random", "seed"), ("np", "random", "rand"), ("np", "random", "randn"), ("np", "random", "normal"),
    ("np", "random", "laplace"), ("np", "random", "uniform"), ("np", "random", "choice"), ("np", "random", "random"),
    ("np", "random", "randint"), ("np", "random", "default_rng"), ("torch", "manual_seed", None),
    ("random", "random", None), ("random", "seed", None),
}


def _attribute_chain(node: ast.AST) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def _forked(tree: ast.AST) -> set[int]:
    """Lines inside ``with torch.random.fork_rng(...)``: torch's global state is saved before and restored after."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(
                isinstance(item.context_expr, ast.Call) and _attribute_chain(item.context_expr.func)[-1:] == ("fork_rng",)
                for item in node.items):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def test_no_global_random_state_in_library_code() -> None:
    """docs/design.md §4: no np.random.* module functions, torch.manual_seed or `random` in library code.

    The one exception: inside ``torch.random.fork_rng`` (a user's model factory is seeded from a keyed
    stream there, fedpriv/models.py), which restores torch's global state when the block ends.
    """
    root = pathlib.Path(__file__).resolve().parents[2]
    offenders = []
    for pkg in ("fedpriv", "clients", "strategies"):
        for path in (root / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text())
            forked = _forked(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and node.lineno not in forked:
                    chain = _attribute_chain(node.func)
                    if chain[:3] in {b[:3] for b in BANNED if b[2]} or chain[:2] in {b[:2] for b in BANNED if not b[2]}:
                        offenders.append(f"{path.relative_to(root)}:{node.lineno} {'.'.join(chain)}")
                if isinstance(node, ast.Import) and any(a.name == "random" for a in node.names):
                    offenders.append(f"{path.relative_to(root)}:{node.lineno} import random")
    assert offenders == []


# --------------------------------------------------------------------------- StreamRows: rows of one stream's batch


def _draws(kind: str, rng, shape):
    return {"random": lambda: rng.random(shape), "standard_normal": lambda: rng.standard_normal(shape),
            "laplace": lambda: rng.laplace(0.0, 1.0, size=shape)}[kind]()


@pytest.mark.parametrize("kind", ["random", "standard_normal", "laplace"])
def test_stream_rows_are_the_rows_of_the_batch_and_keep_its_position(kind: str, monkeypatch) -> None:
    """Any rows start:stop of a (rows, 3) draw, then the next draw of the stream, for every offset of the start."""
    import fedpriv.stream_rows as stream_rows_module

    monkeypatch.setattr(stream_rows_module, "_REPLAY_PIECE", 4)  # replays cross several pieces
    for offset in range(5):  # the batch may start anywhere in Philox's 4-word blocks
        batch_rng = stream(2, 1, 3, "rows")
        batch_rng.random(offset)
        batch, after = _draws(kind, batch_rng, (7, 3)), batch_rng.random(5)
        for start in range(7):
            for stop in range(start + 1, 8):
                source = stream(2, 1, 3, "rows")
                source.random(offset)
                view = StreamRows.of(source, rows=7, start=start, stop=stop)
                np.testing.assert_array_equal(_draws(kind, view, (stop - start, 3)), batch[start:stop])
                np.testing.assert_array_equal(view.then(1, 0, 1).random((1, 5))[0], after)


def test_stream_rows_follow_several_calls_and_batches() -> None:
    """Two calls per batch (as Piecewise draws), then a second batch of another size: the rows of every draw."""
    whole = stream(9, 0, 0, "rows")
    first = [whole.random((5, 2)), whole.standard_normal((5, 2)), whole.random((5, 4))]
    second = whole.laplace(0.0, 1.0, size=(3, 2))
    view = StreamRows.of(stream(9, 0, 0, "rows"), rows=5, start=3, stop=5)
    got = [view.random((2, 2)), view.standard_normal((2, 2)), view.random((2, 4))]
    for a, b in zip(got, first):
        np.testing.assert_array_equal(a, b[3:5])
    np.testing.assert_array_equal(view.then(3, 1, 2).laplace(0.0, 1.0, (1, 2)), second[1:2])


@pytest.mark.parametrize("call, exc, match", [
    (lambda: StreamRows.of(np.random.default_rng(0), 3, 0, 1), TypeError, "Generator over Philox"),
    (lambda: StreamRows.of(stream(0, 0, 0, "x"), 3, 2, 2), ValueError, "stop"),
    (lambda: StreamRows.of(stream(0, 0, 0, "x"), 3, 0, 4), ValueError, "stop"),
    (lambda: StreamRows.of(stream(0, 0, 0, "x"), 3, 0, 2).random((3, 2)), ValueError, "number of rows served 2"),
    (lambda: StreamRows.of(stream(0, 0, 0, "x"), 3, 0, 1).laplace(np.zeros(1), 1.0, (1, 1)), TypeError, "scalar"),
    (lambda: StreamRows.of(stream(0, 0, 0, "x"), 3, 0, 1).integers(5), AttributeError, "only random"),
])
def test_stream_rows_refuse_what_they_cannot_serve(call, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        call()
