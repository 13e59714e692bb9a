// Which hearth-proof this is: the project version and the git commit it was built from
// ("-dirty" when the tree had local changes), recorded in every report.
#pragma once

#include <string>

namespace hearth::proof {

std::string hearth_version();
std::string build_git_commit();

}  // namespace hearth::proof
