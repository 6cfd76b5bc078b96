/* Attention straight from tenor's paged KV cache, called through ctypes (tenor/models/native.py)
 * and by the fused Llama step in cpu_kernels.c: every row (a decoding sequence's token, or one
 * prompt token seeing its sequence up to itself) reads its blocks in place, float32, bf16 or int8
 * (paged_cache.h), at the memory's speed where the rows are wide; a prompt's rows go in tiles
 * (prompt_tiles.h). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "paged_cache.h"
#include "prompt_tiles.h"

#if defined(__AVX2__) && defined(__FMA__) /* AVX-512 builds too, for decode_rows.h */
/* The eight lanes' sum by shuffles (not cpu_kernels.c's lane_sum, whose stores cost more here). */
static inline __attribute__((always_inline)) float sum_lanes(__m256 v) {
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
    return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)));
}

/* A mask of the first `live` (0..8) int32 lanes, for masked loads and stores. */
static inline __attribute__((always_inline)) __m256i first_lanes(int64_t live) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)live), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

/* a . b over n floats: vector-wide running sums added up once at the end. A plain `omp simd`
 * reduction compiled to 16 scalar adds in a row, each waiting on the last, which bound decode
 * attention's scores. */
static inline __attribute__((always_inline)) float dot_f32(const float *a, const float *b, int64_t n) {
    int64_t c = 0;
    float sum = 0.0f;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (; c + 16 <= n; c += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + c), _mm512_loadu_ps(b + c), acc);
    sum = _mm512_reduce_add_ps(acc);
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (; c + 8 <= n; c += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + c), _mm256_loadu_ps(b + c), acc);
    sum = sum_lanes(acc);
#endif
    for (; c < n; c++) sum += a[c] * b[c];
    return sum;
}

/* A weighted sum of rows, sum += p * row, for rows of up to ROW_SUM_MAX floats, held in vector
 * registers where the head dim is a compile-time constant (an array of floats stayed in memory,
 * and each row's update waited on the last one's stores). */
#define ROW_SUM_MAX 256
#if defined(__AVX512F__)
typedef struct { __m512 v[ROW_SUM_MAX / 16]; } row_sum;
#define ROW_SUM_LANES 16
#define VECTOR_REGS 32
#elif defined(__AVX2__) && defined(__FMA__)
typedef struct { __m256 v[ROW_SUM_MAX / 8]; } row_sum;
#define ROW_SUM_LANES 8
#define VECTOR_REGS 16
#else
typedef struct { float v[ROW_SUM_MAX]; } row_sum;
#define ROW_SUM_LANES 1
#define VECTOR_REGS 16
#endif

static inline __attribute__((always_inline)) void row_sum_load(row_sum *acc, const float *from, int64_t n) {
    for (int64_t j = 0; j < n / ROW_SUM_LANES; j++) {
#if ROW_SUM_LANES == 16
        acc->v[j] = _mm512_loadu_ps(from + 16 * j);
#elif ROW_SUM_LANES == 8
        acc->v[j] = _mm256_loadu_ps(from + 8 * j);
#else
        acc->v[j] = from[j];
#endif
    }
}

static inline __attribute__((always_inline)) void row_sum_add(row_sum *acc, float p, const float *row, int64_t n) {
    for (int64_t j = 0; j < n / ROW_SUM_LANES; j++) {
#if ROW_SUM_LANES == 16
        acc->v[j] = _mm512_fmadd_ps(_mm512_set1_ps(p), _mm512_loadu_ps(row + 16 * j), acc->v[j]);
#elif ROW_SUM_LANES == 8
        acc->v[j] = _mm256_fmadd_ps(_mm256_set1_ps(p), _mm256_loadu_ps(row + 8 * j), acc->v[j]);
#else
        acc->v[j] += p * row[j];
#endif
    }
}

