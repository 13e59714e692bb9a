// How a batched proof run maps onto workers. A profile is request settings (sampling, seed,
// max_tokens, ...) plus engine options (backend, KV pool, batch limits, kernel choices): request
// settings travel with each request, engine options belong to the worker. Profiles whose engine
// options agree share one worker; each other set of engine options gets its own.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proof/profile_set.h"

namespace hearth::proof {

struct ProfileParts {
  nlohmann::json request;  // the keys a request may carry, with the profile's values
  nlohmann::json engine;   // every other setting but "name"
};

// Classified by the worker's own rules: a key that `apply_request_json` takes is a request
// setting; one it refuses is an engine option (so a new option is classified without a change
// here).
ProfileParts split_profile(const nlohmann::json& settings);

struct BatchedWorker {
  std::vector<size_t> profiles;  // indices into the run's profiles, in order
  nlohmann::json engine_options;
};

// One worker per distinct set of engine options, in the order the profiles first use them.
std::vector<BatchedWorker> plan_batched_workers(const std::vector<ProofProfile>& profiles);

// The engine options in which `b` differs from `a`, as "key a -> b, ...": why a profile got a
// worker of its own.
std::string engine_option_differences(const nlohmann::json& a, const nlohmann::json& b);

// What a report records of the plan: per worker its profiles' labels and its engine options.
nlohmann::json batched_workers_json(const std::vector<BatchedWorker>& workers,
                                    const std::vector<ProofProfile>& profiles);

}  // namespace hearth::proof
