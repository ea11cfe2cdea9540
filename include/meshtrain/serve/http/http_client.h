// HttpClient: an HTTP/1.1 client on Boost.Beast for `meshtrain bench serve` (docs/serving.md "meshtrain bench
// serve"). One client is one keep-alive connection, used by one thread: requests go one after another over it,
// and it reconnects when the server closed it. A response's body is handed over piece by piece as its bytes
// arrive (Beast removes the chunked framing), so a streamed answer can be timed token by token. Every connect,
// write and read is bounded by a timeout, so a server that stops answering is an error, never a hang.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace meshtrain::serve::http {

// http://HOST[:PORT][/PATH]: the server's address and the path its endpoints hang under ("" for none).
struct HttpUrl {
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // without a trailing '/'
  std::string text() const;  // http://HOST:PORT/PATH
};

// UserError naming `flag` and what is valid for anything but http://HOST[:PORT][/PATH].
HttpUrl parse_http_url(std::string_view url, std::string_view flag);

// The status, then each piece of the body as it arrives (possibly empty for a body-less response).
using BodySink = std::function<void(int status, std::string_view piece)>;

struct HttpResponse {
  int status = 0;
  std::string body;
};

class HttpClient {
 public:
  HttpClient(HttpUrl url, double timeout_s);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Opens the connection now rather than on the first request; Error (one line) when it cannot.
  void connect();
  // Sends METHOD base_path+path (a non-empty body as application/json) and feeds the response to `sink`; returns
  // the status. Error (one line: the request, the URL and what failed) when the connection fails or no byte comes
  // within the timeout. A kept-alive connection the server had closed is reopened and the request sent again,
  // as long as no byte of the answer had come.
  int request(const std::string& method, const std::string& path, const std::string& body, const BodySink& sink);
  // The whole response at once.
  HttpResponse request(const std::string& method, const std::string& path, const std::string& body = "");

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace meshtrain::serve::http
