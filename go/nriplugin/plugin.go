// Package nriplugin is kata-mem-nri: the NRI plugin through which a container
// runtime's pod resizes reach kata-mem serve.
//
// Kubernetes 1.36 resizes pods in place through CRI UpdatePodSandboxResources
// (sent before the kubelet writes the pod cgroup; an error there blocks the
// resize, kubernetes PR #137555) and UpdateContainerResources. containerd 2.3+
// and CRI-O hand both to NRI plugins and never to the Kata shim, and Kata 4
// (runtime-rs, static_sandbox_resource_mgmt) sizes a VM once at boot. So this
// plugin is how a resize reaches a Kata VM: each event of a pod of a configured
// Kata runtime handler becomes one kata-mem request, and kata-mem's answer
// becomes the plugin's. The plugin decides nothing about sizes or safety.
//
// One small handler per event, as the NRI sample plugins have it:
//
//   - RunPodSandbox, Synchronize: register the pod (a plan-only request: how Kata
//     booted it, and whether Kata resizes it afterwards).
//   - UpdatePodSandbox: the pod's new resources, applied to its VM; kata-mem's
//     CRI status is the answer (an error keeps the kubelet from writing the pod
//     cgroup, and it retries).
//   - PostCreateContainer, UpdateContainer, RemoveContainer: the pod's
//     containers; under Kata's static sizing an update resizes the VM too.
//   - RemovePodSandbox: kata-mem forgets the sandbox.
//
// Every call is answered within a share of NRI's request timeout (Config.Wait):
// a plugin that overruns it is dropped and the call goes on without it.
package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"

	katamem "kata-mem/client"
)

// Service is kata-mem serve as the plugin uses it (katamem.Client is one).
type Service interface {
	Shim(ctx context.Context, req *katamem.ShimRequest) (*katamem.ShimResponse, error)
}

// Plugin handles the NRI events of the pods of the configured Kata handlers.
type Plugin struct {
	cfg Config
	svc Service
	log *slog.Logger
	// Timeout is NRI's request timeout, as the runtime configured the stub
	// (stub.RequestTimeout); DefaultTimeout until it is set.
	Timeout func() time.Duration

	mu   sync.Mutex
	pods map[string]*pod
}

// DefaultTimeout is NRI's default request timeout (containerd/nri pkg/api
// timeouts.go DefaultPluginRequestTimeout).
const DefaultTimeout = 2 * time.Second

// New returns a plugin that asks svc.
func New(cfg Config, svc Service, log *slog.Logger) *Plugin {
	return &Plugin{
		cfg:     cfg,
		svc:     svc,
		log:     log,
		Timeout: func() time.Duration { return DefaultTimeout },
		pods:    map[string]*pod{},
	}
}

// Configure subscribes to the events the plugin has handlers for.
func (p *Plugin) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	p.log.Info("configured", "runtime", runtime, "version", version, "request_timeout", p.Timeout().String())
	return 0, nil // 0: every event this plugin implements
}

// Synchronize registers the pods that run (the plugin started, or the runtime
// restarted). NRI's PodSandbox.linux.pod_resources still holds what the pod was
// created with; only the containers' limits are current (containerd
// internal/cri/nri/nri_api_linux.go), so they are what the plugin keeps.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	ctx, cancel := p.deadline(ctx)
	defer cancel()
	fresh := map[string]*pod{}
	for _, sb := range pods {
		config, ok := p.cfg.Handlers[sb.GetRuntimeHandler()]
		if !ok {
			continue
		}
		fresh[sb.GetId()] = newPod(sb, config)
	}
	for _, c := range ctrs {
		if found, ok := fresh[c.GetPodSandboxId()]; ok && c.GetState() != api.ContainerState_CONTAINER_STOPPED {
			found.containers[c.GetId()] = containerLimits(c.GetLinux().GetResources())
		}
	}
	p.mu.Lock()
	p.pods = fresh
	p.mu.Unlock()
	for _, sb := range pods {
		if found, ok := fresh[sb.GetId()]; ok {
			// A registration that does not fit in this call is made at the pod's next event.
			p.register(ctx, found, sb)
		}
	}
	p.log.Info("synchronized", "pods", len(pods), "kata_pods", len(fresh))
	return nil, nil
}

