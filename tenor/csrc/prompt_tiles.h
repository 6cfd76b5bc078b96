/* Attention for a prompt's rows in tiles (tenor_paged_attention's prompt path, included by
 * attention.c only; see there for the cache's shapes). */
#ifndef TENOR_PROMPT_TILES_H
#define TENOR_PROMPT_TILES_H

#include <math.h>

#include "paged_cache.h"

/* Prompt tiles (T > 1 rows of one prompt, one token further each) as two small GEMMs per chunk of
 * the cache, each in registers blocked both ways: scores for SCORE_ROWS cache rows against up to
 * LANE_GROUP query vectors (a tile's rows x the kv head's query heads, transposed so that they
 * lie across a vector's lanes), and the weighted V sums of SUM_LANES query vectors at once.
 * attend_tile took one dot a (row, query vector), its 64-wide sum folded across lanes: a zmm
 * load each FMA and the folding bound it to a third of the FMAs' rate. Scores are kept [row][lane],
 * so the softmax runs down the rows, lane-wise, with no folding either. */
#if defined(__AVX512F__)
typedef __m512 vecf;
#define VL 16 /* lanes */
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VFMA _mm512_fmadd_ps
#define VMUL _mm512_mul_ps
#define SCORE_ROWS 8 /* 8 rows x 3 vectors of accumulators: 24 of the 32 zmm registers */
#define SUM_LANES 4  /* 4 lanes x 4 vectors of accumulators */
#define PROMPT_TILES 1
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vecf;
#define VL 8
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VFMA _mm256_fmadd_ps
#define VMUL _mm256_mul_ps
#define SCORE_ROWS 2 /* 2 rows x 6 vectors of the sixteen ymm registers */
#define SUM_LANES 2  /* 2 lanes x 4 vectors */
#define PROMPT_TILES 1
#else
#define PROMPT_TILES 0
#endif
#define LANE_GROUP 48 /* query vectors a pass over the context serves: 16 rows x 3 heads */

#if PROMPT_TILES
#define MAX_VECS (LANE_GROUP / VL)
/* s[i][lanes] = rows_i . qt[:, lanes] (times row_scales[i] where given) for the m live rows of a
 * padded chunk; qt [E][NV * VL]. */
static inline __attribute__((always_inline)) void tile_scores(const float *qt, const float *rows, int64_t m,
                                                             const int64_t E, const int NV, const float *row_scales,
                                                             float *s) {
    const int64_t L = VL * NV;
    for (int64_t i0 = 0; i0 < m; i0 += SCORE_ROWS) {
        vecf acc[SCORE_ROWS][MAX_VECS];
        for (int r = 0; r < SCORE_ROWS; r++)
            for (int n = 0; n < NV; n++) acc[r][n] = VSET1(0.0f);
        for (int64_t e = 0; e < E; e++) {
            vecf qv[MAX_VECS];
            for (int n = 0; n < NV; n++) qv[n] = VLOAD(qt + e * L + VL * n);
            for (int r = 0; r < SCORE_ROWS; r++) {
                const vecf x = VSET1(rows[(i0 + r) * E + e]);
                for (int n = 0; n < NV; n++) acc[r][n] = VFMA(x, qv[n], acc[r][n]);
            }
        }
        for (int r = 0; r < SCORE_ROWS && i0 + r < m; r++) {
            const vecf row_scale = VSET1(row_scales ? row_scales[i0 + r] : 1.0f);
            for (int n = 0; n < NV; n++) VSTORE(s + (i0 + r) * L + VL * n, VMUL(acc[r][n], row_scale));
        }
    }
}

/* o[lane][e] += sum_i p[i][lane] * rows_i[e] over the m rows of a chunk, for L lanes (a multiple of
 * VL, so of SUM_LANES); E a multiple of 4 * VL. */
