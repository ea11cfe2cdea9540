// A model's chat template (tokenizer_config.json's `chat_template`, a Jinja template): renders a conversation
// into the prompt text the model was tuned on, as transformers' apply_chat_template does, for the subset of
// Jinja real templates use — that of the Llama 3.x, Qwen 2.5/3, Mistral, Gemma 2/3 and SmolLM templates,
// transformers' {% generation %} markers included (src/text/jinja_template.h, jinja_expression.h and
// jinja_builtins.h list it). A template that uses anything else is refused when it is read, with one line
// naming the construct and the template.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace meshtrain::text {

namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", …
  std::string content;
};

class ChatTemplate {
 public:
  // `source`: the template text; `special_tokens`: names such as bos_token → their text; `where` names the
  // template in errors.
  ChatTemplate(const std::string& source, std::vector<std::pair<std::string, std::string>> special_tokens,
               std::string where);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // Reads DIR/tokenizer_config.json: its chat_template (a string, or the one named "default" of a list) and
  // its special tokens (bos_token, eos_token, unk_token, pad_token). UserError when there is none.
  static ChatTemplate from_tokenizer_dir(const std::string& dir);

  // The prompt text of `messages`; `add_generation_prompt` appends the start of the assistant's turn.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

 private:
  std::unique_ptr<jinja::Template> tmpl_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
};

}  // namespace meshtrain::text
