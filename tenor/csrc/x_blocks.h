/* Rows of x quantized per block of 32 for the integer GEMM: int8 against 4-bit weights, int16
 * against 8-bit ones, laid out by tiles of TILE_ROWS rows as the GEMM's loops read them (see
 * quantize_rows). Included by int8_gemm.c only, after its TILE_ROWS. */
#ifndef TENOR_X_BLOCKS_H
#define TENOR_X_BLOCKS_H

#include "kernels.h"

#ifdef __AVX2__
/* A block of 32 floats into v, its absmax (returned) and, where `sum` is given, its float sum
 * (int16 x only; int8 x sums its quantized block). Inlined, so a NULL `sum` folds the adds away. */
static inline float block_absmax(const float *xb, __m256 v[4], float *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps(), total = _mm256_setzero_ps();
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(xb + 8 * j);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
        if (sum) total = _mm256_add_ps(total, v[j]);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    if (sum) {
        __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps(total, 1));
        s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
        *sum = _mm_cvtss_f32(s4);
    }
    return _mm_cvtss_f32(m4);
}

/* One block of 32 floats -> 32 int8 (rounded to nearest even) at step absmax / 127; returns the
 * step and sets *sum to the sum of the quantized block (see quantize_rows). */
static inline float quantize_block(const float *xb, int8_t *qb, float *sum) {
    __m256 v[4];
    const float d = block_absmax(xb, v, NULL) / 127.0f;
    const __m256 inv = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
    __m256i i[4];
    for (int j = 0; j < 4; j++) i[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inv));
    const __m256i pairs = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    *sum = d * (float)_mm_cvtsi128_si32(s4);
    /* packs work within 128-bit lanes: the permute puts the four groups of 8 back in order */
    const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    _mm256_storeu_si256((__m256i *)qb, _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    return d;
}

/* quantize_block for int16 (step absmax / 32767), for 8-bit weights. */
static inline float quantize_block16(const float *xb, int16_t *qb, float *sum) {
    __m256 v[4];
    const float d = block_absmax(xb, v, sum) / 32767.0f;
    const __m256 inv = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
    for (int j = 0; j < 4; j += 2) {
        const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inv));
        const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(v[j + 1], inv));
        /* packs works within 128-bit lanes: the permute puts the two groups of 8 back in order */
        _mm256_storeu_si256((__m256i *)(qb + 8 * j), _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8));
    }
    return d;
}
#else
/* The portable block_absmax: `sum` as there. */
static inline float block_absmax(const float *xb, float *sum) {
    float total = 0.0f, amax = 0.0f;
    for (int i = 0; i < 32; i++) {
        total += xb[i];
        amax = fmaxf(amax, fabsf(xb[i]));
    }
    if (sum) *sum = total;
    return amax;
}

static inline float quantize_block16(const float *xb, int16_t *qb, float *sum) {
    const float d = block_absmax(xb, sum) / 32767.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; i++) qb[i] = (int16_t)nearbyintf(xb[i] * inv);
    return d;
}

static inline float quantize_block(const float *xb, int8_t *qb, float *sum) {
    const float d = block_absmax(xb, NULL) / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
    int32_t total = 0;
    for (int i = 0; i < 32; i++) total += qb[i] = (int8_t)nearbyintf(xb[i] * inv);
    *sum = d * (float)total;
    return d;
}
#endif

/* x [R, IN] -> xq (int8 for bits 4, int16 for bits 8: es bytes an element), xd (the step of each
 * block: absmax / 127 or / 32767) and xsum (each block's sum, for the weights' offsets), laid out
 * by tiles of TILE_ROWS rows (the last may be shorter, n rows): the tile at row r0 starts at byte
 * r0 * IN * es of xq and at r0 * IN / 32 of xd and xsum; in it, block b, step s (the block's 4
 * bytes of x at 4s), row r at byte 32 es nb + 4ns + 4r, and block b, row r at xd[nb + r]. A
 * tile's loop then reads every row's x from one pointer at constant offsets.
 * xsum is the sum of the quantized block for int8 x, so that a block's product is exactly W . xq:
 * 4-bit levels lie above their offset (the block's minimum), and the exact float sum would leave an
 * error of (W - offset) . (x - xq) rather than W . (x - xq), W's block being centred near zero
 * (that cost the default model 2-6 points of prefill top-1, benchmarks/RESULTS.md). For int16 x it is
 * the exact float sum: x's rounding is 256 times finer there, and 8-bit levels sit around zero. */
static void quantize_rows(const float *x, int64_t bits, uint8_t *xq, float *xd, float *xsum, int64_t R,
                          int64_t IN, int64_t threads) {
    const int64_t nb = IN / 32, es = bits == 8 ? 2 : 1;
    /* A row at a time, its blocks in turn: the tile's place is worked out once a row (a loop over
     * every (row, block) pair divided by nb for each, which cost more than the quantizing). */
#pragma omp parallel for schedule(static) num_threads(threads) if (R * IN >= PARALLEL_MIN_FLOATS)
    for (int64_t row = 0; row < R; row++) {
        const int64_t r0 = row - row % TILE_ROWS, r = row - r0, n = R - r0 < TILE_ROWS ? R - r0 : TILE_ROWS;
        uint8_t *tile = xq + r0 * IN * es + 4 * r;
        float *steps = xd + r0 * nb + r, *sums = xsum + r0 * nb + r;
        for (int64_t b = 0; b < nb; b++) {
            int16_t q[32]; /* 32 int8 or 32 int16 */
            const float *xb = x + row * IN + b * 32;
            steps[b * n] = bits == 8 ? quantize_block16(xb, q, &sums[b * n]) : quantize_block(xb, (int8_t *)q, &sums[b * n]);
            uint8_t *block = tile + b * 32 * es * n;
            for (int step = 0; step < 8 * es; step++) __builtin_memcpy(block + 4 * n * step, (uint8_t *)q + 4 * step, 4);
        }
    }
}

#endif
