/* Weights into blocks of 32 that share a step and a minimum, at load: the C form of
 * tenor/models/block_weights.py's quantize_u8_blocks_torch, which took 1.3-2.4 s of `tenor serve`'s start
 * on the default model (two candidate grids over 135M floats, a dozen passes of torch ops each).
 *
 * The same float32 operations in the same order, so both give the same bytes (the library is built
 * with -std=c99, under which gcc fuses no multiply-add that the source does not write). */
#include "kernels.h"

/* Comparisons rather than fminf / fmaxf, whose NaN rules keep gcc from vectorizing them: for
 * finite weights they agree (a block with a NaN is meaningless either way, as in torch's form). */
static inline float smaller(float a, float b) { return a < b ? a : b; }
static inline float larger(float a, float b) { return a > b ? a : b; }

/* Levels of one block of 32 on the grid minimum + level * step, rounded to nearest even and held
 * to 0..255; returns the largest error of the block on that grid. */
static float on_grid(const float *x, float step, float minimum, uint8_t *levels) {
    float worst = 0.0f;
#pragma omp simd reduction(max : worst)
    for (int i = 0; i < 32; i++) {
        const float level = smaller(larger(nearbyintf((x[i] - minimum) / step), 0.0f), 255.0f);
        levels[i] = (uint8_t)level;
        worst = larger(worst, fabsf(level * step + minimum - x[i]));
    }
    return worst;
}

/* w [blocks, 32] -> levels [blocks, 32], steps and minimums [blocks]: w ~= level * step + minimum.
 * Each block takes the better of two grids: its minimum to its maximum in 255 steps, or symmetric
 * around zero in steps of absmax / 127 (the second where its largest error is strictly smaller). */
void tenor_quantize_u8_blocks(const float *w, int64_t blocks, uint8_t *levels, float *steps, float *minimums,
                              int64_t threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < blocks; b++) {
        const float *x = w + 32 * b;
        float low = x[0], high = x[0];
#pragma omp simd reduction(min : low) reduction(max : high)
        for (int i = 1; i < 32; i++) low = smaller(low, x[i]), high = larger(high, x[i]);
        const float span_step = larger((high - low) / 255.0f, 1e-12f);
        const float sym_step = larger(larger(high, -low) / 127.0f, 1e-12f), sym_min = -127.0f * sym_step;
        uint8_t symmetric[32];
        const float span_error = on_grid(x, span_step, low, levels + 32 * b);
        const float sym_error = on_grid(x, sym_step, sym_min, symmetric);
        if (sym_error < span_error) {
            for (int i = 0; i < 32; i++) levels[32 * b + i] = symmetric[i];
            steps[b] = sym_step, minimums[b] = sym_min;
        } else {
            steps[b] = span_step, minimums[b] = low;
        }
    }
}

/* The span grid's levels (0..255) of blocks that are all GGUF Q4_1 blocks (every level a multiple
 * of 17: 16 levels, 255 = 15 * 17) as 4-bit levels, one a byte (0..15, int8_gemm's form), and
 * packed two a byte (byte j of a block: level j low, level j + 16 high; block_linear's form). One
 * pass, where torch's remainder, division and shifts took ~0.45 s of the default model's load.
 * Returns 1 if every level is a multiple of 17, else 0 (the outputs are then meaningless). */
int64_t tenor_nibble_levels(const uint8_t *q, int64_t blocks, uint8_t *levels, uint8_t *packed, int64_t threads) {
    int64_t misses = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : misses)
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *in = q + 32 * b;
        uint8_t *out = levels + 32 * b;
        int off_grid = 0;
#pragma omp simd reduction(| : off_grid)
        for (int i = 0; i < 32; i++) {
            const uint8_t level = (uint8_t)(in[i] / 17);
            out[i] = level;
            off_grid |= (uint8_t)(level * 17) != in[i];
        }
        for (int j = 0; j < 16; j++) packed[16 * b + j] = (uint8_t)(out[j] | (out[j + 16] << 4));
        misses += off_grid;
    }
    return misses == 0;
}
