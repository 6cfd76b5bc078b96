/* Attention straight from tenor's paged KV cache, called through ctypes (tenor/models/native.py)
 * and by the fused Llama decode step in cpu_kernels.c: every row (a decoding sequence's token,
 * or one prompt token seeing its sequence up to itself) reads its blocks in place, float32, bf16
 * or int8, at the memory's speed where the rows are wide. */
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

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
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half)); /* shuffles, not lane_sum's stores */
    sum = _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)));
#endif
    for (; c < n; c++) sum += a[c] * b[c];
    return sum;
}

/* An int8 cache row as floats, once for all the query heads that read it. */
static inline __attribute__((always_inline)) void widen_i8(const int8_t *row, float *out, int64_t n) {
#pragma omp simd
    for (int64_t e = 0; e < n; e++) out[e] = (float)row[e];
}

/* A weighted sum of rows, sum += p * row, for rows of up to ROW_SUM_MAX floats, held in vector
 * registers where the head dim is a compile-time constant (an array of floats stayed in memory,
 * and each row's update waited on the last one's stores). */
#define ROW_SUM_MAX 256
#if defined(__AVX512F__)
typedef struct { __m512 v[ROW_SUM_MAX / 16]; } row_sum;
#define ROW_SUM_LANES 16
#elif defined(__AVX2__) && defined(__FMA__)
typedef struct { __m256 v[ROW_SUM_MAX / 8]; } row_sum;
#define ROW_SUM_LANES 8
#else
typedef struct { float v[ROW_SUM_MAX]; } row_sum;
#define ROW_SUM_LANES 1
#endif

