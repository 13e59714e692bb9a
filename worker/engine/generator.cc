#include "worker/engine/generator.h"

#include "worker/engine/engine.h"

namespace hearth {

Generation generate(Backend& backend, const Tokenizer* tokenizer, const GenerationRequest& request,
                    const std::function<void(const RequestOutput&)>& on_output,
                    const EngineOptions& options) {
  Engine engine(backend, options, tokenizer, request.eos_ids);
  engine.submit(Request{"", request.prompt, request.settings});
  Generation g;
  while (engine.has_work()) {
    for (const RequestOutput& out : engine.step()) {
      g.tokens.insert(g.tokens.end(), out.tokens.begin(), out.tokens.end());
      if (out.finish) g.finish = *out.finish;
      if (on_output) on_output(out);
    }
  }
  return g;
}

}  // namespace hearth
