/* tenor's fused CPU kernels for the float32 decode path, called through ctypes.
 *
 * Each replaces a chain of small torch ops (each a dispatch and a pass over memory) with one
 * call. Built at setup or on first use by tenor/models/native.py for the host's instruction
 * sets (-march=native); torch's own ops stand in wherever this library cannot be built.
 * No torch headers: plain C99 on raw float32 buffers, OpenMP for the threads (the loader
 * reuses torch's libgomp, so one thread pool serves both).
 */
#include <stdlib.h>

#include "kernels.h"

#ifdef __AVX2__
/* The eight lanes' sum, in a fixed order. */
static inline float lane_sum(__m256 v) {
    float lanes[8];
    _mm256_storeu_ps(lanes, v);
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}
#endif

/* The rows the decode kernels (float_linear, tenor_block_linear_f32) take at most: each keeps one
 * accumulator a row. tenor/models/native.py's INT8_MAX_ROWS is this number. */
#define DECODE_MAX_ROWS 8

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for `rows` rows of `dim`. */
void tenor_rms_norm_f32(const float *x, const float *w, float *out, int64_t rows, int64_t dim, float eps,
                        int64_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (rows * dim >= PARALLEL_MIN_FLOATS)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *o = out + r * dim;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < dim; i++) sum += xr[i] * xr[i];
        const float inv = 1.0f / sqrtf(sum / (float)dim + eps);
#pragma omp simd
        for (int64_t i = 0; i < dim; i++) o[i] = xr[i] * inv * w[i];
    }
}

/* gate_up [rows, 2 * inter] (gate then up) -> out [rows, inter] = silu(gate) * up. Without
 * trapping math gcc vectorizes fast_expf's clamps below AVX-512 too (tenor reads no FP flags); for
 * the whole file that flag slowed attention by a fifth on a Zen 5, hence this function only. */
__attribute__((optimize("no-trapping-math"))) void tenor_silu_mul_f32(const float *gate_up, float *out, int64_t rows,
                                                                      int64_t inter, int64_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (rows * inter >= PARALLEL_MIN_FLOATS)
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gate_up + r * 2 * inter, *u = g + inter;
        float *o = out + r * inter;
#pragma omp simd
        for (int64_t i = 0; i < inter; i++) o[i] = g[i] / (1.0f + fast_expf(-g[i])) * u[i];
    }
}

/* tenor_silu_mul_f32 with bf16 in and out, between two GEMMs that compute in bf16: the same floats
 * in (bf16 widens exactly), the result rounded as torch's .to(torch.bfloat16), so it matches the
 * float32 kernel between two conversions bit for bit, without the conversions' passes. */
__attribute__((optimize("no-trapping-math"))) void tenor_silu_mul_bf16(const uint16_t *gate_up, uint16_t *out,
                                                                       int64_t rows, int64_t inter, int64_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (rows * inter >= PARALLEL_MIN_FLOATS)
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *g = gate_up + r * 2 * inter, *u = g + inter;
        uint16_t *o = out + r * inter;
#pragma omp simd
        for (int64_t i = 0; i < inter; i++) {
            const float gate = bf16_to_float(g[i]);
            o[i] = float_to_bf16(gate / (1.0f + fast_expf(-gate)) * bf16_to_float(u[i]));
        }
    }
}

/* Each row's first largest logit (torch.argmax's pick) and its log-sum-exp, for greedy picks and
 * the logprobs of any pick without log_softmax's whole [rows, vocab] output: log_softmax and
 * argmax over 32 x 49152 logits took ~5 % of a 32-stream decode step. A row holding nan or +inf
 * gets a nan log-sum-exp (the caller falls back to torch's ops). */
