// CPU kernels of the 8-bit KV cache (docs/attention_8bit.md): the row quantizer (quantize and
// cache append), decode attention against an 8-bit cache, and the FP8 forward. Scalar reference
// code: the CUDA kernels' oracle in the tests, and correct (not fast) for a CPU user.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/backend.hpp"
#include "core/f8_codec.hpp"

namespace nx::cpu {
namespace {

int kind_of(DType d) { return d == DType::I8 ? 0 : (d == DType::F8E4M3 ? 1 : 2); }

float load_float(const View& v, int64_t i) {
  switch (v.dtype) {
    case DType::F64: return float(static_cast<const double*>(v.data)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(v.data)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(v.data)[i]);
    default: return static_cast<const float*>(v.data)[i];
  }
}
void store_float(const View& v, int64_t i, float x) {
  switch (v.dtype) {
    case DType::F16: static_cast<uint16_t*>(v.data)[i] = f32_to_f16(x); break;
    case DType::BF16: static_cast<uint16_t*>(v.data)[i] = f32_to_bf16(x); break;
    default: static_cast<float*>(v.data)[i] = x;
  }
}
float decode_code(uint8_t c, int kind) { return kind == 0 ? float(int8_t(c)) : f8::decode(c, kind == 1); }

// Scores of one query row (decoded, f64) against 8-bit key rows [0, visible) starting at keys:
// the dot product in f64 times key_scale(j) * p.scale, minus ALiBi for head h at position qpos.
// Writes scores[j]; returns their max (-inf when there are none).
template <class KeyScale>
double row_scores(const AttentionParams& p, const std::vector<double>& qrow, const uint8_t* keys, int kind,
                  int64_t visible, int64_t h, int64_t qpos, KeyScale key_scale, std::vector<double>& scores) {
  double m = -INFINITY;
  for (int64_t j = 0; j < visible; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < p.dim; ++d) dot += qrow[size_t(d)] * decode_code(keys[j * p.dim + d], kind);
    double s = dot * key_scale(j) * p.scale;
    if (!p.alibi_slopes.empty()) s -= p.alibi_slopes[size_t(h)] * double(qpos - j);
    scores[size_t(j)] = s;
    m = std::max(m, s);
  }
  return m;
}

// Element (b, h, row) of a scale tensor whose shape is its granularity: [1], [B, H] or [B, H, T].
float scale_at(const View& s, int64_t b, int64_t h, int64_t heads, int64_t row, int64_t rows) {
  const float* x = static_cast<const float*>(s.data);
  if (s.shape.size() == 1) return x[0];
  return s.shape.size() == 2 ? x[b * heads + h] : x[(b * heads + h) * rows + row];
}

}  // namespace

void quantize_rows_8bit_cpu(const View& dst, const View& scale, const View& src, const View& pos) {
  const int kind = kind_of(dst.dtype);
  const int64_t cols = src.shape.back(), rows = cols ? src.numel() / cols : 0;
  const bool append = pos.data != nullptr;
  const int64_t heads = append ? src.shape[1] : 1, t_src = append ? src.shape[2] : rows,
                t_dst = append ? dst.shape[2] : rows;
  uint8_t* out = static_cast<uint8_t*>(dst.data);
  float* scales = static_cast<float*>(scale.data);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t to = r;
    if (append) {
      const int64_t bh = r / t_src, t = r % t_src, b = bh / heads;
      const int64_t row = int64_t(static_cast<const int32_t*>(pos.data)[b]) + t;
      if (row < 0 || row >= t_dst) continue;
      to = bh * t_dst + row;
    }
    float absmax = 0.f;
    for (int64_t c = 0; c < cols; ++c) absmax = std::fmax(absmax, std::fabs(load_float(src, r * cols + c)));
    const float s = q8::row_scale(absmax, kind);
    for (int64_t c = 0; c < cols; ++c) out[to * cols + c] = q8::encode(load_float(src, r * cols + c) / s, kind);
    scales[to] = s;
  }
}

