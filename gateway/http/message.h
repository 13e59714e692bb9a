// The request a handler reads and the response it fills: the parts of cpp-httplib's Request
// and Response the gateway used, so its handlers read the same.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth::http {

// Header fields in arrival order; names compare case-insensitively (RFC 9110 5.1).
using Headers = std::vector<std::pair<std::string, std::string>>;

bool iequals(std::string_view a, std::string_view b);

struct Request {
  std::string method;
  std::string target;     // as sent: path and query
  std::string path;       // the target before '?'
  std::string query;      // after '?', undecoded ("" when none)
  int minor_version = 1;  // HTTP/1.minor
  Headers headers;
  std::string body;
  // Set by the server while a handler runs (as cpp-httplib's): true once the client has closed
  // or reset its side, or the server is stopping, so that no answer can reach it any more. A
  // handler that waits long (a non-streaming generation) asks it to stop work nobody will read.
  // It refers to the connection: call it only while this request is being answered (from its
  // handler or its streamed body's provider), never from anything that outlives the response.
  std::function<bool()> is_connection_closed;

  bool has_header(std::string_view name) const;
  // The first field of that name, or "" (as httplib's).
  std::string get_header_value(std::string_view name) const;
};

// What a streaming provider writes to. write() returns false once the client is gone (or the
// write timed out); done() ends the stream normally. client_gone() asks the socket without
// writing: a provider waiting for tokens checks it to notice a client that left.
class DataSink {
 public:
  virtual ~DataSink() = default;
  virtual bool write(const char* data, size_t size) = 0;
  virtual void done() = 0;
  virtual bool client_gone() = 0;
};

// Called repeatedly until it calls sink.done() or returns false (abandon the stream).
using ContentProvider = std::function<bool(size_t offset, DataSink& sink)>;
// Told whether the stream ended normally (done() and every byte written).
using StreamCompletion = std::function<void(bool success)>;

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  std::string content_type;
  ContentProvider provider;  // set: the body is streamed with chunked transfer encoding
  StreamCompletion completion;
  // For statuses the server answers itself: what was wrong with the request (for the error
  // hook's body).
  std::string error_message;

  void set_header(std::string name, std::string value);
  bool has_header(std::string_view name) const;
  std::string get_header_value(std::string_view name) const;
  void set_content(std::string content, std::string type);
  void set_chunked_content_provider(std::string type, ContentProvider p,
                                    StreamCompletion on_end = nullptr);
};

// The reason phrase of a status code ("" for ones hearth never sends).
const char* reason_phrase(int status);

}  // namespace hearth::http