__attribute__((optimize("no-trapping-math"))) void tenor_argmax_logsumexp(const float *logits, int64_t rows,
                                                                          int64_t vocab, int64_t *best, float *lse,
                                                                          int64_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (rows * vocab >= PARALLEL_MIN_FLOATS)
    for (int64_t r = 0; r < rows; r++) {
        const float *x = logits + r * vocab;
        float top = -INFINITY, total = 0.0f;
        int has_nan = 0;
#pragma omp simd reduction(max : top) reduction(| : has_nan)
        for (int64_t i = 0; i < vocab; i++) {
            top = x[i] > top ? x[i] : top;
            has_nan |= x[i] != x[i];
        }
        /* The first index holding the top, found in the same vector pass as the sum (a scalar
         * scan for it took a third of the call). A row of nan only has none: 0 then. */
        const int32_t none = (int32_t)vocab; /* int32 lanes: AVX2 has no int64 min */
        int32_t at = none;
#pragma omp simd reduction(+ : total) reduction(min : at)
        for (int32_t i = 0; i < none; i++) {
            total += fast_expf(x[i] - top);
            const int32_t here = x[i] == top ? i : none;
            at = here < at ? here : at;
        }
        best[r] = at < none ? at : 0;
        lse[r] = has_nan || top == INFINITY ? NAN : top + logf(total);
    }
}

#if !(defined(__AVX2__) && defined(__F16C__))
/* IEEE half -> float, for CPUs without F16C (the AVX2 path converts 8 at a time in hardware). */
static float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    union { uint32_t u; float f; } bits;
    if (exponent == 0x1f) {
        bits.u = sign | 0x7f800000u | (mantissa << 13);  /* inf, nan */
    } else if (exponent == 0) {
        bits.f = ldexpf((float)mantissa, -24);  /* zero, subnormal */
        bits.u |= sign;
    } else {
        bits.u = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    return bits.f;
}
#endif

#if defined(__AVX2__) && defined(__F16C__)
/* Eight weights from w (float16 when bits is 16, float32 when 32) at index i, as float32. */
static inline __m256 load8(const void *w, int64_t bits, int64_t i) {
    return bits == 16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)))
                      : _mm256_loadu_ps((const float *)w + i);
}
#endif

/* out [R, OUT] = x [R, IN] @ W.T (+ bias) for float weights w [OUT, IN] read in place, float16
 * (bits 16) or float32 (bits 32): the float weights' decode path, bound by the bytes of the
 * weights, where FBGEMM's packed fp16 GEMM pays a per-call cost made for big batches and
 * F.linear at a few rows ran at under half the memory's speed on an AVX2 EPYC. Float32 products
 * and sums. R at most DECODE_MAX_ROWS, IN a multiple of 8. */
static void float_linear(const float *x, const void *w, int64_t bits, const float *bias, float *out, int64_t R,
                         int64_t IN, int64_t OUT, int64_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t o = 0; o < OUT; o++) {
        const void *wo = bits == 16 ? (const void *)((const uint16_t *)w + o * IN) : (const void *)((const float *)w + o * IN);
        float acc[DECODE_MAX_ROWS] = {0};
#if defined(__AVX2__) && defined(__F16C__)
        if (R == 1) { /* one stream: four chains, so the adds' latency does not bound the loop */
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int64_t i = 0;
            for (; i + 32 <= IN; i += 32) {
                a0 = _mm256_fmadd_ps(load8(wo, bits, i), _mm256_loadu_ps(x + i), a0);
                a1 = _mm256_fmadd_ps(load8(wo, bits, i + 8), _mm256_loadu_ps(x + i + 8), a1);
                a2 = _mm256_fmadd_ps(load8(wo, bits, i + 16), _mm256_loadu_ps(x + i + 16), a2);
                a3 = _mm256_fmadd_ps(load8(wo, bits, i + 24), _mm256_loadu_ps(x + i + 24), a3);
            }
            for (; i < IN; i += 8) a0 = _mm256_fmadd_ps(load8(wo, bits, i), _mm256_loadu_ps(x + i), a0);
            acc[0] = lane_sum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        } else {
            __m256 vacc[DECODE_MAX_ROWS];
            for (int64_t r = 0; r < R; r++) vacc[r] = _mm256_setzero_ps();
            for (int64_t i = 0; i < IN; i += 8) {
                const __m256 wv = load8(wo, bits, i);
                for (int64_t r = 0; r < R; r++) vacc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * IN + i), vacc[r]);
            }
            for (int64_t r = 0; r < R; r++) acc[r] = lane_sum(vacc[r]);
        }
