// The node watch (issue #27) against recorded API-server answers: the list, a watch stream with
// bookmarks split across reads anywhere, a 410 Gone (as an ERROR event and as a status), a
// connection cut in the middle of an event, a 401; and the incremental HTTP reader under it.
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/http.h"
#include "kube/node_watch.h"

using namespace kgpu;
using nlohmann::json;

namespace {

json node(const std::string& rv, const std::string& config) {
    json n = {{"kind", "Node"}, {"metadata", {{"name", "n1"}, {"resourceVersion", rv}, {"labels", json::object()}}}};
    if (!config.empty()) n["metadata"]["labels"]["nvidia.com/device-plugin.config"] = config;
    return n;
}

std::string line(const std::string& type, const json& obj) { return json{{"type", type}, {"object", obj}}.dump() + "\n"; }

struct Recorded {
    // What each list / watch answers, in order. A watch answer is the body's pieces (each handed
    // to on_body as one read) and how the stream ends.
    std::deque<Result<kube::Response>> lists;
    struct Watch {
        std::vector<std::string> pieces;
        Result<kube::Response> end = kube::Response{200, {}, ""};
    };
    std::deque<Watch> watches;
    std::vector<std::string> paths;
    std::vector<std::string> seen;  // the config label of each node handed over ("<deleted>" for null)

    kube::NodeWatch make() {
        kube::NodeWatch::Options o;
        o.node = "n1";
        return kube::NodeWatch(
            [this](std::string_view p) {
                paths.push_back("LIST " + std::string(p));
                auto r = lists.front();
                lists.pop_front();
                return r;
            },
            [this](std::string_view p, const std::function<bool(std::string_view)>& on_body, const std::atomic<bool>&) {
                paths.push_back("WATCH " + std::string(p));
                auto w = watches.front();
                watches.pop_front();
                for (const auto& piece : w.pieces)
                    if (!on_body(piece)) break;
                return w.end;
            },
            o,
            [this](const json& n) {
                seen.push_back(n.is_null() ? "<deleted>"
                                           : kube::label_of(n, "nvidia.com/device-plugin.config").value_or("<not a node>"));
            });
    }
};

kube::Response list_of(const std::string& rv, const json& items) {
    return {200, {}, json{{"kind", "NodeList"}, {"metadata", {{"resourceVersion", rv}}}, {"items", items}}.dump()};
}

}  // namespace

TEST(KubeWatch, ListThenWatchWithBookmarksSplitAnywhere) {
    Recorded rec;
    rec.lists.push_back(list_of("100", json::array({node("99", "")})));
    const std::string body = line("MODIFIED", node("101", "ts4")) +
                             line("BOOKMARK", {{"kind", "Node"}, {"metadata", {{"resourceVersion", "150"}}}}) +
                             line("MODIFIED", node("160", ""));
    // Every split of the body into two reads gives the same result.
    for (std::size_t cut = 0; cut <= body.size(); cut += 7) {
        rec.watches.push_back({{body.substr(0, cut), body.substr(cut)}});
    }
    auto w = rec.make();
    ASSERT_TRUE(w.step().has_value());
    EXPECT_EQ(rec.paths[0], "LIST /api/v1/nodes?fieldSelector=metadata.name%3Dn1");
    EXPECT_EQ(rec.paths[1],
              "WATCH /api/v1/nodes?fieldSelector=metadata.name%3Dn1&watch=true&allowWatchBookmarks=true&timeoutSeconds=300"
              "&resourceVersion=100");
    EXPECT_EQ(rec.seen, (std::vector<std::string>{"", "ts4", ""}));
    EXPECT_EQ(w.resource_version(), "160");
    // The watch ended (the server's timeout): the next one starts from the last version, no list.
    while (!rec.watches.empty()) ASSERT_TRUE(w.step().has_value());
    EXPECT_EQ(w.lists(), 1u);
    EXPECT_TRUE(rec.paths.back().ends_with("&resourceVersion=160")) << rec.paths.back();
    EXPECT_EQ(rec.seen.size(), 1 + 2 * (rec.paths.size() - 1));  // every split delivered both MODIFIED
}

