// hearth-worker: runs one prompt, or a file of requests together in one engine, through a model
// and streams the generated tokens, either on a model directory of its own (single-process mode)
// or on weights a hearth-server shares.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ipc/cli_checks.h"
#include "ipc/cli_values.h"
#include "ipc/main_guard.h"
#include "base/read_file.h"
#include "worker/engine/backend_factory.h"
#include "worker/engine/engine.h"
#include "worker/engine/model_weights.h"
#include "worker/prompt_file.h"
#include "worker/engine/profile.h"
#include "worker/engine_server.h"
#include "worker/output_sink.h"
#include "worker/request_file.h"
#include "worker/startup_timeline.h"
#include "tokenizer/tokenizer.h"
#include "worker/leased_kv_factory.h"
#include "weight-server/sharing/model_import.h"
#include "weight-server/sharing/vmm_backend.h"
#include "worker/worker_model.h"
#include "worker/tp/tp_backend.h"

namespace {

using json = nlohmann::json;
using hearth::Profile;

// --idle-exit's bound: about 11.6 days, far from any overflow of a clock's milliseconds.
constexpr double kMaxIdleExitSeconds = 1e6;

void write_logits(const std::string& path, std::span<const float> logits, int prompt_tokens) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error(path + ": cannot open for writing");
  out << json{{"prompt_tokens", prompt_tokens},
              {"logits", std::vector<float>(logits.begin(), logits.end())}}
             .dump()
      << "\n";
  if (!out) throw std::runtime_error(path + ": write failed");
}

// Runs the prompt alone to capture the logits at its last position, for reference checks.
void dump_prompt_logits(hearth::Backend& backend, const std::vector<int32_t>& prompt,
                        const std::string& path) {
  write_logits(path, hearth::forward_alone(backend, prompt), int(prompt.size()));
}

// A request the engine never ran: its one and final output says why.
hearth::RequestOutput refused(const std::string& id, const std::string& why, int prompt_tokens) {
  hearth::RequestOutput out;
  out.id = id;
  out.finish.emplace();
  out.finish->reason = hearth::FinishReason::Error;
  out.finish->error = why;
  out.finish->prompt_tokens = prompt_tokens;
  return out;
}

// Steps the engine until every request has ended, streaming outputs as they come. Returns the
// first error a request ended with ("" if none).
std::string drain(hearth::Engine& engine, hearth::OutputSink& sink) {
  std::string first_error;
  while (engine.has_work())
    for (const hearth::RequestOutput& out : engine.step()) {
      sink.write(out);
      if (out.finish && out.finish->reason == hearth::FinishReason::Error && first_error.empty())
        first_error = out.finish->error;
    }
  return first_error;
}

