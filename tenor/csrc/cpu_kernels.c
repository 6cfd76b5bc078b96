/* tenor's fused CPU kernels for the float32 decode path, called through ctypes.
 *
 * Each replaces a chain of small torch ops (each a dispatch and a pass over memory) with one
 * call. Built at setup or on first use by tenor/models/native.py for the host's instruction
 * sets (-march=native); torch's own ops stand in wherever this library cannot be built.
 * No torch headers: plain C99 on raw float32 buffers, OpenMP for the threads (the loader
 * reuses torch's libgomp, so one thread pool serves both).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

/* out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for `rows` rows of `dim`. */
void tenor_rms_norm_f32(const float *x, const float *w, float *out, int64_t rows, int64_t dim, float eps) {
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

/* gate_up [rows, 2 * inter] (gate then up) -> out [rows, inter] = silu(gate) * up. */
void tenor_silu_mul_f32(const float *gate_up, float *out, int64_t rows, int64_t inter) {
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gate_up + r * 2 * inter, *u = g + inter;
        float *o = out + r * inter;
#pragma omp simd
        for (int64_t i = 0; i < inter; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

/* Decode attention straight from the paged cache, no gathered copy.
 *   q       [B, H, E]           one query token per sequence
 *   k, v    [K, slots, E]       one layer's cache (slot = block * block_size + offset): float32,
 *                               or int8 with one float32 scale per (head, slot) in ks, vs [K, slots]
 *   table   [B, N]              each sequence's blocks
 *   lengths [B]                 each sequence's context length (slots 0..len-1 of its blocks)
 *   out     [B, H, E]
 *   scratch [threads, G * max_len] floats for the scores, one slice for each of `threads` threads
 * Query heads h * G .. h * G + G - 1 share kv head h (grouped-query attention). */
static void paged_decode_attention(const float *q, const float *kf, const float *vf, const int8_t *k8,
                                   const int8_t *v8, const float *ks, const float *vs, const int64_t *table,
                                   const int64_t *lengths, float *out, float *scratch, int64_t B, int64_t H,
                                   int64_t K, int64_t E, int64_t N, int64_t block_size, int64_t slots,
                                   int64_t max_len, float scale, int64_t threads) {
    const int64_t G = H / K;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t item = 0; item < B * K; item++) {
        const int64_t b = item / K, h = item % K, len = lengths[b];
        float *scores = scratch + (int64_t)omp_get_thread_num() * G * max_len;
        const float *qb = q + (b * H + h * G) * E;
        float *ob = out + (b * H + h * G) * E;
        for (int64_t t = 0; t < len; t++) {
            const int64_t slot = h * slots + table[b * N + t / block_size] * block_size + t % block_size;
            for (int64_t g = 0; g < G; g++) {
                const float *qg = qb + g * E;
                float dot = 0.0f;
                if (k8) {
                    const int8_t *kt = k8 + slot * E;
#pragma omp simd reduction(+ : dot)
                    for (int64_t e = 0; e < E; e++) dot += qg[e] * (float)kt[e];
                    dot *= ks[slot];
                } else {
                    const float *kt = kf + slot * E;
#pragma omp simd reduction(+ : dot)
                    for (int64_t e = 0; e < E; e++) dot += qg[e] * kt[e];
                }
                scores[g * max_len + t] = dot * scale;
            }
        }
        for (int64_t g = 0; g < G; g++) {
            float *s = scores + g * max_len, top = -INFINITY, total = 0.0f;
            for (int64_t t = 0; t < len; t++) top = s[t] > top ? s[t] : top;
            for (int64_t t = 0; t < len; t++) {
                s[t] = expf(s[t] - top);
                total += s[t];
            }
            const float inv = 1.0f / total;
            for (int64_t t = 0; t < len; t++) s[t] *= inv;
            float *og = ob + g * E;
#pragma omp simd
            for (int64_t e = 0; e < E; e++) og[e] = 0.0f;
        }
        for (int64_t t = 0; t < len; t++) {  /* each V row read once, for every query head of the group */
            const int64_t slot = h * slots + table[b * N + t / block_size] * block_size + t % block_size;
            for (int64_t g = 0; g < G; g++) {
                float *og = ob + g * E;
                if (v8) {
                    const int8_t *vt = v8 + slot * E;
                    const float p = scores[g * max_len + t] * vs[slot];
#pragma omp simd
                    for (int64_t e = 0; e < E; e++) og[e] += p * (float)vt[e];
                } else {
                    const float *vt = vf + slot * E, p = scores[g * max_len + t];
#pragma omp simd
                    for (int64_t e = 0; e < E; e++) og[e] += p * vt[e];
                }
            }
        }
    }
}

void tenor_paged_decode_attention_f32(const float *q, const float *k, const float *v, const int64_t *table,
                                      const int64_t *lengths, float *out, float *scratch, int64_t B, int64_t H,
                                      int64_t K, int64_t E, int64_t N, int64_t block_size, int64_t slots,
                                      int64_t max_len, float scale, int64_t threads) {
    paged_decode_attention(q, k, v, NULL, NULL, NULL, NULL, table, lengths, out, scratch, B, H, K, E, N, block_size,
                           slots, max_len, scale, threads);
}

/* The same over an int8 cache: k, v int8 [K, slots, E], ks, vs float32 [K, slots]. */
void tenor_paged_decode_attention_kv8(const float *q, const int8_t *k, const int8_t *v, const float *ks,
                                      const float *vs, const int64_t *table, const int64_t *lengths, float *out,
                                      float *scratch, int64_t B, int64_t H, int64_t K, int64_t E, int64_t N,
                                      int64_t block_size, int64_t slots, int64_t max_len, float scale,
                                      int64_t threads) {
    paged_decode_attention(q, NULL, NULL, k, v, ks, vs, table, lengths, out, scratch, B, H, K, E, N, block_size,
                           slots, max_len, scale, threads);
}

/* out [R, OUT] = x [R, IN] @ W.T (+ bias) for 8-bit weights in blocks of 32 along IN, each block
 * with its own scale and minimum (scales, mins [OUT, IN / 32]): W[o, i] ~= w[o, i] * scale + min,
 * w in 0..255. The layout holds a GGUF Q4_1 block exactly (255 = 15 * 17). For the few rows of a
 * decode step, where a matmul is bound by the bytes of weight it reads: each weight block is
 * read once and applied to every row. IN must be a multiple of 32, R at most 8. */
void tenor_u8_block_linear_f32(const float *x, const uint8_t *w, const float *scales, const float *mins,
                               const float *bias, float *out, int64_t R, int64_t IN, int64_t OUT, int64_t threads) {
    const int64_t nb = IN / 32;
    float *xsum = malloc(sizeof(float) * R * nb);  /* sum of x over each block: the mins' share */
    for (int64_t r = 0; r < R; r++)
        for (int64_t blk = 0; blk < nb; blk++) {
            float sum = 0.0f;
            for (int64_t i = 0; i < 32; i++) sum += x[r * IN + blk * 32 + i];
            xsum[r * nb + blk] = sum;
        }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t o = 0; o < OUT; o++) {
        const uint8_t *wo = w + o * IN;
        const float *so = scales + o * nb, *mo = mins + o * nb;
        float acc[8] = {0};
        for (int64_t blk = 0; blk < nb; blk++) {
            float wf[32];
#pragma omp simd
            for (int64_t i = 0; i < 32; i++) wf[i] = (float)wo[blk * 32 + i];
            for (int64_t r = 0; r < R; r++) {
                const float *xr = x + r * IN + blk * 32;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int64_t i = 0; i < 32; i++) dot += wf[i] * xr[i];
                acc[r] += dot * so[blk] + mo[blk] * xsum[r * nb + blk];
            }
        }
        for (int64_t r = 0; r < R; r++) out[r * OUT + o] = acc[r] + (bias ? bias[o] : 0.0f);
    }
    free(xsum);
}

/* Llama's rotary ("rotate half", over whole heads) applied in place to the q and k heads of
 * qkv [T, (H + 2K) * E], then k and v written to the cache at slots [T].
 *   cos, sin [T, E]  the step's tables, the rotation's sign folded into sin
 *   kc, vc  [K, slots, E]  one layer's cache */
void tenor_rotary_kv_write_f32(float *qkv, const float *cos, const float *sin, float *kc, float *vc,
                               const int64_t *slots, int64_t T, int64_t H, int64_t K, int64_t E,
                               int64_t num_slots) {
    const int64_t half = E / 2, width = (H + 2 * K) * E;
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
            float *kd = kc + (h * num_slots + slot) * E, *vd = vc + (h * num_slots + slot) * E;
#pragma omp simd
            for (int64_t i = 0; i < E; i++) {
                kd[i] = k[i];
                vd[i] = v[i];
            }
        }
    }
}
