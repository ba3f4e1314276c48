// The fused attention kernel on bfloat16 data for CPUs with AVX512-BF16 (see
// accel/kernels/attention.h). Products run on vdpbf16ps: two bf16 products per
// float32 lane per instruction, accumulated in float32, so a GEMM operand is
// laid out as 32-bit words, each a pair of bf16 values adjacent along the
// reduced dimension. The softmax and the backward's elementwise part run in
// float32; the probabilities and dS are rounded to bf16 for the products that
// take them (as eager bf16-mixed rounds them for its bmm). Rounding is to
// nearest even, as LibTorch's.
//
// Layouts for one head (S tokens, Dh = head_dim, Sp = S rounded up to 16,
// S2 = S rounded up to 2, Dp = Dh rounded up to 16):
//   forward:  scores = Q . K^T       A = Q rows (pairs along d, read in place),
//                                    B = K^T pairs along d          [Dh/2 x Sp]
//             out = P . V            A = P rows (pairs along j),
//                                    B = V pairs along j            [S2/2 x Dp]
//   backward: dP = dO . V^T          as the scores
//             dQ = dS . K            A = dS rows, B = K pairs along j
//             dK^T = Q^T . dS        A = Q^T (pairs along i)        [Dh x S2/2]
//                                    B = dS pairs along i           [S2/2 x Sp]
//             dV^T = dO^T . P        likewise
// so no S x S matrix is ever transposed: row pairs are interleaved as they are
// computed.
#include "accel/kernels/attention.h"

#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#include <immintrin.h>
#define ACCEL_ATTENTION_BF16 1
#else
#define ACCEL_ATTENTION_BF16 0
#endif

namespace accel::kernels {

namespace {

inline int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }
inline int64_t pad2(int64_t n) { return (n + 1) / 2 * 2; }

}  // namespace

std::size_t attention_bf16_forward_scratch(int64_t S, int64_t Dh) {
  const int64_t Sp = pad16(S), S2 = pad2(S), Dp = pad16(Dh);
  return static_cast<std::size_t>(4 * (Dh / 2 * Sp + S2 / 2 * Dp + S * Sp + S * Dp));
}

std::size_t attention_bf16_backward_scratch(int64_t S, int64_t Dh) {
  const int64_t Sp = pad16(S), S2 = pad2(S), Dp = pad16(Dh);
  const int64_t c = S * Dp > Dh * Sp ? S * Dp : Dh * Sp;
  return static_cast<std::size_t>(4 * (Dh / 2 * Sp + S2 / 2 * Dp + 2 * Dh * (S2 / 2) + S * Sp +
                                       S * Sp / 2 + 2 * (S2 / 2) * Sp + c));
}

int64_t attention_bf16_padded(int64_t seq) { return pad16(seq); }

#if ACCEL_ATTENTION_BF16
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")
namespace {

// float -> bf16 bits, round to nearest even (NaN kept quiet), as c10::BFloat16.
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline __m512 load_bf16x16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// 16 floats -> 16 bf16 bits in the low halves of 32-bit lanes.
inline __m512i bf16_bits_x16(__m512 v) {
  const __m256bh h = _mm512_cvtneps_pbh(v);
  __m256i bits;
  std::memcpy(&bits, &h, sizeof bits);
  return _mm512_cvtepu16_epi32(bits);
}

// C[MR x 16*NV] = A . B over K2 pairs: A's row r, pair kk at A[r*ars + kk];
// B is [K2 x ldb] words.
template <int MR, int NV>
void micro(int64_t K2, const uint32_t* A, int64_t ars, const uint32_t* B, int64_t ldb, float* C,
           int64_t ldc) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < K2; ++kk) {
    __m512bh b[NV];
    for (int j = 0; j < NV; ++j) {
      const __m512i w = _mm512_loadu_si512(B + kk * ldb + 16 * j);
      std::memcpy(&b[j], &w, sizeof w);
    }
    for (int r = 0; r < MR; ++r) {
      const __m512i aw = _mm512_set1_epi32(static_cast<int>(A[r * ars + kk]));
      __m512bh a;
      std::memcpy(&a, &aw, sizeof aw);
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], a, b[j]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(C + r * ldc + 16 * j, acc[r][j]);
}

