// MCP session lifecycle and dispatch, driven in-process with a fake outbox;
// stdio framing fed from a pipe. No sandbox is ever started: run_code is only
// called with arguments it refuses, and tasks run a test tool ("gated").
#include <doctest/doctest.h>

#include <spdlog/spdlog.h>

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/broker/jobs.h"
#include "server/broker/ledger.h"
#include "server/protocol/tasks.h"
#include "server/policy/policy.h"
#include "server/protocol/mcp.h"
#include "server/store/store.h"
#include "server/transport/stdio.h"
#include "tools/registry.h"
#include "tests/unit/paths.h"

using nlohmann::json;
namespace mcp = protocol::mcp;

namespace {

class FakeOutbox : public mcp::Outbox {
 public:
  void send(const json& message) override {
    std::lock_guard lock(mu_);
    messages_.push_back(message);
  }
  std::vector<json> take() {
    std::lock_guard lock(mu_);
    std::vector<json> out;
    out.swap(messages_);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<json> messages_;
};

// A tool that may run as a task and needs no sandbox: it reports progress
// once, then blocks until it is cancelled or the gate opens.
struct Gate {
  std::mutex mu;
  bool open = false;
  std::atomic<int> started{0};
  void release() {
    std::lock_guard lock(mu);
    open = true;
  }
  tools::Tool tool() {
    json def{{"name", "gated"}, {"description", "test tool"}, {"inputSchema", {{"type", "object"}}}};
    auto call = [this](const json&, tools::CallContext& ctx) -> tools::ToolResult {
      if (ctx.progress) ctx.progress({{"elapsed_ms", 1000}, {"stdout_bytes", 3}, {"last_line", "hi"}});
      ++started;
      for (;;) {
        pollfd p{ctx.cancel->fd(), POLLIN, 0};
        if (::poll(&p, 1, 10) > 0) return tools::ok_result({{"job_id", "g1"}, {"status", "cancelled"}}, "cancelled");
        std::lock_guard lock(mu);
        if (open) return tools::ok_result({{"job_id", "g1"}, {"status", "completed"}, {"exit_code", 0}}, "done");
      }
    };
    return tools::Tool{def, call, "optional"};
  }
};

// Everything a Session needs, over a temporary state directory.
struct Fixture {
  std::string dir;
  std::unique_ptr<policy::Policy> policy;
  std::unique_ptr<policy::Live> live;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<broker::Jobs> jobs;
  std::unique_ptr<tools::Registry> registry;
  std::unique_ptr<protocol::Tasks> tasks;
  std::unique_ptr<mcp::ServerContext> ctx;
  FakeOutbox out;
  std::unique_ptr<mcp::Session> session;
  Gate gate;

