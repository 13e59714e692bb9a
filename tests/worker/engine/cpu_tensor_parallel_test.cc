// The CPU engine's in-process tensor parallelism (issue 26 item 4) against a reference written
// here: one sequence, position by position, on the whole (unsharded) weights, every product a
// dot of the same 16-lane order as the engine's, with o_proj and down split into the ranks'
// column ranges and their partial sums added in rank order. An fp8 model's projections are
// W8A8 (issue 25): each input row quantized per token (a row-parallel rank quantizes its own
// columns), codes multiplied, the sum scaled by token scale x the weight row's scale (o and
// down: the whole model's per-channel scales, each rank using all of them). TP=2 and TP=4 must
// equal it bit for bit, alone and batched; TP=1 must equal it with one rank (the reference is the
// engine's arithmetic); TP=2 is close to TP=1 but not equal.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "tests/worker/engine/synth_models.h"
#include "tools/synth_model.h"
#include "weight-server/model/fp8.h"
#include "weight-server/model/host_store.h"
#include "weight-server/model/rank_store.h"
#include "weight-server/model/shard_plan.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/cache_domain.h"
#include "worker/engine/cpu_backend.h"
#include "worker/engine/cuda_support.h"
#include "worker/engine/profile.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const WeightStore> model(const std::string& preset, nlohmann::json overrides = {},
                                         bool fp8 = false) {
  SynthOptions opt = test::synth_options(preset, overrides);
  opt.fp8 = fp8;
  return test::synth_host_store(
      "cpu_tp_" + preset + "_" + std::to_string(overrides.size()) + (fp8 ? "_fp8" : ""), opt);
}

// The engine's dot product: sixteen partial sums, halved pairwise, then the tail.
float dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  for (int width = 8; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  return acc[0] + tail;
}

// A whole tensor as fp32, row-major (fp8: its codes decoded, unscaled).
std::vector<float> floats(const WeightStore& store, const std::string& name) {
  const StoredTensor& t = store.at(name);
  uint64_t n = 1;
  for (int64_t d : t.info.shape) n *= uint64_t(d);
  std::vector<float> out(n);
  const auto* p = static_cast<const uint16_t*>(t.data);
  for (uint64_t i = 0; i < n; ++i)
    out[i] = t.info.dtype == DType::F32 ? static_cast<const float*>(t.data)[i]
             : t.info.dtype == DType::F8_E4M3
                 ? fp8_e4m3_to_f32(static_cast<const uint8_t*>(t.data)[i])
             : t.info.dtype == DType::BF16 ? bf16_to_f32(p[i])
                                           : f16_to_f32(p[i]);
  return out;
}

// A projection as the reference multiplies it: values, or fp8 codes with a scale per row.
struct Matrix {
  std::vector<float> w;
  std::vector<float> scales;  // empty: 16-bit
};

Matrix matrix(const WeightStore& store, const std::string& name) {
  Matrix m{floats(store, name), {}};
  if (store.at(name).info.dtype == DType::F8_E4M3) m.scales = floats(store, name + "_scale");
  return m;
}

// n values of x quantized to e4m3 with their own scale (returned), as decoded codes.
float quantize_row(const float* x, int64_t n, std::vector<float>& out) {
  float abs_max = 0.0f;
  for (int64_t i = 0; i < n; ++i) abs_max = std::fmax(abs_max, std::fabs(x[i]));
  const float scale = fp8_e4m3_row_scale(abs_max);
  out.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = fp8_e4m3_to_f32(fp8_e4m3_quantize(x[i], scale));
  return scale;
}

// W[row, cols [begin, begin + n)] . in[0, n): a plain dot, or W8A8 with `in` quantized alone.
float product(const Matrix& W, int64_t row, int64_t cols, int64_t begin, const float* in,
              int64_t n) {
  if (W.scales.empty()) return dot(&W.w[row * cols + begin], in, n);
  std::vector<float> xq;
  const float sx = quantize_row(in, n, xq);
  const float sw = W.scales.size() == 1 ? W.scales[0] : W.scales[size_t(row)];
  return dot(&W.w[row * cols + begin], xq.data(), n) * (sx * sw);
}

void rmsnorm(float* y, const float* x, const std::vector<float>& w, int64_t n, double eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / float(n) + float(eps));
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * scale);
}

// y[r] = W[r] . x (+ b[r]) for every row of W [rows][cols].
std::vector<float> project(const Matrix& W, const std::vector<float>* b, const float* x,
                           int64_t rows, int64_t cols) {
  std::vector<float> y(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float v = product(W, r, cols, 0, x, cols);
    y[r] = b ? v + (*b)[r] : v;
  }
  return y;
}

