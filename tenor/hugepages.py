"""Host tensors backed by transparent huge pages: the KV cache and the block weights.

Decode attention reads each sequence's KV blocks (2 KB a head in bf16 at the default model's
shapes) from wherever the block manager put them, so with 4 KB pages nearly every block costs a
TLB miss and a page walk. Linux gives a process 2 MB pages where it asks (`MADV_HUGEPAGE`) when
/sys/kernel/mm/transparent_hugepage/enabled is `madvise`, the common default, or `always`.
torch's allocator asks only under the THP_MEM_ALLOC_ENABLE environment variable, for every
allocation, so tenor asks for its two big, long-lived kinds of tensor alone: the cache (`zeros`)
and the block weights (`keep`).

The block weights' kernels read each matrix in tiles of a few KB, a page or two apiece: the
default model's linears took 0.975-0.99x the time with their weights in huge pages (on a Zen 4,
benchmarks/hugepages_ab.py). A weight is 0.5-2 MB, less than a huge page's worth of TLB reach
each, so `keep` packs them into shared regions.

Where huge pages are not to be had (another OS, THP `never`, a kernel that refuses), the tensor
is the same, in ordinary pages.

Each page is faulted in before it is used: left to fault while serving, each first touch of a
huge page stalled a step on the kernel's zeroing and compaction. For the KV cache (3 GiB at the
default sizes) that took 3.6-4.0 s of `tenor serve`'s start on a Zen 4, nearly all of it the kernel
compacting memory into huge pages, so the cache's pages are faulted in on a thread of their own
(`zeros(..., background_axis=...)`) while the server starts serving, in the order its blocks are
handed out.
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os
import threading

import torch

HUGE_PAGE = 2 << 20
MIN_BYTES = 8 * HUGE_PAGE  # below this a few TLB entries cover the tensor anyway
REGION_BYTES = 16 * HUGE_PAGE  # what `keep` maps at a time
KEEP_MIN_BYTES = 64 << 10  # smaller tensors (tiny test models' weights) stay where they are
ALIGN = 64  # a cache line: each kept tensor starts on one
# madvise(2) advice (Linux 5.14): fault pages in writable, as a write would, without writing; so
# unlike a touch it may run while others write the memory. Python's mmap module does not name it.
MADV_POPULATE_WRITE = 23

_background: list[threading.Thread] = []  # prefaulting threads, for wait_for_background()


def zeros(shape: tuple[int, ...], dtype: torch.dtype, background_axis: int | None = None) -> torch.Tensor:
    """A zeroed CPU tensor of `shape` and `dtype`, in huge pages where the kernel grants them.

    With `background_axis`, its pages are faulted in on a daemon thread, those holding the lowest
    indices along that axis first, and the tensor may be used at once (where the kernel cannot
    fault pages in without writing them, they are faulted in before this returns)."""
    nbytes = math.prod(shape) * dtype.itemsize
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < MIN_BYTES or advise is None:
        return torch.zeros(shape, dtype=dtype)
    # A huge page covers only a 2 MB-aligned 2 MB range: map one page more and start at a boundary.
    try:
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as exc:  # as torch's allocator would say it, not as a bare errno
        raise MemoryError(
            f"cannot allocate {nbytes / 2**30:.2f} GiB for a {list(shape)} tensor: {exc.strerror}"
        ) from exc
    try:
        region.madvise(advise)  # before the first touch, so the faults take huge pages
    except OSError:
        pass  # refused (THP off or unsupported): ordinary pages, fresh from the kernel, so zero
    whole = torch.frombuffer(region, dtype=torch.uint8)  # holds `region` for the tensor's life
    start = -whole.data_ptr() % HUGE_PAGE
    tensor = whole[start : start + nbytes]
    shaped = tensor.view(dtype).view(shape)
    if background_axis is None or not _populate(tensor.data_ptr(), HUGE_PAGE):
        tensor[::4096].zero_()  # a byte of each page touched now (the kernel zeroes the rest)
        return shaped
    pages = _pages_in_order(shaped, background_axis)
    thread = threading.Thread(target=_populate_pages, args=(tensor, pages), daemon=True, name="tenor-prefault")
    _background[:] = [t for t in _background if t.is_alive()] + [thread]
    thread.start()
    return shaped


def wait_for_background(timeout_s: float | None = None) -> None:
    """Returns once every background prefault has ended (or after `timeout_s`)."""
    for thread in list(_background):
        thread.join(timeout_s)


@functools.cache
def _libc() -> ctypes.CDLL:
    """The process's own C library (loaded already), looked up once rather than for each page."""
    return ctypes.CDLL(None, use_errno=True)


def _populate(address: int, length: int) -> bool:
    """MADV_POPULATE_WRITE over [address, address + length); False where the kernel lacks it.
    Called through ctypes, which lets go of the GIL: a 3 GiB cache takes seconds."""
    return _libc().madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), MADV_POPULATE_WRITE) == 0


def _pages_in_order(tensor: torch.Tensor, axis: int) -> list[int]:
    """The starts (bytes from the tensor's first) of its huge pages, by the lowest index along
    `axis` each holds: a KV cache's slots are laid out per layer and head, and its blocks are
    handed out from the lowest slot."""
    nbytes = tensor.numel() * tensor.element_size()
    stride, size, item = tensor.stride(axis), tensor.shape[axis], tensor.element_size()
    starts = range(0, nbytes, HUGE_PAGE)
    return sorted(starts, key=lambda start: (start // item // stride) % size)


def _populate_pages(tensor: torch.Tensor, pages: list[int]) -> None:
    # At the lowest priority, so that the steps served meanwhile take the cores first: at the
    # same priority it took one of two cores from OpenMP's team, whose other thread then waited
    # for it at every join (the engine's warm-up step ~10x as long). Linux sets it per thread.
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError):  # not Linux, or not allowed: the pages fault in all the same
        pass
    base, nbytes = tensor.data_ptr(), tensor.numel()
    for start in pages:
        if not _populate(base + start, min(HUGE_PAGE, nbytes - start)):
            return  # the memory is still usable: its pages fault in where first written


class _Regions:
    """Huge-page regions carved front to back for tensors that live as long as their model. A
    region goes back to the kernel when the last tensor in it does; beyond the tensors, only the
    region being carved (REGION_BYTES) stays held."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # models load on the model server's worker threads
        self._region = torch.empty(0, dtype=torch.uint8)
        self._used = 0

    def copy(self, tensor: torch.Tensor) -> torch.Tensor:
        nbytes = tensor.numel() * tensor.element_size()
        with self._lock:
            start = -self._used % ALIGN + self._used
            if start + nbytes > self._region.numel():
                self._region = zeros((max(REGION_BYTES, nbytes),), torch.uint8)
                start = 0
            self._used = start + nbytes
            place = self._region[start : start + nbytes]
        kept = place.view(tensor.dtype).view(tensor.shape)
        kept.copy_(tensor)
        return kept


_weights = _Regions()


def keep(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (a CPU weight, read for the life of its model) copied into huge pages, contiguous;
    small or non-CPU tensors come back as they are."""
    if tensor.device.type != "cpu" or tensor.numel() * tensor.element_size() < KEEP_MIN_BYTES:
        return tensor
    return _weights.copy(tensor.contiguous())