static inline __attribute__((always_inline)) void row_sum_add_to(const row_sum *acc, float *out, int64_t n) {
    for (int64_t j = 0; j < n / ROW_SUM_LANES; j++) {
#if ROW_SUM_LANES == 16
        _mm512_storeu_ps(out + 16 * j, _mm512_add_ps(_mm512_loadu_ps(out + 16 * j), acc->v[j]));
#elif ROW_SUM_LANES == 8
        _mm256_storeu_ps(out + 8 * j, _mm256_add_ps(_mm256_loadu_ps(out + 8 * j), acc->v[j]));
#else
        out[j] += acc->v[j];
#endif
    }
}

static inline __attribute__((always_inline)) void row_sum_store(const row_sum *acc, float *out, int64_t n) {
    for (int64_t j = 0; j < n / ROW_SUM_LANES; j++) {
#if ROW_SUM_LANES == 16
        _mm512_storeu_ps(out + 16 * j, acc->v[j]);
#elif ROW_SUM_LANES == 8
        _mm256_storeu_ps(out + 8 * j, acc->v[j]);
#else
        out[j] = acc->v[j];
#endif
    }
}

/* s[0..len) = softmax(s), in place. Out of line, with trapping math off so that fast_expf's
 * clamps vectorize below AVX-512 too (as in tenor_silu_mul_f32). */
__attribute__((noinline, optimize("no-trapping-math"))) static void softmax_in_place(float *s, int64_t len) {
    float top = -INFINITY, total = 0.0f;
#pragma omp simd reduction(max : top)
    for (int64_t t = 0; t < len; t++) top = s[t] > top ? s[t] : top;
#pragma omp simd reduction(+ : total)
    for (int64_t t = 0; t < len; t++) {
        s[t] = fast_expf(s[t] - top);
        total += s[t];
    }
    const float inv = 1.0f / total;
#pragma omp simd
    for (int64_t t = 0; t < len; t++) s[t] *= inv;
}

#if defined(__AVX512F__)
/* Lane i of the result is the sum of a[i]'s 16 lanes: the transpose folded into the adds, 45
 * shuffles and adds for 16 rows against ~8 dependent ones for each row's own reduction. */
static inline __attribute__((always_inline)) __m512 sum16(const __m512 *a) {
    __m512 pairs[8], quads[4];
    for (int i = 0; i < 8; i++) /* lanes 4c+{0,2} hold partial sums of a[2i], 4c+{1,3} of a[2i+1] */
        pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                                 _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++) { /* 128-bit chunk c holds that chunk's sums of a[4i .. 4i+3] */
        const __m512d x = _mm512_castps_pd(pairs[2 * i]), y = _mm512_castps_pd(pairs[2 * i + 1]);
        quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    const __m512 lo = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], 0x44),
                                    _mm512_shuffle_f32x4(quads[0], quads[1], 0xEE));
    const __m512 hi = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], 0x44),
                                    _mm512_shuffle_f32x4(quads[2], quads[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(lo, hi, 0x88), _mm512_shuffle_f32x4(lo, hi, 0xDD));
}
#endif
#if defined(__AVX2__) && defined(__FMA__) /* AVX-512 builds too, for decode_rows.h */
/* sum16's AVX2 form for 8 rows: lane i of the result is the sum of a[i]'s 8 lanes. */
static inline __attribute__((always_inline)) __m256 sum8(const __m256 *a) {
    const __m256 pairs0 = _mm256_hadd_ps(a[0], a[1]), pairs1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 pairs2 = _mm256_hadd_ps(a[4], a[5]), pairs3 = _mm256_hadd_ps(a[6], a[7]);
    /* each 128-bit half: that half's sums of rows 0..3 (lo) and 4..7 (hi) */
    const __m256 lo = _mm256_hadd_ps(pairs0, pairs1), hi = _mm256_hadd_ps(pairs2, pairs3);
    return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}
#endif