// x += sum over ranks, in rank order, of W[:, cols of rank] . in[cols of rank].
void add_split(float* x, const Matrix& W, const float* in, int64_t rows, int64_t cols, int ranks) {
  const int64_t per = cols / ranks;
  std::vector<float> sum(rows);
  for (int r = 0; r < ranks; ++r)
    for (int64_t row = 0; row < rows; ++row) {
      const float p = product(W, row, cols, r * per, in + r * per, per);
      sum[row] = r == 0 ? p : sum[row] + p;
    }
  for (int64_t i = 0; i < rows; ++i) x[i] += sum[i];
}

void rope(float* v, int heads, int hd, int pos, const std::vector<float>& inv_freq) {
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = float(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < heads; ++h) {
      float* x = v + h * hd;
      const float a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = b * c + a * s;
    }
  }
}

// The last position's logits of `tokens` on the whole weights, reduction split over `ranks`.
std::vector<float> reference_logits(const WeightStore& store, const std::vector<int32_t>& tokens,
                                    int ranks) {
  const ModelConfig& c = store.config();
  const int64_t h = c.hidden, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const int64_t inter = c.intermediate;
  const std::vector<float> inv_freq = rope_inverse_frequencies(c);
  const std::vector<float> embed = floats(store, "model.embed_tokens.weight");
  const Matrix head{c.tie_embeddings ? embed : floats(store, "lm_head.weight"), {}};
  std::vector<std::vector<float>> keys(c.n_layers), values(c.n_layers);
  std::vector<float> x(h), xn(h);
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    std::copy_n(&embed[size_t(tokens[pos]) * h], h, x.begin());
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      auto w = [&](const std::string& name) { return floats(store, p + name); };
      auto m = [&](const std::string& name) { return matrix(store, p + name); };
      rmsnorm(xn.data(), x.data(), w("input_layernorm.weight"), h, c.rms_eps);
      std::vector<float> bq, bk, bv;
      if (c.qkv_bias)
        bq = w("self_attn.q_proj.bias"), bk = w("self_attn.k_proj.bias"),
        bv = w("self_attn.v_proj.bias");
      std::vector<float> q =
          project(m("self_attn.q_proj.weight"), c.qkv_bias ? &bq : nullptr, xn.data(), qd, h);
      std::vector<float> k =
          project(m("self_attn.k_proj.weight"), c.qkv_bias ? &bk : nullptr, xn.data(), kvd, h);
      const std::vector<float> v =
          project(m("self_attn.v_proj.weight"), c.qkv_bias ? &bv : nullptr, xn.data(), kvd, h);
      if (c.qk_norm) {
        const std::vector<float> qn = w("self_attn.q_norm.weight"),
                                 kn = w("self_attn.k_norm.weight");
        for (int i = 0; i < c.n_heads; ++i) rmsnorm(&q[i * hd], &q[i * hd], qn, hd, c.rms_eps);
        for (int i = 0; i < c.n_kv_heads; ++i) rmsnorm(&k[i * hd], &k[i * hd], kn, hd, c.rms_eps);
      }
      rope(q.data(), c.n_heads, int(hd), int(pos), inv_freq);
      rope(k.data(), c.n_kv_heads, int(hd), int(pos), inv_freq);
      keys[l].insert(keys[l].end(), k.begin(), k.end());
      values[l].insert(values[l].end(), v.begin(), v.end());
      std::vector<float> att(qd), scores(pos + 1);
      const float scale = 1.0f / std::sqrt(float(hd));
      for (int i = 0; i < c.n_heads; ++i) {
        const int g = i / (c.n_heads / c.n_kv_heads);
        float max = -INFINITY;
        for (size_t j = 0; j <= pos; ++j) {
          scores[j] = dot(&q[i * hd], &keys[l][j * kvd + g * hd], hd) * scale;
          max = std::max(max, scores[j]);
        }
        float sum = 0.0f;
        for (size_t j = 0; j <= pos; ++j) sum += scores[j] = std::exp(scores[j] - max);
        for (size_t j = 0; j <= pos; ++j) {
          const float pj = scores[j] / sum;
          for (int64_t d = 0; d < hd; ++d) att[i * hd + d] += pj * values[l][j * kvd + g * hd + d];
        }
      }
      add_split(x.data(), m("self_attn.o_proj.weight"), att.data(), h, qd, ranks);
      rmsnorm(xn.data(), x.data(), w("post_attention_layernorm.weight"), h, c.rms_eps);
      std::vector<float> gate = project(m("mlp.gate_proj.weight"), nullptr, xn.data(), inter, h);
      const std::vector<float> up = project(m("mlp.up_proj.weight"), nullptr, xn.data(), inter, h);
      for (int64_t i = 0; i < inter; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
      add_split(x.data(), m("mlp.down_proj.weight"), gate.data(), h, inter, ranks);
    }
  }
  rmsnorm(xn.data(), x.data(), floats(store, "model.norm.weight"), h, c.rms_eps);
  return project(head, nullptr, xn.data(), c.vocab, h);
}

