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

TEST(ChatTemplate, NamespacesOutliveTheLoopThatChangesThem) {
  EXPECT_EQ(render("{% set ns = namespace(n=0, roles='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                   "{% set ns.roles = ns.roles ~ m.role[0] %}{% endfor %}{{ ns.n }}{{ ns.roles }}"),
            "2ua");
  const ChatTemplate t("{% set x = 1 %}{% set x.y = 2 %}", {}, "t.jinja");
  try {
    t.render({}, true);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("only a namespace() takes attributes"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, GenerationMarkersRenderTheirBody) {
  // What transformers renders when it is not asked for the assistant mask (inference never is).
  EXPECT_EQ(render("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}[{{ m.content }}]"
                   "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}"),
            "Hi[ yes ]");
}

TEST(ChatTemplate, TojsonWritesWhatPythonsJsonDumpsWrites) {
  EXPECT_EQ(render("{{ messages[0] | tojson }}"), R"({"role": "user", "content": "Hi"})");
  EXPECT_EQ(render("{{ messages[0] | tojson(indent=2) }}"), "{\n  \"role\": \"user\",\n  \"content\": \"Hi\"\n}");
  EXPECT_EQ(render("{{ [1, [], 'é\"'] | tojson }}"), "[1, [], \"\xC3\xA9\\\"\"]");
}

TEST(ChatTemplate, LoopsUnpackFilterAndSliceWithASteps) {
  EXPECT_EQ(render("{% for k, v in messages[0] | items %}{{ k }}={{ v }};{% endfor %}"), "role=user;content=Hi;");
  EXPECT_EQ(render("{% for m in messages if m.role != 'user' %}{{ m.role }}{{ loop.length }}{% endfor %}"), "assistant1");
  EXPECT_EQ(render("{{ messages[::-1] | map(attribute='role') | join(',') }}|{{ 'abcde'[4:0:-2] }}"), "assistant,user|ec");
  EXPECT_EQ(render("{{ messages | selectattr('role', 'equalto', 'user') | list | length }}"), "1");
  EXPECT_EQ(render("{{ ' a b '.split() | join('+') }}|{{ 'x\n'.rstrip('\n') }}|{{ strftime_now('%Y') | length }}"),
            "a+b|x|4");
  EXPECT_EQ(render("{% set block %}<{{ messages | length }}>{% endset %}{{ block }}"), "<2>");
}

TEST(ChatTemplate, UnsupportedConstructsAreRefusedWhenRead) {
  expect_refused("{% macro f() %}{% endmacro %}", "'{% macro %}'");
  expect_refused("{% for m in messages %}{% break %}{% endfor %}", "'{% break %}'");
  expect_refused("{{ messages | wordwrap }}", "filter 'wordwrap'");
  expect_refused("{{ '%s'.format(1) }}", "method '.format()'");
  expect_refused("{{ x is callable }}", "test 'is callable'");
  expect_refused("{{ {'a': 1} }}", "dict literal");
  expect_refused("{{ cycler(1) }}", "function 'cycler()'");
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
