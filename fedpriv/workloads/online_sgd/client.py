"""The user's side of online LDP-SGD: one privatized gradient, once (docs/online_ldp_sgd.md §4.1, §5, §9).

Client c is user i = c + 1 of the stream. It holds its datum in every replication r,
``(x, y) = user_data(cfg, [i]*R, user_rows(cfg, i, DATA))`` (the §8 design drawn from its own keyed
streams), and, asked at step i with θ_{i−1} (R, p), answers

    g̃_i = client_gradient(cfg, θ_{i−1}, x, y, user_rows(cfg, i, NOISE), i)         (§4.1, §5)

— bounded gradient minus C0·ω, one row per replication. Guarantees (what a curious server cannot
make a user do):

* **the model, noise law and budget are the user's own** (its configuration, never a message): a
  request naming another model, d, noise, ε, δ, μ, convention, bounding, C0 or number of
  replications is refused;
* **each user answers once, at its own step** (§1 one pass, §9): a request for another step, or a
  second request, is refused — a second report would spend the budget again;
* **the datum and its clean gradient never leave the node**: the reply holds g̃ and the ids only
  (with ``online-noise = "none"``, the non-private baseline, g̃ *is* the clean gradient).

Noise: from the node's randomness (:class:`fedpriv.node.randomness.Randomness`, :func:`noise_rows`).
In a simulation (the in-process engines, Flower's simulation engine, a deployment with
``--keyed-noise``) it is keyed by the run seed — the user's own streams ``user_rows(cfg, i, NOISE)``
of the simulator — so every runtime draws the same noise (a server that knows the seed could
recompute ω). A deployed node draws ω from its secret randomness instead (ChaCha20 keyed by an OS
secret that never leaves the node).

:func:`relay_stream` is the in-process relay handler: it runs a whole stretch of the stream with
:func:`fedpriv.federated.online_sgd.advance` (users' uniforms drawn in blocks, replications as
rows) and returns the state the server reaches by asking each user with :func:`handle_gradient`
and absorbing its reply — bit for bit (tests/workloads/test_online_sgd.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.federated.online_sgd import (
    DATA,
    NOISE,
    OnlineSgdConfig,
    StreamBlocks,
    advance,
    client_gradient,
    user_data,
    user_rows,
)
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.rng import RowStreams
from fedpriv.workloads.base import Node
from fedpriv.workloads.messages import Arrays, Message, Metrics, Refusal, Reply, Request
from fedpriv.workloads.online_sgd.contract import (
    BUDGET_FIELDS,
    CLIENT_ID,
    GRADIENT_OP,
    NOISY_GRAD,
    OP,
    STEP,
    THETA,
    StreamState,
    request_fields,
)
from fedpriv.workloads.protocol import ProtocolError, Relay

__all__ = ["ANSWERED", "UserData", "check_gradient", "handle_gradient", "load_user", "noise_rows", "relay_stream"]

#: Node state key: the step this user answered.
ANSWERED = "answered"


@dataclass(frozen=True)
class UserData:
    """One user's own data: its datum in every replication (x (R, d+1), y (R,))."""

    x: np.ndarray
    y: np.ndarray


def load_user(cfg: OnlineSgdConfig, client: int) -> UserData:
    """Client ``client``'s datum (user ``client + 1``) in every replication, from its own keyed streams (§8)."""
    step = int(client) + 1
    x, y = user_data(cfg, np.full(cfg.replications, step), user_rows(cfg, step, DATA))
    return UserData(x=x, y=y)


def noise_rows(cfg: OnlineSgdConfig, step: int, client: int,
               randomness: Randomness) -> RowStreams | np.random.Generator:
    """What user ``step`` (client ``client``) draws ω from, one row per replication.

    Keyed: its own streams of the run seed, ``user_rows(cfg, step, NOISE)`` (the simulator's bits);
    secret: one stream of the node's randomness for all the rows.
    """
    if randomness.keyed:
        if isinstance(randomness, KeyedRandomness) and randomness.run_seed != cfg.seed:
            raise ValueError(f"keyed randomness of run seed {randomness.run_seed} cannot draw the noise of a run "
                             f"with seed {cfg.seed}")
        return user_rows(cfg, step, NOISE)
    return randomness.numpy(step, client, NOISE)


