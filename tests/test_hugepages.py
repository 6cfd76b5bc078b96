from pathlib import Path

import pytest
import torch

from tenor import hugepages
from tenor.models.layers import PagedKVCache

THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _thp_mode() -> str | None:
    """The bracketed choice in THP's setting ("always", "madvise" or "never"), None without THP."""
    try:
        text = THP_SETTING.read_text()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")] if "[" in text else None


def _anon_huge_kb() -> int:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int8])
def test_big_tensor_is_zeroed_writable_and_starts_on_a_huge_page(dtype):
    shape = (3, 2, 1 << 20, 4)
    t = hugepages.zeros(shape, dtype)
    assert t.shape == shape and t.dtype == dtype and t.is_contiguous()
    assert t.data_ptr() % hugepages.HUGE_PAGE == 0
    assert not t.any()
    t[2, 1, -1, -1] = 7  # the last element is inside the mapping
    t[0, 0, 0, 0] = 5
    assert t.sum().item() == 12


def test_small_tensor_is_an_ordinary_one():
    t = hugepages.zeros((4, 8), torch.float32)
    assert t.shape == (4, 8) and not t.any()


@pytest.mark.skipif(_thp_mode() not in ("always", "madvise"), reason="transparent huge pages are off or absent here")
def test_the_kernel_backs_it_with_huge_pages():
    before = _anon_huge_kb()
    t = hugepages.zeros((64 << 20,), torch.uint8)
    after = _anon_huge_kb()
    # The kernel may fall short of free huge pages; most of 64 MB in them shows the request worked.
    assert after - before >= 32 << 10, f"AnonHugePages grew by {after - before} kB for a 64 MB tensor"
    del t


def test_cpu_kv_cache_lives_in_huge_pages_and_reads_back_what_was_written():
    cache = PagedKVCache(4, 1024, 16, 2, 64, torch.float32, kv_dtype=torch.bfloat16)  # 32 MB
    assert cache.kv.data_ptr() % hugepages.HUGE_PAGE == 0
    k, v = torch.randn(3, 2, 64), torch.randn(3, 2, 64)
    slots = torch.tensor([5, 100, 8000])
    cache.write(1, slots, k, v)
    got_k, got_v = cache.read(1, slots)  # [K, L, E]
    torch.testing.assert_close(got_k, k.bfloat16().float().transpose(0, 1))
    torch.testing.assert_close(got_v, v.bfloat16().float().transpose(0, 1))
    assert not cache.kv[0].any() and not cache.kv[2:].any()  # the other layers untouched


def test_keep_copies_big_weights_into_shared_huge_page_regions_without_overlap():
    a, b = torch.randn(300, 576), torch.randint(0, 16, (384, 18, 256), dtype=torch.uint8)
    kept_a, kept_b = hugepages.keep(a), hugepages.keep(b)
    assert torch.equal(kept_a, a) and torch.equal(kept_b, b)
    assert kept_a.is_contiguous() and kept_b.is_contiguous()
    assert kept_a.data_ptr() != a.data_ptr() and kept_a.data_ptr() % hugepages.ALIGN == 0
    end_a = kept_a.data_ptr() + a.numel() * 4
    assert kept_b.data_ptr() >= end_a or kept_b.data_ptr() + b.numel() <= kept_a.data_ptr()
    a.zero_()
    assert kept_a.abs().sum() > 0  # a copy, not the original


def test_keep_leaves_small_and_strided_inputs_right():
    small = torch.randn(8, 8)
    assert hugepages.keep(small) is small
    strided = torch.randn(600, 300).t()  # 720 KB, not contiguous
    kept = hugepages.keep(strided)
    assert kept.is_contiguous() and torch.equal(kept, strided)


def test_a_weight_bigger_than_a_region_gets_its_own():
    big = torch.ones(hugepages.REGION_BYTES // 4 + 1024)
    kept = hugepages.keep(big)
    assert torch.equal(kept, big) and kept.data_ptr() % hugepages.HUGE_PAGE == 0


def test_a_tensor_past_what_the_machine_can_map_is_a_memory_error_that_names_it():
    with pytest.raises(MemoryError, match=r"cannot allocate .* GiB for a \[1099511627776, 1024\] tensor"):
        hugepages.zeros((1 << 40, 1 << 10), torch.uint8)  # 1 EiB


def test_pages_go_in_the_order_of_the_axis_given():
    # 4 planes of 3 huge pages each along axis 1: the pages holding each plane's first slots first.
    t = torch.empty(4, 3 * hugepages.HUGE_PAGE, dtype=torch.uint8)
    order = hugepages._pages_in_order(t, axis=1)
    page = hugepages.HUGE_PAGE
    assert order == [p * 3 * page + k * page for k in range(3) for p in range(4)]


def test_background_prefault_keeps_what_is_written_meanwhile():
    shape = (6, 2, 1 << 20, 8)  # 192 MB of bf16, 96 huge pages
    t = hugepages.zeros(shape, torch.bfloat16, background_axis=2)
    assert t.data_ptr() % hugepages.HUGE_PAGE == 0
    t[5, 1, -3:, :] = 2.0  # while the other thread may be faulting these pages in
    t[0, 0, :1000, 0] = 1.0
    hugepages.wait_for_background()
    assert t.sum().item() == 2.0 * 3 * 8 + 1000
    assert t[1:5].count_nonzero() == 0


@pytest.mark.skipif(_thp_mode() not in ("always", "madvise"), reason="transparent huge pages are off or absent here")
def test_background_prefault_takes_huge_pages():
    before = _anon_huge_kb()
    t = hugepages.zeros((64 << 20,), torch.uint8, background_axis=0)
    hugepages.wait_for_background()
    after = _anon_huge_kb()
    assert after - before >= 32 << 10, f"AnonHugePages grew by {after - before} kB for a 64 MB tensor"
    del t