#else
        for (int64_t i = 0; i < IN; i++) {
            const float wi = bits == 16 ? half_to_float(((const uint16_t *)wo)[i]) : ((const float *)wo)[i];
            for (int64_t r = 0; r < R; r++) acc[r] += wi * x[r * IN + i];
        }
#endif
        for (int64_t r = 0; r < R; r++) out[r * OUT + o] = acc[r] + (bias ? bias[o] : 0.0f);
    }
}

/* out [R, OUT] = x [R, IN] @ W.T (+ bias) for weights in blocks of 32 along IN, each block with its
 * own scale and offset (scales, offsets [OUT, IN / 32]): W[o, i] ~= w[o, i] * scale + offset, with
 *   bits 8: w int8 in -128..127, 32 bytes a block (holds a GGUF Q4_1 or Q8_0 block exactly);
 *   bits 4: w in 0..15, 16 bytes a block, byte i holding w[i] (low nibble) and w[i + 16] (high):
 *           a GGUF Q4_1 block exactly, at half the bytes; one stream's decode step is bound by them.
 * For the few rows of a decode step. Each row of x is quantized to int16 per block of 32 first
 * (absmax / 32767 steps: an error near float32's, where int8 activations as llama.cpp's cost this
 * small model whole greedy tokens), so a block's product is an integer dot: 16 multiply-adds an
 * instruction with AVX2, where converting every weight to float costs several. The offsets' share
 * uses the exact float sum of x over the block. IN must be a multiple of 32, R at most DECODE_MAX_ROWS.
 *   bits 16, 32: float16 or float32 weights [OUT, IN] (no scales or offsets), through float_linear. */

/* For one output (block scales so, offsets fo): steps[r * nb + blk], the float factor of the
 * block's integer dot with row r (weight step times x's step), and acc[r] = the offsets' share,
 * sum over blocks of offset times x's block sum. Multiplied out before the dots, so that their
 * loop reads each step from memory (a broadcast load) instead of computing it. */
static inline void block_steps(const float *so, const float *fo, const float *xd, const float *xsum, int64_t R,
                               int64_t nb, float *steps, float *acc) {
    for (int64_t r = 0; r < R; r++) {
        float offset = 0.0f;
#pragma omp simd reduction(+ : offset)
        for (int64_t blk = 0; blk < nb; blk++) {
            steps[r * nb + blk] = so[blk] * xd[r * nb + blk];
            offset += fo[blk] * xsum[r * nb + blk];
        }
        acc[r] = offset;
    }
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
/* A block's 32 weights as int16 in one register: 8-bit blocks widen; a 4-bit block's 16 bytes go
 * to both halves of a 256-bit register, the upper half shifted down a nibble, so that the low
 * nibbles w[0..15] come first and the high nibbles w[16..31] after, as x's block is laid out. */
static inline __m512i block_weights_avx512(const uint8_t *wb, int64_t bits) {
    if (bits == 8) return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)wb));
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wb));
    const __m256i nibbles = _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0)),
                                             _mm256_set1_epi8(15));
    return _mm512_cvtepu8_epi16(nibbles);
}

/* acc[r] += one output's dot with row r of xq, for the output's blocks wo and their steps. A block
 * is one register: its integer dot (pairs of int16 products in 16 int32 lanes) times its step
 * goes into one of two accumulators a row, even and odd blocks, so that consecutive blocks do not
 * wait on one another. Pairs of products sum to at most 2 * 128 * 32767: no overflow. */
