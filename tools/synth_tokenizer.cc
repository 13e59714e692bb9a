#include "tools/synth_tokenizer.h"

#include <map>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

namespace hearth {

namespace {

using json = nlohmann::json;

// GPT-2's reversible map from bytes to printable code points, which byte-level BPE
// vocabularies are written in.
std::vector<std::string> byte_symbols() {
  std::vector<std::string> sym(256);
  auto utf8 = [](unsigned cp) {
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    return s;
  };
  unsigned next = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    sym[b] = utf8(printable ? b : next++);
  }
  return sym;
}

// Frequent English pieces, each formed by merging two pieces listed before it (or bytes).
// "_" stands for a leading space.
const char* const kMerges[][2] = {
    {"t", "h"},    {"_", "t"},   {"i", "n"},    {"e", "r"},    {"a", "n"},   {"_", "a"},
    {"o", "n"},    {"r", "e"},   {"_t", "h"},   {"e", "n"},    {"_", "s"},   {"_", "w"},
    {"_", "o"},    {"_", "c"},   {"a", "t"},    {"o", "r"},    {"e", "s"},   {"i", "s"},
    {"i", "t"},    {"a", "l"},   {"a", "r"},    {"s", "t"},    {"_th", "e"}, {"n", "d"},
    {"_", "b"},    {"_", "f"},   {"_", "p"},    {"o", "u"},    {"e", "d"},   {"i", "ng"},
    {"n", "g"},    {"_", "m"},   {"_", "h"},    {"_", "d"},    {"_a", "nd"}, {"_", "i"},
    {"_t", "o"},   {"_o", "f"},  {"l", "e"},    {"_", "l"},    {"_", "in"},  {"l", "l"},
    {"v", "e"},    {"_", "n"},   {"_", "re"},   {"i", "on"},   {"_", "e"},   {"o", "w"},
    {"_w", "h"},   {"_i", "s"},  {"_", "g"},    {"c", "e"},    {"l", "y"},   {"_", "y"},
    {"_b", "e"},   {"_", "u"},   {"_", "I"},    {"_", "T"},    {"_", "A"},   {"_", "S"},
    {"_th", "at"}, {"_w", "it"}, {"_wit", "h"}, {"_", "it"},   {"_f", "or"}, {"_y", "ou"},
    {"_c", "on"},  {"_", "he"},  {"_", "st"},   {"_", "an"},   {"_", "on"},  {"_", "as"},
    {"_", "at"},   {"_", "we"},  {"_", "ha"},   {"_ha", "ve"}, {"_n", "ot"}, {"_", "no"},
    {"_", "wh"},   {"_o", "r"},  {"_", "en"},   {"_", "al"},   {"_", "ar"},  {"_", "se"},
    {"_", "ma"},   {"_", "mo"},  {"_", "li"},   {"_", "lo"},   {"_", "do"},  {"_", "so"},
    {"_", "go"},   {"_", "me"},  {"_", "pro"},  {"p", "r"},    {"_p", "r"},  {"_pr", "o"},
    {"m", "e"},    {"_", "."},   {".", "\n"},   {"\n", "\n"},  {",", "_"},   {"_", "1"},
    {"_", "2"},    {"0", "0"},
};

}  // namespace

SynthTokenizer make_synth_tokenizer(int model_vocab) {
  const std::vector<std::string> sym = byte_symbols();
  auto encode_piece = [&](const std::string& piece) {
    std::string out;
    for (char c : piece) out += c == '_' ? sym[' '] : sym[static_cast<unsigned char>(c)];
    return out;
  };
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[sym[b]] = b;
  json merges = json::array();
  int next = 256;
  for (const auto& m : kMerges) {
    if (next + 2 >= model_vocab) break;
    const std::string a = encode_piece(m[0]), b = encode_piece(m[1]);
    if (!vocab.contains(a) || !vocab.contains(b) || vocab.contains(a + b)) continue;
    vocab[a + b] = next++;
    merges.push_back({a, b});
  }
  SynthTokenizer t;
  t.bos_id = next++;
  t.eos_id = next++;
  t.size = next;
  if (t.size > model_vocab) throw std::runtime_error("model vocabulary too small for a tokenizer");

  auto added = [](int id, const char* content) {
    return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  auto byte_level = [] {
    return json{{"type", "ByteLevel"},
                {"add_prefix_space", false},
                {"trim_offsets", true},
                {"use_regex", true}};
  };
  json bos_piece = {{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}};
  json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {added(t.bos_id, "<|bos|>"), added(t.eos_id, "<|eos|>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level()},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {bos_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {bos_piece,
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          bos_piece,
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens",
         {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {t.bos_id}}, {"tokens", {"<|bos|>"}}}}}}}},
      {"decoder", byte_level()},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  t.tokenizer_json = tok.dump(2);
  t.tokenizer_config_json = json{
      {"bos_token", "<|bos|>"},
      {"eos_token", "<|eos|>"},
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"model_max_length",
       1 << 20}}.dump(2);
  return t;
}

}  // namespace hearth
