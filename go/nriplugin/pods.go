package nriplugin

import (
	"github.com/containerd/nri/pkg/api"

	katamem "kata-mem/client"
)

// pod is what the plugin keeps of one pod of a Kata handler: enough to build a
// request about it without asking the runtime. kata-mem keeps everything else.
type pod struct {
	id      string
	config  string // the handler's Kata configuration
	kata    map[string]string
	runtime string // the Kata runtime (kata-mem's plan says which), "" until registered
	// static: Kata sizes the VM at boot and never resizes it (its
	// static_sandbox_resource_mgmt), so container events are kata-mem's too.
	// Without it Kata's own hotplug follows the containers, and the plugin
	// carries only the pod-level resize, which Kata never sees.
	static     bool
	socket     string
	containers map[string]limits
}

func newPod(p *api.PodSandbox, config string) *pod {
	return &pod{id: p.GetId(), config: config, kata: kataAnnotations(p), containers: map[string]limits{}}
}

func (p *pod) registered() bool { return p.runtime != "" }

// apply is a request that resizes the pod's VM.
func (p *pod) apply(event katamem.Event, allowShrink bool) *katamem.ShimRequest {
	return &katamem.ShimRequest{
		SandboxID:   p.id,
		Event:       event,
		Config:      katamem.String(p.config),
		Backend:     &katamem.Backend{Type: "qmp", Socket: p.socket},
		Apply:       true,
		AllowShrink: allowShrink,
		Annotations: p.kata,
	}
}

// copy is the pod as it is now, for a request built while the plugin goes on.
func (p *pod) copy() *pod {
	next := *p
	next.containers = make(map[string]limits, len(p.containers)+1)
	for k, v := range p.containers {
		next.containers[k] = v
	}
	return &next
}
