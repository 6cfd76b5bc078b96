/* The block weights' GEMM for big batches (prompts, many streams) on x86 CPUs without native bf16:
 * AVX2 ones, and AVX-512 ones with VNNI (Cascade Lake, Ice Lake), where it is built 512 bits wide.
 *
 * Weights in blocks of 32 along IN, each block with a step and an offset: W ~= level * step + offset,
 * repacked at load by tenor/models/block_weights.py for eight outputs at a time (int8_gemm_pack). Rows of
 * x are quantized per block of 32 as well, so a block's product is an integer dot:
 *   bits 4: levels 0..15 (GGUF Q4_1 blocks) against int8 x (absmax / 127 steps, as llama.cpp's Q8
 *     activations): vpmaddubsw multiplies 32 levels by 32 int8 of x and adds pairs, one instruction
 *     for what float32 FMAs take four;
 *   bits 8: levels -128..127 (Q8_0 and any 8-bit block: the default model's LM head) against int16
 *     x (absmax / 32767, near float32's error): vpmaddwd, 16 multiply-adds an instruction. Int8 x
 *     cost the default model 5 % of its top-1 agreement through the LM head.
 * With VNNI (vpdpbusd, vpdpwssd) each multiply-add also accumulates. On these CPUs the float GEMMs
 * (FBGEMM's fp16) are bound by their FMAs; see benchmarks/RESULTS.md for what this gives and what
 * it costs in accuracy.
 *
 * Layout, for output tile t (outputs 8t..8t+7) and block b: 8 steps of 4 inputs (bits 4) or 16
 * steps of 2 inputs (bits 8); step s holds its inputs of the block for the eight outputs, output
 * o's first. 8-bit levels a byte, 16 bytes a step, 256 a block; 4-bit ones two a byte, steps 2p and
 * 2p + 1 in the 32 bytes at 32p (2p's levels in the low nibbles), 128 bytes a block (BLOCK_BYTES):
 * half the bytes of one level a byte (a 4-bit model's weights in 1.5 bytes a weight in all, decode's
 * form included, not 2.0), for a shift and two ANDs a pair of steps, which the multiply-adds leave
 * room for. On a Zen 4 (benchmarks/kernel_ab.py, 2 threads): the default model's 4-bit layers
 * 1.00-1.04x the time as AVX2 code, 0.99-1.00x (one shape 1.06x) natively, the same outputs bit for
 * bit; 0.90x and 0.95x on a 4-bit 49152 x 576 at 32 rows, read from memory. Steps and offsets:
 * [OUT / 8, IN / 32, 8] float32; 4-bit steps in builds without VNNI in fixed point (FIXED_STEPS):
 * int16 [OUT / 8, IN / 32, 16] (each output's step twice), then each output's unit, float32 [OUT].
 */
#include <stdlib.h>

#include "kernels.h"

/* Bytes of one tile's block: 4-bit levels two a byte (a pair of steps in each 32 bytes, the even
 * step's levels in the low nibbles), 8-bit ones a byte. */
#define BLOCK_BYTES(bits) ((bits) == 4 ? 128 : 256)

/* Rows of the batch a tile computes at once. AVX2: six rows of a pair of tiles, whose twelve sums,
 * a step's two level registers and x's broadcast fill the sixteen registers (a single tile, the
 * last of an odd count, keeps its float sums there too). AVX-512: twelve rows in thirty-two
 * registers (each step's weights then serve twice the rows). */
#ifdef __AVX512F__
#define TILE_ROWS 12
#else
#define TILE_ROWS 6
#endif
/* Each output unit (two tiles' weights, 9-25 KB at the default model's shapes) goes through every
 * row of the batch while its weights stay in L1, so the weights come from memory once (the LM
 * head's 28 MB) and each row's quantized x is read from L2 once a unit (512 rows of 576 int8: 295
 * KB). In 48-row chunks, each chunk's output units in turn, x stayed in L2 instead and the weights
 * were read again from L2 each chunk. This order took 0.93-1.04x that time for the default
 * model's layers and 0.86-0.98x for its LM head at 64-512 rows (benchmarks/kernel_ab.py, AVX2
 * code on a Zen 4), and lets threads take units as they come free (tenor_int8_gemm_f32). */
