// Embedding gather (seed §3.3): embed_rows_<suffix> for F16/BF16 and every quant type, and the
// plain f32 row gather gather_rows_f32 (F32 tables go through it).
//
// Values are bit-identical to dequant.cu's (the same decoders, from quant_decoders.cuh: the
// word-wise Fast<T> where the table's alignment allows, else the byte-wise T; f32 out, no
// rounding after gguf's).
//
// Token ids are int32. An id outside [0, rows) is never dereferenced: its row is written as NaN
// and *err is set, so the launcher can raise a KernelInputError naming the id even when the ids
// only ever lived on the device.

#include <cuda_fp16.h>


#include "quant_decoders.cuh"  // u8/u16/u32/i64, the block decoders, SrcF32/F16/BF16
#include "stamp.cuh"           // LaunchStamp: every kernel here times itself (stamp.cuh)

#define NAN_F32 __uint_as_float(0x7FC00000u)

// A token id outside [0, rows): flag it (the launcher raises KernelInputError naming it) and
// write NaN instead of reading a row that is not there.
__device__ __forceinline__ bool bad_id(int id, int rows, int* err) {
    if (id >= 0 && id < rows) return false;
    if (err) atomicOr(err, 1);
    return true;
}

__device__ __forceinline__ void store8(float* o, const float* v) {
    float4* o4 = reinterpret_cast<float4*>(o);
    o4[0] = make_float4(v[0], v[1], v[2], v[3]);
    o4[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// Quant tables: one thread per 8 values of one token's row (two 16-byte f32 stores); a warp
// covers 256 consecutive values of a row. n_embd is a multiple of the block (>= 32), so row
// starts are 32-byte aligned in out. D is the decoder: T (byte-wise) or Fast<T> (word-wise).
template <class D>
__device__ __forceinline__ void gather_quant(const u8* __restrict__ raw,
                                             const int* __restrict__ ids, float* __restrict__ out,
                                             int rows, int n_embd, i64 nt, int* err) {
    constexpr int CPB = D::QK / 8;
    const int cpr = n_embd / 8;
    const i64 row_bytes = (i64)(n_embd / D::QK) * D::TS;
    const i64 total = nt * cpr;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (i64)gridDim.x * blockDim.x) {
        const i64 t = g / cpr;
        const int c = (int)(g - t * cpr);
        const int id = ids[t];
        float v[8];
        if (bad_id(id, rows, err)) {
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = NAN_F32;
        } else {
            D::dec8(raw + id * row_bytes + (c / CPB) * D::TS, c % CPB, v);
        }
        store8(out + t * n_embd + 8 * c, v);
    }
}

// Row id starts at raw + id * row_bytes, and every row and block size (TS) is a multiple of
// Fast<T>::ALIGN, so every block of the table is as aligned as raw modulo ALIGN: the word-wise
// decoders are valid for the whole table exactly when raw % ALIGN == 0 (checked here, the same
// value for every thread: no divergence), else the byte-wise ones (any alignment).
template <class T>
__device__ __forceinline__ void embed_quant(const u8* __restrict__ raw, const int* __restrict__ ids,
                                            float* __restrict__ out, int rows, int n_embd, i64 nt,
                                            int ts, int qk, int* err) {
    static_assert(T::TS % Fast<T>::ALIGN == 0, "rows and blocks must keep the table's alignment");
    if (ts != T::TS || qk != T::QK) __trap();  // the launcher passes the quant table's sizes
    if ((reinterpret_cast<unsigned long long>(raw) & (Fast<T>::ALIGN - 1)) == 0)
        gather_quant<Fast<T>>(raw, ids, out, rows, n_embd, nt, err);
    else
        gather_quant<T>(raw, ids, out, rows, n_embd, nt, err);
}

// embed.py generates one line per quant type of the table (tracekit/quants.py):
//   EMBED_KERNEL(embed_rows_q4_0, Q4_0)
#define EMBED_KERNEL(name, T)                                                                  \
    extern "C" __global__ void name(const u8* __restrict__ raw, const int* __restrict__ ids,  \
                                    float* __restrict__ out, int rows, int n_embd, i64 nt,   \
                                    int ts, int qk, int* err, unsigned long long* stamp) {   \
        const LaunchStamp launch_stamp(stamp);                                                \
        embed_quant<T>(raw, ids, out, rows, n_embd, nt, ts, qk, err);                         \
    }

// The float tables' walk: one thread per W values of a gathered row, grid-strided over the nt
// rows' chunks; chunk(o, at, bad, e0) writes the chunk at o: values e0 .. e0 + W - 1 of row id,
// which start at element `at` of the table (row 0's when the id is bad: the chunk writes NaN).
template <int W, class Chunk>
__device__ __forceinline__ void gather_chunks(const int* __restrict__ ids, float* __restrict__ out,
                                              int rows, int n, i64 nt, int* err, Chunk chunk) {
    const int cpr = (n + W - 1) / W;
    const i64 total = nt * cpr;
    for (i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (i64)gridDim.x * blockDim.x) {
        const i64 t = g / cpr;
        const int e0 = W * (int)(g - t * cpr);
        const int id = ids[t];
        const bool bad = bad_id(id, rows, err);
        chunk(out + t * n + e0, (i64)(bad ? 0 : id) * n + e0, bad, e0);
    }
}

// F16/BF16 tables: one thread per 8 values of a row. vec: n % 8 == 0 and the table is 16-byte
// aligned, so a chunk is one 16-byte load and two 16-byte stores; otherwise element by element
// (the row's last chunk may be partial).
template <class S>
__device__ __forceinline__ void embed_float(const u8* __restrict__ raw, const int* __restrict__ ids,
                                            float* __restrict__ out, int rows, int n, i64 nt,
                                            int vec, int* err) {
    gather_chunks<8>(ids, out, rows, n, nt, err, [&](float* o, i64 at, bool bad, int e0) {
        const u8* p = raw + at * S::BYTES;
        if (vec) {
            float v[8];
            if (bad) {
#pragma unroll
                for (int k = 0; k < 8; ++k) v[k] = NAN_F32;
            } else {
                S::vec8(p, v);
            }
            store8(o, v);
        } else {
            const int m = min(8, n - e0);
            for (int k = 0; k < m; ++k) o[k] = bad ? NAN_F32 : S::at(p + k * S::BYTES);
        }
    });
}

// ... and one per F16/BF16 type:  FLOAT_EMBED_KERNEL(embed_rows_f16, SrcF16)
#define FLOAT_EMBED_KERNEL(name, S)                                                            \
    extern "C" __global__ void name(const u8* __restrict__ raw, const int* __restrict__ ids,  \
                                    float* __restrict__ out, int rows, int n, i64 nt, int vec, \
                                    int* err, unsigned long long* stamp) {                     \
        const LaunchStamp launch_stamp(stamp);                                                \
        embed_float<S>(raw, ids, out, rows, n, nt, vec, err);                                  \
    }

// The plain f32 row gather (seed: get_rows, out[t, :] = x[ids[t], :]): one thread per 4 values
// of a row. vec: n % 4 == 0 and x is 16-byte aligned, so each thread moves one float4.
extern "C" __global__ void gather_rows_f32(const float* __restrict__ x, const int* __restrict__ ids,
                                           float* __restrict__ out, int rows, int n, i64 nt,
                                           int vec, int* err, unsigned long long* stamp) {
    const LaunchStamp launch_stamp(stamp);
    gather_chunks<4>(ids, out, rows, n, nt, err, [&](float* o, i64 at, bool bad, int e0) {
        const float* p = x + at;
        if (vec) {
            const float nan = NAN_F32;
            *reinterpret_cast<float4*>(o) =
                bad ? make_float4(nan, nan, nan, nan) : __ldg(reinterpret_cast<const float4*>(p));
        } else {
            const int m = min(4, n - e0);
            for (int k = 0; k < m; ++k) o[k] = bad ? NAN_F32 : p[k];
        }
    });
}
