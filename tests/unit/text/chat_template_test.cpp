// The chat-template subset: rendering rules transformers' Jinja environment has (trim_blocks, lstrip_blocks,
// loop scoping), and the one-line refusal of constructs outside the subset.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/text/chat_template.h"

namespace meshtrain::text {
namespace {

std::string render(const std::string& src, bool gen = true) {
  const ChatTemplate t(src, {{"bos_token", "<s>"}}, "t.jinja");
  return t.render({{"user", "Hi"}, {"assistant", " yes "}}, gen);
}

TEST(ChatTemplate, LoopsConditionsAndFilters) {
  EXPECT_EQ(render("{{ bos_token }}{% for m in messages %}{{ m.role ~ ':' ~ m['content'] | trim }}"
                   "{% if not loop.last %}|{% endif %}{% endfor %}{% if add_generation_prompt %}>{% endif %}"),
            "<s>user:Hi|assistant:yes>");
  EXPECT_EQ(render("{% if messages | length > 1 and messages[-1].role == 'assistant' %}a{% elif x %}b{% else %}c"
                   "{% endif %}"),
            "a");
  EXPECT_EQ(render("{{ messages[1:] | length }}{{ 7 // 2 }}{{ -7 % 3 }}{{ 'Hi' in messages[0].content }}"),
            "132True");
}

TEST(ChatTemplate, SetInsideALoopDoesNotOutliveTheIteration) {
  EXPECT_EQ(render("{% set x = 'out' %}{% for m in messages %}{% set x = m.role %}{{ x }},{% endfor %}{{ x }}"),
            "user,assistant,out");
}

TEST(ChatTemplate, TrimAndLstripBlocksAsTransformersRendersThem) {
  EXPECT_EQ(render("{% for m in messages %}\n  {% if true %}\n[{{ m.role }}]\n  {% endif %}\n{% endfor %}\n"),
            "[user]\n[assistant]\n");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}  c"), "ab  c");
}

void expect_refused(const std::string& src, const std::string& construct) {
  try {
    ChatTemplate(src, {}, "dir/chat_template.jinja");
    FAIL() << "expected a refusal naming " << construct;
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("dir/chat_template.jinja"), std::string::npos) << what;
    EXPECT_NE(what.find(construct), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(ChatTemplate, UnsupportedConstructsAreRefusedWhenRead) {
  expect_refused("{% macro f() %}{% endmacro %}", "'{% macro %}'");
  expect_refused("{{ messages | tojson }}", "filter 'tojson'");
  expect_refused("{{ strftime_now('%d') }}", "function 'strftime_now()'");
  expect_refused("{% set ns.x = 1 %}", "namespace");
  expect_refused("{{ m.items() }}", "method '.items()'");
  expect_refused("{{ x is mapping }}", "test 'is mapping'");
  expect_refused("{% for m in messages %}", "ends inside a block");
  expect_refused("{% endif %}", "'{% endif %}' here (unbalanced)");
}

TEST(ChatTemplate, RaiseExceptionStopsRendering) {
  const ChatTemplate t("{% if messages[0].role != 'system' %}{{ raise_exception('needs a system turn') }}{% endif %}",
                       {}, "t.jinja");
  EXPECT_THROW(
      {
        try {
          t.render({{"user", "x"}}, true);
        } catch (const UserError& e) {
          EXPECT_NE(std::string(e.what()).find("needs a system turn"), std::string::npos);
          throw;
        }
      },
      UserError);
}

}  // namespace
}  // namespace meshtrain::text
