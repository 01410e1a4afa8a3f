"""Worker of ``pfl_bench.py``: trains the benchmark work with pfl-research and prints its timings as JSON.

Runs inside pfl's own venv (``benchmarks/.venv-pfl``), never the main one:
``benchmarks/.venv-pfl/bin/python benchmarks/_pfl_worker.py DATA.npz [--rounds 20] [--mechanism laplace]``.
Reads the .npz written by ``pfl_bench.py`` (train/test x and y, the clients' partition). The last line
printed on stdout is the JSON result (also written to ``--out``).

pfl pieces: ``FederatedDataset`` + ``MinimizeReuseUserSampler`` (cohort = all N clients, each once per
round), ``PyTorchModel`` (local SGD lr 0.1, central SGD lr 1.0 so ``w += mean update``),
``NNTrainHyperParams(local_num_steps=E, local_batch_size=B, local_max_grad_norm=C)``,
``FederatedAveraging``, ``SimulatedBackend(postprocessors=[mechanism, WeightByDatapoints()])`` where
the mechanism (``LaplaceMechanism`` / ``GaussianMechanism``) used as a postprocessor is pfl's local DP.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByDatapoints
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.data.sampling import get_user_sampler
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Metrics, Weighted
from pfl.model.pytorch import PyTorchModel
from pfl.postprocessor.base import Postprocessor
from pfl.privacy import GaussianMechanism, LaplaceMechanism


class LogisticRegression(torch.nn.Module):
    """Multinomial logistic regression, one Linear(d → k) with bias, zero-initialized, with pfl's loss/metrics."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features, classes)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits."""
        return self.linear(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:
        """Minibatch-mean softmax cross-entropy (what pfl's SGD step differentiates)."""
        return F.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = True) -> dict[str, Weighted]:
        """Loss and accuracy, weighted by examples."""
        logits = self(x)
        return {"loss": Weighted(float(F.cross_entropy(logits, y, reduction="sum")), len(y)),
                "accuracy": Weighted(float((logits.argmax(1) == y).sum()), len(y))}


class StepsDataset(Dataset):
    """A client's data; ``iter(B)`` yields ``steps`` fresh minibatches of B distinct examples (fedpriv's sampling)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, user_id: int, steps: int, gen: torch.Generator) -> None:
        super().__init__((x, y), user_id=str(user_id))
        self._x, self._y, self._steps, self._gen = x, y, steps, gen

    def iter(self, batch_size: int | None) -> Iterator[Any]:
        """Full batch for evaluation (B ≥ n); else E minibatches, without replacement within a step."""
        n = len(self._y)
        if batch_size is None or batch_size >= n:
            yield self.raw_data
            return
        for _ in range(self._steps):
            idx = torch.randperm(n, generator=self._gen)[:batch_size]
            yield self._x[idx], self._y[idx]


class RoundTimer(TrainingProcessCallback):
    """Wall-clock seconds of every central iteration (one full loop of ``FederatedAlgorithm.run``)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._last = 0.0

    def on_train_begin(self, *, model: Any) -> Metrics:
        """Start the clock."""
        self._last = time.perf_counter()
        return Metrics()

    def after_central_iteration(self, aggregate_metrics: Metrics, model: Any, *,
                                central_iteration: int) -> tuple[bool, Metrics]:
        """Record this round's seconds."""
        now = time.perf_counter()
        self.seconds.append(now - self._last)
        self._last = now
        print(f"round {central_iteration + 1}: {self.seconds[-1]:.2f} s", flush=True)
        return False, Metrics()


def federated_data(x: np.ndarray, y: np.ndarray, parts: list[np.ndarray], steps: int,
                   seed: int) -> FederatedDataset:
    """pfl's federated dataset of the clients in ``parts``, sampled in order so each round takes each once."""
    gen = torch.Generator().manual_seed(seed)
    clients = [(torch.from_numpy(x[p]), torch.from_numpy(y[p])) for p in parts]

    def make(uid: int) -> StepsDataset:
        return StepsDataset(*clients[uid], user_id=uid, steps=steps, gen=gen)

    return FederatedDataset(make, get_user_sampler("minimize_reuse", list(range(len(parts)))))


def local_mechanism(name: str, clip: float, epsilon: float, delta: float) -> Postprocessor | None:
    """pfl's local DP mechanism on the model update (None for ``none``)."""
    if name == "laplace":
        return LaplaceMechanism(clip, epsilon)
    if name == "gaussian":
        return GaussianMechanism.construct_single_iteration(clip, epsilon, delta)
    return None


def accuracy(model: PyTorchModel, x: np.ndarray, y: np.ndarray) -> float:
    """Test accuracy of ``model`` on (x, y), through pfl's evaluate."""
    metrics = model.evaluate(Dataset((torch.from_numpy(x), torch.from_numpy(y))))
    return next(float(v.overall_value) for k, v in metrics if str(k) == "accuracy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("data")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--mechanism", choices=["laplace", "gaussian", "none"], default="laplace")
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the JSON result to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    d = np.load(args.data)
    parts = np.split(d["part_index"], d["part_offsets"][1:-1])
    assert min(map(len, parts)) > args.batch_size, "StepsDataset needs every client to hold more than B examples"
    classes = int(d["train_y"].max()) + 1
    train = federated_data(d["train_x"], d["train_y"], parts, args.local_steps, args.seed)

    net = LogisticRegression(d["train_x"].shape[1], classes)
    model = PyTorchModel(net, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))
    mech = local_mechanism(args.mechanism, args.clip, args.epsilon, args.delta)
    backend = SimulatedBackend(training_data=train, val_data=train,
                               postprocessors=([mech] if mech else []) + [WeightByDatapoints()])
    timer = RoundTimer()
    t0 = time.perf_counter()
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=args.rounds, evaluation_frequency=10**9,
                                           train_cohort_size=len(parts), val_cohort_size=None),
        backend=backend, model=model,
        model_train_params=NNTrainHyperParams(local_num_epochs=None, local_num_steps=args.local_steps,
                                              local_batch_size=args.batch_size, local_learning_rate=args.lr,
                                              local_max_grad_norm=args.clip),
        model_eval_params=NNEvalHyperParams(local_batch_size=None),
        callbacks=[timer])
    total = time.perf_counter() - t0
    secs = timer.seconds
    result = json.dumps({
        "pfl_version": importlib.metadata.version("pfl"),
        "torch": torch.__version__, "numpy": np.__version__, "torch_threads": torch.get_num_threads(),
        "mechanism": args.mechanism, "pfl_mechanism": type(mech).__name__ if mech else None,
        "noise": None if mech is None else {
            "laplace_scale_b": args.clip / args.epsilon if args.mechanism == "laplace" else None,
            "gaussian_stddev": args.clip * mech.relative_noise_stddev if args.mechanism == "gaussian" else None},
        "clients": len(parts), "rounds": len(secs), "round_seconds": secs, "round_1_s": secs[0],
        "steady_s_per_round": statistics.median(secs[1:]) if len(secs) > 1 else secs[0],
        "total_s": total, "test_accuracy": accuracy(model, d["test_x"], d["test_y"]),
        "train_accuracy": accuracy(model, d["train_x"], d["train_y"]),
    })
    print(result)
    if args.out:
        Path(args.out).write_text(result)


if __name__ == "__main__":
    main()
