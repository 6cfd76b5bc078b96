"""The Llama family (Llama 2 / 3.x, Mistral-style, SmolLM2): RMSNorm, rotary, grouped-query
attention, SwiGLU. Weight names are tenor's (see tenor/models/config.py)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from tenor.models import native
from tenor.models.block_weights import Blocks, ByteBlocks, PackedRows, PackedWeight
from tenor.models.config import ModelConfig
from tenor.models.decoder import DecoderLM, lookup_table
from tenor.models.kernels import DecodeKernel, Int8BlockKernel, Int8GemmKernel
from tenor.models.layers import AttentionBatch, PagedKVCache, ParallelLinear, Rotary, paged_attention

# A checkpoint's tensor, or a weight kept packed as a GGUF holds it (LoadedCheckpoint.blocks).
Weight = torch.Tensor | PackedWeight


class LlamaBlock(nn.Module):
    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.config = config
        d = config.hidden_size
        self.attn_norm = nn.Parameter(torch.ones(d), requires_grad=False)
        self.mlp_norm = nn.Parameter(torch.ones(d), requires_grad=False)
        self.qkv = ParallelLinear(d, config.q_size + 2 * config.kv_size, bias=False, parallel="column")
        self.o = ParallelLinear(config.q_size, d, bias=False, parallel="row")
        self.gate_up = ParallelLinear(d, 2 * config.intermediate_size, bias=False, parallel="column")
        self.down = ParallelLinear(config.intermediate_size, d, bias=False, parallel="row")

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
        h = rms_norm(x, self.attn_norm, c.norm_eps, batch.native)
        qkv = self.qkv(h, decoding)
        t = qkv.shape[0]
        if batch.native and qkv.dtype == torch.float32 and rotary.rot_dim == c.head_dim:
            # One pass: rotate q and k in place, write k and v to the cache.
            native.rotary_kv_write(
                qkv,
                cos,
                sin,
                cache.kv[self.index, 0],
                cache.kv[self.index, 1],
                batch.slot_mapping,
                c.num_heads,
                c.num_kv_heads,
                *cache.layer_scales(self.index),
            )
            q = qkv[:, : c.q_size].view(t, c.num_heads, c.head_dim)
            k = qkv[:, c.q_size : c.q_size + c.kv_size].view(t, c.num_kv_heads, c.head_dim)
            v = qkv[:, c.q_size + c.kv_size :].view(t, c.num_kv_heads, c.head_dim)
            attn = paged_attention(q, k, v, cache, self.index, batch, written=True)
        else:
            # q and k rotate together: one rotary call over [T, H + K, E].
            qk = rotary.apply(qkv[:, : c.q_size + c.kv_size].view(t, -1, c.head_dim), cos, sin)
            q, k = qk[:, : c.num_heads], qk[:, c.num_heads :]
            v = qkv[:, c.q_size + c.kv_size :].view(t, c.num_kv_heads, c.head_dim)
            attn = paged_attention(q, k, v, cache, self.index, batch)
        attn = attn.reshape(t, c.q_size)
        x = x + (self.o.forward_bf16(attn) if self.o.computes_bf16(t) else self.o(attn, decoding))
        h = rms_norm(x, self.mlp_norm, c.norm_eps, batch.native)
        if batch.native and self.gate_up.computes_bf16(t) and self.down.computes_bf16(t):
            # Big batches on bf16 GEMMs: SiLU reads and writes bf16, and the residual add takes
            # bf16 (promoted exactly), the same numbers without three float32 conversion passes.
            return x + self.down.forward_bf16(silu_mul(self.gate_up.forward_bf16(h), True))
        return x + self.down(silu_mul(self.gate_up(h, decoding), batch.native), decoding)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, fused: bool) -> torch.Tensor:
    if fused and x.dtype == torch.float32:
        return native.rms_norm(x, weight, eps)
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def silu_mul(gate_up: torch.Tensor, fused: bool) -> torch.Tensor:
    if fused and gate_up.dtype in (torch.float32, torch.bfloat16):
        return native.silu_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class LlamaModel(DecoderLM):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Parameter(torch.empty(config.vocab_size, config.hidden_size), requires_grad=False)
        self.layers = nn.ModuleList(LlamaBlock(config, i) for i in range(config.num_layers))
        self.norm = nn.Parameter(torch.ones(config.hidden_size), requires_grad=False)
        self.lm_head = ParallelLinear(config.hidden_size, config.vocab_size, bias=False, parallel="column")
        self.rotary = Rotary(
            config.head_dim, config.max_position_embeddings, config.rope_theta, config.rope_scaling, interleaved=False
        )
        self._fused_weights: torch.Tensor | None = None  # built on the first fused step
        self._fused_gemm = False  # whether every layer has its integer GEMM's weights in _fused_weights

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        cache: PagedKVCache,
        batch: AttentionBatch,
        logits_rows: torch.Tensor,
    ) -> torch.Tensor:
        layer_weights = self._fused_layer_weights() if self._can_fuse(cache, batch, len(input_ids)) else None
        if layer_weights is None:
            return super().forward(input_ids, positions, cache, batch, logits_rows)
        c = self.config
        if batch.prefills:  # every row over its own prefix, prompt rows in tiles
            assert batch.row_blocks is not None and batch.row_lengths is not None  # _can_fuse checked
            table, lengths, span, tile = batch.row_blocks, batch.row_lengths, batch.row_span, native.ATTENTION_TILE
        else:
            assert batch.decode_blocks is not None and batch.decode_lengths is not None  # _can_fuse checked
            table, lengths, span, tile = batch.decode_blocks, batch.decode_lengths, batch.decode_span, 1
        x = self.embed_tokens(input_ids)  # a fresh tensor: the layers run in place on it
        cos, sin = self.rotary.tables(positions)
        native.llama_layers(
            x,
            layer_weights,
            cache.kv,
            cos,
            sin,
            batch.slot_mapping,
            table,
            lengths,
            cache.native_scratch,
            c.num_heads,
            c.intermediate_size,
            cache.block_size,
            span,
            tile,
            c.norm_eps,
            cache.scales,
            native.GEMM_MIN_ROWS if not batch.prefills else native.INT8_MAX_ROWS + 1,
        )
        return self.lm_head(self.final_norm(x.index_select(0, logits_rows)), decoding=True).float()

    def _can_fuse(self, cache: PagedKVCache, batch: AttentionBatch, num_tokens: int) -> bool:
        """A step of float32 rows on the native kernels (one process) whose layers can run in one
        call: decode rows, and prompt rows where they attend through tenor's kernel; a few on the
        decode kernel, or more where every layer's big batches take the integer GEMM."""
        rows_ready = (
            batch.row_blocks is not None and batch.row_lengths is not None
            if batch.prefills
            else batch.decode_blocks is not None and batch.decode_lengths is not None
        )
        return (
            batch.native
            and rows_ready
            and cache.dtype == torch.float32
            and (cache.kv.dtype in native.CACHE_DTYPES or cache.quantized)
            and self.rotary.rot_dim == self.config.head_dim
            and (num_tokens <= native.INT8_MAX_ROWS or (self._fused_layer_weights() is not None and self._fused_gemm))
        )

    def _fused_layer_weights(self) -> torch.Tensor | None:
        """[L, 34] int64 pointers into every layer's weights (and their bits) for native.llama_layers, or None when a
        layer cannot take that path (weights not on tenor's decode kernels, or sharded over a group)."""
        if self._fused_weights is None:
            rows = [self._layer_pointers(block) for block in self.layers]
            usable = all(row is not None for row in rows)
            self._fused_weights = torch.tensor(rows if usable else [], dtype=torch.int64)
            self._fused_gemm = usable and all(row is not None and all(row[18::4]) for row in rows)
        return self._fused_weights if self._fused_weights.numel() else None

    @staticmethod
    def _layer_pointers(block: nn.Module) -> list[int] | None:
        """attn_norm, mlp_norm, the four linears' decode weights, then their integer GEMM's (zeros
        for a linear whose big batches take another kernel)."""
        assert isinstance(block, LlamaBlock)
        row = [block.attn_norm.data_ptr(), block.mlp_norm.data_ptr()]
        gemm: list[int] = []
        for linear in (block.qkv, block.o, block.gate_up, block.down):
            kernel = linear.kernel
            if not isinstance(kernel, DecodeKernel) or linear.has_bias or linear._reduce is not None:
                return None
            row += [kernel.q.data_ptr(), kernel.bits, kernel.scales.data_ptr(), kernel.offsets.data_ptr()]
            if isinstance(kernel.batched, Int8GemmKernel):
                w = kernel.batched.weights
                gemm += [w.levels.data_ptr(), w.bits, w.steps.data_ptr(), w.offsets.data_ptr()]
            else:
                gemm += [0] * 4
        return row + gemm

    def load_weights(
        self, weights: Mapping[str, Weight], dtype: torch.dtype, weight_format: str = "dense", device: str = "cpu"
    ) -> None:
        c = self.config
        self._fused_weights, self._fused_gemm = None, False
        take = WeightTaker(weights, weight_format, device)
        self.compute_dtype = dtype
        embed = take.embedding("embed.weight", (c.vocab_size, c.hidden_size), dtype)
        self.embed_blocks = None if isinstance(embed, torch.Tensor) else embed
        if not isinstance(embed, torch.Tensor):
            table = torch.empty(0, c.hidden_size)
        else:  # a tied head on float weights keeps the table as its weight
            table = lookup_table(embed, dtype, kept_by_head=c.tie_word_embeddings and weight_format == "dense")
        self.embed = nn.Parameter(table, requires_grad=False)
        for i, block in enumerate(self.layers):
            p = f"layers.{i}."
            block.attn_norm = nn.Parameter(
                take.float(p + "attn_norm.weight", (c.hidden_size,)).to(dtype), requires_grad=False
            )
            block.mlp_norm = nn.Parameter(
                take.float(p + "mlp_norm.weight", (c.hidden_size,)).to(dtype), requires_grad=False
            )
            for name in ("attn.qkv", "attn.o", "mlp.gate_up", "mlp.down"):
                take.linear(getattr(block, name.split(".")[1]), p + name, dtype)
        self.norm = nn.Parameter(take.float("norm.weight", (c.hidden_size,)).to(dtype), requires_grad=False)
        if c.tie_word_embeddings:
            # The table as it is (a 16-bit one is widened by the kernels as they pack it) or its
            # blocks; packed rows give the head their values.
            tied: Weight = self.embed.data if self.embed_blocks is None else self.embed_blocks
            if isinstance(tied, PackedRows):
                tied = tied.dequantize()
            self.lm_head.load(tied, dtype, weight_format=weight_format)
            head = self.lm_head.kernel
            if isinstance(self.embed_blocks, ByteBlocks) and isinstance(head, Int8BlockKernel):
                # The head's decode kernel holds the same levels, steps and offsets (in huge pages): one copy.
                self.embed_blocks = ByteBlocks(head.q, head.scales, head.offsets)
        else:
            take.linear(self.lm_head, "lm_head", dtype)
        self.rotary.to_dtype(dtype)
        take.check_all_used()

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm, self.config.norm_eps, self.native_kernels)


