#include "worker/engine/structured/token_trie.h"

#include <algorithm>
#include <numeric>

namespace hearth::structured {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes)
    : vocab_(int(token_bytes.size())) {
  // Tokens in byte order: each node's subtree is a contiguous run, so the trie is built in one
  // pass with a stack of the current path.
  std::vector<int32_t> order;
  for (int32_t t = 0; t < vocab_; ++t)
    if (!token_bytes[size_t(t)].empty()) order.push_back(t);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[size_t(a)] != token_bytes[size_t(b)]
               ? token_bytes[size_t(a)] < token_bytes[size_t(b)]
               : a < b;
  });
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Node> nodes(1);
  for (int32_t t : order) {
    uint32_t n = 0;
    for (char c : token_bytes[size_t(t)]) {
      auto& kids = nodes[n].children;
      if (!kids.empty() && kids.back().first == uint8_t(c)) {
        n = kids.back().second;  // sorted input: an existing child is always the last one
      } else {
        const uint32_t fresh = uint32_t(nodes.size());
        kids.emplace_back(uint8_t(c), fresh);
        nodes.emplace_back();
        n = fresh;
      }
    }
    nodes[n].tokens.push_back(t);
  }
  child_begin_.reserve(nodes.size() + 1);
  token_begin_.reserve(nodes.size() + 1);
  for (const Node& node : nodes) {
    child_begin_.push_back(uint32_t(edge_byte_.size()));
    token_begin_.push_back(uint32_t(token_ids_.size()));
    for (auto [b, child] : node.children) {
      edge_byte_.push_back(b);
      edge_node_.push_back(child);
    }
    token_ids_.insert(token_ids_.end(), node.tokens.begin(), node.tokens.end());
  }
  child_begin_.push_back(uint32_t(edge_byte_.size()));
  token_begin_.push_back(uint32_t(token_ids_.size()));
}

void TokenTrie::allowed(const ByteDfa& dfa, int32_t state, std::span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
  std::vector<std::pair<uint32_t, int32_t>> stack{{0u, state}};
  while (!stack.empty()) {
    const auto [node, s] = stack.back();
    stack.pop_back();
    if (node != 0)
      for (uint32_t i = token_begin_[node]; i < token_begin_[node + 1]; ++i) {
        const int32_t t = token_ids_[i];
        mask[size_t(t) / 32] |= 1u << (t % 32);
      }
    for (uint32_t e = child_begin_[node]; e < child_begin_[node + 1]; ++e) {
      const int32_t next = dfa.next(s, edge_byte_[e]);
      if (next != ByteDfa::kDead) stack.emplace_back(edge_node_[e], next);
    }
  }
}

}  // namespace hearth::structured
