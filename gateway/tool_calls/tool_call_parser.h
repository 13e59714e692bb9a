// Tool calls read out of a model's text as it streams: the text fed in pieces (one token's text
// at a time), the parser gives back, in order, content to show and calls once each is complete
// and valid JSON. The whole response is the same machine fed everything at once, so a stream
// and the whole response always agree. Rules, for every format:
//   - text outside a call is content, byte for byte, except whitespace that touches a call;
//   - a call is sent only whole: nothing of its markup is ever content while it may still be a
//     call, and markup that turns out not to be a valid call (bad JSON, no name, cut off by the
//     end of the output) is given back as content, exactly as written;
//   - Llama 3.1's bare JSON call counts only at the start of the output or after another call.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/tool_calls/tool_format.h"

namespace hearth::gateway {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON text, as OpenAI's function.arguments
};

// One thing the parser releases: content text, or a complete call.
struct ToolCallPiece {
  std::string content;
  std::optional<ParsedToolCall> call;
};

class ToolCallParser {
 public:
  // `max_calls` 1 for parallel_tool_calls: false (later calls are dropped), else 0 (no limit).
  explicit ToolCallParser(ToolFormat format, size_t max_calls = 0);

  // What `text` (the next piece of the output) lets the parser release now.
  std::vector<ToolCallPiece> feed(std::string_view text);
  // The end of the output: everything still held back.
  std::vector<ToolCallPiece> finish();

  size_t calls() const { return calls_; }

 private:
  void scan(bool at_end, std::vector<ToolCallPiece>& out);
  bool scan_text(bool at_end, std::vector<ToolCallPiece>& out);
  bool scan_call(bool at_end, std::vector<ToolCallPiece>& out);
  void emit_content(std::string text, std::vector<ToolCallPiece>& out);
  void emit_calls(std::vector<ParsedToolCall> calls, std::vector<ToolCallPiece>& out);

  ToolFormat format_;
  size_t max_calls_;
  std::string start_;       // the format's opening markup
  std::string held_;        // text not yet decided
  std::string gap_;         // whitespace before a possible call: dropped if it is one
  size_t scan_pos_ = 0;     // inside a call: how far held_ has been scanned
  size_t value_begin_ = 0;  // where the call's JSON value starts in held_
  int depth_ = 0;           // brackets open in the call's JSON
  bool in_string_ = false, escape_ = false;
  bool in_call_ = false;       // held_ starts with a call's opening (markup or Llama's bare '{')
  bool after_call_ = false;    // a call just ended: whitespace (and Llama's ';') is dropped
  bool call_position_ = true;  // Llama: a bare '{' here opens a call (output start, after calls)
  size_t calls_ = 0;
};

// The whole output at once: content (null when there is none besides whitespace around calls)
// and the calls.
struct ParsedOutput {
  std::optional<std::string> content;
  std::vector<ParsedToolCall> calls;
};
ParsedOutput parse_tool_calls(ToolFormat format, std::string_view text, size_t max_calls = 0);

}  // namespace hearth::gateway
