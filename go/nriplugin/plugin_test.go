package nriplugin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	katamem "kata-mem/client"
)

// fakeService answers as kata-mem serve would, from a function per event, and
// records what it was asked. The real service is in the tests of go/client and of
// tests/node (through a real containerd).
type fakeService struct {
	mu     sync.Mutex
	asked  []*katamem.ShimRequest
	answer func(*katamem.ShimRequest) (*katamem.ShimResponse, error)
	delay  time.Duration
}

func (f *fakeService) Shim(ctx context.Context, req *katamem.ShimRequest) (*katamem.ShimResponse, error) {
	f.mu.Lock()
	f.asked = append(f.asked, req)
	f.mu.Unlock()
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.answer(req)
}

func (f *fakeService) requests() []*katamem.ShimRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*katamem.ShimRequest(nil), f.asked...)
}

const (
	kataHandler = "kata-qemu-runtime-rs"
	kataConfig  = "/etc/kata/configuration-qemu-runtime-rs.toml"
)

// planned is a registration's answer: a plan of the runtime and static sizing given.
func planned(runtime string, static bool) *katamem.ShimResponse {
	return &katamem.ShimResponse{Plan: &katamem.Plan{
		Config: katamem.PlanConfig{Path: kataConfig, Runtime: runtime, StaticSandboxResourceMgmt: static},
		Memory: katamem.Memory{TargetMiB: 2080},
	}}
}

func answered(code, message string) *katamem.ShimResponse {
	return &katamem.ShimResponse{CRI: &katamem.CRI{Code: code, Message: message}}
}

// service answers registrations with the plan given and every other request with cri.
func service(plan *katamem.ShimResponse, cri *katamem.ShimResponse) *fakeService {
	return &fakeService{answer: func(req *katamem.ShimRequest) (*katamem.ShimResponse, error) {
		switch req.Event {
		case katamem.EventCreate:
			return plan, nil
		case katamem.EventDelete:
			return &katamem.ShimResponse{}, nil
		}
		return cri, nil
	}}
}

func newPlugin(t *testing.T, svc Service) *Plugin {
	t.Helper()
	cfg := Config{
		Handlers:    map[string]string{kataHandler: kataConfig},
		Sockets:     map[string]string{RuntimeRustVM: "/test/vm/{id}/qmp.sock"},
		AllowShrink: true,
	}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	return New(cfg, svc, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func limit(n int64) *api.LinuxResources {
	return &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(n)}}
}

func kataPod(id string) *api.PodSandbox {
	return &api.PodSandbox{
		Id:             id,
		RuntimeHandler: kataHandler,
		Annotations: map[string]string{
			"io.katacontainers.config.hypervisor.default_memory": "1024",
			"example.com/other": "x",
		},
		Linux: &api.LinuxPodSandbox{PodResources: &api.LinuxResources{
			Memory: &api.LinuxMemory{Limit: api.Int64(2 << 30)},
			Cpu:    &api.LinuxCPU{Quota: api.Int64(150000), Period: api.UInt64(100000)},
		}},
	}
}

