#include "worker/engine/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace hearth {

namespace {

// Sixteen independent partial sums in a fixed order: the compiler vectorises this without
// reassociating, so the result does not depend on the instruction set.
float dot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  return acc[0] + tail;
}

void load_row(const WeightRef& w, int64_t row, float* out) {
  const int64_t n = w.cols;
  switch (w.dtype) {
    case DType::F32:
      std::copy_n(static_cast<const float*>(w.data) + row * n, n, out);
      return;
    case DType::BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * n;
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i]);
      return;
    }
    case DType::F16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * n;
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(p[i]);
      return;
    }
  }
}

// out[t, r] = sum_c W[r, c] * in[t, c] (+ bias[r]) for n rows of input. Each weight row is
// converted once and used for every token, so prefill reads the weights once.
void matmul(float* out, const float* in, int n, const WeightRef& W, const WeightRef& bias = {}) {
  std::vector<float> row(W.cols);
  std::vector<float> b;
  if (bias) {
    b.resize(bias.cols);
    load_row(bias, 0, b.data());
  }
  for (int64_t r = 0; r < W.rows; ++r) {
    load_row(W, r, row.data());
    for (int t = 0; t < n; ++t) {
      float v = dot(row.data(), in + int64_t(t) * W.cols, W.cols);
      out[int64_t(t) * W.rows + r] = bias ? v + b[r] : v;
    }
  }
}

// y = w * (x / rms(x)), computed in fp32 as transformers does.
void rmsnorm(float* y, const float* x, const WeightRef& w, int64_t n, double eps) {
  std::vector<float> weight(n);
  load_row(w, 0, weight.data());
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / float(n) + float(eps));
  for (int64_t i = 0; i < n; ++i) y[i] = weight[i] * (x[i] * scale);
}

// Rotates pairs (i, i + d/2) of each head, the "rotate half" layout of HF checkpoints.
void rope(float* v, int n_heads, int head_dim, int pos, const std::vector<float>& inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = float(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < n_heads; ++h) {
      float* x = v + h * head_dim;
      const float a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }
}

}  // namespace

CpuBackend::CpuBackend(std::shared_ptr<const WeightStore> store, int context_length)
    : store_(std::move(store)), c_(store_->config()), context_(context_length) {
  if (store_->residence() != Residence::Host)
    throw std::runtime_error(
        "the cpu backend needs host-resident weights, this store is on the GPU");
  if (context_ <= 0) throw std::runtime_error("context length must be positive");
  w_ = bind_weights(*store_);
  inv_freq_ = rope_inverse_frequencies(c_);
  const size_t cache = size_t(c_.n_layers) * context_ * c_.kv_dim();
  k_cache_.assign(cache, 0.0f);
  v_cache_.assign(cache, 0.0f);
  logits_.assign(c_.vocab, 0.0f);
}

void CpuBackend::forward(std::span<const int32_t> tokens, int start_pos) {
  const int n = int(tokens.size());
  if (n == 0) throw std::runtime_error("forward needs at least one token");
  if (start_pos < 0 || start_pos + n > context_)
    throw std::runtime_error("context length " + std::to_string(context_) + " exceeded: " +
                             std::to_string(start_pos + n) + " positions requested");
  const int64_t h = c_.hidden;
  x_.resize(n * h);
  xn_.resize(n * h);
  q_.resize(n * int64_t(c_.q_dim()));
  k_.resize(n * int64_t(c_.kv_dim()));
  v_.resize(n * int64_t(c_.kv_dim()));
  att_.resize(n * int64_t(c_.q_dim()));
  gate_.resize(n * int64_t(c_.intermediate));
  up_.resize(n * int64_t(c_.intermediate));
  scores_.resize(context_);

  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c_.vocab)
      throw std::runtime_error("token id " + std::to_string(tokens[t]) +
                               " is outside the vocabulary (" + std::to_string(c_.vocab) + ")");
    load_row(w_.embed, tokens[t], &x_[t * h]);
  }
  for (int l = 0; l < c_.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    attention(L, l, n, start_pos);
    mlp(L, n);
  }
  rmsnorm(xn_.data(), &x_[(n - 1) * h], w_.final_norm, h, c_.rms_eps);
  matmul(logits_.data(), xn_.data(), 1, w_.lm_head);
}

