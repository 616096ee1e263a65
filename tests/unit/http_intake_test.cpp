// The intake's framing check (server/transport/http_intake.cpp): when the bytes
// a client has sent hold a whole request, so that a worker may take it.
#include <doctest/doctest.h>

#include <string>

#include "server/transport/http_intake.h"

using transport::http::Arrival;
using transport::http::classify_arrival;

TEST_CASE("headers still coming: partial") {
  CHECK(classify_arrival("") == Arrival::kPartial);
  CHECK(classify_arrival("P") == Arrival::kPartial);
  CHECK(classify_arrival("GET /mcp HTTP/1.1\r\nHost: x\r\n") == Arrival::kPartial);
  // cpp-httplib wants CRLF line ends: a bare LF blank line is no end of headers.
  CHECK(classify_arrival("GET /mcp HTTP/1.1\nHost: x\n\n") == Arrival::kPartial);
}

TEST_CASE("no body, or a whole Content-Length body: complete, with its length") {
  const std::string get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  size_t n = 99;
  CHECK(classify_arrival(get, &n) == Arrival::kComplete);
  CHECK(n == get.size());
  const std::string head = "POST /mcp HTTP/1.1\r\nHost: x\r\ncontent-LENGTH:  5 \r\n\r\n";
  CHECK(classify_arrival(head + "1234", &n) == Arrival::kPartial);
  CHECK(n == head.size() + 5);
  CHECK(classify_arrival(head + "12345", &n) == Arrival::kComplete);
  CHECK(n == head.size() + 5);
  // A pipelined next request after it does not change this one's length.
  CHECK(classify_arrival(head + "12345" + get, &n) == Arrival::kComplete);
  CHECK(n == head.size() + 5);
}

TEST_CASE("bodies the worker reads: chunked (length unknown), 100-continue, above the intake's share") {
  size_t n = 99;
  CHECK(classify_arrival("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &n) == Arrival::kHeadersOnly);
  CHECK(n == 0);
  const std::string expect = "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n";
  CHECK(classify_arrival(expect, &n) == Arrival::kHeadersOnly);
  CHECK(n == expect.size() + 10);
  const std::string big =
      "POST / HTTP/1.1\r\nContent-Length: " + std::to_string(transport::http::kBodyInIntakeMax) + "\r\n\r\n";
  CHECK(classify_arrival(big, &n) == Arrival::kHeadersOnly);
  CHECK(n == big.size() + transport::http::kBodyInIntakeMax);
  // Not a number: cpp-httplib refuses it; the intake only hands it over.
  CHECK(classify_arrival("POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", &n) == Arrival::kHeadersOnly);
  CHECK(n == 0);
}

TEST_CASE("a header block longer than the intake peeks: too long, for the worker to refuse") {
  std::string huge = "GET / HTTP/1.1\r\nX: " + std::string(transport::http::kPeekBytes, 'a');
  CHECK(classify_arrival(huge) == Arrival::kTooLong);
}
