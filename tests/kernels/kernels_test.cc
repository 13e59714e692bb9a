// Every CUDA kernel against its CPU reference (kernels/reference.h) on fresh random inputs of
// several shapes, odd sizes included; outputs are poisoned first so unwritten values fail.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/gemm.h"
#include "kernels/reference.h"
#include "worker/engine/sampler.h"
#include "tests/kernels/gpu_test_util.h"

namespace hearth {
namespace {

using kernels::Half;
using namespace hearth::test;

const Half kTypes[] = {Half::BF16, Half::F16};

TEST(Kernels, EmbeddingGathersRows) {
  HEARTH_REQUIRE_GPU();
  for (Half t : kTypes) {
    const int vocab = 300, hidden = 72, n = 5;
    auto table = rounded(random_floats(size_t(vocab) * hidden), t);
    std::vector<int32_t> tokens = {0, 299, 17, 17, 150};
    auto dt = upload_half(table, t);
    auto dtok = upload(tokens);
    auto out = poisoned(size_t(n) * hidden * 4);
    kernels::embedding(t, dt.get(), dtok.get<int32_t>(), n, hidden, out.get<float>(), nullptr);
    auto x = download_f32(out, size_t(n) * hidden);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < hidden; ++j) ASSERT_EQ(x[i * hidden + j], table[tokens[i] * hidden + j]);
  }
}

TEST(Kernels, RmsNormMatchesReference) {
  HEARTH_REQUIRE_GPU();
  for (Half t : kTypes)
    for (auto [n, hidden] : {std::pair{1, 4096}, {3, 896}, {5, 64}, {2, 2048}}) {
      auto x = random_floats(size_t(n) * hidden, 3.0f);
      auto w = random_floats(hidden);
      auto dx = upload(x), dw = upload(w);
      auto out = poisoned(size_t(n) * hidden * 2);
      kernels::rmsnorm(t, dx.get<float>(), dw.get<float>(), n, hidden, 1e-5f, out.get(), nullptr);
      const double err = relative_error(download_half(out, size_t(n) * hidden, t),
                                        reference::rmsnorm(x, w, n, hidden, 1e-5f));
      EXPECT_LT(err, half_tolerance(t)) << name(t) << " n=" << n << " hidden=" << hidden;
    }
}

TEST(Kernels, SwigluMatchesReference) {
  HEARTH_REQUIRE_GPU();
  for (Half t : kTypes) {
    const int count = 1000003;
    auto g = rounded(random_floats(count, 2.0f), t), u = rounded(random_floats(count), t);
    auto dg = upload_half(g, t), du = upload_half(u, t);
    auto out = poisoned(size_t(count) * 2);
    kernels::swiglu(t, dg.get(), du.get(), out.get(), count, nullptr);
    std::vector<float> ref(count);
    for (int i = 0; i < count; ++i) ref[i] = reference::silu(g[i]) * u[i];
    EXPECT_LT(relative_error(download_half(out, count, t), ref), half_tolerance(t)) << name(t);
    // fp32 gate and up (short prefills keep them so), unrounded.
    auto g32 = random_floats(count, 2.0f), u32 = random_floats(count);
    auto dg32 = upload(g32), du32 = upload(u32);
    out = poisoned(size_t(count) * 2);
    kernels::swiglu(t, dg32.get(), du32.get(), out.get(), count, nullptr, /*fp32_inputs=*/true);
    for (int i = 0; i < count; ++i) ref[i] = reference::silu(g32[i]) * u32[i];
    EXPECT_LT(relative_error(download_half(out, count, t), ref), half_tolerance(t))
        << name(t) << " fp32 inputs";
  }
}

struct GemvShape {
  int rows[3];
  int k;
};

TEST(Kernels, GemvStoreAccumulateAndSwiglu) {
  HEARTH_REQUIRE_GPU();
  const GemvShape shapes[] = {{{4096, 1024, 1024}, 4096}, {{7, 13, 1}, 24},
                              {{896, 128, 128}, 896},     {{2048, 0, 0}, 8192},
                              {{333, 0, 0}, 14336},       {{1, 0, 0}, 8}};
  for (Half t : kTypes)
    for (const GemvShape& s : shapes) {
      const int total = s.rows[0] + s.rows[1] + s.rows[2];
      auto x = rounded(random_floats(s.k), t);
      std::vector<DeviceBuffer> dw, dout;
      std::vector<std::vector<float>> w, base;
      kernels::GemvArgs a;
      auto dx = upload_half(x, t);
      a.x = dx.get(), a.k = s.k;
      for (int m = 0; m < 3; ++m) {
        w.push_back(
            rounded(random_floats(size_t(s.rows[m]) * s.k, 1.0f / std::sqrt(float(s.k))), t));
        base.push_back(random_floats(s.rows[m]));
        dw.push_back(upload_half(w[m], t));
        dout.push_back(poisoned(size_t(std::max(s.rows[m], 1)) * 4));
        a.w[m] = dw[m].get(), a.rows[m] = s.rows[m], a.out[m] = dout[m].get<float>();
      }
      kernels::gemv(t, kernels::GemvEpilogue::Store, a, nullptr);
      for (int m = 0; m < 3; ++m) {
        if (!s.rows[m]) continue;
        auto ref = reference::gemv(w[m], x, s.rows[m], s.k);
        EXPECT_LT(relative_error(download_f32(dout[m], s.rows[m]), ref), 1e-5)
            << name(t) << " store matrix " << m << " k=" << s.k << " total=" << total;
      }
      // Accumulate into a residual.
      kernels::GemvArgs acc = a;
      acc.rows[1] = acc.rows[2] = 0;
      DeviceBuffer res = upload(base[0]);
      acc.out[0] = res.get<float>();
      kernels::gemv(t, kernels::GemvEpilogue::Accumulate, acc, nullptr);
      auto ref = reference::gemv(w[0], x, s.rows[0], s.k);
      for (int r = 0; r < s.rows[0]; ++r) ref[r] += base[0][r];
      EXPECT_LT(relative_error(download_f32(res, s.rows[0]), ref), 1e-5)
          << name(t) << " accumulate";
      // SwiGLU of two matrices with the same shape (the first, and a fresh "up").
      auto up = rounded(random_floats(size_t(s.rows[0]) * s.k, 1.0f / std::sqrt(float(s.k))), t);
      auto dup = upload_half(up, t);
      kernels::GemvArgs sw;
      sw.w[0] = dw[0].get(), sw.w[1] = dup.get(), sw.rows[0] = s.rows[0], sw.x = dx.get(),
      sw.k = s.k;
      auto act = poisoned(size_t(s.rows[0]) * 2);
      sw.act = act.get();
      kernels::gemv(t, kernels::GemvEpilogue::SwiGLU, sw, nullptr);
      auto g = reference::gemv(w[0], x, s.rows[0], s.k), u = reference::gemv(up, x, s.rows[0], s.k);
      for (int r = 0; r < s.rows[0]; ++r) g[r] = reference::silu(g[r]) * u[r];
      EXPECT_LT(relative_error(download_half(act, s.rows[0], t), g), half_tolerance(t))
          << name(t) << " swiglu";
    }
}

TEST(Kernels, GemvWithFusedNormMatchesReference) {
  HEARTH_REQUIRE_GPU();
  for (Half t : kTypes)
    for (auto [rows, k] : {std::pair{4096, 4096}, {100, 896}, {3, 64}}) {
      auto x = random_floats(k, 4.0f), nw = random_floats(k);
      auto w = rounded(random_floats(size_t(rows) * k, 1.0f / std::sqrt(float(k))), t);
      auto dx = upload(x), dnw = upload(nw), dw = upload_half(w, t);
      auto ref = reference::gemv(w, reference::rmsnorm(x, nw, 1, k, 1e-5f), rows, k);
      for (int split : {0, 1, 2, 4, 8}) {
        auto out = poisoned(size_t(rows) * 4);
        kernels::GemvArgs a;
        a.w[0] = dw.get(), a.rows[0] = rows, a.out[0] = out.get<float>(), a.k = k, a.split = split;
        a.x_norm = dx.get<float>(), a.norm_weight = dnw.get<float>(), a.eps = 1e-5f;
        kernels::gemv(t, kernels::GemvEpilogue::Store, a, nullptr);
        EXPECT_LT(relative_error(download_f32(out, rows), ref), 1e-5)
            << name(t) << " rows=" << rows << " k=" << k << " split=" << split;
      }
    }
}

TEST(Kernels, GemvQkvRopeMatchesProjectionThenRope) {
  HEARTH_REQUIRE_GPU();
  struct Case {
    int n_heads, n_kv_heads, head_dim, hidden, pos;
    bool bias;
  };
  for (Half t : kTypes)
    for (const Case& c : {Case{32, 8, 128, 4096, 4000, false}, Case{14, 2, 64, 896, 17, true},
                          Case{4, 2, 16, 64, 0, true}}) {
      const int qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim, context = 4100;
      auto x = random_floats(c.hidden, 2.0f), nw = random_floats(c.hidden);
      const float sc = 1.0f / std::sqrt(float(c.hidden));
      auto wq = rounded(random_floats(size_t(qd) * c.hidden, sc), t);
      auto wk = rounded(random_floats(size_t(kvd) * c.hidden, sc), t);
      auto wv = rounded(random_floats(size_t(kvd) * c.hidden, sc), t);
      std::vector<float> bq, bk, bv, inv(c.head_dim / 2);
      if (c.bias) bq = random_floats(qd), bk = random_floats(kvd), bv = random_floats(kvd);
      for (int i = 0; i < c.head_dim / 2; ++i) inv[i] = std::pow(500000.0f, -2.0f * i / c.head_dim);
      auto xn = reference::rmsnorm(x, nw, 1, c.hidden, 1e-5f);
      std::vector<float> kc(size_t(c.n_kv_heads) * context * c.head_dim, 0), vc = kc;
      auto ref = reference::qkv_rope(
          reference::gemv(wq, xn, qd, c.hidden), reference::gemv(wk, xn, kvd, c.hidden),
          reference::gemv(wv, xn, kvd, c.hidden), bq, bk, bv, {}, {}, inv, c.pos, 1, c.n_heads,
          c.n_kv_heads, c.head_dim, context, 1e-5f, kc, vc);
      auto dx = upload(x), dnw = upload(nw), dwq = upload_half(wq, t), dwk = upload_half(wk, t),
           dwv = upload_half(wv, t), dinv = upload(inv), dpos = upload(std::vector<int>{c.pos});
      DeviceBuffer dbq, dbk, dbv;
      kernels::GemvArgs a;
      if (c.bias)
        dbq = upload(bq), dbk = upload(bk), dbv = upload(bv), a.bias[0] = dbq.get<float>(),
        a.bias[1] = dbk.get<float>(), a.bias[2] = dbv.get<float>();
      std::vector<uint16_t> zeros(kc.size(), 0);
      auto dkc = upload(zeros), dvc = upload(zeros), qout = poisoned(size_t(qd) * 2);
      a.w[0] = dwq.get(), a.w[1] = dwk.get(), a.w[2] = dwv.get();
      a.rows[0] = qd, a.rows[1] = kvd, a.rows[2] = kvd, a.k = c.hidden;
      a.x_norm = dx.get<float>(), a.norm_weight = dnw.get<float>(), a.eps = 1e-5f;
      a.inv_freq = dinv.get<float>(), a.pos = dpos.get<int>(), a.head_dim = c.head_dim,
      a.context = context;
      a.q_out = qout.get(), a.k_cache = dkc.get(), a.v_cache = dvc.get();
      kernels::gemv(t, kernels::GemvEpilogue::QkvRope, a, nullptr);
      EXPECT_LT(relative_error(download_half(qout, qd, t), ref.q_out), half_tolerance(t))
          << name(t);
      EXPECT_LT(relative_error(download_half(dkc, kc.size(), t), kc), half_tolerance(t)) << name(t);
      EXPECT_LT(relative_error(download_half(dvc, vc.size(), t), vc), half_tolerance(t)) << name(t);
    }
}

TEST(Kernels, GemvIsBitReproducible) {
  HEARTH_REQUIRE_GPU();
  const int rows = 4096, k = 4096;
  auto w = upload_half(random_floats(size_t(rows) * k, 0.02f), Half::BF16);
  auto x = upload_half(random_floats(k), Half::BF16);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    auto out = poisoned(rows * 4);
    kernels::GemvArgs a;
    a.w[0] = w.get(), a.rows[0] = rows, a.out[0] = out.get<float>(), a.x = x.get(), a.k = k;
    kernels::gemv(Half::BF16, kernels::GemvEpilogue::Store, a, nullptr);
    auto v = download_f32(out, rows);
    if (run == 0)
      first = v;
    else
      ASSERT_EQ(0, std::memcmp(first.data(), v.data(), rows * 4));
  }
}

