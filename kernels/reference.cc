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

namespace {

// One head of the attention input: bias, optional RMSNorm over the head, RoPE at `pos` on the
// pairs (i, i + head_dim / 2).
void process_head(float* head, const float* bias, const float* norm, const float* inv_freq,
                  int head_dim, int pos, bool rotate, float eps) {
  const int half = head_dim / 2;
  if (bias)
    for (int i = 0; i < head_dim; ++i) head[i] += bias[i];
  if (norm) {
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
}

const float* or_null(const std::vector<float>& v, size_t offset = 0) {
  return v.empty() ? nullptr : v.data() + offset;
}

}  // namespace

QkvRope qkv_rope(std::vector<float> q, std::vector<float> k, std::vector<float> v,
                 const std::vector<float>& bq, const std::vector<float>& bk,
                 const std::vector<float>& bv, const std::vector<float>& q_norm,
                 const std::vector<float>& k_norm, const std::vector<float>& inv_freq,
                 int start_pos, int n, int n_heads, int n_kv_heads, int head_dim, int context,
                 float eps, std::vector<float>& k_cache, std::vector<float>& v_cache) {
  for (int t = 0; t < n; ++t) {
    const int pos = start_pos + t;
    for (int h = 0; h < n_heads; ++h)
      process_head(&q[(t * n_heads + h) * head_dim], or_null(bq, h * head_dim), or_null(q_norm),
                   inv_freq.data(), head_dim, pos, true, eps);
    for (int h = 0; h < n_kv_heads; ++h) {
      float* kh = &k[(t * n_kv_heads + h) * head_dim];
      float* vh = &v[(t * n_kv_heads + h) * head_dim];
      process_head(kh, or_null(bk, h * head_dim), or_null(k_norm), inv_freq.data(), head_dim, pos,
                   true, eps);
      process_head(vh, or_null(bv, h * head_dim), nullptr, inv_freq.data(), head_dim, pos, false,
                   eps);
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

void matmul(const float* a, int64_t lda, const float* w, const float* bias, int m, int n, int k,
            float* out) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = bias ? bias[j] : 0.0;
      const float* x = a + i * lda;
      const float* wr = w + int64_t(j) * k;
      for (int c = 0; c < k; ++c) s += double(x[c]) * wr[c];
      out[int64_t(i) * n + j] = float(s);
    }
}

void paged_kv_write(const float* q, const float* k, const float* v, const float* bq,
                    const float* bk, const float* bv, const float* q_norm, const float* k_norm,
                    const float* inv_freq, const int* pos, const int* slot, int num_tokens,
                    int n_heads, int n_kv_heads, int head_dim, int block_size, float eps,
                    float* q_out, float* k_pool, float* v_pool, int64_t block_stride) {
  if (block_stride == 0) block_stride = int64_t(n_kv_heads) * block_size * head_dim;
  std::vector<float> head(head_dim);
  for (int t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < n_heads; ++h) {
      const int64_t at = (int64_t(t) * n_heads + h) * head_dim;
      std::copy_n(q + at, head_dim, q_out + at);
      process_head(q_out + at, bq ? bq + h * head_dim : nullptr, q_norm, inv_freq, head_dim, pos[t],
                   true, eps);
    }
    if (slot[t] < 0) continue;
    const int block = slot[t] / block_size, offset = slot[t] % block_size;
    for (int h = 0; h < n_kv_heads; ++h) {
      const int64_t src = (int64_t(t) * n_kv_heads + h) * head_dim;
      const int64_t dst =
          int64_t(block) * block_stride + (int64_t(h) * block_size + offset) * head_dim;
      std::copy_n(k + src, head_dim, k_pool + dst);
      process_head(k_pool + dst, bk ? bk + h * head_dim : nullptr, k_norm, inv_freq, head_dim,
                   pos[t], true, eps);
      std::copy_n(v + src, head_dim, v_pool + dst);
      process_head(v_pool + dst, bv ? bv + h * head_dim : nullptr, nullptr, inv_freq, head_dim,
                   pos[t], false, eps);
    }
  }
}

void paged_attention(const float* q, const float* k_pool, const float* v_pool,
                     const int* query_start, const int* first_pos, const int* block_table,
                     int num_seqs, int max_blocks, int block_size, int n_heads, int n_kv_heads,
                     int head_dim, float scale, float* out, int64_t block_stride) {
  if (block_stride == 0) block_stride = int64_t(n_kv_heads) * block_size * head_dim;
  const int group = n_heads / n_kv_heads;
  std::vector<double> s;
  for (int seq = 0; seq < num_seqs; ++seq) {
    const int* table = block_table + int64_t(seq) * max_blocks;
    auto row = [&](const float* pool, int p, int kvh) {
      return pool + int64_t(table[p / block_size]) * block_stride +
             (int64_t(kvh) * block_size + p % block_size) * head_dim;
    };
    for (int t = query_start[seq]; t < query_start[seq + 1]; ++t) {
      const int last = first_pos[seq] + (t - query_start[seq]);
      s.resize(last + 1);
      for (int h = 0; h < n_heads; ++h) {
        const float* qh = q + (int64_t(t) * n_heads + h) * head_dim;
        const int kvh = h / group;
        double m = -INFINITY;
        for (int j = 0; j <= last; ++j) {
          const float* kr = row(k_pool, j, kvh);
          double d = 0;
          for (int i = 0; i < head_dim; ++i) d += double(qh[i]) * kr[i];
          s[j] = d * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int j = 0; j <= last; ++j) l += (s[j] = std::exp(s[j] - m));
        for (int i = 0; i < head_dim; ++i) {
          double o = 0;
          for (int j = 0; j <= last; ++j) o += s[j] * row(v_pool, j, kvh)[i];
          out[(int64_t(t) * n_heads + h) * head_dim + i] = float(o / l);
        }
      }
    }
  }
}

}  // namespace hearth::reference