static inline __attribute__((always_inline)) void block_dots_avx512(const uint8_t *wo, int64_t bits,
                                                                    const int16_t *xq, const float *steps, int64_t R,
                                                                    int64_t IN, float *acc) {
    const int64_t nb = IN / 32, block_bytes = bits * 4;
    __m512 even[8], odd[8];
    for (int64_t r = 0; r < R; r++) even[r] = odd[r] = _mm512_setzero_ps();
    int64_t blk = 0;
    for (; blk + 1 < nb; blk += 2) {
        const __m512i w0 = block_weights_avx512(wo + blk * block_bytes, bits);
        const __m512i w1 = block_weights_avx512(wo + (blk + 1) * block_bytes, bits);
        for (int64_t r = 0; r < R; r++) {
            const int16_t *xb = xq + r * IN + blk * 32;
            const __m512i d0 = _mm512_madd_epi16(w0, _mm512_loadu_si512(xb));
            const __m512i d1 = _mm512_madd_epi16(w1, _mm512_loadu_si512(xb + 32));
            even[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(steps[r * nb + blk]), even[r]);
            odd[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_set1_ps(steps[r * nb + blk + 1]), odd[r]);
        }
    }
    if (blk < nb) {
        const __m512i w0 = block_weights_avx512(wo + blk * block_bytes, bits);
        for (int64_t r = 0; r < R; r++) {
            const __m512i d0 = _mm512_madd_epi16(w0, _mm512_loadu_si512(xq + r * IN + blk * 32));
            even[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_set1_ps(steps[r * nb + blk]), even[r]);
        }
    }
    for (int64_t r = 0; r < R; r++) acc[r] += _mm512_reduce_add_ps(_mm512_add_ps(even[r], odd[r]));
}
#elif defined(__AVX2__)
/* A block's weights 0..15 and 16..31 as int16, in two 256-bit registers. */
static inline void block_weights_avx2(const uint8_t *wb, int64_t bits, __m256i *lo, __m256i *hi) {
    if (bits == 8) {
        *lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb));
        *hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wb + 16)));
        return;
    }
    const __m128i packed = _mm_loadu_si128((const __m128i *)wb), nibble = _mm_set1_epi8(15);
    *lo = _mm256_cvtepu8_epi16(_mm_and_si128(packed, nibble));
    *hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), nibble));
}

/* One block's integer dot with 32 int16 of x, in 8 int32 lanes: sums of four products, at most
 * 4 * 128 * 32767 a lane. */
static inline __m256i block_dot_avx2(__m256i lo, __m256i hi, const int16_t *xb) {
    return _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_loadu_si256((const __m256i *)xb)),
                            _mm256_madd_epi16(hi, _mm256_loadu_si256((const __m256i *)(xb + 16))));
}

/* block_dots_avx512 on 256-bit registers, a block two of them. */
static inline __attribute__((always_inline)) void block_dots_avx2(const uint8_t *wo, int64_t bits, const int16_t *xq,
                                                                  const float *steps, int64_t R, int64_t IN,
                                                                  float *acc) {
    const int64_t nb = IN / 32, block_bytes = bits * 4;
    __m256 even[8], odd[8];
    for (int64_t r = 0; r < R; r++) even[r] = odd[r] = _mm256_setzero_ps();
    int64_t blk = 0;
    for (; blk + 1 < nb; blk += 2) {
        __m256i lo0, hi0, lo1, hi1;
        block_weights_avx2(wo + blk * block_bytes, bits, &lo0, &hi0);
        block_weights_avx2(wo + (blk + 1) * block_bytes, bits, &lo1, &hi1);
        for (int64_t r = 0; r < R; r++) {
            const int16_t *xb = xq + r * IN + blk * 32;
            const __m256 d0 = _mm256_cvtepi32_ps(block_dot_avx2(lo0, hi0, xb));
            const __m256 d1 = _mm256_cvtepi32_ps(block_dot_avx2(lo1, hi1, xb + 32));
            even[r] = _mm256_fmadd_ps(d0, _mm256_set1_ps(steps[r * nb + blk]), even[r]);
            odd[r] = _mm256_fmadd_ps(d1, _mm256_set1_ps(steps[r * nb + blk + 1]), odd[r]);
        }
    }
    if (blk < nb) {
        __m256i lo0, hi0;
        block_weights_avx2(wo + blk * block_bytes, bits, &lo0, &hi0);
        for (int64_t r = 0; r < R; r++) {
            const __m256 d0 = _mm256_cvtepi32_ps(block_dot_avx2(lo0, hi0, xq + r * IN + blk * 32));
            even[r] = _mm256_fmadd_ps(d0, _mm256_set1_ps(steps[r * nb + blk]), even[r]);
        }
    }
    for (int64_t r = 0; r < R; r++) acc[r] += lane_sum(_mm256_add_ps(even[r], odd[r]));
}
#else
static void block_dots_scalar(const uint8_t *wo, int64_t bits, const int16_t *xq, const float *steps, int64_t R,
                              int64_t IN, float *acc) {
    const int64_t nb = IN / 32, block_bytes = bits * 4;
    for (int64_t blk = 0; blk < nb; blk++) {
        const uint8_t *wb = wo + blk * block_bytes;
        int32_t wi[32]; /* the block's weights, unpacked once for all rows */
        for (int i = 0; i < 32; i++) wi[i] = bits == 8 ? (int8_t)wb[i] : (i < 16 ? wb[i] & 15 : wb[i - 16] >> 4);
        for (int64_t r = 0; r < R; r++) {
            int32_t dot = 0;
            for (int i = 0; i < 32; i++) dot += wi[i] * (int32_t)xq[r * IN + blk * 32 + i];
            acc[r] += (float)dot * steps[r * nb + blk];
        }
    }
}
#endif

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#define BLOCK_DOTS block_dots_avx512
#elif defined(__AVX2__)
#define BLOCK_DOTS block_dots_avx2
#else
#define BLOCK_DOTS block_dots_scalar
#endif

