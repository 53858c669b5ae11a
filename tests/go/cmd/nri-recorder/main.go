// Command nri-recorder is an NRI plugin that records every event the runtime sends it, one
// JSON object a line, to a file. It validates the node test rig: it is not kata-mem's NRI
// plugin. It can be told to refuse UpdatePodSandbox with a message, or to take a while to
// answer it.
//
//	nri-recorder -socket /tmp/x/nri.sock -out events.jsonl [-idx 50] [-name recorder]
//	             [-fail-update-sandbox MESSAGE] [-update-sandbox-delay-ms N]
//	             [-fail-request] [-keep-connected]
//
// Each line has "event" (the NRI request: RunPodSandbox, UpdatePodSandbox, ...; "Closed"
// when the runtime closed the connection), "unix_nano" and the request's messages under
// their NRI proto names in protojson (snake_case; 64-bit integers are JSON strings):
// "pod", "container", "linux_resources", "overhead_linux_resources" (UpdatePodSandbox),
// "pods" and "containers" (Synchronize), "config", "runtime_name", "runtime_version" and
// "runtime_nri_version" (Configure). A line is written when the request arrives, before any delay or refusal.
// The plugin exits 0 when the runtime closes the connection, 1 when it cannot connect.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

type recorder struct {
	mu                sync.Mutex
	out               *os.File
	failUpdateSandbox string
	updateSandboxWait time.Duration
	stub              stub.Stub
	configured        bool
	closed            sync.Once
}

// recordClosed writes the one "Closed" line: from the stub's close hook, or when Run has
// returned first (the process would otherwise exit before the hook runs).
func (r *recorder) recordClosed() {
	r.closed.Do(func() { r.record("Closed", nil) })
}

// record writes one line: the event's name and its fields (proto messages, lists of them,
// or plain values).
func (r *recorder) record(event string, fields map[string]any) {
	line := map[string]any{"event": event, "unix_nano": time.Now().UnixNano()}
	for key, value := range fields {
		line[key] = encode(value)
	}
	data, err := json.Marshal(line)
	if err != nil {
		panic(fmt.Sprintf("nri-recorder: %s: %v", event, err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.out.Write(append(data, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "nri-recorder: write %s: %v\n", r.out.Name(), err)
		os.Exit(1)
	}
}

var marshal = protojson.MarshalOptions{UseProtoNames: true}

func encode(value any) any {
	switch v := value.(type) {
	case proto.Message:
		if v == nil {
			return nil
		}
		data, err := marshal.Marshal(v)
		if err != nil {
			panic(err)
		}
		return json.RawMessage(data)
	case []*api.PodSandbox:
		list := make([]any, len(v))
		for i, m := range v {
			list[i] = encode(m)
		}
		return list
	case []*api.Container:
		list := make([]any, len(v))
		for i, m := range v {
			list[i] = encode(m)
		}
		return list
	default:
		return v
	}
}

func (r *recorder) Configure(_ context.Context, config, runtime, version string) (stub.EventMask, error) {
	r.mu.Lock()
	r.configured = true
	r.mu.Unlock()
	r.record("Configure", map[string]any{
		"config": config, "runtime_name": runtime, "runtime_version": version,
		"runtime_nri_version": r.stub.RuntimeNRIVersion(),
	})
	return 0, nil // 0: every event this plugin has a method for
}

func (r *recorder) Synchronize(_ context.Context, pods []*api.PodSandbox, containers []*api.Container) ([]*api.ContainerUpdate, error) {
	r.record("Synchronize", map[string]any{"pods": pods, "containers": containers})
	return nil, nil
}

func (r *recorder) Shutdown(_ context.Context) {
	r.record("Shutdown", nil)
}

func (r *recorder) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	r.record("RunPodSandbox", map[string]any{"pod": pod})
	return nil
}

func (r *recorder) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, overhead, resources *api.LinuxResources) error {
	r.record("UpdatePodSandbox", map[string]any{
		"pod": pod, "overhead_linux_resources": overhead, "linux_resources": resources,
	})
	if r.updateSandboxWait > 0 {
		time.Sleep(r.updateSandboxWait)
	}
	if r.failUpdateSandbox != "" {
		return errors.New(r.failUpdateSandbox)
	}
	return nil
}

func (r *recorder) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	r.record("PostUpdatePodSandbox", map[string]any{"pod": pod})
	return nil
}

