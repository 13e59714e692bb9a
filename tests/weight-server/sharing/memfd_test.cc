// The memfd backend on its own: sealing on the server side, and the importer's refusal of any
// descriptor that is not a sealed memfd of the size the manifest gives (a hostile or broken
// server must not be able to crash a worker or change weights under it), mapping, closing and
// checksum verification.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>

#include "tests/ipc/test_util.h"
#include "tests/support/error_of.h"
#include "tools/synth_model.h"
#include "weight-server/sharing/checksum.h"
#include "weight-server/sharing/imported_memfd_store.h"
#include "weight-server/sharing/memfd_store.h"
#include "weight-server/sharing/model_import.h"
#include "weight-server/sharing/sealed_memfd.h"
#include "weight-server/daemon/served_model.h"

namespace hearth {
namespace {

std::vector<std::byte> pattern(size_t n, int salt = 0) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte((i * 131 + salt) & 0xff);
  return out;
}

using test::error_of;

UniqueFd memfd_with(const std::vector<std::byte>& bytes, int seals) {
  UniqueFd fd(::memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::write(fd.get(), bytes.data(), bytes.size()), ssize_t(bytes.size()));
  if (seals) {
    EXPECT_EQ(::fcntl(fd.get(), F_ADD_SEALS, seals), 0);
  }
  return fd;
}

TEST(SealedMemfd, IsWrittenOnceAndCannotChange) {
  const auto bytes = pattern(10'000);
  const SealedMemfd m = SealedMemfd::create("hearth:test", bytes);
  EXPECT_EQ(m.size(), bytes.size());
  EXPECT_EQ(::fcntl(m.fd(), F_GET_SEALS), F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  const std::string content = test::read_all(m.fd());
  ASSERT_EQ(content.size(), bytes.size());
  EXPECT_EQ(std::memcmp(content.data(), bytes.data(), bytes.size()), 0);

  const char x = 'x';
  EXPECT_EQ(::pwrite(m.fd(), &x, 1, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(m.fd(), 10), 0);
  EXPECT_NE(::ftruncate(m.fd(), 20'000), 0);
  EXPECT_EQ(::mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_SHARED, m.fd(), 0),
            MAP_FAILED);
  EXPECT_NE(::fcntl(m.fd(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE), 0);  // sealed seals

  UniqueFd copy = m.duplicate();
  EXPECT_EQ(test::identity(copy.get()), test::identity(m.fd()));
  EXPECT_EQ(::fcntl(copy.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  check_sealed_memfd(copy.get(), bytes.size(), "copy");
}

TEST(SealedMemfd, ImporterRefusesAnythingElse) {
  const auto bytes = pattern(4096);
  const SealedMemfd good = SealedMemfd::create("good", bytes);
  EXPECT_NO_THROW(check_sealed_memfd(good.fd(), bytes.size(), "t"));

  EXPECT_NE(error_of([&] {
              check_sealed_memfd(good.fd(), bytes.size() + 1, "tensor 'w'");
            }).find("tensor 'w': the received memfd holds 4096 bytes, the manifest says 4097"),
            std::string::npos);
  const UniqueFd unsealed = memfd_with(bytes, 0);
  EXPECT_NE(
      error_of([&] { check_sealed_memfd(unsealed.get(), bytes.size(), "t"); }).find("not sealed"),
      std::string::npos);
  const UniqueFd write_only = memfd_with(bytes, F_SEAL_WRITE | F_SEAL_SEAL);  // could still shrink
  EXPECT_NE(error_of([&] {
              check_sealed_memfd(write_only.get(), bytes.size(), "t");
            }).find("seals: write|seal"),
            std::string::npos);
  UniqueFd no_sealing(::memfd_create("plain", MFD_CLOEXEC));  // created without MFD_ALLOW_SEALING
  ASSERT_EQ(::ftruncate(no_sealing.get(), 4096), 0);
  EXPECT_NE(error_of([&] { check_sealed_memfd(no_sealing.get(), 4096, "t"); }).find("not sealed"),
            std::string::npos);

  test::TempDir dir;
  const std::string path = dir / "file";
  { std::ofstream(path) << std::string(4096, 'a'); }
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_NE(error_of([&] { check_sealed_memfd(file.get(), 4096, "t"); }), "(no error)");
  auto [a, b] = test::socket_pair();
  EXPECT_NE(error_of([&] { check_sealed_memfd(a.get(), 0, "t"); }).find("not a memfd"),
            std::string::npos);
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  UniqueFd pr(pipe_fds[0]), pw(pipe_fds[1]);
  EXPECT_NE(error_of([&] { check_sealed_memfd(pr.get(), 0, "t"); }).find("not a memfd"),
            std::string::npos);
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_NE(error_of([&] { check_sealed_memfd(null.get(), 0, "t"); }).find("not a memfd"),
            std::string::npos);
}

class MemfdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_synthetic_model(dir_.path(), SynthOptions{});
    ServeOptions options;
    options.backend = "memfd";
    served_ = load_served_model({dir_.path(), "tiny"}, options);
    manifest_ = parse_manifest(served_->manifest);
  }
  std::vector<UniqueFd> export_all() const {
    std::vector<UniqueFd> fds;
    for (const ManifestTensor& t : manifest_.tensors)
      fds.push_back(served_->store->export_allocation(uint32_t(t.allocation)));
    return fds;
  }

  test::TempDir dir_;
  std::unique_ptr<ServedModel> served_;
  Manifest manifest_;
};

TEST_F(MemfdStoreTest, HoldsTheFileBytesInOneMemfdPerTensor) {
  const HfModel model = HfModel::open(dir_.path());
  const ExportableStore& store = *served_->store;
  EXPECT_STREQ(store.backend_name(), "memfd");
  ASSERT_EQ(store.tensors().size(), model.tensors().size());
  EXPECT_EQ(store.allocation_count(), model.tensors().size());
  for (size_t i = 0; i < model.tensors().size(); ++i) {
    const StoredTensor& t = store.tensors()[i];
    EXPECT_EQ(t.info.name, model.tensors()[i].info.name);
    EXPECT_EQ(t.alloc_id, i);
    EXPECT_EQ(std::memcmp(t.data, model.tensors()[i].data.data(), t.info.bytes), 0) << t.info.name;
  }
  EXPECT_NE(test::identity(store.export_allocation(0).get()),
            test::identity(store.export_allocation(1).get()));
  EXPECT_THROW(store.export_allocation(uint32_t(store.allocation_count())), std::out_of_range);
}

TEST_F(MemfdStoreTest, ImportMapsReadOnlyClosesDescriptorsAndOutlivesTheServer) {
  const int fds_before = test::count_open_fds();
  std::vector<UniqueFd> fds = export_all();
  EXPECT_EQ(test::count_open_fds(), fds_before + int(fds.size()));
  ImportedMemfdStore imported(manifest_, std::move(fds));
  EXPECT_EQ(test::count_open_fds(), fds_before) << "the importer must close every descriptor";
  EXPECT_EQ(imported.residence(), Residence::Host);
  EXPECT_EQ(imported.config().hidden, served_->store->config().hidden);
  verify_weights(imported, manifest_);

  served_.reset();  // the server's store, memfds and all, is gone; the mappings remain
  const StoredTensor& embed = imported.at("model.embed_tokens.weight");
  EXPECT_EQ(xxh3_checksum({static_cast<const std::byte*>(embed.data), embed.info.bytes}),
            manifest_.tensors[0].xxh3);
  verify_weights(imported, manifest_);
}

TEST_F(MemfdStoreTest, ImportRefusesWrongDescriptorsAndVerifyCatchesWrongBytes) {
  const ManifestTensor& victim = manifest_.tensors[3];
  auto with_replacement = [&](UniqueFd replacement) {
    std::vector<UniqueFd> fds = export_all();
    fds[3] = std::move(replacement);
    return fds;
  };
  const auto same_size = pattern(victim.info.bytes, 7);
  const auto wrong_size = pattern(victim.info.bytes + 4096);

  const int fds_before = test::count_open_fds();
  std::string e = error_of([&] {
    ImportedMemfdStore(manifest_, with_replacement(memfd_with(wrong_size, kRequiredWeightSeals)));
  });
  EXPECT_NE(e.find("tensor '" + victim.info.name + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("the manifest says " + std::to_string(victim.allocation_bytes)),
            std::string::npos)
      << e;
  e = error_of([&] { ImportedMemfdStore(manifest_, with_replacement(memfd_with(same_size, 0))); });
  EXPECT_NE(e.find("not sealed"), std::string::npos) << e;
  EXPECT_EQ(test::count_open_fds(), fds_before) << "descriptors leaked on a refused import";

  std::vector<UniqueFd> short_list = export_all();
  short_list.pop_back();
  EXPECT_NE(error_of([&] {
              ImportedMemfdStore(manifest_, std::move(short_list));
            }).find("descriptors for"),
            std::string::npos);

  // Sealed and of the right size, but not the bytes the server loaded: only the checksum sees it.
  ImportedMemfdStore wrong_bytes(manifest_,
                                 with_replacement(memfd_with(same_size, kRequiredWeightSeals)));
  e = error_of([&] { verify_weights(wrong_bytes, manifest_); });
  EXPECT_NE(e.find("tensor '" + victim.info.name + "': xxh3"), std::string::npos) << e;
}

}  // namespace
}  // namespace hearth
