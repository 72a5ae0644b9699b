// The node Event recorder (issue #27 part 2) against a fake API server as strict as the real one
// about what it checks: an Event's required fields, its namespace matching the path, RFC 3339
// timestamps, PATCH of a missing Event answering 404, a name used twice answering 409. The e2e
// suite posts through the real API server (KubeE2E.XidHealth).
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/events.h"

using namespace kgpu;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

struct FakeApi {
    std::map<std::string, json> events;  // by name, namespace "default"
    json node = {{"metadata", {{"name", "n1"}}}};
    std::vector<std::string> calls;       // "METHOD path"
    int fail_next = 0;                    // transport failures to return first
    int status_override = 0;              // answer this status to everything when set

    static bool timestamp(const json& j, const char* key) {
        static const std::regex re(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)");
        return j.contains(key) && j[key].is_string() && std::regex_match(j[key].get<std::string>(), re);
    }

    Result<kube::Response> operator()(std::string_view method, std::string_view path, std::string_view body,
                                      std::string_view type) {
        calls.push_back(std::string(method) + " " + std::string(path));
        if (fail_next > 0) {
            --fail_next;
            return fail(Code::unavailable, "connect: Connection refused");
        }
        auto answer = [](int status, const json& j) { return kube::Response{status, {}, j.dump()}; };
        if (status_override) return answer(status_override, {{"kind", "Status"}, {"message", "forbidden by the fake"}});
        const std::string p(path);
        const std::string prefix = "/api/v1/namespaces/default/events";
        json in = json::parse(body, nullptr, false);
        if (in.is_discarded()) return answer(400, {{"kind", "Status"}, {"message", "not JSON"}});
        if (method == "POST" && p == prefix) {
            EXPECT_EQ(type, "application/json");
            const bool valid = in["kind"] == "Event" && in["apiVersion"] == "v1" && in["metadata"]["name"].is_string() &&
                               in["metadata"]["namespace"] == "default" && in["involvedObject"]["kind"] == "Node" &&
                               in["involvedObject"]["name"] == "n1" && in["involvedObject"]["uid"] == "n1" &&
                               (in["type"] == "Normal" || in["type"] == "Warning") && in["reason"].is_string() &&
                               in["message"].is_string() && in["source"]["component"].is_string() &&
                               timestamp(in, "firstTimestamp") && timestamp(in, "lastTimestamp") &&
                               in["count"].is_number_integer() && in["count"].get<int>() >= 1;
            if (!valid) return answer(422, {{"kind", "Status"}, {"message", "invalid Event: " + in.dump()}});
            const std::string name = in["metadata"]["name"];
            if (events.contains(name)) return answer(409, {{"kind", "Status"}, {"message", "already exists"}});
            events[name] = in;
            return answer(201, in);
        }
        if (method == "PATCH" && p.starts_with(prefix + "/")) {
            EXPECT_EQ(type, "application/merge-patch+json");
            auto it = events.find(p.substr(prefix.size() + 1));
            if (it == events.end()) return answer(404, {{"kind", "Status"}, {"message", "not found"}});
            it->second.merge_patch(in);
            return answer(200, it->second);
        }
        if (method == "PATCH" && p == "/api/v1/nodes/n1") {
            node.merge_patch(in);
            return answer(200, node);
        }
        return answer(404, {{"kind", "Status"}, {"message", "no route " + p}});
    }
};

struct Rig {
    FakeApi api;
    std::chrono::system_clock::time_point now = std::chrono::system_clock::from_time_t(1'800'000'000);
    kube::EventRecorder recorder;

    explicit Rig(kube::EventRecorderOptions o = {})
        : recorder([this](auto m, auto p, auto b, auto t) { return api(m, p, b, t); }, with(std::move(o))) {}

    kube::EventRecorderOptions with(kube::EventRecorderOptions o) {
        o.node = "n1";
        o.retry_delay = 1ms;
        o.attempts = 3;
        o.now = [this] { return now; };
        return o;
    }
    const json& only_event() {
        EXPECT_EQ(api.events.size(), 1u);
        return api.events.begin()->second;
    }
};

}  // namespace