func TestAPodOfAnotherHandlerNeverReachesKataMem(t *testing.T) {
	svc := service(planned(RuntimeRustVM, true), answered("OK", ""))
	p := newPlugin(t, svc)
	pod := &api.PodSandbox{Id: "runc-pod", RuntimeHandler: "runc"}
	ctx := context.Background()
	if err := p.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := p.UpdatePodSandbox(ctx, pod, nil, limit(1<<30)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpdateContainer(ctx, pod, &api.Container{Id: "c"}, limit(1<<30)); err != nil {
		t.Fatal(err)
	}
	if err := p.RemovePodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := svc.requests(); len(got) != 0 {
		t.Fatalf("kata-mem was asked %d times about a runc pod", len(got))
	}
}

func TestRegistrationIsAPlanOfHowKataBootedThePod(t *testing.T) {
	svc := service(planned(RuntimeRustVM, true), nil)
	p := newPlugin(t, svc)
	if err := p.RunPodSandbox(context.Background(), kataPod("sb-1")); err != nil {
		t.Fatal(err)
	}
	got := svc.requests()
	if len(got) != 1 {
		t.Fatalf("asked %d times, want 1", len(got))
	}
	req := got[0]
	if req.Event != katamem.EventCreate || req.Apply || req.Backend != nil || *req.Config != kataConfig {
		t.Fatalf("registration is not a plan-only create of the handler's configuration: %+v", req)
	}
	want := map[string]string{
		"io.katacontainers.config.hypervisor.default_memory": "1024",
		"io.kubernetes.cri.sandbox-memory":                   "2147483648",
		"io.kubernetes.cri.sandbox-cpu-quota":                "150000",
		"io.kubernetes.cri.sandbox-cpu-period":               "100000",
	}
	if len(req.Annotations) != len(want) {
		t.Fatalf("annotations %v, want %v", req.Annotations, want)
	}
	for k, v := range want {
		if req.Annotations[k] != v {
			t.Fatalf("annotation %s = %q, want %q", k, req.Annotations[k], v)
		}
	}
}

func TestAPodResizeIsTheServicesAnswer(t *testing.T) {
	for _, tc := range []struct {
		code, message string
		ok            bool
	}{
		{"OK", "kata-mem: Resized: guest memory 3072 MiB (verified)", true},
		{"Unavailable", "kata-mem: Deferred UsageAboveTarget: the guest uses 1200 MiB", false},
		{"FailedPrecondition", "kata-mem: Infeasible BelowBaseMemory: below its boot memory", false},
	} {
		svc := service(planned(RuntimeRustVM, true), answered(tc.code, tc.message))
		p := newPlugin(t, svc)
		pod := kataPod("sb-1")
		ctx := context.Background()
		if err := p.RunPodSandbox(ctx, pod); err != nil {
			t.Fatal(err)
		}
		err := p.UpdatePodSandbox(ctx, pod, limit(320<<20), limit(3<<30))
		if (err == nil) != tc.ok || (err != nil && err.Error() != tc.message) {
			t.Fatalf("%s: answered %v, want the service's message %q", tc.code, err, tc.message)
		}
		req := svc.requests()[1]
		if req.Event != katamem.EventUpdateSandbox || !req.Apply || !req.AllowShrink {
			t.Fatalf("not an applied update-sandbox: %+v", req)
		}
		if req.Backend == nil || req.Backend.Socket != "/test/vm/sb-1/qmp.sock" {
			t.Fatalf("backend %+v: want the runtime-rs socket of sb-1", req.Backend)
		}
		if *req.SandboxResources.MemoryLimitBytes != 3<<30 || *req.Overhead.MemoryLimitBytes != 320<<20 {
			t.Fatalf("resources %+v overhead %+v", req.SandboxResources, req.Overhead)
		}
		if req.Annotations["io.katacontainers.config.hypervisor.default_memory"] != "1024" || len(req.Annotations) != 1 {
			t.Fatalf("annotations %v: want the pod's Kata annotations only", req.Annotations)
		}
	}
}

func TestAMessageIsNeverReadAsNotImplemented(t *testing.T) {
	svc := service(planned(RuntimeRustVM, true), answered("Unavailable", "kata-mem: the step is Not  Implemented here"))
	p := newPlugin(t, svc)
	err := p.UpdatePodSandbox(context.Background(), kataPod("sb-1"), nil, limit(1<<30))
	if err == nil || strings.Contains(strings.ToLower(err.Error()), "implemented") {
		t.Fatalf("answered %v: the kubelet lets an Unknown error saying 'not implemented' through", err)
	}
}

func TestAnAnswerThatDoesNotComeInTimeIsAnErrorInTime(t *testing.T) {
	svc := service(planned(RuntimeRustVM, true), answered("OK", ""))
	p := newPlugin(t, svc)
	// NRI drops a plugin that has not answered within its request timeout; the plugin
	// answers at Wait (75 % of it), which leaves 500 ms for a loaded machine to schedule
	// the answer: the bound checked is NRI's own, not Wait plus a guess.
	const nriTimeout = 2 * time.Second
	p.Timeout = func() time.Duration { return nriTimeout }
	ctx := context.Background()
	pod := kataPod("sb-1")
	if err := p.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	svc.delay = 3 * nriTimeout
	start := time.Now()
	err := p.UpdatePodSandbox(ctx, pod, nil, limit(1<<30))
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "did not answer within") {
		t.Fatalf("answered %v, want an error saying kata-mem is still at it", err)
	}
	if took >= nriTimeout {
		t.Fatalf("answered after %v: NRI drops a plugin after %v", took, nriTimeout)
	}
	if want := p.cfg.Wait(nriTimeout); took < want {
		t.Fatalf("answered after %v, before the %v it may wait for kata-mem", took, want)
	}
}