/* The step loops below are unrolled (`#pragma GCC unroll`): left as loops, gcc rotated the rows'
 * accumulators through register copies and the stack at every step. Unrolled,
 * on a Zen 5: 4-bit levels against int8 x 0.65-0.78x the time, 8-bit against int16 x 0.65-0.78x
 * (AVX-512) and 0.82x (AVX2); AVX2's 4-bit loop the same. */

/* Block b of a later unit's `tiles` tiles of levels (from `levels`), and of the next unit's steps and
 * offsets (which start `tiles` tiles past this unit's `steps` and `offsets`), fetched while this
 * call works on its own block b (of `bb` bytes a tile). Each tile's levels and steps span pages, where
 * the hardware prefetchers stop, so at a few dozen rows every tile began with stalls on memory.
 * A unit's first row tile fetches the next unit's levels, its second those of the unit after.
 * Both fetch the next unit's steps: the levels pass through L1 in between. With pairs of tiles,
 * fetching the next unit alone left a weight streamed from memory (the LM head's 28 MB)
 * 1.03-1.06x slower than single tiles on AVX2; this, the default model's 8-bit LM head 0.99-1.02x
 * (its steps fetched once, 1.02x), a 4-bit one 1.02-1.06x. */
static inline __attribute__((always_inline)) void fetch_ahead(const uint8_t *levels, const float *steps,
                                                              const float *offsets, int64_t b, int64_t nb, int tiles,
                                                              int64_t bb) {
    for (int t = 0; t < tiles; t++) {
        for (int line = 0; line < bb; line += 64) __builtin_prefetch(levels + (t * nb + b) * bb + line);
        if (b % 2 == 0) { /* a line holds two blocks' 8 steps */
            __builtin_prefetch(steps + ((tiles + t) * nb + b) * 8);
            __builtin_prefetch(offsets + ((tiles + t) * nb + b) * 8);
        }
    }
}

#include "x_blocks.h" /* after TILE_ROWS, which its layout follows */

#ifdef __AVX2__
/* VNNI's fused multiply-adds, where the build has them (AVX512-VNNI with VL, or AVX-VNNI: Ice
 * Lake, Cascade Lake and Zen 4 servers, Alder Lake and later clients): one instruction for a
 * multiply-add and its accumulation, the same integers exactly (no saturation either way). */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define VNNI 1
#define DPBUSD(acc, u8, s8) _mm256_dpbusd_epi32(acc, u8, s8)
#define DPWSSD(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#elif defined(__AVXVNNI__)
#define VNNI 1
#define DPBUSD(acc, u8, s8) _mm256_dpbusd_avx_epi32(acc, u8, s8)
#define DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#else
#define VNNI 0
#endif

/* Without VNNI, a 4-bit block's products add up in int16 (two sums an output) and vpmaddwd widens
 * them to int32. Given each block's step as a 16-bit integer (int8_gemm_pack's fixed steps: the
 * output's largest step is 32767 units), that one vpmaddwd also multiplies by the step, and the
 * float epilogue loses a multiply a row, block and tile (2 * 30480 * 32767 stays within int32).
 * AVX2 cores issue the multiply-adds, FMAs and multiplies on the same two pipes: the default
 * model's 4-bit layers took 0.95-0.98x the time on one thread (benchmarks/kernel_ab.py, AVX2 code
 * on a Zen 4). A step is then exact to half a unit: a weight moves by at most 15 / 65534 of its
 * output's largest step, 1/2185 of the 4-bit rounding of that output's coarsest block. */
#define FIXED_STEPS (!VNNI)

/* Step `step`'s 32 levels of a 4-bit tile block (BLOCK_BYTES' layout: steps 2p and 2p + 1 in the low
 * and high nibbles of the 32 bytes at 32p), one a byte. */
static inline __attribute__((always_inline)) __m256i nibble_step(const uint8_t *wb, int step) {
    const __m256i pair = _mm256_loadu_si256((const __m256i *)(wb + 16 * (step & ~1)));
    return _mm256_and_si256(step & 1 ? _mm256_srli_epi16(pair, 4) : pair, _mm256_set1_epi8(15));
}

/* A block's integer dots for rows [0, R), eight outputs in each row's 8 int32 lanes (with VNNI) or
 * 16 int16 ones, two an output (without: the caller widens them, times the step). Levels 0..15
 * are vpmaddubsw's unsigned operand; a pair of products is at most 2 * 15 * 127, so the 8 steps
 * add up in int16 (30480 at most). */
