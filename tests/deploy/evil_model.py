"""A model factory whose import leaves a mark: a node that imports it because the server named it is caught."""

import os
from pathlib import Path

Path(os.environ.get("FEDPRIV_NODE_STATE", "."), "evil-model-imported").write_text("imported at the server's request")


def factory(input_shape, num_classes):  # noqa: ANN001, ANN201 - never called: the node must refuse before
    """Never reached on a node under its own policy."""
    raise AssertionError("the node imported and called a model factory the server named")
