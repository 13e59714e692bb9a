// The commit a report records: proof/build_version.cmake names a commit only for the top of a
// git checkout (a copy of the tree without .git inside another repository must not borrow that
// repository's commit), and HEARTH_COMMIT in the environment overrides what the build recorded.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <string>

#include "proof/build_info.h"
#include "proof_test_util.h"

namespace hearth::proof {
namespace {

using namespace hearth::proof::testing;

// What build_version.cmake records for `source` (the define's quoted value).
std::string recorded_commit(const fs::path& source, const fs::path& scratch) {
  const fs::path header = scratch / "build_version.h";
  const CommandResult r =
      run_command({HEARTH_CMAKE_COMMAND, "-DSOURCE_DIR=" + source.string(),
                   "-DOUTPUT=" + header.string(), "-DVERSION=0.0.0", "-P",
                   (fs::path(HEARTH_SOURCE_DIR) / "proof/build_version.cmake").string()},
                  scratch);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  // Read by hand, not with <regex>: GCC 12's -Wmaybe-uninitialized fires inside <regex> at the
  // sanitizer build's -O1 (a false positive that -Werror turns into a failed build).
  const std::string text = read_file(header);
  const std::string define = "HEARTH_PROOF_GIT_COMMIT \"";
  const size_t begin = text.find(define);
  if (begin == std::string::npos) return "";
  const size_t value = begin + define.size(), end = text.find('"', value);
  return end == std::string::npos ? "" : text.substr(value, end - value);
}

bool is_full_commit_id(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool git(const std::vector<std::string>& args, const fs::path& scratch) {
  std::vector<std::string> argv{"git", "-c", "user.name=hearth", "-c", "user.email=hearth@test"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, scratch).exit_code() == 0;
}

TEST(BuildVersion, ATreeInsideAnotherRepositoryRecordsNoCommit) {
  TempDir dir;
  if (!git({"--version"}, dir.path())) GTEST_SKIP() << "no git on this machine";
  const fs::path repo = dir / "repo", copy = repo / "copy-without-git";
  fs::create_directories(copy);
  ASSERT_TRUE(git({"init", "-q", repo.string()}, dir.path()));
  ASSERT_TRUE(git({"-C", repo.string(), "commit", "-q", "--allow-empty", "-m", "x"}, dir.path()));

  // The repository's own top names its commit; the copy inside it must not.
  EXPECT_TRUE(is_full_commit_id(recorded_commit(repo, dir.path())));
  EXPECT_EQ(recorded_commit(copy, dir.path()), "unknown (no git checkout)");
}

TEST(BuildVersion, ATreeOutsideAnyRepositoryRecordsNoCommit) {
  TempDir dir;
  fs::create_directories(dir / "tree");
  EXPECT_EQ(recorded_commit(dir / "tree", dir.path()), "unknown (no git checkout)");
}

TEST(BuildInfo, HearthCommitInTheEnvironmentOverridesTheBuildsCommit) {
  ASSERT_EQ(::unsetenv("HEARTH_COMMIT"), 0);
  const std::string built = build_git_commit();
  EXPECT_FALSE(built.empty());
  ASSERT_EQ(::setenv("HEARTH_COMMIT", "0123abc", 1), 0);
  EXPECT_EQ(build_git_commit(), "0123abc");
  ASSERT_EQ(::setenv("HEARTH_COMMIT", "", 1), 0);  // set but empty: as if unset
  EXPECT_EQ(build_git_commit(), built);
  ASSERT_EQ(::unsetenv("HEARTH_COMMIT"), 0);
}

}  // namespace
}  // namespace hearth::proof
