// HttpClient (serve/http/http_client.h) against a real HttpServer on a loopback port: a streamed body comes
// piece by piece as the server writes it (the server waits for the client to have the first piece before it
// writes the second, so a client that buffered would never see it), requests share one kept-alive connection,
// a connection the server closed is reopened, a server that stops answering is an error after the timeout,
// and a port nobody listens on is one line. And parse_http_url's accepted and refused forms.
#include "meshtrain/serve/http/http_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/serve/http/http_server.h"

namespace meshtrain::serve::http {
namespace {

using namespace std::chrono_literals;

// A flag one thread raises and another waits for, with a generous bound so a broken test fails, not hangs.
class Signal {
 public:
  void raise() {
    std::lock_guard lock(mu_);
    up_ = true;
    cv_.notify_all();
  }
  bool wait() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 60s, [&] { return up_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool up_ = false;
};

HttpUrl local(uint16_t port) { return parse_http_url(cat("http://127.0.0.1:", port), "--url"); }

std::string thread_name() {
  std::ostringstream os;
  os << std::this_thread::get_id();
  return os.str();
}

TEST(HttpClient, StreamedBodyArrivesPieceByPiece) {
  Signal first_piece_seen;
  bool released = false;
  HttpServer server({.port = 0}, [&](const HttpRequest& req, ResponseWriter& out) {
    EXPECT_EQ(req.target, "/base/v1/completions");
    EXPECT_EQ(req.body, "{}");
    out.begin_stream(200, "text/event-stream");
    out.write("data: one\n\n");
    released = first_piece_seen.wait();  // the client must have the first piece before the second exists
    out.write("data: two\n\n");
    out.end_stream();
  });
  HttpClient client(parse_http_url(cat("http://127.0.0.1:", server.port(), "/base/"), "--url"), 60);
  std::vector<std::string> pieces;
  const int status = client.request("POST", "/v1/completions", "{}", [&](int code, std::string_view piece) {
    EXPECT_EQ(code, 200);
    if (piece.empty()) return;  // the head
    pieces.emplace_back(piece);
    if (piece.find("one") != std::string_view::npos) first_piece_seen.raise();
  });
  EXPECT_EQ(status, 200);
  EXPECT_TRUE(released);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0], "data: one\n\n");
  EXPECT_EQ(pieces[1], "data: two\n\n");
}

TEST(HttpClient, RequestsShareOneKeptAliveConnection) {
  // The server serves each connection on a thread of its own: one thread seen means one connection.
  std::mutex mu;
  std::vector<std::string> threads;
  HttpServer server({.port = 0}, [&](const HttpRequest& req, ResponseWriter& out) {
    {
      std::lock_guard lock(mu);
      threads.push_back(thread_name());
    }
    out.send(req.target == "/missing" ? 404 : 200, "text/plain", "answer to " + req.target);
  });
  HttpClient client(local(server.port()), 60);
  const HttpResponse a = client.request("GET", "/a");
  const HttpResponse b = client.request("GET", "/missing");
  const HttpResponse c = client.request("POST", "/c", "{\"x\": 1}");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "answer to /a");
  EXPECT_EQ(b.status, 404);  // a status other than 200 is an answer, not an error
  EXPECT_EQ(c.body, "answer to /c");
  ASSERT_EQ(threads.size(), 3u);
  EXPECT_EQ(threads[0], threads[1]);
  EXPECT_EQ(threads[1], threads[2]);
}

TEST(HttpClient, ConnectionClosedByTheServerIsReopened) {
  auto first = std::make_unique<HttpServer>(HttpServerOptions{.port = 0}, [](const HttpRequest&, ResponseWriter& out) {
    out.send(200, "text/plain", "first");
  });
  const uint16_t port = first->port();
  HttpClient client(local(port), 60);
  EXPECT_EQ(client.request("GET", "/").body, "first");
  first->stop();  // closes the kept-alive connection under the client
  first.reset();
  HttpServer second({.port = port}, [](const HttpRequest&, ResponseWriter& out) { out.send(200, "text/plain", "second"); });
  EXPECT_EQ(client.request("GET", "/").body, "second");
}

TEST(HttpClient, ServerThatStopsAnsweringIsAnErrorAfterTheTimeout) {
  Signal client_gave_up;
  HttpServer server({.port = 0}, [&](const HttpRequest&, ResponseWriter& out) {
    out.begin_stream(200, "text/event-stream");
    out.write("data: one\n\n");
    client_gave_up.wait();  // no more bytes until the client has given up
    out.end_stream();
  });
  HttpClient client(local(server.port()), 0.3);
  std::string got;
  try {
    client.request("POST", "/v1/completions", "{}", [&](int, std::string_view piece) { got += piece; });
    ADD_FAILURE() << "a stalled stream must fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(cat("POST http://127.0.0.1:", server.port(), "/v1/completions")), std::string::npos) << what;
    EXPECT_NE(what.find("no answer within 0.3 s"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_EQ(got, "data: one\n\n");
  client_gave_up.raise();
}

TEST(HttpClient, NobodyListeningIsOneLine) {
  uint16_t port = 0;
  {  // a port that was free a moment ago and has nobody listening now
    HttpServer probe({.port = 0}, [](const HttpRequest&, ResponseWriter&) {});
    port = probe.port();
  }
  HttpClient client(local(port), 60);
  try {
    client.request("GET", "/v1/models");
    ADD_FAILURE() << "nothing listens on port " << port;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), cat("cannot connect to http://127.0.0.1:", port, ": Connection refused"));
  }
}

TEST(HttpUrl, AcceptedForms) {
  const HttpUrl a = parse_http_url("http://127.0.0.1:8000", "--url");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 8000);
  EXPECT_EQ(a.base_path, "");
  const HttpUrl b = parse_http_url("http://example.org/api/", "--url");
  EXPECT_EQ(b.host, "example.org");
  EXPECT_EQ(b.port, 80);
  EXPECT_EQ(b.base_path, "/api");
  EXPECT_EQ(b.text(), "http://example.org:80/api");
  const HttpUrl c = parse_http_url("http://[::1]:9000/x", "--url");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 9000);
  EXPECT_EQ(c.text(), "http://[::1]:9000/x");
}

TEST(HttpUrl, RefusedFormsNameTheFlagOnOneLine) {
  for (const char* bad : {"127.0.0.1:8000", "https://h:1", "http://", "http://:80", "http://h:0", "http://h:70000",
                          "http://h:8x", "http://h:", "http://[::1", "http://[::1]x"}) {
    try {
      parse_http_url(bad, "--url");
      ADD_FAILURE() << bad << " must be refused";
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(cat("--url '", bad, "'"), 0), 0u) << what;
      EXPECT_NE(what.find("http://HOST[:PORT][/PATH]"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace meshtrain::serve::http
