// Rotary position embedding, ggml semantics (tracekit/kernels/rope.py has the formula and the
// grid). One thread per rotated pair, grid-stride over a 64-bit pair index k:
//   row = k / half (token * n_head + head), i = k % half, token = row / n_head.
// The angle is built as ggml's CPU rope cache builds it: theta = float(pos), multiplied by
// theta_scale (computed on the host) once per pair index, divided by the pair's frequency
// factor when there are any (llama 3's rope_freqs.weight: ggml's theta / ff[i]), then
// freq_scale * theta. Pure f32
// multiplies, so it matches the NumPy reference bit for bit; cosf/sinf are the IEEE-accurate
// versions (no fast math). Products are rounded before the add/subtract (__fmul_rn).
// Reads 8 B, writes 8 B per pair (+ 4 B position per token); 6 flops + i angle multiplies.

#include "stamp.cuh"  // node_start_stamp: the last parameter of the node-first kernels

extern "C" __global__ void rope_f32(const float* x, const int* pos, float* y, long long nt,
                                    int n_head, int head_dim, float theta_scale,
                                    float freq_scale, int neox, const float* freq_factors,
                                    int has_factors, unsigned long long* stamp) {
    node_start_stamp(stamp);
    const int half = head_dim / 2;
    const long long total = nt * n_head * half;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += stride) {
        const long long row = k / half;
        const int i = (int)(k - row * half);
        const long long t = row / n_head;
        float theta = (float)pos[t];
        for (int j = 0; j < i; ++j) theta = __fmul_rn(theta, theta_scale);
        if (has_factors) theta = __fdiv_rn(theta, freq_factors[i]);
        theta = __fmul_rn(freq_scale, theta);
        const float c = cosf(theta), s = sinf(theta);
        const long long base = row * head_dim;
        const long long ia = neox ? base + i : base + 2 * i;
        const long long ib = neox ? base + i + half : base + 2 * i + 1;
        const float a = x[ia], b = x[ib];
        y[ia] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        y[ib] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    }
}
