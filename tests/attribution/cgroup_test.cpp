// parse_cgroup: /proc/<pid>/cgroup texts for both cgroup versions, both drivers and the three
// runtimes, and the texts that must give nothing.
#include <gtest/gtest.h>

#include "exporter/attribution.h"

using kgpu::exporter::CgroupRef;
using kgpu::exporter::parse_cgroup;

namespace {

const std::string kId = "0b1c4e2b7f3d1a9e8c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807f6e5d4c3b2a1";
const std::string kUid = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9";
const std::string kUidSystemd = "1f2e3d4c_5b6a_4978_8695_a4b3c2d1e0f9";
const CgroupRef kRef{kUid, kId};

TEST(Cgroup, V2CgroupfsBurstableAndBestEffort) {
    EXPECT_EQ(parse_cgroup("0::/kubepods/burstable/pod" + kUid + "/" + kId + "\n"), kRef);
    EXPECT_EQ(parse_cgroup("0::/kubepods/besteffort/pod" + kUid + "/" + kId + "\n"), kRef);
}

TEST(Cgroup, V2CgroupfsGuaranteedHasNoQosSegment) {
    EXPECT_EQ(parse_cgroup("0::/kubepods/pod" + kUid + "/" + kId + "\n"), kRef);
}

TEST(Cgroup, V2SystemdContainerd) {
    EXPECT_EQ(parse_cgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSystemd +
                           ".slice/cri-containerd-" + kId + ".scope\n"),
              kRef);
    EXPECT_EQ(parse_cgroup("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kUidSystemd +
                           ".slice/cri-containerd-" + kId + ".scope\n"),
              kRef);
    // Guaranteed: the pod slice sits right under kubepods.slice.
    EXPECT_EQ(parse_cgroup("0::/kubepods.slice/kubepods-pod" + kUidSystemd + ".slice/cri-containerd-" + kId + ".scope\n"),
              kRef);
}

TEST(Cgroup, V2SystemdCrioAndDocker) {
    const std::string pod = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSystemd + ".slice/";
    EXPECT_EQ(parse_cgroup(pod + "crio-" + kId + ".scope"), kRef);
    EXPECT_EQ(parse_cgroup(pod + "docker-" + kId + ".scope"), kRef);
    // CRI-O's monitor process is not the container.
    EXPECT_EQ(parse_cgroup(pod + "crio-conmon-" + kId + ".scope"), std::nullopt);
}

TEST(Cgroup, V1CgroupfsAnyHierarchyWillDo) {
    const std::string path = "/kubepods/burstable/pod" + kUid + "/" + kId;
    const std::string text = "12:hugetlb:" + path + "\n11:memory:" + path + "\n10:cpu,cpuacct:" + path +
                             "\n1:name=systemd:" + path + "\n0::/\n";
    EXPECT_EQ(parse_cgroup(text), kRef);
    // Only one hierarchy names the pod (others at the root): still found.
    EXPECT_EQ(parse_cgroup("12:hugetlb:/\n11:devices:/\n4:memory:" + path + "\n0::/\n"), kRef);
}

TEST(Cgroup, V1SystemdAndCrioOnCgroupfs) {
    const std::string slice = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kUidSystemd + ".slice";
    EXPECT_EQ(parse_cgroup("11:memory:" + slice + "/cri-containerd-" + kId + ".scope\n1:name=systemd:" + slice +
                           "/cri-containerd-" + kId + ".scope\n"),
              kRef);
    EXPECT_EQ(parse_cgroup("5:pids:/kubepods/besteffort/pod" + kUid + "/crio-" + kId + "\n"), kRef);
}

TEST(Cgroup, NestedAndNamespaceRelativePaths) {
    // kind / nested kubelets: kubepods below another hierarchy, with a prefixed slice name.
    EXPECT_EQ(parse_cgroup("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                           "kubelet-kubepods-besteffort-pod" + kUidSystemd + ".slice/cri-containerd-" + kId + ".scope\n"),
              kRef);
    EXPECT_EQ(parse_cgroup("0::/docker/abc/kubepods/burstable/pod" + kUid + "/" + kId + "\n"), kRef);
    // Read from inside another pod's cgroup namespace: the path is relative to it.
    EXPECT_EQ(parse_cgroup("0::/../../pod" + kUid + "/" + kId + "\n"), kRef);
    EXPECT_EQ(parse_cgroup("0::/../../../besteffort/pod" + kUid + "/" + kId + "\n"), kRef);
    EXPECT_EQ(parse_cgroup("0::/../../kubepods-burstable-pod" + kUidSystemd + ".slice/cri-containerd-" + kId + ".scope\n"),
              kRef);
    // A process that made its own sub-cgroup inside the container.
    EXPECT_EQ(parse_cgroup("0::/kubepods/burstable/pod" + kUid + "/" + kId + "/worker\n"), kRef);
}

TEST(Cgroup, StaticPodUidIsAHash) {
    const std::string hash = "6f7e9c2ae4b54e3d1cc3b7b1a4e0ef5b";
    EXPECT_EQ(parse_cgroup("0::/kubepods/burstable/pod" + hash + "/" + kId), (CgroupRef{hash, kId}));
    EXPECT_EQ(parse_cgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + hash +
                           ".slice/cri-containerd-" + kId + ".scope"),
              (CgroupRef{hash, kId}));
}

