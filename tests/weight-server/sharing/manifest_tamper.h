// Hostile manifests: edits of a good manifest that parse_manifest must refuse, each with what
// its message must say; the message also names the model ('tiny' in these tests).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/error_of.h"
#include "weight-server/sharing/manifest.h"

namespace hearth::test {

struct ManifestTamper {
  const char* what;
  std::function<void(nlohmann::json&)> edit;
  std::string expect;
};

inline void expect_tampers_refused(const nlohmann::json& good,
                                   const std::vector<ManifestTamper>& cases) {
  for (const ManifestTamper& c : cases) {
    nlohmann::json m = good;
    c.edit(m);
    const std::string error = error_of([&] { parse_manifest(m); });
    EXPECT_NE(error.find(c.expect), std::string::npos) << c.what << ": " << error;
    EXPECT_NE(error.find("manifest of model 'tiny'"), std::string::npos) << c.what << ": " << error;
  }
}

}  // namespace hearth::test
