#include "gateway/http/message.h"

#include <algorithm>

namespace hearth::http {

namespace {

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
}

const std::string* find(const Headers& headers, std::string_view name) {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return &v;
  return nullptr;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

bool Request::has_header(std::string_view name) const {
  return find(headers, name) != nullptr;
}

std::string Request::get_header_value(std::string_view name) const {
  const std::string* v = find(headers, name);
  return v ? *v : std::string();
}

void Response::set_header(std::string name, std::string value) {
  headers.emplace_back(std::move(name), std::move(value));
}

bool Response::has_header(std::string_view name) const {
  return find(headers, name) != nullptr;
}

std::string Response::get_header_value(std::string_view name) const {
  const std::string* v = find(headers, name);
  return v ? *v : std::string();
}

void Response::set_content(std::string content, std::string type) {
  body = std::move(content);
  content_type = std::move(type);
  provider = nullptr;
}

void Response::set_chunked_content_provider(std::string type, ContentProvider p,
                                            StreamCompletion on_end) {
  body.clear();
  content_type = std::move(type);
  provider = std::move(p);
  completion = std::move(on_end);
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "";
  }
}

}  // namespace hearth::http
