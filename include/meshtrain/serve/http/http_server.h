// HttpServer: HTTP/1.1 with keep-alive on Boost.Beast (docs/serving.md "meshtrain serve"). Beast parses and
// writes the messages; this class accepts connections and hands each request to a Handler, which answers with
// one whole response or a chunked stream (server-sent events). One thread accepts, one thread serves each
// connection (a handler may block until its request's tokens come). finish() is the graceful end (no new
// connection, idle ones closed, responses under way completed); stop() closes the listening socket and every
// connection at once and joins them all.
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace meshtrain::serve::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // the path, query string included
  std::string body;
};

// How a handler answers: either send() once, or begin_stream(), write() any number of times, end_stream().
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual void send(int status, const std::string& content_type, const std::string& body) = 0;
  virtual void begin_stream(int status, const std::string& content_type) = 0;
  // False once the client has gone away (the handler should stop producing).
  virtual bool write(const std::string& data) = 0;
  virtual void end_stream() = 0;
  // True once the client has closed or reset the connection (looked at without blocking or reading), so a
  // handler still waiting for tokens can give up a request whose answer nobody will read.
  virtual bool client_gone() = 0;
};

using Handler = std::function<void(const HttpRequest&, ResponseWriter&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                 // 0: a free port, see HttpServer::port()
  size_t body_limit = 8 * 1024 * 1024;  // larger request bodies get 413
};

class HttpServer {
 public:
  // Binds and listens, then accepts on a thread of its own. UserError naming the address when it cannot bind.
  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;  // the bound port
  // The graceful end: accepts no new connection, closes the idle keep-alive ones, and lets each handler under
  // way finish its response (then its connection closes). Returns how many are still under way at `deadline`
  // (0: all done). May be called again with a later deadline.
  int64_t finish(std::chrono::steady_clock::time_point deadline);
  // Closes the listening socket and every connection at once and joins their threads; returns how many
  // responses it cut off mid-way. Idempotent (later calls return 0).
  int64_t stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace meshtrain::serve::http