static inline __attribute__((always_inline)) void block_dots(const uint8_t *wb, const uint8_t *xb, int64_t R,
                                                             __m256i *dots) {
    for (int64_t r = 0; r < R; r++) dots[r] = _mm256_setzero_si256();
#if VNNI
#pragma GCC unroll 8
    for (int step = 0; step < 8; step++) {
        const __m256i levels = nibble_step(wb, step);
        for (int64_t r = 0; r < R; r++) {
            int32_t x4;
            __builtin_memcpy(&x4, xb + 4 * (R * step + r), 4);
            dots[r] = DPBUSD(dots[r], levels, _mm256_set1_epi32(x4));
        }
    }
#else
    /* Two steps' products summed, then added to the row's sum: plain adds, kept in this order by
     * the empty asm (left free, gcc computed all 8 steps' products first and spilled them). The
     * saturating add this replaced, one a step, held a Zen 4 to 0.8 vpmaddubsw a cycle; this
     * form 1.0, the kernel 0.82-0.87x the time. */
#pragma GCC unroll 4
    for (int step = 0; step < 8; step += 2) {
        const __m256i even = nibble_step(wb, step), odd = nibble_step(wb, step + 1); /* the same 32 bytes */
        for (int64_t r = 0; r < R; r++) {
            int32_t x_even, x_odd;
            __builtin_memcpy(&x_even, xb + 4 * (R * step + r), 4);
            __builtin_memcpy(&x_odd, xb + 4 * (R * (step + 1) + r), 4);
            const __m256i two = _mm256_add_epi16(_mm256_maddubs_epi16(even, _mm256_set1_epi32(x_even)),
                                                 _mm256_maddubs_epi16(odd, _mm256_set1_epi32(x_odd)));
            dots[r] = _mm256_add_epi16(dots[r], two);
            __asm__("" : "+x"(dots[r]));
        }
    }
#endif
}

/* block_dots for 8-bit levels (-128..127) against int16 x: each step's 16 bytes hold inputs 2s,
 * 2s + 1 of the eight outputs, widened to int16; vpmaddwd sums a pair, at most 2 * 128 * 32767,
 * and 16 steps stay within int32. */
static inline __attribute__((always_inline)) void block_dots16(const uint8_t *wb, const uint8_t *xb, int64_t R,
                                                               __m256i *dots) {
    for (int64_t r = 0; r < R; r++) dots[r] = _mm256_setzero_si256();
#pragma GCC unroll 16
    for (int step = 0; step < 16; step++) {
        const __m256i levels = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wb + 16 * step)));
        for (int64_t r = 0; r < R; r++) {
            int32_t x2;
            __builtin_memcpy(&x2, xb + 4 * (R * step + r), 4);
#if VNNI
            dots[r] = DPWSSD(dots[r], levels, _mm256_set1_epi32(x2));
#else
            dots[r] = _mm256_add_epi32(dots[r], _mm256_madd_epi16(levels, _mm256_set1_epi32(x2)));
            __asm__("" : "+x"(dots[r])); /* keeps gcc from reassociating the sums (and spilling) */
#endif
        }
    }
}

/* acc + a block's dots times its steps (`steps`: the tile's eight, for that block) and x's step:
 * int16 sums widened by their fixed-point steps where the build reads them so (FIXED_STEPS, bits 4;
 * acc is then in the outputs' units), else int32 sums times the float steps. Inlined with `bits` a
 * constant, one of the two forms is left, its step loads out of the row loop. */
static inline __attribute__((always_inline)) __m256 scaled_add(__m256i dots, const float *steps, __m256 x_step,
                                                               int64_t bits, __m256 acc) {
    (void)bits; /* VNNI builds read float steps for both widths */
#if FIXED_STEPS
    if (bits == 4) {
        const __m256i step16 = _mm256_loadu_si256((const __m256i *)steps);
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(dots, step16)), x_step, acc);
    }
#endif
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_mul_ps(_mm256_loadu_ps(steps), x_step), acc);
}

/* out rows [0, R) x the eight outputs of one tile, R a constant at each call site so that every
 * row's accumulators live in registers: per block, dot * weight step * x step + offset * x's
 * block sum. */
