"""CPU detection and the precision chosen from it: plain tables, no torch kernels."""

import pytest

from tenor.hardware import CpuInfo, _cpuinfo_fields, choose_precision, cpu_info, resolve_device, usable_cores

AVX2_EPYC = CpuInfo("AMD EPYC", "x86_64", frozenset({"avx2", "fma", "f16c"}), "AVX2", 2)
AMX_XEON = CpuInfo(
    "Intel Xeon", "x86_64", frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}), "AVX512", 2
)
ZEN4_EPYC = CpuInfo(
    "AMD EPYC", "x86_64", frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"}), "AVX512", 2
)
ARM_BF16 = CpuInfo("Neoverse-V1", "aarch64", frozenset({"asimd", "sve", "bf16"}), "SVE256", 4)
ARM_PLAIN = CpuInfo("Cortex-A72", "aarch64", frozenset({"asimd"}), "DEFAULT", 4)


@pytest.mark.parametrize(
    "cpu, fp16_kernel, dtype, quantize, expected",
    [
        # auto never picks an emulated dtype
        (AVX2_EPYC, True, "auto", "auto", ("float32", "fp16")),  # no native kernels: fp16 alone
        (AVX2_EPYC, False, "auto", "auto", ("float32", "dense")),
        (AMX_XEON, True, "auto", "auto", ("bfloat16", "dense")),  # no native kernels: bf16 is fastest
        (ARM_BF16, False, "auto", "auto", ("bfloat16", "dense")),
        (ARM_PLAIN, False, "auto", "auto", ("float32", "dense")),
        # explicit choices are honoured
        (AVX2_EPYC, True, "float32", "none", ("float32", "dense")),
        (AVX2_EPYC, True, "bfloat16", "auto", ("bfloat16", "dense")),
        (AMX_XEON, True, "float32", "auto", ("float32", "fp16")),
        (AMX_XEON, True, "auto", "fp16", None),  # bf16 activations cannot take fp16 weights
        (AMX_XEON, True, "float32", "fp16", ("float32", "fp16")),
    ],
)
def test_choose_precision(cpu, fp16_kernel, dtype, quantize, expected):
    if expected is None:
        with pytest.raises(ValueError, match="float32 activations"):
            choose_precision(dtype, quantize, cpu, fp16_kernel)
        return
    precision = choose_precision(dtype, quantize, cpu, fp16_kernel)
    assert (precision.dtype, precision.weights) == expected
    assert precision.reason


def test_int8_needs_the_native_kernels():
    assert choose_precision("auto", "auto", AVX2_EPYC, True, native_kernels=True).weights == "int8"
    # where the integer GEMM serves big batches, auto takes its int8 activations (llama.cpp's numerics)
    auto = choose_precision("auto", "auto", AVX2_EPYC, True, native_kernels=True, integer_gemm=True)
    assert auto.weights == "int8a8" and "--quantize int8" in auto.reason
    exact = choose_precision("auto", "int8", AVX2_EPYC, True, native_kernels=True, integer_gemm=True)
    assert exact.weights == "int8"
    assert choose_precision("auto", "int8", AVX2_EPYC, True, native_kernels=True).weights == "int8"
    assert choose_precision("auto", "int8a8", AVX2_EPYC, True, native_kernels=True).weights == "int8a8"
    for quantize in ("int8", "int8a8"):
        with pytest.raises(ValueError, match="native kernels"):
            choose_precision("auto", quantize, AVX2_EPYC, True, native_kernels=False)
    with pytest.raises(ValueError, match="float32 activations"):
        choose_precision("bfloat16", "int8a8", AMX_XEON, True, native_kernels=True)
    assert choose_precision("auto", "auto", AMX_XEON, True, native_kernels=True).weights == "int8"


def test_int8_weights_cache_kv_in_bf16_and_float_weights_in_their_own_dtype():
    """bf16 K/V go with int8 weights (half the bytes attention reads; measured as accurate);
    float weights stay exact with K/V in the activation dtype."""
    for cpu in (AVX2_EPYC, ZEN4_EPYC, AMX_XEON):
        assert choose_precision("auto", "auto", cpu, True, native_kernels=True).kv_dtype == "bfloat16"
        for quantize in ("int8", "int8a8"):
            assert choose_precision("float32", quantize, cpu, True, native_kernels=True).kv_dtype == "bfloat16"
        for quantize in ("none", "fp16"):
            assert choose_precision("float32", quantize, cpu, True, native_kernels=True).kv_dtype is None
    assert choose_precision("bfloat16", "auto", AMX_XEON, True, native_kernels=True).kv_dtype is None


