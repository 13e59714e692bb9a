// fp8 checkpoints (issue 25): hearth-synth --dtype fp8 writes one that opens with its scales
// checked; quantizing the same seed's bf16 model at load gives it byte for byte; and malformed
// ones (a missing, mis-shaped or mis-typed scale, fp8 where none is declared, an unknown
// scheme) are refused naming the tensor or scheme.
#include "weight-server/model/quantize_at_load.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "tests/support/safetensors_builder.h"
#include "tests/support/temp_dir.h"
#include "tests/weight-server/model/rewrite_weights.h"
#include "tools/synth_model.h"
#include "weight-server/model/fp8.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using test::rewrite_weights;
using json = nlohmann::json;

fs::path synth(const std::string& name, const std::string& preset, bool fp8) {
  fs::path dir = test::process_scratch_dir() / ("fp8_model_" + name);
  fs::remove_all(dir);
  SynthOptions opt;
  opt.preset = preset;
  opt.seed = 11;
  opt.fp8 = fp8;
  write_synthetic_model(dir, opt);
  return dir;
}

std::string open_error(const fs::path& dir) {
  try {
    HfModel::open(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(opened)";
}

void edit_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  json config = json::parse(std::ifstream(dir / "config.json"));
  edit(config);
  std::ofstream(dir / "config.json", std::ios::trunc) << config.dump(2);
}

const char* kScale = "model.layers.1.mlp.down_proj.weight_scale";

TEST(Fp8Model, AWrittenCheckpointOpensWithItsScales) {
  for (const char* preset : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    const HfModel m = HfModel::open(synth(preset, preset, true));
    EXPECT_EQ(m.config().quantization, kFp8PerChannel);
    int fp8 = 0, scales = 0;
    for (const HfTensor& t : m.tensors()) {
      if (is_quantized_projection(t.info.name)) {
        ++fp8;
        EXPECT_EQ(t.info.dtype, DType::F8_E4M3) << t.info.name;
        const HfTensor* s = m.find(t.info.name + "_scale");
        ASSERT_NE(s, nullptr) << t.info.name;
        EXPECT_EQ(s->info.dtype, DType::F32);
        EXPECT_EQ(s->info.shape, (std::vector<int64_t>{t.info.shape[0], 1}));
        // Every row reaches ±448 (its largest value defines the scale) and no code is NaN.
        const auto* codes = reinterpret_cast<const uint8_t*>(t.data.data());
        for (int64_t r = 0; r < t.info.shape[0]; ++r) {
          bool at_max = false;
          for (int64_t c = 0; c < t.info.shape[1]; ++c) {
            const uint8_t code = codes[r * t.info.shape[1] + c];
            EXPECT_NE(code & 0x7f, 0x7f);
            at_max |= (code & 0x7f) == 0x7e;
          }
          EXPECT_TRUE(at_max) << t.info.name << " row " << r;
        }
      } else if (t.info.name.ends_with("_scale")) {
        ++scales;
      } else {
        EXPECT_EQ(t.info.dtype, DType::BF16) << t.info.name;  // embeddings, norms, head
      }
    }
    EXPECT_EQ(fp8, 7 * m.config().n_layers) << preset;
    EXPECT_EQ(scales, fp8);
  }
}

TEST(Fp8Model, QuantizeAtLoadEqualsTheOfflineCheckpointByteForByte) {
  for (const char* preset : {"tiny-llama", "tiny-qwen2"}) {
    const HfModel offline = HfModel::open(synth(std::string(preset) + "_offline", preset, true));
    const HfModel bf16 = HfModel::open(synth(std::string(preset) + "_bf16", preset, false));
    const HfModel quantized = quantize_fp8_at_load(bf16, 3);
    EXPECT_EQ(quantized.config().quantization, kFp8PerChannel);
    EXPECT_EQ(json::parse(quantized.config_json()), json::parse(offline.config_json()));
    ASSERT_EQ(quantized.tensors().size(), offline.tensors().size());
    for (size_t i = 0; i < offline.tensors().size(); ++i) {
      const HfTensor &a = quantized.tensors()[i], &b = offline.tensors()[i];
      EXPECT_EQ(a.info.name, b.info.name);
      EXPECT_EQ(a.info.dtype, b.info.dtype) << b.info.name;
      EXPECT_EQ(a.info.shape, b.info.shape) << b.info.name;
      ASSERT_EQ(a.data.size(), b.data.size()) << b.info.name;
      EXPECT_EQ(std::memcmp(a.data.data(), b.data.data(), a.data.size()), 0) << b.info.name;
    }
    try {
      quantize_fp8_at_load(offline, 1);
      ADD_FAILURE() << "quantized an fp8 model again";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("already fp8"), std::string::npos) << e.what();
    }
  }
}

