#include "weight-server/model/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/safetensors_builder.h"
#include "tests/support/temp_dir.h"

namespace hearth {
namespace {

using test::safetensors_image;
using test::valid_safetensors;

// Expects parsing to fail with a message containing every fragment.
void expect_error(const std::vector<std::byte>& image,
                  std::initializer_list<const char*> fragments) {
  try {
    parse_safetensors(image, "model.safetensors");
    FAIL() << "parse succeeded, expected an error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.safetensors"), std::string::npos) << what;
    for (const char* f : fragments) EXPECT_NE(what.find(f), std::string::npos) << what;
  }
}

TEST(Safetensors, ParsesTensorsAndMetadata) {
  auto image = valid_safetensors({{"a", "BF16", {3, 4}}, {"b", "F32", {5}}, {"c", "F16", {}}});
  SafetensorsHeader h = parse_safetensors(image, "x");
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].info.name, "a");
  EXPECT_EQ(h.tensors[0].info.dtype, DType::BF16);
  EXPECT_EQ(h.tensors[0].info.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(h.tensors[0].info.bytes, 24u);
  EXPECT_EQ(h.tensors[1].info.bytes, 20u);
  EXPECT_EQ(h.tensors[2].info.numel(), 1u);  // a scalar
  EXPECT_EQ(h.tensors[1].file_offset, h.tensors[0].file_offset + 24);
}

// fp8 weights (issue 25): one byte per element, their scales a tensor of their own.
TEST(Safetensors, ParsesFp8E4m3WithItsScale) {
  auto image = valid_safetensors({{"w_scale", "F32", {3, 1}}, {"w", "F8_E4M3", {3, 5}}});
  SafetensorsHeader h = parse_safetensors(image, "x");
  ASSERT_EQ(h.tensors.size(), 2u);
  const SafetensorsEntry& w = h.tensors[0].info.name == "w" ? h.tensors[0] : h.tensors[1];
  const SafetensorsEntry& s = h.tensors[0].info.name == "w" ? h.tensors[1] : h.tensors[0];
  EXPECT_EQ(w.info.dtype, DType::F8_E4M3);
  EXPECT_EQ(w.info.bytes, 15u);
  EXPECT_EQ(s.info.bytes, 12u);
  EXPECT_EQ(w.file_offset, s.file_offset + 12);
}

TEST(Safetensors, MetadataMustHoldStrings) {
  auto ok = safetensors_image(R"({"__metadata__":{"format":"pt"}})", 0);
  EXPECT_EQ(parse_safetensors(ok, "x").metadata.at("format"), "pt");
  expect_error(safetensors_image(R"({"__metadata__":{"n":3}})", 0), {"__metadata__"});
}

TEST(Safetensors, RefusesShortFiles) {
  expect_error(std::vector<std::byte>(5), {"too short"});
}

TEST(Safetensors, RefusesHeaderLengthBounds) {
  expect_error(safetensors_image("{}", 0, 1), {"too small"});
  expect_error(safetensors_image("{}", 0, kMaxSafetensorsHeaderBytes + 1), {"exceeds the limit"});
  expect_error(safetensors_image("{}", 0, 4096), {"past the end of the file"});
  expect_error(safetensors_image("{}", 0, UINT64_MAX - 3), {"header length"});
}

TEST(Safetensors, RefusesInvalidJson) {
  expect_error(safetensors_image("{\"a\": ", 0), {"invalid JSON"});
  expect_error(safetensors_image("[1, 2]", 0), {"not a JSON object"});
}

TEST(Safetensors, RefusesDuplicateTensorNames) {
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                 8),
               {"'w'", "twice"});
}

TEST(Safetensors, RefusesUnsupportedDtype) {
  expect_error(safetensors_image(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8),
               {"'w'", "unsupported dtype I64", "F8_E4M3"});
}

TEST(Safetensors, RefusesSizeDisagreement) {
  expect_error(
      safetensors_image(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,10]}})", 10),
      {"'w'", "needs 12 bytes", "offsets give 10"});
}

TEST(Safetensors, RefusesOffsetsPastTheEnd) {
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
               {"'w'", "past the end of the data"});
}

TEST(Safetensors, RefusesReversedOffsets) {
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
               {"'w'", "end before begin"});
}

TEST(Safetensors, RefusesOverlapsGapsAndTrailingBytes) {
  expect_error(safetensors_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                 12),
               {"overlaps"});
  expect_error(safetensors_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
               {"'a'", "gap"});
  expect_error(safetensors_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
               {"trailing bytes"});
}

TEST(Safetensors, RefusesMalformedDescriptions) {
  expect_error(safetensors_image(R"({"w":3})", 0), {"'w'", "not an object"});
  expect_error(safetensors_image(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4),
               {"missing dtype"});
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4),
               {"missing shape"});
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
               {"integers >= 0"});
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":[1]}})", 4), {"data_offsets"});
  expect_error(
      safetensors_image(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
      {"unexpected field 'x'"});
}

// Issue 21: a field of the wrong type read as a missing one ("missing dtype").
TEST(Safetensors, WrongTypesAreNamedNotCalledMissing) {
  expect_error(safetensors_image(R"({"w":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", 4),
               {"'w'", "dtype must be a string, got number 5"});
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4),
               {"'w'", "shape must be an array, got string \"1\""});
  expect_error(safetensors_image(R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4),
               {"'w'", "shape entries must be integers >= 0, got string \"1\""});
  for (const char* header : {R"({"w":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})",
                             R"({"w":{"dtype":"F32","shape":{},"data_offsets":[0,4]}})"}) {
    try {
      parse_safetensors(safetensors_image(header, 4), "t.safetensors");
      ADD_FAILURE() << header;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).find("missing"), std::string::npos) << e.what();
    }
  }
}

TEST(Safetensors, RefusesShapeOverflow) {
  expect_error(
      safetensors_image(
          R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4),
      {"'w'", "overflows"});
}

TEST(Safetensors, OpensFilesAndNamesMissingOnes) {
  auto image = valid_safetensors({{"w", "F32", {2}}});
  const std::string path = (test::process_scratch_dir() / "st_open.safetensors").string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(image.data()), image.size());
  SafetensorsFile f = SafetensorsFile::open(path);
  ASSERT_EQ(f.header().tensors.size(), 1u);
  EXPECT_EQ(f.data(f.header().tensors[0]).size(), 8u);
  EXPECT_THROW(
      {
        try {
          SafetensorsFile::open(test::process_scratch_dir() / "does_not_exist.safetensors");
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("does_not_exist"), std::string::npos);
          throw;
        }
      },
      std::runtime_error);
}

}  // namespace
}  // namespace hearth