/* scores[g * stride + i] = (q_g . row_i) * scale * (row_scales[i] where given), for the m <= CHUNK
 * rows (of CHUNK readable ones) and the G query heads. Given `ahead`, the rows are read from memory
 * in place (a tile's first row over a float32 chunk) and are summed one at a time, asking for the
 * block ahead (from row `first`) as they go; the tile's later rows find the chunk in cache and take
 * the tree (1.2x faster on float32 prompt rows than summing them one at a time too). */
static inline __attribute__((always_inline)) void chunk_scores(const float *q, const float *rows, int64_t m,
                                                                int64_t G, const int64_t E, const float *row_scales,
                                                                float scale, float *scores, int64_t stride,
                                                                const block_ahead *ahead, int64_t first) {
#if defined(__AVX512F__)
    /* Rows read in place from memory go one at a time, their fetches spread between the heads'
     * dots: the tree's burst of CHUNK rows' fetches filled the miss buffers and stalled. */
    if (E % 16 == 0 && E <= 256 && !ahead) {
        const __mmask16 live = (__mmask16)((1u << m) - 1);
        const __m512 scaled = row_scales ? _mm512_mul_ps(_mm512_maskz_loadu_ps(live, row_scales), _mm512_set1_ps(scale))
                                         : _mm512_set1_ps(scale);
        for (int64_t g = 0; g < G; g++) {
            const float *qg = q + g * E;
            __m512 dots[CHUNK];
            for (int64_t i = 0; i < CHUNK; i++) {
                __m512 acc = _mm512_setzero_ps();
                for (int64_t c = 0; c < E; c += 16)
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(qg + c), _mm512_loadu_ps(rows + i * E + c), acc);
                dots[i] = acc;
            }
            _mm512_mask_storeu_ps(scores + g * stride, live, _mm512_mul_ps(sum16(dots), scaled));
        }
        return;
    }
#elif defined(__AVX2__) && defined(__FMA__)
    /* The same in 8-row halves: each row's dot its own chain of FMAs, the 8 rows independent, and
     * one transposed sum for all 8 (a reduction a row waited on its own adds: 1.3x slower). */
    if (E % 8 == 0 && E <= 256 && !ahead) {
        for (int64_t h = 0; h < m; h += 8) {
            const int64_t live = m - h < 8 ? m - h : 8;
            const __m256i lanes = first_lanes(live);
            __m256 scaled = _mm256_set1_ps(scale);
            if (row_scales) scaled = _mm256_mul_ps(_mm256_maskload_ps(row_scales + h, lanes), scaled);
            for (int64_t g = 0; g < G; g++) {
                const float *qg = q + g * E;
                __m256 dots[8];
                for (int64_t i = 0; i < 8; i++) dots[i] = _mm256_setzero_ps();
                /* each 8 floats of q loaded once for the 8 rows: q and the rows both as memory
                 * operands took twice the loads, and the loads bound it */
                for (int64_t c = 0; c < E; c += 8) {
                    const __m256 qc = _mm256_loadu_ps(qg + c);
                    for (int64_t i = 0; i < 8; i++)
                        dots[i] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(rows + (h + i) * E + c), dots[i]);
                }
                const __m256 row_scores = _mm256_mul_ps(sum8(dots), scaled);
                /* a masked store only for a partial half: on AMD cores vmaskmovps to memory is
                 * microcoded, and one for each head and half of every chunk held decode attention */
                if (live == 8)
                    _mm256_storeu_ps(scores + g * stride + h, row_scores);
                else
                    _mm256_maskstore_ps(scores + g * stride + h, lanes, row_scores);
            }
        }
        return;
    }
#endif
    for (int64_t i = 0; i < m; i++) {
        const float row_scale = row_scales ? row_scales[i] * scale : scale;
        if (ahead) fetch_row(ahead, first + i, E * 4);
        for (int64_t g = 0; g < G; g++) scores[g * stride + i] = dot_f32(q + g * E, rows + i * E, E) * row_scale;
    }
}

