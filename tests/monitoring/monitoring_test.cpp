// deploy/monitoring: the alert rules (promtool check + promtool test rules with synthetic series
// for every alert, the PrometheusRule equal to the plain file) and the Grafana dashboard, data
// driven: a real Prometheus (Debian's) scrapes `kgpu exporter` on a simulated 8-GPU node with pods
// (the fake kubelet PodResources and CRI servers), MPS sharing (kgpu mps-control-daemon), XIDs of
// two classes, a lost GPU, a failing NVML call and a pod's process near its GPU's memory; every
// variable and every panel expression of the dashboard must return data, and
// the rules loaded into that Prometheus must raise the alerts the injected faults call for. A
// panel added to the JSON is checked without touching this file.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "metrics_text.h"
#include "support/fake_cri.h"
#include "support/fake_pod_resources.h"
#include "support/process.h"
#include "support/files.h"
#include "support/expect.h"

namespace kgpu::test {
namespace {

using kgpu::test::slurp;

const std::string kSource = KGPU_SOURCE_DIR;
const std::string kRules = kSource + "/deploy/monitoring/kgpu-alerts.rules.yaml";
const std::string kDashboard = kSource + "/deploy/monitoring/kgpu-dashboard.json";

bool have_prometheus() { return ::access("/usr/bin/promtool", X_OK) == 0 && ::access("/usr/bin/prometheus", X_OK) == 0; }

// Every panel, rows' nested panels included.
std::vector<nlohmann::json> all_panels(const nlohmann::json& dash) {
    std::vector<nlohmann::json> out;
    for (const auto& p : dash["panels"]) {
        out.push_back(p);
        if (p.contains("panels"))
            for (const auto& q : p["panels"]) out.push_back(q);
    }
    return out;
}

// Metric names an expression uses that kgpu's exporter, Prometheus or kube-state-metrics provide.
std::set<std::string> metric_names(const std::string& expr) {
    static const std::regex re(R"(\b(DCGM_FI_[A-Z_]+|kgpu_[a-z_]+|kube_[a-z_]+|up)\b\s*(\{|\[|\)|$|\s|==|>|<|\+|-|\*|/))");
    std::set<std::string> out;
    for (auto it = std::sregex_iterator(expr.begin(), expr.end(), re); it != std::sregex_iterator(); ++it)
        out.insert((*it)[1]);
    return out;
}

std::set<std::string> catalogue() {
    std::set<std::string> out = {"up",  // Prometheus' own
                                 // kube-state-metrics, for what only the kubelet knows
                                 "kube_pod_container_status_ready", "kube_node_status_capacity",
                                 "kube_node_status_allocatable"};
    static const std::regex row(R"(^\| `([A-Za-z_]+)` \|)");
    std::istringstream in(slurp(kSource + "/docs/metrics.md"));
    std::string line;
    std::smatch m;
    while (std::getline(in, line))
        if (std::regex_search(line, m, row)) out.insert(m[1]);
    return out;
}

TEST(Alerts, PromtoolChecksTheRules) {
    if (!have_prometheus()) GTEST_SKIP() << "no promtool (Debian package prometheus; scripts/setup --all installs it)";
    auto r = run_process({"/usr/bin/promtool", "check", "rules", kRules});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("SUCCESS"), std::string::npos) << r.out;
}

TEST(Alerts, EveryAlertFiresOnItsSyntheticSeries) {
    if (!have_prometheus()) GTEST_SKIP() << "no promtool (Debian package prometheus; scripts/setup --all installs it)";
    auto r = run_process({"/usr/bin/promtool", "test", "rules", kSource + "/tests/monitoring/alerts_test.yaml"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    // Each alert of the rules file has a unit test that expects it to fire.
    const std::string tests = slurp(kSource + "/tests/monitoring/alerts_test.yaml");
    for (const auto& group : YAML::LoadFile(kRules)["groups"])
        for (const auto& rule : group["rules"]) {
            const std::string name = rule["alert"].as<std::string>();
            EXPECT_NE(tests.find("alertname: " + name + "\n        exp_alerts:\n          - exp_labels"), std::string::npos)
                << name << " has no promtool test in which it fires";
        }
}

TEST(Alerts, PrometheusRuleHasTheRulesOfThePlainFile) {
    YAML::Node plain = YAML::LoadFile(kRules);
    YAML::Node cr;
    for (const auto& doc : YAML::LoadAllFromFile(kSource + "/deploy/kubernetes/prometheusrule.yaml")) cr = doc;
    ASSERT_TRUE(cr["kind"]) << "no document in prometheusrule.yaml";
    EXPECT_EQ(cr["kind"].as<std::string>(), "PrometheusRule");
    EXPECT_EQ(cr["apiVersion"].as<std::string>(), "monitoring.coreos.com/v1");
    YAML::Emitter a, b;
    a << plain;
    b << cr["spec"];
    EXPECT_EQ(std::string(b.c_str()), std::string(a.c_str()));
}

TEST(Alerts, RulesAndDashboardUseOnlyMetricsThatExist) {
    const auto known = catalogue();
    ASSERT_GT(known.size(), 20u) << "docs/metrics.md's catalogue was not read";
    for (const auto& group : YAML::LoadFile(kRules)["groups"])
        for (const auto& rule : group["rules"])
            for (const auto& name : metric_names(rule["expr"].as<std::string>()))
                EXPECT_TRUE(known.contains(name)) << rule["alert"].as<std::string>() << " uses " << name
                                                  << ", which is not in docs/metrics.md";
    for (const auto& p : all_panels(nlohmann::json::parse(slurp(kDashboard))))
        for (const auto& t : p.value("targets", nlohmann::json::array())) {
            auto names = metric_names(t["expr"].get<std::string>());
            EXPECT_FALSE(names.empty()) << p["title"] << ": " << t["expr"];
            for (const auto& name : names)
                EXPECT_TRUE(known.contains(name) && !name.starts_with("kube_"))
                    << "panel " << p["title"] << " uses " << name << ", which kgpu's exporter does not serve";
        }
}

TEST(Dashboard, IsAnImportableGrafanaDashboard) {
    const auto dash = nlohmann::json::parse(slurp(kDashboard));
    EXPECT_TRUE(dash["uid"].is_string() && !dash["uid"].get<std::string>().empty());
    EXPECT_TRUE(dash["title"].is_string());
    EXPECT_GE(dash["schemaVersion"].get<int>(), 36);
    EXPECT_FALSE(dash.contains("id") && !dash["id"].is_null()) << "an id ties the JSON to one Grafana";
    std::map<std::string, nlohmann::json> vars;
    for (const auto& v : dash["templating"]["list"]) vars[v["name"]] = v;
    ASSERT_TRUE(vars.contains("datasource") && vars["datasource"]["type"] == "datasource" &&
                vars["datasource"]["query"] == "prometheus")
        << "the data source must be a variable, so the JSON imports into any Grafana";
    ASSERT_TRUE(vars.contains("node") && vars.contains("gpu"));
    std::set<int> ids;
    std::vector<std::string> rows;
    for (const auto& p : all_panels(dash)) {
        EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << "duplicate panel id " << p["id"];
        for (const char* k : {"h", "w", "x", "y"}) EXPECT_TRUE(p["gridPos"].contains(k)) << p["title"];
        EXPECT_LE(p["gridPos"]["x"].get<int>() + p["gridPos"]["w"].get<int>(), 24) << p["title"];
        if (p["type"] == "row") {
            rows.push_back(p["title"]);
            continue;
        }
        ASSERT_FALSE(p["targets"].empty()) << p["title"];
        EXPECT_EQ(p["datasource"]["uid"], "${datasource}") << p["title"];
        std::set<std::string> refs;
        for (const auto& t : p["targets"]) {
            EXPECT_EQ(t["datasource"]["uid"], "${datasource}") << p["title"];
            EXPECT_TRUE(refs.insert(t["refId"].get<std::string>()).second) << p["title"];
            const std::string expr = t["expr"];
            // An expression that answers without data would make the live test below vacuous.
            EXPECT_EQ(expr.find("vector("), std::string::npos) << p["title"] << ": " << expr;
            EXPECT_EQ(expr.find("absent("), std::string::npos) << p["title"] << ": " << expr;
        }
    }
    // A fleet view and a per-node view.
    EXPECT_TRUE(std::find(rows.begin(), rows.end(), "Fleet") != rows.end());
    EXPECT_TRUE(std::find_if(rows.begin(), rows.end(), [](const std::string& r) { return r.find("$node") != std::string::npos; }) !=
                rows.end());
}

class Prometheus {
public:
    explicit Prometheus(int port) : port_(port) {}
    // The query's result (an array), or a JSON error object.
    nlohmann::json query(const std::string& expr) const {
        auto r = http_request(port_, "GET", "/api/v1/query?query=" + url_encode(expr), {}, 10000);
        auto j = nlohmann::json::parse(r.body, nullptr, false);
        if (r.status != 200 || j.is_discarded() || j["status"] != "success")
            return nlohmann::json{{"error", std::to_string(r.status) + " " + r.body}};
        return j["data"]["result"];
    }
    nlohmann::json get(const std::string& path) const {
        auto r = http_request(port_, "GET", path, {}, 10000);
        auto j = nlohmann::json::parse(r.body, nullptr, false);
        return j.is_discarded() ? nlohmann::json{} : j;
    }

private:
    int port_;
};

// What Grafana sends for a multi-value variable with every value selected: a regex alternation.
std::string all_values_regex(const std::set<std::string>& values) {
    std::string out = "(";
    for (const auto& v : values) out += (out.size() > 1 ? "|" : "") + v;
    return out + ")";
}

std::string substitute(std::string expr, const std::map<std::string, std::string>& vars) {
    for (const auto& [name, value] : vars) {
        for (const std::string& pattern : {"${" + name + "}", "$" + name}) {
            for (size_t at; (at = expr.find(pattern)) != std::string::npos;) expr.replace(at, pattern.size(), value);
        }
    }
    return expr;
}

TEST(Dashboard, EveryPanelAndAlertHasDataFromARealPrometheusScrapingASimulatedNode) {
    if (!have_prometheus()) GTEST_SKIP() << "no /usr/bin/prometheus (Debian package prometheus; scripts/setup --all installs it)";
    TempDir dir;
    const YAML::Node node = YAML::LoadFile(kSource + "/sim/nodes/dgx-h100.yaml");
    auto uuid = [&](int i) { return node["gpus"][i]["uuid"].as<std::string>(); };

    // The kubelet's view: a 2-GPU training pod, and a pod on GPU 3. The runtime's: the trainer's
    // container, whose process (pid 4242) uses 76 GiB of GPU 0's 80.
    FakePodResources pr(dir.path() + "/pod-resources.sock");
    ASSERT_TRUE(pr.start());
    pr.add_pod("ml", "trainer-0", "main", "nvidia.com/gpu", {uuid(0), uuid(1)});
    pr.add_pod("web", "infer-0", "server", "nvidia.com/gpu", {uuid(3)});
    const std::string cid(64, 'c');
    FakeCri cri(dir.path() + "/cri.sock");
    ASSERT_TRUE(cri.start());
    cri.add_container(cid, "ml", "trainer-0", "main");
    dir.write("proc/4242/cgroup", "0::/kubepods.slice/kubepods-pod1f2e3d4c_5b6a_7980_1a2b_3c4d5e6f7a8b.slice/cri-containerd-" +
                                      cid + ".scope\n");
    dir.write("proc/777/cgroup", "0::/kubepods.slice/kubepods-pod9f2e3d4c_5b6a_7980_1a2b_3c4d5e6f7a8b.slice/cri-containerd-" +
                                     std::string(64, 'd') + ".scope\n");
    // The node: load and the pods' processes from the start; the faults come once the exporter
    // watches XID events (below): an ECC XID on GPU 2, an application XID on GPU 1, GPU 5 falls off
    // the bus, GPU 4's power reading fails.
    const std::string events = dir.write("events",
                                         "util 0 97 60\nutil 1 95 58\nutil 3 40 10\n"
                                         "proc 0 4242 81604378624 train.py sm=90 mem=55\n"
                                         "proc 3 777 2147483648 serve sm=35 mem=8\n");
    // MPS sharing of nvidia.com/gpu (2 replicas per GPU), as the kgpu-mps-control-daemon DaemonSet
    // runs it: its status files under the MPS root feed kgpu_mps_*.
    const std::string mps_root = dir.path() + "/mps";
    const std::string mps_config = dir.write("config.yaml", "version: v1\nsharing:\n  mps:\n    resources:\n"
                                                            "    - name: nvidia.com/gpu\n      replicas: 2\n");
    ChildProcess mps({KGPU_BINARY, "mps-control-daemon", "--config-file", mps_config, "--nvml-library",
                      KGPU_SIM_LIBRARY, "--mps-root", mps_root, "--mps-control-binary", KGPU_MPS_CONTROL_SIM},
                     {{"KGPU_SIM_NODE", kSource + "/sim/nodes/dgx-h100.yaml"}, {"KGPU_SIM_EVENTS", events}});
    ASSERT_TRUE(eventually([&] { return ::access((mps_root + "/.ready").c_str(), F_OK) == 0 || !mps.running(); }, std::chrono::seconds(60), std::chrono::milliseconds(250)) &&
                mps.running())
        << mps.err();

    ChildProcess exporter({KGPU_BINARY, "exporter", "--address", "127.0.0.1:0", "--collect-interval", "200",
                           "--nvml-library", KGPU_SIM_LIBRARY, "--kubernetes", "--pod-resources-kubelet-socket",
                           dir.path() + "/pod-resources.sock", "--container-runtime-endpoint",
                           "unix://" + dir.path() + "/cri.sock", "--proc-root", dir.path() + "/proc", "--mps-root",
                           mps_root, "--ready-file", dir.path() + "/exporter-ready"},
                          {{"KGPU_SIM_NODE", kSource + "/sim/nodes/dgx-h100.yaml"}, {"KGPU_SIM_EVENTS", events},
                           {"NODE_NAME", "sim-node"}});
    const int port = wait_for_ready_port(exporter, dir.path() + "/exporter-ready");
    ASSERT_GT(port, 0) << exporter.err();

    // Prometheus as the ServiceMonitor configures it: job kgpu-exporter, the node's name as `node`,
    // the exporter's pod labels kept (honor_labels), the alert rules evaluated every second.
    const std::string config = dir.write("prometheus.yml",
                                         "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                                         "rule_files:\n  - " + kRules + "\n"
                                         "scrape_configs:\n  - job_name: kgpu-exporter\n    honor_labels: true\n"
                                         "    static_configs:\n      - targets: ['127.0.0.1:" + std::to_string(port) + "']\n"
                                         "        labels:\n          node: sim-node\n");
    ChildProcess prom({"/usr/bin/prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.path() + "/tsdb",
                       "--web.listen-address=127.0.0.1:0", "--log.level=warn"});
    const int prom_port = wait_for_listening_port(prom);
    ASSERT_GT(prom_port, 0) << "Prometheus never listened; its log:\n" << prom.err();
    Prometheus p(prom_port);
    // The faults once Prometheus has the XID counters at 0 (a counter first scraped at 1 has no increase).
    ASSERT_TRUE(eventually([&] {
        auto r = p.query("kgpu_gpu_xid_events_total{gpu=\"2\"} == 0");
        return r.is_array() && !r.empty();
    }, std::chrono::seconds(120), std::chrono::milliseconds(250))) << "Prometheus never scraped the exporter; its log:\n" << prom.err();
    std::ofstream(events, std::ios::app) << "xid 2 48\nxid 1 13\nlost 5\nfail 4 nvmlDeviceGetPowerUsage UNKNOWN\n";
    // Enough scrapes for the rate windows, and every fault visible. `unmet`: the queries that
    // still had no result at the last look (for the failure message).
    std::string unmet;
    ASSERT_TRUE(eventually([&] {
        unmet.clear();
        for (const char* query : {"kgpu_gpu_health{state=\"lost\",gpu=\"5\"} == 1",
                                  "kgpu_process_fb_used_bytes{pod=\"trainer-0\"}",
                                  "count_over_time(kgpu_collections_total[1m]) >= 4",
                                  "increase(kgpu_nvml_errors_total[1m]) > 0", "kgpu_mps_daemon_up == 1"}) {
            auto r = p.query(query);
            if (!r.is_array() || r.empty()) unmet += std::string(unmet.empty() ? "" : ", ") + query;
        }
        return unmet.empty();
    }, std::chrono::seconds(120), std::chrono::milliseconds(250)))
        << "Prometheus never had the faults; without a result: " << unmet << "\nits log:\n" << prom.err()
        << "\nexporter:\n" << exporter.err() << "\nmps-control-daemon:\n" << mps.err();

    // The dashboard's variables, resolved as Grafana does (label_values), in order.
    const auto dash = nlohmann::json::parse(slurp(kDashboard));
    std::map<std::string, std::string> vars = {{"__rate_interval", "1m"}, {"__interval", "15s"}, {"__range", "5m"}};
    for (const auto& v : dash["templating"]["list"]) {
        const std::string name = v["name"];
        if (v["type"] == "textbox" || v["type"] == "constant") {
            vars[name] = v["query"];
        } else if (v["type"] == "query") {
            const std::string q = v["query"].is_object() ? v["query"]["query"].get<std::string>() : v["query"].get<std::string>();
            std::smatch m;
            ASSERT_TRUE(std::regex_match(q, m, std::regex(R"(label_values\((.+),\s*(\w+)\))"))) << name << ": " << q;
            auto series = p.get("/api/v1/series?match[]=" + url_encode(substitute(m[1], vars)));
            std::set<std::string> values;
            for (const auto& s : series["data"]) values.insert(s.value(std::string(m[2]), ""));
            values.erase("");
            ASSERT_FALSE(values.empty()) << "variable " << name << " (" << q << ") has no values";
            vars[name] = all_values_regex(values);
        }
    }
    EXPECT_EQ(vars["node"], "(sim-node)");
    EXPECT_EQ(vars["gpu"], "(0|1|2|3|4|5|6|7)");

    int checked = 0;
    for (const auto& panel : all_panels(dash)) {
        if (panel["type"] == "row") continue;
        for (const auto& t : panel["targets"]) {
            const std::string expr = substitute(t["expr"], vars);
            auto result = p.query(expr);
            EXPECT_TRUE(result.is_array() && !result.empty())
                << "panel \"" << panel["title"].get<std::string>() << "\": no data for " << expr << "\n" << result;
            ++checked;
        }
    }
    EXPECT_GE(checked, 20);

    // XIDs by class: 48 on GPU 2 and 79 (lost) on GPU 5 need a reset, 13 on GPU 1 is the application's.
    auto class_count = [&](const std::string& selector) {
        auto r = p.query("kgpu_gpu_xid_class_events_total{" + selector + "}");
        return r.is_array() && r.size() == 1 ? std::stod(r[0]["value"][1].get<std::string>()) : -1.0;
    };
    EXPECT_EQ(class_count("gpu=\"2\",xid_class=\"reset-required\""), 1.0);
    EXPECT_EQ(class_count("gpu=\"5\",xid_class=\"reset-required\""), 1.0);
    EXPECT_EQ(class_count("gpu=\"1\",xid_class=\"application\""), 1.0);
    EXPECT_EQ(class_count("gpu=\"1\",xid_class=\"reset-required\""), 0.0);
    EXPECT_EQ(class_count("gpu=\"2\",xid_class=\"recoverable\""), 0.0);

    // The alert rules against the same data: what the faults call for is pending or firing.
    std::multimap<std::string, nlohmann::json> alerts;
    const std::set<std::string> expected = {"KgpuGpuLost", "KgpuXidResetRequired", "KgpuPodNearGpuMemory",
                                            "KgpuGpuUnhealthy", "KgpuNvmlErrors"};
    ASSERT_TRUE(eventually([&] {
        alerts.clear();
        const auto answer = p.get("/api/v1/alerts");
        for (const auto& a : answer["data"]["alerts"]) alerts.emplace(a["labels"]["alertname"].get<std::string>(), a["labels"]);
        return std::all_of(expected.begin(), expected.end(), [&](const std::string& n) { return alerts.contains(n); });
    }, std::chrono::seconds(60), std::chrono::milliseconds(250))) << p.get("/api/v1/alerts").dump(1) << "\nXID counters: " << p.query("kgpu_gpu_xid_events_total").dump()
            << "\nlast XIDs: " << p.query("kgpu_gpu_last_xid").dump() << "\nrules: " << p.get("/api/v1/rules").dump();
    auto labels_of = [&](const std::string& name) {
        std::vector<nlohmann::json> out;
        for (auto [it, end] = alerts.equal_range(name); it != end; ++it) out.push_back(it->second);
        return out;
    };
    ASSERT_EQ(labels_of("KgpuGpuLost").size(), 1u);
    EXPECT_EQ(labels_of("KgpuGpuLost")[0]["gpu"], "5");
    EXPECT_EQ(labels_of("KgpuGpuLost")[0]["node"], "sim-node");
    std::set<std::string> reset_gpus;
    for (const auto& l : labels_of("KgpuXidResetRequired")) reset_gpus.insert(l["gpu"].get<std::string>());
    EXPECT_EQ(reset_gpus, (std::set<std::string>{"2", "5"})) << "XID 48 on GPU 2, XID 79 on GPU 5";
    ASSERT_EQ(labels_of("KgpuPodNearGpuMemory").size(), 1u);
    EXPECT_EQ(labels_of("KgpuPodNearGpuMemory")[0]["pod"], "trainer-0");
    EXPECT_EQ(labels_of("KgpuPodNearGpuMemory")[0]["gpu"], "0");
    ASSERT_EQ(labels_of("KgpuGpuUnhealthy").size(), 1u);
    EXPECT_EQ(labels_of("KgpuGpuUnhealthy")[0]["gpu"], "4") << "its power reading fails";
    ASSERT_EQ(labels_of("KgpuNvmlErrors").size(), 1u);
    EXPECT_EQ(labels_of("KgpuNvmlErrors")[0]["node"], "sim-node");
    // No GPU is misclassified (a missed scrape or a slow PodResources answer on a loaded machine may
    // raise the exporter's own alerts as pending: those are not checked here); the MPS daemon runs.
    for (const std::string name : {"KgpuXidRecoverable", "KgpuMpsDaemonDown", "KgpuExporterPodsOverLimit"})
        EXPECT_FALSE(alerts.contains(name)) << name << " raised on a node without that fault: " << labels_of(name)[0]
                                            << "\nmps-control-daemon:\n" << mps.err();

    prom.signal(SIGTERM);
    prom.wait(30000);
    mps.signal(SIGTERM);
    mps.wait(30000);
}

}  // namespace
}  // namespace kgpu::test