struct AttnShape {
  int n_heads, n_kv_heads, head_dim;
};
const AttnShape kAttnShapes[] = {{32, 8, 128}, {14, 2, 64}, {4, 4, 16}, {16, 8, 128}, {8, 1, 32}};

// Random caches and a reference for queries at positions start..start+n-1.
struct AttnCase {
  std::vector<float> q, k_cache, v_cache;
  DeviceBuffer dq, dk, dv;
};

AttnCase make_attention_case(Half t, const AttnShape& s, int n, int context) {
  AttnCase c;
  c.q = rounded(random_floats(size_t(n) * s.n_heads * s.head_dim), t);
  c.k_cache = rounded(random_floats(size_t(s.n_kv_heads) * context * s.head_dim), t);
  c.v_cache = rounded(random_floats(size_t(s.n_kv_heads) * context * s.head_dim), t);
  c.dq = upload_half(c.q, t);
  c.dk = upload_half(c.k_cache, t);
  c.dv = upload_half(c.v_cache, t);
  return c;
}

void check_decode_attention(Half t, const AttnShape& s, int context, int pos) {
  AttnCase c = make_attention_case(t, s, 1, context);
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  DeviceBuffer dpos = upload(std::vector<int>{pos});
  DeviceBuffer scratch(kernels::decode_attention_scratch_floats(s.n_heads, s.head_dim, context) *
                       4);
  DeviceBuffer counters = upload(std::vector<unsigned>(s.n_kv_heads, 0));
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    auto out = poisoned(size_t(s.n_heads) * s.head_dim * 2);
    kernels::DecodeAttentionArgs a;
    a.q = c.dq.get(), a.k_cache = c.dk.get(), a.v_cache = c.dv.get(), a.pos = dpos.get<int>();
    a.n_heads = s.n_heads, a.n_kv_heads = s.n_kv_heads, a.head_dim = s.head_dim,
    a.context = context;
    a.scale = scale, a.partial = scratch.get<float>(), a.counters = counters.get<unsigned>(),
    a.out = out.get();
    kernels::attention_decode(t, a, nullptr);
    auto got = download_half(out, size_t(s.n_heads) * s.head_dim, t);
    if (run == 0) {
      auto ref = reference::attention(c.q, c.k_cache, c.v_cache, pos, 1, s.n_heads, s.n_kv_heads,
                                      s.head_dim, context, scale);
      EXPECT_LT(relative_error(got, ref), half_tolerance(t))
          << name(t) << " heads " << s.n_heads << "/" << s.n_kv_heads << " d=" << s.head_dim
          << " pos=" << pos << " context=" << context;
      first = got;
    } else {
      EXPECT_EQ(first, got) << "a second run (counters reset?) differs";
    }
  }
}

