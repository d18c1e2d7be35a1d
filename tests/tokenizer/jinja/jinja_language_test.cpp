// The language pieces (whitespace control, loop variables, filters, tests, slicing, namespace,
// error messages), each a small template whose expected output jinja2 rendered.
#include <gtest/gtest.h>

#include "tokenizer/jinja/jinja_test_util.h"
#include "tokenizer/jinja/template.h"

namespace serve8 {
namespace {

using jinja::JinjaError;
using jinja::JinjaTemplate;

class JinjaLanguage : public ::testing::TestWithParam<std::size_t> {};

TEST_P(JinjaLanguage, MatchesJinja2) {
  const auto& c = testing::jinja_golden()["language"][GetParam()];
  const std::string source = c["template"];
  const jinja::Dict context = testing::to_dict(c["context"]);
  SCOPED_TRACE(c["name"].get<std::string>() + ": " + source);
  if (!c.contains("error")) {
    EXPECT_EQ(JinjaTemplate(source).render_to_string(context), c["output"].get<std::string>());
    return;
  }
  const bool syntax = c["error_type"] == "TemplateSyntaxError";
  try {
    const JinjaTemplate parsed(source);
    EXPECT_FALSE(syntax) << "parsed, but jinja2 rejects the template";
    parsed.render_to_string(context);
    ADD_FAILURE() << "rendered, but jinja2 raised " << c["error"];
  } catch (const JinjaError& e) {
    EXPECT_EQ(e.reason(), c["error"].get<std::string>());
    if (syntax) {
      EXPECT_EQ(e.line(), c["error_line"].get<int>());
    }
    EXPECT_NE(std::string(e.what()).find(e.reason()), std::string::npos);
  }
}

std::string case_name(const ::testing::TestParamInfo<std::size_t>& info) {
  return testing::jinja_golden()["language"][info.param]["name"].get<std::string>();
}

INSTANTIATE_TEST_SUITE_P(Golden, JinjaLanguage,
                         ::testing::Range<std::size_t>(0, testing::jinja_golden()["language"].size()), case_name);

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
  const JinjaTemplate t("a\n{% for m in messages %}\n{{ m.content + 1 }}\n{% endfor %}");
  jinja::Dict context;
  jinja::Dict message;
  message.set(jinja::Value::string("content"), jinja::Value::string("x"));
  context.set(jinja::Value::string("messages"), jinja::Value::list({jinja::Value::dict(message)}));
  try {
    t.render(context);
    FAIL() << "expected an error";
  } catch (const JinjaError& e) {
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.reason(), "can only concatenate str (not \"int\") to str");
    EXPECT_EQ(std::string(e.what()), "chat template line 3: can only concatenate str (not \"int\") to str");
  }
}

TEST(JinjaErrors, SyntaxErrorsAtConstructionNameTheLine) {
  try {
    JinjaTemplate("line 1\nline 2\n{% if x %}\n{{ 1 + }}\n{% endif %}");
    FAIL() << "expected a syntax error";
  } catch (const JinjaError& e) {
    EXPECT_EQ(e.line(), 4);
  }
}

TEST(JinjaGlobals, StrftimeNowIsLocalTime) {
  const std::string year = JinjaTemplate("{{ strftime_now('%Y') }}").render_to_string({});
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  EXPECT_EQ(year, std::to_string(1900 + local.tm_year));
}

}  // namespace
}  // namespace serve8