// RunPodSandbox registers a pod of a Kata handler. It never fails the pod.
func (p *Plugin) RunPodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	config, ok := p.cfg.Handlers[sb.GetRuntimeHandler()]
	if !ok {
		return nil
	}
	ctx, cancel := p.deadline(ctx)
	defer cancel()
	found := newPod(sb, config)
	p.mu.Lock()
	p.pods[sb.GetId()] = found
	p.mu.Unlock()
	p.register(ctx, found, sb)
	return nil
}

// UpdatePodSandbox carries a pod-level resize to the VM: the answer is kata-mem's
// CRI status for it.
func (p *Plugin) UpdatePodSandbox(ctx context.Context, sb *api.PodSandbox, overhead, res *api.LinuxResources) error {
	config, ok := p.cfg.Handlers[sb.GetRuntimeHandler()]
	if !ok {
		return nil
	}
	ctx, cancel := p.deadline(ctx)
	defer cancel()
	found, err := p.known(ctx, sb, config)
	if err != nil {
		return err
	}
	return p.call(ctx, "UpdatePodSandbox", sandboxUpdate(found, p.cfg.AllowShrink, res, overhead))
}

// PostCreateContainer keeps the new container's limits.
func (p *Plugin) PostCreateContainer(_ context.Context, sb *api.PodSandbox, c *api.Container) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if found, ok := p.pods[sb.GetId()]; ok {
		found.containers[c.GetId()] = containerLimits(c.GetLinux().GetResources())
	}
	return nil
}

// UpdateContainer carries a container-level resize to the VM when Kata sizes it
// statically; with Kata's dynamic sizing Kata's own hotplug follows the
// container, and the plugin leaves the event to it (one owner per event).
func (p *Plugin) UpdateContainer(ctx context.Context, sb *api.PodSandbox, c *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	config, ok := p.cfg.Handlers[sb.GetRuntimeHandler()]
	if !ok {
		return nil, nil
	}
	ctx, cancel := p.deadline(ctx)
	defer cancel()
	found, err := p.known(ctx, sb, config)
	if err != nil {
		return nil, err
	}
	if !found.static {
		return nil, nil
	}
	// The new limits count once the runtime has them: a refused update leaves the
	// container as it was.
	found.containers[c.GetId()] = containerLimits(res)
	if err := p.call(ctx, "UpdateContainer", containersUpdate(found, p.cfg.AllowShrink)); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if kept, ok := p.pods[sb.GetId()]; ok {
		kept.containers[c.GetId()] = containerLimits(res)
	}
	p.mu.Unlock()
	return nil, nil
}

// RemoveContainer forgets the container's limits.
func (p *Plugin) RemoveContainer(_ context.Context, sb *api.PodSandbox, c *api.Container) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if found, ok := p.pods[sb.GetId()]; ok {
		delete(found.containers, c.GetId())
	}
	return nil
}

// RemovePodSandbox lets kata-mem forget the sandbox. It never fails the removal.
func (p *Plugin) RemovePodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	config, ok := p.cfg.Handlers[sb.GetRuntimeHandler()]
	if !ok {
		return nil
	}
	p.mu.Lock()
	delete(p.pods, sb.GetId())
	p.mu.Unlock()
	ctx, cancel := p.deadline(ctx)
	defer cancel()
	if err := p.call(ctx, "RemovePodSandbox", forget(sb.GetId(), config)); err != nil {
		p.log.Warn("kata-mem could not forget the sandbox; kata-mem reconcile removes its state once the VM is gone", "pod", sb.GetId(), "error", err)
	}
	return nil
}

// deadline bounds a call by the plugin's share of NRI's request timeout.
func (p *Plugin) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.cfg.Wait(p.Timeout()))
}

