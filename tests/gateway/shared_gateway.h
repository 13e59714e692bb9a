#pragma once

// One hearth-gateway for every test of a suite: a fixture derives from SharedGatewayTest and
// gets the default GatewayProcess, or starts its own in a SetUpTestSuite of its own.

#include <gtest/gtest.h>

#include "tests/gateway/gateway_process.h"

namespace hearth::test {

class SharedGatewayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gateway_ = new GatewayProcess(); }
  static void TearDownTestSuite() {
    delete gateway_;
    gateway_ = nullptr;
  }
  static GatewayProcess& gw() { return *gateway_; }
  static inline GatewayProcess* gateway_ = nullptr;
};

}  // namespace hearth::test