static inline __attribute__((always_inline)) void gemm_tile(const uint8_t *wt, const float *steps,
                                                            const float *offsets, const float *step_unit,
                                                            const uint8_t *xq, const float *xd, const float *xsum,
                                                            const float *bias, float *out, int64_t R, int64_t bits,
                                                            int64_t nb, int64_t OUT, const uint8_t *ahead) {
    const int64_t bb = BLOCK_BYTES(bits);
    __m256 acc[TILE_ROWS];
    for (int64_t r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (ahead) fetch_ahead(ahead, steps, offsets, b, nb, 1, bb);
        __m256i dots[TILE_ROWS];
        if (bits == 8)
            block_dots16(wt + b * bb, xq + b * 64 * R, R, dots);
        else
            block_dots(wt + b * bb, xq + b * 32 * R, R, dots);
        const __m256 offset = _mm256_loadu_ps(offsets + b * 8);
        for (int64_t r = 0; r < R; r++) {
            acc[r] = scaled_add(dots[r], steps + b * 8, _mm256_set1_ps(xd[b * R + r]), bits, acc[r]);
            acc[r] = _mm256_fmadd_ps(offset, _mm256_set1_ps(xsum[b * R + r]), acc[r]);
        }
    }
    const __m256 add = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 unit = step_unit ? _mm256_loadu_ps(step_unit) : _mm256_set1_ps(1.0f);
    for (int64_t r = 0; r < R; r++) _mm256_storeu_ps(out + r * OUT, _mm256_fmadd_ps(acc[r], unit, add));
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && VNNI
#define WIDE_512 1
/* AVX-512 with VNNI (Cascade Lake, Ice Lake and later Xeons; Zen 4): two neighbouring tiles (16
 * outputs, contiguous in `out`) in one 512-bit register, tile `a`'s outputs in the low half, so
 * each instruction does twice the work of the 256-bit one's; the layout stays the same. */
#define WIDE_TILES 1

static inline __attribute__((always_inline)) __m512 two_halves_ps(const float *lo, const float *hi) {
    const __m512d wide = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(lo)));
    return _mm512_castpd_ps(_mm512_insertf64x4(wide, _mm256_castps_pd(_mm256_loadu_ps(hi)), 1));
}

/* block_dots and block_dots16 for tiles a and b at once. */
static inline __attribute__((always_inline)) void block_dots_wide(const uint8_t *wa, const uint8_t *wb,
                                                                  const uint8_t *xb, int64_t R, int64_t bits,
                                                                  __m512i *dots) {
    for (int64_t r = 0; r < R; r++) dots[r] = _mm512_setzero_si512();
    if (bits == 4) {
        const __m512i low = _mm512_set1_epi8(15);
#pragma GCC unroll 8
        for (int step = 0; step < 8; step++) {
            const __m512i pair = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(wa + 16 * (step & ~1)))),
                _mm256_loadu_si256((const __m256i *)(wb + 16 * (step & ~1))), 1);
            const __m512i levels = _mm512_and_si512(step & 1 ? _mm512_srli_epi16(pair, 4) : pair, low);
            for (int64_t r = 0; r < R; r++) {
                int32_t x4;
                __builtin_memcpy(&x4, xb + 4 * (R * step + r), 4);
                dots[r] = _mm512_dpbusd_epi32(dots[r], levels, _mm512_set1_epi32(x4));
            }
        }
        return;
    }
#pragma GCC unroll 16
    for (int step = 0; step < 16; step++) {
        const __m256i bytes = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(wa + 16 * step))),
            _mm_loadu_si128((const __m128i *)(wb + 16 * step)), 1);
        const __m512i levels = _mm512_cvtepi8_epi16(bytes);
        for (int64_t r = 0; r < R; r++) {
            int32_t x2;
            __builtin_memcpy(&x2, xb + 4 * (R * step + r), 4);
            dots[r] = _mm512_dpwssd_epi32(dots[r], levels, _mm512_set1_epi32(x2));
        }
    }
}

/* gemm_tile for tiles a and b = a + 1 (nb block's bytes of levels and nb * 8 steps apart). The same
 * shape as gemm_tile in registers twice as wide. */