TEST(Kernels, DecodeAttentionLongContextsSplitIntoManyTiles) {
  HEARTH_REQUIRE_GPU();
  for (Half t : kTypes)
    for (int pos : {8999, 5000, 300})
      for (const AttnShape& s : {AttnShape{32, 8, 128}, AttnShape{8, 1, 32}})
        check_decode_attention(t, s, 9000, pos);
}

TEST(Kernels, DecodeAttentionMatchesReference) {
  HEARTH_REQUIRE_GPU();
  const int context = 1100;
  for (Half t : kTypes)
    for (const AttnShape& s : kAttnShapes)
      for (int pos : {0, 1, 63, 64, 65, 1099}) {
        check_decode_attention(t, s, context, pos);
      }
}

TEST(Kernels, PrefillAttentionMatchesReference) {
  HEARTH_REQUIRE_GPU();
  const int context = 700;
  for (Half t : kTypes)
    for (const AttnShape& s : kAttnShapes)
      for (auto [start, n] : {std::pair{0, 1}, {0, 64}, {0, 130}, {37, 200}, {500, 77}, {0, 700}}) {
        AttnCase c = make_attention_case(t, s, n, context);
        const float scale = 1.0f / std::sqrt(float(s.head_dim));
        auto out = poisoned(size_t(n) * s.n_heads * s.head_dim * 2);
        kernels::PrefillAttentionArgs a;
        a.q = c.dq.get(), a.k_cache = c.dk.get(), a.v_cache = c.dv.get(), a.start_pos = start,
        a.n = n;
        a.n_heads = s.n_heads, a.n_kv_heads = s.n_kv_heads, a.head_dim = s.head_dim,
        a.context = context;
        a.scale = scale, a.out = out.get();
        kernels::attention_prefill(t, a, nullptr);
        auto ref = reference::attention(c.q, c.k_cache, c.v_cache, start, n, s.n_heads,
                                        s.n_kv_heads, s.head_dim, context, scale);
        // P is rounded to 16 bits before the PV product, as in every flash kernel: allow 2x.
        EXPECT_LT(relative_error(download_half(out, ref.size(), t), ref), 2 * half_tolerance(t))
            << name(t) << " heads " << s.n_heads << "/" << s.n_kv_heads << " d=" << s.head_dim
            << " start=" << start << " n=" << n;
      }
}

