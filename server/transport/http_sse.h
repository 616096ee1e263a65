// Where a session's outgoing messages go on the HTTP endpoint (http.h):
//   Outgoing     one message, serialised once
//   Stream       the messages for one HTTP answer (a POST's JSON or SSE
//                answer, or a GET's SSE stream), waited on by its worker
//   Router       a session's outbox: each message to the one stream waiting
//                for it (by request id, by progress token, else a GET stream)
//   sse_event()  a message as an SSE event; kKeepAlive, the comment lines' pace
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/protocol/mcp.h"

namespace transport::http {

using Clock = std::chrono::steady_clock;

constexpr auto kKeepAlive = std::chrono::seconds(15);  // SSE comment lines; also finds gone clients

// One outgoing message, serialised once where the session sends it.
struct Outgoing {
  std::string text;
  std::vector<std::string> answers;  // ids of the requests it answers (a response, or a batch of them)
  bool is_error = false;             // a single error response
  int error_code = 0;                // its JSON-RPC code
};

// Messages for one HTTP stream.
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Outgoing> queue;
  bool closed = false;
  void push(Outgoing m);
  // Next message, or nullopt at the deadline or once closed and empty.
  std::optional<Outgoing> pop(Clock::time_point until);
  void close();
  bool is_closed();
  // A plain JSON answer: the first message that answers a request (a
  // response or a batch's array), or nullopt at the deadline. Anything else
  // has no place in a JSON answer (the client gave no progress token).
  std::optional<Outgoing> await_answer(Clock::time_point deadline);
};

// The session's outbox: each message goes to exactly one stream, serialised
// here once (no copy of the message is kept).
class Router : public protocol::mcp::Outbox {
 public:
  void send(const nlohmann::json& m) override;
  void expect(const std::vector<std::string>& ids, const std::vector<std::string>& tokens,
              const std::shared_ptr<Stream>& s);
  void forget(const std::vector<std::string>& ids, const std::vector<std::string>& tokens);
  void add_get(const std::shared_ptr<Stream>& s);
  void remove_get(const std::shared_ptr<Stream>& s);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Stream>> by_id_, by_token_;
  std::vector<std::shared_ptr<Stream>> gets_;
  size_t next_get_ = 0;
};

inline std::string sse_event(const Outgoing& m) { return "event: message\ndata: " + m.text + "\n\n"; }

}  // namespace transport::http