/* The ISA's block dots with the row count a constant: the compiler then keeps every row's
 * accumulators in registers (with R a variable they lived on the stack). */
static void block_dots(const uint8_t *wo, int64_t bits, const int16_t *xq, const float *steps, int64_t R, int64_t IN,
                       float *acc) {
    switch (R) {
    case 1: BLOCK_DOTS(wo, bits, xq, steps, 1, IN, acc); break;
    case 2: BLOCK_DOTS(wo, bits, xq, steps, 2, IN, acc); break;
    case 3: BLOCK_DOTS(wo, bits, xq, steps, 3, IN, acc); break;
    case 4: BLOCK_DOTS(wo, bits, xq, steps, 4, IN, acc); break;
    case 5: BLOCK_DOTS(wo, bits, xq, steps, 5, IN, acc); break;
    case 6: BLOCK_DOTS(wo, bits, xq, steps, 6, IN, acc); break;
    case 7: BLOCK_DOTS(wo, bits, xq, steps, 7, IN, acc); break;
    default: BLOCK_DOTS(wo, bits, xq, steps, DECODE_MAX_ROWS, IN, acc); break;
    }
}
#undef BLOCK_DOTS

/* How many outputs ahead block_linear fetches weights, and the fetch: an output's blocks, scales
 * and offsets are three streams, short ones (a 576-wide 4-bit row is 288 bytes), and every matrix
 * of a decode step starts new ones; the hardware prefetchers ramp up on each too late. */
#define PREFETCH_OUTPUTS 8
static inline void fetch_output(const uint8_t *w, const float *scales, const float *offsets, int64_t o, int64_t nb,
                                int64_t block_bytes) {
    const char *q = (const char *)(w + o * nb * block_bytes);
    for (int64_t at = 0; at < nb * block_bytes; at += 64) __builtin_prefetch(q + at);
    for (int64_t at = 0; at < nb; at += 16) {
        __builtin_prefetch(scales + o * nb + at);
        __builtin_prefetch(offsets + o * nb + at);
    }
}

