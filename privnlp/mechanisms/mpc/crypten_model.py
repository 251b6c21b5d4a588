"""Alice's TextCNN built directly in ``crypten.nn`` (imports CrypTen: load lazily).

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (Sec. 3-4, pi_Conv1D,
pi_MaxPool1D, pi_ReLU, pi_Dense). ``crypten.nn.from_pytorch`` is not used: it goes through the
ONNX exporter (broken on torch 2.x for CrypTen 0.4.1) and has no 1D pooling.

MaxPool1d: CrypTen has none. ``method="tournament"`` (default) is the paper's pairwise
tournament: ``max(a, b) = b + relu(a - b)``, ceil(log2 k) comparison rounds, no argmax;
``method="max_pool2d"`` reshapes to (N, C, 1, L) and calls CrypTen's ``max_pool2d`` with a
(1, k) kernel (computes a one-hot argmax too: slower). Stride defaults to the kernel size,
as in PyTorch.
"""

from __future__ import annotations

from typing import Any

import torch

from privnlp.core.errors import InvalidArgument

from ._crypten_shim import import_crypten, register_safe_classes

crypten = import_crypten()
cnn = crypten.nn

__all__ = ["MaxPool1d", "CrypTenTextCNN", "build_crypten_textcnn", "tournament_max"]


def tournament_max(x: Any) -> Any:
    """Max over the last dim of a CrypTen tensor by a pairwise tournament (log2 rounds)."""
    t = x.size(-1)
    while t > 1:
        h = t // 2
        a = x[..., :h]
        b = x[..., h : 2 * h]
        m = b + (a - b).relu()
        x = crypten.cat([m, x[..., 2 * h : t]], dim=-1) if t % 2 else m
        t = x.size(-1)
    return x.squeeze(-1)


class MaxPool1d(cnn.Module):
    """1D max pooling for CrypTen tensors of shape (N, C, L) (plaintext tensors work too)."""

    def __init__(
        self, kernel_size: int, stride: int | None = None, method: str = "tournament"
    ) -> None:
        super().__init__()
        if int(kernel_size) < 1:
            raise InvalidArgument(f"kernel_size must be >= 1; got {kernel_size}")
        if method not in ("tournament", "max_pool2d"):
            raise InvalidArgument(f"method must be 'tournament' or 'max_pool2d'; got {method!r}")
        self.kernel_size = int(kernel_size)
        self.stride = int(stride) if stride is not None else int(kernel_size)
        self.method = method

    def forward(self, x: Any) -> Any:
        k, s = self.kernel_size, self.stride
        if torch.is_tensor(x):
            return torch.nn.functional.max_pool1d(x, k, s)
        n, c, L = x.size()
        if self.method == "max_pool2d":
            y = x.unsqueeze(2).max_pool2d((1, k), stride=(1, s))
            return y.squeeze(2)
        if s != k:  # overlapping / gapped windows: gather them with unfold on the shares
            out_len = (L - k) // s + 1
            idx = (torch.arange(out_len) * s).unsqueeze(1) + torch.arange(k).unsqueeze(0)
            windows = x[..., idx.flatten()].view(n, c, out_len, k)
            return tournament_max(windows)
        out_len = L // k
        windows = x[..., : out_len * k].view(n, c, out_len, k)
        return tournament_max(windows)


class CrypTenTextCNN(cnn.Module):
    """The fused TextCNN (see :class:`privnlp.models.cnn.TextCNN`) as a ``crypten.nn`` module.

    ``forward`` returns the logits (N, 1); no sigmoid (the label is the logit's sign).
    """

    def __init__(
        self,
        embed_dim: int,
        kernel_sizes: tuple[int, ...],
        channels: int,
        pool: int,
        hidden: int,
        pool_method: str = "tournament",
        stride: int = 1,
        pool_relu: bool = True,
    ) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        kmax = max(kernel_sizes)
        n_out = len(kernel_sizes) * channels
        self.conv = cnn.Conv1d(1, n_out, kmax, stride=int(stride))
        self.pool = MaxPool1d(pool, method=pool_method)
        self.relu = cnn.ReLU()
        self.pool_relu = bool(pool_relu)
        self.fc1 = cnn.Linear(n_out * (((embed_dim - kmax) // int(stride) + 1) // pool), hidden)
        self.fc2 = cnn.Linear(hidden, 1)

    def features(self, x: Any) -> Any:
        z = self.pool(self.conv(x))
        if self.pool_relu:
            z = self.relu(z)
        return z.flatten(1)

    def forward(self, x: Any) -> Any:
        z = self.features(x)
        z = self.relu(self.fc1(z))
        return self.fc2(z)


register_safe_classes(MaxPool1d, CrypTenTextCNN)


def build_crypten_textcnn(
    config: dict[str, Any],
    state: dict[str, torch.Tensor] | None = None,
    pool_method: str = "tournament",
) -> CrypTenTextCNN:
    """Build the CrypTen model from a :meth:`TextCNN.config` dict; ``state`` = Alice's
    plaintext weights (fused conv weight/bias, fc1, fc2), ``None`` on Bob's side (zeros of the
    right shape: the shapes are public, the values are not)."""
    m = CrypTenTextCNN(
        int(config["embed_dim"]),
        tuple(config["kernel_sizes"]),
        int(config["channels"]),
        int(config["pool"]),
        int(config["hidden"]),
        pool_method=pool_method,
        stride=int(config.get("stride", 1)),
        pool_relu=bool(config.get("pool_relu", True)),
    )
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.zero_()
            if state is not None:
                p.copy_(state[name].reshape(p.shape))
    return m


def plaintext_state(model: Any) -> dict[str, torch.Tensor]:
    """The TextCNN's weights in the CrypTen model's parameter names (fused conv)."""
    w, b = model.fused_conv_weight()
    return {
        "conv.weight": w,
        "conv.bias": b,
        "fc1.weight": model.fc1.weight.detach().clone(),
        "fc1.bias": model.fc1.bias.detach().clone(),
        "fc2.weight": model.fc2.weight.detach().clone(),
        "fc2.bias": model.fc2.bias.detach().clone(),
    }
