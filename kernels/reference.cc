#include "kernels/reference.h"

#include <algorithm>
#include <cmath>

namespace hearth::reference {

std::vector<float> rmsnorm(const std::vector<float>& x, const std::vector<float>& w, int n,
                           int hidden, float eps) {
  std::vector<float> out(x.size());
  for (int t = 0; t < n; ++t) {
    double ss = 0;
    for (int i = 0; i < hidden; ++i) ss += double(x[t * hidden + i]) * x[t * hidden + i];
    const double scale = 1.0 / std::sqrt(ss / hidden + eps);
    for (int i = 0; i < hidden; ++i) out[t * hidden + i] = float(w[i] * x[t * hidden + i] * scale);
  }
  return out;
}

QkvRope qkv_rope(std::vector<float> q, std::vector<float> k, std::vector<float> v,
                 const std::vector<float>& bq, const std::vector<float>& bk,
                 const std::vector<float>& bv, const std::vector<float>& q_norm,
                 const std::vector<float>& k_norm, const std::vector<float>& inv_freq,
                 int start_pos, int n, int n_heads, int n_kv_heads, int head_dim, int context,
                 float eps, std::vector<float>& k_cache, std::vector<float>& v_cache) {
  const int half = head_dim / 2;
  auto process = [&](float* head, const float* bias, const std::vector<float>& norm, int pos,
                     bool rotate) {
    if (bias)
      for (int i = 0; i < head_dim; ++i) head[i] += bias[i];
    if (!norm.empty()) {
      double ss = 0;
      for (int i = 0; i < head_dim; ++i) ss += double(head[i]) * head[i];
      const double scale = 1.0 / std::sqrt(ss / head_dim + eps);
      for (int i = 0; i < head_dim; ++i) head[i] = float(norm[i] * head[i] * scale);
    }
    if (!rotate) return;
    for (int i = 0; i < half; ++i) {
      const double angle = double(float(pos) * inv_freq[i]);
      const double c = std::cos(angle), s = std::sin(angle);
      const double a = head[i], b = head[i + half];
      head[i] = float(a * c - b * s);
      head[i + half] = float(b * c + a * s);
    }
  };
  for (int t = 0; t < n; ++t) {
    const int pos = start_pos + t;
    for (int h = 0; h < n_heads; ++h)
      process(&q[(t * n_heads + h) * head_dim], bq.empty() ? nullptr : &bq[h * head_dim], q_norm,
              pos, true);
    for (int h = 0; h < n_kv_heads; ++h) {
      float* kh = &k[(t * n_kv_heads + h) * head_dim];
      float* vh = &v[(t * n_kv_heads + h) * head_dim];
      process(kh, bk.empty() ? nullptr : &bk[h * head_dim], k_norm, pos, true);
      process(vh, bv.empty() ? nullptr : &bv[h * head_dim], {}, pos, false);
      std::copy_n(kh, head_dim, &k_cache[(size_t(h) * context + pos) * head_dim]);
      std::copy_n(vh, head_dim, &v_cache[(size_t(h) * context + pos) * head_dim]);
    }
  }
  return {q};
}

std::vector<float> gemv(const std::vector<float>& w, const std::vector<float>& x, int rows, int k) {
  std::vector<float> out(rows);
  for (int r = 0; r < rows; ++r) {
    double s = 0;
    for (int i = 0; i < k; ++i) s += double(w[size_t(r) * k + i]) * x[i];
    out[r] = float(s);
  }
  return out;
}

std::vector<float> attention(const std::vector<float>& q, const std::vector<float>& k_cache,
                             const std::vector<float>& v_cache, int start_pos, int n, int n_heads,
                             int n_kv_heads, int head_dim, int context, float scale) {
  std::vector<float> out(size_t(n) * n_heads * head_dim);
  const int group = n_heads / n_kv_heads;
  std::vector<double> s(start_pos + n);
  for (int t = 0; t < n; ++t) {
    const int last = start_pos + t;
    for (int h = 0; h < n_heads; ++h) {
      const float* qh = &q[(size_t(t) * n_heads + h) * head_dim];
      const size_t base = size_t(h / group) * context * head_dim;
      double m = -INFINITY;
      for (int j = 0; j <= last; ++j) {
        double d = 0;
        for (int i = 0; i < head_dim; ++i)
          d += double(qh[i]) * k_cache[base + size_t(j) * head_dim + i];
        s[j] = d * scale;
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (int j = 0; j <= last; ++j) l += (s[j] = std::exp(s[j] - m));
      for (int i = 0; i < head_dim; ++i) {
        double o = 0;
        for (int j = 0; j <= last; ++j) o += s[j] * v_cache[base + size_t(j) * head_dim + i];
        out[(size_t(t) * n_heads + h) * head_dim + i] = float(o / l);
      }
    }
  }
  return out;
}

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

}  // namespace hearth::reference