class WeightTaker:
    """Hands out checkpoint tensors by name with shape checks, on the serving device, and
    notices leftovers. A weight kept in a GGUF's blocks goes to its linear layer as it is (the
    CPU's integer kernels read the blocks), and an embedding to the model (`embedding`); anything
    else that asks for one gets floats."""

    def __init__(self, weights: Mapping[str, Weight], weight_format: str = "dense", device: str = "cpu") -> None:
        self.weights = weights
        self.weight_format = weight_format
        self.device = device
        self.used: set[str] = set()

    def _take(self, name: str, shape: tuple[int, ...] | None = None) -> Weight:
        if name not in self.weights:
            raise ValueError(f"checkpoint is missing tensor {name!r}")
        self.used.add(name)
        weight = self.weights[name]
        if shape is not None and tuple(weight.shape) != shape:
            raise ValueError(f"tensor {name!r} has shape {tuple(weight.shape)}, expected {shape}")
        return weight

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        return self._on_device(self._take(name, shape))

    def _on_device(self, weight: Weight) -> torch.Tensor:
        # One tensor at a time: a GPU never holds the checkpoint's copy and the served one of every weight.
        return (weight if isinstance(weight, torch.Tensor) else weight.dequantize()).to(self.device)

    def float(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        return self.get(name, shape)

    def embedding(self, name: str, shape: tuple[int, int], dtype: torch.dtype) -> Weight:
        """An embedding table: as its checkpoint packed it (blocks or rows' bytes) where float32
        rows are served on the CPU (rows are looked up from them: a quarter of the table's bytes
        or less), else floats."""
        weight = self._take(name, shape)
        if not isinstance(weight, torch.Tensor) and self.device == "cpu" and dtype == torch.float32:
            return weight
        return self._on_device(weight)

    def linear(self, layer: ParallelLinear, prefix: str, dtype: torch.dtype) -> None:
        shape = (layer.out_features, layer.in_features)
        weight: Weight = self._take(prefix + ".weight", shape)
        if not isinstance(weight, Blocks) or self.device != "cpu":
            weight = self._on_device(weight)
        scale = self.get(prefix + ".weight_scale") if prefix + ".weight_scale" in self.weights else None
        bias = self.float(prefix + ".bias", (layer.out_features,)) if layer.has_bias else None
        if scale is None and isinstance(weight, torch.Tensor) and weight.dtype == torch.int8:
            raise ValueError(f"int8 tensor {prefix}.weight has no {prefix}.weight_scale")
        try:
            layer.load(weight, dtype, scale=scale, bias=bias, weight_format=self.weight_format)
        except ValueError as exc:
            raise ValueError(f"{prefix}: {exc}") from None

    def check_all_used(self) -> None:
        extra = sorted(set(self.weights) - self.used)
        if extra:
            raise ValueError(f"checkpoint has tensors the model does not use: {', '.join(extra[:5])}")