TEST(KubeWatch, GoneAsAnErrorEventOrAStatusListsAgain) {
    Recorded rec;
    rec.lists.push_back(list_of("100", json::array({node("100", "a")})));
    rec.lists.push_back(list_of("500", json::array({node("500", "b")})));
    rec.lists.push_back(list_of("600", json::array({node("600", "c")})));
    rec.watches.push_back({{line("ERROR", {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}, {"message", "too old"}})}});
    rec.watches.push_back({{}, kube::Response{410, {}, R"({"kind":"Status","code":410})"}});
    rec.watches.push_back({{line("MODIFIED", node("601", "d"))}});
    auto w = rec.make();
    ASSERT_TRUE(w.step().has_value());
    EXPECT_EQ(w.resource_version(), "");
    ASSERT_TRUE(w.step().has_value());  // lists (b), then the watch answers 410
    EXPECT_EQ(w.resource_version(), "");
    ASSERT_TRUE(w.step().has_value());  // lists (c), watches (d)
    EXPECT_EQ(w.lists(), 3u);
    EXPECT_EQ(rec.seen, (std::vector<std::string>{"a", "b", "c", "d"}));
    EXPECT_EQ(w.resource_version(), "601");
}

TEST(KubeWatch, ACutInsideAnEventKeepsTheLastWholeOneAndWatchesAgain) {
    Recorded rec;
    rec.lists.push_back(list_of("100", json::array({node("100", "")})));
    const std::string second = line("MODIFIED", node("102", "never"));
    rec.watches.push_back({{line("MODIFIED", node("101", "ts4")) + second.substr(0, 30)},
                           fail(Code::unavailable, "GET /api/v1/nodes: the connection closed inside a chunked body")});
    rec.watches.push_back({{line("MODIFIED", node("103", "ts8"))}});
    auto w = rec.make();
    auto st = w.step();
    ASSERT_FALSE(st.has_value());
    EXPECT_NE(st.error().message.find("closed inside"), std::string::npos);
    EXPECT_EQ(w.resource_version(), "101");
    ASSERT_TRUE(w.step().has_value());
    EXPECT_TRUE(rec.paths.back().ends_with("resourceVersion=101")) << rec.paths.back();
    EXPECT_EQ(rec.seen, (std::vector<std::string>{"", "ts4", "ts8"}));
}

TEST(KubeWatch, RefusalsGarbageAndADeletedNode) {
    Recorded rec;
    rec.lists.push_back(kube::Response{401, {}, R"({"kind":"Status","message":"Unauthorized"})"});
    rec.lists.push_back(kube::Response{200, {}, "<html>proxy error</html>"});
    rec.lists.push_back(list_of("7", json::array()));
    rec.watches.push_back({{"not json\n"}});
    rec.lists.push_back(list_of("8", json::array({node("8", "x")})));
    rec.watches.push_back({{line("DELETED", node("9", "x"))}});
    auto w = rec.make();
    auto st = w.step();
    ASSERT_FALSE(st.has_value());
    EXPECT_NE(st.error().message.find("401"), std::string::npos) << st.error().message;
    st = w.step();
    ASSERT_FALSE(st.has_value());
    EXPECT_NE(st.error().message.find("not a NodeList"), std::string::npos) << st.error().message;
    st = w.step();  // no such node yet (null), then a watch answering garbage
    ASSERT_FALSE(st.has_value());
    EXPECT_NE(st.error().message.find("not a watch event"), std::string::npos) << st.error().message;
    EXPECT_EQ(w.resource_version(), "7");
    rec.lists.pop_front();  // (a list is not needed: the version is kept)
    ASSERT_TRUE(w.step().has_value());
    EXPECT_EQ(rec.seen, (std::vector<std::string>{"<deleted>", "<deleted>"}));
}