static inline __attribute__((always_inline)) void tile_sums(const float *p, const float *rows, int64_t m,
                                                           const int64_t E, const int64_t L, float *o) {
    const int EV = 4;
    for (int64_t l0 = 0; l0 < L; l0 += SUM_LANES)
        for (int64_t e0 = 0; e0 < E; e0 += VL * EV) {
            vecf acc[SUM_LANES][4];
            for (int l = 0; l < SUM_LANES; l++)
                for (int j = 0; j < EV; j++) acc[l][j] = VLOAD(o + (l0 + l) * E + e0 + VL * j);
            for (int64_t i = 0; i < m; i++) {
                vecf row[4];
                for (int j = 0; j < EV; j++) {
                    row[j] = VLOAD(rows + i * E + e0 + VL * j);
                    __asm__("" : "+v"(row[j])); /* loaded once: gcc re-read it as each lane's FMA operand */
                }
                for (int l = 0; l < SUM_LANES; l++) {
                    const vecf w = VSET1(p[i * L + l0 + l]);
                    for (int j = 0; j < EV; j++) acc[l][j] = VFMA(w, row[j], acc[l][j]);
                }
            }
            for (int l = 0; l < SUM_LANES; l++)
                for (int j = 0; j < EV; j++) VSTORE(o + (l0 + l) * E + e0 + VL * j, acc[l][j]);
        }
}

/* Softmax down each of the L lanes of s [len][L], over the rows the lane's row sees (the tail of
 * the context is hidden from a tile's earlier rows: weight 0); each lane's total goes to `total`, to
 * normalise its sums once at the end. Out of line with trapping math off, as attention.c's softmax_in_place. */
__attribute__((noinline, optimize("no-trapping-math"))) static void softmax_down_lanes(float *s, int64_t len, int64_t L,
                                                                                       const int32_t *seen,
                                                                                       float *total) {
    float top[LANE_GROUP];
    for (int64_t l = 0; l < L; l++) top[l] = -INFINITY, total[l] = 0.0f;
    for (int32_t i = 0; i < len; i++)
#pragma omp simd
        for (int64_t l = 0; l < L; l++) top[l] = i < seen[l] && s[i * L + l] > top[l] ? s[i * L + l] : top[l];
    for (int32_t i = 0; i < len; i++)
#pragma omp simd
        for (int64_t l = 0; l < L; l++) {
            const float w = i < seen[l] ? fast_expf(s[i * L + l] - top[l]) : 0.0f;
            s[i * L + l] = w;
            total[l] += w;
        }
}

/* attend_tile for a prompt tile's query vectors [lane0, lane0 + lanes), lanes <= VL * NV, with NV
 * a constant at each call. `s` holds [len][VL * NV] scores. */