/* One (tile of rows, kv head) of attention: T rows that read the same blocks, row t seeing the
 * first len0 + t cached tokens (one row for a decoding sequence; up to `tile` consecutive tokens of
 * a prompt), each with the G query heads sharing kv head `h`. Row t's heads are at q + t *
 * row_stride, its output at out + t * row_stride. The cache is read block by block in place,
 * CHUNK rows at a time, each widened once for all T * G query heads. Two passes over the context:
 * scores, then softmax and the weighted sum of V. `E` and `bits` (the cache's float32, bf16 or int8
 * rows) are compile-time constants in the specialised copies below, so the head-dim loops unroll
 * into whole vectors. */
static inline __attribute__((always_inline)) void attend_tile(
    const float *q, const void *k, const void *v, const float *ks, const float *vs, const int bits,
    const int64_t *blocks, int64_t T, int64_t len0, int64_t row_stride, float *out, float *scores, int64_t G,
    const int64_t E, int64_t block_size, int64_t head_base, int64_t max_len, float scale) {
    float buf[CHUNK * E]; /* narrow rows widened to floats */
    const int64_t len = len0 + T - 1; /* the last row's */
    for (int64_t start = 0, nb = 0; start < len; start += block_size, nb++) {
        const int64_t base = head_base + blocks[nb] * block_size, n = len - start < block_size ? len - start : block_size;
        for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
            const int64_t m = n - c0 < CHUNK ? n - c0 : CHUNK, slot = base + c0;
            const block_ahead ahead = ahead_of(k, ks, bits, blocks, nb, start, len, head_base, block_size, E);
            const float *rows = cache_rows(k, slot, c0, m, E, bits, &ahead, buf);
            for (int64_t t = 0; t < T; t++)
                chunk_scores(q + t * row_stride, rows, m, G, E, bits == 8 ? ks + slot : NULL, scale,
                             scores + t * G * max_len + start + c0, max_len,
                             bits == 32 && m == CHUNK && t == 0 ? &ahead : NULL, c0);
        }
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t g = 0; g < G; g++) softmax_in_place(scores + (t * G + g) * max_len, len0 + t);
    /* Each head's sum lives in `out`, and in vector registers for the length of a chunk. */
    const int in_registers = E % ROW_SUM_LANES == 0 && E <= ROW_SUM_MAX;
    /* Two sums where both fit in registers beside the rows' operands; where they do not (AVX2's
     * sixteen ymm at head dim 64), gcc kept part of them on the stack, and every row's FMAs waited
     * on a store and a load: one sum, whose E / 8 vectors still give the FMAs enough independent
     * chains. */
    const int two_sums = in_registers && 2 * (E / ROW_SUM_LANES) + 4 <= VECTOR_REGS;
    static const float zeros[ROW_SUM_MAX];
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < G * E; e++) out[t * row_stride + e] = 0.0f;
    for (int64_t start = 0, nb = 0; start < len; start += block_size, nb++) {
        const int64_t base = head_base + blocks[nb] * block_size, n = len - start < block_size ? len - start : block_size;
        for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
            const int64_t slot = base + c0, m = n - c0 < CHUNK ? n - c0 : CHUNK;
            const block_ahead ahead = ahead_of(v, vs, bits, blocks, nb, start, len, head_base, block_size, E);
            const float *rows = cache_rows(v, slot, c0, m, E, bits, &ahead, buf);
            for (int64_t tg = 0; tg < T * G; tg++) {
                const int64_t t = tg / G, g = tg % G, seen = len0 + t - start - c0; /* row t's part of the chunk */
                const int64_t mt = seen < m ? seen : m;
                const float *p = scores + tg * max_len + start + c0;
                float *og = out + t * row_stride + g * E;
                const int fetch = bits == 32 && m == CHUNK;
                if (two_sums) { /* two sums, even and odd rows: each add waits on half as many */
                    row_sum even, odd;
                    row_sum_load(&even, og, E);
                    row_sum_load(&odd, zeros, E);
                    int64_t i = 0;
                    for (; i + 1 < mt; i += 2) {
                        if (fetch && tg == 0) fetch_row(&ahead, c0 + i, E * 4);
                        if (fetch && tg == G - 1) fetch_row(&ahead, c0 + i + 1, E * 4);
                        row_sum_add(&even, bits == 8 ? p[i] * vs[slot + i] : p[i], rows + i * E, E);
                        row_sum_add(&odd, bits == 8 ? p[i + 1] * vs[slot + i + 1] : p[i + 1], rows + (i + 1) * E, E);
                    }
                    if (i < mt) row_sum_add(&even, bits == 8 ? p[i] * vs[slot + i] : p[i], rows + i * E, E);
                    row_sum_store(&even, og, E);
                    row_sum_add_to(&odd, og, E);
                } else if (in_registers) {
                    row_sum sum;
                    row_sum_load(&sum, og, E);
                    for (int64_t i = 0; i < mt; i++) {
                        if (fetch && tg == 0) fetch_row(&ahead, c0 + i, E * 4);
                        row_sum_add(&sum, bits == 8 ? p[i] * vs[slot + i] : p[i], rows + i * E, E);
                    }
                    row_sum_store(&sum, og, E);
                } else {
                    for (int64_t i = 0; i < mt; i++) {
                        if (fetch && tg == 0) fetch_row(&ahead, c0 + i, E * 4);
                        const float pi = bits == 8 ? p[i] * vs[slot + i] : p[i];
#pragma omp simd
                        for (int64_t e = 0; e < E; e++) og[e] += pi * rows[i * E + e];
                    }
                }
            }
        }
    }
}

