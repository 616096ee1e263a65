// run_code: run a short program in a fresh, disposable sandbox and return its
// bounded result and gated artifacts.
#include "tools/registry.h"
#include "tools/job_request.h"

#include "server/broker/checks.h"
#include "server/util/text.h"

namespace tools {
namespace {

json nullable(const char* type) { return {{"type", {type, "null"}}}; }

json output_schema() {
  json artifact = {{"type", "object"},
                   {"properties",
                    {{"artifact_id", nullable("string")},
                     {"name", {{"type", "string"}}},
                     {"media_type", {{"type", "string"}}},
                     {"size", {{"type", "integer"}, {"minimum", 0}}},
                     {"sha256", {{"type", "string"}}},
                     {"verdict", {{"type", "string"}, {"enum", {"accepted", "sanitized", "rejected"}}}},
                     {"reason", {{"type", "string"}}}}},
                   {"required", {"artifact_id", "name", "media_type", "size", "sha256", "verdict", "reason"}}};
  return {
      {"type", "object"},
      {"properties",
       {{"job_id", {{"type", "string"}}},
        {"status",
         {{"type", "string"},
          {"enum", {"completed", "failed", "timed_out", "memory_exceeded", "cancelled", "sandbox_error"}}}},
        {"exit_code", nullable("integer")},
        {"signal", nullable("string")},
        {"timed_out", {{"type", "boolean"}}},
        {"stdout", {{"type", "string"}}},
        {"stderr", {{"type", "string"}}},
        {"stdout_truncated", {{"type", "boolean"}}},
        {"stderr_truncated", {{"type", "boolean"}}},
        {"stdout_cut_bytes",
         {{"type", "integer"},
          {"minimum", 0},
          {"description",
           "Bytes of stdout cut out of the middle (0: all of it is here). Over its "
           "cap stdout keeps its head and tail with a marker line between them."}}},
        {"stderr_cut_bytes",
         {{"type", "integer"}, {"minimum", 0}, {"description", "As stdout_cut_bytes, for stderr."}}},
        {"duration_ms", {{"type", "integer"}, {"minimum", 0}}},
        {"cpu_ms", {{"type", "integer"}, {"minimum", 0}}},
        {"peak_memory_bytes", {{"type", "integer"}, {"minimum", 0}}},
        {"error", {{"type", "string"}, {"description", "Why the sandbox could not run the job (sandbox_error only)."}}},
        {"sandbox_layers",
         {{"type", "array"},
          {"items", {{"type", "string"}}},
          {"description", "The isolation layers that were active for this job."}}},
        {"limits_enforced_by",
         {{"type", "object"},
          {"description",
           "What held this job's memory, process count and CPU: the job's cgroup, or (a host "
           "without usable cgroups, see throwbox doctor) per-process rlimits and the deadline only."},
          {"properties",
           {{"memory", {{"type", "string"}, {"enum", {"cgroup", "rlimit"}}}},
            {"pids", {{"type", "string"}, {"enum", {"cgroup", "rlimit"}}}},
            {"cpu", {{"type", "string"}, {"enum", {"cgroup", "deadline"}}}}}}}},
        {"start",
         {{"type", "string"},
          {"enum", {"cold", "warm"}},
          {"description", "warm: the job ran in a single-use sandbox built ahead by the warm pool."}}},
        {"artifacts", {{"type", "array"}, {"items", artifact}}},
        {"checks",
         {{"type", "array"},
          {"description",
           "The acceptance checks that ran after the job, each in a sandbox of its own with a read-only view of "
           "it: the server's, never the job's code. error: the check could not give a verdict."},
          {"items",
           {{"type", "object"},
            {"properties",
             {{"name", {{"type", "string"}}},
              {"verdict", {{"type", "string"}, {"enum", {"pass", "fail", "error"}}}},
              {"evidence", {{"type", "string"}}},
              {"sha256", {{"type", "string"}, {"description", "Of the check's program as it ran."}}},
              {"duration_ms", {{"type", "integer"}, {"minimum", 0}}}}},
            {"required", {"name", "verdict", "evidence", "sha256", "duration_ms"}}}}}},
        {"receipt",
         {{"type", {"object", "null"}},
          {"description",
           "A signed statement of the run: what ran (code, inputs, runtime, policy, boundary, limits) and what came "
           "of it (status, output, artifacts, checks), by sha256, signed with the server's Ed25519 key. Verify "
           "it with `throwbox receipt verify`, or against GET /.well-known/throwbox-receipt-key."},
          {"properties",
           {{"statement", {{"type", "object"}}},
            {"alg", {{"type", "string"}, {"enum", {"Ed25519"}}}},
            {"key_id", {{"type", "string"}}},
            {"signature", {{"type", "string"}}}}},
          {"required", {"statement", "alg", "key_id", "signature"}}}},
        {"workspace",
         {{"type", "object"},
          {"description",
           "A job in a workspace: the workspace after it (saved: this job's /work was kept; "
           "full: /work had (nearly) no room left when it ended)."},
          {"properties",
           {{"workspace_id", {{"type", "string"}}},
            {"expires_at", {{"type", "string"}}},
            {"ttl_s", {{"type", "integer"}, {"minimum", 0}}},
            {"size_bytes", {{"type", "integer"}, {"minimum", 0}}},
            {"size_max_bytes", {{"type", "integer"}, {"minimum", 0}}},
            {"saved", {{"type", "boolean"}}},
            {"full", {{"type", "boolean"}}},
            {"error", {{"type", "string"}}}}},
          {"required", {"workspace_id", "expires_at", "size_bytes", "size_max_bytes", "saved", "full"}}}},
        {"network",
         {{"type", "object"},
          {"description", "A job with a network profile: each connection it made through the proxy."},
          {"properties",
           {{"profile", {{"type", "string"}}},
            {"connections",
             {{"type", "array"},
              {"items",
               {{"type", "object"},
                {"properties",
                 {{"host", {{"type", "string"}}},
                  {"port", {{"type", "integer"}, {"minimum", 0}, {"maximum", 65535}}},
                  {"address", {{"type", "string"}}},
                  {"bytes_up", {{"type", "integer"}, {"minimum", 0}}},
                  {"bytes_down", {{"type", "integer"}, {"minimum", 0}}},
                  {"verdict", {{"type", "string"}, {"enum", {"allowed", "refused", "failed", "cut"}}}},
                  {"reason", {{"type", "string"}}},
                  {"intercepted", {{"type", "boolean"}}},
                  {"requests",
                   {{"type", "array"},
                    {"description", "An intercepted connection's requests, in order (paths without their query)."},
                    {"items",
                     {{"type", "object"},
                      {"properties",
                       {{"method", {{"type", "string"}}},
                        {"path", {{"type", "string"}}},
                        {"status", {{"type", "integer"}, {"minimum", 0}}},
                        {"verdict", {{"type", "string"}, {"enum", {"allowed", "refused", "failed"}}}},
                        {"reason", {{"type", "string"}}}}},
                      {"required", {"method", "path", "status", "verdict", "reason"}}}}}},
                  {"requests_not_listed", {{"type", "integer"}, {"minimum", 0}}}}},
                {"required",
                 {"host", "port", "address", "bytes_up", "bytes_down", "verdict", "reason", "intercepted"}}}}}},
            {"connections_not_listed", {{"type", "integer"}, {"minimum", 0}}}}},
          {"required", {"profile", "connections"}}}}}},
      {"required",
       {"job_id", "status", "exit_code", "signal", "timed_out", "stdout", "stderr", "stdout_truncated",
        "stderr_truncated", "stdout_cut_bytes", "stderr_cut_bytes", "duration_ms", "cpu_ms", "peak_memory_bytes",
        "artifacts"}}};
}

}  // namespace

json job_result_json(const broker::JobResult& r) {
  const sandbox::Outcome& o = r.outcome;
  json artifacts = json::array();
  for (auto& a : r.artifacts) artifacts.push_back(broker::to_json(a));
  json s = broker::ending_json(o);
  s["job_id"] = r.job_id;
  s["stdout_cut_bytes"] = o.stdout_cut_bytes;
  s["stderr_cut_bytes"] = o.stderr_cut_bytes;
  s["sandbox_layers"] = o.layers;
  s["start"] = o.start;
  s["artifacts"] = std::move(artifacts);
  if (!o.error.empty()) s["error"] = o.error;
  json checks = json::array();
  for (const broker::CheckResult& c : r.checks) checks.push_back(broker::to_json(c));
  s["checks"] = checks;
  if (!r.network.is_null()) s["network"] = r.network;
  if (!r.workspace.is_null()) s["workspace"] = r.workspace;
  s["receipt"] = r.receipt;
  // Said in every result that ran, so a degraded host is never silent.
  if (!o.layers.empty()) {
    bool cgroup = false;
    for (auto& l : o.layers) cgroup = cgroup || l.rfind("cgroups:", 0) == 0;
    s["limits_enforced_by"] = {{"memory", cgroup ? "cgroup" : "rlimit"},
                               {"pids", cgroup ? "cgroup" : "rlimit"},
                               {"cpu", cgroup ? "cgroup" : "deadline"}};
  }
  return s;
}

Tool make_run_code(const policy::Policy& policy) {
  const policy::Limits& lim = policy.limits;
  std::string runtimes_text;
  json runtime_names = json::array();
  for (auto& name : policy.available_runtimes()) {
    runtime_names.push_back(name);
    const policy::Runtime* rt = policy.find_runtime(name);
    runtimes_text += "\n- " + name + ": " + rt->description;
  }
  json def = {
      {"name", "run_code"},
      {"title", "Run code in a disposable sandbox"},
      {"description",
       "Run a short program in a fresh, disposable Linux sandbox and get back its exit status, "
       "stdout and stderr (each capped at " +
           std::to_string(lim.stdout_max_bytes) +
           " bytes, truncation flagged) and the files it wrote. The sandbox has no network" +
           std::string(policy.network.profiles.empty()
                           ? ""
                           : " unless `network` names a profile, and then reaches only what the profile allows, "
                             "through a proxy (HTTP_PROXY and HTTPS_PROXY are set; there is no DNS)") +
           " and no secrets; it is deleted after the call. Files uploaded with upload_input are read-only at "
           "/inputs/<name> (pass their input_ids); so are artifacts of earlier runs (pass their "
           "artifact_ids). The working directory /work and /tmp are scratch. "
           "Write result files to /outputs/: each comes back as an artifact (fetch it with "
           "fetch_artifact). Nothing persists between calls, except /work in a workspace "
           "(open_workspace, then pass workspace_id). Default timeout " +
           std::to_string(static_cast<int>(lim.timeout_s_default)) + " s, at most " +
           std::to_string(static_cast<int>(lim.timeout_s_max)) + " s. Runtimes:" + runtimes_text},
      {"inputSchema",
       {{"type", "object"},
        {"properties",
         {{"runtime",
           {{"type", "string"}, {"enum", runtime_names}, {"description", "Which interpreter runs the code."}}},
          {"code",
           {{"type", "string"}, {"maxLength", lim.code_max_bytes}, {"description", "The complete program source."}}},
          {"input_ids",
           {{"type", "array"},
            {"items", {{"type", "string"}}},
            {"maxItems", lim.inputs_per_job_max},
            {"description", "input_ids from upload_input, mounted at /inputs/<name>."}}},
          {"timeout_s",
           {{"type", "number"},
            {"exclusiveMinimum", 0},
            {"maximum", lim.timeout_s_max},
            {"description", "Wall-clock limit in seconds."}}},
          {"workspace_id",
           {{"type", "string"},
            {"description", "From open_workspace: /work is that workspace's files and is kept for its next call."}}},
          {"artifact_ids",
           {{"type", "array"},
            {"items", {{"type", "string"}}},
            {"maxItems", lim.inputs_per_job_max},
            {"description", "artifact_ids of earlier runs, mounted read-only at /inputs/<name> like inputs."}}},
          {"idempotency_key",
           {{"type", "string"},
            {"minLength", 1},
            {"maxLength", 128},
            {"description",
             "Client-chosen key naming this request: repeating it returns the first run's result instead of running "
             "again."}}}}},
        {"required", {"runtime", "code"}},
        {"additionalProperties", false}}},
      {"outputSchema", output_schema()},
      {"annotations",
       {{"title", "Run code in a disposable sandbox"},
        {"readOnlyHint", false},
        {"destructiveHint", false},
        {"idempotentHint", false},
        {"openWorldHint", false}}}};

  if (!policy.checks.empty()) {
    json names = json::array();
    std::string text;
    for (auto& [name, c] : policy.checks) {
      names.push_back(name);
      text += "\n- " + name + (c.description.empty() ? "" : ": " + c.description);
    }
    std::string required;
    for (auto& [name, rt] : policy.runtimes)
      if (rt.available && !rt.required_checks.empty()) {
        std::string list;
        for (auto& c : rt.required_checks) list += (list.empty() ? "" : ", ") + c;
        required += "\n- every " + name + " job: " + list;
      }
    def["inputSchema"]["properties"]["checks"] = {
        {"type", "array"},
        {"items", {{"type", "string"}, {"enum", names}}},
        {"description",
         "Acceptance checks to run after the job, the server's programs, each in a sandbox of its own that sees "
         "the job's result, inputs and accepted artifacts read-only; their verdicts come back in `checks`. "
         "Checks:" +
             text + (required.empty() ? "" : "\nAlways run:" + required)}};
  }

  if (!policy.network.profiles.empty()) {
    json names = json::array();
    std::string text;
    for (auto& [name, p] : policy.network.profiles) {
      names.push_back(name);
      std::string allow;
      for (auto& a : p.allow) allow += (allow.empty() ? "" : ", ") + a;
      text += "\n- " + name + ": " + (p.description.empty() ? "" : p.description + "; ") + "reaches " + allow;
    }
    def["inputSchema"]["properties"]["network"] = {
        {"type", "string"},
        {"enum", names},
        {"description",
         "Give the job network access through a proxy that lets it reach only what this profile "
         "allows (omit for no network). Profiles:" +
             text}};
    def["annotations"]["openWorldHint"] = true;
  }

  auto call = [](const json& args, CallContext& ctx) -> ToolResult {
    if (auto s = require_object(args); !s) return error_result(s.error().message);
    auto parsed = parse_job_request(args, ctx.tenant, kRunCodeFields);
    if (!parsed) return error_result(parsed.error().message);
    broker::JobRequest& req = *parsed;
    req.workspace_use = ctx.workspace;
    req.cancel = ctx.cancel;
    req.on_progress = ctx.progress;
    auto result = ctx.broker.run(req);
    if (!result) return error_result(result.error().message);
    json structured = job_result_json(*result);
    ToolResult out = ok_result(structured, structured.dump());
    // One resource_link per artifact that left the gate: readable with
    // resources/read or fetch_artifact, under the same tenant check.
    for (auto& a : result->artifacts) {
      if (!a.artifact_id) continue;
      out.content.push_back({{"type", "resource_link"},
                             {"uri", store::artifact_uri(*a.artifact_id)},
                             {"name", a.name},
                             {"mimeType", a.media_type},
                             {"size", a.size},
                             {"description", "artifact " + std::string(to_string(a.verdict)) + ": " + a.reason}});
    }
    return out;
  };
  // A long job may run as an MCP task: answered at once, polled or awaited.
  // Its workspace is held from before the task is created to its end.
  auto hold = [](const json& args, const std::string& tenant,
                 broker::Broker& broker) -> util::Result<std::shared_ptr<broker::WorkspaceUse>> {
    if (!args.is_object() || !args.contains("workspace_id") || !args["workspace_id"].is_string() ||
        args["workspace_id"].get_ref<const std::string&>().empty())
      return std::shared_ptr<broker::WorkspaceUse>();  // none, or the call reports the bad argument
    return broker.hold_workspace(tenant, args["workspace_id"].get<std::string>());
  };
  return Tool{def, call, "optional", hold};
}

}  // namespace tools
