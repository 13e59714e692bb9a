#include "ipc/frame_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace hearth::ipc {
namespace {

using nlohmann::json;

std::string header(std::uint32_t n) {
  return std::string{static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                     static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
}
std::string raw_frame(const std::string& payload) {
  return header(static_cast<std::uint32_t>(payload.size())) + payload;
}
std::vector<UniqueFd> memfds(int n) {
  std::vector<UniqueFd> fds;
  for (int i = 0; i < n; ++i) fds.push_back(test::make_memfd("fd " + std::to_string(i)));
  return fds;
}

TEST(FrameReader, DecodesFramesFedOneByteAtATime) {
  const std::vector<json> bodies = {{{"op", "hello"}, {"id", 1}},
                                    {{"text", "h\u00e9llo \u2603"}, {"n", {1, 2, 3}}},
                                    json::object()};
  std::string stream;
  for (const json& b : bodies) stream += encode_frame(b);
  FrameReader reader;
  for (char c : stream) {
    ASSERT_GE(reader.bytes_wanted(), 1u);
    ASSERT_TRUE(reader.feed(std::span(&c, 1)));
  }
  for (const json& b : bodies) {
    auto frame = reader.pop();
    ASSERT_TRUE(frame);
    EXPECT_EQ(frame->body, b);
    EXPECT_TRUE(frame->fds.empty());
  }
  EXPECT_FALSE(reader.pop());
  EXPECT_FALSE(reader.mid_frame());
}

TEST(FrameReader, DecodesManyFramesFromOneChunk) {
  std::string stream;
  for (int i = 0; i < 100; ++i) stream += encode_frame({{"i", i}});
  FrameReader reader;
  ASSERT_TRUE(reader.feed(stream));
  for (int i = 0; i < 100; ++i) {
    auto frame = reader.pop();
    ASSERT_TRUE(frame);
    EXPECT_EQ(frame->body["i"], i);
  }
  EXPECT_FALSE(reader.pop());
}

TEST(FrameReader, BytesWantedStopsAtTheFrameBoundary) {
  const std::string a = encode_frame({{"a", 1}});
  FrameReader reader;
  EXPECT_EQ(reader.bytes_wanted(), kFrameHeaderBytes);
  ASSERT_TRUE(reader.feed(std::string_view(a).substr(0, 2)));
  EXPECT_EQ(reader.bytes_wanted(), 2u);
  EXPECT_TRUE(reader.mid_frame());
  ASSERT_TRUE(reader.feed(std::string_view(a).substr(2, 2)));
  EXPECT_EQ(reader.bytes_wanted(), a.size() - kFrameHeaderBytes);
  ASSERT_TRUE(reader.feed(std::string_view(a).substr(4)));
  EXPECT_EQ(reader.bytes_wanted(), kFrameHeaderBytes);
  EXPECT_TRUE(reader.pop());
}

TEST(FrameReader, FdsBelongToTheFrameHoldingTheChunksLastByte) {
  const std::string a = encode_frame({{"a", 1}});
  const std::string b = encode_frame({{"b", 2}});
  const std::string c = encode_frame({{"c", 3}});
  FrameReader reader;
  // Chunk 1 ends exactly at the end of frame a: its FDs are a's.
  ASSERT_TRUE(reader.feed(a, memfds(2)));
  // Chunk 2 holds all of b and half of c: its FDs are c's, none are b's.
  ASSERT_TRUE(reader.feed(b + c.substr(0, 5), memfds(3)));
  ASSERT_TRUE(reader.feed(c.substr(5)));
  auto fa = reader.pop();
  auto fb = reader.pop();
  auto fc = reader.pop();
  ASSERT_TRUE(fa && fb && fc);
  EXPECT_EQ(fa->fds.size(), 2u);
  EXPECT_EQ(fb->fds.size(), 0u);
  EXPECT_EQ(fc->fds.size(), 3u);
  EXPECT_EQ(test::read_all(fc->fds[2].get()), "fd 2");
}

TEST(FrameReader, RefusesAnOversizedLengthBeforeBufferingAnything) {
  FrameReader reader(1024);
  EXPECT_FALSE(reader.feed(header(0xffffffffu) + "{}"));
  ASSERT_TRUE(reader.error());
  EXPECT_EQ(reader.error()->code, ErrorCode::kTooLarge);
  EXPECT_NE(reader.error()->message.find("4294967295"), std::string::npos);
  EXPECT_FALSE(reader.pop());
  // Failed for good: later input is refused too.
  EXPECT_FALSE(reader.feed(encode_frame({{"a", 1}})));
}

TEST(FrameReader, AcceptsAFrameOfExactlyTheLimit) {
  const std::string payload = R"({"pad":")" + std::string(100, 'x') + R"("})";
  FrameReader reader(payload.size());
  ASSERT_TRUE(reader.feed(raw_frame(payload)));
  EXPECT_TRUE(reader.pop());
  FrameReader smaller(payload.size() - 1);
  EXPECT_FALSE(smaller.feed(raw_frame(payload)));
}

TEST(FrameReader, RefusesPayloadsThatAreNotAJsonObject) {
  std::vector<std::string> bad = {
      "",                                             // empty
      "{\"a\":",                                      // truncated JSON
      "not json",                                     // garbage
      "[1,2,3]",                                      // array
      "42",                                           // number
      "\"text\"",                                     // string
      "null",                                         // null
      "{\"a\":1} trailing",                           // trailing garbage
      std::string("{\"a\":\"\xff\xfe\"}"),            // invalid UTF-8
      std::string(100, '[') + std::string(100, ']'),  // deep array
  };
  std::string deep_object;
  for (int i = 0; i < 100; ++i) deep_object += "{\"a\":";
  deep_object += "1" + std::string(100, '}');
  bad.push_back(deep_object);
  for (const std::string& payload : bad) {
    FrameReader reader;
    EXPECT_FALSE(reader.feed(raw_frame(payload))) << payload;
    ASSERT_TRUE(reader.error()) << payload;
    EXPECT_EQ(reader.error()->code, ErrorCode::kBadRequest) << payload;
    EXPECT_FALSE(reader.error()->message.empty());
  }
}

TEST(FrameReader, AcceptsNestingUpToTheLimit) {
  std::string payload = "{\"a\":";
  for (int i = 1; i < kMaxJsonDepth; ++i) payload += "[";
  for (int i = 1; i < kMaxJsonDepth; ++i) payload += "]";
  payload += "}";
  FrameReader reader;
  EXPECT_TRUE(reader.feed(raw_frame(payload))) << reader.error()->message;
}

TEST(FrameReader, ReturnsFramesCompletedBeforeAFailure) {
  FrameReader reader;
  EXPECT_FALSE(reader.feed(encode_frame({{"ok", 1}}) + raw_frame("[]")));
  auto first = reader.pop();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->body["ok"], 1);
  EXPECT_FALSE(reader.pop());
}

TEST(FrameReader, ClosesFdsOnAFrameThatMustNotCarryAny) {
  const int baseline = test::count_open_fds();
  {
    FrameReader reader(kDefaultMaxFrameBytes, /*max_fds=*/0);
    const std::string frame = encode_frame({{"op", "stats"}, {"id", 1}});
    EXPECT_FALSE(reader.feed(frame.substr(0, 3), memfds(4)));
    EXPECT_EQ(reader.error()->code, ErrorCode::kBadRequest);
    EXPECT_EQ(test::count_open_fds(), baseline);  // closed at once, not when the reader dies
    EXPECT_FALSE(reader.feed(frame.substr(3), memfds(2)));
    EXPECT_EQ(test::count_open_fds(), baseline);
  }
}

TEST(FrameReader, ClosesFdsBeyondItsLimit) {
  const int baseline = test::count_open_fds();
  FrameReader reader(kDefaultMaxFrameBytes, /*max_fds=*/3);
  const std::string frame = encode_frame({{"a", 1}});
  ASSERT_TRUE(reader.feed(frame.substr(0, 2), memfds(2)));
  EXPECT_FALSE(reader.feed(frame.substr(2, 2), memfds(2)));
  EXPECT_EQ(reader.error()->code, ErrorCode::kTooLarge);
  EXPECT_EQ(test::count_open_fds(), baseline);
}

TEST(FrameReader, ClosesFdsOfAnUnparsableFrame) {
  const int baseline = test::count_open_fds();
  FrameReader reader;
  EXPECT_FALSE(reader.feed(raw_frame("{broken"), memfds(5)));
  EXPECT_EQ(test::count_open_fds(), baseline);
}

TEST(FrameReader, ClosesFdsOfAPartialFrameWhenDestroyed) {
  const int baseline = test::count_open_fds();
  {
    FrameReader reader;
    ASSERT_TRUE(reader.feed(encode_frame({{"a", 1}}).substr(0, 6), memfds(3)));
    EXPECT_EQ(test::count_open_fds(), baseline + 3);
  }
  EXPECT_EQ(test::count_open_fds(), baseline);
}

TEST(EncodeFrame, RefusesWhatCannotBeAFrame) {
  EXPECT_THROW(encode_frame(json::array()), IpcError);
  EXPECT_THROW(encode_frame({{"s", std::string("\xff")}}), IpcError);
  try {
    encode_frame({{"pad", std::string(200, 'x')}}, 100);
    FAIL() << "expected too_large";
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTooLarge);
  }
}

TEST(EncodeFrame, WritesALittleEndianLength) {
  const std::string frame = encode_frame({{"pad", std::string(300, 'x')}});
  const std::size_t n = frame.size() - kFrameHeaderBytes;
  EXPECT_EQ(static_cast<unsigned char>(frame[0]), n & 0xff);
  EXPECT_EQ(static_cast<unsigned char>(frame[1]), (n >> 8) & 0xff);
  EXPECT_EQ(frame[2], 0);
  EXPECT_EQ(frame[3], 0);
}

}  // namespace
}  // namespace hearth::ipc
