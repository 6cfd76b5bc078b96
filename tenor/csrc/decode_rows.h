/* Decode attention over a bf16 or int8 cache in 256-bit vectors, on AVX2 and AVX-512 builds alike
 * (tenor_paged_attention's path for one decoding row with head dim 64, included by attention.c
 * only, after the helpers it uses; see there for the cache's shapes). `bits` (16 or 8) is a
 * constant in each copy, so its branches fold away.
 *
 * attend_tile widens each chunk of K or V rows into a float buffer that its FMAs then read; on
 * AVX2 the buffer's stores and the reloads cost about as much as the FMAs, and softmax's three
 * passes (max, exp, normalize) a seventh of the whole. Here:
 *   - scores: each K row is widened into registers once and dotted with every query head;
 *   - softmax: the maximum is kept as the scores are stored, one pass takes e^(s - max) and its
 *     sum with FMAs, and the division is left to the G x 64 outputs;
 *   - V: 16 columns at a time for up to three heads, their sums in registers, each row widened as
 *     it is read;
 *   - fetching: the K pass asks for K's and V's blocks two ahead together (V's in the V pass
 *     left more of memory's latency exposed: 0.91x the time), and the V pass for the first two
 *     of the item the thread takes next (next_item: 0.93-0.94x the time from memory).
 * On a Zen 4 built for Haswell (benchmarks/attention_ab.py's decode step: 32 streams of 190-320
 * tokens, 30 layers): 0.82x the time with the cache read from memory, 0.70-0.74x from L3. Built
 * natively there (AVX-512), 0.85-0.86x the time of attend_tile's 512-bit form, whose buffer and
 * per-row reductions cost it more than the wider vectors saved. An int8 cache's rows widen in as
 * many instructions as bf16's, half the bytes: 0.74x the time of attend_tile's int8 as AVX2 code,
 * 0.89x this path's bf16. */
#ifndef TENOR_DECODE_ROWS_H
#define TENOR_DECODE_ROWS_H

#include "paged_cache.h"

#if defined(__AVX2__) && defined(__FMA__)
#define DECODE_ROWS 1
#define DECODE_MAX_G 8 /* query heads a kv head: stack arrays are sized by it */

/* Elements at .. at + 7 of a bf16 (bf16 is float32's top half) or int8 (unscaled) cache as 8 floats */
static inline __attribute__((always_inline)) __m256 row8(const void *rows, int64_t at, const int bits) {
    if (bits == 8)
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)rows + at))));
    const uint16_t *p = (const uint16_t *)rows + at;
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* The cache's rows from element `at` on */
static inline __attribute__((always_inline)) const void *rows_at(const void *cache, int64_t at, const int bits) {
    return (const char *)cache + at * (bits / 8);
}

/* e^x for x <= 0 (a score less the maximum): fast_expf's reduction and polynomial in FMAs, whose
 * plain C form gcc does not contract under -std=c99. Below -87.3, e^-87.3; NaN stays NaN (maxps
 * returns its second operand where either is NaN). */
static inline __attribute__((always_inline)) __m256 exp_nonpositive(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-87.3f), x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

static inline __attribute__((always_inline)) float lane_max(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

/* s[0..len) = e^(s - top); returns their sum. */
static inline __attribute__((always_inline)) float exp_scores(float *s, int64_t len, float top) {
    const __m256 shift = _mm256_set1_ps(top);
    __m256 total = _mm256_setzero_ps();
    int64_t t = 0;
    for (; t + 8 <= len; t += 8) {
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + t), shift));
        _mm256_storeu_ps(s + t, e);
        total = _mm256_add_ps(total, e);
    }
    if (t < len) {
        const __m256i live = first_lanes(len - t);
        const __m256 e = _mm256_and_ps(exp_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(s + t, live), shift)),
                                       _mm256_castsi256_ps(live));
        _mm256_maskstore_ps(s + t, live, e);
        total = _mm256_add_ps(total, e);
    }
    return sum_lanes(total);
}

/* scores[g * max_len + c0 + i] = (q_g . K row i) * scale (* row_scales[i], int8) for a chunk's m
 * rows (from `rows`), each row widened into registers once for all G heads; tops[g] keeps the
 * largest. Each row asks for the same row of K's and of V's block two ahead, so that the V pass
 * finds its rows in L2. */