std::vector<float> engine_logits(const std::shared_ptr<const WeightStore>& store, int tp,
                                 const std::vector<int32_t>& tokens) {
  CpuBackend cpu(store, 64, {}, nullptr, tp);
  EXPECT_EQ(cpu.tensor_parallel(), tp);
  const std::span<const float> l = forward_alone(cpu, tokens);
  return {l.begin(), l.end()};
}

const std::vector<int32_t> kPrompt = {5, 17, 300, 2, 99, 42, 7, 511, 256, 3};

// One model the reference checks, at the degrees its heads allow. fp8 weights (offline,
// compressed-tensors per-channel): q/k/v and gate/up ranks take their rows' scales, o and down
// every rank the whole vector.
struct ReferenceCase {
  const char* name;
  const char* preset;
  nlohmann::json overrides;
  std::vector<int> degrees;
  bool fp8 = false;
};

// Its name alone in the test's name (ctest lists it), not the struct's bytes.
void PrintTo(const ReferenceCase& c, std::ostream* os) {
  *os << c.name;
}

class CpuTensorParallelReference : public testing::TestWithParam<ReferenceCase> {};

// fp8: a row-parallel rank quantizes its own columns, so TP > 1 is not TP = 1's arithmetic.
TEST_P(CpuTensorParallelReference, EqualsTheReferenceThatSumsInRankOrder) {
  const ReferenceCase& c = GetParam();
  const auto store = model(c.preset, c.overrides, c.fp8);
  ASSERT_EQ(store->config().quantization.fp8(), c.fp8);
  for (int tp : c.degrees) {
    SCOPED_TRACE(std::string(c.preset) + (c.fp8 ? " fp8" : "") + " TP " + std::to_string(tp));
    const std::vector<float> engine = engine_logits(store, tp, kPrompt);
    EXPECT_EQ(engine, reference_logits(*store, kPrompt, tp));
    if (c.fp8 && tp > 1) {
      EXPECT_NE(engine, reference_logits(*store, kPrompt, 1));
    }
  }
}

const nlohmann::json kFourKvHeads = {{"num_key_value_heads", 4}};

INSTANTIATE_TEST_SUITE_P(
    Models, CpuTensorParallelReference,
    testing::Values(ReferenceCase{"Llama", "tiny-llama", {}, {1, 2}},
                    ReferenceCase{"Qwen2", "tiny-qwen2", {}, {1, 2}},
                    ReferenceCase{"Qwen3", "tiny-qwen3", {}, {2}},
                    ReferenceCase{"Mistral", "tiny-mistral", kFourKvHeads, {1, 2, 4}},
                    ReferenceCase{"LlamaFp8", "tiny-llama", kFourKvHeads, {1, 2}, true},
                    ReferenceCase{"Qwen2Fp8", "tiny-qwen2", kFourKvHeads, {2}, true},
                    ReferenceCase{"MistralFp8", "tiny-mistral", kFourKvHeads, {2, 4}, true}),
    [](const testing::TestParamInfo<ReferenceCase>& p) { return p.param.name; });

// An fp8 model with one scale per tensor (compressed-tensors strategy "tensor", the scale a
// scalar `[]` as some checkpoints store it): the same codes, each projection's first row scale
// for all of it. Every rank holds that scale whole.
class PerTensorScales final : public WeightStore {
 public:
  explicit PerTensorScales(std::shared_ptr<const WeightStore> from) : from_(std::move(from)) {
    config_ = from_->config();
    config_.quantization.strategy = QuantizationConfig::Strategy::Tensor;
    for (const StoredTensor& t : from_->tensors()) {
      StoredTensor copy = t;
      if (t.info.name.ends_with("_scale")) {
        copy.info.shape = {};
        copy.info.bytes = 4;
      }
      add_tensor(copy);
    }
  }
  Residence residence() const override { return Residence::Host; }
  const char* backend_name() const override { return "host"; }