TEST(NodeEvents, AnIdenticalEventIsTheSameEventWithItsCountRaised) {
    Rig r;
    r.recorder.record("Warning", "GPUUnhealthy", "GPU 3 (GPU-a) is Unhealthy: XID 48");
    r.recorder.flush();
    const json first = r.only_event();
    EXPECT_EQ(first["count"], 1);
    EXPECT_EQ(first["firstTimestamp"], "2027-01-15T08:00:00Z");
    EXPECT_EQ(first["source"]["host"], "n1");
    EXPECT_EQ(first["metadata"]["name"].get<std::string>().rfind("n1.", 0), 0u);

    r.now += 90s;
    r.recorder.record("Warning", "GPUUnhealthy", "GPU 3 (GPU-a) is Unhealthy: XID 48");
    r.recorder.flush();
    const json again = r.only_event();
    EXPECT_EQ(again["count"], 2);
    EXPECT_EQ(again["firstTimestamp"], "2027-01-15T08:00:00Z");
    EXPECT_EQ(again["lastTimestamp"], "2027-01-15T08:01:30Z");
    EXPECT_EQ(r.api.calls.back(), "PATCH /api/v1/namespaces/default/events/" + first["metadata"]["name"].get<std::string>());

    r.recorder.record("Normal", "GPUHealthy", "GPU 3 (GPU-a) is Healthy again");
    r.recorder.flush();
    EXPECT_EQ(r.api.events.size(), 2u);
    const auto st = r.recorder.stats();
    EXPECT_EQ(st.created, 2u);
    EXPECT_EQ(st.updated, 1u);
    EXPECT_EQ(st.failed, 0u);
}

TEST(NodeEvents, AnExpiredEventIsPostedAgainWithItsCount) {
    Rig r;
    r.recorder.record("Warning", "GPUUnhealthy", "m");
    r.recorder.flush();
    r.api.events.clear();  // the API server's event TTL passed
    r.recorder.record("Warning", "GPUUnhealthy", "m");
    r.recorder.flush();
    const json e = r.only_event();
    EXPECT_EQ(e["count"], 2);
    EXPECT_EQ(r.recorder.stats().created, 2u);
}

TEST(NodeEvents, TheSpamFilterLetsABurstThroughThenOneEveryRefill) {
    Rig r;
    for (int i = 0; i < 30; ++i) r.recorder.record("Warning", "R" + std::to_string(i), "m");
    r.recorder.flush();
    EXPECT_EQ(r.api.events.size(), 25u);
    EXPECT_EQ(r.recorder.stats().rate_limited, 5u);
    r.now += 299s;
    r.recorder.record("Warning", "Late", "m");
    r.recorder.flush();
    EXPECT_EQ(r.api.events.size(), 25u);
    r.now += 2s;  // a token refilled (one per 300 s)
    r.recorder.record("Warning", "Later", "m");
    r.recorder.flush();
    EXPECT_EQ(r.api.events.size(), 26u);
    EXPECT_EQ(r.recorder.stats().rate_limited, 6u);
}

TEST(NodeEvents, SimilarEventsAreCombinedFromTheTenthOn) {
    Rig r;
    for (int i = 0; i < 12; ++i) r.recorder.record("Warning", "GPUUnhealthy", "GPU " + std::to_string(i));
    r.recorder.flush();
    // Nine on their own, then one combined Event counting the rest.
    ASSERT_EQ(r.api.events.size(), 10u);
    int combined = 0;
    for (const auto& [name, e] : r.api.events)
        if (e["message"].get<std::string>().starts_with("(combined from similar events): ")) {
            ++combined;
            EXPECT_EQ(e["count"], 3);  // GPU 9, 10 and 11
            EXPECT_EQ(e["message"], "(combined from similar events): GPU 11");
        }
    EXPECT_EQ(combined, 1);
    EXPECT_EQ(r.recorder.stats().created + r.recorder.stats().updated, 12u);
}

TEST(NodeEvents, TransportFailuresAreRetriedRefusalsAreNot) {
    Rig r;
    r.api.fail_next = 2;
    r.recorder.record("Warning", "GPUUnhealthy", "m");
    r.recorder.flush();
    EXPECT_EQ(r.api.calls.size(), 3u);
    EXPECT_EQ(r.api.events.size(), 1u);

    r.api.calls.clear();
    r.api.status_override = 403;
    r.recorder.record("Warning", "GPUUnhealthy", "other");
    r.recorder.flush();
    EXPECT_EQ(r.api.calls.size(), 1u) << "a 403 is final: no retry";
    EXPECT_EQ(r.recorder.stats().failed, 1u);

    // A failed write is not remembered: the same event later is a new POST, not a PATCH.
    r.api.status_override = 0;
    r.recorder.record("Warning", "GPUUnhealthy", "other");
    r.recorder.flush();
    EXPECT_EQ(r.api.calls.back(), "POST /api/v1/namespaces/default/events");
    EXPECT_EQ(r.api.events.size(), 2u);
}

