// The one error type of the Jinja subset. Parse-time kinds (syntax, unsupported) mean the
// template is refused when the model loads; render-time kinds belong to one request.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace hearth::jinja {

class TemplateError : public std::runtime_error {
 public:
  enum class Kind {
    kSyntax,       // not valid Jinja
    kUnsupported,  // valid Jinja that this subset does not implement
    kRuntime,      // a Python/Jinja runtime error (undefined misuse, type errors, ...)
    kRaised,       // the template called raise_exception(message)
    kLimit,        // a resource limit (output size, loop budget, nesting, ...)
  };

  TemplateError(Kind kind, int line, std::string message)
      : std::runtime_error(format(kind, line, message)),
        kind_(kind),
        line_(line),
        message_(std::move(message)) {}

  Kind kind() const { return kind_; }
  // 1-based template line, 0 when unknown.
  int line() const { return line_; }
  // The message without the "line N" prefix: for kRaised, exactly the template's text.
  const std::string& message() const { return message_; }

  TemplateError with_line(int line) const { return TemplateError(kind_, line, message_); }

 private:
  static std::string format(Kind kind, int line, const std::string& message) {
    std::string out = "chat template";
    if (line > 0) out += " line " + std::to_string(line);
    switch (kind) {
      case Kind::kSyntax:
        out += ": syntax error: ";
        break;
      case Kind::kUnsupported:
        out += ": unsupported: ";
        break;
      case Kind::kRuntime:
        out += ": ";
        break;
      case Kind::kRaised:
        out += ": raise_exception: ";
        break;
      case Kind::kLimit:
        out += ": limit exceeded: ";
        break;
    }
    return out + message;
  }

  Kind kind_;
  int line_;
  std::string message_;
};

// Render-time errors raised away from the interpreter (values, builtins) carry line 0; the
// interpreter adds the line of the node it was evaluating.
[[noreturn]] inline void runtime_error(std::string message) {
  throw TemplateError(TemplateError::Kind::kRuntime, 0, std::move(message));
}
[[noreturn]] inline void limit_error(std::string message) {
  throw TemplateError(TemplateError::Kind::kLimit, 0, std::move(message));
}

}  // namespace hearth::jinja