func (r *recorder) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	r.record("StopPodSandbox", map[string]any{"pod": pod})
	return nil
}

func (r *recorder) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	r.record("RemovePodSandbox", map[string]any{"pod": pod})
	return nil
}

func (r *recorder) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	r.record("CreateContainer", map[string]any{"pod": pod, "container": ctr})
	return nil, nil, nil
}

func (r *recorder) PostCreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	r.record("PostCreateContainer", map[string]any{"pod": pod, "container": ctr})
	return nil
}

func (r *recorder) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	r.record("StartContainer", map[string]any{"pod": pod, "container": ctr})
	return nil
}

func (r *recorder) PostStartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	r.record("PostStartContainer", map[string]any{"pod": pod, "container": ctr})
	return nil
}

func (r *recorder) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container, resources *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	r.record("UpdateContainer", map[string]any{"pod": pod, "container": ctr, "linux_resources": resources})
	return nil, nil
}

func (r *recorder) PostUpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	r.record("PostUpdateContainer", map[string]any{"pod": pod, "container": ctr})
	return nil
}

func (r *recorder) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	r.record("StopContainer", map[string]any{"pod": pod, "container": ctr})
	return nil, nil
}

func (r *recorder) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	r.record("RemoveContainer", map[string]any{"pod": pod, "container": ctr})
	return nil
}

func main() {
	socket := flag.String("socket", "", "the runtime's NRI socket (a path)")
	outPath := flag.String("out", "", "file the events are appended to, one JSON object a line")
	name := flag.String("name", "recorder", "plugin name")
	idx := flag.String("idx", "50", "plugin index (two digits: the order among plugins)")
	fail := flag.String("fail-update-sandbox", "", "refuse every UpdatePodSandbox with this message")
	delayMS := flag.Int("update-sandbox-delay-ms", 0, "sleep this long in UpdatePodSandbox before answering")
	failRequest := flag.Bool("fail-request", false, "ask for FailurePolicy.fail_request (NRI v0.12.4+ runtimes only)")
	keepConnected := flag.Bool("keep-connected", false, "ask for FailurePolicy.keep_connected (NRI v0.12.4+ runtimes only)")
	flag.Parse()
	if *socket == "" || *outPath == "" || flag.NArg() != 0 || *delayMS < 0 {
		fmt.Fprintln(os.Stderr, "nri-recorder: -socket and -out are required (-h: usage)")
		os.Exit(2)
	}
	out, err := os.OpenFile(*outPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nri-recorder: %v\n", err)
		os.Exit(1)
	}
	r := &recorder{
		out:               out,
		failUpdateSandbox: *fail,
		updateSandboxWait: time.Duration(*delayMS) * time.Millisecond,
	}
	options := []stub.Option{
		stub.WithSocketPath(*socket),
		stub.WithPluginName(*name),
		stub.WithPluginIdx(*idx),
		stub.WithOnClose(r.recordClosed),
	}
	if *failRequest || *keepConnected {
		options = append(options, stub.WithFailurePolicy(&api.FailurePolicy{
			FailRequest: *failRequest, KeepConnected: *keepConnected,
		}))
	}
	plugin, err := stub.New(r, options...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nri-recorder: %v\n", err)
		os.Exit(2)
	}
	r.stub = plugin
	err = plugin.Run(context.Background())
	r.mu.Lock()
	configured := r.configured
	r.mu.Unlock()
	// Run returns once the connection is gone: an error only when it never got as far as
	// Configure (no runtime listening, registration refused).
	if !configured {
		fmt.Fprintf(os.Stderr, "nri-recorder: %v\n", err)
		os.Exit(1)
	}
	r.recordClosed()
}