TEST(Kernels, QkvRopeMatchesReference) {
  HEARTH_REQUIRE_GPU();
  struct Case {
    int n_heads, n_kv_heads, head_dim, n, start;
    bool bias, norm;
  };
  const Case cases[] = {{32, 8, 128, 1, 4000, false, false},
                        {14, 2, 64, 7, 0, true, false},
                        {16, 8, 128, 3, 100, false, true},
                        {4, 2, 16, 5, 9, true, true}};
  for (Half t : kTypes)
    for (const Case& k : cases) {
      const int context = 4100, qd = k.n_heads * k.head_dim, kvd = k.n_kv_heads * k.head_dim;
      auto q = random_floats(size_t(k.n) * qd), kk = random_floats(size_t(k.n) * kvd),
           v = random_floats(size_t(k.n) * kvd);
      std::vector<float> bq, bk, bv, qn, kn, inv(k.head_dim / 2);
      if (k.bias) bq = random_floats(qd), bk = random_floats(kvd), bv = random_floats(kvd);
      if (k.norm) qn = random_floats(k.head_dim), kn = random_floats(k.head_dim);
      for (int i = 0; i < k.head_dim / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / k.head_dim);
      std::vector<float> kc(size_t(k.n_kv_heads) * context * k.head_dim, 0), vc = kc;
      auto ref = reference::qkv_rope(q, kk, v, bq, bk, bv, qn, kn, inv, k.start, k.n, k.n_heads,
                                     k.n_kv_heads, k.head_dim, context, 1e-6f, kc, vc);
      auto dq = upload(q), dk = upload(kk), dv = upload(v), dinv = upload(inv);
      DeviceBuffer dbq, dbk, dbv, dqn, dkn;
      kernels::QkvRopeArgs a;
      if (k.bias)
        dbq = upload(bq), dbk = upload(bk), dbv = upload(bv), a.bq = dbq.get<float>(),
        a.bk = dbk.get<float>(), a.bv = dbv.get<float>();
      if (k.norm)
        dqn = upload(qn), dkn = upload(kn), a.q_norm = dqn.get<float>(),
        a.k_norm = dkn.get<float>();
      auto dpos = upload(std::vector<int>{k.start});
      auto qout = poisoned(size_t(k.n) * qd * 2);
      std::vector<uint16_t> zeros(kc.size(), 0);
      auto dkc = upload(zeros), dvc = upload(zeros);
      a.q = dq.get<float>(), a.k = dk.get<float>(), a.v = dv.get<float>(),
      a.inv_freq = dinv.get<float>();
      a.start_pos = dpos.get<int>(), a.n = k.n, a.n_heads = k.n_heads, a.n_kv_heads = k.n_kv_heads;
      a.head_dim = k.head_dim, a.context = context, a.eps = 1e-6f, a.q_out = qout.get();
      a.k_cache = dkc.get(), a.v_cache = dvc.get();
      kernels::qkv_rope(t, a, nullptr);
      EXPECT_LT(relative_error(download_half(qout, ref.q_out.size(), t), ref.q_out),
                half_tolerance(t))
          << name(t);
      EXPECT_LT(relative_error(download_half(dkc, kc.size(), t), kc), half_tolerance(t)) << name(t);
      EXPECT_LT(relative_error(download_half(dvc, vc.size(), t), vc), half_tolerance(t)) << name(t);
    }
}