void attention_decode_8bit_cpu(const AttentionParams& p, const View& q, const View& k, const View& k_scale,
                               const View& v, const View& v_scale, const View& lengths, const View& out) {
  const int kind = kind_of(k.dtype);
  const uint8_t* kc = static_cast<const uint8_t*>(k.data);
  const uint8_t* vc = static_cast<const uint8_t*>(v.data);
  const float* ks = static_cast<const float*>(k_scale.data);
  const float* vs = static_cast<const float*>(v_scale.data);
  const int32_t* len = static_cast<const int32_t*>(lengths.data);
  const int64_t group = p.heads / p.kv_heads, D = p.dim;
  std::vector<double> scores(static_cast<size_t>(p.tk)), acc(static_cast<size_t>(D));
  std::vector<double> qrow(static_cast<size_t>(D));
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n = std::clamp<int64_t>(len[b], 0, p.tk);
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t kv = (b * p.kv_heads + h / group) * p.tk;  // first cache row of (b, hk)
      for (int64_t i = 0; i < p.tq; ++i) {
        const int64_t qi = (b * p.heads + h) * p.tq + i, qpos = n - p.tq + i;
        for (int64_t d = 0; d < D; ++d) qrow[size_t(d)] = load_float(q, qi * D + d);
        const int64_t visible = p.causal ? std::min(n, std::max<int64_t>(qpos + 1, 0)) : n;
        const double m =
            row_scores(p, qrow, kc + kv * D, kind, visible, h, qpos, [&](int64_t j) { return double(ks[kv + j]); }, scores);
        std::fill(acc.begin(), acc.end(), 0.0);
        double l = 0;
        for (int64_t j = 0; j < visible; ++j) {
          const double w = std::exp(scores[size_t(j)] - m);
          l += w;
          const double wv = w * vs[kv + j];
          for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += wv * decode_code(vc[(kv + j) * D + d], kind);
        }
        for (int64_t d = 0; d < D; ++d) store_float(out, qi * D + d, l > 0 ? float(acc[size_t(d)] / l) : 0.f);
      }
    }
  }
}

// The FP8 forward's reference (ops.yaml attention_forward_fp8): scores in f64 from the decoded
// codes; per key tile of kFp8KeyTile, the running max and P rounded to e4m3 at 448 times its
// value there, the sums so far rescaled to that max; sums in f64.
void attention_forward_fp8_cpu(const AttentionParams& p, const View& q, const View& q_scale, const View& k,
                               const View& k_scale, const View& v, const View& v_scale, const View& out) {
  const uint8_t* qc = static_cast<const uint8_t*>(q.data);
  const uint8_t* kc = static_cast<const uint8_t*>(k.data);
  const uint8_t* vc = static_cast<const uint8_t*>(v.data);
  const int64_t group = p.heads / p.kv_heads, D = p.dim, rows = p.batch * p.heads * p.tq;
#pragma omp parallel
  {
    std::vector<double> scores(static_cast<size_t>(p.tk)), acc(static_cast<size_t>(D)), qrow(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 4)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / (p.heads * p.tq), h = r / p.tq % p.heads, i = r % p.tq, hk = h / group;
      const int64_t kv = (b * p.kv_heads + hk) * p.tk, qpos = p.tk - p.tq + i;
      const double qs = scale_at(q_scale, b, h, p.heads, i, p.tq);
      for (int64_t d = 0; d < D; ++d) qrow[size_t(d)] = f8::decode(qc[r * D + d], true);
      const int64_t visible = p.causal ? std::clamp<int64_t>(qpos + 1, 0, p.tk) : p.tk;
      auto key_scale = [&](int64_t j) { return qs * scale_at(k_scale, b, hk, p.kv_heads, j, p.tk); };
      row_scores(p, qrow, kc + kv * D, 1, visible, h, qpos, key_scale, scores);
      std::fill(acc.begin(), acc.end(), 0.0);
      double l = 0, m = -INFINITY;
      for (int64_t j0 = 0; j0 < visible; j0 += kFp8KeyTile) {
        const int64_t j1 = std::min(visible, j0 + kFp8KeyTile);
        const double m_new = *std::max_element(scores.begin() + j0, scores.begin() + j1);
        if (m_new > m) {  // exp(-inf) = 0 before the first tile
          const double c = std::exp(m - m_new);
          l *= c;
          for (auto& x : acc) x *= c;
          m = m_new;
        }
        for (int64_t j = j0; j < j1; ++j) {
          const double w = f8::decode(f8::encode(448.0 * std::exp(scores[size_t(j)] - m), true), true) / 448.0;
          l += w;
          for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += w * f8::decode(vc[(kv + j) * D + d], true);
        }
      }
      const double vs = scale_at(v_scale, b, hk, p.kv_heads, 0, 1);
      for (int64_t d = 0; d < D; ++d) store_float(out, r * D + d, l > 0 ? float(acc[size_t(d)] * vs / l) : 0.f);
    }
  }
}

}  // namespace nx::cpu