static inline __attribute__((always_inline)) void gemm_tile_wide(const uint8_t *wt, const float *steps,
                                                                 const float *offsets, const float *step_unit,
                                                                 const uint8_t *xq, const float *xd, const float *xsum,
                                                                 const float *bias, float *out, int64_t R, int64_t bits,
                                                                 int64_t nb, int64_t OUT, const uint8_t *ahead) {
    const int64_t bb = BLOCK_BYTES(bits), next = nb * bb, next_steps = nb * 8;
    __m512 acc[TILE_ROWS];
    for (int64_t r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (ahead) fetch_ahead(ahead, steps, offsets, b, nb, 2, bb);
        __m512i dots[TILE_ROWS];
        block_dots_wide(wt + b * bb, wt + next + b * bb, xq + b * (bits == 8 ? 64 : 32) * R, R, bits, dots);
        const __m512 step = two_halves_ps(steps + b * 8, steps + next_steps + b * 8);
        const __m512 offset = two_halves_ps(offsets + b * 8, offsets + next_steps + b * 8);
        for (int64_t r = 0; r < R; r++) {
            const __m512 sums = _mm512_cvtepi32_ps(dots[r]);
            acc[r] = _mm512_fmadd_ps(sums, _mm512_mul_ps(step, _mm512_set1_ps(xd[b * R + r])), acc[r]);
            acc[r] = _mm512_fmadd_ps(offset, _mm512_set1_ps(xsum[b * R + r]), acc[r]);
        }
    }
    (void)step_unit; /* float steps: VNNI's sums are int32 already */
    const __m512 add = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    for (int64_t r = 0; r < R; r++) _mm512_storeu_ps(out + r * OUT, _mm512_add_ps(acc[r], add));
}
#elif defined(__AVX2__)
/* AVX2: two neighbouring tiles a row, in two registers. Each broadcast of x then serves both tiles'
 * levels, and each row's x step and sum both epilogues: an AVX2 core issues about four vector
 * instructions a cycle, and one tile's loop spent more of them on broadcasts and epilogues than on
 * multiply-adds. On a Zen 4 built for Haswell (benchmarks/kernel_ab.py, 2 threads, 32-512 rows):
 * 0.90-0.94x the time of single tiles, the default model's LM head (int16 x) 0.99-1.01x. Six
 * rows' twelve sums, the step's two level registers and x's broadcast fill the sixteen registers;
 * the float sums live on the stack between blocks. */
#define WIDE_TILES 1

/* One step of one row into both tiles' sums d[0], d[1]: levels la, lb against x's broadcast xv
 * (bits 4: unsigned levels against int8 x, into int16 sums without VNNI, whose bounds are
 * block_dots'; bits 8: int16 levels against int16 x, into int32 sums). */
static inline __attribute__((always_inline)) void pair_step(__m256i *d, __m256i la, __m256i lb, __m256i xv,
                                                            int64_t bits) {
#if VNNI
    d[0] = bits == 4 ? DPBUSD(d[0], la, xv) : DPWSSD(d[0], la, xv);
    d[1] = bits == 4 ? DPBUSD(d[1], lb, xv) : DPWSSD(d[1], lb, xv);
#else
    d[0] = bits == 4 ? _mm256_add_epi16(d[0], _mm256_maddubs_epi16(la, xv)) : _mm256_add_epi32(d[0], _mm256_madd_epi16(la, xv));
    d[1] = bits == 4 ? _mm256_add_epi16(d[1], _mm256_maddubs_epi16(lb, xv)) : _mm256_add_epi32(d[1], _mm256_madd_epi16(lb, xv));
    __asm__("" : "+x"(d[0]), "+x"(d[1])); /* as in block_dots */
#endif
}

/* block_dots and block_dots16 for tiles a and b at once: dots[2r] tile a's, dots[2r + 1] tile b's. */
static inline __attribute__((always_inline)) void block_dots_pair(const uint8_t *wa, const uint8_t *wb,
                                                                  const uint8_t *xb, int64_t R, int64_t bits,
                                                                  __m256i *dots) {
    for (int64_t r = 0; r < 2 * R; r++) dots[r] = _mm256_setzero_si256();
    if (bits == 4) {
#pragma GCC unroll 8
        for (int step = 0; step < 8; step++) {
            const __m256i la = nibble_step(wa, step), lb = nibble_step(wb, step);
            for (int64_t r = 0; r < R; r++) {
                int32_t x4;
                __builtin_memcpy(&x4, xb + 4 * (R * step + r), 4);
                pair_step(dots + 2 * r, la, lb, _mm256_set1_epi32(x4), 4);
            }
        }
        return; /* without VNNI, int16 sums: the caller widens them (FIXED_STEPS) */
    }
#pragma GCC unroll 16
    for (int step = 0; step < 16; step++) {
        const __m256i la = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wa + 16 * step)));
        const __m256i lb = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wb + 16 * step)));
        for (int64_t r = 0; r < R; r++) {
            int32_t x2;
            __builtin_memcpy(&x2, xb + 4 * (R * step + r), 4);
            pair_step(dots + 2 * r, la, lb, _mm256_set1_epi32(x2), 8);
        }
    }
}