def check_gradient(request: Request, cfg: OnlineSgdConfig, own: dict[str, Any], client: int) -> int:
    """The step of a gradient request after checking it against the user's own step and configuration."""
    fields = request.message.get("config", {})
    if fields.get(OP) != GRADIENT_OP:
        raise Refusal(f"expected {OP} = {GRADIENT_OP!r}, got {fields.get(OP)!r}")
    step = fields.get(STEP)
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step != client + 1:
        raise Refusal(f"expected {STEP} = {client + 1} (client {client} is user {client + 1} of the stream and "
                      f"answers its own step only), got {step!r}")
    for name in BUDGET_FIELDS:  # floats travel exactly: both sides compute them with the same functions
        got, mine = fields.get(name), own.get(name)
        if type(got) is not type(mine) or got != mine:
            raise Refusal(f"expected {name} = {mine!r} (this user's own configuration), got {got!r}; the user never "
                          "takes its model, noise or budget from a message")
    return int(step)


def _theta(request: Request, cfg: OnlineSgdConfig) -> np.ndarray:
    """θ_{i−1} of the request: a finite float64 array of shape (R, p)."""
    arrays = request.message.get("arrays", {})
    if THETA not in arrays:
        raise Refusal(f"expected Arrays 'arrays' holding {THETA!r} (θ_(i-1) of every replication), got "
                      f"{ {k: sorted(v) for k, v in request.message.records.items()} }")
    theta = np.asarray(arrays[THETA])
    shape = (cfg.replications, cfg.grad_dim)
    if theta.shape != shape or theta.dtype != np.float64 or not np.all(np.isfinite(theta)):
        raise Refusal(f"expected {THETA!r} to be a finite float64 array of shape {shape} for model {cfg.model!r} "
                      f"with d={cfg.d} and {cfg.replications} replications, got dtype {theta.dtype}, shape "
                      f"{theta.shape}")
    return theta


def handle_gradient(cfg: OnlineSgdConfig) -> Callable[[Request, Node], Message]:
    """The handler: a user's one privatized gradient at θ_{i−1}, at its own step i only, once."""
    own = request_fields(cfg)

    def handle(request: Request, node: Node) -> Message:
        step = check_gradient(request, cfg, own, node.client)
        if ANSWERED in node.state:
            raise Refusal(f"expected each user to answer once (one pass over the stream, docs/online_ldp_sgd.md §9), "
                          "got "
                          f"step {step} again after it answered step {node.state[ANSWERED]}: a second report would "
                          "spend more privacy budget; the server must move on to the next user")
        theta = _theta(request, cfg)
        user: UserData = node.data
        noisy = client_gradient(cfg, theta, user.x, user.y, noise_rows(cfg, step, node.client, node.randomness), step)
        node.state[ANSWERED] = step
        return Message({"arrays": Arrays({NOISY_GRAD: noisy}),
                        "metrics": Metrics({CLIENT_ID: int(node.client), STEP: step})})

    return handle


def relay_stream(cfg: OnlineSgdConfig) -> Callable[[Relay], StreamState]:
    """The in-process relay handler: a stretch of the stream in one vectorized call (module docstring)."""
    own = request_fields(cfg)
    answered: list[int] = []  # the last step answered in this process: the stream only goes forward
    blocks = StreamBlocks(cfg)  # the users' uniforms, drawn in the simulator's blocks across relays

    def run(relay: Relay) -> StreamState:
        state: StreamState = relay.state
        first, m = state.step + 1, len(relay.clients)
        client = int(relay.clients[0])
        try:
            if answered and first != answered[-1] + 1:
                raise Refusal(f"expected the stream to go on at step {answered[-1] + 1} (each user answers once), "
                              f"got step {first}")
            if not np.array_equal(relay.clients, np.arange(first - 1, first - 1 + m)):
                raise Refusal(f"expected clients {first - 1}..{first + m - 2} for steps {first}..{first + m - 1} "
                              "(client c is user c + 1)")
            request = Request(client=client, kind=relay.kind, message=relay.request(state, 0))
            check_gradient(request, cfg, own, client)  # every link's request is built the same way: the first one stands
            _theta(request, cfg)               # for all of them
        except Refusal as exc:
            relay.absorb(state, 0, Reply(client=client, error=f"Refusal: {exc}"))
            raise ProtocolError(f"step {first}: client {client} refused: {exc}") from None
        theta, theta_bar, projected = advance(cfg, state.theta, state.theta_bar, first, first + m - 1, blocks)
        answered.append(first + m - 1)
        return StreamState(theta=theta, theta_bar=theta_bar, step=first + m - 1,
                           projections=state.projections + projected)

    return run
