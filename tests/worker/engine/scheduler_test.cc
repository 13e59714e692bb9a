// The scheduler alone, on hand-made sequences: decodes before prompt chunks, the token budget,
// FIFO admission bounded by max_running and the pool, and preemption of the newest sequence.
#include <gtest/gtest.h>

#include <memory>

#include "worker/engine/scheduler.h"

namespace hearth {
namespace {

struct Fixture {
  Fixture(int blocks, int block_size, SchedulerOptions options, bool prefix_cache = false)
      : kv(blocks, block_size, prefix_cache), scheduler(options, kv) {}
  Sequence& add(int prompt) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size() + 1;
    s->tokens.assign(prompt, 1);
    s->prompt_tokens = prompt;
    scheduler.add(*s);
    seqs.push_back(std::move(s));
    return *seqs.back();
  }
  // Runs a schedule as the engine would: computed tokens advance, a sampled token is appended.
  Schedule step() {
    Schedule s = scheduler.schedule();
    for (const ScheduledChunk& c : s.chunks) {
      c.seq->computed = c.start + c.count;
      kv.cache_full_blocks(*c.seq, c.start, c.seq->computed);
      if (c.wants_logits()) c.seq->tokens.push_back(2);
    }
    return s;
  }
  KvCacheManager kv;
  Scheduler scheduler;
  std::vector<std::unique_ptr<Sequence>> seqs;
};

std::vector<std::pair<SequenceId, int>> shape(const Schedule& s) {
  std::vector<std::pair<SequenceId, int>> out;
  for (const ScheduledChunk& c : s.chunks) out.emplace_back(c.seq->id, c.count);
  return out;
}

using Shape = std::vector<std::pair<SequenceId, int>>;

TEST(Scheduler, LongPromptsAreChunkedBehindDecodes) {
  Fixture f(100, 4, {10, 8});
  f.add(3);
  f.add(25);
  EXPECT_EQ(shape(f.step()), (Shape{{1, 3}, {2, 7}}));  // both admitted, the budget split
  EXPECT_EQ(shape(f.step()), (Shape{{1, 1}, {2, 9}}));  // the decode first, then the chunk
  EXPECT_EQ(shape(f.step()), (Shape{{1, 1}, {2, 9}}));
  f.add(5);
  EXPECT_EQ(shape(f.step()), (Shape{{1, 1}, {2, 1}, {3, 5}}));  // 2 now decodes; 3 admitted
}

// decode_step_tokens: prompts alone take the whole budget; beside decodes they are cut so the
// step holds at most decode_step_tokens, decodes included; decodes are never cut by it.
TEST(Scheduler, PromptChunksBesideDecodesStayWithinTheDecodeStepBudget) {
  Fixture f(100, 4, {20, 8, 6});
  f.add(3);
  f.add(25);
  EXPECT_EQ(shape(f.step()), (Shape{{1, 3}, {2, 17}}));  // no decode yet: the whole budget
  EXPECT_EQ(shape(f.step()), (Shape{{1, 1}, {2, 5}}));   // one decode: 6 in all
  f.add(9);
  EXPECT_EQ(shape(f.step()), (Shape{{1, 1}, {2, 3}, {3, 2}}));  // 2 ends its prompt; 3 admitted
  EXPECT_EQ(shape(f.step()), (Shape{{1, 1}, {2, 1}, {3, 4}}));
  // Decodes past the decode-step budget all run; prompt chunks wait for room.
  Fixture g(100, 4, {20, 8, 2});
  for (int i = 0; i < 3; ++i) g.add(2);
  EXPECT_EQ(shape(g.step()), (Shape{{1, 2}, {2, 2}, {3, 2}}));
  g.add(5);
  EXPECT_EQ(shape(g.step()), (Shape{{1, 1}, {2, 1}, {3, 1}}));
}

TEST(Scheduler, MaxRunningAndThePoolMakeSequencesWaitInOrder) {
  Fixture f(3, 4, {100, 2});
  f.add(4);
  f.add(4);
  f.add(1);
  EXPECT_EQ(shape(f.step()), (Shape{{1, 4}, {2, 4}}));  // max_running 2
  EXPECT_EQ(f.scheduler.waiting(), 1);
  f.scheduler.remove(*f.seqs[0]);
  // Sequence 1 leaves: 2's decode takes a second block, and 3 is admitted into the last one.
  EXPECT_EQ(shape(f.step()), (Shape{{2, 1}, {3, 1}}));
  EXPECT_EQ(f.kv.pool().used(), 3);
}

TEST(Scheduler, ARunningSequenceOutOfBlocksPreemptsTheNewest) {
  Fixture f(4, 2, {100, 8});
  f.add(3);
  f.add(3);
  EXPECT_EQ(shape(f.step()), (Shape{{1, 3}, {2, 3}}));  // 2 blocks each: the pool is full
  EXPECT_EQ(f.kv.pool().free(), 0);
  // Both now hold 4 tokens, 3 computed; position 3 still fits their second block.
  EXPECT_EQ(shape(f.step()), (Shape{{1, 1}, {2, 1}}));
  // Position 4 needs a third block each: sequence 1 preempts sequence 2 (the newest) and runs.
  Schedule s = f.step();
  EXPECT_EQ(shape(s), (Shape{{1, 1}}));
  ASSERT_EQ(s.preempted.size(), 1u);
  EXPECT_EQ(s.preempted[0]->id, 2u);
  EXPECT_EQ(f.seqs[1]->computed, 0);
  EXPECT_EQ(f.seqs[1]->preemptions, 1);
  EXPECT_EQ(f.scheduler.preemptions(), 1u);
  EXPECT_EQ(f.scheduler.waiting(), 1);
  f.scheduler.remove(*f.seqs[0]);
  // Sequence 2 comes back first in the queue, recomputing all 5 of its tokens.
  EXPECT_EQ(shape(f.step()), (Shape{{2, 5}}));
}

TEST(Scheduler, TheSameSubmissionsGiveTheSameSchedule) {
  auto trace = [] {
    Fixture f(6, 4, {7, 3});
    for (int p : {5, 9, 2, 11, 4}) f.add(p);
    std::vector<Shape> steps;
    for (int i = 0; i < 30; ++i) {
      steps.push_back(shape(f.step()));
      for (auto& s : f.seqs)
        if (s->status == SequenceStatus::Running && s->generated() >= 6) f.scheduler.remove(*s);
    }
    return steps;
  };
  EXPECT_EQ(trace(), trace());
}

// Prefix caching: a waiting sequence whose next block another sequence completes this step
// waits at the head of the queue, then starts where the cache leaves it.
TEST(Scheduler, ASequenceWaitsAStepForABlockBeingComputed) {
  Fixture f(32, 4, {64, 8}, /*prefix_cache=*/true);
  Sequence& a = f.add(13);
  Sequence& b = f.add(13);  // the same tokens
  Sequence& c = f.add(5);
  EXPECT_EQ(shape(f.step()), (Shape{{a.id, 13}}));  // b would compute what a computes; c waits
  EXPECT_EQ(f.scheduler.waiting(), 2);
  const Schedule s = f.step();
  EXPECT_EQ(shape(s), (Shape{{a.id, 1}, {b.id, 1}, {c.id, 1}}));  // c's first block is a's too
  EXPECT_EQ(s.chunks[1].start, 12);
  EXPECT_EQ(b.cached_prompt_tokens, 12);
  EXPECT_EQ(c.cached_prompt_tokens, 4);
  EXPECT_EQ(f.scheduler.prefix_cache_hits(), 16u);
  EXPECT_EQ(f.scheduler.prefix_cache_queries(), 13u + 13 + 5);
}

// A running sequence in its prompt looks again before each chunk: blocks another sequence
// computed meanwhile are taken, its own partly computed block swapped for the cached one.
TEST(Scheduler, APromptLooksAgainBeforeEachChunk) {
  Fixture f(32, 4, {6, 8}, /*prefix_cache=*/true);
  Sequence& b = f.add(13);
  EXPECT_EQ(shape(f.step()), (Shape{{b.id, 6}}));
  // Meanwhile another engine user computed and released the same 12 tokens.
  Sequence other;
  other.id = 99;
  other.tokens = b.tokens;
  other.prompt_tokens = 13;
  ASSERT_TRUE(f.kv.allocate(other.id, 12));
  f.kv.cache_full_blocks(other, 0, 12);
  const int32_t cached_block1 = f.kv.block_table(other.id)[1];
  f.kv.free(other.id);
  const Schedule s = f.step();
  EXPECT_EQ(shape(s), (Shape{{b.id, 1}}));
  EXPECT_EQ(s.chunks[0].start, 12);
  EXPECT_EQ(f.kv.block_table(b.id)[1], cached_block1);
  EXPECT_EQ(b.cached_prompt_tokens, 6);
  EXPECT_EQ(f.scheduler.prefix_cache_hits(), 6u);
}

TEST(Scheduler, RefusesOptionsThatCannotMakeProgress) {
  KvCacheManager kv(1, 1);
  EXPECT_THROW(Scheduler({0, 1}, kv), std::runtime_error);
  EXPECT_THROW(Scheduler({1, 0}, kv), std::runtime_error);
  EXPECT_THROW(Scheduler({1, 1, -1}, kv), std::runtime_error);
}

}  // namespace
}  // namespace hearth