void CpuBackend::attention(const LayerWeights& L, int layer, int n, int start_pos) {
  const int64_t h = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), hd = c_.head_dim;
  for (int t = 0; t < n; ++t) rmsnorm(&xn_[t * h], &x_[t * h], L.attn_norm, h, c_.rms_eps);
  matmul(q_.data(), xn_.data(), n, L.wq, L.bq);
  matmul(k_.data(), xn_.data(), n, L.wk, L.bk);
  matmul(v_.data(), xn_.data(), n, L.wv, L.bv);

  float* k_cache = &k_cache_[size_t(layer) * context_ * kvd];
  float* v_cache = &v_cache_[size_t(layer) * context_ * kvd];
  for (int t = 0; t < n; ++t) {
    float* q = &q_[t * qd];
    float* k = &k_[t * kvd];
    if (c_.qk_norm) {
      for (int hh = 0; hh < c_.n_heads; ++hh)
        rmsnorm(q + hh * hd, q + hh * hd, L.q_norm, hd, c_.rms_eps);
      for (int hh = 0; hh < c_.n_kv_heads; ++hh)
        rmsnorm(k + hh * hd, k + hh * hd, L.k_norm, hd, c_.rms_eps);
    }
    rope(q, c_.n_heads, int(hd), start_pos + t, inv_freq_);
    rope(k, c_.n_kv_heads, int(hd), start_pos + t, inv_freq_);
    std::copy_n(k, kvd, k_cache + int64_t(start_pos + t) * kvd);
    std::copy_n(&v_[t * kvd], kvd, v_cache + int64_t(start_pos + t) * kvd);
  }

  const float scale = 1.0f / std::sqrt(float(hd));
  const int group = c_.n_heads / c_.n_kv_heads;
  for (int t = 0; t < n; ++t) {
    const int last = start_pos + t;  // causal: attend to positions 0..last
    for (int hh = 0; hh < c_.n_heads; ++hh) {
      const float* q = &q_[t * qd + hh * hd];
      const int64_t kv_off = int64_t(hh / group) * hd;
      float max = -INFINITY;
      for (int j = 0; j <= last; ++j) {
        scores_[j] = dot(q, k_cache + int64_t(j) * kvd + kv_off, hd) * scale;
        max = std::max(max, scores_[j]);
      }
      float sum = 0.0f;
      for (int j = 0; j <= last; ++j) {
        scores_[j] = std::exp(scores_[j] - max);
        sum += scores_[j];
      }
      float* out = &att_[t * qd + hh * hd];
      std::fill_n(out, hd, 0.0f);
      for (int j = 0; j <= last; ++j) {
        const float p = scores_[j] / sum;
        const float* v = v_cache + int64_t(j) * kvd + kv_off;
        for (int64_t d = 0; d < hd; ++d) out[d] += p * v[d];
      }
    }
  }
  matmul(xn_.data(), att_.data(), n, L.wo);
  for (int64_t i = 0; i < n * h; ++i) x_[i] += xn_[i];
}

void CpuBackend::mlp(const LayerWeights& L, int n) {
  const int64_t h = c_.hidden, inter = c_.intermediate;
  for (int t = 0; t < n; ++t) rmsnorm(&xn_[t * h], &x_[t * h], L.mlp_norm, h, c_.rms_eps);
  matmul(gate_.data(), xn_.data(), n, L.w_gate);
  matmul(up_.data(), xn_.data(), n, L.w_up);
  for (int64_t i = 0; i < n * inter; ++i) {
    const float g = gate_[i];
    gate_[i] = g / (1.0f + std::exp(-g)) * up_[i];  // SiLU(gate) * up
  }
  matmul(xn_.data(), gate_.data(), n, L.w_down);
  for (int64_t i = 0; i < n * h; ++i) x_[i] += xn_[i];
}

}  // namespace hearth