TEST(Kernels, ArgmaxPicksLowestIdOfTheMaximumAndItsLogprob) {
  HEARTH_REQUIRE_GPU();
  for (int vocab : {1000, 128256, 151936}) {
    auto logits = random_floats(vocab, 3.0f);
    const int a = vocab / 3, b = vocab - 5;
    logits[a] = logits[b] = 50.0f;  // a tie: the lower id wins
    std::vector<uint8_t> seen(vocab, 0);
    seen[a] = 1;  // penalised: 50 / 2 = 25 loses to b
    auto dl = upload(logits), ds = upload(seen);
    DeviceBuffer scratch(kernels::argmax_scratch_floats(vocab) * 4), tok(4), lp(4);
    for (bool penalise : {false, true}) {
      kernels::argmax_logprob(dl.get<float>(), vocab, penalise ? ds.get<uint8_t>() : nullptr, 2.0f,
                              scratch.get<float>(), tok.get<int32_t>(), lp.get<float>(), nullptr);
      int32_t token;
      float logprob;
      HEARTH_CUDA_CHECK(cudaMemcpy(&token, tok.get(), 4, cudaMemcpyDeviceToHost));
      HEARTH_CUDA_CHECK(cudaMemcpy(&logprob, lp.get(), 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(token, penalise ? b : a) << vocab;
      double z = 0;
      const float m = *std::max_element(logits.begin(), logits.end());
      for (float v : logits) z += std::exp(double(v) - m);
      EXPECT_NEAR(logprob, logits[token] - m - std::log(z), 1e-4) << vocab;
    }
  }
}

// Issue 12: NaN or infinite logits make both device samplers' logprob NaN (and never an id
// outside the vocabulary), which the backend turns into the host sampler's error.
TEST(Kernels, NonFiniteLogitsMakeTheDeviceSamplersFail) {
  HEARTH_REQUIRE_GPU();
  for (int vocab : {1000, 128256}) {
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      for (const bool all_bad : {false, true}) {
        auto logits = random_floats(vocab, 2.5f);
        if (all_bad)
          logits.assign(size_t(vocab), bad);
        else
          logits[size_t(vocab) / 2] = bad;
        auto dl = upload(logits);
        DeviceBuffer argmax_scratch(kernels::argmax_scratch_floats(vocab) * 4),
            scratch(kernels::sample_scratch_bytes(vocab)), tok(4), lp(4);
        for (const int top_k : {-1, 0, 40}) {  // -1: greedy
          if (top_k < 0) {
            kernels::argmax_logprob(dl.get<float>(), vocab, nullptr, 1.0f,
                                    argmax_scratch.get<float>(), tok.get<int32_t>(),
                                    lp.get<float>(), nullptr);
          } else {
            kernels::SampleArgs a;
            a.logits = dl.get<float>(), a.vocab = vocab, a.temperature = 0.8f, a.top_k = top_k;
            a.token = tok.get<int32_t>(), a.logprob = lp.get<float>(), a.scratch = scratch.get();
            kernels::sample(a, nullptr);
          }
          SampledToken s;
          HEARTH_CUDA_CHECK(cudaMemcpy(&s.token, tok.get(), 4, cudaMemcpyDeviceToHost));
          HEARTH_CUDA_CHECK(cudaMemcpy(&s.logprob, lp.get(), 4, cudaMemcpyDeviceToHost));
          EXPECT_GE(s.token, 0);
          EXPECT_LT(s.token, vocab);
          EXPECT_THROW(check_device_sample(s, vocab, 3), NonFiniteLogits)
              << "vocab " << vocab << " " << bad << (all_bad ? " everywhere" : " once") << " top_k "
              << top_k << ": token " << s.token << " logprob " << s.logprob;
        }
      }
    }
  }
}

// The GPU sampler against the host sampler (the reference) on the same logits: same token
// for every (seed, step, settings), same logprob.
TEST(Kernels, SamplingMatchesTheHostSampler) {
  HEARTH_REQUIRE_GPU();
  struct Settings {
    float temperature;
    int top_k;
    float top_p, min_p, penalty;
  };
  const Settings settings[] = {{0.8f, 0, 0.9f, 0.0f, 1.0f},  {1.0f, 40, 1.0f, 0.0f, 1.0f},
                               {0.7f, 0, 1.0f, 0.05f, 1.0f}, {1.2f, 100, 0.8f, 0.02f, 1.0f},
                               {1.0f, 0, 1.0f, 0.0f, 1.0f},  {0.9f, 0, 0.95f, 0.0f, 1.3f}};
  for (int vocab : {1000, 128256}) {
    auto logits = random_floats(vocab, 2.5f);
    std::vector<uint8_t> flags(vocab, 0);
    std::vector<int32_t> seen;
    for (int i = 0; i < 50; ++i) {
      const int32_t t = int32_t((i * 7919) % vocab);
      seen.push_back(t);
      flags[t] = 1;
    }
    auto dl = upload(logits), ds = upload(flags);
    DeviceBuffer scratch(kernels::sample_scratch_bytes(vocab)), tok(4), lp(4);
    Sampler host;
    int checked = 0;
    for (const Settings& st : settings)
      for (uint64_t step = 0; step < 12; ++step) {
        SamplingParams p;
        p.temperature = st.temperature, p.top_k = st.top_k, p.top_p = st.top_p, p.min_p = st.min_p;
        p.repetition_penalty = st.penalty, p.seed = 1234 + step * 17;
        const bool penalise = st.penalty != 1.0f;
        const SampledToken want = host.sample(
            logits, p, penalise ? std::span<const int32_t>(seen) : std::span<const int32_t>(),
            step);
        kernels::SampleArgs a;
        a.logits = dl.get<float>(), a.vocab = vocab,
        a.seen = penalise ? ds.get<uint8_t>() : nullptr;
        a.penalty = st.penalty, a.temperature = st.temperature, a.top_k = st.top_k,
        a.top_p = st.top_p;
        a.min_p = st.min_p, a.seed = p.seed, a.step = step, a.token = tok.get<int32_t>(),
        a.logprob = lp.get<float>();
        a.scratch = scratch.get();
        kernels::sample(a, nullptr);
        int32_t token;
        float logprob;
        HEARTH_CUDA_CHECK(cudaMemcpy(&token, tok.get(), 4, cudaMemcpyDeviceToHost));
        HEARTH_CUDA_CHECK(cudaMemcpy(&logprob, lp.get(), 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(token, want.token)
            << "vocab " << vocab << " T=" << st.temperature << " k=" << st.top_k
            << " p=" << st.top_p << " min_p=" << st.min_p << " step " << step;
        EXPECT_NEAR(logprob, want.logprob, 1e-4);
        ++checked;
      }
    EXPECT_EQ(checked, 72);
  }
}

TEST(Kernels, CublasLtGemmMatchesReference) {
  HEARTH_REQUIRE_GPU();
  for (Half t : kTypes) {
    kernels::Gemm gemm(t);
    for (auto [m, n, k] :
         {std::tuple{1, 64, 64}, {7, 96, 128}, {300, 1024, 512}, {2048, 256, 4096}}) {
      auto w = rounded(random_floats(size_t(n) * k, 1.0f / std::sqrt(float(k))), t);
      auto x = rounded(random_floats(size_t(m) * k), t);
      auto dw = upload_half(w, t), dx = upload_half(x, t);
      std::vector<float> ref(size_t(m) * n);
      for (int i = 0; i < m; ++i) {
        auto row = reference::gemv(
            w, std::vector<float>(x.begin() + size_t(i) * k, x.begin() + size_t(i + 1) * k), n, k);
        std::copy(row.begin(), row.end(), ref.begin() + size_t(i) * n);
      }
      auto out16 = poisoned(size_t(m) * n * 2);
      gemm.run(dw.get(), dx.get(), out16.get(), m, n, k, kernels::Gemm::Out::Half, nullptr);
      EXPECT_LT(relative_error(download_half(out16, ref.size(), t), ref), half_tolerance(t));
      auto base = random_floats(size_t(m) * n);
      auto acc = upload(base);
      gemm.run(dw.get(), dx.get(), acc.get(), m, n, k, kernels::Gemm::Out::F32Accumulate, nullptr);
      auto expect = ref;
      for (size_t i = 0; i < expect.size(); ++i) expect[i] += base[i];
      EXPECT_LT(relative_error(download_f32(acc, expect.size()), expect), 1e-4)
          << m << "x" << n << "x" << k;
    }
  }
}

}  // namespace
}  // namespace hearth