def test_native_bf16_cpus_decode_in_float32_with_bf16_batches():
    # One stream ran 2-3x faster on tenor's float32 decode kernels than as a bf16 model on a Zen 4/5
    # EPYC; on an AMX Xeon, 1.38x at 1 stream and 1.36x at 32.
    for cpu in (ZEN4_EPYC, AMX_XEON):
        chosen = choose_precision("auto", "auto", cpu, True, native_kernels=True)
        assert (chosen.dtype, chosen.weights) == ("float32", "int8")
        assert "big batches in native bf16" in chosen.reason
        # Without tenor's kernels (no C compiler) bf16 is still the fast path there.
        assert choose_precision("auto", "auto", cpu, True, native_kernels=False).dtype == "bfloat16"
    assert choose_precision("auto", "auto", ARM_BF16, False, native_kernels=True).dtype == "bfloat16"


def test_bf16_cpus_without_amx_take_int8_activations_where_the_integer_gemm_serves():
    # Zen 5: VNNI's int8 x did prompts and 32-stream decode batches 1.23x faster than oneDNN's bf16
    # in process, at 97.1 % prefill top-1 and 8 of 10 greedy (benchmarks/RESULTS.md)
    chosen = choose_precision("auto", "auto", ZEN4_EPYC, True, native_kernels=True, integer_gemm=True)
    assert (chosen.dtype, chosen.weights) == ("float32", "int8a8")
    assert "big batches in int8 (VNNI)" in chosen.reason and "--quantize int8" in chosen.reason
    exact = choose_precision("auto", "int8", ZEN4_EPYC, True, native_kernels=True, integer_gemm=True)
    assert exact.weights == "int8" and "big batches in native bf16" in exact.reason


def test_choose_precision_says_why_and_refuses_unknown_values():
    assert "emulated" in choose_precision("auto", "auto", AVX2_EPYC, True).reason
    assert "natively" in choose_precision("auto", "auto", AMX_XEON, True, native_kernels=False).reason
    with pytest.raises(ValueError, match="dtype must be one of"):
        choose_precision("float16", "auto", AVX2_EPYC, True)
    with pytest.raises(ValueError, match="quantize must be one of"):
        choose_precision("auto", "int3", AVX2_EPYC, True)
    with pytest.raises(ValueError, match="FBGEMM"):
        choose_precision("float32", "fp16", ARM_PLAIN, False)


@pytest.mark.parametrize(
    "affinity, cpu_max, expected",
    [
        (8, "max 100000", 8),
        (8, "200000 100000", 2),
        (8, "150000 100000", 2),  # 1.5 cores of quota: two threads, one of them part-time
        (2, "800000 100000", 2),  # the affinity mask is the tighter bound
        (4, "", 4),  # no cgroup v2 file
        (4, "garbage", 4),
    ],
)
def test_usable_cores(affinity, cpu_max, expected):
    assert usable_cores(affinity, cpu_max) == expected


def test_cpuinfo_fields_x86_and_arm():
    x86 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\n"
    assert _cpuinfo_fields(x86) == ("AMD EPYC 7B13", frozenset({"fpu", "avx2", "fma"}))
    arm = "processor\t: 0\nFeatures\t: fp asimd sve bf16\nCPU part\t: 0xd40\n"
    assert _cpuinfo_fields(arm)[1] == frozenset({"fp", "asimd", "sve", "bf16"})


def test_this_cpu_is_described():
    cpu = cpu_info()
    assert cpu.usable_cores >= 1 and cpu.model_name and cpu.isa
    assert AMX_XEON.isa.startswith("AMX") and AVX2_EPYC.isa == "AVX2 FMA"


@pytest.mark.parametrize(
    "name, has_cuda, expected",
    [
        ("auto", False, "cpu"),
        ("auto", True, "cuda"),
        ("cpu", True, "cpu"),
        ("cpu", False, "cpu"),
        ("cuda", True, "cuda"),
        ("cuda", False, None),  # asked for, not there: an error, never a silent CPU run
    ],
)
def test_resolve_device(name, has_cuda, expected):
    if expected is None:
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device(name, has_cuda)
        return
    assert resolve_device(name, has_cuda) == expected


def test_resolve_device_refuses_unknown_names():
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda"):
        resolve_device("tpu", False)


def test_cuda_precision_is_bf16_dense_and_refuses_cpu_weight_kernels():
    auto = choose_precision("auto", "auto", AVX2_EPYC, True, native_kernels=True, device="cuda")
    assert (auto.dtype, auto.weights, auto.device) == ("bfloat16", "dense", "cuda")
    exact = choose_precision("float32", "none", AVX2_EPYC, True, native_kernels=True, device="cuda")
    assert (exact.dtype, exact.weights, exact.device) == ("float32", "dense", "cuda")
    for quantize in ("fp16", "int8", "int8a8"):
        with pytest.raises(ValueError, match="CPU kernels only"):
            choose_precision("float32", quantize, AVX2_EPYC, True, native_kernels=True, device="cuda")
    assert choose_precision("auto", "auto", AVX2_EPYC, True).device == "cpu"