func TestAServiceThatCannotBeAskedRefusesTheResize(t *testing.T) {
	svc := &fakeService{answer: func(*katamem.ShimRequest) (*katamem.ShimResponse, error) {
		return nil, errors.New("dial unix /run/kata-mem/kata-mem.sock: connect: no such file or directory")
	}}
	p := newPlugin(t, svc)
	err := p.UpdatePodSandbox(context.Background(), kataPod("sb-1"), nil, limit(1<<30))
	if err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("answered %v, want a refusal", err)
	}
}

func TestContainerEventsAreKataMemsOnlyUnderStaticSizing(t *testing.T) {
	for _, static := range []bool{true, false} {
		svc := service(planned(RuntimeGo, static), answered("OK", ""))
		p := newPlugin(t, svc)
		ctx := context.Background()
		pod := kataPod("sb-1")
		if err := p.RunPodSandbox(ctx, pod); err != nil {
			t.Fatal(err)
		}
		a := &api.Container{Id: "a", PodSandboxId: "sb-1", Linux: &api.LinuxContainer{Resources: limit(1 << 30)}}
		b := &api.Container{Id: "b", PodSandboxId: "sb-1", Linux: &api.LinuxContainer{Resources: limit(512 << 20)}}
		for _, c := range []*api.Container{a, b} {
			if err := p.PostCreateContainer(ctx, pod, c); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.UpdateContainer(ctx, pod, b, limit(768<<20)); err != nil {
			t.Fatal(err)
		}
		got := svc.requests()
		if !static {
			if len(got) != 1 {
				t.Fatalf("dynamic sizing: kata-mem asked %d times; container events are Kata's", len(got))
			}
			continue
		}
		if len(got) != 2 {
			t.Fatalf("static sizing: asked %d times, want registration and the update", len(got))
		}
		req := got[1]
		if req.Event != katamem.EventUpdate || !req.Apply || req.Backend.Socket != "/run/vc/vm/sb-1/extra-monitor.sock" {
			t.Fatalf("not an applied update at the Go runtime's extra QMP monitor: %+v", req)
		}
		if len(req.Containers) != 2 || req.Containers[0].ID != "a" || *req.Containers[0].MemoryLimitBytes != 1<<30 ||
			req.Containers[1].ID != "b" || *req.Containers[1].MemoryLimitBytes != 768<<20 {
			t.Fatalf("containers %+v: want a 1 GiB and b at its new 768 MiB", req.Containers)
		}
	}
}

func TestARefusedContainerUpdateKeepsTheOldLimit(t *testing.T) {
	cri := answered("Unavailable", "kata-mem: Deferred UsageAboveTarget")
	svc := service(planned(RuntimeRustVM, true), cri)
	p := newPlugin(t, svc)
	ctx := context.Background()
	pod := kataPod("sb-1")
	if err := p.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	c := &api.Container{Id: "a", PodSandboxId: "sb-1", Linux: &api.LinuxContainer{Resources: limit(1 << 30)}}
	if err := p.PostCreateContainer(ctx, pod, c); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpdateContainer(ctx, pod, c, limit(256<<20)); err == nil {
		t.Fatal("a deferred shrink was answered OK")
	}
	cri.CRI = &katamem.CRI{Code: "OK"}
	other := &api.Container{Id: "b", PodSandboxId: "sb-1"}
	if _, err := p.UpdateContainer(ctx, pod, other, limit(64<<20)); err != nil {
		t.Fatal(err)
	}
	last := svc.requests()[len(svc.requests())-1]
	if *last.Containers[0].MemoryLimitBytes != 1<<30 {
		t.Fatalf("container a counted at %d after its update was refused", *last.Containers[0].MemoryLimitBytes)
	}
}

func TestSynchronizeRegistersWhatRunsWithTheContainersLimitsNow(t *testing.T) {
	svc := service(planned(RuntimeRustVM, true), answered("OK", ""))
	p := newPlugin(t, svc)
	ctx := context.Background()
	pods := []*api.PodSandbox{kataPod("sb-1"), {Id: "runc-1", RuntimeHandler: "runc"}}
	ctrs := []*api.Container{
		{Id: "a", PodSandboxId: "sb-1", State: api.ContainerState_CONTAINER_RUNNING, Linux: &api.LinuxContainer{Resources: limit(3 << 30)}},
		{Id: "gone", PodSandboxId: "sb-1", State: api.ContainerState_CONTAINER_STOPPED, Linux: &api.LinuxContainer{Resources: limit(1 << 30)}},
		{Id: "r", PodSandboxId: "runc-1", State: api.ContainerState_CONTAINER_RUNNING},
	}
	if _, err := p.Synchronize(ctx, pods, ctrs); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpdateContainer(ctx, pods[0], ctrs[0], limit(4<<30)); err != nil {
		t.Fatal(err)
	}
	got := svc.requests()
	if len(got) != 2 || got[0].Event != katamem.EventCreate || got[0].SandboxID != "sb-1" {
		t.Fatalf("synchronize asked %+v: want one registration, of the Kata pod", got)
	}
	if cs := got[1].Containers; len(cs) != 1 || cs[0].ID != "a" || *cs[0].MemoryLimitBytes != 4<<30 {
		t.Fatalf("containers %+v: want only the running one, at its new limit", cs)
	}
}

func TestRemovalForgetsTheSandboxAndNeverFails(t *testing.T) {
	svc := &fakeService{answer: func(req *katamem.ShimRequest) (*katamem.ShimResponse, error) {
		if req.Event == katamem.EventCreate {
			return planned(RuntimeRustVM, true), nil
		}
		return nil, errors.New("connection refused")
	}}
	p := newPlugin(t, svc)
	ctx := context.Background()
	pod := kataPod("sb-1")
	if err := p.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := p.RemovePodSandbox(ctx, pod); err != nil {
		t.Fatalf("a removal failed: %v", err)
	}
	got := svc.requests()
	if last := got[len(got)-1]; last.Event != katamem.EventDelete || last.SandboxID != "sb-1" || last.Apply {
		t.Fatalf("removal asked %+v, want a delete of sb-1", last)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pods["sb-1"]; ok {
		t.Fatal("the plugin still keeps the removed pod")
	}
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no Kata runtime handler"},
		{Config{Handlers: map[string]string{"kata": "configuration.toml"}}, "absolute path"},
		{Config{Handlers: map[string]string{"kata": "/c.toml"}, Sockets: map[string]string{"rust": "/x/{id}"}}, "unknown Kata runtime"},
		{Config{Handlers: map[string]string{"kata": "/c.toml"}, Sockets: map[string]string{"go": "/x/qmp.sock"}}, "{id}"},
		{Config{Handlers: map[string]string{"kata": "/c.toml"}, Budget: 1.5}, "between 0 and 1"},
	} {
		err := tc.cfg.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%+v: %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

func TestTheWaitLeavesRoomForTheAnswer(t *testing.T) {
	c := Config{}
	if got := c.Wait(2 * time.Second); got != 1500*time.Millisecond {
		t.Fatalf("wait %v of 2s", got)
	}
	if got := c.Wait(100 * time.Millisecond); got != 75*time.Millisecond {
		t.Fatalf("wait %v of 100ms: a quarter is kept for the answer", got)
	}
	if got := (&Config{Budget: 0.99}).Wait(2 * time.Second); got != 1850*time.Millisecond {
		t.Fatalf("wait %v of 2s at 99%%: 150ms are kept for the answer", got)
	}
}