#include "decode_rows.h" /* after sum8, sum_lanes and first_lanes, which it uses */

/* The attention for this head dim and row width: prompt tiles where they apply, else attend_tile;
 * each unrolled for head dims 64 and 128. */
#define ATTEND_FOR_DIM(BITS)                                                                                  \
    do {                                                                                                      \
        if (PROMPT_TILE(T, E)) {                                                                              \
            if (E == 64)                                                                                      \
                attend_prompt_tile(qb, k, v, ks, vs, BITS, blocks, T, lengths[b], H * E, ob, scores, G, 64,   \
                                   block_size, h * slots, scale);                                             \
            else if (E == 128)                                                                                \
                attend_prompt_tile(qb, k, v, ks, vs, BITS, blocks, T, lengths[b], H * E, ob, scores, G, 128,  \
                                   block_size, h * slots, scale);                                             \
            else                                                                                              \
                attend_prompt_tile(qb, k, v, ks, vs, BITS, blocks, T, lengths[b], H * E, ob, scores, G, E,    \
                                   block_size, h * slots, scale);                                             \
        } else if (DECODE_ROWS && BITS != 32 && T == 1 && E == 64 && G <= DECODE_MAX_G) {                     \
            attend_decode_rows(qb, k, v, ks, vs, BITS, blocks, lengths[b], ob, scores, G, block_size, h * slots,  \
                               max_len, scale, &next);                                                        \
        } else if (E == 64)                                                                                   \
            attend_tile(qb, k, v, ks, vs, BITS, blocks, T, lengths[b], H * E, ob, scores, G, 64, block_size,  \
                        h * slots, max_len, scale);                                                           \
        else if (E == 128)                                                                                    \
            attend_tile(qb, k, v, ks, vs, BITS, blocks, T, lengths[b], H * E, ob, scores, G, 128, block_size, \
                        h * slots, max_len, scale);                                                           \
        else                                                                                                  \
            attend_tile(qb, k, v, ks, vs, BITS, blocks, T, lengths[b], H * E, ob, scores, G, E, block_size,   \
                        h * slots, max_len, scale);                                                           \
    } while (0)

/* Whether row b + t can join row b's tile: it reads the same blocks, one token further. */
static int extends_tile(const int64_t *table, const int64_t *lengths, int64_t b, int64_t t, int64_t N,
                        int64_t block_size) {
    if (lengths[b + t] != lengths[b] + t) return 0;
    const int64_t used = (lengths[b + t] + block_size - 1) / block_size;
    return memcmp(table + b * N, table + (b + t) * N, sizeof(int64_t) * (size_t)(used < N ? used : N)) == 0;
}

