// A small but real byte-level BPE tokenizer.json for synthetic models: the 256 byte tokens, a
// few hundred English merges and two special tokens, in exactly the format HF `tokenizers`
// writes, so synthetic models exercise the same tokenizer path as real ones.
#pragma once

#include <string>

namespace hearth {

struct SynthTokenizer {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  int bos_id = 0, eos_id = 0, size = 0;
};

// Builds a tokenizer whose ids all fit below `model_vocab`.
SynthTokenizer make_synth_tokenizer(int model_vocab);

}  // namespace hearth