TEST(NodeEvents, AMessageOverOneKibibyteIsCutOnACharacterBoundary) {
    Rig r;
    std::string message(1020, 'x');
    for (int i = 0; i < 10; ++i) message += "\xc3\xa9";  // é
    r.recorder.record("Warning", "GPUUnhealthy", message);
    r.recorder.flush();
    const std::string got = r.only_event()["message"];
    EXPECT_LE(got.size(), 1024u);
    EXPECT_TRUE(got.ends_with("x...")) << got.substr(got.size() - 8);
}

TEST(NodeEvents, TheQueueIsBoundedAndNeverWaitsForTheServer) {
    kube::EventRecorderOptions o;
    o.queue_limit = 3;
    Rig r(o);
    for (int i = 0; i < 5; ++i) r.recorder.record("Warning", "R", std::to_string(i));
    EXPECT_TRUE(r.api.calls.empty()) << "record() made a request";
    r.recorder.flush();
    EXPECT_EQ(r.api.events.size(), 3u);
    EXPECT_EQ(r.recorder.stats().queue_full, 2u);
}

TEST(NodeEvents, TheAnnotationKeepsTheLatestValueAndIsWrittenAgainAfterAFailure) {
    Rig r;
    r.recorder.annotate("kgpu/gpu-health", "{\"a\":1}");
    r.recorder.annotate("kgpu/gpu-health", "{\"a\":2}");
    r.api.status_override = 503;
    r.recorder.flush();
    EXPECT_EQ(r.api.calls.size(), 3u);  // 503 is retried: 3 attempts
    EXPECT_FALSE(r.api.node["metadata"].contains("annotations"));
    r.api.status_override = 0;
    r.recorder.flush();  // nothing new: the failed value goes again
    EXPECT_EQ(r.api.node["metadata"]["annotations"]["kgpu/gpu-health"], "{\"a\":2}");
    EXPECT_EQ(r.recorder.stats().annotated, 1u);
}

TEST(NodeEvents, TheThreadWritesWhatIsQueued) {
    Rig r;
    r.recorder.start();
    r.recorder.record("Normal", "GPUHealthy", "m");
    for (int i = 0; i < 1000 && r.recorder.stats().created == 0; ++i) std::this_thread::sleep_for(10ms);
    r.recorder.stop();
    EXPECT_EQ(r.recorder.stats().created, 1u);
}

TEST(NodeEvents, AggregationFollowsTheLatestSimilarEventAsClientGo) {
    Rig r;
    // Similar events 5 minutes apart: each within 10 minutes of the previous one, so the group
    // goes on and the 10th is combined although the first is 45 minutes old.
    for (int i = 0; i < 10; ++i) {
        r.recorder.record("Warning", "GPUUnhealthy", "GPU " + std::to_string(i));
        r.now += 5min;
    }
    r.recorder.flush();
    int combined = 0;
    for (const auto& [name, e] : r.api.events)
        combined += e["message"].get<std::string>().starts_with("(combined from similar events): ");
    EXPECT_EQ(combined, 1);
    // After a quiet 11 minutes a new group starts: plain again.
    r.now += 11min;
    r.recorder.record("Warning", "GPUUnhealthy", "GPU 42");
    r.recorder.flush();
    bool plain = false;
    for (const auto& [name, e] : r.api.events) plain |= e["message"] == "GPU 42";
    EXPECT_TRUE(plain);
}

TEST(NodeEvents, AStopDropsWhatIsQueuedWithoutARequest) {
    Rig r;
    for (int i = 0; i < 5; ++i) r.recorder.record("Warning", "R", std::to_string(i));
    r.recorder.annotate("kgpu/gpu-health", "{}");
    r.recorder.request_stop();
    r.recorder.flush();
    EXPECT_TRUE(r.api.calls.empty()) << "a request after stop";
    EXPECT_EQ(r.recorder.stats().failed, 5u);
}
