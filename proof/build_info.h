// Which hearth-proof this is: the project version and the git commit it was built from
// ("-dirty" when the tree had local changes), recorded in every report.
#pragma once

#include <string>

namespace hearth::proof {

std::string hearth_version();
// HEARTH_COMMIT from the environment when set and not empty (a copy of the tree without .git,
// as on the device machine, knows its commit only from whoever copied it); else the commit the
// build recorded, "unknown (no git checkout)" when the source tree was not a checkout's top.
std::string build_git_commit();

}  // namespace hearth::proof