template <int NV, int R>
void tail_rows(int64_t rows, int64_t K2, const uint32_t* A, int64_t ars, const uint32_t* B,
               int64_t ldb, float* C, int64_t ldc) {
  if constexpr (R > 0) {
    if (rows == R) {
      micro<R, NV>(K2, A, ars, B, ldb, C, ldc);
    } else {
      tail_rows<NV, R - 1>(rows, K2, A, ars, B, ldb, C, ldc);
    }
  }
}

template <int NV, int MR>
void panel(int64_t M, int64_t K2, const uint32_t* A, int64_t ars, const uint32_t* B,
           int64_t ldb, float* C, int64_t ldc) {
  int64_t m = 0;
  for (; m + MR <= M; m += MR) micro<MR, NV>(K2, A + m * ars, ars, B, ldb, C + m * ldc, ldc);
  tail_rows<NV, MR - 1>(M - m, K2, A + m * ars, ars, B, ldb, C + m * ldc, ldc);
}

// C[M x N] (float32, N a multiple of 16) = A . B; 32 zmm registers hold 8 x 3
// or 12 x 2 accumulators.
void gemm(int64_t M, int64_t N, int64_t K2, const uint32_t* A, int64_t ars, const uint32_t* B,
          int64_t ldb, float* C, int64_t ldc) {
  int64_t n = 0;
  for (; n + 48 <= N; n += 48) panel<3, 8>(M, K2, A, ars, B + n, ldb, C + n, ldc);
  if (N - n == 32) panel<2, 12>(M, K2, A, ars, B + n, ldb, C + n, ldc);
  if (N - n == 16) panel<1, 12>(M, K2, A, ars, B + n, ldb, C + n, ldc);
}

// Word (kk, j) = (src[j][2kk], src[j][2kk+1]): rows x cols of src (ld in
// bf16 elements) as pairs along the columns, one output row per pair, padded
// with zero words to ldd.
void pack_pairs_along_cols(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols,
                           uint32_t* dst, int64_t ldd) {
  for (int64_t kk = 0; kk < cols / 2; ++kk) {
    for (int64_t j = 0; j < rows; ++j) {
      uint32_t w;
      std::memcpy(&w, src + j * ld + 2 * kk, 4);
      dst[kk * ldd + j] = w;
    }
    for (int64_t j = rows; j < ldd; ++j) dst[kk * ldd + j] = 0;
  }
}

// Word (ii, d) = (src[2ii][d], src[2ii+1][d]), pairs along the rows of
// rows x cols of src (an odd last row pairs with zero), stored at
// dst[ii * pair_stride + d * col_stride]: one output row per row pair
// (col_stride 1) or its transpose (pair_stride 1).
void pack_row_pairs(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint32_t* dst,
                    int64_t pair_stride, int64_t col_stride) {
  for (int64_t ii = 0; ii < (rows + 1) / 2; ++ii) {
    const uint16_t* r0 = src + 2 * ii * ld;
    const uint16_t* r1 = 2 * ii + 1 < rows ? r0 + ld : nullptr;
    for (int64_t d = 0; d < cols; ++d) {
      dst[ii * pair_stride + d * col_stride] =
          uint32_t(r0[d]) | (r1 ? uint32_t(r1[d]) << 16 : 0u);
    }
  }
}

// Pairs along the rows, one output row per row pair, columns zero-padded to ldd.
void pack_pairs_along_rows(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols,
                           uint32_t* dst, int64_t ldd) {
  pack_row_pairs(src, ld, rows, cols, dst, ldd, 1);
  for (int64_t ii = 0; ii < (rows + 1) / 2; ++ii)
    for (int64_t d = cols; d < ldd; ++d) dst[ii * ldd + d] = 0;
}

