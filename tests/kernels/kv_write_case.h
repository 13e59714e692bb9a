// One paged_kv_write case of the kernel tests: fresh random q, k and v rows (biases and head
// norms when the case has them), rotary frequencies, positions anywhere and distinct slots
// spread over shuffled blocks with the last token as padding (slot -1); the reference's q and
// pools, and the kernel's arguments over the same inputs on the device.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/reference.h"
#include "tests/kernels/gpu_test_util.h"

namespace hearth::test {

struct KvWriteCase {
  int n_heads, n_kv_heads, head_dim, tokens, block_size;
  bool bias, norm;
};

class KvWriteInputs {
 public:
  // k and v drawn at their own scales (the fp8 cache's rows need a spread of magnitudes).
  KvWriteInputs(const KvWriteCase& c, int blocks, float k_scale = 1.0f, float v_scale = 1.0f)
      : c_(c) {
    const int qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
    q = random_floats(size_t(c.tokens) * qd);
    k = random_floats(size_t(c.tokens) * kvd, k_scale);
    v = random_floats(size_t(c.tokens) * kvd, v_scale);
    if (c.bias) bq = random_floats(qd), bk = random_floats(kvd), bv = random_floats(kvd);
    if (c.norm) qn = random_floats(c.head_dim), kn = random_floats(c.head_dim);
    inv.resize(c.head_dim / 2);
    for (int i = 0; i < c.head_dim / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / c.head_dim);
    std::vector<int> free_slots(blocks * c.block_size);
    std::iota(free_slots.begin(), free_slots.end(), 0);
    std::shuffle(free_slots.begin(), free_slots.end(), rng());
    pos.resize(c.tokens), slot.resize(c.tokens);
    for (int i = 0; i < c.tokens; ++i) {
      pos[i] = int(rng()() % 5000);
      slot[i] = i + 1 < c.tokens ? free_slots[i] : -1;
    }
    dq_ = upload(q), dk_ = upload(k), dv_ = upload(v), dinv_ = upload(inv);
    dpos_ = upload(pos), dslot_ = upload(slot);
    if (c.bias) dbq_ = upload(bq), dbk_ = upload(bk), dbv_ = upload(bv);
    if (c.norm) dqn_ = upload(qn), dkn_ = upload(kn);
  }

  // The CPU reference into q_ref and the pools (their block stride: 0 for packed blocks).
  void reference(float* q_ref, float* k_pool, float* v_pool, int64_t block_stride = 0) const {
    ::hearth::reference::paged_kv_write(
        q.data(), k.data(), v.data(), c_.bias ? bq.data() : nullptr, c_.bias ? bk.data() : nullptr,
        c_.bias ? bv.data() : nullptr, c_.norm ? qn.data() : nullptr, c_.norm ? kn.data() : nullptr,
        inv.data(), pos.data(), slot.data(), c_.tokens, c_.n_heads, c_.n_kv_heads, c_.head_dim,
        c_.block_size, 1e-6f, q_ref, k_pool, v_pool, block_stride);
  }

  // The inputs side of the kernel's arguments; the caller adds q_out and the pools.
  kernels::PagedKvWriteArgs args() const {
    kernels::PagedKvWriteArgs a;
    a.q = dq_.get<float>(), a.k = dk_.get<float>(), a.v = dv_.get<float>();
    if (c_.bias) a.bq = dbq_.get<float>(), a.bk = dbk_.get<float>(), a.bv = dbv_.get<float>();
    if (c_.norm) a.q_norm = dqn_.get<float>(), a.k_norm = dkn_.get<float>();
    a.inv_freq = dinv_.get<float>(), a.pos = dpos_.get<int>(), a.slot = dslot_.get<int>();
    a.num_tokens = c_.tokens, a.n_heads = c_.n_heads, a.n_kv_heads = c_.n_kv_heads;
    a.head_dim = c_.head_dim, a.block_size = c_.block_size, a.eps = 1e-6f;
    return a;
  }

  std::vector<float> q, k, v, bq, bk, bv, qn, kn, inv;
  std::vector<int> pos, slot;

 private:
  KvWriteCase c_;
  DeviceBuffer dq_, dk_, dv_, dinv_, dpos_, dslot_, dbq_, dbk_, dbv_, dqn_, dkn_;
};

}  // namespace hearth::test