void tenor_block_linear_f32(const float *x, const uint8_t *w, int64_t bits, const float *scales,
                            const float *offsets, const float *bias, float *out, int64_t R, int64_t IN, int64_t OUT,
                            int64_t threads) {
    if (bits == 16 || bits == 32) {
        float_linear(x, w, bits, bias, out, R, IN, OUT, threads);
        return;
    }
    const int64_t nb = IN / 32, block_bytes = bits * 4;
    int16_t *xq = malloc(sizeof(int16_t) * R * IN);
    float *xd = malloc(sizeof(float) * R * nb), *xsum = malloc(sizeof(float) * R * nb);
    for (int64_t r = 0; r < R; r++)
        for (int64_t blk = 0; blk < nb; blk++) {
            const float *xb = x + r * IN + blk * 32;
            float sum = 0.0f, amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                sum += xb[i];
                amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
            }
            const float d = amax / 32767.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
            for (int i = 0; i < 32; i++) xq[r * IN + blk * 32 + i] = (int16_t)lrintf(xb[i] * inv);
            xd[r * nb + blk] = d;
            xsum[r * nb + blk] = sum;
        }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t o = 0; o < OUT; o++) {
        float acc[DECODE_MAX_ROWS], steps[R * nb];
        if (o + PREFETCH_OUTPUTS < OUT) fetch_output(w, scales, offsets, o + PREFETCH_OUTPUTS, nb, block_bytes);
        block_steps(scales + o * nb, offsets + o * nb, xd, xsum, R, nb, steps, acc);
        block_dots(w + o * nb * block_bytes, bits, xq, steps, R, IN, acc);
        for (int64_t r = 0; r < R; r++) out[r * OUT + o] = acc[r] + (bias ? bias[o] : 0.0f);
    }
    free(xq);
    free(xd);
    free(xsum);
}

static void store_bf16(const float *x, uint16_t *out, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) out[i] = float_to_bf16(x[i]);
}

/* x's n floats as int8 steps of absmax / 127 (at least 1e-6 / 127), rounded to nearest even;
 * returns the step. The same float32 operations as PagedKVCache.write's, so that both paths store
 * the same bytes. */
static float store_int8(const float *x, int8_t *out, int64_t n) {
    float top = 0.0f;
    for (int64_t i = 0; i < n; i++) top = fmaxf(top, fabsf(x[i]));
    const float step = fmaxf(top, 1e-6f) / 127.0f;
    for (int64_t i = 0; i < n; i++) out[i] = (int8_t)fminf(fmaxf(nearbyintf(x[i] / step), -127.0f), 127.0f);
    return step;
}

/* Llama's rotary ("rotate half", over whole heads) applied in place to the q and k heads of
 * qkv [T, (H + 2K) * E], then k and v written to the cache at slots [T].
 *   cos, sin [T, E]  the step's tables, the rotation's sign folded into sin
 *   kc, vc  [K, slots, E]  one layer's cache: float32 (kv_bits 32), bf16 (16) or int8 (8)
 *   ks, vs  [K, slots]     an int8 cache's scales (NULL otherwise)
 * Rows are shared among the threads from 16 on (each row its own slot). */
void tenor_rotary_kv_write_f32(float *qkv, const float *cos, const float *sin, void *kc, void *vc, float *ks,
                               float *vs, const int64_t *slots, int64_t T, int64_t H, int64_t K, int64_t E,
                               int64_t num_slots, int64_t kv_bits, int64_t threads) {
    const int64_t half = E / 2, width = (H + 2 * K) * E;
#pragma omp parallel for schedule(static) num_threads(threads) if (T >= 16)
    for (int64_t t = 0; t < T; t++) {
        float *row = qkv + t * width;
        const float *c = cos + t * E, *s = sin + t * E;
        for (int64_t head = 0; head < H + K; head++) {
            float *x = row + head * E;
            float rotated[E];
#pragma omp simd
            for (int64_t i = 0; i < half; i++) {
                rotated[i] = x[i] * c[i] + x[i + half] * s[i];
                rotated[i + half] = x[i + half] * c[i + half] + x[i] * s[i + half];
            }
#pragma omp simd
            for (int64_t i = 0; i < E; i++) x[i] = rotated[i];
        }
        const int64_t slot = slots[t];
        for (int64_t h = 0; h < K; h++) {
            const float *k = row + (H + h) * E, *v = row + (H + K + h) * E;
            const int64_t at = (h * num_slots + slot) * E;
            if (kv_bits == 8) {
                ks[h * num_slots + slot] = store_int8(k, (int8_t *)kc + at, E);
                vs[h * num_slots + slot] = store_int8(v, (int8_t *)vc + at, E);
                continue;
            }
            if (kv_bits == 16) {
                store_bf16(k, (uint16_t *)kc + at, E);
                store_bf16(v, (uint16_t *)vc + at, E);
                continue;
            }
            float *kd = (float *)kc + at, *vd = (float *)vc + at;
#pragma omp simd
            for (int64_t i = 0; i < E; i++) {
                kd[i] = k[i];
                vd[i] = v[i];
            }
        }
    }
}

