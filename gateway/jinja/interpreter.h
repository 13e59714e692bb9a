// Renders a parsed Program against a context of variables, with jinja2's scoping (a for
// loop's body, a macro, {% with %} and block assignments get their own scope; if does not;
// namespace() objects carry values out of a loop) and hard limits, so a hostile template or
// request fails with a clear error instead of hanging or exhausting memory.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

#include "gateway/jinja/ast.h"
#include "gateway/jinja/value.h"

namespace hearth::jinja {

struct RenderLimits {
  // The rendered text, and any string or list the template builds on the way.
  size_t max_output_bytes = 8 << 20;
  // Work units: one per statement, expression node and loop iteration, plus one per 16
  // bytes of every string built. Chat templates use about 60 per message; the default stops
  // a runaway template within about 0.2 s.
  uint64_t max_work = 10'000'000;
  int max_call_depth = 32;  // nested macro calls
};

struct RenderOptions {
  RenderLimits limits;
  std::tm now{};  // what strftime_now() formats
};

// Throws TemplateError (kRuntime, kRaised or kLimit) with the line being rendered.
std::string render_program(const Program& program, const DictData& variables,
                           const RenderOptions& options);

}  // namespace hearth::jinja
