// A broker (server/broker/broker.h) that starts no runner and no sandbox, for
// the tests and fuzz harnesses of what sits above it: the tools, the MCP
// session, the HTTP operations. A job is answered by the test's function;
// every request it got is kept, for the test to read.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/broker/broker.h"

namespace fakes {

class FakeBroker final : public broker::Broker {
 public:
  using Runner = std::function<util::Result<broker::JobResult>(const broker::JobRequest& request)>;
  using MediaType = std::function<std::string(const std::string& name, const std::string& content)>;

  // No runner: every job fails as a broker fault. No media type: octet-stream.
  explicit FakeBroker(Runner runner = {}, MediaType media_type = {})
      : runner_(std::move(runner)), media_type_(std::move(media_type)) {}

  util::Result<broker::JobResult> run(const broker::JobRequest& request) override {
    {
      std::lock_guard lock(mu_);
      requests_.push_back(request);
    }
    if (!runner_) return util::make_error(util::ErrorCode::kInternal, "the fake broker has no runner");
    return runner_(request);
  }
  std::string upload_media_type(const std::string& name, const std::string& content) override {
    return media_type_ ? media_type_(name, content) : "application/octet-stream";
  }
  // The real registry over the test's own ledger, when set; else every
  // workspace is unknown.
  void set_workspaces(broker::Workspaces* w) { workspaces_ = w; }
  util::Result<broker::WorkspaceInfo> open_workspace(const std::string& tenant, std::optional<double> ttl_s) override {
    if (!workspaces_) return util::make_error(util::ErrorCode::kBusy, "the fake broker keeps no workspaces");
    return workspaces_->open(tenant, ttl_s);
  }
  util::Status close_workspace(const std::string& tenant, const std::string& workspace_id) override {
    if (!workspaces_) return util::make_error(util::ErrorCode::kNotFound, broker::kUnknownWorkspace);
    return workspaces_->close(tenant, workspace_id);
  }
  util::Result<std::shared_ptr<broker::WorkspaceUse>> hold_workspace(const std::string& tenant,
                                                                     const std::string& workspace_id) override {
    if (!workspaces_) return util::make_error(util::ErrorCode::kNotFound, broker::kUnknownWorkspace);
    return workspaces_->begin(tenant, workspace_id);
  }
  void add_record(const std::string& tenant, broker::LedgerRow row) {
    std::lock_guard lock(mu_);
    records_[{tenant, row.job_id}] = std::move(row);
  }
  std::optional<broker::LedgerRow> find_record(const std::string& tenant, const std::string& job_id) override {
    std::lock_guard lock(mu_);
    auto it = records_.find({tenant, job_id});
    if (it == records_.end()) return std::nullopt;
    return it->second;
  }
  std::string metrics_text(uint64_t sessions_open) override {
    return "throwbox_fake_sessions " + std::to_string(sessions_open) + "\n";
  }
  nlohmann::json receipt_key() override { return {{"alg", "Ed25519"}, {"key_id", "fake"}, {"public_key_pem", ""}}; }
  void set_unready(std::string why) {
    std::lock_guard lock(mu_);
    unready_ = std::move(why);
  }
  std::string unready_reason() override {
    std::lock_guard lock(mu_);
    return unready_;
  }

  std::vector<broker::JobRequest> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  Runner runner_;
  MediaType media_type_;
  broker::Workspaces* workspaces_ = nullptr;
  std::mutex mu_;
  std::vector<broker::JobRequest> requests_;
  std::map<std::pair<std::string, std::string>, broker::LedgerRow> records_;
  std::string unready_;
};

}  // namespace fakes
