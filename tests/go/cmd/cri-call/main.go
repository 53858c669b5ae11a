// Command cri-call sends the CRI calls the node tests need and crictl does not send, over
// the runtime's socket, and prints what came back as one JSON line:
//
//	cri-call -socket S update-sandbox -pod ID -resources JSON [-overhead JSON]
//	cri-call -socket S image-status -image REF [-wait 10s]
//
// The JSON objects are CRI LinuxContainerResources (protojson: memory_limit_in_bytes,
// cpu_quota, cpu_period, cpu_shares, ...). The line always has "rpc", "code" (the gRPC
// status code's name, "OK" on success), "code_number" and "message", so that the caller
// asserts on them: a gRPC error still exits 0. Exit 2 is for cri-call's own usage errors,
// exit 1 for output it could not write.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const usage = `usage: cri-call -socket PATH [-timeout 10s] COMMAND [FLAGS]

commands:
  update-sandbox -pod ID -resources JSON [-overhead JSON]
        RuntimeService.UpdatePodSandboxResources
  image-status -image REF [-wait DURATION]
        ImageService.ImageStatus, asked again until the image is known or DURATION passes
`

// result is the one JSON line cri-call prints.
type result struct {
	RPC        string  `json:"rpc"`
	Code       string  `json:"code"`
	CodeNumber uint32  `json:"code_number"`
	Message    string  `json:"message"`
	ElapsedMS  float64 `json:"elapsed_ms"`
	// image-status only
	Found    *bool    `json:"found,omitempty"`
	ImageID  string   `json:"image_id,omitempty"`
	RepoTags []string `json:"repo_tags,omitempty"`
	Polls    int      `json:"polls,omitempty"`
}

// usageError reports a mistake in cri-call's own arguments: exit 2.
func usageError(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cri-call: "+format+"\n", args...)
	fmt.Fprint(os.Stderr, usage)
	os.Exit(2)
}

// finish fills the status fields from err (nil is OK) and prints the line.
func finish(r result, err error, start time.Time) {
	st := status.Convert(err)
	r.Code = st.Code().String()
	r.CodeNumber = uint32(st.Code())
	r.Message = st.Message()
	r.ElapsedMS = float64(time.Since(start).Microseconds()) / 1000
	line, jerr := json.Marshal(r)
	if jerr == nil {
		_, jerr = fmt.Println(string(line))
	}
	if jerr != nil {
		fmt.Fprintf(os.Stderr, "cri-call: %v\n", jerr)
		os.Exit(1)
	}
}

func main() {
	global := flag.NewFlagSet("cri-call", flag.ContinueOnError)
	global.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	socket := global.String("socket", "", "the runtime's CRI socket (a path)")
	timeout := global.Duration("timeout", 10*time.Second, "deadline of each call")
	if err := global.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *socket == "" {
		usageError("-socket is required")
	}
	if global.NArg() == 0 {
		usageError("no command")
	}
	command, args := global.Arg(0), global.Args()[1:]

	conn, err := grpc.NewClient("unix://"+*socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		usageError("bad socket %q: %v", *socket, err)
	}
	defer conn.Close()

	switch command {
	case "update-sandbox":
		updateSandbox(runtimeapi.NewRuntimeServiceClient(conn), *timeout, args)
	case "image-status":
		imageStatus(runtimeapi.NewImageServiceClient(conn), *timeout, args)
	default:
		usageError("unknown command %q", command)
	}
}
