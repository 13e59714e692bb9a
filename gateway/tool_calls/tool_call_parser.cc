#include "gateway/tool_calls/tool_call_parser.h"

#include <nlohmann/json.hpp>

namespace hearth::gateway {

using ordered_json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesEnd = "</tool_call>";

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

// The length of the longest end of `text` that begins `marker` (a marker cut by a piece
// boundary), short of the whole marker.
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(text.size(), marker.size() - 1); k > 0; --k)
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

// One call object: {"name": "...", "arguments" or "parameters": {...} or "..."}.
std::optional<ParsedToolCall> call_of(const ordered_json& v) {
  if (!v.is_object()) return std::nullopt;
  const auto name = v.find("name");
  if (name == v.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  auto args = v.find("arguments");
  if (args == v.end()) args = v.find("parameters");
  ParsedToolCall call{name->get<std::string>(), "{}"};
  if (args != v.end()) {
    if (args->is_object()) {
      call.arguments = args->dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    } else if (args->is_string()) {
      call.arguments = args->get<std::string>();
    } else {
      return std::nullopt;
    }
  }
  return call;
}

// The calls in one JSON text: an object, or (Mistral) an array of them. Empty when the text is
// not JSON or any item is not a call.
std::vector<ParsedToolCall> calls_of(std::string_view text, bool array_allowed) {
  const ordered_json v = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  std::vector<ParsedToolCall> out;
  if (v.is_discarded()) return out;
  if (v.is_array() && array_allowed) {
    for (const ordered_json& item : v) {
      auto call = call_of(item);
      if (!call) return {};
      out.push_back(std::move(*call));
    }
  } else if (auto call = call_of(v)) {
    out.push_back(std::move(*call));
  }
  return out;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolFormat format, size_t max_calls)
    : format_(format), max_calls_(max_calls), start_(tool_call_start(format)) {}

std::vector<ToolCallPiece> ToolCallParser::feed(std::string_view text) {
  std::vector<ToolCallPiece> out;
  if (format_ == ToolFormat::None) {
    emit_content(std::string(text), out);
    return out;
  }
  held_ += text;
  scan(false, out);
  return out;
}

std::vector<ToolCallPiece> ToolCallParser::finish() {
  std::vector<ToolCallPiece> out;
  scan(true, out);
  emit_content(std::move(gap_), out);  // nothing can follow: held whitespace is content
  gap_.clear();
  emit_content(std::move(held_), out);
  held_.clear();
  return out;
}

void ToolCallParser::scan(bool at_end, std::vector<ToolCallPiece>& out) {
  if (format_ == ToolFormat::None) return;  // no markup to look for: everything is content
  while (in_call_ ? scan_call(at_end, out) : scan_text(at_end, out)) {
  }
}

void ToolCallParser::emit_content(std::string text, std::vector<ToolCallPiece>& out) {
  if (text.empty()) return;
  if (!out.empty() && !out.back().call) {
    out.back().content += text;
  } else {
    out.push_back({std::move(text), std::nullopt});
  }
}

void ToolCallParser::emit_calls(std::vector<ParsedToolCall> calls,
                                std::vector<ToolCallPiece>& out) {
  for (ParsedToolCall& call : calls) {
    if (max_calls_ && calls_ >= max_calls_) return;  // parallel_tool_calls: false
    out.push_back({"", std::move(call)});
    ++calls_;
  }
}

// Outside a call: content up to the next opening, whitespace before it held in gap_.
bool ToolCallParser::scan_text(bool /*at_end*/, std::vector<ToolCallPiece>& out) {
  if (after_call_) {
    size_t i = 0;
    while (i < held_.size() &&
           (is_space(held_[i]) || (format_ == ToolFormat::Llama3Json && held_[i] == ';')))
      ++i;
    held_.erase(0, i);
    if (held_.empty()) return false;
    after_call_ = false;
  }
  if (format_ == ToolFormat::Llama3Json && call_position_) {
    size_t i = 0;
    while (i < held_.size() && is_space(held_[i])) ++i;
    if (i == held_.size()) return false;  // only whitespace yet: finish() gives it back
    if (held_[i] == '{') {
      emit_content(std::move(gap_), out);
      gap_ = held_.substr(0, i);
      held_.erase(0, i);
      in_call_ = true;
      scan_pos_ = 0;
      return true;
    }
    call_position_ = false;
  }
  const size_t at = held_.find(start_);
  size_t keep = at != std::string::npos ? at : held_.size() - partial_marker(held_, start_);
  size_t text_end = keep;
  while (text_end > 0 && is_space(held_[text_end - 1])) --text_end;
  if (text_end > 0) {
    emit_content(std::move(gap_), out);
    gap_.clear();
    emit_content(held_.substr(0, text_end), out);
  }
  gap_ += held_.substr(text_end, keep - text_end);
  held_.erase(0, keep);
  if (at == std::string::npos) return false;
  in_call_ = true;
  scan_pos_ = start_.size();
  return true;
}

// Inside a call: wait for its end, then give back the calls, or its text as content.
bool ToolCallParser::scan_call(bool at_end, std::vector<ToolCallPiece>& out) {
  size_t end = std::string::npos;  // one past the call's markup
  std::string_view json_text;
  const size_t begin = held_.compare(0, start_.size(), start_) == 0 ? start_.size() : 0;
  if (format_ == ToolFormat::Hermes) {
    const size_t close = held_.find(kHermesEnd, scan_pos_);
    if (close != std::string::npos) {
      end = close + kHermesEnd.size();
      json_text = std::string_view(held_).substr(begin, close - begin);
    } else if (at_end) {
      end = held_.size();  // unclosed at the end: a call if its JSON is whole
      json_text = std::string_view(held_).substr(begin);
    } else {
      scan_pos_ = held_.size() - std::min(held_.size() - begin, kHermesEnd.size() - 1);
      return false;
    }
  } else {
    // One JSON value, found by its brackets (strings and escapes skipped).
    if (scan_pos_ < begin) scan_pos_ = begin;
    if (depth_ == 0) {
      while (scan_pos_ < held_.size() && is_space(held_[scan_pos_])) ++scan_pos_;
      if (scan_pos_ == held_.size()) {
        if (!at_end) return false;
      } else if (held_[scan_pos_] != '{' && held_[scan_pos_] != '[') {
        // A marker not followed by JSON (Llama's code interpreter, or chance): content.
        emit_content(std::move(gap_), out);
        gap_.clear();
        emit_content(held_.substr(0, scan_pos_), out);
        held_.erase(0, scan_pos_);
        in_call_ = false;
        call_position_ = false;
        return true;
      } else {
        value_begin_ = scan_pos_;
      }
    }
    for (; scan_pos_ < held_.size() && end == std::string::npos; ++scan_pos_) {
      const char c = held_[scan_pos_];
      if (in_string_) {
        if (escape_) {
          escape_ = false;
        } else if (c == '\\') {
          escape_ = true;
        } else if (c == '"') {
          in_string_ = false;
        }
      } else if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if ((c == '}' || c == ']') && --depth_ == 0) {
        end = scan_pos_ + 1;
      }
    }
    if (end == std::string::npos) {
      if (!at_end) return false;
      end = held_.size();  // cut off: not a call
    } else {
      json_text = std::string_view(held_).substr(value_begin_, end - value_begin_);
    }
  }
  std::vector<ParsedToolCall> calls;
  if (!json_text.empty()) calls = calls_of(json_text, format_ == ToolFormat::Mistral);
  if (calls.empty()) {
    emit_content(std::move(gap_), out);
    emit_content(held_.substr(0, end), out);
    call_position_ = false;
  } else {
    emit_calls(std::move(calls), out);
    after_call_ = true;
    call_position_ = true;
  }
  gap_.clear();
  held_.erase(0, end);
  in_call_ = false;
  scan_pos_ = value_begin_ = 0;
  depth_ = 0;
  in_string_ = escape_ = false;
  return true;
}

ParsedOutput parse_tool_calls(ToolFormat format, std::string_view text, size_t max_calls) {
  ToolCallParser parser(format, max_calls);
  ParsedOutput out;
  std::string content;
  auto take = [&](std::vector<ToolCallPiece> pieces) {
    for (ToolCallPiece& p : pieces) {
      if (p.call) {
        out.calls.push_back(std::move(*p.call));
      } else {
        content += p.content;
      }
    }
  };
  take(parser.feed(text));
  take(parser.finish());
  if (!out.calls.empty() && content.empty()) return out;
  out.content = std::move(content);
  return out;
}

}  // namespace hearth::gateway
