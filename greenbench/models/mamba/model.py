"""Mamba-1, built with transformers' `MambaForCausalLM`, with a fast training path (CPU, CUDA).

The presets and their analytic description are the family's card
(`greenbench.models.mamba.card`).

Fast path. transformers' pure-PyTorch Mamba (used whenever the CUDA packages `mamba-ssm` and
`causal-conv1d` are absent) trains ~80x slower than a Transformer of the same size on CPU. The
models built here therefore use `FastScanMambaMixer`, a subclass of transformers' `MambaMixer`
whose training forward computes the same function with

* greenbench's selective scan (`greenbench.models.mamba.scan`: the exact recurrence, stepped in
  cache, with a hand-written backward instead of per-step autograd nodes), time-major
  throughout, on the backend ``model.scan`` resolved to (native C kernel, Triton kernels or
  torch steps);
* the causal depthwise conv as a channels-last conv2d, so nothing is transposed to (B, D, T).

Only the instances built here are re-classed; transformers' classes are not patched. Whenever a
cache is passed (generation), or the scan backend is ``mamba-ssm`` (CUDA, with the package
installed), the mixer defers to transformers' own forward, which then uses the CUDA kernels.
Mamba ignores ``position_ids``; padding is handled through ``labels`` = -100 (and
``attention_mask`` if given).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import MambaConfig, MambaForCausalLM
from transformers.models.mamba.modeling_mamba import MambaMixer, apply_mask_to_padding_states

from greenbench.models.mamba.card import PRESETS, info
from greenbench.models.mamba.scan import DEFAULT_CHUNK_SIZE, selective_scan

__all__ = [
    "PRESETS",
    "FastScanMambaMixer",
    "build",
    "causal_depthwise_conv1d",
    "info",
    "make_config",
    "use_fast_scan",
]


def causal_depthwise_conv1d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """Causal depthwise conv over time of time-major ``x`` (T, B, C); ``weight`` is an
    `nn.Conv1d` weight (C, 1, K).

    Same result as transformers' ``conv1d(x, padding=K-1)[..., :T]`` on (B, C, T), computed as
    a channels-last conv2d over the left-padded input, so nothing is transposed.
    """
    kernel = weight.shape[-1]
    # (T+K-1, B, C) in memory is (1, C, T+K-1, B) channels-last: no copy between the two views.
    padded = F.pad(x, (0, 0, 0, 0, kernel - 1, 0))
    # (C, K) then (C, 1, K, 1): the weight's gradient then comes back with the weight's own
    # strides (DDP's gradient buckets require it), not those of a channels-last conv.
    channels = x.shape[-1]
    weight_2d = weight.squeeze(1).view(channels, 1, kernel, 1)
    out = F.conv2d(padded.unsqueeze(0).permute(0, 3, 1, 2), weight_2d, bias, groups=channels)
    return out.permute(0, 2, 3, 1).squeeze(0)


class FastScanMambaMixer(MambaMixer):
    """`MambaMixer` whose cache-free forward uses greenbench's selective scan (see module doc).

    It computes what `MambaMixer.forward` computes, time-major inside: in_proj (as two halves, x
    and gate), causal conv + SiLU, x_proj -> (dt, B, C), softplus(dt_proj(dt)), selective scan,
    + D·x, · SiLU(gate), out_proj.
    """

    scan_chunk_size: int = DEFAULT_CHUNK_SIZE
    #: native | torch | triton (CUDA) | auto (native on CPU when it builds, else torch) |
    #: mamba-ssm (transformers' forward, CUDA)
    scan_backend: str = "auto"

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):  # type: ignore[override]
        if cache_params is not None or self.scan_backend == "mamba-ssm":
            return super().forward(
                hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs
            )
        dtype = hidden_states.dtype
        mask = None if attention_mask is None else attention_mask.t()  # (T, B)
        hidden = apply_mask_to_padding_states(hidden_states, attention_mask)
        hidden = hidden.transpose(0, 1).contiguous()  # (T, B, d_model)
        x, gate = self.in_projections(hidden)
        x = self.act(causal_depthwise_conv1d(x, self.conv1d.weight, self.conv1d.bias))
        x = apply_mask_to_padding_states(x, mask)
        time_step, B, C = torch.split(
            self.x_proj(x), [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1
        )
        delta = F.softplus(self.dt_proj(time_step))
        A = -torch.exp(self.A_log.float())
        y = selective_scan(
            x, delta, A, B, C, chunk_size=self.scan_chunk_size, backend=self.scan_backend
        )
        y = (y + x * self.D) * F.silu(gate)
        return self.out_proj(y.to(dtype)).transpose(0, 1)

    def in_projections(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """in_proj as its two halves, x and the gate, of time-major ``hidden``."""
        d_inner = self.intermediate_size
        weight, bias = self.in_proj.weight, self.in_proj.bias
        x = F.linear(hidden, weight[:d_inner], None if bias is None else bias[:d_inner])
        gate = F.linear(hidden, weight[d_inner:], None if bias is None else bias[d_inner:])
        return x, gate


def use_fast_scan(model: torch.nn.Module, backend: str = "auto") -> torch.nn.Module:
    """Re-class every `MambaMixer` inside ``model`` as `FastScanMambaMixer` scanning on
    ``backend`` (in place)."""
    for module in model.modules():
        if type(module) in (MambaMixer, FastScanMambaMixer):
            module.__class__ = FastScanMambaMixer
            module.scan_backend = backend
    return model


def make_config(size: str, *, vocab_size: int | None = None) -> MambaConfig:
    """The transformers config for a preset (``size`` must be a key of `PRESETS`)."""
    p = PRESETS[size]
    return MambaConfig(
        vocab_size=vocab_size or p.vocab_size,
        hidden_size=p.d_model,
        num_hidden_layers=p.n_layers,
        state_size=p.d_state,
        expand=p.expand,
        conv_kernel=p.d_conv,
        tie_word_embeddings=False,
        use_cache=False,
    )


def build(size: str, *, vocab_size: int | None = None, kernel: str = "auto") -> torch.nn.Module:
    """A randomly initialised `MambaForCausalLM` with the fast mixer scanning on ``kernel``
    (``model.scan``: native, torch, triton, mamba-ssm, or auto for library use; runs pass the
    resolved choice); seed the RNG first."""
    return use_fast_scan(MambaForCausalLM(make_config(size, vocab_size=vocab_size)), kernel)