/* x += delta over n floats, split over the threads where it pays. */
static void add_in_place(float *x, const float *delta, int64_t n, int64_t threads) {
#pragma omp parallel for simd schedule(static) num_threads(threads) if (n >= PARALLEL_MIN_FLOATS)
    for (int64_t i = 0; i < n; i++) x[i] += delta[i];
}

/* A whole Llama step's layers in one call (a decode step, or one with prompt chunks): Python's
 * per-layer dispatch (a few dozen torch ops and kernel calls a layer) costs as much as the layer's
 * arithmetic at one stream; at 32 streams on a Zen 4 a fused decode step took 0.87x the
 * layer-by-layer one's time (benchmarks/fused_step_ab.py). Each layer is the same chain of the
 * kernels the layer-by-layer path calls, so the numbers are the same:
 *   h = rms_norm(x); qkv = h W_qkv; rotate q, k and write k, v to the cache; attention;
 *   x += attn W_o; h = rms_norm(x); x += silu_mul(h W_gate_up) W_down.
 *   x       [R, D] in place: the embeddings in, the last layer's output out
 *   weights [L, 34] per layer: attn_norm, mlp_norm, then (weight, bits, scales, offsets) of qkv,
 *           o, gate_up, down in tenor_block_linear_f32's layouts (for up to DECODE_MAX_ROWS rows),
 *           then the same four in tenor_int8_gemm_f32's (zeros for a linear without that form),
 *           which take the rows past DECODE_MAX_ROWS, or from gemm_min_rows (tenor/models/native.py's
 *           GEMM_MIN_ROWS for a decode step, which says why); pointers as integers
 *   kv      [L, 2, K, slots, E] the cache, float32 (kv_bits 32), bf16 (16) or int8 (8), an int8
 *           one with scales kv_scales [L, 2, K, slots] (else NULL); cos, sin [R, E]; slots [R]
 *   table, lengths, tile: each row's blocks [R, N] and context length [R] (including its own
 *           token), and the prompt tile, as tenor_paged_attention takes them
 *   scores  tenor_paged_attention's scratch for that tile
 *   op_seconds  NULL, or [10] float64 that each kind of op's wall time is added to (see below) */