int run(int argc, char** argv) {
  const auto process_start = std::chrono::steady_clock::now();
  CLI::App app{
      "hearth-worker: generate from a model, alone or on a hearth-server's shared weights"};
  app.set_version_flag("--version", "hearth-worker 0.1.0");
  std::string model_arg, prompt, prompt_tokens, profile_path, format = "text", dump_logits;
  std::string requests_path, serve_socket;
  std::string idle_exit_arg = "0";
  bool quiet = false;
  std::vector<std::string> settings, stops;
  Profile flags;                          // values given on the command line
  std::string backend_flag, layout_flag;  // enum options, read by the profile's parser
  std::string server_socket;
  bool verify_weights = false;
  app.add_option("--model", model_arg,
                 "model directory (single-process mode), or with --server the served model's name")
      ->required();
  auto* server_opt =
      app.add_option("--server", server_socket,
                     "hearth-server socket: run on the weights it shares (served mode)");
  app.add_flag("--verify-weights", verify_weights,
               "served mode: check the xxh3 of every imported tensor against the manifest")
      ->needs(server_opt);
  std::string quantize = "none";
  app.add_option("--quantize", quantize,
                 "single-process mode: none | fp8, the decoder projections quantized to e4m3 "
                 "with per-channel scales at load (as hearth-server --quantize fp8 does)")
      ->check(CLI::IsMember({"none", "fp8"}))
      ->excludes(server_opt);
  uid_t server_uid = 0;
  auto* server_uid_opt =
      app.add_option("--server-uid", server_uid,
                     "served mode: the uid the server must run as (default: yours, root's, or "
                     "the owner of a socket directory only it can write to)")
          ->needs(server_opt)
          ->check(CLI::Range(uid_t{0}, uid_t(-2)));
  auto* prompt_opt =
      app.add_option("--prompt", prompt,
                     "prompt text (special tokens added as the tokenizer's post-processor says)");
  auto* tokens_opt = app.add_option("--prompt-tokens", prompt_tokens,
                                    "prompt as comma-separated token ids, used exactly");
  std::string prompt_file;
  auto* file_opt = app.add_option("--prompt-file", prompt_file,
                                  "prompt text from a file, or - for stdin, exactly as given "
                                  "(for prompts too long for the command line)");
  prompt_opt->excludes(tokens_opt)->excludes(file_opt);
  tokens_opt->excludes(file_opt);
  auto* requests_opt = app.add_option(
      "--requests", requests_path,
      "JSONL file of requests run together in one engine: one object per line with \"id\", "
      "\"prompt\" or \"prompt_tokens\", and any request setting; writes JSONL events with ids");
  requests_opt->excludes(prompt_opt)->excludes(tokens_opt)->excludes(file_opt);
  auto* serve_opt = app.add_option(
      "--serve", serve_socket,
      "serve requests from many clients on this socket (submit, events, cancel over the hearth "
      "protocol) until idle or SIGTERM");
  serve_opt->excludes(prompt_opt)->excludes(tokens_opt)->excludes(requests_opt)->excludes(file_opt);
  app.add_option("--idle-exit", idle_exit_arg,
                 "--serve: exit after this many seconds with no request in flight, 0 (never) or "
                 "0.001 to 1000000")
      ->needs(serve_opt)
      ->check(CLI::Validator(
          [](std::string& s) {
            return hearth::parse_seconds(s, kMaxIdleExitSeconds)
                       ? ""
                       : "'" + s + "' is not 0 or a number of seconds from 0.001 to 1000000";
          },
          "SECONDS"));
  size_t event_buffer_kb = hearth::ipc::kDefaultMaxQueuedEventBytes >> 10;
  app.add_option("--event-buffer-kb", event_buffer_kb,
                 "--serve: undelivered events per client, in KiB, beyond which its requests wait "
                 "until it reads")
      ->needs(serve_opt)
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_flag("--quiet", quiet, "--serve: no log lines on stderr");
  app.add_option("--profile", profile_path, "profile JSON file (flags override it)");
  auto* max_opt =
      app.add_option("--max-tokens", flags.request.max_tokens, "tokens to generate at most")
          ->check(hearth::integer_in(0, hearth::kMaxTokensLimit));
  auto* temp_opt =
      app.add_option("--temperature", flags.request.sampling.temperature, "0 = greedy");
  auto* topk_opt = app.add_option("--top-k", flags.request.sampling.top_k, "0 = off")
                       ->check(hearth::integer_in(0, hearth::kMaxTopK));
  auto* topp_opt = app.add_option("--top-p", flags.request.sampling.top_p, "1 = off");
  auto* minp_opt = app.add_option("--min-p", flags.request.sampling.min_p, "0 = off");
  auto* rep_opt =
      app.add_option("--repetition-penalty", flags.request.sampling.repetition_penalty, "1 = off");
  // NaN would reach the profile as JSON null: refused here, where the flag can be named.
  const CLI::Validator finite([](std::string& s) { return hearth::finite_number_error(s); },
                              "NUMBER");
  for (CLI::Option* o : {temp_opt, topp_opt, minp_opt, rep_opt}) o->check(finite);
  std::string seed;
  auto* seed_opt = app.add_option("--seed", seed, "sampling seed, 0 to 2^64-1")
                       ->check(CLI::Validator(
                           [](std::string& s) {
                             return hearth::parse_unsigned(s) ? "" : "'" + s + "' is not a seed";
                           },
                           "UINT64"));
  auto* ctx_opt = app.add_option("--context-length", flags.engine.context_length, "KV cache length")
                      ->check(hearth::integer_in(0, hearth::kMaxContextLength));
  auto* backend_opt = app.add_option("--backend", backend_flag, "auto | cpu | cuda");
  auto* layout_opt = app.add_option("--weights-layout", layout_flag,
                                    "cuda, single-process: per-tensor (VMM, default) | packed");
  app.add_option("--stop", stops, "stop string (repeatable)");
  app.add_option("--set", settings, "any profile key, as key=value (repeatable)");
  auto* format_opt =
      app.add_option("--format", format, "text | jsonl (--requests: jsonl only, the default)")
          ->check(CLI::IsMember({"text", "jsonl"}));
  app.add_option("--dump-logits", dump_logits, "write the prompt's last-position logits as JSON");
  CLI11_PARSE(app, argc, argv);

  if (*serve_opt) hearth::block_stop_signals();  // before any thread starts: serve() waits for them
  if (!*prompt_opt && !*tokens_opt && !*file_opt && !*requests_opt && !*serve_opt)
    throw std::runtime_error(
        "give --prompt, --prompt-file, --prompt-tokens, --requests or --serve");
  if (*serve_opt && !dump_logits.empty())
    throw std::runtime_error("--dump-logits needs a single prompt");
  if (*requests_opt) {
    if (*format_opt && format != "jsonl")
      throw std::runtime_error(
          "--requests writes JSONL events: --format text cannot say which "
          "request a token belongs to");
    if (!dump_logits.empty()) throw std::runtime_error("--dump-logits needs a single prompt");
    format = "jsonl";
  }
  if (*file_opt) prompt = hearth::read_prompt_file(prompt_file);

  Profile profile = profile_path.empty() ? Profile{} : hearth::load_profile_file(profile_path);
  for (const std::string& s : settings) hearth::apply_profile_setting(profile, s);
  // Flags go through the same validation as profile keys.
  json overrides = json::object();
  if (*max_opt) overrides["max_tokens"] = flags.request.max_tokens;
  if (*temp_opt) overrides["temperature"] = flags.request.sampling.temperature;
  if (*topk_opt) overrides["top_k"] = flags.request.sampling.top_k;
  if (*topp_opt) overrides["top_p"] = flags.request.sampling.top_p;
  if (*minp_opt) overrides["min_p"] = flags.request.sampling.min_p;
  if (*rep_opt) overrides["repetition_penalty"] = flags.request.sampling.repetition_penalty;
  if (*seed_opt) overrides["seed"] = *hearth::parse_unsigned(seed);
  if (*ctx_opt) overrides["context_length"] = flags.engine.context_length;
  if (*backend_opt) overrides["backend"] = backend_flag;
  if (*layout_opt) overrides["weights_layout"] = layout_flag;
  if (!stops.empty()) overrides["stop"] = stops;
  hearth::apply_profile_json(profile, overrides, "command line");

  // Served vmm weights run on the CUDA engine: its set-up starts as soon as the device is known
  // and runs while the descriptors arrive and are mapped.
  std::shared_ptr<hearth::CudaWarmup> warmup;
  // Where served vmm weights (and so the leased KV chunks) live: rank r's on served_devices[r].
  std::vector<int> served_devices = {0};
  hearth::ServedModelOptions served{verify_weights};
  if (*server_uid_opt) served.server_uid = server_uid;
  // Tensor-parallel processes: this worker is rank 0 and imports only its pieces.
  if (profile.engine.tensor_parallel_processes && profile.engine.tensor_parallel > 1)
    served.rank = 0;
  served.on_device = [&](const hearth::Manifest& manifest, int device) {
    served_devices = manifest.tensor_parallel > 1 ? hearth::vmm_devices_for_ranks(manifest)
                                                  : std::vector<int>{device};
    if (profile.engine.backend == hearth::BackendKind::Cpu) return;
    for (const hearth::ManifestTensor& t : manifest.tensors)
      if (t.info.name == hearth::kEmbeddingWeight)
        warmup = hearth::start_cuda_warmup(device, t.info.dtype);
  };
  hearth::StartupTimeline timeline(process_start);
  const auto opening = std::chrono::steady_clock::now();
  hearth::WorkerModel model = *server_opt
                                  ? hearth::attach_served_model(server_socket, model_arg, served)
                                  : hearth::open_model_dir(model_arg, quantize == "fp8");
  if (model.server) {
    // The import's steps follow one another; their durations place them on the timeline.
    const hearth::ImportTimings& t = model.import_timings;
    double at = model.connect_ms;
    timeline.mark_after("connect_ms", opening, at);
    timeline.mark_after("manifest_ms", opening, at += t.manifest_ms);
    if (t.gpu_ms > 0) timeline.mark_after("gpu_ms", opening, at += t.gpu_ms);
    timeline.mark_after("import_ms", opening, at += t.import_ms);
    timeline.mark_after("map_ms", opening, at += t.map_ms);
    if (verify_weights) timeline.mark_after("verify_ms", opening, at += t.verify_ms);
  } else {
    timeline.mark("open_ms");
  }
  // Served weights run where they live: memfd mappings on the CPU engine, VMM allocations on
  // the CUDA one. `auto` would otherwise pick cuda on a GPU machine for memfd weights it has no
  // directory to upload from.
  if (model.server && profile.engine.backend == hearth::BackendKind::Auto)
    profile.engine.backend = model.store->residence() == hearth::Residence::Device
                                 ? hearth::BackendKind::Cuda
                                 : hearth::BackendKind::Cpu;
  std::optional<hearth::Tokenizer> tokenizer;
  if (std::optional<hearth::LoadedTokenizer> loaded = hearth::load_model_tokenizer(model)) {
    tokenizer = std::move(loaded->tokenizer);
    timeline.note("tokenizer", hearth::origin_name(loaded->origin));
  }
  timeline.mark("tokenizer_ms");

  const hearth::Tokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  std::vector<int32_t> prompt_ids;
  std::vector<hearth::RequestLine> request_lines;
  if (*requests_opt) {
    request_lines =
        hearth::parse_request_lines(hearth::read_file(requests_path), profile.request, tok);
  } else if (*tokens_opt) {
    prompt_ids = hearth::parse_token_list(prompt_tokens, "--prompt-tokens");
  } else {
    if (!tokenizer)
      throw std::runtime_error(model_arg +
                               ": the model has no tokenizer.json; use --prompt-tokens");
    prompt_ids = tokenizer->encode(prompt, /*add_special_tokens=*/true);
  }
  timeline.mark("prompt_ms");

  // Served, the KV pool is leased from the server's memory budget and grows and shrinks with
  // the work; single-process, the engine sizes its own.
  hearth::KvMemoryFactory leased_kv;
  // GPU-resident (vmm) weights mean a vmm server: its chunks are mapped into a VMM reservation
  // on the weights' device, the CUDA engine's pool; memfd chunks go into host memory.
  // A tensor-parallel engine leases one pool per rank, rank r's from the server's device r.
  if (model.server) {
    const bool on_gpu = model.store->residence() == hearth::Residence::Device;
    // Sharing prefix KV with other workers: room for as many of their chunks as the pool's
    // own (address space only), mapped read-only (memfd PROT_READ, VMM read-only device
    // access). The engine sets the cache domain once it exists. The per-rank pools of a
    // sharded model share rank by rank (RankedKvMemory: a block counts where every rank found
    // it), rank processes too (their followers' pools answer over the rank channel).
    const bool share = profile.engine.kv_share && profile.engine.prefix_cache;
    leased_kv = hearth::make_leased_kv_factory(model.server, served_devices, on_gpu, share);
  }
  // Tensor-parallel ranks as processes: this worker leads, its followers open the same
  // directory (worker/tp/).
  std::unique_ptr<hearth::Backend> backend =
      profile.engine.tensor_parallel_processes
          ? hearth::make_process_tp_backend(
                profile.engine, model.weights(),
                {model.server ? "" : model_arg, model.server ? server_socket : "",
                 model.server ? model_arg : "", model.identity, quantize == "fp8"},
                {}, leased_kv)
          : hearth::make_backend(profile.engine, model.weights(), warmup, leased_kv);
  timeline.mark("engine_ms");
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - process_start)
          .count();
  if (!dump_logits.empty()) dump_prompt_logits(*backend, prompt_ids, dump_logits);

  std::unique_ptr<hearth::OutputSink> sink;
  json timings = {{"load_ms", load_ms}};
  if (model.server) {
    const hearth::ImportTimings& t = model.import_timings;
    timings["attach_ms"] = model.connect_ms + t.manifest_ms + t.gpu_ms + t.import_ms + t.map_ms;
    timings["attach"] = {{"connect_ms", model.connect_ms},
                         {"manifest_ms", t.manifest_ms},
                         {"gpu_ms", t.gpu_ms},
                         {"import_ms", t.import_ms},
                         {"map_ms", t.map_ms},
                         {"verify_ms", t.verify_ms}};
  }
  if (format == "jsonl")
    sink = std::make_unique<hearth::JsonlSink>(stdout, std::move(timings), &timeline);
  else
    sink = std::make_unique<hearth::TextSink>(stdout);

  hearth::Engine engine(*backend, profile.engine, tok, hearth::end_of_sequence_ids(model, tok),
                        model.identity);
  if (*serve_opt) {
    hearth::ServeOptions serve;
    serve.socket_path = serve_socket;
    serve.idle_exit = *hearth::parse_seconds(idle_exit_arg, kMaxIdleExitSeconds);
    serve.quiet = quiet;
    serve.max_request_bytes =
        hearth::ipc::max_submit_bytes(backend->context_length(), backend->vocab_size());
    serve.max_queued_event_bytes = event_buffer_kb << 10;
    serve.context_length = backend->context_length();
    hearth::serve(engine, serve, profile.request, tok);
    // Stopped because the backend failed: say why, and exit as a failure.
    if (const std::string why = backend->failure(); !why.empty()) throw std::runtime_error(why);
    return 0;
  }
  if (!*requests_opt) {
    // One request: a refusal is the command's error, as is a request that fails.
    engine.submit(hearth::Request{"", std::move(prompt_ids), profile.request});
    const std::string error = drain(engine, *sink);
    if (!error.empty()) throw std::runtime_error(error);
    return 0;
  }
  // Many requests: each one's refusal or failure is its own final event; the others go on.
  for (hearth::RequestLine& line : request_lines) {
    if (!line.error.empty()) {
      sink->write(refused(line.request.id, line.error, 0));
      continue;
    }
    const int prompt_size = int(line.request.prompt.size());
    const std::string id = line.request.id;
    try {
      engine.submit(std::move(line.request));
    } catch (const hearth::RequestError& e) {
      sink->write(refused(id, "line " + std::to_string(line.line) + ": " + e.what(), prompt_size));
    }
  }
  drain(engine, *sink);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return hearth::run_main("hearth-worker", [&] { return run(argc, argv); });
}
