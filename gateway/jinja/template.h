// The Jinja subset's public face: parse once (refusing anything unsupported), render many
// times. A Template is immutable and may be rendered from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "gateway/jinja/ast.h"
#include "gateway/jinja/error.h"
#include "gateway/jinja/interpreter.h"
#include "gateway/jinja/parser.h"
#include "gateway/jinja/value.h"

namespace hearth::jinja {

class Template {
 public:
  // Throws TemplateError (kSyntax, kUnsupported or kLimit) naming the construct and line.
  static Template parse(std::string_view source, const ParseLimits& limits = {});

  // `variables` are the template's globals (messages, bos_token, ...). Throws TemplateError
  // (kRuntime, kRaised or kLimit).
  std::string render(const DictData& variables, const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace hearth::jinja
