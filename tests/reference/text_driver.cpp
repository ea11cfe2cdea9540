// The C++ side of tests/reference/tokenizer_test.py and chat_template_test.py: reads a request (JSON), runs
// meshtrain's tokenizer / chat template on it, writes what it got (JSON) for the test to compare with the
// `tokenizers` and `transformers` packages.
//
//   text_driver tokenize TOKENIZER_JSON REQUEST OUT
//     REQUEST {"texts": [str], "decode": [[id]]}
//     OUT     {"encode": [[id]], "encode_special": [[id]], "decode": [str], "decode_all": [str], "stream": [str]}
//   text_driver chat TOKENIZER_DIR REQUEST OUT
//     REQUEST {"conversations": [[{"role", "content"}]], "add_generation_prompt": bool}
//     OUT     {"rendered": [str], "ids": [[id]]}  or  {"error": str}
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/text/chat_template.h"
#include "meshtrain/text/stream_decoder.h"
#include "meshtrain/text/tokenizer.h"

using nlohmann::json;
using namespace meshtrain::text;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

json tokenize(const std::string& tokenizer_path, const json& req) {
  const Tokenizer tok = Tokenizer::from_file(tokenizer_path);
  json out = {{"encode", json::array()}, {"encode_special", json::array()}, {"decode", json::array()},
              {"decode_all", json::array()}, {"stream", json::array()}};
  for (const auto& t : req.at("texts")) {
    const std::string text = t.get<std::string>();
    out["encode"].push_back(tok.encode(text, false));
    out["encode_special"].push_back(tok.encode(text, true));
  }
  for (const auto& d : req.at("decode")) {
    const auto ids = d.get<std::vector<int64_t>>();
    out["decode"].push_back(tok.decode(ids, true));
    out["decode_all"].push_back(tok.decode(ids, false));
    StreamDecoder stream(tok);
    std::string streamed;
    for (int64_t id : ids) streamed += stream.step(id);
    out["stream"].push_back(streamed + stream.finish());
  }
  return out;
}

json chat(const std::string& dir, const json& req) {
  try {
    const ChatTemplate tmpl = ChatTemplate::from_tokenizer_dir(dir);
    const Tokenizer tok = Tokenizer::from_file(dir + "/tokenizer.json");
    json out = {{"rendered", json::array()}, {"ids", json::array()}};
    for (const auto& conv : req.at("conversations")) {
      std::vector<ChatMessage> messages;
      for (const auto& m : conv) messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
      const std::string text = tmpl.render(messages, req.value("add_generation_prompt", true));
      out["rendered"].push_back(text);
      out["ids"].push_back(tok.encode(text, false));
    }
    return out;
  } catch (const meshtrain::UserError& e) {
    return {{"error", e.what()}};
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: text_driver tokenize|chat TOKENIZER REQUEST OUT\n";
    return 2;
  }
  const std::string mode = argv[1];
  const json req = read_json(argv[3]);
  const json out = mode == "chat" ? chat(argv[2], req) : tokenize(argv[2], req);
  std::ofstream(argv[4]) << out.dump();
  return 0;
}
