// json::Reader (src/common/json.h): every access on outside JSON is checked, and a mismatch names
// the document and the jq path of the value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/json.h"

using kgpu::json::Reader;
using ::testing::HasSubstr;
using nlohmann::json;

namespace {

// The message decode() reports for `f` run over `text`.
template <class F>
std::string error_of(std::string_view text, F f) {
    auto doc = json::parse(text);
    auto r = kgpu::json::decode(doc, "doc.json", [&](const Reader& root) {
        f(root);
        return 0;
    });
    EXPECT_FALSE(r) << text;
    if (r) return "";
    EXPECT_EQ(r.error().code, kgpu::Code::parse);
    return r.error().message;
}

TEST(JsonReader, AbsentAndNullMembersReadAsTheirDefaults) {
    auto doc = json::parse(R"({"a": null, "s": "x", "b": true})");
    auto r = kgpu::json::decode(doc, "doc.json", [](const Reader& root) {
        EXPECT_TRUE(root.object("missing").members().empty());
        EXPECT_TRUE(root.object("a").members().empty());
        EXPECT_TRUE(root.array("missing").elements().empty());
        EXPECT_EQ(root.string("missing", "dflt"), "dflt");
        EXPECT_EQ(root.string("s"), "x");
        EXPECT_TRUE(root.boolean("b", false));
        EXPECT_FALSE(root.boolean("a", false));
        EXPECT_FALSE(root.has("a"));
        EXPECT_TRUE(root.has("s"));
        EXPECT_FALSE(root.find("missing"));
        return root.path();
    });
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(*r, ".");
}

TEST(JsonReader, WrongShapesNameTheDocumentAndThePath) {
    EXPECT_EQ(error_of(R"({"items":[{"metadata":[]}]})",
                       [](const Reader& r) { r.array("items").elements()[0].object("metadata"); }),
              "doc.json: .items[0].metadata: expected an object, found an array");
    EXPECT_EQ(error_of("1", [](const Reader& r) { r.object("items"); }), "doc.json: .: expected an object, found 1");
    EXPECT_EQ(error_of(R"(["x"])", [](const Reader& r) { r.elements()[0].members(); }),
              "doc.json: .[0]: expected an object, found \"x\"");
    EXPECT_EQ(error_of(R"({"limits":{"nvidia.com/gpu":[]}})",
                       [](const Reader& r) { r.object("limits").members()[0].second.as_scalar_text(); }),
              "doc.json: .limits[\"nvidia.com/gpu\"]: expected a string or a number, found an array");
    EXPECT_EQ(error_of(R"({"b":"yes"})", [](const Reader& r) { r.boolean("b", false); }),
              "doc.json: .b: expected true or false, found \"yes\"");
    EXPECT_EQ(error_of(R"({"s":{}})", [](const Reader& r) { r.string("s"); }),
              "doc.json: .s: expected a string, found an object");
    EXPECT_EQ(error_of(R"({"a":{}})", [](const Reader& r) { r.array("a"); }), "doc.json: .a: expected an array, found an object");
    // Long values are shortened in the message.
    EXPECT_THAT(error_of(R"({"s":")" + std::string(100, 'x') + R"("})", [](const Reader& r) { r.object("s"); }),
                HasSubstr("found \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."));
}

TEST(JsonReader, PathStepsQuoteKeysThatAreNotIdentifiers) {
    EXPECT_EQ(kgpu::json::path_step("metadata"), ".metadata");
    EXPECT_EQ(kgpu::json::path_step("_x1"), "._x1");
    EXPECT_EQ(kgpu::json::path_step("nvidia.com/gpu"), "[\"nvidia.com/gpu\"]");
    EXPECT_EQ(kgpu::json::path_step(""), "[\"\"]");
    EXPECT_EQ(kgpu::json::path_step("a\"b"), "[\"a\\\"b\"]");
    EXPECT_EQ(kgpu::json::path_step("1st"), "[\"1st\"]");
}

TEST(JsonReader, ParseErrorsNameTheDocumentAndWhere) {
    auto r = kgpu::json::parse("{\"a\": ", "pods.json");
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("pods.json: not JSON: "));
    EXPECT_THAT(r.error().message, HasSubstr("line 1, column 7"));
    EXPECT_THAT(r.error().message, Not(HasSubstr("[json.exception")));
    EXPECT_TRUE(kgpu::json::parse("[1, 2]", "x"));
}

// Deep nesting is refused before any parser sees it: copying or printing such a value recurses
// once per level and overflowed the stack (issue #22: the container runtime crashed, rc 139, on
// a config.json nested 70,000 levels deep). Brackets inside strings do not count.
TEST(JsonDepth, DeepNestingIsRefusedNamingTheDocumentAndTheByte) {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    auto st = kgpu::json::check_depth(deep, "config.json");
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, kgpu::Code::parse);
    EXPECT_THAT(st.error().message, HasSubstr("config.json: JSON nested deeper than 512 levels (at byte 512); refused"));
    auto parsed = kgpu::json::parse("{\"a\":" + deep + "}", "pods.json");
    ASSERT_FALSE(parsed);
    EXPECT_THAT(parsed.error().message, HasSubstr("pods.json: JSON nested deeper than 512 levels"));
    // At the limit, and brackets in strings (with escaped quotes) that are not structure.
    EXPECT_TRUE(kgpu::json::check_depth(std::string(512, '[') + std::string(512, ']'), "x"));
    EXPECT_TRUE(kgpu::json::check_depth("[\"" + std::string(10000, '[') + "\\\"" + std::string(10000, '{') + "\"]", "x"));
    EXPECT_TRUE(kgpu::json::parse("{\"a\":[[{\"b\":\"]]]]\"}]]}", "x"));
}

// A string that is not UTF-8 (a tool's output, an NVML name) in a document kgpu writes for
// people or the API server: U+FFFD for the bad byte, where dump() throws.
TEST(JsonDumpText, BytesThatAreNotUtf8BecomeTheReplacementCharacter) {
    const nlohmann::json doc = {{"message", std::string("GPU \xff\xfe lost")}};
    EXPECT_THROW((void)doc.dump(), nlohmann::json::type_error);
    EXPECT_EQ(kgpu::json::dump_text(doc), "{\"message\":\"GPU \xef\xbf\xbd\xef\xbf\xbd lost\"}");
    const nlohmann::ordered_json ordered = {{"a", "\xc3"}};
    EXPECT_EQ(kgpu::json::dump_text(ordered, 1), "{\n \"a\": \"\xef\xbf\xbd\"\n}");
}

}  // namespace