TEST(Cgroup, CrlfAndNoTrailingNewline) {
    EXPECT_EQ(parse_cgroup("0::/kubepods/pod" + kUid + "/" + kId), kRef);
    EXPECT_EQ(parse_cgroup("0::/kubepods/pod" + kUid + "/" + kId + "\r\n"), kRef);
}

TEST(Cgroup, ProcessesOutsidePods) {
    EXPECT_EQ(parse_cgroup(""), std::nullopt);
    EXPECT_EQ(parse_cgroup("\n\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup("0::/\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup("0::/init.scope\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup("0::/system.slice/containerd.service\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup("0::/system.slice/docker-" + kId + ".scope\n"), std::nullopt);  // docker run, no pod
    EXPECT_EQ(parse_cgroup("0::/docker/" + kId + "\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup("12:memory:/user.slice\n1:name=systemd:/user.slice/user-0.slice/session-1.scope\n"),
              std::nullopt);
    // A "pod<uid>" component that is not under kubepods.
    EXPECT_EQ(parse_cgroup("0::/machine/pod" + kUid + "/" + kId + "\n"), std::nullopt);
}

TEST(Cgroup, PodCgroupsWithoutAContainer) {
    // The pod's own cgroup (no container below it) and the kubepods tree itself.
    EXPECT_EQ(parse_cgroup("0::/kubepods/burstable/pod" + kUid + "\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup("0::/kubepods/burstable/pod" + kUid + "/\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSystemd + ".slice\n"),
              std::nullopt);
    EXPECT_EQ(parse_cgroup("0::/kubepods/burstable\n"), std::nullopt);
    EXPECT_EQ(parse_cgroup("0::/kubepods.slice\n"), std::nullopt);
}

TEST(Cgroup, MalformedLines) {
    const std::string good = "/kubepods/burstable/pod" + kUid + "/" + kId;
    for (const std::string& text : {
             good,                                   // no hierarchy fields
             ":" + good,                             // one colon
             "::" + good,                            // empty hierarchy ID
             "x::" + good,                           // hierarchy ID not a number
             "0:" + good,                            // one colon after the ID
             "0::kubepods/pod" + kUid + "/" + kId,  // a path not starting with /
             "0::/kubepods/burstable/pod" + kUid + "/" + kId.substr(1),               // 63 hex
             "0::/kubepods/burstable/pod" + kUid + "/" + kId + "0",                   // 65 hex
             "0::/kubepods/burstable/pod" + kUid + "/" + std::string(63, 'a') + "g",  // not hex
             "0::/kubepods/burstable/pod" + kUid + "/" + std::string(64, 'A'),        // upper case
             "0::/kubepods/burstable/pod" + kUid.substr(1) + "/" + kId,               // short UID
             "0::/kubepods/burstable/pod" + kUidSystemd + "/" + kId,                  // _ in cgroupfs form
             "0::/kubepods/burstable/pod-" + kUid + "/" + kId,
             "0::/kubepods/burstable/pod/" + kId,
             "0::/kubepods/burstable/" + kId,                                         // no pod component
             "0::/kubepods.slice/kubepods-burstable-pod" + kUid + ".slice/cri-containerd-" + kId + ".scope",  // - in slice
             "0::/kubepods.slice/kubepods-burstable-pod" + kUidSystemd + ".slice/cri-containerd-" + kId.substr(2) + ".scope",
             "0::/kubepods.slice/kubepods-burstable-pod" + kUidSystemd + ".slice/containerd-" + kId + ".scope",
             "0::/kubepods.slice/kubepods-burstable-pod" + kUidSystemd + ".slice/cri-containerd-.scope",
             "0::/system.slice/other-pod" + kUidSystemd + ".slice/cri-containerd-" + kId + ".scope",  // no kubepods
             std::string("0::/kubepods/pod\0", 17) + kUid + "/" + kId,
         })
        EXPECT_EQ(parse_cgroup(text), std::nullopt) << text;
    // A malformed line before a good one does not hide it.
    EXPECT_EQ(parse_cgroup("garbage\n0:\n:::\n3:cpu:" + good + "\n"), kRef);
}

TEST(Cgroup, BinaryJunkDoesNotCrash) {
    std::string junk;
    for (int i = 0; i < 4096; ++i) junk.push_back(static_cast<char>((i * 131 + 7) % 256));
    EXPECT_EQ(parse_cgroup(junk), std::nullopt);
    EXPECT_EQ(parse_cgroup(std::string(100000, ':')), std::nullopt);
    EXPECT_EQ(parse_cgroup(std::string(100000, '/')), std::nullopt);
}

}  // namespace
