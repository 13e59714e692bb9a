// KV chunks (issue 22): their size (whole blocks, 2 MiB-aligned), and what a worker accepts as
// a chunk: a memfd of exactly the leased size that nobody can grow or shrink; and a range that
// maps chunks one after another so that a block is a base + index.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "weight-server/sharing/kv_chunk.h"

namespace hearth {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

TEST(KvChunk, SizeIsWholeBlocksAndWhole2MiB) {
  // Blocks of 2 MiB and more (8B bf16, 16 tokens) come at least 8 to a chunk.
  EXPECT_EQ(kv_chunk_bytes_for(2 * kMiB), 16 * kMiB);
  EXPECT_EQ(kv_chunk_bytes_for(3 * kMiB), 24 * kMiB);      // 6 MiB holds 2: four of those
  EXPECT_EQ(kv_chunk_bytes_for(5 * kMiB), 40 * kMiB);      // 80 layers (70B bf16)
  EXPECT_EQ(kv_chunk_bytes_for(200 * kMiB), 1000 * kMiB);  // 1 GiB stops it at 5
  EXPECT_EQ(kv_chunk_bytes_for(kMiB), 2 * kMiB);           // smaller blocks: the 2 MiB multiple
  EXPECT_EQ(kv_chunk_bytes_for(163840), 10 * kMiB);        // the tiny model: 64 blocks
  EXPECT_EQ(kv_chunk_bytes_for(4096), 2 * kMiB);
  EXPECT_THROW(kv_chunk_bytes_for(0), std::runtime_error);
  EXPECT_THROW(kv_chunk_bytes_for(1000003), std::runtime_error);  // odd: a chunk of ~2 TB
}

TEST(KvChunk, AWorkerAcceptsOnlyASealedMemfdOfTheLeasedSize) {
  UniqueFd chunk = create_kv_chunk_memfd(2 * kMiB, "test");
  EXPECT_NO_THROW(check_kv_chunk_memfd(chunk.get(), 2 * kMiB, "chunk"));
  EXPECT_THROW(check_kv_chunk_memfd(chunk.get(), 4 * kMiB, "chunk"), std::runtime_error);
  EXPECT_NE(::ftruncate(chunk.get(), kMiB), 0);  // sealed against shrinking

  UniqueFd unsealed(::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_EQ(::ftruncate(unsealed.get(), 2 * kMiB), 0);
  try {
    check_kv_chunk_memfd(unsealed.get(), 2 * kMiB, "chunk 7");
    ADD_FAILURE() << "accepted an unsealed memfd";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 7: the received KV chunk is not sealed"),
              std::string::npos)
        << e.what();
  }
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  UniqueFd r(pipe_fds[0]), w(pipe_fds[1]);
  EXPECT_THROW(check_kv_chunk_memfd(r.get(), 2 * kMiB, "pipe"), std::runtime_error);
}

TEST(KvChunk, ARangeMapsChunksOneAfterAnother) {
  std::unique_ptr<KvChunkRange> range = reserve_memfd_kv_range(6 * kMiB);
  std::vector<std::unique_ptr<KvChunkMemory>> chunks;
  for (int i = 0; i < 3; ++i) {
    chunks.push_back(create_memfd_kv_chunk(2 * kMiB, "c" + std::to_string(i)));
    range->map(uint64_t(i) * 2 * kMiB, chunks.back()->export_fd().get(), 2 * kMiB, "chunk");
  }
  // One write across the boundary of chunks 0 and 1 lands in both files.
  std::memset(range->base() + 2 * kMiB - 8, 0x7b, 16);
  for (int i = 0; i < 2; ++i) {
    UniqueFd fd = chunks[i]->export_fd();
    unsigned char b = 0;
    ASSERT_EQ(::pread(fd.get(), &b, 1, i == 0 ? off_t(2 * kMiB - 1) : 0), 1);
    EXPECT_EQ(b, 0x7b);
  }
  EXPECT_THROW(range->map(6 * kMiB, chunks[0]->export_fd().get(), 2 * kMiB, "past the end"),
               std::runtime_error);
  range->unmap(2 * kMiB, 2 * kMiB);
}

// Another worker's chunk (shared prefix KV): mapped read-only, it shows what the owner wrote,
// and the mapping does not let this process write.
TEST(KvChunk, ARangeMapsAnotherWorkersChunkReadOnly) {
  std::unique_ptr<KvChunkMemory> chunk = create_memfd_kv_chunk(2 * kMiB, "theirs");
  std::unique_ptr<KvChunkRange> owner = reserve_memfd_kv_range(2 * kMiB);
  owner->map(0, chunk->export_fd().get(), 2 * kMiB, "own");
  std::memset(owner->base() + 4096, 0x3c, 64);
  std::unique_ptr<KvChunkRange> reader = reserve_memfd_kv_range(4 * kMiB);
  reader->map_read_only(2 * kMiB, chunk->export_fd().get(), 2 * kMiB, "theirs");
  const std::byte* p = reader->base() + 2 * kMiB + 4096;
  EXPECT_EQ(p[63], std::byte(0x3c));
  // The mapping's own flags: readable, shared, not writable.
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::string perms;
  for (std::string line; std::getline(maps, line);) {
    const uintptr_t lo = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    const uintptr_t hi = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    if (at >= lo && at < hi) perms = line.substr(line.find(' ') + 1, 4);
  }
  EXPECT_EQ(perms, "r--s");
  EXPECT_THROW(reader->map_read_only(4 * kMiB, chunk->export_fd().get(), 2 * kMiB, "past the end"),
               std::runtime_error);
}

}  // namespace
}  // namespace hearth