static inline __attribute__((always_inline)) void attend_lanes(
    const float *q, const void *k, const void *v, const float *ks, const float *vs, const int bits,
    const int64_t *blocks, int64_t len0, int64_t row_stride, float *out, float *s, int64_t G, const int64_t E,
    int64_t block_size, int64_t head_base, float scale, int64_t lane0, int64_t lanes, const int NV) {
    const int64_t L = VL * NV, len = len0 + (lane0 + lanes - 1) / G; /* the last lane's row's length */
    float qt[E * LANE_GROUP], o[LANE_GROUP * E], buf[CHUNK * E]; /* the tile's queries, its sums, a chunk */
    /* each lane's row's length, in int32: softmax's masks then take 8 lanes a compare, as its floats
     * do; in int64, 4, and AVX2 narrowed each pair of masks (prompt attention 0.92-0.93x the time as
     * AVX2 code, benchmarks/attention_ab.py) */
    int32_t seen[LANE_GROUP];
    for (int64_t l = 0, t = lane0 / G, g = lane0 % G; l < L; l++) {
        seen[l] = l < lanes ? (int32_t)(len0 + t) : 0;
        const float *qg = q + t * row_stride + g * E;
        for (int64_t e = 0; e < E; e++) qt[e * L + l] = l < lanes ? qg[e] * scale : 0.0f;
        if (++g == G) g = 0, t++;
    }
    for (int64_t start = 0, nb = 0; start < len; start += block_size, nb++) {
        const int64_t base = head_base + blocks[nb] * block_size, n = len - start < block_size ? len - start : block_size;
        for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
            const int64_t m = n - c0 < CHUNK ? n - c0 : CHUNK;
            const block_ahead ahead = ahead_of(k, ks, bits, blocks, nb, start, len, head_base, block_size, E);
            const float *rows = cache_rows(k, base + c0, c0, m, E, bits, &ahead, buf);
            tile_scores(qt, rows, m, E, NV, bits == 8 ? ks + base + c0 : NULL, s + (start + c0) * L);
        }
    }
    float total[LANE_GROUP];
    softmax_down_lanes(s, len, L, seen, total);
    for (int64_t i = 0; i < L * E; i++) o[i] = 0.0f;
    for (int64_t start = 0, nb = 0; start < len; start += block_size, nb++) {
        const int64_t base = head_base + blocks[nb] * block_size, n = len - start < block_size ? len - start : block_size;
        for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
            const int64_t m = n - c0 < CHUNK ? n - c0 : CHUNK;
            const block_ahead ahead = ahead_of(v, vs, bits, blocks, nb, start, len, head_base, block_size, E);
            const float *rows = cache_rows(v, base + c0, c0, m, E, bits, &ahead, buf);
            float *p = s + (start + c0) * L;
            if (bits == 8)
                for (int64_t i = 0; i < m; i++)
#pragma omp simd
                    for (int64_t l = 0; l < L; l++) p[i * L + l] *= vs[base + c0 + i];
            tile_sums(p, rows, m, E, L, o);
        }
    }
    for (int64_t l = 0, t = lane0 / G, g = lane0 % G; l < lanes; l++) {
        const float inv = 1.0f / total[l];
        float *og = out + t * row_stride + g * E;
        for (int64_t e = 0; e < E; e++) og[e] = o[l * E + e] * inv;
        if (++g == G) g = 0, t++;
    }
}

/* A prompt tile of T rows: its T * G query vectors in groups of up to LANE_GROUP, each group one
 * pass over the context. */
static inline __attribute__((always_inline)) void attend_prompt_tile(
    const float *q, const void *k, const void *v, const float *ks, const float *vs, const int bits,
    const int64_t *blocks, int64_t T, int64_t len0, int64_t row_stride, float *out, float *s, int64_t G,
    const int64_t E, int64_t block_size, int64_t head_base, float scale) {
    for (int64_t lane0 = 0; lane0 < T * G; lane0 += LANE_GROUP) {
        const int64_t lanes = T * G - lane0 < LANE_GROUP ? T * G - lane0 : LANE_GROUP;
#define ATTEND_LANES(NV)                                                                                        \
    if (lanes > VL * ((NV) - 1)) {                                                                              \
        attend_lanes(q, k, v, ks, vs, bits, blocks, len0, row_stride, out, s, G, E, block_size, head_base, scale, \
                     lane0, lanes, NV);                                                                         \
        continue;                                                                                               \
    }
#if VL == 8
        ATTEND_LANES(6)
        ATTEND_LANES(5)
        ATTEND_LANES(4)
#endif
        ATTEND_LANES(3)
        ATTEND_LANES(2)
        ATTEND_LANES(1)
#undef ATTEND_LANES
    }
}
#endif

/* Whether a tile of T rows takes attend_prompt_tile, and the head dim E its vector blocks fit. */
#if PROMPT_TILES
#define PROMPT_TILE(T, E) ((T) > 1 && (E) % (4 * VL) == 0 && (E) <= 256)
#else
#define PROMPT_TILE(T, E) 0
#define attend_prompt_tile(...) ((void)0)
#endif

#endif
