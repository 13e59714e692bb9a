// The sampling arithmetic the host Sampler (worker/engine/sampler.h) and the GPU samplers share,
// written once for both: the adjusted logit (logit_bias, repetition, frequency and presence
// penalties) and the Gumbel-max pick. A temperature pick is the argmax over the surviving tokens
// of (logit - top) / T + g, where g = -log(-log(u)) and u comes from Philox at (seed, step,
// token id): an exact draw from softmax(logit / T) that needs no sort, no prefix sum and no
// order among the candidates, so a row's pick is the same however its work is split.
//
// Every float operation here is spelled out (fma, rounded add/mul/div) and the logarithm is our
// own polynomial, so the host and the device give the same bits: libm's log and CUDA's differ
// in their last bits, and nvcc would otherwise fuse a * b + c where the host does not.
#pragma once

#include <cfloat>
#include <cstdint>

#include "kernels/philox.h"

#if defined(__CUDA_ARCH__)
#define HEARTH_SR_FMA(a, b, c) __fmaf_rn(a, b, c)
#define HEARTH_SR_MUL(a, b) __fmul_rn(a, b)
#define HEARTH_SR_ADD(a, b) __fadd_rn(a, b)
#define HEARTH_SR_SUB(a, b) __fsub_rn(a, b)
#define HEARTH_SR_DIV(a, b) __fdiv_rn(a, b)
#define HEARTH_SR_CEIL(a) ceil(a)
#else
#include <cmath>
#include <cstring>
#define HEARTH_SR_FMA(a, b, c) std::fma(float(a), float(b), float(c))
// Host x86-64 float arithmetic is IEEE single precision (SSE) and GCC/Clang do not fuse across
// these calls without -mfma; the functions keep each operation one rounded step.
#define HEARTH_SR_MUL(a, b) ::hearth::sampling_rules::detail::mul(a, b)
#define HEARTH_SR_ADD(a, b) ::hearth::sampling_rules::detail::add(a, b)
#define HEARTH_SR_SUB(a, b) ::hearth::sampling_rules::detail::sub(a, b)
#define HEARTH_SR_DIV(a, b) ::hearth::sampling_rules::detail::div(a, b)
#define HEARTH_SR_CEIL(a) std::ceil(a)
#endif

