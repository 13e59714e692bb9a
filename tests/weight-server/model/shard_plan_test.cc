#include "weight-server/model/shard_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "weight-server/model/hf_model.h"

namespace hearth {
namespace {

using json = nlohmann::json;

// A small config of `arch` with 8 q heads over 4 kv heads (GQA), intermediate 96, vocab 101
// (not a multiple of 2 or 4, so the last rank's vocabulary is short).
ModelConfig config(const std::string& arch, bool tied = false) {
  json j = {{"architectures", {arch}}, {"hidden_size", 64},          {"intermediate_size", 96},
            {"num_hidden_layers", 2},  {"num_attention_heads", 8},   {"num_key_value_heads", 4},
            {"vocab_size", 101},       {"tie_word_embeddings", tied}};
  return parse_model_config(j, "config.json");
}

struct Arch {
  const char* name;
  bool tied;
};
const Arch kArchs[] = {{"LlamaForCausalLM", false},
                       {"LlamaForCausalLM", true},
                       {"MistralForCausalLM", false},
                       {"Qwen2ForCausalLM", true},
                       {"Qwen3ForCausalLM", false}};

std::vector<std::byte> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<std::byte> v(n);
  for (auto& b : v) b = std::byte(rng());
  return v;
}

// Every rank holds every tensor; per tensor the ranks' slices tile the split dimension in rank
// order with no gap or overlap; putting the pieces back together gives the tensor's bytes.
TEST(ShardPlan, SlicesTileEveryTensorOfEveryArchitecture) {
  std::mt19937 rng(26);
  for (const Arch& a : kArchs) {
    const ModelConfig c = config(a.name, a.tied);
    const std::vector<ExpectedTensor> expected = expected_tensors(c);
    for (int n : {1, 2, 4}) {
      SCOPED_TRACE(std::string(a.name) + (a.tied ? " tied" : "") + " TP " + std::to_string(n));
      const ShardPlan plan = ShardPlan::make(c, n);
      for (size_t i = 0; i < expected.size(); ++i) {
        const ExpectedTensor& t = expected[i];
        const size_t elem = 2;
        uint64_t full_bytes = elem;
        for (int64_t d : t.shape) full_bytes *= uint64_t(d);
        const std::vector<std::byte> full = random_bytes(full_bytes, rng);
        std::vector<std::byte> rebuilt(full_bytes);
        int64_t next = 0;
        for (int r = 0; r < n; ++r) {
          const TensorShard& s = plan.tensors(r).at(i);
          ASSERT_EQ(s.name, t.name);
          ASSERT_EQ(s.full_shape, t.shape);
          std::vector<std::byte> piece(shard_bytes(s, elem));
          copy_shard(s, elem, full, piece);
          if (s.slice.split == ShardSplit::Replicated) {
            EXPECT_EQ(piece, full) << t.name;
            continue;
          }
          ASSERT_EQ(s.slice.begin, next) << t.name << " rank " << r;
          ASSERT_LT(s.slice.begin, s.slice.end);
          next = s.slice.end;
          // Scatter the piece back where it came from.
          const int dim = s.slice.split == ShardSplit::Rows ? 0 : 1;
          const uint64_t rows = uint64_t(t.shape[0]);
          const uint64_t row_bytes = full_bytes / rows;
          if (dim == 0) {
            std::memcpy(rebuilt.data() + uint64_t(s.slice.begin) * row_bytes, piece.data(),
                        piece.size());
          } else {
            const uint64_t w = uint64_t(s.slice.end - s.slice.begin) * elem;
            for (uint64_t row = 0; row < rows; ++row)
              std::memcpy(rebuilt.data() + row * row_bytes + uint64_t(s.slice.begin) * elem,
                          piece.data() + row * w, w);
          }
        }
        if (plan.tensors(0).at(i).slice.split != ShardSplit::Replicated) {
          const TensorShard& s = plan.tensors(0).at(i);
          EXPECT_EQ(next, t.shape[s.slice.split == ShardSplit::Rows ? 0 : 1]) << t.name;
          EXPECT_EQ(rebuilt, full) << t.name;
        }
      }
    }
  }
}

TEST(ShardPlan, SplitsByTheRulesOfTensorParallelism) {
  const ModelConfig c = config("Qwen3ForCausalLM");
  const ShardPlan plan = ShardPlan::make(c, 2);
  auto find = [&](int r, const std::string& name) {
    for (const TensorShard& s : plan.tensors(r))
      if (s.name == name) return s;
    ADD_FAILURE() << name;
    return TensorShard{};
  };
  const std::string p = "model.layers.1.";
  // 8 q heads and 4 kv heads of 8 dims: rank 1 holds q heads 4..7, which read kv heads 2..3.
  EXPECT_EQ(find(1, p + "self_attn.q_proj.weight").slice, (TensorSlice{ShardSplit::Rows, 32, 64}));
  EXPECT_EQ(find(1, p + "self_attn.k_proj.weight").slice, (TensorSlice{ShardSplit::Rows, 16, 32}));
  EXPECT_EQ(find(1, p + "self_attn.v_proj.weight").shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(find(1, p + "self_attn.o_proj.weight").slice,
            (TensorSlice{ShardSplit::Columns, 32, 64}));
  EXPECT_EQ(find(1, p + "self_attn.o_proj.weight").shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(find(0, p + "mlp.gate_proj.weight").slice, (TensorSlice{ShardSplit::Rows, 0, 48}));
  EXPECT_EQ(find(1, p + "mlp.up_proj.weight").slice, (TensorSlice{ShardSplit::Rows, 48, 96}));
  EXPECT_EQ(find(1, p + "mlp.down_proj.weight").slice, (TensorSlice{ShardSplit::Columns, 48, 96}));
  EXPECT_EQ(find(1, p + "self_attn.q_norm.weight").slice.split, ShardSplit::Replicated);
  EXPECT_EQ(find(1, p + "self_attn.k_norm.weight").shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(find(0, p + "input_layernorm.weight").slice.split, ShardSplit::Replicated);
  EXPECT_EQ(find(1, "model.norm.weight").slice.split, ShardSplit::Replicated);
  // 101 vocabulary rows: 51 and 50.
  EXPECT_EQ(plan.vocab_per_rank(), 51);
  EXPECT_EQ(find(1, "lm_head.weight").slice, (TensorSlice{ShardSplit::Rows, 51, 101}));
  EXPECT_EQ(find(0, "model.embed_tokens.weight").shape, (std::vector<int64_t>{51, 64}));
  EXPECT_EQ(plan.dims(1).vocab_begin, 51);
  EXPECT_EQ(plan.dims(1).vocab_end, 101);
  EXPECT_EQ(plan.dims(1).q_heads, 4);
  EXPECT_EQ(plan.dims(1).kv_heads, 2);
  EXPECT_EQ(plan.dims(1).intermediate, 48);
  // Qwen2's biases follow their rows.
  const ShardPlan q2 = ShardPlan::make(config("Qwen2ForCausalLM"), 4);
  for (const TensorShard& s : q2.tensors(3))
    if (s.name == p + "self_attn.k_proj.bias") {
      EXPECT_EQ(s.slice, (TensorSlice{ShardSplit::Rows, 24, 32}));
      EXPECT_EQ(s.shape, (std::vector<int64_t>{8}));
    }
}

void expect_refused(const ModelConfig& c, int n, const std::string& fragment) {
  try {
    ShardPlan::make(c, n);
    FAIL() << "TP " << n << " accepted, expected a refusal mentioning " << fragment;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor parallel " + std::to_string(n)), std::string::npos)
        << e.what();
  }
}

TEST(ShardPlan, RefusesDegreesThatDoNotDivide) {
  const ModelConfig c = config("LlamaForCausalLM");
  expect_refused(c, 3, "num_key_value_heads 4 is not a multiple of 3");
  // 8 q heads would divide by 8, but 4 kv heads do not: KV heads are never replicated.
  expect_refused(c, 8, "num_key_value_heads 4");
  expect_refused(c, 0, "1..64");
  expect_refused(c, 65, "1..64");
  ModelConfig odd = c;
  odd.intermediate = 90;
  expect_refused(odd, 4, "intermediate_size 90 is not a multiple of 4");
  ModelConfig small_vocab = c;
  small_vocab.vocab = 5;  // 2 rows per rank leave rank 3 nothing
  expect_refused(small_vocab, 4, "vocab_size 5 leaves the last rank no rows");
}

// fp8 (issue 25): a column-parallel projection's per-channel scales are cut with its rows; a
// row-parallel one (o, down) keeps every output row, so each rank holds its whole scale vector;
// a per-tensor scale is replicated.
TEST(ShardPlan, Fp8ScalesFollowTheirOutputRows) {
  for (const auto strategy :
       {QuantizationConfig::Strategy::Channel, QuantizationConfig::Strategy::Tensor}) {
    ModelConfig c = config("LlamaForCausalLM");
    c.quantization = {QuantizationConfig::Weights::Fp8, strategy};
    const bool channel = strategy == QuantizationConfig::Strategy::Channel;
    const ShardPlan plan = ShardPlan::make(c, 2);
    for (int r = 0; r < 2; ++r) {
      std::map<std::string, TensorShard> by_name;
      for (const TensorShard& s : plan.tensors(r)) by_name[s.name] = s;
      auto scale = [&](const std::string& proj) {
        return by_name.at("model.layers.1." + proj + ".weight_scale");
      };
      auto weight = [&](const std::string& proj) {
        return by_name.at("model.layers.1." + proj + ".weight");
      };
      for (const char* proj : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                               "mlp.gate_proj", "mlp.up_proj"}) {
        SCOPED_TRACE(std::string(proj) + " rank " + std::to_string(r));
        const TensorShard s = scale(proj), w = weight(proj);
        if (channel) {
          EXPECT_EQ(s.slice, w.slice);
          EXPECT_EQ(s.shape, (std::vector<int64_t>{w.shape[0], 1}));
        } else {
          EXPECT_EQ(s.slice.split, ShardSplit::Replicated);
          EXPECT_EQ(s.shape, std::vector<int64_t>{1});
        }
      }
      for (const char* proj : {"self_attn.o_proj", "mlp.down_proj"}) {
        SCOPED_TRACE(std::string(proj) + " rank " + std::to_string(r));
        const TensorShard s = scale(proj);
        EXPECT_EQ(weight(proj).slice.split, ShardSplit::Columns);
        EXPECT_EQ(s.slice.split, ShardSplit::Replicated);
        EXPECT_EQ(s.shape, s.full_shape);
        EXPECT_EQ(s.shape[0], channel ? c.hidden : 1);
      }
    }
  }
}

}  // namespace
}  // namespace hearth