/* gemm_tile for tiles a and b = a + 1 (nb block's bytes of levels and nb * 8 steps apart). */
static inline __attribute__((always_inline)) void gemm_tile_wide(const uint8_t *wt, const float *steps,
                                                                 const float *offsets, const float *step_unit,
                                                                 const uint8_t *xq, const float *xd, const float *xsum,
                                                                 const float *bias, float *out, int64_t R, int64_t bits,
                                                                 int64_t nb, int64_t OUT, const uint8_t *ahead) {
    const int64_t bb = BLOCK_BYTES(bits), next = nb * bb, next_steps = nb * 8;
    __m256 acc[2 * TILE_ROWS];
    for (int64_t r = 0; r < 2 * R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (ahead) fetch_ahead(ahead, steps, offsets, b, nb, 2, bb);
        __m256i dots[2 * TILE_ROWS];
        block_dots_pair(wt + b * bb, wt + next + b * bb, xq + b * (bits == 8 ? 64 : 32) * R, R, bits, dots);
        const __m256 offset_a = _mm256_loadu_ps(offsets + b * 8);
        const __m256 offset_b = _mm256_loadu_ps(offsets + next_steps + b * 8);
        for (int64_t r = 0; r < R; r++) {
            const __m256 x_step = _mm256_set1_ps(xd[b * R + r]), x_sum = _mm256_set1_ps(xsum[b * R + r]);
            const __m256 a = scaled_add(dots[2 * r], steps + b * 8, x_step, bits, acc[2 * r]);
            const __m256 c = scaled_add(dots[2 * r + 1], steps + next_steps + b * 8, x_step, bits, acc[2 * r + 1]);
            acc[2 * r] = _mm256_fmadd_ps(offset_a, x_sum, a);
            acc[2 * r + 1] = _mm256_fmadd_ps(offset_b, x_sum, c);
        }
    }
    const __m256 add_a = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 add_b = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
    const __m256 unit_a = step_unit ? _mm256_loadu_ps(step_unit) : _mm256_set1_ps(1.0f);
    const __m256 unit_b = step_unit ? _mm256_loadu_ps(step_unit + 8) : _mm256_set1_ps(1.0f);
    for (int64_t r = 0; r < R; r++) {
        _mm256_storeu_ps(out + r * OUT, _mm256_fmadd_ps(acc[2 * r], unit_a, add_a));
        _mm256_storeu_ps(out + r * OUT + 8, _mm256_fmadd_ps(acc[2 * r + 1], unit_b, add_b));
    }
}
#else
#define WIDE_TILES 0
#endif
#ifndef FIXED_STEPS
#define FIXED_STEPS 0
#endif

/* The portable form of gemm_tile, one output at a time, for builds without AVX2 (tenor does not
 * choose the kernel there: this is slower than torch's GEMMs). */