namespace hearth::sampling_rules {

#if !defined(__CUDA_ARCH__)
namespace detail {
// volatile: a compiler allowed to contract (-ffp-contract=fast with FMA hardware) cannot fuse
// a product that has gone through memory into the following add.
inline float mul(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float add(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float sub(float a, float b) {
  volatile float r = a - b;
  return r;
}
inline float div(float a, float b) {
  volatile float r = a / b;
  return r;
}
}  // namespace detail
#endif

HEARTH_HOST_DEVICE inline uint32_t float_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
#endif
}
HEARTH_HOST_DEVICE inline float bits_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float v;
  std::memcpy(&v, &b, 4);
  return v;
#endif
}

// Natural logarithm of a positive normal float, the same bits on host and device (a few ulp
// from the true value, which no rule here needs closer): x = m 2^e with m in [sqrt(1/2),
// sqrt(2)), log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its odd series.
HEARTH_HOST_DEVICE inline float det_log(float x) {
  uint32_t b = float_bits(x);
  int e = int(b >> 23) - 127;
  b = (b & 0x007fffffu) | 0x3f800000u;  // m in [1, 2)
  float m = bits_float(b);
  if (m > 1.41421356f) {
    m = HEARTH_SR_MUL(m, 0.5f);
    ++e;
  }
  const float s = HEARTH_SR_DIV(HEARTH_SR_SUB(m, 1.0f), HEARTH_SR_ADD(m, 1.0f));
  const float z = HEARTH_SR_MUL(s, s);
  float p = HEARTH_SR_FMA(z, 1.0f / 11.0f, 1.0f / 9.0f);
  p = HEARTH_SR_FMA(z, p, 1.0f / 7.0f);
  p = HEARTH_SR_FMA(z, p, 1.0f / 5.0f);
  p = HEARTH_SR_FMA(z, p, 1.0f / 3.0f);
  p = HEARTH_SR_MUL(z, p);
  const float two_s = HEARTH_SR_ADD(s, s);
  const float log_m = HEARTH_SR_FMA(two_s, p, two_s);  // 2s (1 + z p)
  return HEARTH_SR_FMA(float(e), 0.693147182f, log_m);
}

// The Philox draw whose four words give the Gumbel noise of tokens 4 group .. 4 group + 3 at
// step `step` under `seed` (counter stream 1; stream 0 is the old single uniform): one draw
// for four tokens, as a scan over a vocabulary reads them, instead of one a token.
HEARTH_HOST_DEVICE inline Philox4x32 gumbel_draw(uint64_t seed, uint64_t step, int32_t group) {
  return philox4x32_10(uint32_t(step), uint32_t(step >> 32), uint32_t(group), 1u, uint32_t(seed),
                       uint32_t(seed >> 32));
}
// The uniform u in (0, 1) of one word of a draw: (2x + 1) / 2^24 for its top 23 bits x, exact
// in float, never 0 or 1.
HEARTH_HOST_DEVICE inline float uniform_of_word(uint32_t word) {
  return HEARTH_SR_MUL(float(((word >> 9) << 1) | 1u), 1.0f / 16777216.0f);
}
// g = -log(-log(u)) for the uniform of one word of a draw.
HEARTH_HOST_DEVICE inline float gumbel_of_word(uint32_t word) {
  const float u = uniform_of_word(word);
  const float e = -det_log(u);  // > 0: u < 1
  return -det_log(e);
}
// The Gumbel noise of token `id`: word id % 4 of the draw of group id / 4.
HEARTH_HOST_DEVICE inline float gumbel(uint64_t seed, uint64_t step, int32_t id) {
  return gumbel_of_word(gumbel_draw(seed, step, id >> 2).v[id & 3]);
}

// No gumbel() exceeds this (u < 1 - 2^-24 gives -log(-log u) < 16.64): a token whose scaled
// logit plus this is below a score already seen cannot win, so a scan may skip its noise.
constexpr float kGumbelBound = 17.0f;

// A surviving token's score: the pick is the highest score, the lowest id among equal ones.
HEARTH_HOST_DEVICE inline float scaled_logit(float logit, float top, float temperature) {
  return HEARTH_SR_DIV(HEARTH_SR_SUB(logit, top), temperature);
}
HEARTH_HOST_DEVICE inline float pick_score(float logit, float top, float temperature, uint64_t seed,
                                           uint64_t step, int32_t id) {
  return HEARTH_SR_ADD(scaled_logit(logit, top, temperature), gumbel(seed, step, id));
}

// e^x for x <= 0, the same bits on host and device (a few ulp): x = k ln 2 + r, |r| <= ln 2 / 2,
// e^r by its series to r^7, times 2^k. Below -28 it returns 0: no nucleus weight sees it.
HEARTH_HOST_DEVICE inline float det_exp(float x) {
  if (!(x >= -28.0f)) return 0.0f;  // NaN too
  const float k = HEARTH_SR_FMA(x, 1.44269504f, 0.5f);
#if defined(__CUDA_ARCH__)
  const float kf = floorf(k);
#else
  const float kf = std::floor(k);
#endif
  float r = HEARTH_SR_FMA(-kf, 0.693145752f, x);  // ln 2 in two parts: r is nearly exact
  r = HEARTH_SR_FMA(-kf, 1.42860677e-06f, r);
  float p = HEARTH_SR_FMA(r, 1.0f / 5040.0f, 1.0f / 720.0f);
  p = HEARTH_SR_FMA(r, p, 1.0f / 120.0f);
  p = HEARTH_SR_FMA(r, p, 1.0f / 24.0f);
  p = HEARTH_SR_FMA(r, p, 1.0f / 6.0f);
  p = HEARTH_SR_FMA(r, p, 0.5f);
  p = HEARTH_SR_FMA(r, p, 1.0f);
  p = HEARTH_SR_FMA(r, p, 1.0f);
  return HEARTH_SR_MUL(p, bits_float(uint32_t(int(kf) + 127) << 23));  // kf in [-41, 1]
}

// top-p's weights are integers: exp((logit - top) / T) in units of 2^-39, so a mass is the same
// sum in any order (a selection needs no sort, a scan no fixed order), and a vocabulary of up
// to 2^24 tokens sums below 2^63.
constexpr double kNucleusUnit = 549755813888.0;  // 2^39
HEARTH_HOST_DEVICE inline uint64_t nucleus_weight(float logit, float top, float temperature) {
  const float w = det_exp(scaled_logit(logit, top, temperature));
  return uint64_t(double(w) * kNucleusUnit);  // exact product, truncated
}
// The mass the nucleus must reach: ceil(top_p x total), never above the total. The nucleus is
// the tokens from the first by (logit desc, id asc) through the first whose running mass
// reaches it.
HEARTH_HOST_DEVICE inline uint64_t nucleus_need(uint64_t total, float top_p) {
  const double need = HEARTH_SR_CEIL(double(top_p) * double(total));
  return need >= double(total) ? total : uint64_t(need);
}

// (score desc, id asc): true when (s, id) beats (best_s, best_id).
HEARTH_HOST_DEVICE inline bool beats(float s, int32_t id, float best_s, int32_t best_id) {
  return s > best_s || (s == best_s && id < best_id);
}

// What the request says about one token beyond its raw logit: a logit_bias entry, whether the
// repetition penalty applies (the token is in the sequence so far) and how often it was
// generated (frequency and presence penalties).
struct TokenEdit {
  int32_t token = 0;
  float bias = 0.0f;
  int32_t generated = 0;  // times among the generated tokens
  int32_t seen = 0;       // 1: in the sequence so far (prompt or generated)
};

// The adjusted logit of an edited token, in this order: logit_bias added to the raw logit;
// the repetition penalty (divide a positive value, multiply a negative one); then
// frequency x count + presence (count > 0) subtracted. Saturates at the largest float, so a
// finite logit stays finite.
HEARTH_HOST_DEVICE inline float edited_logit(float raw, const TokenEdit& e, float repetition,
                                             float frequency, float presence) {
  float v = HEARTH_SR_ADD(raw, e.bias);
  if (e.seen && repetition != 1.0f)
    v = v > 0.0f ? HEARTH_SR_DIV(v, repetition) : HEARTH_SR_MUL(v, repetition);
  if (e.generated > 0) {
    const float penalty = HEARTH_SR_FMA(frequency, float(e.generated), presence);
    v = HEARTH_SR_SUB(v, penalty);
  }
  return v > FLT_MAX ? FLT_MAX : (v < -FLT_MAX ? -FLT_MAX : v);
}

}  // namespace hearth::sampling_rules
