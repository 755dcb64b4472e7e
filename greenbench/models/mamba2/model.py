"""Mamba-2, built with transformers' `Mamba2ForCausalLM`, training on the scan ``model.scan`` picks.

The presets (and the SSD scan's chunk length each sets) and their analytic description are the
family's card (`greenbench.models.mamba2.card`).

Training path. transformers' `Mamba2Mixer` runs, without the CUDA packages, its pure-torch SSD
(`mamba2_chunk_scan`); the models built here re-class each mixer instance (transformers' classes
are not patched) as `SSDMamba2Mixer`, whose cache-free forward computes the same function with
the scan backend the run resolved (`greenbench.models.mamba2.kernels`): our chunked SSD in torch
(`greenbench.models.mamba2.ssd`), fla-core's ``chunk_simple_gla`` or mamba-ssm's
``mamba_chunk_scan_combined`` (CUDA). Whenever a cache is passed (generation), the mixer defers to
transformers' forward. Mamba-2 ignores ``position_ids``; padding is handled through ``labels`` =
-100 (and ``attention_mask`` if given).

The mixer around the scan (in_proj, the causal conv over x, B and C, dt's softplus, the D skip,
the gated RMSNorm, out_proj) stays in ordinary autograd; the conv runs as a channels-last conv2d,
as Mamba-1's does here. Speed against transformers' own mixer: `greenbench.models.mamba2.ssd`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import Mamba2Config, Mamba2ForCausalLM
from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer, apply_mask_to_padding_states

from greenbench.models.mamba2.card import PRESETS, info
from greenbench.models.mamba2.kernels import scan_function

__all__ = [
    "PRESETS",
    "SSDMamba2Mixer",
    "build",
    "causal_depthwise_conv1d",
    "info",
    "make_config",
    "use_ssd_scan",
]


def causal_depthwise_conv1d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """Causal depthwise conv over time of batch-major ``x`` (B, T, C); ``weight`` is an
    `nn.Conv1d` weight (C, 1, K).

    Same result as transformers' ``conv1d(x.transpose(1, 2), padding=K-1)[..., :T]``, computed
    as a channels-last conv2d over the left-padded input, so nothing is transposed (the
    batch-major twin of `greenbench.models.mamba.causal_depthwise_conv1d`).
    """
    kernel, channels = weight.shape[-1], x.shape[-1]
    # (B, T+K-1, C) in memory is (B, C, T+K-1, 1) channels-last: no copy between the two views.
    padded = F.pad(x, (0, 0, kernel - 1, 0)).unsqueeze(2).permute(0, 3, 1, 2)
    # (C, 1, K, 1) from (C, K): the weight's gradient keeps the weight's own strides.
    weight_2d = weight.squeeze(1).view(channels, 1, kernel, 1)
    out = F.conv2d(padded, weight_2d, bias, groups=channels)
    return out.permute(0, 2, 3, 1).squeeze(2)


class SSDMamba2Mixer(Mamba2Mixer):
    """`Mamba2Mixer` whose cache-free forward runs the scan on ``scan_backend`` (module doc).

    It computes what `Mamba2Mixer.forward` computes without a cache: in_proj -> (gate, xBC, dt),
    causal conv + SiLU over xBC, split into (x, B, C), dt = softplus(dt + dt_bias) (clamped to
    ``time_step_limit``), the scan, + D·x, the gated RMSNorm ``norm(y · SiLU(gate))``, out_proj.
    """

    #: torch | fla | mamba-ssm | auto (resolved by the tensors' device at the first call)
    scan_backend: str = "auto"

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):  # type: ignore[override]
        if cache_params is not None:
            return super().forward(
                hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs
            )
        batch, seq_len, _ = hidden_states.shape
        heads, head_dim = self.num_heads, self.head_dim
        groups, state = self.n_groups, self.ssm_state_size
        dtype = hidden_states.dtype
        hidden = apply_mask_to_padding_states(hidden_states, attention_mask)
        gate, xBC, dt = self.in_proj(hidden).split(
            [self.intermediate_size, self.conv_dim, heads], dim=-1
        )
        xBC = self.act(self.conv(xBC))
        xBC = apply_mask_to_padding_states(xBC, attention_mask)
        x, B, C = xBC.split([self.intermediate_size, groups * state, groups * state], dim=-1)
        dt = F.softplus(dt + self.dt_bias)
        low, high = self.time_step_limit
        if (low, high) != (0.0, float("inf")):
            dt = dt.clamp(low, high)
        A = -torch.exp(self.A_log.float())
        x = x.reshape(batch, seq_len, heads, head_dim)
        y = self.scan(
            x,
            dt,
            A,
            B.reshape(batch, seq_len, groups, state),
            C.reshape(batch, seq_len, groups, state),
        )
        y = y.float() + x.float() * self.D.float()[:, None]  # float32 up to the norm, as HF
        y = self.norm(y.reshape(batch, seq_len, self.intermediate_size), gate)
        return self.out_proj(y.to(dtype))

    def conv(self, xBC: torch.Tensor) -> torch.Tensor:
        """The causal depthwise conv over x, B and C (batch, T, conv_dim), before its SiLU."""
        return causal_depthwise_conv1d(xBC, self.conv1d.weight, self.conv1d.bias)

    def scan(
        self, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor
    ) -> torch.Tensor:
        """The SSD scan on ``scan_backend`` (arguments as `greenbench.models.mamba2.ssd_scan`)."""
        scan = scan_function(self.scan_backend, x.device.type)
        return scan(x, dt, A, B, C, chunk_size=self.chunk_size)


def use_ssd_scan(model: torch.nn.Module, backend: str = "auto") -> torch.nn.Module:
    """Re-class every `Mamba2Mixer` inside ``model`` as `SSDMamba2Mixer` scanning on
    ``backend`` (in place)."""
    for module in model.modules():
        if type(module) in (Mamba2Mixer, SSDMamba2Mixer):
            module.__class__ = SSDMamba2Mixer
            module.scan_backend = backend
    return model


def make_config(size: str, *, vocab_size: int | None = None) -> Mamba2Config:
    """The transformers config for a preset (``size`` must be a key of `PRESETS`)."""
    p = PRESETS[size]
    return Mamba2Config(
        vocab_size=vocab_size or p.vocab_size,
        hidden_size=p.d_model,
        num_hidden_layers=p.n_layers,
        state_size=p.d_state,
        expand=p.expand,
        head_dim=p.head_dim,
        num_heads=p.n_heads,
        n_groups=p.n_groups,
        conv_kernel=p.d_conv,
        chunk_size=p.chunk_size,
        tie_word_embeddings=False,
        use_cache=False,
    )


def build(size: str, *, vocab_size: int | None = None, kernel: str = "auto") -> torch.nn.Module:
    """A randomly initialised `Mamba2ForCausalLM` whose mixers scan on ``kernel`` (``model.scan``:
    torch, fla, mamba-ssm, or auto for library use; runs pass the resolved choice); seed the RNG
    first."""
    return use_ssd_scan(Mamba2ForCausalLM(make_config(size, vocab_size=vocab_size)), kernel)
