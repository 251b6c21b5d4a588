"""Alice's weights under the CrypTen model's parameter names, without importing CrypTen."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["weights_dict"]


def weights_dict(model: Any) -> dict[str, np.ndarray]:
    """``{"alice_weights/<param>": values}`` of the fused TextCNN (the secrets in Bob's view)."""
    w, b = model.fused_conv_weight()
    d = {
        "conv.weight": w,
        "conv.bias": b,
        "fc1.weight": model.fc1.weight,
        "fc1.bias": model.fc1.bias,
        "fc2.weight": model.fc2.weight,
        "fc2.bias": model.fc2.bias,
    }
    return {f"alice_weights/{k}": v.detach().numpy().ravel().copy() for k, v in d.items()}
