// The cache domain: one key per engine that covers everything engine-wide that changes the bits
// of a KV block, so cached blocks are only ever found by an engine that would have computed the
// same bits (prefix_cache.h roots every chain in it).
//
// It covers the model's identity (the worker's; served mode: the manifest's tensor checksums),
// the resolved backend (the cpu backend computes in fp32, the cuda one in bf16/f16), and the
// engine options that change numerics: cuda_engine, kv_cache_dtype, decode_gemv,
// batch_invariant, weights_layout (the last believed bit-neutral, but cheap to keep apart) and
// tensor_parallel above 1 (its split sums round differently).
// The weights' dtype is part of the model identity. With batch_invariant off a block's bits
// depend on what shared its steps, so a hit gives a block as good as a recomputed one but not
// the same bits; that engine promises no bit-identity anyway. Left out because they change no bits:
// matmul_tiling (every tiling gives the same bits), cuda_graphs, the batch and pool limits (the
// kernels are batch- and chunk-invariant) and context_length; kv_block_size shapes the chain
// itself.
//
// Today a cache lives and dies with one engine, whose domain never changes; the domain is what
// keeps keys meaningful once blocks are shared beyond one engine (planned: a prefix's KV
// computed once per GPU and read by every worker with the same numerics).
#pragma once

#include <string_view>

#include "worker/engine/engine_options.h"
#include "worker/engine/prefix_cache.h"

namespace hearth {

BlockKey cache_domain_key(const EngineOptions& options, std::string_view backend_name,
                          std::string_view model_identity);

// The key under which tensor-parallel rank `rank`'s pool shares its piece (its KV heads) of what
// `key` names for the whole engine: its domain, a chain's root, a block. A rank's piece is only
// ever found by the same rank of an engine of the same domain.
BlockKey rank_key(const BlockKey& key, int rank);

}  // namespace hearth