// The transpose: word (d, ii) at dst[d * ldd + ii].
void pack_transposed_pairs(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols,
                           uint32_t* dst, int64_t ldd) {
  pack_row_pairs(src, ld, rows, cols, dst, 1, ldd);
}

// exp(x) for x <= 0 on 16 lanes: the float32 kernels' own (attention_exp.inc).
typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
#include "attention_exp.inc"

inline __m512 exp16(__m512 x) {
  vf v;
  std::memcpy(&v, &x, sizeof v);
  const vf e = exp_nonpositive(v);
  __m512 r;
  std::memcpy(&r, &e, sizeof r);
  return r;
}

// probs row (bf16, Sp) = softmax(scale * scores row [0, S)), zeros after S.
void softmax_row(const float* row, int64_t S, int64_t Sp, float scale, uint16_t* out) {
  // Lanes at or past S are padding: out of the max and of the sum.
  auto live = [S](int64_t j) {
    return j + 16 <= S ? __mmask16(0xffff) : j >= S ? __mmask16(0) : __mmask16((1u << (S - j)) - 1u);
  };
  __m512 mx = _mm512_set1_ps(row[0]);
  for (int64_t j = 0; j < Sp; j += 16) mx = _mm512_mask_max_ps(mx, live(j), mx, _mm512_loadu_ps(row + j));
  const __m512 shift = _mm512_mul_ps(_mm512_set1_ps(scale), _mm512_set1_ps(_mm512_reduce_max_ps(mx)));
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 e[64];  // rows up to 1024 tokens stay in registers/L1; longer ones loop twice
  const int64_t nv = Sp / 16;
  __m512 sum = _mm512_setzero_ps();
  for (int64_t v = 0; v < nv; ++v) {
    const __m512 x = _mm512_loadu_ps(row + 16 * v);
    const __m512 ev = _mm512_maskz_mov_ps(live(16 * v), exp16(_mm512_fmsub_ps(x, sc, shift)));
    sum = _mm512_add_ps(sum, ev);
    if (v < 64) e[v] = ev;
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t v = 0; v < nv; ++v) {
    const __m512 ev = v < 64 ? e[v]
                             : _mm512_maskz_mov_ps(live(16 * v),
                                                   exp16(_mm512_fmsub_ps(
                                                       _mm512_loadu_ps(row + 16 * v), sc, shift)));
    const __m512i bits = bf16_bits_x16(_mm512_mul_ps(ev, inv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * v), _mm512_cvtepi32_epi16(bits));
  }
}

// Keys at or past `keys` are masked: their probabilities are 0; causal: row
// i's keys after i too (the whole products are computed: the zeros they
// multiply are skipped by the float32 kernels only).
void forward_head(const uint16_t* qkv, uint16_t* out, uint16_t* probs, int64_t S, int64_t keys,
                  bool causal, int64_t D, int64_t Dh, int64_t h, float scale, void* scratch) {
  const int64_t Sp = pad16(S), S2 = pad2(S), Dp = pad16(Dh), ld = 3 * D;
  const uint16_t* q = qkv + h * Dh;
  const uint16_t* k = qkv + D + h * Dh;
  const uint16_t* v = qkv + 2 * D + h * Dh;
  auto* kp = static_cast<uint32_t*>(scratch);  // [Dh/2 x Sp]
  uint32_t* vp = kp + Dh / 2 * Sp;             // [S2/2 x Dp]
  auto* scores = reinterpret_cast<float*>(vp + S2 / 2 * Dp);  // [S x Sp]
  float* o = scores + S * Sp;                                  // [S x Dp]
  pack_pairs_along_cols(k, ld, S, Dh, kp, Sp);
  pack_pairs_along_rows(v, ld, S, Dh, vp, Dp);
  gemm(S, Sp, Dh / 2, reinterpret_cast<const uint32_t*>(q), ld / 2, kp, Sp, scores, Sp);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t n = causal && i + 1 < keys ? i + 1 : keys;
    softmax_row(scores + i * Sp, n, Sp, scale, probs + i * Sp);
  }
  gemm(S, Dp, S2 / 2, reinterpret_cast<const uint32_t*>(probs), Sp / 2, vp, Dp, o, Dp);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t d = 0; d < Dh; ++d) out[i * D + h * Dh + d] = to_bf16(o[i * Dp + d]);
}

