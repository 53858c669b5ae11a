package katamem

// The client against a real kata-mem serve (internal/servetest starts it): plan-only
// requests, the service's errors, a peer it refuses, keep-alive and deadlines.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kata-mem/internal/servetest"
)

// peerEnv set: this binary was started as another user by TestAPeerOutsideTheGroupIsRefused,
// to call the service at that socket and print what came of it.
const peerEnv = "KATA_MEM_GO_PEER_SOCKET"

func TestMain(m *testing.M) {
	if sock := os.Getenv(peerEnv); sock != "" {
		os.Exit(peerMain(sock))
	}
	dir, err := os.MkdirTemp("", "kata-mem-go-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		shared, err = servetest.Launch(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if err := shared.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// shared is the service of the tests that need none of their own.
var shared *servetest.Service

func peerMain(sock string) int {
	c := New(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var e *Error
	if err := c.Healthz(ctx); !errors.As(err, &e) {
		fmt.Fprintf(os.Stderr, "expected an *Error, got %v\n", err)
		return 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(e)
	return 0
}

func config(t *testing.T) string {
	return filepath.Join(servetest.Repo(), "tests", "fixtures", "kata-configs", "configuration-qemu.toml")
}

// readmeRequest is the README's example request: the upstream QEMU configuration,
// one 256 MiB container, a 32 GiB 8-CPU host.
func readmeRequest(t *testing.T) *ShimRequest {
	return &ShimRequest{
		SandboxID: "sb-1",
		Event:     EventUpdate,
		Config:    String(config(t)),
		Containers: []Container{{
			ID: "c1", State: "running", MemoryLimitBytes: Int64(256 << 20),
			CPUQuota: Int64(50000), CPUPeriod: Int64(100000),
		}},
		Host: &HostOverrides{MemoryBytes: Int64(32 << 30), CPUs: Int64(8)},
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// strict decodes the answer to GET/POST path as the service sends it, refusing a
// field the struct does not have: what the structs miss shows here.
func strict(t *testing.T, c *Client, method, path string, body []byte, into interface{}) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), method, "http://kata-mem"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode
}

func TestAPlanOnlyRequestIsPlanned(t *testing.T) {
	svc := shared
	c := New(svc.Socket)
	defer c.Close()
	resp, err := c.Shim(ctx(t), readmeRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	if resp.SandboxID != "sb-1" || resp.Plan == nil || resp.Outcome != nil {
		t.Fatalf("expected sb-1's plan and no outcome, got %+v", resp)
	}
	if m := resp.Plan.Memory; m.TargetMiB != 2304 || m.Mechanism != "pc-dimm" || m.Sizing.Model != "kata" {
		t.Errorf("expected a 2304 MiB pc-dimm target (the README's), got %+v", m)
	}
	req := readmeRequest(t)
	req.Schema = RequestSchema
	body, _ := json.Marshal(req)
	var doc ShimResponse
	if status := strict(t, c, http.MethodPost, "/v1/shim", body, &doc); status != 200 {
		t.Errorf("HTTP %d", status)
	}
}

func TestAClampedPlanSaysWhy(t *testing.T) {
	svc := shared
	c := New(svc.Socket)
	defer c.Close()
	req := readmeRequest(t)
	req.Containers = []Container{{ID: "boom", MemoryLimitBytes: Int64(1000 << 30)}}
	resp, err := c.Shim(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Plan.Memory
	if len(m.Clamps) == 0 || len(m.ClampedBy) == 0 || m.TargetMiB >= m.RequestedMiB {
		t.Fatalf("expected the 1000 GiB pod clamped, got %+v", m)
	}
}

func TestErrorsCarryKindExitCodeAndStatus(t *testing.T) {
	svc := shared
	c := New(svc.Socket)
	defer c.Close()

	gone := readmeRequest(t)
	gone.Apply = true
	gone.Backend = &Backend{Type: "qmp", Socket: filepath.Join(svc.Dir, "gone.sock")}
	bad := readmeRequest(t)
	bad.Event = "explode"
	relative := readmeRequest(t)
	relative.Config = String("configuration.toml")
	for _, tc := range []struct {
		name     string
		req      *ShimRequest
		kind     string
		exit     int
		status   int
		inMessge string
		// cri is the gRPC code an answer to a CRI call carries (an update answers
		// UpdateContainerResources); "Unknown": no cri object (an unknown event
		// answers no CRI call).
		cri string
	}{
		{"a VM that is gone", gone, KindBackendUnavailable, 6, 503, "gone.sock", "Unavailable"},
		{"an unknown event", bad, KindInput, 4, 400, "explode", "Unknown"},
		{"a relative path", relative, KindInput, 4, 400, "config", "InvalidArgument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Shim(ctx(t), tc.req)
			var e *Error
			if !errors.As(err, &e) || resp != nil {
				t.Fatalf("expected an *Error and no response, got %v, %v", resp, err)
			}
			if e.Kind != tc.kind || e.ExitCode != tc.exit || e.HTTPStatus != tc.status || !strings.Contains(e.Message, tc.inMessge) {
				t.Errorf("expected %s, exit %d, HTTP %d naming %q; got %+v", tc.kind, tc.exit, tc.status, tc.inMessge, e)
			}
			if e.Response == nil || e.Response.Schema != ResponseSchema || e.Response.Plan != nil {
				t.Errorf("expected the shim's error response with it, got %+v", e.Response)
			}
			if IsUnavailable(err) != (tc.kind == KindBackendUnavailable) {
				t.Errorf("IsUnavailable: %v for %s", IsUnavailable(err), tc.kind)
			}
			if e.CRICode() != tc.cri || (e.CRI != nil && e.CRI.Message != "kata-mem: "+e.Message) {
				t.Errorf("cri %s carrying the error's message expected, got %+v", tc.cri, e.CRI)
			}
		})
	}

	t.Run("an unknown sandbox", func(t *testing.T) {
		_, err := c.Sandbox(ctx(t), "nope")
		var e *Error
		if !errors.As(err, &e) || e.HTTPStatus != 404 || e.Kind != KindInput || e.ExitCode != 4 || e.Response != nil {
			t.Fatalf("expected a 404 error document, got %#v", err)
		}
		if !strings.Contains(e.Message, "sandbox nope: unknown") {
			t.Errorf("expected the sandbox named, got %q", e.Message)
		}
	})
}

func TestNodeAndHealthz(t *testing.T) {
	svc := servetest.Start(t) // its own: the test breaks its state directory
	c := New(svc.Socket)
	defer c.Close()
	if err := c.Healthz(ctx(t)); err != nil {
		t.Fatal(err)
	}
	node, err := c.Node(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if node.Schema != NodeSchema || node.StateDir != svc.State || node.StateDirExists || node.HostMiB <= 0 || len(node.Sandboxes) != 0 {
		t.Errorf("expected an empty node at %s, got %+v", svc.State, node)
	}
	var doc Node
	strict(t, c, http.MethodGet, "/v1/node", nil, &doc)

	// A state directory kata-mem cannot use: /healthz says why, as an *Error.
	if err := os.WriteFile(svc.State, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	var e *Error
	if err := c.Healthz(ctx(t)); !errors.As(err, &e) || e.HTTPStatus != 503 || e.Kind != KindConfig || e.ExitCode != 3 {
		t.Fatalf("expected a 503 configuration error, got %#v", err)
	}
}

func TestCallsShareOneKeptAliveConnection(t *testing.T) {
	svc := shared
	c := New(svc.Socket)
	defer c.Close()
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) }}
	traced := httptrace.WithClientTrace(ctx(t), trace)
	for i := 0; i < 3; i++ {
		if _, err := c.Shim(traced, readmeRequest(t)); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(reused) != "[false true true]" {
		t.Errorf("expected one connection for three calls, got reused=%v", reused)
	}
}

func TestACallEndsAtItsDeadline(t *testing.T) {
	// A listener that accepts and never answers: what a service stuck for good looks like.
	sock := filepath.Join(servetest.WorldDir(t), "silent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, conn) }()
		}
	}()
	c := New(sock)
	defer c.Close()
	deadline, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Shim(deadline, readmeRequest(t))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expected the deadline, got %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the call took %v past a 200 ms deadline", took)
	}
}

// The cri object of an update-sandbox answer (issue 17 §2), from the real service: a
// plan-only call resizes nothing, so it is FailedPrecondition, and the kubelet would
// not lower the pod cgroup on it.
func TestTheCRIObjectIsRead(t *testing.T) {
	c := New(shared.Socket)
	defer c.Close()
	resp, err := c.Shim(ctx(t), &ShimRequest{
		SandboxID:        "sb-cri",
		Event:            EventUpdateSandbox,
		Config:           String(config(t)),
		SandboxResources: &Resources{MemoryLimitBytes: Int64(1 << 30)},
		Overhead:         &Resources{MemoryLimitBytes: Int64(256 << 20)},
		Host:             &HostOverrides{MemoryBytes: Int64(32 << 30), CPUs: Int64(8)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.CRI == nil || resp.CRI.Code != "FailedPrecondition" || resp.CRI.GRPCCode != 9 || resp.CRI.Message == "" {
		t.Fatalf("expected the cri code FailedPrecondition (9), got %+v", resp.CRI)
	}
}

func TestAPeerOutsideTheGroupIsRefused(t *testing.T) {
	users, err := user.LookupGroup("users")
	if err != nil {
		t.Fatal(err)
	}
	svc := servetest.Start(t, "--group", "users")
	// This test binary, as nobody holding the socket's group for the file system but
	// no member of it in the user database: the kernel lets it connect, serve refuses it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(svc.Dir, "peer.test")
	if err := os.WriteFile(copied, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--groups="+users.Gid, copied)
	cmd.Env = append(os.Environ(), peerEnv+"="+svc.Socket)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the peer as nobody: %v: %s", err, out)
	}
	var e Error
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if e.HTTPStatus != 403 || e.Kind != KindInput || e.ExitCode != 4 || !strings.Contains(e.Message, "uid 65534") {
		t.Errorf("expected 403 naming uid 65534, got %+v", e)
	}
	c := New(svc.Socket) // root is served
	defer c.Close()
	if err := c.Healthz(ctx(t)); err != nil {
		t.Error(err)
	}
}

// An applied resize on a fake QEMU monitor, then the sandbox's status and the node's,
// each answer decoded strictly too (the status and node documents have no schema).
func TestAnAppliedResizeThenSandboxAndNode(t *testing.T) {
	c := New(shared.Socket)
	defer c.Close()
	vm := servetest.StartFakeVM(t)
	req := &ShimRequest{
		SandboxID:  "sb-go",
		Event:      EventCreate,
		Config:     String(vm.Config),
		Containers: []Container{{ID: "c1", MemoryLimitBytes: Int64(256 << 20)}},
		Backend:    &Backend{Type: "qmp", Socket: vm.Socket},
		Apply:      true,
		Host:       &HostOverrides{MemoryBytes: Int64(16 << 30), CPUs: Int64(4)},
	}
	resp, err := c.Shim(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if o := resp.Outcome; o == nil || o.Status != "Resized" || o.ObservedMiB != 768 || len(o.Steps) != 1 {
		t.Fatalf("expected a resize to 768 MiB in one step, got %+v", o)
	}
	again := *req
	again.Schema = RequestSchema
	body, _ := json.Marshal(&again)
	var doc ShimResponse
	strict(t, c, http.MethodPost, "/v1/shim", body, &doc)
	if doc.Outcome == nil || doc.Outcome.Status != "NoChange" {
		t.Errorf("expected NoChange the second time, got %+v", doc.Outcome)
	}

	status, err := c.Sandbox(ctx(t), "sb-go")
	if err != nil {
		t.Fatal(err)
	}
	if status.Schema != StatusSchema || status.BaseMiB != 512 || status.PluggedMiB != 256 || len(status.Devices) != 1 || !status.Devices[0].Ours {
		t.Errorf("expected 512 + 256 MiB in one DIMM of kata-mem's, got %+v", status)
	}
	var journal struct {
		ObservedMiB int64 `json:"observed_mib"`
	}
	if err := json.Unmarshal(status.Journal, &journal); err != nil || journal.ObservedMiB != 768 {
		t.Errorf("expected the journal at 768 MiB, got %s (%v)", status.Journal, err)
	}
	var statusDoc SandboxStatus
	strict(t, c, http.MethodGet, "/v1/sandboxes/sb-go", nil, &statusDoc)

	node, err := c.Node(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var row *NodeSandbox
	for i := range node.Sandboxes {
		if node.Sandboxes[i].Sandbox == "sb-go" {
			row = &node.Sandboxes[i]
		}
	}
	if row == nil || row.CurrentMiB == nil || *row.CurrentMiB != 768 || row.Backend == nil || row.Backend.Socket != vm.Socket || row.Backend.VMM == nil {
		t.Fatalf("expected sb-go at 768 MiB on its QMP socket, with the VMM kata-mem saw, got %+v", node.Sandboxes)
	}
	var nodeDoc Node
	strict(t, c, http.MethodGet, "/v1/node", nil, &nodeDoc)
}