static inline __attribute__((always_inline)) void chunk_scores_rows(const float *q, const void *rows,
                                                                    const float *row_scales, const int bits, int64_t m,
                                                                    int64_t G, const block_ahead *k_ahead,
                                                                    const block_ahead *v_ahead, int64_t c0,
                                                                    float scale, float *scores, int64_t max_len,
                                                                    __m256 *tops) {
    enum { E = 64 };
    __m256 dots[DECODE_MAX_G][CHUNK];
    for (int64_t i = 0; i < m; i++) {
        fetch_row(k_ahead, c0 + i, E * (bits / 8));
        fetch_row(v_ahead, c0 + i, E * (bits / 8));
        __m256 r[E / 8];
        for (int c = 0; c < E / 8; c++) r[c] = row8(rows, i * E + 8 * c, bits);
        for (int64_t g = 0; g < G; g++) { /* two chains of FMAs a dot */
            const float *qg = q + g * E;
            __m256 a = _mm256_mul_ps(r[0], _mm256_loadu_ps(qg)), b = _mm256_mul_ps(r[1], _mm256_loadu_ps(qg + 8));
            for (int c = 2; c < E / 8; c += 2) {
                a = _mm256_fmadd_ps(r[c], _mm256_loadu_ps(qg + 8 * c), a);
                b = _mm256_fmadd_ps(r[c + 1], _mm256_loadu_ps(qg + 8 * c + 8), b);
            }
            dots[g][i] = _mm256_add_ps(a, b);
        }
    }
    for (int64_t i = m; i < (m + 7) / 8 * 8; i++)
        for (int64_t g = 0; g < G; g++) dots[g][i] = _mm256_setzero_ps();
    const __m256 scaled = _mm256_set1_ps(scale);
    for (int64_t h = 0; h < m; h += 8) {
        const __m256i live = first_lanes(m - h);
        const __m256 steps = bits != 8 ? scaled
                             : m - h >= 8 ? _mm256_mul_ps(scaled, _mm256_loadu_ps(row_scales + h))
                                          : _mm256_mul_ps(scaled, _mm256_maskload_ps(row_scales + h, live));
        for (int64_t g = 0; g < G; g++) {
            const __m256 s = _mm256_mul_ps(sum8(dots[g] + h), steps);
            float *to = scores + g * max_len + c0 + h;
            if (m - h >= 8) { /* vmaskmovps to memory is microcoded on AMD: only for a partial half */
                _mm256_storeu_ps(to, s);
                tops[g] = _mm256_max_ps(tops[g], s);
            } else {
                _mm256_maskstore_ps(to, live, s);
                const __m256 seen = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, _mm256_castsi256_ps(live));
                tops[g] = _mm256_max_ps(tops[g], seen);
            }
        }
    }
}

/* og[g * E + 0..15] += sum over the m rows of p[g * max_len + i] * V row i's 16 columns (from
 * `rows`, E apart), for GN <= 3 heads: 12 sums (even and odd rows apart, so that each FMA chain
 * waits on half as many), a row's two vectors and p's broadcast fill fifteen of the sixteen ymm. */
static inline __attribute__((always_inline)) void v_columns(const void *rows, const int bits, const float *p,
                                                            int64_t max_len, int64_t m, float *og, const int GN) {
    enum { E = 64 };
    __m256 acc[2][3][2];
    for (int g = 0; g < GN; g++) {
        acc[0][g][0] = _mm256_loadu_ps(og + g * E);
        acc[0][g][1] = _mm256_loadu_ps(og + g * E + 8);
        acc[1][g][0] = acc[1][g][1] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < m; i += 2) /* the parity a constant in each half of the unrolled pair */
        for (int odd = 0; odd < 2 && i + odd < m; odd++) {
            const __m256 x0 = row8(rows, (i + odd) * E, bits), x1 = row8(rows, (i + odd) * E + 8, bits);
            for (int g = 0; g < GN; g++) {
                const __m256 pb = _mm256_broadcast_ss(p + g * max_len + i + odd);
                acc[odd][g][0] = _mm256_fmadd_ps(pb, x0, acc[odd][g][0]);
                acc[odd][g][1] = _mm256_fmadd_ps(pb, x1, acc[odd][g][1]);
            }
        }
    for (int g = 0; g < GN; g++) {
        _mm256_storeu_ps(og + g * E, _mm256_add_ps(acc[0][g][0], acc[1][g][0]));
        _mm256_storeu_ps(og + g * E + 8, _mm256_add_ps(acc[0][g][1], acc[1][g][1]));
    }
}

/* out[g * E ..] = the weighted sums of V's first len rows for the G heads, by the e^(s - max) in
 * scores (unnormalized; an int8 row's weight times its scale from vs). Each head's sums stay in
 * registers for a chunk's 16 rows. Each chunk asks for one of `next`'s first blocks. */
