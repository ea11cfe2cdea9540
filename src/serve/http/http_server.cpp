#include "meshtrain/serve/http/http_server.h"

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

#include "meshtrain/core/error.h"

namespace meshtrain::serve::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct HttpServer::State {
  // One client's connection; `busy` while its handler runs (a request read, its response not yet complete).
  struct Connection {
    std::thread thread;
    std::shared_ptr<tcp::socket> socket;
    bool busy = false;
  };

  HttpServerOptions options;
  Handler handler;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread accept_thread;
  std::mutex mu;  // guards the fields below
  std::condition_variable handler_done;
  bool closing = false;   // finish(): no new connection, none kept alive after its response
  bool stopping = false;  // stop(): everything closed at once
  std::list<Connection> connections;

  void accept_loop();
  void serve(Connection& connection);
  void close_idle();  // mu held
  int64_t busy_count() const;  // mu held
};

namespace {

// One connection's responses, written with Beast onto the blocking socket.
class ConnectionWriter final : public ResponseWriter {
 public:
  ConnectionWriter(tcp::socket& socket, unsigned version, bool keep_alive)
      : socket_(socket), version_(version), keep_alive_(keep_alive) {}

  void send(int status, const std::string& content_type, const std::string& body) override {
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), version_};
    res.set(bhttp::field::server, "meshtrain");
    res.set(bhttp::field::content_type, content_type);
    res.keep_alive(keep_alive_);
    res.body() = body;
    res.prepare_payload();
    beast::error_code ec;
    bhttp::write(socket_, res, ec);
    ok_ = !ec;
  }

  void begin_stream(int status, const std::string& content_type) override {
    bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(status), version_};
    res.set(bhttp::field::server, "meshtrain");
    res.set(bhttp::field::content_type, content_type);
    res.set(bhttp::field::cache_control, "no-cache");
    res.keep_alive(keep_alive_);
    res.chunked(true);
    bhttp::response_serializer<bhttp::empty_body> sr{res};
    beast::error_code ec;
    bhttp::write_header(socket_, sr, ec);
    ok_ = !ec;
  }

  bool write(const std::string& data) override {
    if (!ok_ || data.empty()) return ok_;
    beast::error_code ec;
    asio::write(socket_, bhttp::make_chunk(asio::buffer(data)), ec);
    ok_ = !ec;
    return ok_;
  }

  void end_stream() override {
    if (!ok_) return;
    beast::error_code ec;
    asio::write(socket_, bhttp::make_chunk_last(), ec);
    ok_ = !ec;
  }

  bool client_gone() override {
    // An orderly close reads as 0 bytes, a reset as an error; bytes waiting (a pipelined request) or nothing
    // yet (EAGAIN) mean the client is still there. MSG_PEEK leaves them for the next read.
    char byte = 0;
    const ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  bool ok() const { return ok_; }

 private:
  tcp::socket& socket_;
  unsigned version_;
  bool keep_alive_;
  bool ok_ = true;
};

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, Handler handler) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.options = std::move(options);
  s.handler = std::move(handler);
  beast::error_code ec;
  const auto address = asio::ip::make_address(s.options.host, ec);
  MT_USER_CHECK(!ec, "--host ", s.options.host, ": not an IP address (", ec.message(), ")");
  const tcp::endpoint endpoint{address, s.options.port};
  const std::string where = cat(s.options.host, ":", s.options.port);
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  MT_USER_CHECK(!ec, "cannot listen on ", where, ": ", ec.message(), " (choose another --port, or 0 for a free one)");
  s.accept_thread = std::thread([&s] { s.accept_loop(); });
}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::port() const { return state_->acceptor.local_endpoint().port(); }

int64_t HttpServer::finish(std::chrono::steady_clock::time_point deadline) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (!s.closing) {
    s.closing = true;
    ::shutdown(s.acceptor.native_handle(), SHUT_RDWR);  // wakes the accept thread, which then returns
  }
  s.close_idle();
  s.handler_done.wait_until(lock, deadline, [&] { return s.busy_count() == 0; });
  return s.busy_count();
}

