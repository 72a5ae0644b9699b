// Every NVML entry point kgpu calls, listed once. The list generates the function table
// (EntryPoints), the dlsym loop and the names used in messages (library.cpp).
//
//   X(field, need, symbol, fallback)
//     field     member of EntryPoints; its type is the pointer type of `symbol`'s declaration
//               in nvml_abi.h, so a wrong signature does not compile.
//     need      required: loading fails (listing every missing one) without it;
//               optional: a missing one is replaced by a function returning NOT_SUPPORTED.
//     symbol    the preferred (newest) name.
//     fallback  an older name with the *same* signature and struct layout, tried when `symbol`
//               is absent, or nullptr. Older names with older structs get entries of their own
//               (PciInfoV2, EventSetWaitV1, ...) and are converted in device.cpp.
#pragma once

#define KGPU_NVML_ENTRY_POINTS(X)                                                                   \
    X(Init, required, nvmlInit_v2, "nvmlInit")                                                     \
    X(Shutdown, required, nvmlShutdown, nullptr)                                                   \
    X(ErrorString, required, nvmlErrorString, nullptr)                                             \
    X(SystemGetDriverVersion, required, nvmlSystemGetDriverVersion, nullptr)                       \
    X(SystemGetNVMLVersion, optional, nvmlSystemGetNVMLVersion, nullptr)                           \
    X(SystemGetCudaDriverVersion, optional, nvmlSystemGetCudaDriverVersion_v2,                     \
      "nvmlSystemGetCudaDriverVersion")                                                            \
    X(SystemGetProcessName, optional, nvmlSystemGetProcessName, nullptr)                           \
    X(DeviceGetCount, required, nvmlDeviceGetCount_v2, "nvmlDeviceGetCount")                       \
    X(DeviceGetHandleByIndex, required, nvmlDeviceGetHandleByIndex_v2, "nvmlDeviceGetHandleByIndex") \
    X(DeviceGetHandleByUUID, optional, nvmlDeviceGetHandleByUUID, nullptr)                         \
    X(DeviceGetHandleByPciBusId, optional, nvmlDeviceGetHandleByPciBusId_v2,                       \
      "nvmlDeviceGetHandleByPciBusId")                                                             \
    X(DeviceGetIndex, optional, nvmlDeviceGetIndex, nullptr)                                       \
    X(DeviceGetUUID, required, nvmlDeviceGetUUID, nullptr)                                         \
    X(DeviceGetName, optional, nvmlDeviceGetName, nullptr)                                         \
    X(DeviceGetSerial, optional, nvmlDeviceGetSerial, nullptr)                                     \
    X(DeviceGetMinorNumber, optional, nvmlDeviceGetMinorNumber, nullptr)                           \
    X(DeviceGetPciInfo, optional, nvmlDeviceGetPciInfo_v3, nullptr)                                \
    X(DeviceGetPciInfoV2, optional, nvmlDeviceGetPciInfo_v2, "nvmlDeviceGetPciInfo")               \
    X(DeviceGetBrand, optional, nvmlDeviceGetBrand, nullptr)                                       \
    X(DeviceGetArchitecture, optional, nvmlDeviceGetArchitecture, nullptr)                         \
    X(DeviceGetCudaComputeCapability, optional, nvmlDeviceGetCudaComputeCapability, nullptr)       \
    X(DeviceGetNumaNodeId, optional, nvmlDeviceGetNumaNodeId, nullptr)                             \
    X(DeviceGetBoardId, optional, nvmlDeviceGetBoardId, nullptr)                                   \
    X(DeviceGetVbiosVersion, optional, nvmlDeviceGetVbiosVersion, nullptr)                         \
    X(DeviceGetInforomVersion, optional, nvmlDeviceGetInforomVersion, nullptr)                     \
    X(DeviceGetInforomImageVersion, optional, nvmlDeviceGetInforomImageVersion, nullptr)           \
    X(DeviceGetMemoryInfo, optional, nvmlDeviceGetMemoryInfo, nullptr)                             \
    X(DeviceGetMemoryInfoV2, optional, nvmlDeviceGetMemoryInfo_v2, nullptr)                        \
    X(DeviceGetPersistenceMode, optional, nvmlDeviceGetPersistenceMode, nullptr)                   \
    X(DeviceGetDisplayActive, optional, nvmlDeviceGetDisplayActive, nullptr)                       \
    X(DeviceGetEccMode, optional, nvmlDeviceGetEccMode, nullptr)                                   \
    X(DeviceGetComputeMode, optional, nvmlDeviceGetComputeMode, nullptr)                           \
    X(DeviceSetComputeMode, optional, nvmlDeviceSetComputeMode, nullptr)                           \
    X(DeviceGetPerformanceState, optional, nvmlDeviceGetPerformanceState, nullptr)                 \
    X(DeviceGetCurrentClocksEventReasons, optional, nvmlDeviceGetCurrentClocksEventReasons,        \
      "nvmlDeviceGetCurrentClocksThrottleReasons")                                                 \
    X(DeviceGetPowerManagementLimit, optional, nvmlDeviceGetPowerManagementLimit, nullptr)         \
    X(DeviceGetEnforcedPowerLimit, optional, nvmlDeviceGetEnforcedPowerLimit, nullptr)             \
    X(DeviceGetUtilizationRates, optional, nvmlDeviceGetUtilizationRates, nullptr)                 \
    X(DeviceGetTemperature, optional, nvmlDeviceGetTemperature, nullptr)                           \
    X(DeviceGetPowerUsage, optional, nvmlDeviceGetPowerUsage, nullptr)                             \
    X(DeviceGetTotalEnergyConsumption, optional, nvmlDeviceGetTotalEnergyConsumption, nullptr)     \
    X(DeviceGetClockInfo, optional, nvmlDeviceGetClockInfo, nullptr)                               \
    X(DeviceGetMaxClockInfo, optional, nvmlDeviceGetMaxClockInfo, nullptr)                         \
    X(DeviceGetPcieReplayCounter, optional, nvmlDeviceGetPcieReplayCounter, nullptr)               \
    X(DeviceGetPcieThroughput, optional, nvmlDeviceGetPcieThroughput, nullptr)                     \
    X(DeviceGetEncoderUtilization, optional, nvmlDeviceGetEncoderUtilization, nullptr)             \
    X(DeviceGetDecoderUtilization, optional, nvmlDeviceGetDecoderUtilization, nullptr)             \
    X(DeviceGetTotalEccErrors, optional, nvmlDeviceGetTotalEccErrors, nullptr)                     \
    X(DeviceGetRemappedRows, optional, nvmlDeviceGetRemappedRows, nullptr)                         \
    X(DeviceGetRetiredPagesPendingStatus, optional, nvmlDeviceGetRetiredPagesPendingStatus, nullptr) \
    X(DeviceGetFieldValues, optional, nvmlDeviceGetFieldValues, nullptr)                           \
    X(DeviceGetComputeRunningProcesses, optional, nvmlDeviceGetComputeRunningProcesses_v3,         \
      "nvmlDeviceGetComputeRunningProcesses_v2")                                                   \
    X(DeviceGetTopologyCommonAncestor, optional, nvmlDeviceGetTopologyCommonAncestor, nullptr)     \
    X(DeviceGetNvLinkState, optional, nvmlDeviceGetNvLinkState, nullptr)                           \
    X(DeviceGetNvLinkRemotePciInfo, optional, nvmlDeviceGetNvLinkRemotePciInfo_v2, nullptr)        \
    X(DeviceGetNvLinkRemoteDeviceType, optional, nvmlDeviceGetNvLinkRemoteDeviceType, nullptr)     \
    X(DeviceGetP2PStatus, optional, nvmlDeviceGetP2PStatus, nullptr)                               \
    X(DeviceGetMigMode, optional, nvmlDeviceGetMigMode, nullptr)                                   \
    X(DeviceGetMaxMigDeviceCount, optional, nvmlDeviceGetMaxMigDeviceCount, nullptr)               \
    X(DeviceGetMigDeviceHandleByIndex, optional, nvmlDeviceGetMigDeviceHandleByIndex, nullptr)     \
    X(DeviceIsMigDeviceHandle, optional, nvmlDeviceIsMigDeviceHandle, nullptr)                     \
    X(DeviceGetDeviceHandleFromMigDeviceHandle, optional, nvmlDeviceGetDeviceHandleFromMigDeviceHandle, \
      nullptr)                                                                                     \
    X(DeviceGetGpuInstanceId, optional, nvmlDeviceGetGpuInstanceId, nullptr)                       \
    X(DeviceGetComputeInstanceId, optional, nvmlDeviceGetComputeInstanceId, nullptr)               \
    X(DeviceGetAttributes, optional, nvmlDeviceGetAttributes_v2, nullptr)                          \
    X(DeviceGetGpuInstanceProfileInfo, optional, nvmlDeviceGetGpuInstanceProfileInfo, nullptr)     \
    X(DeviceGetGpuInstanceById, optional, nvmlDeviceGetGpuInstanceById, nullptr)                   \
    X(GpuInstanceGetInfo, optional, nvmlGpuInstanceGetInfo, nullptr)                               \
    X(DeviceSetMigMode, optional, nvmlDeviceSetMigMode, nullptr)                                   \
    X(DeviceGetGpuInstancePossiblePlacements, optional, nvmlDeviceGetGpuInstancePossiblePlacements_v2, \
      nullptr)                                                                                     \
    X(DeviceCreateGpuInstanceWithPlacement, optional, nvmlDeviceCreateGpuInstanceWithPlacement, nullptr) \
    X(DeviceGetGpuInstances, optional, nvmlDeviceGetGpuInstances, nullptr)                         \
    X(GpuInstanceDestroy, optional, nvmlGpuInstanceDestroy, nullptr)                               \
    X(GpuInstanceGetComputeInstanceProfileInfo, optional, nvmlGpuInstanceGetComputeInstanceProfileInfo, \
      nullptr)                                                                                     \
    X(GpuInstanceCreateComputeInstance, optional, nvmlGpuInstanceCreateComputeInstance, nullptr)   \
    X(GpuInstanceGetComputeInstances, optional, nvmlGpuInstanceGetComputeInstances, nullptr)       \
    X(ComputeInstanceDestroy, optional, nvmlComputeInstanceDestroy, nullptr)                       \
    X(EventSetCreate, optional, nvmlEventSetCreate, nullptr)                                       \
    X(DeviceGetSupportedEventTypes, optional, nvmlDeviceGetSupportedEventTypes, nullptr)           \
    X(DeviceRegisterEvents, optional, nvmlDeviceRegisterEvents, nullptr)                           \
    X(EventSetWait, optional, nvmlEventSetWait_v2, nullptr)                                        \
    X(EventSetWaitV1, optional, nvmlEventSetWait, nullptr)                                         \
    X(EventSetFree, optional, nvmlEventSetFree, nullptr)                                           \
    X(DeviceGetProcessUtilization, optional, nvmlDeviceGetProcessUtilization, nullptr)             \
    X(GpmQueryDeviceSupport, optional, nvmlGpmQueryDeviceSupport, nullptr)                         \
    X(GpmSampleAlloc, optional, nvmlGpmSampleAlloc, nullptr)                                       \
    X(GpmSampleFree, optional, nvmlGpmSampleFree, nullptr)                                         \
    X(GpmSampleGet, optional, nvmlGpmSampleGet, nullptr)                                           \
    X(GpmMigSampleGet, optional, nvmlGpmMigSampleGet, nullptr)                                     \
    X(GpmMetricsGet, optional, nvmlGpmMetricsGet, nullptr)