void tenor_llama_layers_f32(float *x, const int64_t *weights, void *kv, int64_t kv_bits, float *kv_scales,
                            const float *cos, const float *sin, const int64_t *slots, const int64_t *table,
                            const int64_t *lengths, float *scores, int64_t R, int64_t L, int64_t D, int64_t H,
                            int64_t K, int64_t E, int64_t F, int64_t N, int64_t block_size, int64_t num_slots,
                            int64_t max_len, int64_t tile, float eps, int64_t threads, int64_t gemm_min_rows,
                            double *op_seconds) {
    const int64_t width = (H + 2 * K) * E, layer_kv = 2 * K * num_slots * E * (kv_bits / 8); /* bytes */
    /* the integer GEMM past the decode kernel's rows, and from gemm_min_rows where a linear has its
     * form (a nonzero pointer), as DecodeKernel.decoding chooses for a decode step; x's quantized
     * copy wherever a linear may take it */
    const int all_gemm = R > DECODE_MAX_ROWS, gemm_rows = R >= gemm_min_rows;
    int64_t widest = F > D ? F : D; /* the widest input a linear quantizes for the GEMM, int16 at most */
    widest = widest > H * E ? widest : H * E;
    float *h = malloc(sizeof(float) * R * D), *qkv = malloc(sizeof(float) * R * width);
    float *q = malloc(sizeof(float) * R * H * E), *attn = malloc(sizeof(float) * R * H * E);
    float *gate_up = malloc(sizeof(float) * R * 2 * F), *act = malloc(sizeof(float) * R * F);
    float *delta = malloc(sizeof(float) * R * D);
    uint8_t *xq = all_gemm || gemm_rows ? malloc((size_t)(R * widest * 2 + 8 * R * (widest / 32))) : NULL;
    /* Given op_seconds, each kind of op's wall time over the layers is added to its entry, in the
     * order of native.FUSED_OPS (benchmarks/step_profile.py prints them): a clock read an op, ~10 us
     * a step in all. */
    double clock = op_seconds ? omp_get_wtime() : 0.0;
#define TIMED(op)                               \
    if (op_seconds) {                           \
        const double now = omp_get_wtime();     \
        op_seconds[op] += now - clock;          \
        clock = now;                            \
    }
    enum { RMS_NORM, QKV, ROTARY_KV_WRITE, Q_COPY, ATTENTION, O, RESIDUAL_ADD, GATE_UP, SILU_MUL, DOWN };
    for (int64_t l = 0; l < L; l++) {
        const int64_t *w = weights + l * 34;
#define W_F32(i) ((const float *)(intptr_t)w[i])
#define LINEAR(j, in, IN, out, OUT)                                                                                  \
    if (all_gemm || (gemm_rows && w[18 + 4 * (j)] != 0))                                                           \
        tenor_int8_gemm_f32(in, (const uint8_t *)(intptr_t)w[18 + 4 * (j)], w[19 + 4 * (j)], W_F32(20 + 4 * (j)),  \
                            W_F32(21 + 4 * (j)), NULL, out, xq, R, IN, OUT, threads);                              \
    else                                                                                                            \
        tenor_block_linear_f32(in, (const uint8_t *)(intptr_t)w[2 + 4 * (j)], w[3 + 4 * (j)], W_F32(4 + 4 * (j)), \
                               W_F32(5 + 4 * (j)), NULL, out, R, IN, OUT, threads)
        char *kc = (char *)kv + l * layer_kv, *vc = kc + layer_kv / 2;
        float *ks = kv_scales ? kv_scales + l * 2 * K * num_slots : NULL, *vs = ks ? ks + K * num_slots : NULL;
        tenor_rms_norm_f32(x, W_F32(0), h, R, D, eps, threads);
        TIMED(RMS_NORM);
        LINEAR(0, h, D, qkv, width);
        TIMED(QKV);
        tenor_rotary_kv_write_f32(qkv, cos, sin, kc, vc, ks, vs, slots, R, H, K, E, num_slots, kv_bits, threads);
        TIMED(ROTARY_KV_WRITE);
#pragma omp parallel for schedule(static) num_threads(threads) if (R * H * E >= PARALLEL_MIN_FLOATS)
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = 0; i < H * E; i++) q[r * H * E + i] = qkv[r * width + i];
        TIMED(Q_COPY);
        tenor_paged_attention(q, kc, vc, ks, vs, kv_bits, table, lengths, attn, scores, R, H, K, E, N,
                              block_size, num_slots, max_len, 1.0f / sqrtf((float)E), tile, threads);
        TIMED(ATTENTION);
        LINEAR(1, attn, H * E, delta, D);
        TIMED(O);
        add_in_place(x, delta, R * D, threads);
        TIMED(RESIDUAL_ADD);
        tenor_rms_norm_f32(x, W_F32(1), h, R, D, eps, threads);
        TIMED(RMS_NORM);
        LINEAR(2, h, D, gate_up, 2 * F);
        TIMED(GATE_UP);
        tenor_silu_mul_f32(gate_up, act, R, F, threads);
        TIMED(SILU_MUL);
        LINEAR(3, act, F, delta, D);
        TIMED(DOWN);
        add_in_place(x, delta, R * D, threads);
        TIMED(RESIDUAL_ADD);
#undef W_F32
#undef LINEAR
    }
#undef TIMED
    free(xq);
    free(h);
    free(qkv);
    free(q);
    free(attn);
    free(gate_up);
    free(act);
    free(delta);
}