int64_t HttpServer::stop() {
  State& s = *state_;
  int64_t cut = 0;
  {
    std::lock_guard lock(s.mu);
    if (s.stopping) return 0;
    s.stopping = s.closing = true;
    cut = s.busy_count();
    // shutdown() wakes the threads blocked in accept(), read() and write() on these sockets.
    ::shutdown(s.acceptor.native_handle(), SHUT_RDWR);
    for (auto& c : s.connections) ::shutdown(c.socket->native_handle(), SHUT_RDWR);
  }
  if (s.accept_thread.joinable()) s.accept_thread.join();
  // No new connection starts once closing is set, so the list no longer grows.
  for (auto& c : s.connections)
    if (c.thread.joinable()) c.thread.join();
  beast::error_code ec;
  s.acceptor.close(ec);
  return cut;
}

void HttpServer::State::close_idle() {
  // A closed socket's handle is -1, so a connection that has ended is never shut down by a reused number.
  for (auto& c : connections)
    if (!c.busy) ::shutdown(c.socket->native_handle(), SHUT_RDWR);
}

int64_t HttpServer::State::busy_count() const {
  return std::count_if(connections.begin(), connections.end(), [](const Connection& c) { return c.busy; });
}

void HttpServer::State::accept_loop() {
  for (;;) {
    auto socket = std::make_shared<tcp::socket>(io);
    beast::error_code ec;
    acceptor.accept(*socket, ec);
    std::lock_guard lock(mu);
    if (closing) return;
    if (ec) continue;
    // Streamed tokens are small writes: with Nagle's algorithm each waits for the client's delayed ACK (~40 ms),
    // which would put a floor under time to first token and bunch tokens together.
    socket->set_option(tcp::no_delay(true), ec);
    // Reap the connections that have ended so the list holds only live ones.
    for (auto it = connections.begin(); it != connections.end();) {
      if (!it->socket->is_open() && it->thread.joinable()) {
        it->thread.join();
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
    Connection& c = connections.emplace_back(Connection{{}, socket});
    c.thread = std::thread([this, &c] { serve(c); });  // c stays put: a std::list never moves its elements
  }
}

void HttpServer::State::serve(Connection& connection) {
  const std::shared_ptr<tcp::socket>& socket = connection.socket;
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(options.body_limit);
    beast::error_code ec;
    bhttp::read_header(*socket, buffer, parser, ec);
    // curl asks before sending a larger body (Expect: 100-continue) and would otherwise wait a second.
    if (!ec && beast::iequals(parser.get()[bhttp::field::expect], "100-continue")) {
      bhttp::response<bhttp::empty_body> go_on{bhttp::status::continue_, parser.get().version()};
      bhttp::write(*socket, go_on, ec);
    }
    if (!ec) bhttp::read(*socket, buffer, parser, ec);
    if (ec == bhttp::error::body_limit) {
      ConnectionWriter w(*socket, 11, false);
      w.send(413, "application/json",
             cat(R"({"error": {"message": "the request body is larger than )", options.body_limit,
                 R"( bytes", "type": "invalid_request_error", "param": null, "code": null}})"));
      break;
    }
    if (ec) break;  // the client closed the connection, sent something that is not HTTP, or the server stops
    const auto& req = parser.get();
    {
      std::lock_guard lock(mu);
      connection.busy = true;  // from here finish() waits for the response
    }
    ConnectionWriter writer(*socket, req.version(), req.keep_alive());
    handler(HttpRequest{std::string(req.method_string()), std::string(req.target()), req.body()}, writer);
    bool closing_now = false;
    {
      std::lock_guard lock(mu);
      connection.busy = false;
      closing_now = closing;
      handler_done.notify_all();
    }
    if (!writer.ok() || !req.keep_alive() || closing_now) break;
  }
  beast::error_code ec;
  socket->shutdown(tcp::socket::shutdown_send, ec);
  std::lock_guard lock(mu);
  socket->close(ec);
}

}  // namespace meshtrain::serve::http
