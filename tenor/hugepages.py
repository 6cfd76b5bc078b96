"""Host tensors backed by transparent huge pages, for the big ones read at scattered places.

Decode attention reads each sequence's KV blocks (2 KB a head in bf16 at the default model's
shapes) from wherever the block manager put them, so with 4 KB pages nearly every block costs a
TLB miss and a page walk, and the hardware prefetchers stop at every page. Linux gives a process
2 MB pages where it asks (`MADV_HUGEPAGE`) when /sys/kernel/mm/transparent_hugepage/enabled is
`madvise`, the common default, or `always`. torch's allocator asks only under the
THP_MEM_ALLOC_ENABLE environment variable, for every allocation, so tenor asks for the cache alone.

Where huge pages are not to be had (another OS, THP `never`, a kernel that refuses), the tensor
is the same, in ordinary pages.
"""

from __future__ import annotations

import math
import mmap

import torch

HUGE_PAGE = 2 << 20
MIN_BYTES = 8 * HUGE_PAGE  # below this a few TLB entries cover the tensor anyway


def zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zeroed CPU tensor of `shape` and `dtype`, in huge pages where the kernel grants them."""
    nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < MIN_BYTES or advise is None:
        return torch.zeros(shape, dtype=dtype)
    # A huge page covers only a 2 MB-aligned 2 MB range: map one page more and start at a boundary.
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        region.madvise(advise)  # before the first touch, so the faults take huge pages
    except OSError:
        pass  # refused (THP off or unsupported): ordinary pages, fresh from the kernel, so zero
    whole = torch.frombuffer(region, dtype=torch.uint8)  # holds `region` for the tensor's life
    start = -whole.data_ptr() % HUGE_PAGE
    tensor = whole[start : start + nbytes]
    # A byte of each page touched now (the kernel zeroes the rest): left to fault while serving,
    # each first touch of a huge page stalled a step on the kernel's zeroing and compaction.
    tensor[::4096].zero_()
    return tensor.view(dtype).view(shape)
