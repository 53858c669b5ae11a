package nriplugin

import (
	"sort"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	katamem "kata-mem/client"
)

// What a pod's NRI events become: kata-mem shim requests. Pure: the plugin maps,
// kata-mem decides.

// KataAnnotations is the prefix of Kata's per-pod hypervisor annotations,
// honoured under the configuration's enable_annotations: kata-mem reads a pod's
// configuration through them as Kata does, so every request about the pod
// carries them (and only them: kata-mem refuses others beside new resources).
const KataAnnotations = "io.katacontainers.config.hypervisor."

// The sandbox-sizing annotations containerd writes into the sandbox's OCI spec
// from LinuxPodSandboxConfig.Resources at RunPodSandbox (containerd
// internal/cri/server/podsandbox/sandbox_run_linux.go; kubernetes PR #104886),
// which is what Kata sizes a static VM from at boot. NRI hands the plugin the
// same values as PodSandbox.linux.pod_resources (containerd
// internal/cri/nri/nri_api_linux.go GetPodLinuxResources).
const (
	annSandboxMemory    = "io.kubernetes.cri.sandbox-memory"
	annSandboxCPUQuota  = "io.kubernetes.cri.sandbox-cpu-quota"
	annSandboxCPUPeriod = "io.kubernetes.cri.sandbox-cpu-period"
)

// kataAnnotations are the pod's annotations Kata reads, nil for none.
func kataAnnotations(pod *api.PodSandbox) map[string]string {
	var found map[string]string
	for key, value := range pod.GetAnnotations() {
		if strings.HasPrefix(key, KataAnnotations) {
			if found == nil {
				found = map[string]string{}
			}
			found[key] = value
		}
	}
	return found
}

// bootAnnotations are what Kata sized the pod's VM from at boot: the pod's Kata
// annotations and the sandbox-sizing annotations made from pod_resources, as
// containerd writes them (positive values only: containerd skips the others).
func bootAnnotations(pod *api.PodSandbox) map[string]string {
	found := kataAnnotations(pod)
	set := func(key string, value int64) {
		if value <= 0 {
			return
		}
		if found == nil {
			found = map[string]string{}
		}
		found[key] = strconv.FormatInt(value, 10)
	}
	res := pod.GetLinux().GetPodResources()
	set(annSandboxMemory, res.GetMemory().GetLimit().GetValue())
	set(annSandboxCPUQuota, res.GetCpu().GetQuota().GetValue())
	set(annSandboxCPUPeriod, int64(res.GetCpu().GetPeriod().GetValue()))
	return found
}

// resources are NRI LinuxResources as kata-mem reads CRI LinuxContainerResources;
// an unset value is left out (nil), which kata-mem reads as none.
func resources(res *api.LinuxResources) *katamem.Resources {
	out := &katamem.Resources{}
	if limit := res.GetMemory().GetLimit(); limit != nil {
		out.MemoryLimitBytes = katamem.Int64(limit.GetValue())
	}
	if quota := res.GetCpu().GetQuota(); quota != nil {
		out.CPUQuota = katamem.Int64(quota.GetValue())
	}
	if period := res.GetCpu().GetPeriod(); period != nil {
		out.CPUPeriod = katamem.Int64(int64(period.GetValue()))
	}
	return out
}

// registration is the plan-only request that registers a pod: how Kata sized its
// VM at boot, and whether Kata resizes it afterwards (the plan's config says).
func registration(pod *api.PodSandbox, config string) *katamem.ShimRequest {
	return &katamem.ShimRequest{
		SandboxID:   pod.GetId(),
		Event:       katamem.EventCreate,
		Config:      katamem.String(config),
		Annotations: bootAnnotations(pod),
	}
}

// sandboxUpdate is the request for UpdatePodSandbox: the pod's new resources and
// overhead, applied to its VM.
func sandboxUpdate(p *pod, allowShrink bool, res, overhead *api.LinuxResources) *katamem.ShimRequest {
	req := p.apply(katamem.EventUpdateSandbox, allowShrink)
	req.SandboxResources = resources(res)
	if overhead != nil {
		req.Overhead = resources(overhead)
	}
	return req
}

// containersUpdate is the request for a container event of a VM kata-mem owns
// after boot: the pod's containers as they are now.
func containersUpdate(p *pod, allowShrink bool) *katamem.ShimRequest {
	req := p.apply(katamem.EventUpdate, allowShrink)
	ids := make([]string, 0, len(p.containers))
	for id := range p.containers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	req.Containers = make([]katamem.Container, 0, len(ids))
	for _, id := range ids {
		req.Containers = append(req.Containers, p.containers[id].request(id))
	}
	return req
}

// forget is the request for RemovePodSandbox.
func forget(id, config string) *katamem.ShimRequest {
	return &katamem.ShimRequest{SandboxID: id, Event: katamem.EventDelete, Config: katamem.String(config)}
}

// limits are what kata-mem reads of a container's resources.
type limits struct {
	memory    int64
	cpuQuota  int64
	cpuPeriod int64
}

func containerLimits(res *api.LinuxResources) limits {
	return limits{
		memory:    res.GetMemory().GetLimit().GetValue(),
		cpuQuota:  res.GetCpu().GetQuota().GetValue(),
		cpuPeriod: int64(res.GetCpu().GetPeriod().GetValue()),
	}
}

func (l limits) request(id string) katamem.Container {
	c := katamem.Container{ID: id}
	if l.memory > 0 {
		c.MemoryLimitBytes = katamem.Int64(l.memory)
	}
	if l.cpuQuota > 0 && l.cpuPeriod > 0 {
		c.CPUQuota, c.CPUPeriod = katamem.Int64(l.cpuQuota), katamem.Int64(l.cpuPeriod)
	}
	return c
}