void backward_head(const uint16_t* qkv, const uint16_t* probs, const uint16_t* dout,
                   uint16_t* dqkv, int64_t S, int64_t D, int64_t Dh, int64_t h, float scale,
                   void* scratch) {
  const int64_t Sp = pad16(S), S2 = pad2(S), Dp = pad16(Dh), ld = 3 * D;
  const uint16_t* q = qkv + h * Dh;
  const uint16_t* k = qkv + D + h * Dh;
  const uint16_t* v = qkv + 2 * D + h * Dh;
  const uint16_t* dO = dout + h * Dh;
  auto* vp = static_cast<uint32_t*>(scratch);    // V pairs along d   [Dh/2 x Sp]
  uint32_t* kp = vp + Dh / 2 * Sp;               // K pairs along j   [S2/2 x Dp]
  uint32_t* qt = kp + S2 / 2 * Dp;               // Q^T pairs along i [Dh x S2/2]
  uint32_t* dot = qt + Dh * (S2 / 2);            // dO^T pairs        [Dh x S2/2]
  auto* dp = reinterpret_cast<float*>(dot + Dh * (S2 / 2));  // dP     [S x Sp]
  auto* ds = reinterpret_cast<uint16_t*>(dp + S * Sp);       // dS bf16 [S x Sp]
  auto* dsi = reinterpret_cast<uint32_t*>(ds + S * Sp);      // dS pairs along i [S2/2 x Sp]
  uint32_t* pi = dsi + S2 / 2 * Sp;                          // P pairs along i  [S2/2 x Sp]
  auto* c = reinterpret_cast<float*>(pi + S2 / 2 * Sp);
  pack_pairs_along_cols(v, ld, S, Dh, vp, Sp);
  pack_pairs_along_rows(k, ld, S, Dh, kp, Dp);
  pack_transposed_pairs(q, ld, S, Dh, qt, S2 / 2);
  pack_transposed_pairs(dO, D, S, Dh, dot, S2 / 2);
  gemm(S, Sp, Dh / 2, reinterpret_cast<const uint32_t*>(dO), D / 2, vp, Sp, dp, Sp);
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < S2; i += 2) {
    // Rows i and i+1 of dS (an odd S's last row pairs with zeros below).
    for (int64_t row = i; row < i + 2 && row < S; ++row) {
      uint16_t* dsr = ds + row * Sp;
      const uint16_t* pr = probs + row * Sp;
      const float* dpr = dp + row * Sp;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t j = 0; j < Sp; j += 16)
        acc = _mm512_fmadd_ps(load_bf16x16(pr + j), _mm512_loadu_ps(dpr + j), acc);
      const __m512 di = _mm512_set1_ps(_mm512_reduce_add_ps(acc));
      for (int64_t j = 0; j < Sp; j += 16) {
        const __m512 p = load_bf16x16(pr + j);
        const __m512 g =
            _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dpr + j), di)), sc);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dsr + j),
                            _mm512_cvtepi32_epi16(bf16_bits_x16(g)));
      }
    }
    // Interleave rows i, i+1 of dS and of P into pair words.
    const bool has1 = i + 1 < S;
    const uint16_t* d0 = ds + i * Sp;
    const uint16_t* d1 = ds + (i + 1) * Sp;
    const uint16_t* p0 = probs + i * Sp;
    const uint16_t* p1 = probs + (i + 1) * Sp;
    uint32_t* dsw_row = dsi + (i / 2) * Sp;
    uint32_t* pw_row = pi + (i / 2) * Sp;
    for (int64_t j = 0; j < Sp; j += 16) {
      const __m512i a0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d0 + j)));
      const __m512i b0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + j)));
      __m512i a1 = _mm512_setzero_si512(), b1 = _mm512_setzero_si512();
      if (has1) {
        a1 = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d1 + j)));
        b1 = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + j)));
      }
      _mm512_storeu_si512(dsw_row + j, _mm512_or_si512(a0, _mm512_slli_epi32(a1, 16)));
      _mm512_storeu_si512(pw_row + j, _mm512_or_si512(b0, _mm512_slli_epi32(b1, 16)));
    }
  }
  // dQ = dS . K
  gemm(S, Dp, S2 / 2, reinterpret_cast<const uint32_t*>(ds), Sp / 2, kp, Dp, c, Dp);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t d = 0; d < Dh; ++d) dqkv[i * ld + h * Dh + d] = to_bf16(c[i * Dp + d]);
  // dK^T = Q^T . dS, dV^T = dO^T . P: [Dh x Sp], written transposed.
  gemm(Dh, Sp, S2 / 2, qt, S2 / 2, dsi, Sp, c, Sp);
  for (int64_t j = 0; j < S; ++j)
    for (int64_t d = 0; d < Dh; ++d) dqkv[j * ld + D + h * Dh + d] = to_bf16(c[d * Sp + j]);
  gemm(Dh, Sp, S2 / 2, dot, S2 / 2, pi, Sp, c, Sp);
  for (int64_t j = 0; j < S; ++j)
    for (int64_t d = 0; d < Dh; ++d) dqkv[j * ld + 2 * D + h * Dh + d] = to_bf16(c[d * Sp + j]);
}

}  // namespace
#pragma GCC pop_options
#endif

