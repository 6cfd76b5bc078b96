"""Building blocks shared by the model families: linears that can be sharded, rotary
embeddings, and attention over a paged KV cache.

Shapes use letters: T tokens in the step (all sequences flattened), D model width,
H query heads, K kv heads, E head dim, S context length, B sequences.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tenor import hugepages
from tenor.models import native
from tenor.models.block_weights import Blocks
from tenor.models.config import RopeScaling
from tenor.models.kernels import LinearKernel, make_kernel


class ParallelLinear(nn.Module):
    """A linear layer that holds its shard of the weight.

    `parallel="column"` splits output features across ranks (no communication);
    `parallel="row"` splits input features and needs an all-reduce of the output, done by
    `reduce` (a no-op at world size 1). The weight lives in the kernel chosen at load
    (`tenor.models.kernels`): float, float16 for FBGEMM, or int8 with per-row scales.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, parallel: str = "column", reduce=None) -> None:
        super().__init__()
        if parallel not in ("column", "row"):
            raise ValueError(f"parallel must be 'column' or 'row', got {parallel!r}")
        self.in_features, self.out_features, self.parallel = in_features, out_features, parallel
        self.has_bias = bias
        self.kernel: LinearKernel | None = None
        self._reduce = reduce

    def load(
        self,
        weight: torch.Tensor | Blocks,
        dtype: torch.dtype,
        scale: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        weight_format: str = "dense",
    ) -> None:
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(
                f"weight shape {tuple(weight.shape)} does not match ({self.out_features}, {self.in_features})"
            )
        if self.has_bias and bias is None:
            raise ValueError("missing bias")
        self.kernel = make_kernel(weight, dtype, weight_format, scale=scale, bias=bias if self.has_bias else None)

    def forward(self, x: torch.Tensor, decoding: bool = False) -> torch.Tensor:
        """`decoding`: x holds a decode step's rows only (each a sequence's next token, no prompt's),
        which a kernel may run on a faster form (LinearKernel.decoding)."""
        assert self.kernel is not None, "load() the weights first"
        out = self.kernel.decoding(x) if decoding else self.kernel(x)
        if self._reduce is not None:
            out = self._reduce(out)
        return out

    def computes_bf16(self, rows: int) -> bool:
        """Whether a batch of `rows` runs as a bf16 GEMM on this (unsharded) layer: then
        `forward_bf16` gives the GEMM's own output, for a caller that takes bf16 (a residual add
        promotes it to float32 exactly; tenor's SiLU reads it) and so skips a conversion pass."""
        return self._reduce is None and self.kernel is not None and self.kernel.bf16_rows(rows)

    def forward_bf16(self, x: torch.Tensor) -> torch.Tensor:
        assert self.kernel is not None and self._reduce is None
        return self.kernel.bf16(x)

    def weight_nbytes(self) -> int:
        return 0 if self.kernel is None else self.kernel.nbytes()


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None) -> torch.Tensor:
    """Inverse frequencies for rotary embeddings, with Llama 3.1 or linear scaling."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if scaling is None:
        return inv_freq
    if scaling.rope_type == "linear":
        return inv_freq / scaling.factor
    # llama3: long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    low_wavelen = scaling.original_max_position_embeddings / scaling.low_freq_factor
    high_wavelen = scaling.original_max_position_embeddings / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    smooth = (scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
    out = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, blended)
    return torch.where(wavelen < high_wavelen, inv_freq, out)


class Rotary(nn.Module):
    """Rotary position embedding as cos/sin tables over `rot_dim` dims of each head.

    `interleaved=False` is Llama's "rotate half" (pairs (i, i + rot_dim/2));
    `interleaved=True` is GPT-J's "rotate every two" (pairs (2i, 2i+1)). Both are applied as
    x * cos + swap(x) * sin_signed: `swap` exchanges each pair (one roll or flip) and the
    rotation's minus sign is folded into the sin table, so a rotation costs four small ops.
    """

    cos: torch.Tensor  # registered buffers: [max_positions, rot_dim]
    sin: torch.Tensor

    def __init__(
        self, rot_dim: int, max_positions: int, theta: float, scaling: RopeScaling | None, interleaved: bool
    ) -> None:
        super().__init__()
        self.rot_dim = rot_dim
        self.interleaved = interleaved
        inv_freq = rope_inv_freq(rot_dim, theta, scaling)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)  # [P, rot/2]
        half = rot_dim // 2
        if interleaved:  # (x0, x1) -> (-x1, x0)
            angles = angles.repeat_interleave(2, dim=-1)
            sign = torch.tensor([-1.0, 1.0], dtype=torch.float64).repeat(half)
        else:  # (a, b) -> (-b, a)
            angles = torch.cat([angles, angles], dim=-1)
            sign = torch.cat([-torch.ones(half, dtype=torch.float64), torch.ones(half, dtype=torch.float64)])
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", (angles.sin() * sign).float(), persistent=False)

    def to_dtype(self, dtype: torch.dtype) -> None:
        self.cos, self.sin = self.cos.to(dtype), self.sin.to(dtype)

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for the step's positions, shaped [T, 1, rot_dim] to broadcast over heads."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)

    def _swap(self, x: torch.Tensor) -> torch.Tensor:
        if self.interleaved:
            return x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
        return x.roll(self.rot_dim // 2, dims=-1)

    # Shadows nn.Module.apply(fn), which nothing calls on a Rotary.
    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """x: [T, heads, E]; rotates the first rot_dim dims of every head."""
        if self.rot_dim == x.shape[-1]:
            return x * cos + self._swap(x) * sin
        rot, rest = x[..., : self.rot_dim], x[..., self.rot_dim :]
        return torch.cat([rot * cos + self._swap(rot) * sin, rest], dim=-1)


@dataclass
class PrefillSpan:
    """One sequence's chunk of new prompt tokens inside the step's flat token batch."""

    start: int  # first row in the step's token batch
    length: int  # new tokens in this chunk
    num_cached: int  # tokens of this sequence already in the KV cache before the chunk
    context_slots: torch.Tensor | None  # [num_cached + length] cache slots, None when num_cached == 0


@dataclass
class AttentionBatch:
    """Where the step's tokens sit in the KV cache. Built once per step, read by every layer.

    The first `num_decode` rows are decode tokens (one per sequence); prefill spans follow.
    """

    slot_mapping: torch.Tensor  # [T] cache slot each new token's k/v is written to
    num_decode: int
    decode_blocks: torch.Tensor | None  # [B, N] KV blocks of each decode sequence's context
    decode_mask: torch.Tensor | None  # [K * B, 1, N * block_size] True where the slot is context
    prefills: list[PrefillSpan]
    decode_span: int = 0  # without a mask: every decode context's length
    decode_lengths: torch.Tensor | None = None  # [B] int64 context length of each decode sequence
    native: bool = False  # use tenor's fused float32 kernels (tenor.models.native) where they apply
    # With native kernels and prefill chunks: every row's context (decode and prompt rows alike,
    # a prompt row seeing its own sequence up to itself), so that one native call attends the
    # whole step from the cache. One process only: a group's workers get None.
    row_blocks: torch.Tensor | None = None  # [T, N] KV blocks of each row's sequence
    row_lengths: torch.Tensor | None = None  # [T] int64 context length of each row
    row_span: int = 0  # the longest of row_lengths

    def to(self, device: torch.device) -> AttentionBatch:
        """The same batch with its tensors on `device` (itself when they are there already)."""
        if self.slot_mapping.device == device:
            return self

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        spans = [PrefillSpan(p.start, p.length, p.num_cached, move(p.context_slots)) for p in self.prefills]
        return dataclasses.replace(
            self,
            slot_mapping=self.slot_mapping.to(device, non_blocking=True),
            decode_blocks=move(self.decode_blocks),
            decode_mask=move(self.decode_mask),
            decode_lengths=move(self.decode_lengths),
            prefills=spans,
            row_blocks=move(self.row_blocks),
            row_lengths=move(self.row_lengths),
        )


class PagedKVCache:
    """K and V for every layer: one tensor [layers, 2, K, blocks * block_size, E].

    Slots are `block * block_size + offset`. Heads lead so that gathering a batch's blocks
    yields, per head, each sequence's context as one contiguous [S, E] matrix: decode
    attention is then two batched matmuls with no copies in between. With `quantized=True`
    k/v are int8 with one float scale per (kv head, slot), half the bytes of bf16. It lives on
    `device` (the model's); blocks leave and enter it (`export_blocks`, `import_blocks`) as CPU tensors.
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        quantized: bool = False,
        device: str = "cpu",
        kv_dtype: torch.dtype | None = None,
    ) -> None:
        """`dtype`: the model's (what reads return, and int8 scales' type); `kv_dtype`: what
        unquantized K/V are stored in when narrower (bf16 under a float32 model), else `dtype`."""
        self.num_blocks, self.block_size, self.quantized, self.dtype = num_blocks, block_size, quantized, dtype
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        self.device = torch.device(device)
        slots = num_blocks * block_size
        store = torch.int8 if quantized else (kv_dtype or dtype)
        shape = (num_layers, 2, num_kv_heads, slots, head_dim)
        on_cpu = self.device.type == "cpu"
        self.kv = (
            hugepages.zeros(shape, store, background_axis=3)
            if on_cpu
            else torch.zeros(shape, dtype=store, device=device)
        )
        self.scales = (
            torch.ones(num_layers, 2, num_kv_heads, slots, 1, dtype=dtype, device=device) if quantized else None
        )
        self._gathered = torch.empty(0, dtype=dtype, device=device)  # read_blocks' scratch, grown on demand
        self.native_scratch = native.AttentionScratch()

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: [T, K, E] for the tokens going to `slots` [T]."""
        kv = torch.stack([k, v]).transpose(1, 2)  # [2, K, T, E]
        if self.quantized:
            # In float32 and clamped: a bf16 division can round 127 up to 128, which wraps in int8.
            assert self.scales is not None  # allocated when quantized
            kv = kv.float()
            scale = kv.abs().amax(dim=-1, keepdim=True).clamp(min=1e-6) / 127.0
            self.scales[layer].index_copy_(2, slots, scale.to(self.dtype))
            kv = torch.round(kv / scale).clamp(-127, 127).to(torch.int8)
        self.kv[layer].index_copy_(2, slots, kv.to(self.kv.dtype))

    def read(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v at `slots` [L] -> [K, L, E] each."""
        kv = self.kv[layer].index_select(2, slots)
        if self.quantized:
            assert self.scales is not None
            kv = kv.to(self.dtype) * self.scales[layer].index_select(2, slots)
        return kv[0].to(self.dtype), kv[1].to(self.dtype)

    def read_blocks(self, layer: int, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v of whole blocks [B, N] -> [K * B, N * block_size, E] each, head-major.

        The result lives in a scratch buffer reused by every layer and step (valid until the next
        call): a fresh tensor of this size would cost page faults on every layer."""
        shape = (2, self.num_kv_heads, self.num_blocks, self.block_size, self.head_dim)
        flat = blocks.reshape(-1)
        if self.quantized:
            assert self.scales is not None
            scale_shape = shape[:-1] + (1,)
            kv = self.kv[layer].view(shape).index_select(2, flat)
            kv = kv.to(self.dtype) * self.scales[layer].view(scale_shape).index_select(2, flat)
        elif self.kv.dtype != self.dtype:  # narrower storage: widened, a fresh tensor
            kv = self.kv[layer].view(shape).index_select(2, flat).to(self.dtype)
        else:
            kv = self._scratch((2, self.num_kv_heads, flat.numel(), self.block_size, self.head_dim))
            torch.index_select(self.kv[layer].view(shape), 2, flat, out=kv)
        kv = kv.view(2, self.num_kv_heads * blocks.shape[0], -1, self.head_dim)
        return kv[0], kv[1]

    def layer_scales(self, layer: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """K's and V's scales of one layer, [K, slots, 1] each, as the native kernels take them;
        (None, None) for a float cache."""
        if self.scales is None:
            return None, None
        return self.scales[layer, 0], self.scales[layer, 1]

    def _block_view(self, tensor: torch.Tensor) -> torch.Tensor:
        """[layers, 2, K, slots, X] -> [layers, 2, K, blocks, block_size, X] (a view)."""
        return tensor.view(tensor.shape[:3] + (self.num_blocks, self.block_size, tensor.shape[-1]))

    def export_blocks(self, blocks: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Copies of whole blocks, as stored: k/v [layers, 2, K, B, block_size, E] (int8 when
        quantized) and, when quantized, their scales [layers, 2, K, B, block_size, 1]."""
        index = torch.tensor(blocks, dtype=torch.long, device=self.device)
        kv = self._block_view(self.kv).index_select(3, index).cpu()
        scales = self._block_view(self.scales).index_select(3, index).cpu() if self.scales is not None else None
        return kv, scales

    def import_blocks(self, blocks: list[int], kv: torch.Tensor, scales: torch.Tensor | None) -> None:
        """Writes blocks made by another cache's `export_blocks` into `blocks` of this one."""
        want = self._block_view(self.kv).shape[:3] + (len(blocks),) + (self.block_size, self.head_dim)
        if tuple(kv.shape) != tuple(want) or kv.dtype != self.kv.dtype:
            raise ValueError(
                f"KV blocks of shape {tuple(kv.shape)} {kv.dtype} do not fit this cache "
                f"(want {tuple(want)} {self.kv.dtype})"
            )
        if self.quantized != (scales is not None):
            raise ValueError("int8 KV blocks need their scales, and only int8 blocks have scales")
        if scales is not None and (tuple(scales.shape) != tuple(want[:-1]) + (1,) or scales.dtype != self.dtype):
            raise ValueError(f"KV scales of shape {tuple(scales.shape)} {scales.dtype} do not fit this cache")
        index = torch.tensor(blocks, dtype=torch.long, device=self.device)
        self._block_view(self.kv).index_copy_(3, index, kv.to(self.device))
        if scales is not None:
            assert self.scales is not None  # checked above: only a quantized cache takes scales
            self._block_view(self.scales).index_copy_(3, index, scales.to(self.device))

    def _scratch(self, shape: tuple[int, ...]) -> torch.Tensor:
        needed = math.prod(shape)
        if self._gathered.numel() < needed:
            self._gathered = torch.empty(needed, dtype=self.dtype, device=self.device)
        return self._gathered[:needed].view(shape)


def native_cached_attention(
    q: torch.Tensor, cache: PagedKVCache, layer: int, blocks: torch.Tensor, lengths: torch.Tensor, span: int
) -> torch.Tensor:
    """q: [T, H, E] float32, each row over the first lengths[t] slots of its blocks [T, N], read
    in place by tenor's kernel: no gathered copy of any context."""
    k, v, size = cache.kv[layer, 0], cache.kv[layer, 1], cache.block_size
    return native.paged_attention(
        q, k, v, blocks, lengths, size, span, cache.native_scratch, *cache.layer_scales(layer)
    )


def decode_attention(q: torch.Tensor, cache: PagedKVCache, layer: int, batch: AttentionBatch) -> torch.Tensor:
    """q: [B, H, E] for the decode tokens -> [B, H, E], each over its own sequence's blocks."""
    assert batch.decode_blocks is not None  # set whenever the batch has decodes
    if batch.native and q.dtype == torch.float32 and batch.decode_lengths is not None:
        return native_cached_attention(q, cache, layer, batch.decode_blocks, batch.decode_lengths, batch.decode_span)
    nd, num_heads, dim = q.shape
    num_kv = cache.num_kv_heads
    group = num_heads // num_kv
    k, v = cache.read_blocks(layer, batch.decode_blocks)  # [K * B, N * block_size, E]
    if nd == 1 and batch.decode_mask is None:
        # A single stream: torch's flash kernel, the group's query heads as query rows, is 2x
        # faster than the three ops below (which win from a few sequences on).
        k, v = k[None, :, : batch.decode_span], v[None, :, : batch.decode_span]
        out = F.scaled_dot_product_attention(q.view(1, num_kv, group, dim), k, v)
        return out.view(1, num_heads, dim)
    # Batch over (kv head, sequence); each kv head's `group` query heads are its query rows.
    qg = q.view(nd, num_kv, group, dim).transpose(0, 1).reshape(num_kv * nd, group, dim)
    scores = torch.bmm(qg, k.transpose(1, 2)).float().mul_(1.0 / math.sqrt(dim))  # [K * B, G, S]
    if batch.decode_mask is not None:
        scores.masked_fill_(~batch.decode_mask, float("-inf"))
    elif batch.decode_span < k.shape[1]:
        # Every row's context ends at the same slot: mask the tail in the small scores tensor
        # (slicing k and v instead would make bmm copy them).
        scores[:, :, batch.decode_span :] = float("-inf")
    out = torch.bmm(scores.softmax(dim=-1).to(v.dtype), v)  # [K * B, G, E]
    return out.view(num_kv, nd, group, dim).transpose(0, 1).reshape(nd, num_heads, dim)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: PagedKVCache,
    layer: int,
    batch: AttentionBatch,
    written: bool = False,
) -> torch.Tensor:
    """q: [T, H, E], k/v: [T, K, E] for the step's new tokens -> attention output [T, H, E].

    Writes the new k/v into the cache (unless `written`: a fused kernel did), then attends each
    token to its own sequence's context: decode tokens in one batched call, prefill chunks one
    sequence at a time.
    """
    if not written:
        cache.write(layer, batch.slot_mapping, k, v)
    if batch.row_blocks is not None and batch.row_lengths is not None and q.dtype == torch.float32:
        # Prompt rows too, from the cache just written: ~3x torch's flash kernel on 100-400 token
        # prompts (2 cores), and one call for the whole step.
        return native_cached_attention(q, cache, layer, batch.row_blocks, batch.row_lengths, batch.row_span)
    nd = batch.num_decode
    if nd and not batch.prefills:
        return decode_attention(q, cache, layer, batch)
    out = torch.empty_like(q)
    if nd:
        out[:nd] = decode_attention(q[:nd], cache, layer, batch)
    scale = 1.0 / math.sqrt(q.shape[-1])
    for span in batch.prefills:
        rows = slice(span.start, span.start + span.length)
        qp = q[rows].transpose(0, 1)  # [H, L, E]
        if span.context_slots is None:
            kp, vp = k[rows].transpose(0, 1), v[rows].transpose(0, 1)
            mask, causal = None, True
        else:
            kp, vp = cache.read(layer, span.context_slots)  # [K, L, E]
            total = span.num_cached + span.length
            mask = torch.ones(span.length, total, dtype=torch.bool, device=q.device).tril(diagonal=span.num_cached)
            causal = False
        # 4-D inputs: with 3-D ones torch's CPU dispatch falls back to the 2-3x slower math kernel.
        op = F.scaled_dot_product_attention(
            qp[None], kp[None], vp[None], attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=True
        )
        out[rows] = op[0].transpose(0, 1)
    return out
