/* Rows of tenor's paged KV cache as attention reads them (attention.c and prompt_tiles.h): a chunk
 * of a block's rows as floats, float32 in place or bf16 and int8 widened, with the block ahead
 * fetched as they go. Included by attention.c only. */
#ifndef TENOR_PAGED_CACHE_H
#define TENOR_PAGED_CACHE_H

#include "kernels.h"

/* An int8 cache row as floats, once for all the query heads that read it. */
static inline __attribute__((always_inline)) void widen_i8(const int8_t *row, float *out, int64_t n) {
#pragma omp simd
    for (int64_t e = 0; e < n; e++) out[e] = (float)row[e];
}

/* Where the rows of the block `hop` blocks ahead lie, fetched row by row while this block's rows
 * are worked on: each block is a page of its own, and the hardware prefetchers stop at page
 * boundaries, so without this every block starts with a stall on memory. Narrow rows (bf16, int8)
 * reach two blocks ahead, int8 ones with their block's line of scales. */
typedef struct {
    const char *rows; /* NULL: no block that far ahead */
    const float *scales;
} block_ahead;

static inline __attribute__((always_inline)) block_ahead ahead_of(const void *cache, const float *scales, int bits,
                                                                  const int64_t *blocks, int64_t nb, int64_t start,
                                                                  int64_t len, int64_t head_base, int64_t block_size,
                                                                  int64_t E) {
    const int64_t hop = bits == 32 ? 1 : 2, row_bytes = E * (bits / 8);
    block_ahead a = {NULL, NULL};
    if (start + hop * block_size < len) {
        const int64_t at = head_base + blocks[nb + hop] * block_size;
        a.rows = (const char *)cache + at * row_bytes;
        a.scales = bits == 8 ? scales + at : NULL;
    }
    return a;
}

/* Where the block ahead goes: on AMD CPUs into L2 (prefetcht1), where fetches into L1 each held
 * one of its few miss buffers until the line came and the loads of the block at work queued behind
 * them. On a Zen 4, 32 streams' decode attention read K/V at 13.5 GB/s fetching into L1 and 17.7
 * GB/s into L2 (0.72-0.80x the time: float32, bf16 and as AVX2 code; int8 0.95x). On an Intel Xeon
 * with AMX, into L2 was the same or slower (benchmarks/RESULTS.md), so Intel keeps L1. */
static int fetch_into_l2;

#if defined(__x86_64__) || defined(__i386__)
__attribute__((constructor)) static void choose_fetch_level(void) {
    __builtin_cpu_init();
    fetch_into_l2 = __builtin_cpu_is("amd");
}
#endif

/* The lines of `bytes` bytes from `from` on, into the level chosen above. */
static inline __attribute__((always_inline)) void fetch_lines(const char *from, int64_t bytes) {
    for (int64_t off = 0; off < bytes; off += 64) {
        if (fetch_into_l2)
            __builtin_prefetch(from + off, 0, 2);
        else
            __builtin_prefetch(from + off);
    }
}

/* Row i of the block ahead; `row_bytes` is a constant where E and bits are. */
static inline __attribute__((always_inline)) void fetch_row(const block_ahead *a, int64_t i, const int64_t row_bytes) {
    if (!a->rows) return;
    fetch_lines(a->rows + i * row_bytes, row_bytes);
    if (a->scales && i == 0) __builtin_prefetch(a->scales);
}

/* The item (a row's sequence and kv head) a thread takes after the one at work, claimed as that
 * one starts (tenor_paged_attention), so that decode attention's V pass, which reads only what the
 * K pass fetched into L2, can ask for the next item's first blocks: without this every item began
 * with a stall on memory. */
typedef struct {
    const char *k, *v; /* NULL: no next item */
    const float *ks, *vs; /* int8 rows' scales, else NULL */
    const int64_t *blocks;
    int64_t len, head_base, block_size;
} next_item;

#define NEXT_BLOCKS 2 /* of K and of V: 4 and 8 were no faster from memory, and slower from L3 */

/* Fetch #i of the next item's first NEXT_BLOCKS blocks, K's and V's in turn (nothing past them) */
static inline __attribute__((always_inline)) void fetch_next_block(const next_item *n, int64_t i,
                                                                   const int64_t row_bytes) {
    const int64_t nb = i / 2, first = nb * n->block_size;
    if (!n->k || nb >= NEXT_BLOCKS || first >= n->len) return;
    const int64_t rows = n->len - first < n->block_size ? n->len - first : n->block_size;
    const int64_t at = n->head_base + n->blocks[nb] * n->block_size;
    fetch_lines((i % 2 ? n->v : n->k) + at * row_bytes, rows * row_bytes);
    const float *scales = i % 2 ? n->vs : n->ks;
    if (scales) __builtin_prefetch(scales + at);
}

/* Up to CHUNK consecutive rows of one block (from row `first`) as CHUNK rows of floats: whole
 * float32 chunks are used in place; bf16 and int8 rows are widened into `buf` (int8 without their
 * scales, which the caller applies), once for all the query heads that read them, each as the same
 * row of the block ahead is asked for. A partial chunk is padded with rows of zeros, so that the
 * vector code always works on CHUNK rows. `bits` is a constant in every copy of attend_tile and attend_lanes,
 * so the branches fold away. */
#define CHUNK 16
static inline __attribute__((always_inline)) const float *cache_rows(const void *cache, int64_t slot, int64_t first,
                                                                      int64_t m, int64_t E, int bits,
                                                                      const block_ahead *ahead, float *buf) {
    if (bits == 32 && m == CHUNK) return (const float *)cache + slot * E; /* the callers fetch ahead as they read */
    for (int64_t i = 0; i < m; i++) {
        fetch_row(ahead, first + i, E * (bits / 8));
        if (bits == 32) {
            for (int64_t e = 0; e < E; e++) buf[i * E + e] = ((const float *)cache)[(slot + i) * E + e];
        } else if (bits == 16) {
            const uint16_t *r = (const uint16_t *)cache + (slot + i) * E;
#pragma omp simd
            for (int64_t e = 0; e < E; e++) buf[i * E + e] = bf16_to_float(r[e]);
        } else {
            widen_i8((const int8_t *)cache + (slot + i) * E, buf + i * E, E);
        }
    }
    for (int64_t e = m * E; e < CHUNK * E; e++) buf[e] = 0.0f;
    return buf;
}

#endif
