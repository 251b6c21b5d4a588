"""The multi-channel 1D CNN of the MPC text-classification paper (Alice's private model).

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (Sec. 2, Fig. 2): a public
sentence encoder turns a text into a fixed-size embedding; Alice's CNN runs three parallel
Conv1d + MaxPool1d branches over that embedding (treated as a 1-channel sequence), concatenates
them, applies dropout 0.25, dense layers, and a sigmoid output (binary sentiment).

MPC-friendly details (they change no math of a branch, only which positions are kept):

* every branch's conv output is cropped to the common length ``L - max(kernel_sizes) + 1``
  (drops at most ``max(k) - min(k)`` boundary positions), so the three branches can be stacked
  and evaluated as **one** fused convolution, one max-pool and one ReLU under MPC instead of
  three of each (communication rounds are the cost in secret sharing);
* ReLU is applied after the max-pool (``relu(max(x)) == max(relu(x))``), on 1/pool of the values;
* ``input_scale`` multiplies the input (sentence encoders emit unit-norm vectors whose entries are
  ~0.05: far too small for the default init, the model trains badly without it); it is folded into
  the convolution weights (:meth:`fused_conv_weight`), so the MPC model never sees it;
* two presets (:data:`PRESETS`): ``"paper"`` (the architecture above, stride-1 convolutions,
  pool 4, ReLU) and ``"fast"`` (same three branches + pooling + dense layers, but stride-2
  convolutions with 1 channel per branch, pool 2 and no ReLU after the pool — the max is the
  non-linearity — which needs ~14x fewer secure comparisons and fewer rounds; see
  ``docs/readme/70-mpc.md`` for its accuracy);
* :meth:`TextCNN.forward` returns the logit; the sigmoid is :meth:`predict_proba` and the label
  is ``logit > 0`` (equal to ``sigmoid > 0.5`` and cheaper under MPC).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from privnlp.core.errors import InvalidArgument, check_positive, check_probability, check_range
from privnlp.core.rng import as_torch

__all__ = ["TextCNN", "train_textcnn", "PRESETS"]

#: Architectures (kwargs of :class:`TextCNN` besides ``embed_dim``). The paper does not give its
#: kernel / channel / pool sizes; ``"paper"`` is our faithful instantiation of its Fig. 2.
PRESETS: dict[str, dict[str, Any]] = {
    "paper": {
        "kernel_sizes": (3, 4, 5),
        "channels": 4,
        "pool": 4,
        "hidden": 32,
        "stride": 1,
        "pool_relu": True,
    },
    "fast": {
        "kernel_sizes": (3, 4, 5),
        "channels": 1,
        "pool": 2,
        "hidden": 32,
        "stride": 2,
        "pool_relu": False,
    },
}
_ARCH_KEYS = ("embed_dim", "kernel_sizes", "channels", "pool", "hidden", "stride", "pool_relu")


class TextCNN(nn.Module):
    """Multi-channel 1D CNN over a sentence embedding of size ``embed_dim``.

    Args:
        embed_dim: length of the input embedding (384 for all-MiniLM-L6-v2).
        kernel_sizes: one Conv1d branch per size (paper: three parallel branches).
        channels: output channels per branch.
        pool: MaxPool1d kernel (stride = kernel, as in PyTorch).
        hidden: width of the hidden dense layer.
        dropout: dropout on the concatenation (paper: 0.25).
        stride: stride of every convolution (1 in the paper preset).
        pool_relu: ReLU after the max-pool (paper preset); ``False`` drops it (fast preset).
        input_scale: constant the input is multiplied by (folded into the conv weights).
    """

    def __init__(
        self,
        embed_dim: int,
        *,
        kernel_sizes: Sequence[int] = (3, 4, 5),
        channels: int = 4,
        pool: int = 4,
        hidden: int = 32,
        dropout: float = 0.25,
        stride: int = 1,
        pool_relu: bool = True,
        input_scale: float = 1.0,
    ) -> None:
        super().__init__()
        check_range("embed_dim", embed_dim, 2, integer=True)
        if not kernel_sizes:
            raise InvalidArgument("kernel_sizes must name at least one kernel size; got ()")
        for k in kernel_sizes:
            check_range("kernel_sizes[i]", k, 1, embed_dim, integer=True)
        check_range("channels", channels, 1, integer=True)
        check_range("pool", pool, 1, integer=True)
        check_range("hidden", hidden, 1, integer=True)
        check_probability("dropout", dropout, open_high=True)
        check_range("stride", stride, 1, integer=True)
        check_positive("input_scale", input_scale)
        self.embed_dim = int(embed_dim)
        self.kernel_sizes = tuple(int(k) for k in kernel_sizes)
        self.channels = int(channels)
        self.pool = int(pool)
        self.hidden = int(hidden)
        self.dropout = float(dropout)
        self.stride = int(stride)
        self.pool_relu = bool(pool_relu)
        self.input_scale = float(input_scale)
        if self.pooled_length < 1:
            raise InvalidArgument(
                f"pool must be in [1, {self.conv_length}] for embed_dim={embed_dim}; got {pool}"
            )
        self.convs = nn.ModuleList(
            nn.Conv1d(1, self.channels, k, stride=self.stride) for k in self.kernel_sizes
        )
        self.drop = nn.Dropout(self.dropout)
        self.fc1 = nn.Linear(self.flat_dim, self.hidden)
        self.fc2 = nn.Linear(self.hidden, 1)

    @property
    def conv_length(self) -> int:
        return (self.embed_dim - max(self.kernel_sizes)) // self.stride + 1

    @property
    def pooled_length(self) -> int:
        return self.conv_length // self.pool

    @property
    def flat_dim(self) -> int:
        return len(self.kernel_sizes) * self.channels * self.pooled_length

    def fused_conv_weight(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All branches as one Conv1d(1, n_branches*channels, max(k), stride) (kernels right-padded
        with 0, ``input_scale`` folded into the weights)."""
        kmax = max(self.kernel_sizes)
        ws, bs = [], []
        for conv, k in zip(self.convs, self.kernel_sizes):
            w = conv.weight.detach()
            ws.append(torch.nn.functional.pad(w, (0, kmax - k)) * self.input_scale)
            bs.append(conv.bias.detach())
        return torch.cat(ws, 0), torch.cat(bs, 0)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.embed_dim:
            raise InvalidArgument(
                f"x must have shape (batch, {self.embed_dim}); got {tuple(x.shape)}"
            )
        h = x.unsqueeze(1) * self.input_scale
        L = self.conv_length
        outs = [conv(h)[..., :L] for conv in self.convs]
        z = torch.cat(outs, 1)
        z = nn.functional.max_pool1d(z, self.pool)  # stride = kernel
        if self.pool_relu:
            z = torch.relu(z)
        return z.flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch,)."""
        z = self.drop(self.features(x))
        z = torch.relu(self.fc1(z))
        return self.fc2(z).squeeze(-1)

    @torch.no_grad()
    def predict_proba(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.forward(x))

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return (self.forward(x) > 0).long()

    def config(self) -> dict[str, Any]:
        return {
            "embed_dim": self.embed_dim,
            "kernel_sizes": list(self.kernel_sizes),
            "channels": self.channels,
            "pool": self.pool,
            "hidden": self.hidden,
            "dropout": self.dropout,
            "stride": self.stride,
            "pool_relu": self.pool_relu,
            "input_scale": self.input_scale,
        }

    def public_config(self) -> dict[str, Any]:
        """The architecture (public in pi_TEXT): no dropout (training only), no input scale (folded
        into the secret conv weights)."""
        c = self.config()
        return {k: c[k] for k in _ARCH_KEYS}


def train_textcnn(
    model: TextCNN,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int = 20,
    lr: float = 0.002,
    batch_size: int = 50,
    rng: Any,
) -> list[float]:
    """Plaintext training (Adam, lr 0.002, batch 50 as in the paper; binary cross-entropy).

    Returns the per-epoch mean losses. ``rng`` seeds the shuffling / dropout (``torch.Generator``,
    numpy ``Generator`` or int).
    """

    check_range("epochs", epochs, 1, integer=True)
    check_positive("lr", lr)
    check_range("batch_size", batch_size, 1, integer=True)
    x = torch.as_tensor(x, dtype=torch.float32)
    y = torch.as_tensor(y, dtype=torch.float32)
    if len(x) != len(y) or len(x) == 0:
        raise InvalidArgument(
            f"x and y must be non-empty and of equal length; got {len(x)} and {len(y)}"
        )
    gen = as_torch(rng)
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))  # dropout masks
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    lossf = nn.BCEWithLogitsLoss()
    losses = []
    model.train()
    for _ in range(int(epochs)):
        perm = torch.randperm(len(x), generator=gen)
        tot, n = 0.0, 0
        for i in range(0, len(x), batch_size):
            idx = perm[i : i + batch_size]
            opt.zero_grad()
            loss = lossf(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            tot += loss.item() * len(idx)
            n += len(idx)
        losses.append(tot / n)
    model.eval()
    return losses
