// A session's outgoing messages routed to the HTTP streams waiting for them
// (http_sse.h).
#include "server/transport/http_sse.h"

#include <spdlog/spdlog.h>

namespace transport::http {
namespace {

using nlohmann::json;

bool is_response(const json& m) { return m.is_object() && m.contains("id") && !m.contains("method"); }

}  // namespace

void Stream::push(Outgoing m) {
  {
    std::lock_guard lock(mu);
    queue.push_back(std::move(m));
  }
  cv.notify_all();
}

std::optional<Outgoing> Stream::pop(Clock::time_point until) {
  std::unique_lock lock(mu);
  cv.wait_until(lock, until, [&] { return !queue.empty() || closed; });
  if (queue.empty()) return std::nullopt;
  Outgoing m = std::move(queue.front());
  queue.pop_front();
  return m;
}

void Stream::close() {
  {
    std::lock_guard lock(mu);
    closed = true;
  }
  cv.notify_all();
}

bool Stream::is_closed() {
  std::lock_guard lock(mu);
  return closed;
}

std::optional<Outgoing> Stream::await_answer(Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    auto m = pop(deadline);
    if (!m) break;
    if (!m->answers.empty()) return m;
  }
  return std::nullopt;
}

void Router::send(const json& m) {
  Outgoing out;
  if (m.is_array()) {
    for (auto& r : m)
      if (is_response(r)) out.answers.push_back(r["id"].dump());
  } else if (is_response(m)) {
    out.answers.push_back(m["id"].dump());
    out.is_error = m.contains("error");
    if (out.is_error && m["error"].is_object()) out.error_code = m["error"].value("code", 0);
  }
  std::string token;
  if (m.is_object() && m.value("method", "") == "notifications/progress" && m.contains("params") &&
      m["params"].is_object() && m["params"].contains("progressToken"))
    token = m["params"]["progressToken"].dump();
  std::shared_ptr<Stream> to;
  {
    std::lock_guard lock(mu_);
    // A batch answer goes where its requests came from.
    if (!out.answers.empty()) {
      auto it = by_id_.find(out.answers.front());
      if (it != by_id_.end()) to = it->second;
    } else if (!token.empty()) {
      auto it = by_token_.find(token);
      if (it != by_token_.end()) to = it->second;
    }
    if (!to && !gets_.empty()) to = gets_[next_get_++ % gets_.size()];
  }
  if (!to) {
    spdlog::debug("http: no open stream for a {} message; dropped", out.answers.empty() ? "notification" : "response");
    return;
  }
  out.text = m.dump(-1, ' ', false, json::error_handler_t::replace);
  to->push(std::move(out));
}

void Router::expect(const std::vector<std::string>& ids, const std::vector<std::string>& tokens,
                    const std::shared_ptr<Stream>& s) {
  std::lock_guard lock(mu_);
  for (auto& id : ids) by_id_[id] = s;
  for (auto& t : tokens) by_token_[t] = s;
}

void Router::forget(const std::vector<std::string>& ids, const std::vector<std::string>& tokens) {
  std::lock_guard lock(mu_);
  for (auto& id : ids) by_id_.erase(id);
  for (auto& t : tokens) by_token_.erase(t);
}

void Router::add_get(const std::shared_ptr<Stream>& s) {
  std::lock_guard lock(mu_);
  gets_.push_back(s);
}

void Router::remove_get(const std::shared_ptr<Stream>& s) {
  std::lock_guard lock(mu_);
  std::erase(gets_, s);
}

}  // namespace transport::http