/* Attention straight from the paged cache, no gathered copy, for rows that each attend to their
 * own prefix of a sequence's cached tokens: a decoding sequence's token, or a prompt token seeing
 * its sequence up to itself.
 *   q       [B, H, E]           one query token per row
 *   k, v    [K, slots, E]       one layer's cache (slot = block * block_size + offset): float32
 *                               (bits 32), bf16 (16), or int8 (8) with one float32 scale per
 *                               (head, slot) in ks, vs [K, slots]
 *   table   [B, N]              each row's sequence's blocks
 *   lengths [B]                 each row's context length (slots 0..len-1 of its blocks)
 *   out     [B, H, E]
 *   scratch [threads, S * max_len] floats for the scores, one slice for each thread, S = tile * G
 *           rounded up to a multiple of 16 (a prompt tile's query vectors in whole vectors)
 * Query heads h * G .. h * G + G - 1 share kv head h (grouped-query attention). Up to `tile` rows
 * in a row that read the same blocks one token further each (a prompt's) go together, so each
 * cache row is read and widened once for all of them. */
void tenor_paged_attention(const float *q, const void *k, const void *v, const float *ks, const float *vs,
                           int64_t bits, const int64_t *table, const int64_t *lengths, float *out, float *scratch,
                           int64_t B, int64_t H, int64_t K, int64_t E, int64_t N, int64_t block_size, int64_t slots,
                           int64_t max_len, float scale, int64_t tile, int64_t threads) {
    const int64_t G = H / K, slice = (tile * G + 15) / 16 * 16 * max_len;
    int64_t *firsts = malloc(sizeof(int64_t) * (size_t)(B + 1)), tiles = 0; /* each tile's first row */
    for (int64_t b = 0, t; b < B; b += t) {
        for (t = 1; t < tile && b + t < B && extends_tile(table, lengths, b, t, N, block_size); t++) {
        }
        firsts[tiles++] = b;
    }
    firsts[tiles] = B;
    /* Items dealt out one at a time to whichever thread is free: a prompt's rows grow longer row
     * by row (contiguous halves gave one thread three times the other's work), sequences' contexts
     * differ, and on two cores the server's other threads take turns on one of them. Each thread
     * claims its next item as it starts one, so that it can fetch the next one's first blocks
     * (next_item); the last items then wait at most one item for a thread. */
    const int64_t items = tiles * K;
    int64_t claimed = 0;
#pragma omp parallel num_threads(threads)
    {
        const unsigned mxcsr = denormals_off();
        int64_t item = __atomic_fetch_add(&claimed, 1, __ATOMIC_RELAXED);
        while (item < items) {
            const int64_t following = __atomic_fetch_add(&claimed, 1, __ATOMIC_RELAXED);
            next_item next = {NULL, NULL, NULL, NULL, NULL, 0, 0, block_size};
            if (following < items) {
                const int64_t nb = firsts[following / K], at = following % K * slots;
                next = (next_item){(const char *)k, (const char *)v, bits == 8 ? ks : NULL, bits == 8 ? vs : NULL,
                                   table + nb * N, lengths[nb], at, block_size};
            }
            (void)next; /* read by decode rows only, which builds without AVX2 do not have */
            const int64_t b = firsts[item / K], T = firsts[item / K + 1] - b, h = item % K;
            float *scores = scratch + (int64_t)omp_get_thread_num() * slice;
            const float *qb = q + (b * H + h * G) * E;
            float *ob = out + (b * H + h * G) * E;
            const int64_t *blocks = table + b * N;
            if (bits == 32)
                ATTEND_FOR_DIM(32);
            else if (bits == 16)
                ATTEND_FOR_DIM(16);
            else
                ATTEND_FOR_DIM(8);
            item = following;
        }
        denormals_restore(mxcsr);
    }
    free(firsts);
}