static inline __attribute__((always_inline)) void decode_values(const void *v, const float *vs, const int bits,
                                                                const int64_t *blocks, int64_t len,
                                                                const float *scores, int64_t max_len, int64_t G,
                                                                int64_t block_size, int64_t head_base, float *out,
                                                                const next_item *next) {
    enum { E = 64 };
    for (int64_t e = 0; e < G * E; e++) out[e] = 0.0f;
    int64_t fetches = 0; /* of the next item's blocks, one a chunk */
    for (int64_t start = 0, nb = 0; start < len; start += block_size, nb++) {
        const int64_t base = head_base + blocks[nb] * block_size, n = len - start < block_size ? len - start : block_size;
        for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
            fetch_next_block(next, fetches++, E * (bits / 8));
            const int64_t m = n - c0 < CHUNK ? n - c0 : CHUNK;
            const float *p = scores + start + c0;
            int64_t stride = max_len;
            float scaled[DECODE_MAX_G * CHUNK]; /* int8: each row's weights times its scale, once a chunk */
            if (bits == 8) {
                for (int64_t g = 0; g < G; g++)
                    for (int64_t i = 0; i < m; i++) scaled[g * CHUNK + i] = p[g * max_len + i] * vs[base + c0 + i];
                p = scaled;
                stride = CHUNK;
            }
            for (int64_t col = 0; col < E; col += 16) { /* heads three at a time, then the last one or two */
                const void *rows = rows_at(v, (base + c0) * E + col, bits);
                int64_t g = 0;
                for (; g + 3 <= G; g += 3) v_columns(rows, bits, p + g * stride, stride, m, out + g * E + col, 3);
                if (G - g == 2)
                    v_columns(rows, bits, p + g * stride, stride, m, out + g * E + col, 2);
                else if (G - g == 1)
                    v_columns(rows, bits, p + g * stride, stride, m, out + g * E + col, 1);
            }
        }
    }
}

/* attend_tile for one decoding row (T = 1) over a bf16 or int8 cache (scales ks, vs), head dim 64,
 * G <= DECODE_MAX_G. */
static inline __attribute__((always_inline)) void attend_decode_rows(const float *q, const void *k, const void *v,
                                                                     const float *ks, const float *vs, const int bits,
                                                                     const int64_t *blocks, int64_t len, float *out,
                                                                     float *scores, int64_t G, int64_t block_size,
                                                                     int64_t head_base, int64_t max_len, float scale,
                                                                     const next_item *next) {
    enum { E = 64 };
    if (len <= 0) { /* no context: zeros, as attend_tile gives */
        for (int64_t e = 0; e < G * E; e++) out[e] = 0.0f;
        return;
    }
    for (int64_t nb = 0; nb < 2 && nb * block_size < len; nb++) { /* the first two blocks of K and V at once */
        const int64_t at = (head_base + blocks[nb] * block_size) * E, rows = len - nb * block_size;
        for (int64_t off = 0; off < (rows < block_size ? rows : block_size) * E * (bits / 8); off += 64) {
            __builtin_prefetch((const char *)rows_at(k, at, bits) + off, 0, 2);
            __builtin_prefetch((const char *)rows_at(v, at, bits) + off, 0, 2);
        }
    }
    __m256 tops[DECODE_MAX_G];
    for (int64_t g = 0; g < G; g++) tops[g] = _mm256_set1_ps(-INFINITY);
    for (int64_t start = 0, nb = 0; start < len; start += block_size, nb++) {
        const int64_t base = head_base + blocks[nb] * block_size, n = len - start < block_size ? len - start : block_size;
        const block_ahead k_ahead = ahead_of(k, ks, bits, blocks, nb, start, len, head_base, block_size, E);
        const block_ahead v_ahead = ahead_of(v, vs, bits, blocks, nb, start, len, head_base, block_size, E);
        for (int64_t c0 = 0; c0 < n; c0 += CHUNK)
            chunk_scores_rows(q, rows_at(k, (base + c0) * E, bits), bits == 8 ? ks + base + c0 : NULL, bits,
                              n - c0 < CHUNK ? n - c0 : CHUNK, G, &k_ahead, &v_ahead, c0, scale, scores + start,
                              max_len, tops);
    }
    float inv_total[DECODE_MAX_G];
    for (int64_t g = 0; g < G; g++) inv_total[g] = 1.0f / exp_scores(scores + g * max_len, len, lane_max(tops[g]));
    decode_values(v, vs, bits, blocks, len, scores, max_len, G, block_size, head_base, out, next);
    for (int64_t g = 0; g < G; g++)
        for (int64_t e = 0; e < E; e++) out[g * E + e] *= inv_total[g];
}
#else
#define DECODE_ROWS 0
#define DECODE_MAX_G 0
#define attend_decode_rows(...) ((void)0)
#endif

#endif
