#include "meshtrain/serve/http/http_client.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <chrono>
#include <limits>

#include "meshtrain/core/error.h"

namespace meshtrain::serve::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

std::string HttpUrl::text() const {
  const bool v6 = host.find(':') != std::string::npos;
  return cat("http://", v6 ? "[" : "", host, v6 ? "]" : "", ":", port, base_path);
}

HttpUrl parse_http_url(std::string_view url, std::string_view flag) {
  auto bad = [&](std::string_view why) {
    return UserError(cat(flag, " '", url, "': ", why, "; expected http://HOST[:PORT][/PATH], e.g. http://127.0.0.1:8000"));
  };
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) throw bad(url.starts_with("https://") ? "https is not supported" : "not an http URL");
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  HttpUrl u;
  u.base_path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  while (u.base_path.ends_with('/')) u.base_path.pop_back();
  std::string_view port;
  if (authority.starts_with('[')) {  // [IPv6]:PORT
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) throw bad("no ']' after the IPv6 address");
    u.host = authority.substr(1, close - 1);
    authority.remove_prefix(close + 1);
    if (!authority.empty() && !authority.starts_with(':')) throw bad("junk after the IPv6 address");
    if (!authority.empty()) port = authority.substr(1);
  } else {
    const size_t colon = authority.find(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (u.host.empty()) throw bad("no host");
  if (!port.empty() || authority.ends_with(':')) {
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec != std::errc() || end != port.data() + port.size() || v < 1 || v > 65535)
      throw bad(cat("port '", port, "' is not 1 to 65535"));
    u.port = static_cast<uint16_t>(v);
  }
  return u;
}

struct HttpClient::State {
  HttpUrl url;
  std::chrono::steady_clock::duration timeout;
  double timeout_s;
  asio::io_context io;
  beast::tcp_stream stream{io};
  beast::flat_buffer buffer;  // bytes read past one response belong to the next: kept with the connection
  bool open = false;

  // How one exchange ended: its status, or the error, where it happened and whether any byte had been answered.
  struct Outcome {
    int status = 0;
    beast::error_code ec;
    bool answered = false;
    const char* stage = "";
  };

  // Runs one asynchronous operation to its end under the timeout: when it expires, Beast's tcp_stream closes the
  // socket, which ends the operation with error::timeout (a blocking call would wait forever).
  template <class Start>
  beast::error_code run(Start&& start) {
    beast::error_code result;
    stream.expires_after(timeout);
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io.restart();
    io.run();
    return result;
  }

  std::string describe(const beast::error_code& ec) const {
    return ec == beast::error::timeout ? cat("no answer within ", timeout_s, " s") : ec.message();
  }

  void close() {
    beast::error_code ignored;
    stream.socket().close(ignored);
    buffer.clear();
    open = false;
  }

  Outcome exchange(const std::string& method, const std::string& path, const std::string& body,
                   const BodySink& sink);
};

HttpClient::HttpClient(HttpUrl url, double timeout_s) : state_(std::make_unique<State>()) {
  state_->url = std::move(url);
  state_->timeout_s = timeout_s;
  state_->timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s));
}

HttpClient::~HttpClient() { state_->close(); }

void HttpClient::connect() {
  State& s = *state_;
  s.close();
  tcp::resolver resolver(s.io);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(s.url.host, std::to_string(s.url.port), ec);
  if (!ec) ec = s.run([&](auto handler) { s.stream.async_connect(endpoints, std::move(handler)); });
  if (ec) throw Error(cat("cannot connect to ", s.url.text(), ": ", s.describe(ec)));
  s.stream.socket().set_option(tcp::no_delay(true), ec);  // a request is one write: send it at once
  s.open = true;
}

HttpClient::State::Outcome HttpClient::State::exchange(const std::string& method, const std::string& path,
                                                      const std::string& body, const BodySink& sink) {
  bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), url.base_path + path, 11};
  req.set(bhttp::field::host, cat(url.host, ":", url.port));
  req.set(bhttp::field::user_agent, "meshtrain-bench-serve");
  if (!body.empty()) req.set(bhttp::field::content_type, "application/json");
  req.body() = body;
  req.keep_alive(true);
  req.prepare_payload();
  beast::error_code ec = run([&](auto handler) { bhttp::async_write(stream, req, std::move(handler)); });
  if (ec) return {0, ec, false, "sending the request"};

  bhttp::response_parser<bhttp::buffer_body> parser;
  // A stream is as long as the generation. (Not boost::none: Boost 1.74 compares a Content-Length with the empty
  // optional as "greater" and refuses every sized body.)
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  ec = run([&](auto handler) { bhttp::async_read_header(stream, buffer, parser, std::move(handler)); });
  if (ec) return {0, ec, false, "reading the answer"};
  const int status = static_cast<int>(parser.get().result_int());
  sink(status, {});
  char piece[16384];
  while (!parser.is_done()) {
    // read_some, not read: it returns as soon as some body has come, which is what times each chunk.
    parser.get().body().data = piece;
    parser.get().body().size = sizeof piece;
    ec = run([&](auto handler) { bhttp::async_read_some(stream, buffer, parser, std::move(handler)); });
    if (ec == bhttp::error::need_buffer) ec = {};  // the piece is full: hand it over and read on
    if (ec) return {status, ec, true, "reading the answer"};
    const size_t got = sizeof piece - parser.get().body().size;
    if (got > 0) sink(status, std::string_view(piece, got));
  }
  if (!parser.keep_alive()) close();
  return {status, {}, true, ""};
}

int HttpClient::request(const std::string& method, const std::string& path, const std::string& body,
                        const BodySink& sink) {
  State& s = *state_;
  for (int attempt = 0;; ++attempt) {
    const bool reused = s.open;
    if (!s.open) connect();
    const State::Outcome o = s.exchange(method, path, body, sink);
    if (!o.ec) return o.status;
    s.close();
    // A server may close a kept-alive connection while it is idle; the request never reached it, so send it again.
    if (reused && !o.answered && attempt == 0 && o.ec != beast::error::timeout) continue;
    throw Error(cat(method, " ", s.url.text(), path, ": ", o.stage, ": ", s.describe(o.ec)));
  }
}

HttpResponse HttpClient::request(const std::string& method, const std::string& path, const std::string& body) {
  HttpResponse r;
  r.status = request(method, path, body, [&r](int, std::string_view piece) { r.body += piece; });
  return r;
}

}  // namespace meshtrain::serve::http