bool attention_bf16_supported(int64_t dim, int64_t head_dim) {
#if ACCEL_ATTENTION_BF16
  return head_dim % 2 == 0 && dim % 2 == 0 && attention_bf16_native();
#else
  (void)dim;
  (void)head_dim;
  return false;
#endif
}

void attention_bf16_forward_head(const uint16_t* qkv, uint16_t* out, uint16_t* probs,
                                 int64_t probs_ld, int64_t seq, int64_t keys, int64_t dim,
                                 int64_t head_dim, int64_t head, float scale, void* scratch,
                                 bool causal) {
  attention_check_keys(keys, seq);
  if (!attention_bf16_supported(dim, head_dim) || probs_ld != pad16(seq)) {
    throw std::logic_error("attention_bf16_forward_head: needs AVX512-BF16, even dims and rows of " +
                           std::to_string(pad16(seq)) + " probabilities");
  }
#if ACCEL_ATTENTION_BF16
  forward_head(qkv, out, probs, seq, keys, causal, dim, head_dim, head, scale, scratch);
#else
  (void)qkv, (void)out, (void)probs, (void)scale, (void)head, (void)scratch, (void)keys,
      (void)causal;
#endif
}

void attention_bf16_backward_head(const uint16_t* qkv, const uint16_t* probs, int64_t probs_ld,
                                  const uint16_t* dout, uint16_t* dqkv, int64_t seq, int64_t dim,
                                  int64_t head_dim, int64_t head, float scale, void* scratch) {
  if (!attention_bf16_supported(dim, head_dim) || probs_ld != pad16(seq)) {
    throw std::logic_error("attention_bf16_backward_head: needs AVX512-BF16, even dims and rows of " +
                           std::to_string(pad16(seq)) + " probabilities");
  }
#if ACCEL_ATTENTION_BF16
  backward_head(qkv, probs, dout, dqkv, seq, dim, head_dim, head, scale, scratch);
#else
  (void)qkv, (void)probs, (void)dout, (void)dqkv, (void)scale, (void)head, (void)scratch;
#endif
}

}  // namespace accel::kernels