static void gemm_tile_scalar(const uint8_t *wt, const float *steps, const float *offsets, const float *step_unit,
                             const uint8_t *xq, const float *xd, const float *xsum, const float *bias, float *out,
                             int64_t R, int64_t bits, int64_t nb, int64_t OUT) {
    for (int64_t r = 0; r < R; r++)
        for (int o = 0; o < 8; o++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                int32_t dot = 0;
                if (bits == 8) {
                    const int16_t *xt = (const int16_t *)(xq + b * 64 * R);
                    for (int step = 0; step < 16; step++)
                        for (int i = 0; i < 2; i++)
                            dot += (int8_t)wt[b * 256 + 16 * step + 2 * o + i] * xt[2 * (R * step + r) + i];
                } else {
                    const int8_t *xt = (const int8_t *)(xq + b * 32 * R);
                    for (int step = 0; step < 8; step++)
                        for (int i = 0; i < 4; i++) {
                            const uint8_t pair = wt[b * 128 + 32 * (step / 2) + 4 * o + i];
                            dot += (step % 2 ? pair >> 4 : pair & 15) * xt[4 * (R * step + r) + i];
                        }
                }
                const float step = step_unit ? (float)((const int16_t *)steps)[b * 16 + 2 * o] : steps[b * 8 + o];
                acc += (float)dot * (step * xd[b * R + r]) + offsets[b * 8 + o] * xsum[b * R + r];
            }
            out[r * OUT + o] = acc * (step_unit ? step_unit[o] : 1.0f) + (bias ? bias[o] : 0.0f);
        }
}

/* One tile's call with R and bits constants; for `pair`, two tiles' in one wide call where the
 * build has it. */
#if WIDE_TILES
#define TILE_CALL(rows, b)                                                                             \
    if (pair)                                                                                          \
        gemm_tile_wide(wt, steps, offsets, step_unit, xq, xd, xsum, bias, out, rows, b, nb, OUT, ahead);   \
    else                                                                                               \
        gemm_tile(wt, steps, offsets, step_unit, xq, xd, xsum, bias, out, rows, b, nb, OUT, ahead)
#else
#define TILE_CALL(rows, b) gemm_tile(wt, steps, offsets, step_unit, xq, xd, xsum, bias, out, rows, b, nb, OUT, ahead)
#endif
#define GEMM_ROWS(rows)                                                                                \
    case rows:                                                                                         \
        if (bits == 8) {                                                                               \
            TILE_CALL(rows, 8);                                                                        \
        } else {                                                                                       \
            TILE_CALL(rows, 4);                                                                        \
        }                                                                                              \
        return;

/* gemm_tile (or, for `pair`, gemm_tile_wide) with R and bits constants (each its own compiled loop). */
static void gemm_rows(const uint8_t *wt, const float *steps, const float *offsets, const float *step_unit, const uint8_t *xq,
                      const float *xd, const float *xsum, const float *bias, float *out, int64_t R, int64_t bits,
                      int64_t nb, int64_t OUT, int pair, const uint8_t *ahead) {
#ifdef __AVX2__
    switch (R) {
#if TILE_ROWS > 6
        GEMM_ROWS(12)
        GEMM_ROWS(11)
        GEMM_ROWS(10)
        GEMM_ROWS(9)
        GEMM_ROWS(8)
        GEMM_ROWS(7)
#endif
        GEMM_ROWS(6)
        GEMM_ROWS(5)
        GEMM_ROWS(4)
        GEMM_ROWS(3)
        GEMM_ROWS(2)
        GEMM_ROWS(1)
    }
#endif
    (void)pair, (void)ahead; /* the portable build has no wide tiles and fetches nothing ahead */
    gemm_tile_scalar(wt, steps, offsets, step_unit, xq, xd, xsum, bias, out, R, bits, nb, OUT);
}

/* The width in bits of this build's vector path: 512 (AVX-512 with VNNI), 256 (AVX2), or 0 (the
 * portable path only). tenor chooses the kernel only where it pays (kernels.int8_gemm_applies). */
int64_t tenor_int8_gemm_simd(void) {
#ifdef WIDE_512
    return 512;
#elif defined(__AVX2__)
    return 256;
#else
    return 0;
#endif
}

/* Whether this build reads 4-bit weights' steps as 16-bit fixed point (FIXED_STEPS: AVX2 without
 * VNNI), as int8_gemm_pack(fixed_steps=True) lays them out; else float steps. */
int64_t tenor_int8_gemm_fixed_steps(void) { return FIXED_STEPS; }

/* Whether this build reads 4-bit levels two a byte (BLOCK_BYTES): earlier builds read them one a byte. */
int64_t tenor_int8_gemm_nibble_levels(void) { return 1; }

/* Output unit u (a pair of tiles, or a last odd tile alone) for all R rows, a row tile at a time:
 * tenor_int8_gemm_f32's loop body. */
