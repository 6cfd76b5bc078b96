"""GPT-J, the SAX seed's model: attention and MLP in parallel off one LayerNorm, partial
rotary ("rotate every two") on the first rotary_dim dims of each head, biases as in HF."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from tenor.models.config import ModelConfig
from tenor.models.decoder import DecoderLM, lookup_table
from tenor.models.layers import AttentionBatch, PagedKVCache, ParallelLinear, Rotary, paged_attention
from tenor.models.llama import Weight, WeightTaker


class GPTJBlock(nn.Module):
    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.config = config
        d = config.hidden_size
        self.ln_weight = nn.Parameter(torch.ones(d), requires_grad=False)
        self.ln_bias = nn.Parameter(torch.zeros(d), requires_grad=False)
        # q_size (heads * head_dim) equals d for the whole model; a tensor-parallel rank has fewer heads.
        self.qkv = ParallelLinear(d, 3 * config.q_size, bias=False, parallel="column")
        self.o = ParallelLinear(config.q_size, d, bias=False, parallel="row")
        self.fc_in = ParallelLinear(d, config.intermediate_size, bias=True, parallel="column")
        self.fc_out = ParallelLinear(config.intermediate_size, d, bias=True, parallel="row")

    def forward(
        self,
        x: torch.Tensor,
        rotary: Rotary,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: PagedKVCache,
        batch: AttentionBatch,
    ) -> torch.Tensor:
        c = self.config
        decoding = not batch.prefills  # a decode step's rows: see ParallelLinear.forward
        h = F.layer_norm(x, (c.hidden_size,), self.ln_weight, self.ln_bias, c.norm_eps)
        t = h.shape[0]
        qkv = self.qkv(h, decoding).view(t, 3 * c.num_heads, c.head_dim)
        qk = rotary.apply(qkv[:, : 2 * c.num_heads], cos, sin)
        q, k, v = qk[:, : c.num_heads], qk[:, c.num_heads :], qkv[:, 2 * c.num_heads :]
        attn = self.o(paged_attention(q, k, v, cache, self.index, batch).reshape(t, c.q_size), decoding)
        mlp = self.fc_out(F.gelu(self.fc_in(h, decoding), approximate="tanh"), decoding)
        return x + attn + mlp


class GPTJModel(DecoderLM):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Parameter(torch.empty(config.vocab_size, config.hidden_size), requires_grad=False)
        self.layers = nn.ModuleList(GPTJBlock(config, i) for i in range(config.num_layers))
        self.ln_f_weight = nn.Parameter(torch.ones(config.hidden_size), requires_grad=False)
        self.ln_f_bias = nn.Parameter(torch.zeros(config.hidden_size), requires_grad=False)
        self.lm_head = ParallelLinear(config.hidden_size, config.vocab_size, bias=True, parallel="column")
        assert config.rotary_dim is not None  # validated by ModelConfig
        self.rotary = Rotary(
            config.rotary_dim, config.max_position_embeddings, config.rope_theta, None, interleaved=True
        )

    def load_weights(
        self, weights: Mapping[str, Weight], dtype: torch.dtype, weight_format: str = "dense", device: str = "cpu"
    ) -> None:
        c = self.config
        take = WeightTaker(weights, weight_format, device)
        d = (c.hidden_size,)

        def param(name: str, shape: tuple[int, ...]) -> nn.Parameter:
            return nn.Parameter(take.float(name, shape).to(dtype), requires_grad=False)

        self.compute_dtype = dtype
        table = take.float("embed.weight", (c.vocab_size, c.hidden_size))
        self.embed = nn.Parameter(lookup_table(table, dtype, kept_by_head=False), requires_grad=False)  # head untied
        for i, block in enumerate(self.layers):
            p = f"layers.{i}."
            block.ln_weight, block.ln_bias = param(p + "ln.weight", d), param(p + "ln.bias", d)
            for name in ("attn.qkv", "attn.o", "mlp.fc_in", "mlp.fc_out"):
                take.linear(getattr(block, name.split(".")[1]), p + name, dtype)
        self.ln_f_weight, self.ln_f_bias = param("ln_f.weight", d), param("ln_f.bias", d)
        take.linear(self.lm_head, "lm_head", dtype)
        self.rotary.to_dtype(dtype)
        take.check_all_used()

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.config.hidden_size,), self.ln_f_weight, self.ln_f_bias, self.config.norm_eps)
