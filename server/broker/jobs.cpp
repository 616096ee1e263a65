// Job admission and execution on the trusted side: the coordinator of the
// job path. The runner is a separate, single-threaded process (this server is
// multithreaded and must not do namespace work after fork). Secrets and the
// host environment stay here.
#include "server/broker/jobs.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <spdlog/spdlog.h>
#include <stdexcept>

#include "server/broker/artifact_intake.h"
#include "server/broker/job_launch.h"
#include "server/broker/tenant_slot.h"
#include "server/helper/client.h"
#include "server/image/oci.h"
#include "server/sandbox/workspace.h"
#include "server/sandbox/seccomp.h"
#include "server/util/base64.h"
#include "server/util/call_trace.h"
#include "server/util/clock.h"
#include "server/util/crypto.h"
#include "server/util/wall_clock.h"
#include "server/util/fd.h"
#include "server/util/fs.h"
#include "server/util/random.h"
#include "server/util/text.h"

namespace broker {
namespace {

artifacts::Gate make_gate(const policy::Policy& p) {
  return artifacts::Gate({p.artifacts.allowed_media_types, p.artifacts.file_max_bytes,
                          p.artifacts.csv_reject ? artifacts::csv::Mode::kReject : artifacts::csv::Mode::kNeutralise,
                          p.artifacts.active_content_as_text, p.artifacts.allowed_extensions,
                          p.artifacts.image_pixels_max, p.artifacts.pdf_strip});
}

// The parser helper beside the runner (a build directory, or libexec/throwbox).
std::string parser_exe_beside(const std::string& runner_exe) {
  return runner_exe.substr(0, runner_exe.rfind('/') + 1) + "throwbox-parser";
}

// The shared object a template's interpreter loads (pool.templates).
std::string template_library_beside(const std::string& runner_exe) {
  return runner_exe.substr(0, runner_exe.rfind('/') + 1) + "libthrowbox-template.so";
}

// The parser helper, with an identity of its own: as root a uid of the
// sandbox range, leased for the server's life; a normal user's own.
std::unique_ptr<helper::Parsers> start_parsers(const std::string& runner_exe, Identities& identities,
                                               IdentityLease& lease) {
  helper::Identity id;
  if (identities.per_sandbox() && !identities.subordinate()) {
    auto held = identities.lease();
    if (!held) throw std::runtime_error("parser helper: no uid for it: " + held.error().message);
    lease = std::move(*held);
    id = {true, lease.identity().uid, lease.identity().gid};
  }
  return std::make_unique<helper::Parsers>(parser_exe_beside(runner_exe), id);
}

// The server's own per-user limits: what its sandboxes' shares divide.
UserShares host_user_limits() {
  UserShares host;
  struct rlimit rl {};
  host.sigpending = ::getrlimit(RLIMIT_SIGPENDING, &rl) == 0 ? rl.rlim_cur : 0;
  host.msgqueue_bytes = ::getrlimit(RLIMIT_MSGQUEUE, &rl) == 0 ? rl.rlim_cur : 0;
  auto sysctl = [](const char* path, uint64_t fallback) {
    std::ifstream f(path);
    uint64_t v = 0;
    return (f >> v) ? v : fallback;
  };
  // The kernel's defaults where /proc/sys/user cannot be read.
  host.inotify_instances = sysctl("/proc/sys/user/max_inotify_instances", 128);
  host.inotify_watches = sysctl("/proc/sys/user/max_inotify_watches", 8192);
  return host;
}

std::string compiled_filter(bool memory_cgroup, sandbox::seccomp::Role role) {
  auto program = sandbox::seccomp::compile_in_parent(memory_cgroup, role);
  if (!program) throw std::runtime_error(program.error().message);
  std::string raw(reinterpret_cast<const char*>(program->instructions.data()),
                  program->instructions.size() * sizeof(sock_filter));
  return util::base64_encode(raw);
}

// Each image runtime's tree, unpacked once per digest under
// <state_dir>/images (image::ensure_cached), with its interpreter in it: a
// server that cannot have them does not start.
std::map<std::string, std::string> runtime_roots(const policy::Policy& policy, const std::string& state_dir) {
  std::map<std::string, std::string> roots;
  for (const auto& [name, rt] : policy.runtimes) {
    if (rt.image_digest.empty()) continue;
    const std::string key = "runtimes." + name + ".image";
    auto digest = image::parse_digest(rt.image_digest);
    if (!digest) throw std::runtime_error(key + ": " + digest.error().message);
    const int64_t t0 = util::now_ms();
    auto root = image::ensure_cached(state_dir + "/images", rt.image_layout, *digest);
    if (!root) throw std::runtime_error(key + " (" + rt.image_layout + "): " + root.error().message);
    // The interpreter as the sandbox will find it: links resolved inside the tree.
    util::UniqueFd dir(::open(root->c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    struct open_how how {};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    util::UniqueFd exe(
        dir.valid() ? static_cast<int>(::syscall(SYS_openat2, dir.get(), rt.command[0].c_str() + 1, &how, sizeof how))
                    : -1);
    struct stat st {};
    if (!exe.valid() || ::fstat(exe.get(), &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 0111) == 0)
      throw std::runtime_error(key + ": the image " + rt.image_digest + " has no executable " + rt.command[0]);
    spdlog::info("runtime {}: image {} ({} ms)", name, rt.image_digest, util::now_ms() - t0);
    roots[name] = *root;
  }
  return roots;
}

SpecHost make_spec_host(const policy::Policy& policy, const std::string& state_dir, nlohmann::json cgroup_host) {
  // The filter is the same for every job: compile it once, not per runner.
  const bool memory_cgroup = cgroup_host.value("mode", "none") != "none";
  SpecHost host =
      spec_host(state_dir, std::move(cgroup_host), compiled_filter(memory_cgroup, sandbox::seccomp::Role::job),
                user_shares(host_user_limits(), sandboxes_max(policy)));
  if (!policy.pool.templates.empty())
    host.template_seccomp_bpf_base64 = compiled_filter(memory_cgroup, sandbox::seccomp::Role::template_process);
  host.runtime_roots = runtime_roots(policy, state_dir);
  return host;
}

Identities make_identities(const policy::Policy& policy) {
  auto ids = Identities::make(policy, ::geteuid(), ::getegid());
  if (!ids) throw std::runtime_error(ids.error().message);
  return std::move(*ids);
}

// Started even without profiles, so a reload can add some. Where it cannot
// start, a policy with profiles is refused; one without runs without it.
std::unique_ptr<network::Proxy> start_proxy(const policy::Policy& policy, helper::Parsers& parsers,
                                            network::EgressCa& ca) {
  auto proxy = network::Proxy::start(policy.network, parsers, &ca);
  if (proxy) return std::move(*proxy);
  if (!policy.network.profiles.empty()) throw std::runtime_error("egress proxy: " + proxy.error().message);
  spdlog::warn("egress proxy: {}; network profiles cannot be added by a reload", proxy.error().message);
  return nullptr;
}

// The CA is made at first start whatever the policy, so a reload may add
// profiles that intercept; its bundle is rewritten at every start (the
// system's CAs may have changed).
std::unique_ptr<network::EgressCa> open_egress_ca(const std::string& state_dir, SpecHost& spec_host) {
  auto ca = network::EgressCa::open(state_dir);
  if (!ca) throw std::runtime_error(ca.error().message);
  std::string warning;
  auto bundle = (*ca)->write_bundle(state_dir, warning);
  if (!bundle) throw std::runtime_error("egress CA bundle: " + bundle.error().message);
  if (!warning.empty()) spdlog::warn("{}", warning);
  spec_host.ca_bundle_path = *bundle;
  return std::move(*ca);
}

ReceiptSigner open_receipts(const std::string& state_dir) {
  auto signer = ReceiptSigner::open(state_dir);
  if (!signer) throw std::runtime_error(signer.error().message);
  return std::move(*signer);
}

std::unique_ptr<Ledger> open_ledger(const policy::Policy& policy, const std::string& state_dir) {
  auto ledger = Ledger::open(ledger_config(policy, state_dir));
  if (!ledger) throw std::runtime_error("job ledger: " + ledger.error().message);
  return std::move(*ledger);
}

using util::now_us;

}  // namespace

Jobs::Jobs(policy::Live& live, store::Store& store, std::string runner_exe, nlohmann::json cgroup_host)
    : live_(live),
      boot_(live.get()),
      policy_(*boot_),
      store_(store),
      spec_host_(make_spec_host(policy_, store.state_dir(), std::move(cgroup_host))),
      identities_(make_identities(policy_)),
      gate_(make_gate(policy_)),
      ledger_(open_ledger(policy_, store.state_dir())),
      receipts_(open_receipts(store.root())),
      workspaces_(policy_.workspaces, store.root() + "/workspaces", *ledger_),
      admission_(policy_.admission),
      keys_([this](const std::string& tenant, const std::string& key) { return ledger_->find_by_key(tenant, key); }),
      fleet_(std::move(runner_exe), store.state_dir(), spec_host_.cgroup_host),
      parsers_(start_parsers(fleet_.runner_exe(), identities_, parser_lease_)),
      egress_ca_(open_egress_ca(store.state_dir(), spec_host_)),
      proxy_(start_proxy(policy_, *parsers_, *egress_ca_)) {
  // Cold jobs' scratch directories are made in it by their runners.
  if (auto s = util::make_dirs(store_.state_dir() + "/run", 0700); !s)
    throw std::runtime_error("scratch directory: " + s.error().message);
  store_.set_tenant_quota(policy_.admission.store_bytes_per_tenant_max, policy_.admission.store_files_per_tenant_max);
  janitor_ = util::Periodic(std::chrono::seconds(policy_.retention.janitor_interval_s), [this] { expire(); });
}

Jobs::~Jobs() {
  {
    std::lock_guard lock(caches_mu_);
    caches_stopping_ = true;
  }
  caches_cv_.notify_all();
  cache_builder_ = std::jthread();  // (no new one: cache_for sees caches_stopping_)
  pool_.reset();                    // its idle runners go to the fleet's reaper, which is still running
  janitor_.stop();
  // The caches are this server's: built at its start, gone with it.
  if (auto s = util::remove_tree(store_.state_dir() + "/cache"); !s)
    spdlog::warn("runtime caches: {}", s.error().message);
}

std::string Jobs::cache_key(const policy::Runtime& rt) {
  std::string key;
  for (auto& a : rt.command) key += a + '\0';
  return key + '\1' + rt.cache_code + '\1' + rt.cache_env;
}

util::Result<RuntimeCache> Jobs::build_cache(const policy::Runtime& rt) {
  const std::string id = util::random_id();
  sandbox::LaunchSpec spec = build_cache_spec(policy_, spec_host_, rt, id);
  auto lease = identities_.lease();
  if (!lease) return lease.error();
  set_identity(spec, lease->identity());
  JobRequest req;
  req.runtime = rt.name;
  std::unique_ptr<FinishedRunner> finished;
  auto outcome = start_cold(fleet_, release_, spec, std::move(*lease), req, {}, finished);
  // Whatever happened, the sandbox goes; what it harvested is moved out first.
  struct Retire {
    RunnerFleet& fleet;
    std::unique_ptr<FinishedRunner>& finished;
    const std::string& scratch;
    ~Retire() {
      if (finished)
        fleet.retire(std::move(*finished));
      else
        (void)util::remove_tree(scratch);
    }
  } retire{fleet_, finished, spec.scratch_dir};
  if (!outcome) return outcome.error();
  if (outcome->status != sandbox::Status::completed)
    return util::make_error(util::ErrorCode::kSandbox,
                            std::string("the cache's program ended ") + sandbox::to_string(outcome->status) + ": " +
                                util::to_valid_utf8(outcome->stderr_text.substr(0, 512)) + outcome->error);
  RuntimeCache cache;
  cache.dir = store_.state_dir() + "/cache/" + id;
  if (auto s = util::make_dirs(store_.state_dir() + "/cache", 0700); !s) return s.error();
  // The server's own: a sandbox's pid 1 opens the files with the host
  // identity, before it becomes the sandbox user, and copies them in.
  if (::mkdir(cache.dir.c_str(), 0700) != 0)
    return util::make_error(util::ErrorCode::kInternal, util::call_error("mkdir", cache.dir, errno));
  uint64_t total = 0;
  for (const sandbox::HarvestedFile& f : outcome->files) {
    // Plain files at the top of /outputs only: they are linked by name.
    if (f.host_path.empty() || util::file_name_problem(f.name)) continue;
    // Each sandbox gets its own copy: bounded, so a copy costs little.
    constexpr uint64_t kCacheBytesMax = 4 << 20;
    total += f.size;
    if (cache.files.size() >= sandbox::kCacheFilesMax || total > kCacheBytesMax) {
      (void)util::remove_tree(cache.dir);
      return util::make_error(util::ErrorCode::kSandbox, "the cache is over " +
                                                             std::to_string(sandbox::kCacheFilesMax) + " files or " +
                                                             std::to_string(kCacheBytesMax) + " bytes");
    }
    const std::string to = cache.dir + "/" + f.name;
    if (::rename(f.host_path.c_str(), to.c_str()) != 0 || ::chmod(to.c_str(), 0444) != 0) {
      const int err = errno;
      (void)util::remove_tree(cache.dir);
      return util::make_error(util::ErrorCode::kInternal, util::call_error("rename", to, err));
    }
    cache.files.push_back(f.name);
  }
  return cache;
}

void Jobs::build_caches(std::stop_token stop) {
  std::unique_lock lock(caches_mu_);
  for (;;) {
    caches_cv_.wait(lock, [&] { return caches_stopping_ || stop.stop_requested() || !caches_queue_.empty(); });
    if (caches_stopping_ || stop.stop_requested()) return;
    const policy::Runtime* rt = caches_queue_.front();
    caches_queue_.pop_front();
    lock.unlock();
    const int64_t t0 = now_us();
    auto built = build_cache(*rt);
    lock.lock();
    const std::string key = cache_key(*rt);
    if (built) {
      spdlog::info("runtime {}: cache built in {} ms ({} files), read-only to its sandboxes", rt->name,
                   (now_us() - t0) / 1000, built->files.size());
      caches_[key] = std::move(*built);
    } else {
      // Asked for again by the next job of the runtime once kCacheRetry has passed.
      spdlog::warn("runtime {}: building its cache failed: {}; its jobs run without it", rt->name,
                   built.error().message);
      caches_failed_at_[key] = std::chrono::steady_clock::now();
      caches_requested_.erase(key);
    }
    caches_cv_.notify_all();
  }
}

std::optional<RuntimeCache> Jobs::cache_for(const policy::Runtime& rt, bool wait) {
  constexpr auto kCacheRetry = std::chrono::seconds(60);
  if (rt.cache_code.empty()) return std::nullopt;
  const std::string key = cache_key(rt);
  std::unique_lock lock(caches_mu_);
  if (caches_stopping_) return std::nullopt;
  // Built on the first job of a runtime that has one, on the builder thread.
  auto failed = caches_failed_at_.find(key);
  const bool may_retry =
      failed == caches_failed_at_.end() || std::chrono::steady_clock::now() - failed->second > kCacheRetry;
  if (!caches_.count(key) && may_retry && caches_requested_.insert(key).second) {
    caches_queue_.push_back(&rt);
    if (!cache_builder_.joinable()) cache_builder_ = std::jthread([this](std::stop_token stop) { build_caches(stop); });
    caches_cv_.notify_all();
  }
  if (wait)
    caches_cv_.wait_for(lock, std::chrono::minutes(5), [&] {
      return caches_stopping_ || caches_.count(key) || (caches_failed_at_.count(key) && !caches_requested_.count(key));
    });
  auto it = caches_.find(key);
  if (it == caches_.end()) return std::nullopt;
  return it->second;
}

void Jobs::start_pool() {
  if (auto s = parsers_->start(); !s) throw std::runtime_error(s.error().message);
  // The pool runtimes' fingerprints (their interpreters read whole) on a
  // thread of their own, so neither the start nor their first call waits;
  // another runtime's first call takes its own.
  std::vector<policy::Runtime> pooled;
  for (const std::string& name : policy_.pool.runtimes)
    if (const policy::Runtime* rt = policy_.find_runtime(name); rt && rt->available) pooled.push_back(*rt);
  fingerprinter_ = std::jthread([this, pooled = std::move(pooled)](std::stop_token stop) {
    for (const policy::Runtime& rt : pooled)
      if (!stop.stop_requested()) fingerprints_.of(rt);
  });
  fleet_.keep_spare();
  if (pool_ || !policy_.pool.enabled || policy_.pool.runtimes.empty()) return;
  pool_ = std::make_unique<Pool>(
      policy_, live_, fleet_.runner_exe(),
      [this](const policy::Runtime& rt, IdentityLease& lease) -> util::Result<sandbox::LaunchSpec> {
        // Built with the cache it will read, never before the cache's first try.
        std::optional<RuntimeCache> cache = cache_for(rt, true);
        auto held = identities_.lease();
        if (!held) return held.error();
        lease = std::move(*held);
        // The limits in force now (a reload retires what was built before).
        const std::shared_ptr<const policy::Policy> now = live_.get();
        sandbox::LaunchSpec spec = build_warm_spec(*now, spec_host_, rt, util::random_id());
        if (cache) apply_cache(*now, rt, *cache, spec);
        set_identity(spec, lease.identity());
        return spec;
      },
      [this](std::unique_ptr<RunnerProcess> r, const std::string& dir, const std::string& id) {
        fleet_.retire(FinishedRunner{std::move(r), dir, id});
      },
      template_maker());
}

// pool.templates: each runtime's template as a warm spec of its own, its
// identity leased like a sandbox's; as root its user namespace also maps
// the policy's uid range, whose ids its forks' sandboxes lease. Null (no
// templates) without the shared object beside the runner, or with
// subordinate ids (a template's forks cannot join namespaces made under
// another sandbox's own user namespace).
Pool::MakeSpec Jobs::template_maker() {
  if (policy_.pool.templates.empty()) return nullptr;
  const std::string library = template_library_beside(fleet_.runner_exe());
  if (::access(library.c_str(), R_OK) != 0) {
    spdlog::warn("warm pool: {} is missing: pool.templates ignored, their sandboxes start their own interpreter",
                 library);
    return nullptr;
  }
  if (identities_.subordinate()) {
    spdlog::warn("warm pool: pool.templates ignored with subordinate ids; their sandboxes start their own interpreter");
    return nullptr;
  }
  return [this, library](const policy::Runtime& rt, IdentityLease& lease) -> util::Result<sandbox::LaunchSpec> {
    std::optional<RuntimeCache> cache = cache_for(rt, true);
    auto held = identities_.lease();
    if (!held) return held.error();
    lease = std::move(*held);
    const std::shared_ptr<const policy::Policy> now = live_.get();
    sandbox::LaunchSpec spec = build_template_spec(*now, spec_host_, rt, util::random_id(), library);
    if (cache) apply_cache(*now, rt, *cache, spec);
    set_identity(spec, lease.identity());
    if (spec.own_user_ns) {
      spec.template_ids_first = now->sandbox.uid_first;
      spec.template_ids_count = now->sandbox.uid_count;
    }
    return spec;
  };
}

size_t Jobs::expire() {
  const auto& r = policy_.retention;
  size_t files = store_.expire(r.inputs_ttl_s, r.artifacts_ttl_s);
  size_t rows = ledger_->expire(r.jobs_ttl_s);
  // However many jobs a tenant runs, what the ledger keeps of it is bounded.
  if (size_t trimmed = ledger_->trim(r.jobs_per_tenant_max); trimmed) {
    spdlog::info("janitor: removed {} job records of tenants above retention.jobs_per_tenant_max ({})", trimmed,
                 r.jobs_per_tenant_max);
    rows += trimmed;
  }
  rows += workspaces_.expire(r.jobs_ttl_s);
  if (files || rows) spdlog::info("janitor: removed {} expired files and {} job records", files, rows);
  return files + rows;
}

std::string Jobs::upload_media_type(const std::string& name, const std::string& content) {
  return broker::upload_media_type(*parsers_, gate_.policy().allowed_media_types, name, content);
}

util::Result<nlohmann::json> Jobs::probe_parser() {
  if (auto s = parsers_->start(); !s) return s.error();
  auto child = parsers_->child();
  if (!child) return child.error();
  helper::Message probe;
  probe.kind = helper::Kind::kProbe;
  auto answer = child->call(probe, kInspectTimeoutMs, 0);
  if (!answer) return answer.error();
  return answer->meta;
}

util::Status Jobs::apply(std::shared_ptr<const policy::Policy> next) {
  // The one step that can fail first: nothing has changed when it does.
  if (proxy_) {
    if (auto s = proxy_->update(next->network); !s) return s;
  } else if (!next->network.profiles.empty()) {
    return util::make_error(util::ErrorCode::kPolicy, "network profiles need the egress proxy, which did not start");
  }
  admission_.set_limits(next->admission);
  store_.set_tenant_quota(next->admission.store_bytes_per_tenant_max, next->admission.store_files_per_tenant_max);
  live_.set(std::move(next));
  if (pool_)
    if (size_t n = pool_->retire_stale(); n)
      spdlog::info("reload: {} idle warm sandbox(es) retired; new ones follow", n);
  return util::ok_status();
}

PoolStats Jobs::pool_stats() { return pool_ ? pool_->stats() : PoolStats{}; }

std::string Jobs::metrics_text(uint64_t sessions_open) {
  const Admission::Load load = admission_.load();
  const PoolStats pool = pool_stats();
  return metrics_.render(Metrics::Live{load.running, load.queued, pool.idle, pool.claimed, sessions_open});
}

std::string Jobs::unready_reason() {
  if (::access(fleet_.runner_exe().c_str(), X_OK) != 0) return "throwbox-runner is missing or not executable";
  if (auto s = ledger_->ping(); !s) return "the ledger does not answer: " + s.error().message;
  return "";
}

std::string Jobs::ledger_name() const { return describe(ledger_config(policy_, store_.state_dir())); }

size_t Jobs::reclaim_leftovers() {
  size_t removed = fleet_.reclaim_leftovers();
  // Runtime caches are rebuilt by every server start (fonts and packages may have changed).
  if (std::filesystem::exists(store_.state_dir() + "/cache")) {
    if (auto s = util::remove_tree(store_.state_dir() + "/cache"); s)
      ++removed;
    else
      spdlog::warn("reclaim: {}", s.error().message);
  }
  removed += workspaces_.reclaim();
  if (size_t failed = ledger_->fail_interrupted("the server stopped while the job ran"); failed) {
    spdlog::warn("{} job(s) were running when the server last stopped: recorded as failed", failed);
    removed += failed;
  }
  return removed;
}

util::Result<std::shared_ptr<WorkspaceUse>> Jobs::hold_workspace(const std::string& tenant,
                                                                 const std::string& workspace_id) {
  auto use = workspaces_.begin(tenant, workspace_id);
  if (!use && use.error().code == util::ErrorCode::kNotFound)
    return util::make_error(util::ErrorCode::kNotFound, std::string("workspace_id: ") + kUnknownWorkspace);
  return use;
}

util::Result<sandbox::LaunchSpec> Jobs::resolve(const policy::Policy& policy, const JobRequest& req,
                                                const std::string& job_id, std::vector<InputRef>& inputs) {
  auto rt = check_request(policy, req);
  if (!rt) return rt.error();
  std::vector<util::Result<store::InputRecord>> found;
  found.reserve(req.input_ids.size());
  for (const std::string& id : req.input_ids) found.push_back(store_.get_input(req.tenant, id));
  auto spec = build_job_spec(policy, spec_host_, req, found, job_id);
  if (!spec) return spec.error();
  // Caches are keyed by the start-up policy's runtimes (a reload never changes them).
  if (const policy::Runtime* boot_rt = policy_.find_runtime((*rt)->name))
    if (auto cache = cache_for(*boot_rt, false)) apply_cache(policy, *boot_rt, *cache, *spec);
  for (auto& in : found) inputs.push_back({in->input_id, in->name, in->sha256});
  // Artifacts as inputs: under their base name, read-only, like an upload.
  std::map<std::string, std::string> taken;  // name -> "input <id>" / "artifact <id>"
  for (size_t i = 0; i < found.size(); ++i) taken[found[i]->name] = "input " + req.input_ids[i];
  for (const std::string& id : req.artifact_ids) {
    auto a = store_.get_artifact(req.tenant, id);
    if (!a) return util::make_error(a.error().code, "artifact_ids: \"" + id + "\": " + a.error().message);
    const std::string name = a->name.substr(a->name.rfind('/') + 1);
    if (auto bad = store::validate_input_name(name); !bad)
      return util::make_error(util::ErrorCode::kInvalidArgument,
                              "artifact_ids: \"" + id + "\": its name cannot be an input's: " + bad.error().message);
    if (auto [it, fresh] = taken.emplace(name, "artifact " + id); !fresh)
      return util::make_error(util::ErrorCode::kInvalidArgument,
                              "input_ids and artifact_ids: two files are both named \"" + name + "\" (" + it->second +
                                  " and artifact " + id + "); /inputs/<name> must be unique per run");
    spec->inputs.push_back({name, a->blob_path});
    inputs.push_back({id, name, a->sha256});
  }
  return spec;
}

namespace {

// A check's view fits a warm sandbox of the policy: its deadline within the
// longest a job may ask for (the warm sandbox's CPU backstop), its files and
// directories within the warm /inputs' count and bytes (build_warm_spec).
bool fits_warm(const policy::Policy& policy, const sandbox::LaunchSpec& spec) {
  const policy::Limits& lim = policy.limits;
  if (static_cast<double>(spec.timeout_ms) > lim.timeout_s_max * 1000) return false;
  uint64_t entries = 0, bytes = 0;
  for (const sandbox::InputBind& in : spec.inputs) {
    struct stat st {};
    if (::stat(in.host_path.c_str(), &st) != 0) return false;
    entries += 1 + static_cast<uint64_t>(std::count(in.name.begin(), in.name.end(), '/'));
    bytes += static_cast<uint64_t>(st.st_size) + 4096;
  }
  return entries <= lim.inputs_per_job_max &&
         bytes <= lim.inputs_per_job_max * (std::max(lim.input_max_bytes, policy.artifacts.file_max_bytes) + 4096);
}

}  // namespace

CheckResult Jobs::run_check(const policy::Policy& pol, const JobRequest& req, const policy::Check& check,
                            const std::vector<sandbox::InputBind>& view) {
  const int64_t t0 = now_us();
  auto done = [&](CheckResult r) {
    r.name = check.name;
    r.duration_ms = static_cast<uint64_t>((now_us() - t0) / 1000);
    return r;
  };
  // Read again for every run: what runs is what the sha256 names.
  std::string code;
  if (check.command.empty()) {
    auto program = policy::read_check_program(check.code_file, pol.limits.code_max_bytes);
    if (!program) return done(check_error("the check's program was not run: " + program.error().message));
    code = std::move(*program);
  }
  const std::string sha256 = check_program_sha256(check, code);
  const policy::Runtime* rt = pol.find_runtime(check.runtime);
  if (!rt) {
    CheckResult r = check_error("the check's runtime \"" + check.runtime + "\" is not available");
    r.sha256 = sha256;
    return done(r);
  }
  sandbox::LaunchSpec spec = build_check_spec(pol, spec_host_, *rt, check, code, view, util::random_id());
  if (const policy::Runtime* boot_rt = policy_.find_runtime(rt->name))
    if (auto cache = cache_for(*boot_rt, false)) apply_cache(pol, *boot_rt, *cache, spec);
  JobRequest check_req;
  check_req.tenant = req.tenant;
  check_req.runtime = check.runtime;
  check_req.cancel = req.cancel;
  std::unique_ptr<FinishedRunner> finished;
  util::Result<sandbox::Outcome> outcome = util::make_error(util::ErrorCode::kInternal, "not started");
  bool started = false;
  // A command is its own program: only a code_file runs as a warm sandbox's code.
  if (pool_ && check.command.empty() && fits_warm(pol, spec)) {
    WarmStart warm = start_warm(
        *pool_, fleet_, spec, check_req, [] { return util::ok_status(); }, finished);
    started = warm.started;
    if (started) outcome = std::move(warm.outcome);
  }
  if (!started) {
    auto lease = identities_.lease();
    if (!lease) {
      CheckResult r = check_error("the check's sandbox could not start: " + lease.error().message);
      r.sha256 = sha256;
      return done(r);
    }
    set_identity(spec, lease->identity());
    outcome = start_cold(fleet_, release_, spec, std::move(*lease), check_req, {}, finished);
  }
  if (finished) {
    fleet_.retire(std::move(*finished));
  } else if (!started) {
    if (auto s = util::remove_tree(spec.scratch_dir); !s)
      spdlog::warn("check {}: cleanup: {}", check.name, s.error().message);
  }
  CheckResult r = outcome ? check_verdict(*outcome, check.max_output_bytes)
                          : check_error("the check's sandbox failed: " + outcome.error().message);
  r.sha256 = sha256;
  return done(r);
}

std::vector<CheckResult> Jobs::run_checks(const policy::Policy& pol, const JobRequest& req,
                                          const std::vector<const policy::Check*>& checks, const JobResult& result,
                                          const std::vector<sandbox::InputBind>& job_inputs,
                                          const std::vector<InputRef>& inputs) {
  std::vector<CheckResult> out;
  if (checks.empty()) return out;
  // What every check of this job sees: the server's copies, never the job's
  // sandbox. result.json is written here; inputs and artifacts are the
  // stored blobs (the artifacts as the gate delivered them).
  const std::string dir = store_.state_dir() + "/run/" + result.job_id + "-view";
  struct RemoveDir {
    const std::string& dir;
    ~RemoveDir() { (void)util::remove_tree(dir); }
  } remove_dir{dir};
  std::vector<sandbox::InputBind> view;
  auto made = util::make_dirs(dir, 0700);
  if (made)
    made = util::write_file_atomic(dir + "/result.json", check_view_json(result, req.runtime, inputs).dump(), 0600);
  if (!made) {
    for (const policy::Check* c : checks) {
      CheckResult r = check_error("the job's view could not be written: " + made.error().message);
      r.name = c->name;
      out.push_back(std::move(r));
    }
    return out;
  }
  view.push_back({"result.json", dir + "/result.json"});
  for (const sandbox::InputBind& in : job_inputs) view.push_back({"inputs/" + in.name, in.host_path});
  for (const ArtifactSummary& a : result.artifacts) {
    if (!in_view(a)) continue;
    auto stored = store_.get_artifact(req.tenant, *a.artifact_id);
    if (stored) view.push_back({"artifacts/" + a.name, stored->blob_path});
  }
  for (const policy::Check* c : checks) {
    out.push_back(run_check(pol, req, *c, view));
    spdlog::info("job {} check {}: {} in {} ms", result.job_id, c->name, out.back().verdict, out.back().duration_ms);
  }
  return out;
}

util::Result<JobResult> Jobs::run(const JobRequest& req) {
  // Where a job's time goes outside the sandbox, its key's lookup included
  // (debug log; bench/speed.py, bench/database.py).
  const int64_t t_begin = now_us();
  if (auto s = store_.check_tenant(req.tenant); !s) return s.error();
  const std::string sha256 = request_sha256(req);
  // On a shared ledger a keyed call reads its key in the round trip that
  // takes its slot and records it (a workspace's call reads first: a repeat
  // must not hold the workspace its first call may hold).
  const bool find_first = !ledger_->shared() || !req.workspace_id.empty() || req.workspace_use;
  return keys_.run(
      req.tenant, req.idempotency_key, sha256, [&] { return run_once(req, sha256, t_begin); }, find_first);
}

util::Result<JobResult> Jobs::run_once(const JobRequest& req, const std::string& request_sha256,
                                       const int64_t t_begin) {
  JobResult result;
  result.job_id = util::random_id();
  // The policy this job runs under, to its end, whatever a reload does meanwhile.
  const std::shared_ptr<const policy::Policy> pol = live_.get();
  std::vector<InputRef> inputs;
  auto spec = resolve(*pol, req, result.job_id, inputs);
  if (!spec) return spec.error();
  const policy::Runtime* runtime = pol->find_runtime(req.runtime);
  if (!runtime) return util::make_error(util::ErrorCode::kInternal, "runtime " + req.runtime + ": resolved, then gone");
  // Which checks follow the job: a name the policy lacks fails the call here,
  // before anything runs; those the runtime requires always run.
  auto checks = checks_to_run(*pol, req.runtime, req.checks);
  if (!checks) return checks.error();
  const std::vector<sandbox::InputBind> job_inputs = spec->inputs;
  // A workspace job holds its workspace from here to the end (one call at a
  // time; a second is busy at once): its tree is copied into the job's /work,
  // of the workspace's size, and the job's /work comes back to next_dir.
  std::shared_ptr<WorkspaceUse> workspace = req.workspace_use;
  if (workspace && workspace->id() != req.workspace_id)
    return util::make_error(util::ErrorCode::kInternal, "workspace_id: the call holds another workspace");
  if (!req.workspace_id.empty()) {
    if (!workspace) {
      auto use = hold_workspace(req.tenant, req.workspace_id);
      if (!use) return use.error();
      workspace = std::move(*use);
    }
    spec->work_max_bytes = workspaces_.size_max_bytes() + sandbox::workspace::code_room_bytes(req.code.size());
    spec->workspace_max_bytes = workspaces_.size_max_bytes();
    spec->workspace_in = workspace->dir();
    spec->workspace_out = workspace->next_dir();
  }
  // On a shared ledger the tenant's slot across the servers first (held, and
  // given back by the ledger's end of the job or by the guard below).
  // The job is recorded with its slot where the ledger can (one round trip
  // for both); its key may then be found taken by another server's call.
  TenantSlot tenant_slot{*ledger_, result.job_id};
  LedgerRow start_record = start_row(req, result.job_id, request_sha256, inputs, *spec);
  if (auto s = tenant_slot.take(req.tenant, pol->admission, req.cancel, &start_record); !s) {
    if (s.error().code == util::ErrorCode::kConflict && !req.idempotency_key.empty()) return key_taken();
    if (s.error().code != util::ErrorCode::kCancelled) return s.error();
    result.outcome.status = sandbox::Status::cancelled;
    result.outcome.error = "cancelled while waiting for a slot";
    return result;
  }
  if (ledger_->shared()) keys_.recorded(req.tenant, req.idempotency_key);  // the row is in, with the slot
  // A slot of this server's: beyond the limits this answers busy at once.
  if (auto s = admission_.acquire(req.tenant, req.cancel); !s) {
    if (s.error().code != util::ErrorCode::kCancelled) return s.error();
    result.outcome.status = sandbox::Status::cancelled;
    result.outcome.error = "cancelled while waiting for a slot";
    return result;
  }
  struct Slot {
    Admission& a;
    const std::string& tenant;
    uint64_t cpu_ms = 0;
    ~Slot() { a.release(tenant, cpu_ms); }
  } slot{admission_, req.tenant};

  const int64_t t_admitted = now_us();
  util::call_mark("job admitted", result.job_id);
  // The receipt's facts known before the job starts: what it runs, on what.
  ReceiptFacts facts{result.job_id,
                     receipts_.tenant_digest(req.tenant),
                     fingerprints_.of(*runtime),
                     util::sha256_hex(req.code),
                     inputs,
                     pol->sha256,
                     &*spec,
                     req.network,
                     !req.workspace_id.empty(),
                     nullptr,
                     util::wall_ms(),
                     0};
  // The ledger knows of the job before it starts. What recording needs and
  // leaves is owned by the record_start closure: on the cold path it runs on
  // the release thread.
  struct Start {
    Ledger& ledger;
    LedgerRow row;
    int64_t t_recorded = 0;
    std::optional<util::Error> error;
  };
  auto start = std::make_shared<Start>(Start{*ledger_, std::move(start_record), 0, std::nullopt});
  std::function<util::Status()> record_start = [start]() -> util::Status {
    auto s = start->ledger.record_start(start->row);
    start->t_recorded = now_us();
    util::call_mark("ledger start recorded", start->row.job_id);
    if (s) return util::ok_status();
    // Another server's call with this key won the row: the caller waits for
    // that job instead (Idempotency). Any other failure fails the call.
    const bool taken = s.error().code == util::ErrorCode::kConflict && !start->row.idempotency_key.empty();
    if (taken)
      start->error = key_taken();
    else if (start->ledger.shared())
      start->error = database_unavailable(s.error());  // nothing started: retry later or elsewhere
    else
      start->error = util::make_error(util::ErrorCode::kInternal, s.error().message);
    return *start->error;
  };

  std::unique_ptr<FinishedRunner> finished;
  // A runner still here when this frame is left by an exception (the progress
  // callback is the client's) is cancelled and handed to the reaper: its
  // scratch directory and cgroup are removed as after any job.
  struct RetireOnUnwind {
    RunnerFleet& fleet;
    std::unique_ptr<FinishedRunner>& finished;
    ~RetireOnUnwind() {
      if (!finished || !finished->runner) return;
      finished->runner->close_stdout();
      finished->runner->signal(SIGTERM);
      fleet.retire(std::move(*finished));
    }
  } retire_on_unwind{fleet_, finished};
  spec->progress = static_cast<bool>(req.on_progress);
  // A job with a network profile: its share of the proxy, cut at the job's
  // deadline (counted from now, so a little before the runner's), finished
  // (every tunnel closed) as soon as the outcome is in.
  std::shared_ptr<network::Session> egress;
  JobRequest with_listener;
  const JobRequest* launch_req = &req;
  if (!req.network.empty()) {
    if (!proxy_) return util::make_error(util::ErrorCode::kInternal, "network: no proxy is running");
    auto opened = proxy_->open(result.job_id, req.network, util::now_ms() + static_cast<int64_t>(spec->timeout_ms));
    if (!opened) return opened.error();
    egress = std::move(*opened);
    with_listener = req;
    with_listener.on_listener = [egress](util::UniqueFd listener) { egress->serve(std::move(listener)); };
    launch_req = &with_listener;
  }
  struct FinishEgress {
    std::shared_ptr<network::Session>& session;
    JobResult& result;
    void operator()() {
      if (!session) return;
      result.network = network::to_json(session->finish());
      session.reset();
    }
    ~FinishEgress() { (*this)(); }
  } finish_egress{egress, result};
  util::Result<sandbox::Outcome> outcome = util::make_error(util::ErrorCode::kInternal, "not started");
  int64_t t_outcome = 0;
  bool started = false;
  if (pool_) {
    WarmStart warm = start_warm(*pool_, fleet_, *spec, *launch_req, record_start, finished);
    if (start->error) return *start->error;  // never recorded: nothing was started
    started = warm.started;
    if (started) outcome = std::move(warm.outcome);
  }
  if (!started) {
    // The runner's zygote makes the scratch directory (an ext4 mkdir here took
    // 0.11 ms before the spec could be written); its parent exists.
    auto lease = identities_.lease();
    if (!lease) return lease.error();
    set_identity(*spec, lease->identity());
    outcome = start_cold(fleet_, release_, *spec, std::move(*lease), *launch_req,
                         start->t_recorded ? std::function<util::Status()>() : record_start, finished);
  }
  if (start->error) {
    // Never recorded, never started: the call fails as a whole.
    if (finished) fleet_.retire(std::move(*finished));
    return *start->error;
  }
  finish_egress();
  if (workspace) {
    const bool saved = outcome && outcome->workspace_saved;
    WorkspaceInfo info = workspace->finish(saved, saved ? outcome->workspace_bytes : 0);
    result.workspace = to_json(info);
    result.workspace["saved"] = saved;
    result.workspace["full"] = outcome && outcome->workspace_full;
    if (outcome && !outcome->workspace_error.empty()) result.workspace["error"] = outcome->workspace_error;
    workspace.reset();
  }
  if (outcome) {
    result.outcome = std::move(*outcome);
    t_outcome = now_us();
    util::call_mark("outcome read", result.job_id);
    result.artifacts = store_artifacts(gate_, *parsers_, store_, pol->limits.outputs_max_bytes, req.tenant,
                                       result.job_id, result.outcome);
  } else {
    spdlog::error("job {}: {}", result.job_id, outcome.error().message);
    result.outcome.status = sandbox::Status::sandbox_error;
    result.outcome.error = outcome.error().message;
  }
  if (result.outcome.status == sandbox::Status::sandbox_error)
    spdlog::error("job {}: sandbox_error: {}", result.job_id, result.outcome.error);
  if (finished) {
    fleet_.retire(std::move(*finished));
  } else if (!started) {
    if (auto s = util::remove_tree(spec->scratch_dir); !s)
      spdlog::warn("job {}: cleanup: {}", result.job_id, s.error().message);
  }
  // The job's process tree is gone (its sandbox's pid namespace with it):
  // now its checks, within its slot.
  result.checks = run_checks(*pol, req, *checks, result, job_inputs, inputs);
  slot.cpu_ms = result.outcome.cpu_ms;
  // What ran and what came of it, signed (before the ledger keeps the result,
  // so every read of the job returns this receipt).
  const int64_t t_receipt = now_us();
  facts.result = &result;
  facts.ended_ms = util::wall_ms();
  result.receipt = receipts_.sign(receipt_statement(facts));
  const int64_t t_signed = now_us();
  const nlohmann::json recorded = recorded_result(result);
  const int64_t t_stored = now_us();
  util::call_mark("artifacts stored", result.job_id);
  if (auto s = ledger_->record_end(result.job_id, sandbox::to_string(result.outcome.status), recorded); !s)
    spdlog::error("job {}: ledger: {}", result.job_id, s.error().message);
  else
    tenant_slot.given_back();  // the end gave the tenant's slot back with it
  const int64_t t_end = now_us();
  util::call_mark("ledger end recorded", result.job_id);
  metrics_.job_ended(sandbox::to_string(result.outcome.status), static_cast<double>(t_end - t_admitted) / 1e6);
  for (auto& a : result.artifacts) metrics_.artifact_judged(std::string(to_string(a.verdict)));
  spdlog::debug(
      "job {} timings (us): resolve+admit {} ledger_start {} runner {} store {} receipt {} ledger_end+cleanup {}",
      result.job_id, t_admitted - t_begin, start->t_recorded - t_admitted,
      (t_outcome ? t_outcome : t_stored) - start->t_recorded, t_outcome ? t_stored - t_outcome : 0,
      t_signed - t_receipt, t_end - t_stored);
  std::string layers;
  for (auto& l : result.outcome.layers) layers += (layers.empty() ? "" : " ") + l;
  spdlog::info("job {} tenant={} runtime={} start={} status={} duration_ms={} layers=[{}]", result.job_id, req.tenant,
               req.runtime, result.outcome.start, sandbox::to_string(result.outcome.status), result.outcome.duration_ms,
               layers);
  return result;
}

}  // namespace broker