static inline __attribute__((always_inline)) void gemm_unit(const uint8_t *w, int64_t bits, const float *steps,
                                                            const float *offsets, const float *bias, float *out,
                                                            const uint8_t *xq, const float *xd, const float *xsum,
                                                            int64_t u, int64_t units, int64_t R, int64_t IN,
                                                            int64_t OUT) {
    const int64_t nb = IN / 32, tiles = OUT / 8, es = bits == 8 ? 2 : 1, per_unit = WIDE_TILES ? 2 : 1;
    const int64_t t = u * per_unit, pair = per_unit == 2 && t + 1 < tiles;
    const int64_t bb = BLOCK_BYTES(bits);
    const uint8_t *wt = w + t * nb * bb;
    const float *st = steps + t * nb * 8, *ot = offsets + t * nb * 8, *bt = bias ? bias + 8 * t : NULL;
    /* fixed steps: each output's unit follows all tiles' steps (int8_gemm_pack) */
    const float *step_unit = FIXED_STEPS && bits == 4 ? steps + tiles * nb * 8 + 8 * t : NULL;
    for (int64_t k = 0, r = 0; r < R; k++, r += TILE_ROWS) {
        const int64_t rows = R - r < TILE_ROWS ? R - r : TILE_ROWS;
        /* row tile 0 fetches the next unit, row tile 1 the levels of the one after (at the end of
         * a thread's grab of units, possibly the other thread's: a wasted fetch, nothing worse) */
        const uint8_t *ahead = k < 2 && u + 1 + k < units ? wt + (1 + k) * per_unit * nb * bb : NULL;
        gemm_rows(wt, st, ot, step_unit, xq + r * IN * es, xd + r * nb, xsum + r * nb, bt, out + r * OUT + 8 * t, rows, bits,
                  nb, OUT, (int)pair, ahead);
    }
}

/* The most rows that tenor_int8_gemm_f32 hands out in guided grabs (a decode step's, at up to 64
 * streams); past them, in dynamic ones. */
#define GUIDED_MAX_ROWS 64

/* out [R, OUT] = x [R, IN] @ W.T (+ bias) for W packed as above (bits 4 or 8); OUT a multiple of
 * 8, IN of 32. scratch: at least R * IN * (bits / 4) + 8 * R * (IN / 32) bytes, for x quantized. */
void tenor_int8_gemm_f32(const float *x, const uint8_t *w, int64_t bits, const float *steps, const float *offsets,
                         const float *bias, float *out, uint8_t *scratch, int64_t R, int64_t IN, int64_t OUT,
                         int64_t threads) {
    const int64_t nb = IN / 32, tiles = OUT / 8, es = bits == 8 ? 2 : 1;
    const int64_t per_unit = WIDE_TILES ? 2 : 1, units = (tiles + per_unit - 1) / per_unit; /* a last odd tile alone */
    uint8_t *xq = scratch;
    float *xd = (float *)(scratch + R * IN * es), *xsum = xd + R * nb;
    quantize_rows(x, bits, xq, xd, xsum, R, IN, threads);
    /* Units go to whichever thread is free: on two cores the server's other threads (HTTP, the
     * event loop) take turns on one core, and an even split left the other waiting (served 1.11x a
     * static split on a busy host, benchmarks/RESULTS.md). Big batches take a sixteenth of the units
     * at a time. A decode step's few rows make each unit short and the call's fixed costs count:
     * there guided grabs (half the units, then less and less) keep each thread's run of units long,
     * as fetch_ahead expects, and its last grab short. Paired in fused steps as AVX2 code on a Zen 4
     * (benchmarks/fused_step_ab.py): guided 0.960-0.966x the time of a decode step at 32 streams,
     * but 1.01-1.03x for prompt steps (the same code against itself: 1.005); a 64th at a time,
     * 1.03x and 1.05x. */
    if (R <= GUIDED_MAX_ROWS) {
#pragma omp parallel for schedule(guided) num_threads(threads)
        for (int64_t u = 0; u < units; u++) gemm_unit(w, bits, steps, offsets, bias, out, xq, xd, xsum, u, units, R, IN, OUT);
        return;
    }
    const int64_t grab = units / (8 * threads) > 1 ? units / (8 * threads) : 1;
#pragma omp parallel for schedule(dynamic, grab) num_threads(threads)
    for (int64_t u = 0; u < units; u++) gemm_unit(w, bits, steps, offsets, bias, out, xq, xd, xsum, u, units, R, IN, OUT);
}