 private:
  std::shared_ptr<const WeightStore> from_;
};

TEST(CpuTensorParallel, Fp8PerTensorScalesEqualTheReference) {
  const auto store =
      std::make_shared<PerTensorScales>(model("tiny-mistral", {{"num_key_value_heads", 4}}, true));
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE("TP " + std::to_string(tp));
    EXPECT_EQ(engine_logits(store, tp, kPrompt), reference_logits(*store, kPrompt, tp));
  }
}

// Split sums round differently: close to TP=1, not equal to it.
TEST(CpuTensorParallel, IsCloseToButNotEqualToOneRank) {
  const auto store = model("tiny-mistral", {{"num_key_value_heads", 4}});
  const std::vector<float> one = engine_logits(store, 1, kPrompt);
  for (int tp : {2, 4}) {
    const std::vector<float> many = engine_logits(store, tp, kPrompt);
    double err = 0, range = 0;
    for (size_t i = 0; i < one.size(); ++i) {
      err = std::max(err, double(std::abs(one[i] - many[i])));
      range = std::max(range, double(std::abs(one[i])));
    }
    EXPECT_GT(err, 0.0) << "TP " << tp;
    EXPECT_LT(err, 1e-3 * range) << "TP " << tp;
  }
}

// Two sequences in one batch (one prefilling, one decoding) give what each gives alone.
TEST(CpuTensorParallel, BatchedEqualsAlone) {
  const auto store = model("tiny-qwen2");
  CpuBackend alone(store, 64, {}, nullptr, 2), batched(store, 64, {}, nullptr, 2);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {9, 8, 7};
  const std::vector<float> la = [&] {
    auto s = forward_alone(alone, a);
    return std::vector<float>(s.begin(), s.end());
  }();
  const std::vector<float> lb = [&] {
    auto s = forward_alone(alone, b);
    return std::vector<float>(s.begin(), s.end());
  }();
  // b's blocks after a's: blocks of 16 positions, a in block 0, b in block 1.
  const std::vector<int32_t> table_a = {0}, table_b = {1};
  ForwardBatch batch;
  batch.entries.push_back({a, 0, table_a, true});
  batch.entries.push_back({b, 0, table_b, true});
  batched.forward(batch);
  const auto ba = batched.logits(0), bb = batched.logits(1);
  EXPECT_EQ(std::vector<float>(ba.begin(), ba.end()), la);
  EXPECT_EQ(std::vector<float>(bb.begin(), bb.end()), lb);
}

TEST(CpuTensorParallel, IsAnEngineProfileKey) {
  EXPECT_EQ(parse_engine_profile(R"({"tensor_parallel": 4})", "p").engine.tensor_parallel, 4);
  EXPECT_EQ(parse_engine_profile("{}", "p").engine.tensor_parallel, 1);
  EXPECT_THROW(parse_engine_profile(R"({"tensor_parallel": 0})", "p"), std::runtime_error);
  EXPECT_THROW(parse_engine_profile(R"({"tensor_parallel": 65})", "p"), std::runtime_error);
}

TEST(CpuTensorParallel, IsPartOfTheCacheDomainAndNamesAMissingGpu) {
  EngineOptions one, two;
  two.tensor_parallel = 2;
  EXPECT_NE(cache_domain_key(one, "cpu", "m"), cache_domain_key(two, "cpu", "m"));
  EngineOptions four = two;
  four.tensor_parallel = 4;
  EXPECT_NE(cache_domain_key(two, "cpu", "m"), cache_domain_key(four, "cpu", "m"));

  const auto store = model("tiny-llama");
  EngineOptions cuda;
  cuda.backend = BackendKind::Cuda;
  cuda.tensor_parallel = 2;
  // A model the server sharded goes to the GPU ranks of one process (cuda_tp_backend.h, tested
  // in cuda_tensor_parallel_test.cc); without a GPU the error says so.
  if (!cuda_device_available()) {
    const ShardPlan plan = ShardPlan::make(store->config(), 2);
    std::vector<std::shared_ptr<const WeightStore>> ranks;
    for (int r = 0; r < 2; ++r) ranks.push_back(std::make_shared<RankStore>(*store, plan, r));
    try {
      make_backend(cuda, EngineWeights{ranks[0], nullptr, ranks});
      FAIL() << "a cuda backend was built without a GPU";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    }
  }
  // A degree the model cannot take is refused, naming the heads.
  try {
    CpuBackend cpu(store, 16, {}, nullptr, 4);
    FAIL() << "TP 4 over 2 KV heads was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hearth