TEST(KubeWatch, TheThreadBacksOffAndStops) {
    Recorded rec;
    for (int i = 0; i < 100; ++i) rec.lists.push_back(fail(Code::unavailable, "connect: Connection refused"));
    auto w = rec.make();
    w.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    w.stop();
    // The first failure waits 0.5-1 s before the next try: one or two lists, never a spin.
    EXPECT_LE(rec.paths.size(), 2u);
    EXPECT_GE(rec.paths.size(), 1u);
}

TEST(KubeHttpReader, OneByteAtATimeIsTheSameAsAllAtOnce) {
    const std::string full =
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\n{\"me\r\nE\r\nssage\":\"no\"}  \r\n0\r\nX-T: 1\r\n\r\n";
    kube::ResponseReader whole;
    std::string a;
    ASSERT_TRUE(whole.feed(full, a).has_value());
    ASSERT_TRUE(whole.complete());
    kube::ResponseReader bytewise;
    std::string b;
    std::vector<std::size_t> sizes;  // the body as it grows: handed out as it arrives
    for (char ch : full) {
        ASSERT_TRUE(bytewise.feed(std::string_view(&ch, 1), b).has_value());
        if (sizes.empty() || sizes.back() != b.size()) sizes.push_back(b.size());
    }
    EXPECT_TRUE(bytewise.complete());
    EXPECT_EQ(a, "{\"message\":\"no\"}  ");
    EXPECT_EQ(a, b);
    EXPECT_GT(sizes.size(), 10u) << "the body came out only at the end";
    EXPECT_EQ(bytewise.head().status, 200);
}

TEST(KubeHttpReader, AWatchBodyNeverEndsButIsHandedOutAsItComes) {
    kube::ResponseReader r;
    std::string body;
    ASSERT_TRUE(r.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1c\r\n{\"type\":\"BOOKMARK\",\"obj\":1}\n\r\n", body)
                    .has_value());
    EXPECT_TRUE(r.head_done());
    EXPECT_FALSE(r.complete());
    EXPECT_EQ(body, "{\"type\":\"BOOKMARK\",\"obj\":1}\n");
    EXPECT_FALSE(r.finish().has_value()) << "a connection cut inside a chunked body is an error";
}

TEST(KubeWatch, LabelOfANodeObject) {
    EXPECT_EQ(kube::label_of(node("1", "ts4"), "nvidia.com/device-plugin.config"), "ts4");
    EXPECT_EQ(kube::label_of(node("1", ""), "nvidia.com/device-plugin.config"), "");
    EXPECT_EQ(kube::label_of(json{{"metadata", {{"name", "n1"}}}}, "x"), "") << "a Node without labels";
    EXPECT_EQ(kube::label_of(json{{"metadata", {{"labels", {{"x", 1}}}}}}, "x"), "") << "not a string";
    EXPECT_FALSE(kube::label_of(json(), "x").has_value());
    EXPECT_FALSE(kube::label_of(json{{"kind", "Status"}}, "x").has_value());
}

TEST(KubeWatch, WronglyTypedFieldsAreFailuresNotCrashes) {
    Recorded rec;
    rec.lists.push_back(kube::Response{200, {}, R"({"kind":"NodeList","metadata":{"resourceVersion":5},"items":[]})"});
    rec.lists.push_back(list_of("6", json::array()));
    rec.watches.push_back({{R"({"type":"ERROR","object":{"kind":"Status","code":"410","message":7}})" "\n"}});
    rec.watches.push_back({{R"({"type":"MODIFIED","object":{"metadata":{"resourceVersion":9,"labels":[]}}})" "\n"}});
    auto w = rec.make();
    auto st = w.step();
    ASSERT_FALSE(st.has_value());
    EXPECT_NE(st.error().message.find("no resourceVersion"), std::string::npos) << st.error().message;
    st = w.step();  // a code that is not a number: an ERROR, not a 410
    ASSERT_FALSE(st.has_value());
    EXPECT_NE(st.error().message.find("ERROR event"), std::string::npos) << st.error().message;
    EXPECT_EQ(w.resource_version(), "6");
    ASSERT_TRUE(w.step().has_value());  // a number as version, labels as a list: kept going
    EXPECT_EQ(w.resource_version(), "6");
}