static inline __attribute__((always_inline)) void row_sum_zero(row_sum *acc, int64_t n) {
    for (int64_t j = 0; j < n / ROW_SUM_LANES; j++) {
#if ROW_SUM_LANES == 16
        acc->v[j] = _mm512_setzero_ps();
#elif ROW_SUM_LANES == 8
        acc->v[j] = _mm256_setzero_ps();
#else
        acc->v[j] = 0.0f;
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

/* Asks for row `i` of the next block (`bytes` a row) while this block's row `i` is worked on: each
 * block is a page of its own, and the hardware prefetchers stop at page boundaries, so without
 * this every block starts with a stall on memory. */
static inline void prefetch_row(const void *next_block, int64_t i, int64_t bytes) {
    const char *row = (const char *)next_block + i * bytes;
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(row + off);
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

/* A cache row as floats: float32 rows are used in place; bf16 and int8 rows are widened into
 * `row` (int8 without its scale, which the caller applies). `bits` is a constant in every copy
 * of attend_one, so the branches fold away. */
static inline __attribute__((always_inline)) const float *cache_row(const void *cache, int64_t slot, int64_t E,
                                                                     int bits, float *row) {
    if (bits == 32) return (const float *)cache + slot * E;
    if (bits == 16) {
        const uint16_t *r = (const uint16_t *)cache + slot * E;
#pragma omp simd
        for (int64_t e = 0; e < E; e++) {
            union { uint32_t u; float f; } w;
            w.u = (uint32_t)r[e] << 16; /* bf16 is float32's top half */
            row[e] = w.f;
        }
        return row;
    }
    widen_i8((const int8_t *)cache + slot * E, row, E);
    return row;
}

/* Row `i` of the block `ahead` slots away fetched while this block's row `i` is worked on;
 * narrow rows (bf16, int8) reach two blocks ahead, int8 ones with their block's line of scales. */
static inline __attribute__((always_inline)) void prefetch_ahead(const void *cache, const float *scales, int bits,
                                                                 const int64_t *blocks, int64_t nb, int64_t start,
                                                                 int64_t len, int64_t i, int64_t head_base,
                                                                 int64_t block_size, int64_t E) {
    const int64_t hop = bits == 32 ? 1 : 2;
    if (start + hop * block_size >= len) return;
    const int64_t at = head_base + blocks[nb + hop] * block_size;
    prefetch_row((const char *)cache + at * E * (bits / 8), i, E * (bits / 8));
    if (bits == 8 && i == 0) __builtin_prefetch(scales + at);
}

/* One (sequence, kv head) of decode attention: the G query heads sharing kv head `h` attend to
 * the sequence's first `len` cached tokens, read block by block in place. Two passes over the
 * context: scores (each K row read once for all G heads), then softmax and the weighted sum of V.
 * `E` and `bits` (the cache's float32, bf16 or int8 rows) are compile-time constants in the
 * specialised copies below, so the head-dim loops unroll into whole vectors. */
static inline __attribute__((always_inline)) void attend_one(
    const float *q, const void *k, const void *v, const float *ks, const float *vs, const int bits,
    const int64_t *blocks, int64_t len, float *out, float *scores, int64_t G, const int64_t E, int64_t block_size,
    int64_t head_base, int64_t max_len, float scale) {
    float row[E]; /* a narrow row widened to floats */
    for (int64_t start = 0, nb = 0; start < len; start += block_size, nb++) {
        const int64_t base = head_base + blocks[nb] * block_size, n = len - start < block_size ? len - start : block_size;
        for (int64_t i = 0; i < n; i++) {
            const int64_t slot = base + i;
            prefetch_ahead(k, ks, bits, blocks, nb, start, len, i, head_base, block_size, E);
            const float *kt = cache_row(k, slot, E, bits, row), row_scale = bits == 8 ? ks[slot] * scale : scale;
            for (int64_t g = 0; g < G; g++) scores[g * max_len + start + i] = dot_f32(q + g * E, kt, E) * row_scale;
        }
    }
    for (int64_t g = 0; g < G; g++) softmax_in_place(scores + g * max_len, len);
    /* One query head at a time, its sum in registers: accumulating all G heads in `out` made each
     * row wait on the previous row's stores. V rows come from memory once; the other heads find
     * them in cache. */
    const int in_registers = E % ROW_SUM_LANES == 0 && E <= ROW_SUM_MAX;
    for (int64_t g = 0; g < G; g++) {
        const float *sg = scores + g * max_len;
        float *og = out + g * E;
        row_sum acc;
        if (in_registers)
            row_sum_zero(&acc, E);
        else
            for (int64_t e = 0; e < E; e++) og[e] = 0.0f;
        for (int64_t start = 0, nb = 0; start < len; start += block_size, nb++) {
            const int64_t base = head_base + blocks[nb] * block_size, n = len - start < block_size ? len - start : block_size;
            for (int64_t i = 0; i < n; i++) {
                const int64_t slot = base + i;
                if (g == 0) prefetch_ahead(v, vs, bits, blocks, nb, start, len, i, head_base, block_size, E);
                const float *vt = cache_row(v, slot, E, bits, row), p = bits == 8 ? sg[start + i] * vs[slot] : sg[start + i];
                if (in_registers) {
                    row_sum_add(&acc, p, vt, E);
                } else {
#pragma omp simd
                    for (int64_t e = 0; e < E; e++) og[e] += p * vt[e];
                }
            }
        }
        if (in_registers) row_sum_store(&acc, og, E);
    }
}

/* attend_one's copy for this head dim and row width: unrolled for head dims 64 and 128. */
#define ATTEND_FOR_DIM(BITS)                                                                                     \
    do {                                                                                                         \
        if (E == 64)                                                                                             \
            attend_one(qb, k, v, ks, vs, BITS, blocks, lengths[b], ob, scores, G, 64, block_size, h * slots,     \
                       max_len, scale);                                                                          \
        else if (E == 128)                                                                                       \
            attend_one(qb, k, v, ks, vs, BITS, blocks, lengths[b], ob, scores, G, 128, block_size, h * slots,    \
                       max_len, scale);                                                                          \
        else                                                                                                     \
            attend_one(qb, k, v, ks, vs, BITS, blocks, lengths[b], ob, scores, G, E, block_size, h * slots,      \
                       max_len, scale);                                                                          \
    } while (0)

/* Decode attention straight from the paged cache, no gathered copy.
 *   q       [B, H, E]           one query token per sequence
 *   k, v    [K, slots, E]       one layer's cache (slot = block * block_size + offset): float32
 *                               (bits 32), bf16 (16), or int8 (8) with one float32 scale per
 *                               (head, slot) in ks, vs [K, slots]
 *   table   [B, N]              each sequence's blocks
 *   lengths [B]                 each sequence's context length (slots 0..len-1 of its blocks)
 *   out     [B, H, E]
 *   scratch [threads, G * max_len] floats for the scores, one slice for each of `threads` threads
 * Query heads h * G .. h * G + G - 1 share kv head h (grouped-query attention). */
void tenor_paged_attention(const float *q, const void *k, const void *v, const float *ks, const float *vs,
                                   int64_t bits, const int64_t *table, const int64_t *lengths, float *out,
                                   float *scratch, int64_t B, int64_t H, int64_t K, int64_t E, int64_t N,
                                   int64_t block_size, int64_t slots, int64_t max_len, float scale, int64_t threads) {
    const int64_t G = H / K;
    /* Items dealt out one at a time: a prompt's rows grow longer row by row, and contiguous
     * halves gave one thread three times the other's work. */
#pragma omp parallel for schedule(static, 1) num_threads(threads)
    for (int64_t item = 0; item < B * K; item++) {
        const int64_t b = item / K, h = item % K;
        float *scores = scratch + (int64_t)omp_get_thread_num() * G * max_len;
        const float *qb = q + (b * H + h * G) * E;
        float *ob = out + (b * H + h * G) * E;
        const int64_t *blocks = table + b * N;
        if (bits == 32)
            ATTEND_FOR_DIM(32);
        else if (bits == 16)
            ATTEND_FOR_DIM(16);
        else
            ATTEND_FOR_DIM(8);
    }
}