  explicit Fixture(bool with_gated_tool = false) {
    spdlog::set_level(spdlog::level::warn);  // keep "initialize: client=..." out of test output
    char tmpl[] = "/tmp/throwbox-mcp-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    auto p = policy::load_file(unit::source_path("/policies/default.json"));
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
    policy = std::make_unique<policy::Policy>(std::move(*p));
    live = std::make_unique<policy::Live>(std::make_shared<const policy::Policy>(*policy));
    store = std::make_unique<store::Store>(dir);
    // No runner ever starts here; an upload's type comes from the parser helper beside it.
    jobs = std::make_unique<broker::Jobs>(*live, *store, unit::build_path("/throwbox-runner"), json::object());
    registry = std::make_unique<tools::Registry>(tools::make_registry(*policy));
    if (with_gated_tool) registry->add(gate.tool());
    auto ledger = broker::Ledger::open(dir + "/ledger.sqlite3");
    REQUIRE(ledger.ok());
    tasks = std::make_unique<protocol::Tasks>(std::move(*ledger), protocol::tasks_options(*policy));
    ctx =
        std::make_unique<mcp::ServerContext>(mcp::ServerContext{*live, *store, *jobs, *registry, nullptr, tasks.get()});
    session = std::make_unique<mcp::Session>(*ctx, out, "alice");
  }
  ~Fixture() {
    session.reset();  // joins the worker pool before the store goes away
    gate.release();
    tasks.reset();  // waits for running tasks before the registry and jobs go away
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  // Sends one line and returns every message produced once in-flight calls answered.
  std::vector<json> exchange(const std::string& line) {
    session->handle_line(line);
    session->drain();
    return out.take();
  }
  json one(const std::string& line) {
    auto msgs = exchange(line);
    REQUIRE(msgs.size() == 1);
    return msgs[0];
  }
  json initialize(const std::string& version = "2025-06-18") { return initialize_session(*session, out, version); }
  static json initialize_session(mcp::Session& s, FakeOutbox& o, const std::string& version) {
    json req{{"jsonrpc", "2.0"},
             {"id", 0},
             {"method", "initialize"},
             {"params",
              {{"protocolVersion", version},
               {"capabilities", json::object()},
               {"clientInfo", {{"name", "unit"}, {"version", "1"}}}}}};
    s.handle_line(req.dump());
    s.handle_line(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
    s.drain();
    auto msgs = o.take();
    REQUIRE(msgs.size() == 1);
    return msgs[0];
  }
};

std::string request(int id, const std::string& method, const json& params = nullptr) {
  json r{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
  if (!params.is_null()) r["params"] = params;
  return r.dump();
}

std::string tools_call(int id, const std::string& tool, const json& args) {
  return request(id, "tools/call", {{"name", tool}, {"arguments", args}});
}

void check_error(const json& msg, const json& id, int code) {
  CAPTURE(msg.dump());
  CHECK(msg["jsonrpc"] == "2.0");
  CHECK(msg["id"] == id);
  REQUIRE(msg.contains("error"));
  CHECK(msg["error"]["code"] == code);
  CHECK_FALSE(msg.contains("result"));
}

}  // namespace

TEST_CASE("negotiate_version keeps a supported version and falls back to the latest") {
  CHECK(mcp::negotiate_version("2025-06-18") == "2025-06-18");
  CHECK(mcp::negotiate_version("2025-03-26") == "2025-03-26");
  CHECK(mcp::negotiate_version("2025-11-25") == "2025-11-25");
  CHECK(mcp::negotiate_version("2024-11-05") == "2025-11-25");
  CHECK(mcp::negotiate_version("") == "2025-11-25");
  CHECK(mcp::negotiate_version("bogus") == "2025-11-25");
}

TEST_CASE("instructions describe /inputs, /outputs and the absence of network") {
  auto p = policy::load_file(unit::source_path("/policies/default.json"));
  REQUIRE(p.ok());
  std::string text = mcp::instructions_text(*p);
  CHECK(text.find("/inputs") != std::string::npos);
  CHECK(text.find("/outputs") != std::string::npos);
  CHECK(text.find("no network") != std::string::npos);
  CHECK(text.find("python") != std::string::npos);
  CHECK(text.find("bash") != std::string::npos);
}

TEST_CASE("before initialize: tools/list is refused, ping is answered") {
  Fixture f;
  json r = f.one(request(1, "tools/list"));
  check_error(r, 1, -32600);
  CHECK(r["error"]["message"].get<std::string>().find("initialize") != std::string::npos);

  json p = f.one(request(2, "ping"));
  CHECK(p["id"] == 2);
  CHECK(p["result"] == json::object());

  json c = f.one(tools_call(3, "upload_input", {{"name", "a.txt"}, {"content", "x"}}));
  check_error(c, 3, -32600);
}

TEST_CASE("initialize answers version, server info and capabilities") {
  Fixture f;
  json r = f.initialize("2025-06-18");
  CAPTURE(r.dump());
  CHECK(r["id"] == 0);
  REQUIRE(r.contains("result"));
  const json& res = r["result"];
  CHECK(res["protocolVersion"] == "2025-06-18");
  CHECK(res["serverInfo"]["name"] == "throwbox");
  CHECK(res["serverInfo"]["version"].is_string());
  CHECK(res["capabilities"].contains("tools"));
  CHECK(res["capabilities"].contains("resources"));
  CHECK(res["instructions"].get<std::string>().find("/outputs") != std::string::npos);

  json list = f.one(request(1, "tools/list"));
  REQUIRE(list.contains("result"));
  std::vector<std::string> names;
  for (auto& t : list["result"]["tools"]) names.push_back(t["name"].get<std::string>());
  CHECK(names ==
        std::vector<std::string>{"close_workspace", "fetch_artifact", "open_workspace", "run_code", "upload_input"});
}

TEST_CASE("initialize with an unknown version gets the latest") {
  Fixture f;
  json r = f.initialize("1999-01-01");
  CHECK(r["result"]["protocolVersion"] == "2025-11-25");
}

TEST_CASE("initialize without protocolVersion is -32602") {
  Fixture f;
  json r = f.one(request(5, "initialize", {{"capabilities", json::object()}}));
  check_error(r, 5, -32602);
  CHECK(r["error"]["message"].get<std::string>().find("protocolVersion") != std::string::npos);
  // The session is still uninitialized.
  check_error(f.one(request(6, "tools/list")), 6, -32600);
}

TEST_CASE("a second initialize is refused") {
  Fixture f;
  f.initialize();
  json r = f.one(request(9, "initialize", {{"protocolVersion", "2025-03-26"}}));
  check_error(r, 9, -32600);
  CHECK(r["error"]["message"].get<std::string>().find("already initialized") != std::string::npos);
}

TEST_CASE("unknown method is -32601 naming it") {
  Fixture f;
  f.initialize();
  json r = f.one(request(4, "tools/destroy"));
  check_error(r, 4, -32601);
  CHECK(r["error"]["message"] == "Method not found: tools/destroy");
}

TEST_CASE("tools/call of an unknown tool is -32602") {
  Fixture f;
  f.initialize();
  json r = f.one(tools_call(7, "rm_rf", json::object()));
  check_error(r, 7, -32602);
  CHECK(r["error"]["message"].get<std::string>().find("rm_rf") != std::string::npos);

  json noname = f.one(request(8, "tools/call", {{"arguments", json::object()}}));
  check_error(noname, 8, -32602);

  json badargs = f.one(request(9, "tools/call", {{"name", "upload_input"}, {"arguments", "x"}}));
  check_error(badargs, 9, -32602);
}

TEST_CASE("upload_input with a traversal name is an isError result, not structured") {
  Fixture f;
  f.initialize();
  json r = f.one(tools_call(11, "upload_input", {{"name", "../../etc/passwd"}, {"content", "x"}}));
  CAPTURE(r.dump());
  CHECK(r["id"] == 11);
  REQUIRE(r.contains("result"));
  CHECK(r["result"]["isError"] == true);
  CHECK_FALSE(r["result"].contains("structuredContent"));
  REQUIRE(r["result"]["content"].size() == 1);
  CHECK(r["result"]["content"][0]["type"] == "text");
  CHECK(r["result"]["content"][0]["text"].get<std::string>().find("name:") == 0);
}

TEST_CASE("upload_input with an unknown argument or bad base64 is an isError result") {
  Fixture f;
  f.initialize();
  json extra = f.one(tools_call(12, "upload_input", {{"name", "a"}, {"content", "x"}, {"path", "/etc"}}));
  CHECK(extra["result"]["isError"] == true);
  CHECK(extra["result"]["content"][0]["text"] == "path: unknown argument");

  json b64 = f.one(tools_call(13, "upload_input", {{"name", "a.bin"}, {"content", "QR=="}, {"encoding", "base64"}}));
  CHECK(b64["result"]["isError"] == true);
  CHECK(b64["result"]["content"][0]["text"].get<std::string>().find("content:") == 0);
}

TEST_CASE("upload_input ok returns structuredContent with an input_id") {
  Fixture f;
  f.initialize();
  json r = f.one(tools_call(21, "upload_input", {{"name", "orders.csv"}, {"content", "a,b\n1,2\n"}}));
  CAPTURE(r.dump());
  CHECK(r["id"] == 21);
  CHECK(r["result"]["isError"] == false);
  const json& sc = r["result"]["structuredContent"];
  REQUIRE(sc.contains("input_id"));
  std::string id = sc["input_id"].get<std::string>();
  CHECK(id.size() == 32);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(sc["name"] == "orders.csv");
  CHECK(sc["size"] == 8);
  CHECK(sc["media_type"] == "text/csv");
  // Same upload again: same id.
  json again = f.one(tools_call(22, "upload_input", {{"name", "orders.csv"}, {"content", "a,b\n1,2\n"}}));
  CHECK(again["result"]["structuredContent"]["input_id"] == id);
  // base64 "YWJj" is "abc".
  json b64 = f.one(tools_call(23, "upload_input", {{"name", "abc.bin"}, {"content", "YWJj"}, {"encoding", "base64"}}));
  CHECK(b64["result"]["structuredContent"]["sha256"] ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("batch under 2025-06-18 is a single -32600 error") {
  Fixture f;
  f.initialize("2025-06-18");
  auto msgs = f.exchange("[" + request(1, "ping") + "," + request(2, "ping") + "]");
  REQUIRE(msgs.size() == 1);
  check_error(msgs[0], nullptr, -32600);
  CHECK(msgs[0]["error"]["message"].get<std::string>().find("batch") != std::string::npos);
}

TEST_CASE("batch before initialize is a single -32600 error") {
  Fixture f;
  auto msgs = f.exchange("[" + request(1, "ping") + "]");
  REQUIRE(msgs.size() == 1);
  check_error(msgs[0], nullptr, -32600);
}

TEST_CASE("batch under 2025-03-26 gets one array response with both answers") {
  Fixture f;
  f.initialize("2025-03-26");
  auto msgs = f.exchange("[" + request(1, "ping") + "," + request(2, "tools/list") + "," +
                         R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{}})" + "]");
  REQUIRE(msgs.size() == 1);
  const json& arr = msgs[0];
  REQUIRE(arr.is_array());
  REQUIRE(arr.size() == 2);
  bool saw1 = false, saw2 = false;
  for (auto& r : arr) {
    if (r["id"] == 1) {
      saw1 = true;
      CHECK(r["result"] == json::object());
    }
    if (r["id"] == 2) {
      saw2 = true;
      CHECK(r["result"]["tools"].size() == 5);
    }
  }
  CHECK(saw1);
  CHECK(saw2);
}

TEST_CASE("batch under 2025-03-26 with a tool call waits for the worker answer") {
  Fixture f;
  f.initialize("2025-03-26");
  auto msgs = f.exchange("[" + tools_call(1, "upload_input", {{"name", "a.txt"}, {"content", "x"}}) + "," +
                         R"({"jsonrpc":"1.0","id":2,"method":"ping"})" + "]");
  REQUIRE(msgs.size() == 1);
  REQUIRE(msgs[0].is_array());
  REQUIRE(msgs[0].size() == 2);
  for (auto& r : msgs[0]) {
    if (r["id"] == 1)
      CHECK(r["result"]["isError"] == false);
    else
      check_error(r, 2, -32600);
  }
}

TEST_CASE("batch of only notifications produces no output") {
  Fixture f;
  f.initialize("2025-03-26");
  CHECK(f.exchange(R"([{"jsonrpc":"2.0","method":"notifications/a"},{"jsonrpc":"2.0","method":"b"}])").empty());
}

TEST_CASE("initialize inside a batch is refused") {
  Fixture f;
  f.initialize("2025-03-26");
  auto msgs = f.exchange("[" + request(3, "initialize", {{"protocolVersion", "2025-03-26"}}) + "]");
  REQUIRE(msgs.size() == 1);
  REQUIRE(msgs[0].is_array());
  check_error(msgs[0][0], 3, -32600);
}

TEST_CASE("a notification named initialize inside a batch gets no answer") {
  // Found by fuzz.mcp_session: it was answered with id null, an answer no
  // request asked for.
  Fixture f;
  f.initialize("2025-03-26");
  auto msgs =
      f.exchange(R"([{"jsonrpc":"2.0","method":"initialize","params":{}},)" + request(4, "ping", json::object()) + "]");
  REQUIRE(msgs.size() == 1);
  REQUIRE(msgs[0].is_array());
  REQUIRE(msgs[0].size() == 1);
  CHECK(msgs[0][0]["id"] == 4);
  CHECK(msgs[0][0].contains("result"));
  CHECK(f.exchange(R"([{"jsonrpc":"2.0","method":"initialize"}])").empty());
}

TEST_CASE("notifications and responses produce no output") {
  Fixture f;
  CHECK(f.exchange(R"({"jsonrpc":"2.0","method":"notifications/initialized"})").empty());
  CHECK(f.exchange(R"({"jsonrpc":"2.0","method":"tools/list"})").empty());  // no id: notification
  CHECK(f.exchange(R"({"jsonrpc":"2.0","id":5,"result":{}})").empty());
  f.initialize();
  CHECK(f.exchange(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}})").empty());
}

TEST_CASE("malformed lines get the right JSON-RPC errors through the session") {
  Fixture f;
  check_error(f.one("{not json"), nullptr, -32700);
  check_error(f.one(R"({"jsonrpc":"2.0","id":3,"method":"ping","params":"x"})"), 3, -32602);
  check_error(f.one(R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})"), nullptr, -32600);
  check_error(f.one(std::string(100, '[') + std::string(100, ']')), nullptr, -32600);
  check_error(f.one("[]"), nullptr, -32600);
}

TEST_CASE("handle_oversized answers -32600 with the id the transport read, else null") {
  Fixture f;
  f.session->handle_oversized(123456789);
  auto msgs = f.out.take();
  REQUIRE(msgs.size() == 1);
  check_error(msgs[0], nullptr, -32600);
  CHECK(msgs[0]["error"]["message"].get<std::string>().find("123456789 bytes") != std::string::npos);
  f.session->handle_oversized(123456789, 42);
  msgs = f.out.take();
  REQUIRE(msgs.size() == 1);
  check_error(msgs[0], 42, -32600);
}

TEST_CASE("resources/read of an unknown or foreign uri is -32002") {
  Fixture f;
  f.initialize();
  json r = f.one(request(1, "resources/read", {{"uri", "file:///etc/passwd"}}));
  check_error(r, 1, -32002);
  json r2 = f.one(request(2, "resources/read", {{"uri", "throwbox://artifacts/0123456789abcdef0123456789abcdef"}}));
  check_error(r2, 2, -32002);
  CHECK(r["error"]["message"] == r2["error"]["message"]);
}

// ---- MCP tasks (2025-11-25) ----

namespace {

// Waits up to 10 s for a message matching `pred` on `out`; the others are kept in `seen`.
json await_message(FakeOutbox& out, const std::function<bool(const json&)>& pred, std::vector<json>& seen) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    for (auto& m : out.take()) seen.push_back(m);
    for (auto it = seen.begin(); it != seen.end(); ++it)
      if (pred(*it)) {
        json m = *it;
        seen.erase(it);
        return m;
      }
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::function<bool(const json&)> has_id(int id) {
  return [id](const json& m) { return m.contains("id") && m["id"] == id; };
}

// Sends `line` and waits for the answer with `id`; notifications that came first go to `seen`.
json call_and_await(Fixture& f, const std::string& line, int id, std::vector<json>& seen) {
  f.session->handle_line(line);
  return await_message(f.out, has_id(id), seen);
}

std::string task_call(int id, const std::string& tool, const json& args, const json& task, const json& meta = nullptr) {
  json params{{"name", tool}, {"arguments", args}, {"task", task}};
  if (!meta.is_null()) params["_meta"] = meta;
  return request(id, "tools/call", params);
}

}  // namespace

TEST_CASE("tasks: the capability and execution.taskSupport only on 2025-11-25") {
  Fixture f;
  json r = f.initialize("2025-11-25");
  CAPTURE(r.dump());
  CHECK(r["result"]["capabilities"]["tasks"] ==
        json::parse(R"({"list":{},"cancel":{},"requests":{"tools":{"call":{}}}})"));
  json list = f.one(request(1, "tools/list"));
  for (auto& t : list["result"]["tools"]) {
    CAPTURE(t["name"]);
    if (t["name"] == "run_code")
      CHECK(t["execution"] == json{{"taskSupport", "optional"}});
    else
      CHECK_FALSE(t.contains("execution"));  // absent: forbidden
  }

  for (std::string older : {"2025-06-18", "2025-03-26"}) {
    Fixture g;
    json o = g.initialize(older);
    CHECK_FALSE(o["result"]["capabilities"].contains("tasks"));
    for (auto& t : g.one(request(1, "tools/list"))["result"]["tools"]) CHECK_FALSE(t.contains("execution"));
  }
}

TEST_CASE("tools/list is the registry's list on every call, built once per session and version") {
  for (std::string version : {"2025-06-18", "2025-11-25"}) {
    Fixture f;
    f.initialize(version);
    const json expected = f.registry->list(version == "2025-11-25");
    for (int id = 1; id <= 3; ++id) {
      json r = f.one(request(id, "tools/list"));
      CHECK(r["id"] == id);
      CHECK(r["result"] == json{{"tools", expected}});
    }
  }
}

TEST_CASE("handle_parsed answers like handle_line for the same text") {
  Fixture f;
  f.initialize();
  const protocol::jsonrpc::Limits limits{f.policy->server.message_max_bytes, f.policy->server.json_max_depth};
  f.session->handle_parsed(protocol::jsonrpc::parse_line(request(7, "ping"), limits));
  f.session->handle_parsed(protocol::jsonrpc::parse_line("{not json", limits));
  f.session->drain();
  auto msgs = f.out.take();
  REQUIRE(msgs.size() == 2);
  CHECK(msgs[0] == json::parse(R"({"jsonrpc":"2.0","id":7,"result":{}})"));
  CHECK(msgs[1]["error"]["code"] == -32700);
  CHECK(msgs[1]["id"].is_null());
}

TEST_CASE("tasks: a task on a tool that forbids it is -32601, a malformed task -32602") {
  Fixture f;
  f.initialize("2025-11-25");
  json fetch = f.one(task_call(1, "fetch_artifact", {{"artifact_id", "x"}}, json::object()));
  check_error(fetch, 1, -32601);
  CHECK(fetch["error"]["message"].get<std::string>().find("fetch_artifact") != std::string::npos);
  check_error(f.one(task_call(2, "upload_input", {{"name", "a"}, {"content", "x"}}, {{"ttl", 1000}})), 2, -32601);
  check_error(f.one(task_call(3, "run_code", {{"runtime", "python"}}, "soon")), 3, -32602);
  check_error(f.one(task_call(4, "run_code", {{"runtime", "python"}}, {{"ttl", -1}})), 4, -32602);
  check_error(f.one(task_call(5, "run_code", {{"runtime", "python"}}, {{"ttl", "1000"}})), 5, -32602);
  check_error(f.one(task_call(6, "run_code", {{"runtime", "python"}}, nullptr)), 6, -32602);
  CHECK(f.tasks->list("alice", "")->tasks.empty());  // none of them made a task
}

TEST_CASE("tasks: an older session ignores the task param and has no tasks/* methods") {
  Fixture f;
  f.initialize("2025-06-18");
  json r = f.one(task_call(1, "upload_input", {{"name", "a.txt"}, {"content", "x"}}, {{"ttl", 1000}}));
  CAPTURE(r.dump());
  CHECK(r["result"]["isError"] == false);
  CHECK(r["result"]["structuredContent"].contains("input_id"));
  CHECK_FALSE(r["result"].contains("task"));
  check_error(f.one(request(2, "tasks/list")), 2, -32601);
  check_error(f.one(request(3, "tasks/get", {{"taskId", "0123456789abcdef0123456789abcdef"}})), 3, -32601);
}

TEST_CASE("tasks: a run_code task with bad arguments ends failed, its result carries the task") {
  Fixture f;
  f.initialize("2025-11-25");
  std::vector<json> seen;
  json created = call_and_await(f, task_call(1, "run_code", {{"runtime", "python"}}, {{"ttl", 5000}}), 1, seen);
  CAPTURE(created.dump());
  const json& task = created["result"]["task"];
  REQUIRE(task.is_object());
  CHECK(task["status"] == "working");
  CHECK(task["ttl"] == 5000);
  CHECK(task["pollInterval"] == 1000);
  const std::string id = task["taskId"];
  f.tasks->drain();

  json status = await_message(
      f.out, [](const json& m) { return m.value("method", "") == "notifications/tasks/status"; }, seen);
  CHECK(status["params"]["taskId"] == id);
  CHECK(status["params"]["status"] == "failed");

  json got = f.one(request(2, "tasks/get", {{"taskId", id}}));
  CHECK(got["result"]["status"] == "failed");
  CHECK(got["result"]["statusMessage"].get<std::string>().rfind("code: required", 0) == 0);
  json result = f.one(request(3, "tasks/result", {{"taskId", id}}));
  CAPTURE(result.dump());
  CHECK(result["result"]["isError"] == true);
  CHECK(result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == id);
  json list = f.one(request(4, "tasks/list"));
  REQUIRE(list["result"]["tasks"].size() == 1);
  CHECK(list["result"]["tasks"][0]["taskId"] == id);
  CHECK_FALSE(list["result"].contains("nextCursor"));
  check_error(f.one(request(5, "tasks/list", {{"cursor", "bogus"}})), 5, -32602);
}

TEST_CASE("tasks: unknown, malformed and foreign ids get one and the same -32602") {
  Fixture f(true);
  f.initialize("2025-11-25");
  json created = f.one(task_call(1, "gated", json::object(), json::object()));
  const std::string id = created["result"]["task"]["taskId"];

  FakeOutbox bob_out;
  mcp::Session bob(*f.ctx, bob_out, "bob");
  Fixture::initialize_session(bob, bob_out, "2025-11-25");
  std::string message;
  int n = 10;
  for (const json& tid : {json(id), json("0123456789abcdef0123456789abcdef"), json("../x"), json("")}) {
    for (const char* method : {"tasks/get", "tasks/result", "tasks/cancel"}) {
      CAPTURE(method);
      bob.handle_line(request(++n, method, {{"taskId", tid}}));
      bob.drain();
      auto msgs = bob_out.take();
      REQUIRE(msgs.size() == 1);
      check_error(msgs[0], n, -32602);
      if (message.empty()) message = msgs[0]["error"]["message"];
      CHECK(msgs[0]["error"]["message"] == message);
    }
  }
  CHECK(message == protocol::kTaskNotFound);
  bob.handle_line(request(++n, "tasks/list"));
  bob.drain();
  CHECK(bob_out.take()[0]["result"]["tasks"].empty());
  check_error(f.one(request(100, "tasks/get", {{"taskId", 42}})), 100, -32602);
  CHECK(f.one(request(101, "tasks/get", {{"taskId", id}}))["result"]["status"] ==
        "working");  // bob's cancel did nothing
}

TEST_CASE("tasks: tasks/result waits; tasks/cancel answers cancelled and releases it; a second cancel is -32602") {
  Fixture f(true);
  f.initialize("2025-11-25");
  std::vector<json> seen;
  json created =
      call_and_await(f, task_call(1, "gated", json::object(), json::object(), {{"progressToken", "p1"}}), 1, seen);
  const std::string id = created["result"]["task"]["taskId"];
  json progress = await_message(
      f.out, [](const json& m) { return m.value("method", "") == "notifications/progress"; }, seen);
  CHECK(progress["params"]["progressToken"] == "p1");
  CHECK(progress["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == id);

  // Another session of the same tenant sees the task and waits on it.
  FakeOutbox out2;
  mcp::Session second(*f.ctx, out2, "alice");
  Fixture::initialize_session(second, out2, "2025-11-25");
  second.handle_line(request(2, "tasks/result", {{"taskId", id}}));
  f.session->handle_line(request(3, "tasks/result", {{"taskId", id}}));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(out2.take().empty());  // blocked: the task is working
  for (auto& m : f.out.take()) CHECK_FALSE(has_id(3)(m));

  f.session->handle_line(request(4, "tasks/cancel", {{"taskId", id}}));
  json cancelled = await_message(f.out, has_id(4), seen);
  CAPTURE(cancelled.dump());
  CHECK(cancelled["result"]["taskId"] == id);
  CHECK(cancelled["result"]["status"] == "cancelled");
  // Both waiting tasks/result requests are answered: the task is terminal.
  json r3 = await_message(f.out, has_id(3), seen);
  std::vector<json> seen2;
  json r2 = await_message(out2, has_id(2), seen2);
  for (const json& r : {r2, r3}) {
    CAPTURE(r.dump());
    CHECK(r["result"]["isError"] == true);
    CHECK(r["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == id);
  }
  json again = f.one(request(5, "tasks/cancel", {{"taskId", id}}));
  check_error(again, 5, -32602);
  CHECK(again["error"]["message"] == "Cannot cancel task: already in terminal status 'cancelled'");
  f.tasks->drain();
  // The tool's own result, once it returned, is what tasks/result gives; still cancelled.
  json late = f.one(request(6, "tasks/result", {{"taskId", id}}));
  CHECK(late["result"]["structuredContent"]["status"] == "cancelled");
  CHECK(f.one(request(7, "tasks/get", {{"taskId", id}}))["result"]["status"] == "cancelled");
}

TEST_CASE("tasks: notifications/cancelled drops a waiting tasks/result; an ended session leaves no waiter") {
  Fixture f(true);
  f.initialize("2025-11-25");
  std::vector<json> seen;
  json created =
      call_and_await(f, task_call(1, "gated", json::object(), json::object(), {{"progressToken", 7}}), 1, seen);
  const std::string id = created["result"]["task"]["taskId"];
  f.session->handle_line(request(2, "tasks/result", {{"taskId", id}}));
  f.session->handle_line(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}})");
  {
    FakeOutbox gone_out;
    mcp::Session gone(*f.ctx, gone_out, "alice");
    Fixture::initialize_session(gone, gone_out, "2025-11-25");
    gone.handle_line(request(3, "tasks/result", {{"taskId", id}}));
  }  // ends while its tasks/result waits: nothing may call into it later
  f.gate.release();
  f.tasks->drain();
  json status = await_message(
      f.out, [](const json& m) { return m.value("method", "") == "notifications/tasks/status"; }, seen);
  CHECK(status["params"]["status"] == "completed");
  CHECK(status["params"]["statusMessage"] == "job g1 completed, exit 0");
  for (auto& m : seen) CHECK_FALSE(has_id(2)(m));  // no answer to the dropped request
  for (auto& m : f.out.take()) CHECK_FALSE(has_id(2)(m));
  json result = f.one(request(4, "tasks/result", {{"taskId", id}}));
  CHECK(result["result"]["structuredContent"]["status"] == "completed");
}

// ---- stdio framing ----

namespace {

// Feeds `input` through a pipe into serve() and returns the session's output.
std::vector<json> serve_input(Fixture& f, const std::string& input, size_t max_bytes) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::thread writer([&] {
    size_t off = 0;
    while (off < input.size()) {
      ssize_t n = ::write(fds[1], input.data() + off, input.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::close(fds[1]);
  });
  transport::stdio::serve(*f.session, max_bytes, fds[0]);
  writer.join();
  ::close(fds[0]);
  return f.out.take();
}

}  // namespace

TEST_CASE("stdio: two lines in one write give two responses in order") {
  Fixture f;
  auto msgs = serve_input(f, request(1, "ping") + "\n" + request(2, "ping") + "\n", 4096);
  REQUIRE(msgs.size() == 2);
  CHECK(msgs[0]["id"] == 1);
  CHECK(msgs[1]["id"] == 2);
  CHECK(msgs[0]["result"] == json::object());
}

TEST_CASE("stdio: an oversized line is discarded and answered, the next line still served") {
  Fixture f;
  std::string big = R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":")" + std::string(5000, 'x') + "\"}}";
  auto msgs = serve_input(f, big + "\n" + request(2, "ping") + "\n", 4096);
  REQUIRE(msgs.size() == 2);
  check_error(msgs[0], 1, -32600);  // its id, read as the line streamed by
  CHECK(msgs[1]["id"] == 2);
  CHECK(msgs[1]["result"] == json::object());
}

TEST_CASE("stdio: a multi-megabyte line spanning many reads is discarded without buffering") {
  Fixture f;
  std::string big(3 * 1024 * 1024, 'A');
  auto msgs = serve_input(f, big + "\n" + request(2, "ping") + "\n", 4096);
  REQUIRE(msgs.size() == 2);
  check_error(msgs[0], nullptr, -32600);
  CHECK(msgs[0]["error"]["message"].get<std::string>().find(std::to_string(big.size()) + " bytes") !=
        std::string::npos);
  CHECK(msgs[1]["id"] == 2);
}

TEST_CASE("stdio: CRLF line endings are accepted") {
  Fixture f;
  auto msgs = serve_input(f, request(1, "ping") + "\r\n" + request(2, "ping") + "\r\n", 4096);
  REQUIRE(msgs.size() == 2);
  CHECK(msgs[0]["id"] == 1);
  CHECK(msgs[0].contains("result"));
  CHECK(msgs[1]["id"] == 2);
}

TEST_CASE("stdio: blank lines are ignored") {
  Fixture f;
  auto msgs = serve_input(f, "\n\n   \n\r\n\t\n" + request(1, "ping") + "\n\n", 4096);
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0]["id"] == 1);
}

TEST_CASE("stdio: a final line without newline is still served") {
  Fixture f;
  auto msgs = serve_input(f, request(1, "ping") + "\n" + request(2, "ping"), 4096);
  REQUIRE(msgs.size() == 2);
  CHECK(msgs[1]["id"] == 2);
}

TEST_CASE("stdio: a line of exactly max bytes is served") {
  Fixture f;
  std::string line = request(1, "ping");
  auto msgs = serve_input(f, line + "\n", line.size());
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0]["id"] == 1);
  CHECK(msgs[0].contains("result"));
}

// Regression: at EOF the last unterminated line skipped the blank-line rule
// (and the CR strip), so trailing spaces were answered with -32700.
TEST_CASE("a blank final line without newline is ignored") {
  Fixture f;
  auto msgs = serve_input(f, request(1, "ping") + "\n   ", 4096);
  CHECK(msgs.size() == 1);
}

// ---- 2026-07-28: stateless requests beside the legacy handshake ----

namespace {

json modern_meta(const std::string& version) {
  return {{"io.modelcontextprotocol/protocolVersion", version},
          {"io.modelcontextprotocol/clientCapabilities", json::object()},
          {"io.modelcontextprotocol/clientInfo", {{"name", "unit"}, {"version", "1"}}}};
}

std::string modern(int id, const std::string& method, json params = json::object(),
                   const std::string& version = "2026-07-28") {
  params["_meta"] = modern_meta(version);
  return request(id, method, params);
}

std::string modern_call(int id, const std::string& tool, const json& args) {
  return modern(id, "tools/call", {{"name", tool}, {"arguments", args}});
}

void check_complete(const json& msg, const json& id) {
  CAPTURE(msg.dump());
  CHECK(msg["jsonrpc"] == "2.0");
  CHECK(msg["id"] == id);
  REQUIRE(msg.contains("result"));
  CHECK(msg["result"]["resultType"] == "complete");
  CHECK(msg["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "throwbox");
  CHECK(msg["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["version"].is_string());
}

void check_cacheable(const json& result) {
  CAPTURE(result.dump());
  REQUIRE(result.contains("ttlMs"));
  CHECK(result["ttlMs"].is_number_integer());
  CHECK(result["ttlMs"].get<int64_t>() >= 0);
  CHECK(result["cacheScope"] == "private");
}

}  // namespace

TEST_CASE("2026-07-28: server/discover needs no initialize and names every version, newest first") {
  Fixture f;
  json r = f.one(modern(1, "server/discover"));
  check_complete(r, 1);
  const json& res = r["result"];
  CHECK(res["supportedVersions"] == json::array({"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"}));
  CHECK(res["supportedVersions"] == mcp::supported_versions());
  CHECK(res["capabilities"]["tools"] == json{{"listChanged", false}});
  CHECK(res["capabilities"].contains("resources"));
  // Tasks are an extension in 2026-07-28 (io.modelcontextprotocol/tasks);
  // logging is deprecated there and not offered.
  CHECK_FALSE(res["capabilities"].contains("tasks"));
  CHECK(res["capabilities"]["extensions"] == json{{"io.modelcontextprotocol/tasks", json::object()}});
  CHECK_FALSE(res["capabilities"].contains("logging"));
  CHECK(res["instructions"] == mcp::instructions_text(*f.policy));
  check_cacheable(res);
  // Nothing was negotiated: the session is still open to either era.
  CHECK(f.session->version() == "");
}

TEST_CASE("2026-07-28: tools/list is the registry's list without taskSupport, cacheable") {
  Fixture f;
  json r = f.one(modern(2, "tools/list"));
  check_complete(r, 2);
  CHECK(r["result"]["tools"] == f.registry->list(false));
  for (auto& t : r["result"]["tools"]) CHECK_FALSE(t.contains("execution"));
  check_cacheable(r["result"]);
}

TEST_CASE("2026-07-28: tools/call is served per request for the session's tenant") {
  Fixture f;
  json up = f.one(modern_call(3, "upload_input", {{"name", "a.txt"}, {"content", "hello"}}));
  check_complete(up, 3);
  CHECK(up["result"]["isError"] == false);
  const std::string input_id = up["result"]["structuredContent"]["input_id"].get<std::string>();
  CHECK(f.store->get_input("alice", input_id).ok());
  CHECK_FALSE(f.store->get_input("bob", input_id).ok());

  // A failure inside a tool is still an isError result, in the same envelope.
  json bad = f.one(modern_call(4, "upload_input", {{"name", "../x"}, {"content", "x"}}));
  check_complete(bad, 4);
  CHECK(bad["result"]["isError"] == true);

  // An unknown tool stays a JSON-RPC error: no envelope on errors.
  json unknown = f.one(modern_call(5, "rm_rf", json::object()));
  check_error(unknown, 5, -32602);
}

TEST_CASE("2026-07-28 without the tasks extension: a task param is ignored; tasks/* need the extension") {
  Fixture f(true);
  f.gate.release();
  json params{{"name", "gated"}, {"arguments", json::object()}, {"task", {{"ttl", 60000}}}};
  json r = f.one(modern(6, "tools/call", params));
  check_complete(r, 6);
  CHECK_FALSE(r["result"].contains("task"));
  CHECK_FALSE(r["result"].contains("taskId"));
  CHECK(r["result"]["structuredContent"]["status"] == "completed");
  for (std::string method : {"tasks/get", "tasks/update", "tasks/cancel"}) {
    CAPTURE(method);
    json e = f.one(modern(7, method, {{"taskId", "t"}, {"inputResponses", json::object()}}));
    check_error(e, 7, -32021);
    CHECK(e["error"]["data"] ==
          json{{"requiredCapabilities", {{"extensions", {{"io.modelcontextprotocol/tasks", json::object()}}}}}});
  }
  // The 2025-11-25 methods the extension dropped do not exist at all.
  for (std::string method : {"tasks/list", "tasks/result"}) {
    CAPTURE(method);
    check_error(f.one(modern(7, method, {{"taskId", "t"}})), 7, -32601);
  }
}

TEST_CASE("2026-07-28 with the tasks extension: the server makes a task; get, update, cancel") {
  Fixture f(true);
  auto with_tasks = [](int id, const std::string& method, json params) {
    params["_meta"] = modern_meta("2026-07-28");
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {
        {"extensions", {{"io.modelcontextprotocol/tasks", json::object()}}}};
    return request(id, method, params);
  };
  // No hint needed: the server decides (SEP-2663), and a progressToken is
  // not honoured on a task (no progress or log messages on tasks).
  json params{{"name", "gated"}, {"arguments", json::object()}};
  json create = with_tasks(1, "tools/call", params);
  auto msgs = f.exchange(create);
  REQUIRE(msgs.size() == 1);
  const json& c = msgs[0]["result"];
  CAPTURE(c.dump());
  CHECK(c["resultType"] == "task");
  CHECK(c["status"] == "working");
  CHECK(c["ttlMs"].is_number_integer());
  CHECK(c["pollIntervalMs"].is_number_integer());
  CHECK_FALSE(c.contains("task"));
  CHECK_FALSE(c.contains("ttl"));
  const std::string id = c["taskId"].get<std::string>();

  json got = f.one(with_tasks(2, "tasks/get", {{"taskId", id}}));
  check_complete(got, 2);
  CHECK(got["result"]["status"] == "working");
  CHECK_FALSE(got["result"].contains("result"));
  check_complete(f.one(with_tasks(3, "tasks/update", {{"taskId", id}, {"inputResponses", {{"k", 1}}}})), 3);
  json bad_update = f.one(with_tasks(4, "tasks/update", {{"taskId", id}}));
  check_error(bad_update, 4, -32602);

  // Another tenant's session does not know the task.
  FakeOutbox other_out;
  mcp::Session bob(*f.ctx, other_out, "bob");
  bob.handle_line(with_tasks(5, "tasks/get", {{"taskId", id}}));
  bob.drain();
  auto bob_msgs = other_out.take();
  REQUIRE(bob_msgs.size() == 1);
  check_error(bob_msgs[0], 5, -32602);

  json ack = f.one(with_tasks(6, "tasks/cancel", {{"taskId", id}}));
  check_complete(ack, 6);
  CHECK(ack["result"].size() == 2);  // resultType and _meta only
  json cancelled = f.one(with_tasks(7, "tasks/get", {{"taskId", id}}));
  CHECK(cancelled["result"]["status"] == "cancelled");
  CHECK(f.one(with_tasks(8, "tasks/cancel", {{"taskId", id}}))["result"] == ack["result"]);
  const std::string unknown = std::string(id[0] == 'f' ? "e" : "f") + id.substr(1);
  check_error(f.one(with_tasks(9, "tasks/get", {{"taskId", unknown}})), 9, -32602);
  // The gate was never opened: the task ended by cancellation.
  CHECK(f.gate.started.load() <= 1);
}

TEST_CASE("2026-07-28: ping and logging/setLevel were removed: -32601") {
  Fixture f;
  check_error(f.one(modern(8, "ping")), 8, -32601);
  check_error(f.one(modern(9, "logging/setLevel", {{"level", "info"}})), 9, -32601);
  check_error(f.one(modern(10, "tools/destroy")), 10, -32601);
}

TEST_CASE("2026-07-28: an unsupported version is -32022 with the supported list and the requested one") {
  Fixture f;
  for (std::string v : {"1900-01-01", "2026-07-29", "2025-11-25"}) {
    CAPTURE(v);
    json r = f.one(modern(11, "tools/list", json::object(), v));
    check_error(r, 11, -32022);
    CHECK(r["error"]["data"]["supported"] == mcp::supported_versions());
    CHECK(r["error"]["data"]["requested"] == v);
  }
  // A version that is not even a string is reported as sent.
  json params{{"_meta",
               {{"io.modelcontextprotocol/protocolVersion", 20260728},
                {"io.modelcontextprotocol/clientCapabilities", json::object()}}}};
  json r = f.one(request(12, "tools/list", params));
  check_error(r, 12, -32022);
  CHECK(r["error"]["data"]["requested"] == 20260728);
}

TEST_CASE("2026-07-28: clientCapabilities is required") {
  Fixture f;
  json params{{"_meta", {{"io.modelcontextprotocol/protocolVersion", "2026-07-28"}}}};
  json r = f.one(request(13, "tools/list", params));
  check_error(r, 13, -32602);
  CHECK(r["error"]["message"].get<std::string>().find("clientCapabilities") != std::string::npos);
}

TEST_CASE("2026-07-28: resources/read of an unknown uri is -32602, never -32002") {
  Fixture f;
  json r = f.one(modern(14, "resources/read", {{"uri", "throwbox://artifacts/0123456789abcdef0123456789abcdef"}}));
  check_error(r, 14, -32602);
  json list = f.one(modern(15, "resources/list"));
  check_complete(list, 15);
  check_cacheable(list["result"]);
  CHECK(list["result"]["resources"] == json::array());
}

TEST_CASE("2026-07-28 beside legacy: stateless requests, then initialize selects the legacy protocol") {
  Fixture f;
  check_complete(f.one(modern(1, "server/discover")), 1);
  // Without _meta and without initialize a request is still refused as before.
  check_error(f.one(request(2, "tools/list")), 2, -32600);
  json init = f.initialize("2025-11-25");
  CHECK(init["result"]["protocolVersion"] == "2025-11-25");
  CHECK(init["result"]["capabilities"].contains("tasks"));
  CHECK(f.session->version() == "2025-11-25");
  // From now on this session is legacy: _meta is metadata, results have no envelope.
  json list = f.one(modern(3, "tools/list"));
  CAPTURE(list.dump());
  CHECK_FALSE(list["result"].contains("resultType"));
  CHECK(list["result"]["tools"] == f.registry->list(true));
  CHECK(f.one(modern(4, "ping"))["result"] == json::object());
}

// The logging utility (basic/utilities/logging) on the legacy
// revisions: setLevel, and notifications/message for calls and jobs.
namespace {
std::vector<json> log_messages(const std::vector<json>& msgs) {
  std::vector<json> out;
  for (const auto& m : msgs)
    if (m.value("method", "") == "notifications/message") out.push_back(m);
  return out;
}
}  // namespace

TEST_CASE("logging: the capability on every legacy revision; setLevel takes RFC 5424 names only") {
  for (const char* version : {"2025-03-26", "2025-06-18", "2025-11-25"}) {
    Fixture f;
    json r = f.initialize(version);
    CAPTURE(version);
    CHECK(r["result"]["capabilities"]["logging"] == json::object());
    check_error(f.one(request(1, "logging/setLevel", {{"level", "verbose"}})), 1, -32602);
    check_error(f.one(request(2, "logging/setLevel", {{"level", "WARNING"}})), 2, -32602);
    check_error(f.one(request(3, "logging/setLevel", json::object())), 3, -32602);
    check_error(f.one(request(4, "logging/setLevel", {{"level", 3}})), 4, -32602);
    for (const char* level : {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}) {
      json ok = f.one(request(5, "logging/setLevel", {{"level", level}}));
      CHECK(ok["result"] == json::object());
    }
  }
}

TEST_CASE("logging: setLevel before initialize is refused like any request") {
  Fixture f;
  check_error(f.one(request(1, "logging/setLevel", {{"level", "info"}})), 1, -32600);
}

TEST_CASE(
    "logging: no message before setLevel; at info a refused run_code logs its start and refusal, never its code") {
  Fixture f;
  f.initialize("2025-06-18");
  const json args{{"runtime", "no-such-runtime"}, {"code", "print('SECRET_CODE_MARK')"}};
  auto before = f.exchange(tools_call(1, "run_code", args));
  CHECK(log_messages(before).empty());
  REQUIRE(before.size() == 1);

  CHECK(f.one(request(2, "logging/setLevel", {{"level", "info"}}))["result"] == json::object());
  auto msgs = f.exchange(tools_call(3, "run_code", args));
  auto logs = log_messages(msgs);
  REQUIRE(logs.size() == 2);
  CHECK(logs[0]["params"]["level"] == "info");
  CHECK(logs[0]["params"]["logger"] == "throwbox");
  CHECK(logs[0]["params"]["data"]["event"] == "job_started");
  CHECK(logs[0]["params"]["data"]["tool"] == "run_code");
  CHECK(logs[1]["params"]["level"] == "warning");
  CHECK(logs[1]["params"]["data"]["event"] == "call_refused");
  CHECK(logs[1]["params"]["data"]["reason"].get<std::string>().find("runtime") != std::string::npos);
  for (const auto& m : msgs) CHECK(m.dump().find("SECRET_CODE_MARK") == std::string::npos);

  // At warning only the refusal; at error nothing.
  f.one(request(4, "logging/setLevel", {{"level", "warning"}}));
  logs = log_messages(f.exchange(tools_call(5, "run_code", args)));
  REQUIRE(logs.size() == 1);
  CHECK(logs[0]["params"]["data"]["event"] == "call_refused");
  f.one(request(6, "logging/setLevel", {{"level", "error"}}));
  CHECK(log_messages(f.exchange(tools_call(7, "run_code", args))).empty());
}

TEST_CASE("logging: a finished job is logged with its status and ids, not its output") {
  Fixture f(true);
  f.initialize("2025-06-18");
  f.gate.release();
  f.one(request(1, "logging/setLevel", {{"level", "debug"}}));
  auto logs = log_messages(f.exchange(tools_call(2, "gated", json::object())));
  REQUIRE(logs.size() == 2);
  CHECK(logs[0]["params"]["level"] == "debug");
  CHECK(logs[0]["params"]["data"]["event"] == "call_started");
  CHECK(logs[1]["params"]["level"] == "info");
  const json& data = logs[1]["params"]["data"];
  CHECK(data["event"] == "job_finished");
  CHECK(data["job_id"] == "g1");
  CHECK(data["status"] == "completed");
  CHECK(data["exit_code"] == 0);
  CHECK_FALSE(data.contains("stdout"));
  CHECK_FALSE(data.contains("stderr"));
}

TEST_CASE("logging: the level of a finished job follows its status") {
  namespace lg = protocol::logging;
  auto level_of = [](const char* status) {
    json wire{{"content", json::array()},
              {"isError", false},
              {"structuredContent", {{"job_id", "j"}, {"status", status}, {"stdout", "OUT"}, {"stderr", "ERR"}}}};
    auto e = lg::call_finished("run_code", wire, nullptr);
    CHECK(e.data.dump().find("OUT") == std::string::npos);
    CHECK(e.data.dump().find("ERR") == std::string::npos);
    return e.level;
  };
  CHECK(level_of("completed") == lg::Level::info);
  CHECK(level_of("failed") == lg::Level::info);
  CHECK(level_of("cancelled") == lg::Level::info);
  CHECK(level_of("timed_out") == lg::Level::warning);
  CHECK(level_of("memory_exceeded") == lg::Level::warning);
  CHECK(level_of("sandbox_error") == lg::Level::error);
  CHECK(lg::parse_level("notice") == lg::Level::notice);
  CHECK_FALSE(lg::parse_level("warn").has_value());
}

TEST_CASE("logging: a task's messages name the task (related-task _meta)") {
  Fixture f;
  f.initialize("2025-11-25");
  f.one(request(1, "logging/setLevel", {{"level", "info"}}));
  std::vector<json> seen;
  json created = call_and_await(f, task_call(2, "run_code", {{"runtime", "python"}}, json::object()), 2, seen);
  const std::string id = created["result"]["task"]["taskId"];
  f.tasks->drain();
  auto is_log = [](const char* event) {
    return [event](const json& m) {
      return m.value("method", "") == "notifications/message" && m["params"]["data"].value("event", "") == event;
    };
  };
  json started = await_message(f.out, is_log("job_started"), seen);
  CHECK(started["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == id);
  CHECK(started["params"]["data"]["task_id"] == id);
  json refused = await_message(f.out, is_log("call_refused"), seen);
  CHECK(refused["params"]["level"] == "warning");
  CHECK(refused["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == id);
}
