// A job's network record as the result and the ledger carry it: an
// intercepted connection keeps its requests through a round trip, a relayed
// one has none, and a record written before interception existed reads as
// relayed.
#include <doctest/doctest.h>

#include "server/network/proxy.h"

TEST_CASE("an intercepted connection's requests survive the ledger's round trip") {
  network::Report report;
  report.profile = "api";
  network::Connection relayed;
  relayed.host = "tls.example.com";
  relayed.port = 443;
  relayed.verdict = "allowed";
  network::Connection seen;
  seen.host = "api.example.com";
  seen.port = 443;
  seen.address = "203.0.113.20";
  seen.bytes_up = 402;
  seen.bytes_down = 911;
  seen.verdict = "refused";
  seen.reason = "method DELETE is not allowed";
  seen.intercepted = true;
  seen.requests = {{"GET", "/v1/reports/q3", 200, "allowed", ""},
                   {"DELETE", "/v1/reports/q3", 403, "refused", "method DELETE is not allowed"}};
  seen.requests_not_listed = 2;
  report.connections = {relayed, seen};

  const nlohmann::json j = network::to_json(report);
  CHECK(j["connections"][0]["intercepted"] == false);
  CHECK_FALSE(j["connections"][0].contains("requests"));
  CHECK(j["connections"][1]["intercepted"] == true);
  CHECK(j["connections"][1]["requests"].size() == 2);
  CHECK(j["connections"][1]["requests"][1] == nlohmann::json{{"method", "DELETE"},
                                                             {"path", "/v1/reports/q3"},
                                                             {"status", 403},
                                                             {"verdict", "refused"},
                                                             {"reason", "method DELETE is not allowed"}});
  CHECK(j["connections"][1]["requests_not_listed"] == 2);
  CHECK(network::to_json(network::report_from_json(j)) == j);
}

TEST_CASE("a record from before interception reads as relayed") {
  const nlohmann::json old = {{"profile", "web"},
                              {"connections_not_listed", 0},
                              {"connections",
                               {{{"host", "data.example.com"},
                                 {"port", 80},
                                 {"address", "198.51.100.7"},
                                 {"bytes_up", 10},
                                 {"bytes_down", 20},
                                 {"verdict", "allowed"},
                                 {"reason", ""}}}}};
  const network::Report r = network::report_from_json(old);
  REQUIRE(r.connections.size() == 1);
  CHECK_FALSE(r.connections[0].intercepted);
  CHECK(r.connections[0].requests.empty());
  CHECK(network::to_json(r)["connections"][0]["intercepted"] == false);
}
