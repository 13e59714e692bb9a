// The engines' logits against a reference engine's (the GPU engines against the CPU engine),
// teacher-forced: the prompt, then the reference's argmax fed to both, step after step, so one
// early difference cannot send the two down different paths.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "worker/engine/backend.h"

namespace hearth::test {

struct TeacherForced {
  int decisive = 0;  // steps whose reference top-1/top-2 margin was over twice the tolerance
  double worst = 0;  // the largest |got - want| over the reference's logit range
};

// The prompt, then `steps` tokens: at each of the steps + 1 positions every logit within
// `rel_tol` of the reference's range, and the same argmax wherever the reference's margin is
// decisive (more than twice that).
inline TeacherForced check_teacher_forced(Backend& want, Backend& got,
                                          std::span<const int32_t> prompt, int steps,
                                          double rel_tol, const std::string& what) {
  auto copy = [](std::span<const float> s) { return std::vector<float>(s.begin(), s.end()); };
  std::vector<float> w = copy(forward_alone(want, prompt));
  std::vector<float> g = copy(forward_alone(got, prompt));
  int pos = int(prompt.size());
  TeacherForced out;
  for (int step = 0; step <= steps; ++step) {
    const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
    const double range = *hi - *lo, tol = rel_tol * range;
    double err = 0;
    for (size_t i = 0; i < w.size(); ++i) err = std::max(err, double(std::abs(g[i] - w[i])));
    out.worst = std::max(out.worst, err / range);
    EXPECT_LE(err, tol) << what << " step " << step;
    const int32_t top = int32_t(std::max_element(w.begin(), w.end()) - w.begin());
    std::vector<float> rest = w;
    rest[top] = -INFINITY;
    if (w[top] - *std::max_element(rest.begin(), rest.end()) > 2 * tol) {
      EXPECT_EQ(int32_t(std::max_element(g.begin(), g.end()) - g.begin()), top)
          << what << " step " << step;
      ++out.decisive;
    }
    if (step == steps) break;
    w = copy(forward_alone(want, std::span(&top, 1), pos));
    g = copy(forward_alone(got, std::span(&top, 1), pos));
    ++pos;
  }
  return out;
}

}  // namespace hearth::test