TEST(Fp8Model, APerTensorScaleOfShapeOneOrScalarIsAccepted) {
  const fs::path dir = synth("per_tensor", "tiny-llama", true);
  rewrite_weights(dir, [](std::vector<test::TensorSpec>& specs) {
    bool scalar = false;
    for (auto& s : specs)
      if (s.name.ends_with("_scale"))
        s.shape = (scalar = !scalar) ? std::vector<int64_t>{} : std::vector<int64_t>{1};
  });
  edit_config(dir, [](json& c) {
    c["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  });
  const HfModel m = HfModel::open(dir);
  EXPECT_EQ(m.config().quantization.strategy, QuantizationConfig::Strategy::Tensor);
}

TEST(Fp8Model, MalformedCheckpointsAreRefusedNamingTheTensor) {
  struct Case {
    const char* what;
    std::function<void(std::vector<test::TensorSpec>&)> mutate;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"missing scale",
       [](auto& specs) { std::erase_if(specs, [](auto& s) { return s.name == kScale; }); },
       {"missing tensor '", kScale}},
      {"per-tensor scale in a channel model",
       [](auto& specs) {
         for (auto& s : specs)
           if (s.name == kScale) s.shape = {1};
       },
       {kScale, "has shape [1], the config implies [64, 1]"}},
      {"scale of the wrong length",
       [](auto& specs) {
         for (auto& s : specs)
           if (s.name == kScale) s.shape = {32, 1};
       },
       {kScale, "[32, 1]"}},
      {"scale in fp8",
       [](auto& specs) {
         for (auto& s : specs)
           if (s.name == kScale) s.dtype = "F8_E4M3";
       },
       {kScale, "is F8_E4M3", "F32, F16 or BF16"}},
      {"a 16-bit projection",
       [](auto& specs) {
         for (auto& s : specs)
           if (s.name == "model.layers.0.self_attn.k_proj.weight") s.dtype = "BF16";
       },
       {"model.layers.0.self_attn.k_proj.weight", "is BF16", "F8_E4M3"}},
      {"an fp8 embedding",
       [](auto& specs) {
         for (auto& s : specs)
           if (s.name == "model.embed_tokens.weight") s.dtype = "F8_E4M3";
       },
       {"model.embed_tokens.weight", "is F8_E4M3", "only the decoder projections"}},
  };
  for (const Case& c : cases) {
    const fs::path dir = synth("malformed", "tiny-llama", true);
    rewrite_weights(dir, c.mutate);
    const std::string error = open_error(dir);
    for (const std::string& f : c.fragments)
      EXPECT_NE(error.find(f), std::string::npos) << c.what << ": " << error;
  }
  // fp8 weights without a quantization_config: the codes would be read as if unscaled.
  const fs::path undeclared = synth("undeclared", "tiny-llama", true);
  edit_config(undeclared, [](json& c) { c.erase("quantization_config"); });
  const std::string error = open_error(undeclared);
  EXPECT_NE(error.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << error;
  // An unknown scheme is refused by name, before any tensor is looked at.
  const fs::path gptq = synth("gptq", "tiny-llama", true);
  edit_config(gptq, [](json& c) { c["quantization_config"] = {{"quant_method", "gptq"}}; });
  EXPECT_NE(open_error(gptq).find("quant_method \"gptq\" is not supported"), std::string::npos)
      << open_error(gptq);
}

}  // namespace
}  // namespace hearth
