package main

import (
	"context"
	"flag"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// updateSandbox sends UpdatePodSandboxResources, the call the kubelet makes on an in-place
// pod resize (crictl has no command for it).
func updateSandbox(client runtimeapi.RuntimeServiceClient, timeout time.Duration, args []string) {
	fs := flag.NewFlagSet("update-sandbox", flag.ContinueOnError)
	pod := fs.String("pod", "", "pod sandbox id")
	resources := fs.String("resources", "", "the pod's new resources: LinuxContainerResources as JSON")
	overhead := fs.String("overhead", "", "the pod's overhead: LinuxContainerResources as JSON (none when empty)")
	if err := fs.Parse(args); err != nil {
		usageError("update-sandbox: %v", err)
	}
	if *pod == "" || *resources == "" || fs.NArg() != 0 {
		usageError("update-sandbox needs -pod and -resources, and nothing else")
	}
	req := &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: *pod,
		Resources:    parseResources("-resources", *resources),
	}
	if *overhead != "" {
		req.Overhead = parseResources("-overhead", *overhead)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	_, err := client.UpdatePodSandboxResources(ctx, req)
	finish(result{RPC: "UpdatePodSandboxResources"}, err, start)
}

// parseResources reads a LinuxContainerResources; an unknown field is a usage error.
func parseResources(name, text string) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{}
	if err := protojson.Unmarshal([]byte(text), r); err != nil {
		usageError("%s: not a LinuxContainerResources: %v", name, err)
	}
	return r
}
