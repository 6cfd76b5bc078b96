/* What tenor's C kernels share: the includes, one vectorizable exp, and the functions one file
 * calls in another. Built into one library by tenor/models/native.py. */
#ifndef TENOR_KERNELS_H
#define TENOR_KERNELS_H

#include <math.h>
#include <omp.h>
#include <stdint.h>
#ifdef __AVX2__
#include <immintrin.h>
#elif defined(__SSE__)
#include <xmmintrin.h>
#endif

/* Row-wise ops (and the GEMM's quantizing of x) split their rows over threads only when there is
 * enough work to pay for waking them: one stream's rows stay on the calling thread; 32 streams'
 * (18432 floats of the default model's hidden size) are split, which made a fused decode step
 * 0.97x the time (at 1 << 16 they stayed whole and the second core waited on them 13 times a
 * layer). */
#define PARALLEL_MIN_FLOATS (1 << 14)

/* Subnormal floats flushed to zero, and read as zero, on this thread until denormals_restore: x86
 * takes a microcode assist of ~100 cycles for each subnormal operand or result. Attention makes
 * them where a token's score sits 87 or more above another's (a sink token), as that one's
 * weight (e^-87 at the least) times a small V value: decode attention ran 5x slower over such a
 * context. What is lost is below 1.2e-38. */
static inline unsigned denormals_off(void) {
#ifdef __SSE__
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040u); /* FTZ (bit 15) and DAZ (bit 6) */
    return saved;
#else
    return 0;
#endif
}

static inline void denormals_restore(unsigned saved) {
#ifdef __SSE__
    _mm_setcsr(saved);
#else
    (void)saved;
#endif
}

/* a * b + c, fused where the build has FMA: gcc does not contract the plain form under -std=c99,
 * and fast_expf's polynomial took two instructions a term. Fused, tenor_silu_mul_f32 at 480 x 1536
 * took 0.94x the time as AVX2 code and 0.82-0.91x as AVX-512 on a Zen 4, its outputs within 3e-8
 * of the unfused ones (relative). */
#ifdef __FMA__
#define MUL_ADD(a, b, c) __builtin_fmaf(a, b, c)
#else
#define MUL_ADD(a, b, c) ((a) * (b) + (c))
#endif

/* e^x in float32 without libm, written so the compiler vectorizes it inside `omp simd` loops
 * (glibc's expf stays scalar unless built with -ffast-math): Cody-Waite reduction by ln 2 and
 * Cephes' degree-6 polynomial, about 1 ulp on [-87.3, 88.3]. Below, e^-87.3 (no subnormals);
 * above 88.4 (where e^x nears float's top), +inf, so silu(-huge) is -0 as it should be.
 * Trapping math off as in its callers: then it inlines into their simd loops; without, they called
 * its simd clone, whose clamps gcc keeps scalar below AVX-512 (SiLU and softmax 5x slower on AVX2). */
#pragma omp declare simd
__attribute__((optimize("no-trapping-math"))) static inline float fast_expf(float x) {
    x = x < -87.3f ? -87.3f : (x > 89.0f ? 89.0f : x);
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = MUL_ADD(-n, 0.693359375f, x);
    r = MUL_ADD(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = MUL_ADD(p, r, 1.3981999507e-3f);
    p = MUL_ADD(p, r, 8.3334519073e-3f);
    p = MUL_ADD(p, r, 4.1665795894e-2f);
    p = MUL_ADD(p, r, 1.6666665459e-1f);
    p = MUL_ADD(p, r, 5.0000001201e-1f);
    p = MUL_ADD(p, r * r, r) + 1.0f;
    union { int32_t i; float f; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}

/* bf16 is float32's top half: widening is exact. Always inlined, also into functions compiled with
 * other options (tenor_silu_mul_bf16), whose simd loops otherwise call them and stay scalar. */
static inline __attribute__((always_inline)) float bf16_to_float(uint16_t h) {
    union { uint32_t u; float f; } w;
    w.u = (uint32_t)h << 16;
    return w.f;
}

/* float32 to bf16, rounded to nearest even (what torch's .to(torch.bfloat16) does); NaN stays NaN. */
static inline __attribute__((always_inline)) uint16_t float_to_bf16(float x) {
    union { float f; uint32_t u; } w;
    w.f = x;
    const uint32_t rounded = (w.u + 0x7fffu + ((w.u >> 16) & 1u)) >> 16;
    return (w.u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((w.u >> 16) | 0x40u) : (uint16_t)rounded;
}

/* attention.c: decode and prompt rows attending from the paged cache, float32 (bits 32), bf16
 * (16) or int8 with scales ks, vs (8; NULL otherwise) K/V; see the definition for the shapes.
 * Called by the fused Llama decode step and, through ctypes, by tenor/models/native.py. */
void tenor_paged_attention(const float *q, const void *k, const void *v, const float *ks, const float *vs,
                           int64_t bits, const int64_t *table, const int64_t *lengths, float *out, float *scratch,
                           int64_t B, int64_t H, int64_t K, int64_t E, int64_t N, int64_t block_size, int64_t slots,
                           int64_t max_len, float scale, int64_t tile, int64_t threads);


/* int8_gemm.c: out [R, OUT] = x [R, IN] @ W.T (+ bias) for block weights packed by int8_gemm_pack (bits
 * 4 or 8; 4-bit steps in fixed point where tenor_int8_gemm_fixed_steps says so); scratch holds x
 * quantized, at least R * IN * (bits / 4) + 8 * R * (IN / 32) bytes. Called by the fused Llama step
 * for batches past tenor_block_linear_f32's rows. */
void tenor_int8_gemm_f32(const float *x, const uint8_t *w, int64_t bits, const float *steps, const float *offsets,
                         const float *bias, float *out, uint8_t *scratch, int64_t R, int64_t IN, int64_t OUT,
                         int64_t threads);

#endif