// known is a copy of the pod as registered, registering it first when it is not
// (the plugin started after it and Synchronize could not reach kata-mem, say).
func (p *Plugin) known(ctx context.Context, sb *api.PodSandbox, config string) (*pod, error) {
	p.mu.Lock()
	found, ok := p.pods[sb.GetId()]
	if !ok {
		found = newPod(sb, config)
		p.pods[sb.GetId()] = found
	}
	registered := found.registered()
	p.mu.Unlock()
	if !registered {
		if err := p.register(ctx, found, sb); err != nil {
			return nil, fmt.Errorf("kata-mem: pod %s is not registered with kata-mem, so its VM is not resized: %w", sb.GetId(), err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return found.copy(), nil
}

// register asks kata-mem how Kata sized the pod's VM (a plan, nothing runs) and
// keeps what the plan says of it: its Kata runtime and whether Kata sizes it
// statically.
func (p *Plugin) register(ctx context.Context, found *pod, sb *api.PodSandbox) error {
	start := time.Now()
	resp, err := p.svc.Shim(ctx, registration(sb, found.config))
	if err == nil && resp.Plan == nil {
		err = errors.New("kata-mem answered the registration without a plan")
	}
	if err != nil {
		err = p.failure(ctx, sb.GetId(), err)
		p.log.Warn("register", "pod", sb.GetId(), "error", err, "took", time.Since(start).String())
		return err
	}
	p.mu.Lock()
	found.runtime = resp.Plan.Config.Runtime
	found.static = resp.Plan.Config.StaticSandboxResourceMgmt
	found.socket = p.cfg.Socket(found.runtime, found.id)
	p.mu.Unlock()
	p.log.Info("register", "pod", sb.GetId(), "runtime", found.runtime, "static", found.static,
		"boot_mib", resp.Plan.Memory.TargetMiB, "socket", found.socket, "took", time.Since(start).String())
	return nil
}

// call sends one request that answers a CRI call, and returns the answer the
// runtime gets: nil for kata-mem's OK, else an error with kata-mem's reason.
func (p *Plugin) call(ctx context.Context, event string, req *katamem.ShimRequest) error {
	start := time.Now()
	resp, err := p.svc.Shim(ctx, req)
	var cri *katamem.CRI
	if err == nil {
		cri = resp.CRI
	} else {
		var refused *katamem.Error
		if errors.As(err, &refused) {
			cri = refused.CRI
		}
	}
	var answer error
	switch {
	case cri != nil && cri.Code == "OK":
	case cri != nil:
		answer = errors.New(speakable(cri.Message))
	case err != nil:
		answer = p.failure(ctx, req.SandboxID, err)
	case req.Event == katamem.EventDelete:
	default:
		answer = fmt.Errorf("kata-mem: sandbox %s: kata-mem serve answered %s without a CRI status: refused, to be safe", req.SandboxID, req.Event)
	}
	attrs := []any{"pod", req.SandboxID, "took", time.Since(start).String()}
	if cri != nil {
		attrs = append(attrs, "code", cri.Code)
	}
	if answer != nil {
		p.log.Warn(event, append(attrs, "error", answer)...)
	} else {
		p.log.Info(event, attrs...)
	}
	return answer
}

// failure is what the runtime is told when kata-mem did not answer.
func (p *Plugin) failure(ctx context.Context, sandbox string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("kata-mem: sandbox %s: kata-mem serve did not answer within %v (NRI allows %v): it carries the request to its end, and the retry is answered from there (Unavailable)",
			sandbox, p.cfg.Wait(p.Timeout()), p.Timeout())
	}
	return fmt.Errorf("kata-mem: sandbox %s: kata-mem serve cannot be asked (Unavailable): %s", sandbox, speakable(err.Error()))
}

// notImplemented is what the kubelet reads as "the runtime does not resize pods":
// an Unknown error whose message contains it lets the resize go on
// (pkg/kubelet/kuberuntime/kuberuntime_container.go updatePodSandboxResources),
// and containerd hands a plugin's error on as Unknown.
var notImplemented = regexp.MustCompile(`(?i)not\s+implemented`)

// speakable is a message the kubelet cannot mistake for "not implemented".
func speakable(message string) string {
	return notImplemented.ReplaceAllString(message, "not supported")
}
