// A batched proof run: every run (prompt x profile x repeat) is one request of a
// `hearth-worker --requests` that runs them all at once in one engine. Profiles whose engine
// options agree share a worker; each other set of engine options gets its own, one worker after
// another (so two never compete for the device). Each request's events are split back into the
// run's own files and result, exactly as an alone run leaves them, so the report, its contracts
// and `diff` read batched and alone runs alike.
#pragma once

#include <vector>

#include "proof/runner.h"

namespace hearth::proof {

// One result per spec, in the specs' order. A request the worker refuses or fails is an error
// for that run alone. A worker that crashes, hangs past the timeout (which bounds the whole
// worker) or writes a malformed stream fails every one of its requests, each with the reason
// (and whether the request had finished first); an interrupt kills it and marks the workers not
// started "not run".
std::vector<RunResult> run_batched(const std::vector<RunSpec>& specs, const Suite& suite,
                                   const std::vector<ProofProfile>& profiles,
                                   const RunnerOptions& options);

}  // namespace hearth::proof
