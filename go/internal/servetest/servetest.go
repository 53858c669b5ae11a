// Package servetest starts a real kata-mem serve for the tests of the client and
// of the example: `python -m kata_mem serve` from the repository root, the
// Python of $KATA_MEM_PYTHON (scripts/test passes its virtualenv's), else the
// repository's .venv.
package servetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Repo is the repository root (this file is go/internal/servetest/).
func Repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Python is the interpreter that runs kata-mem.
func Python() (string, error) {
	if py := os.Getenv("KATA_MEM_PYTHON"); py != "" {
		return py, nil
	}
	py := filepath.Join(Repo(), ".venv", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		return "", fmt.Errorf("no Python to run kata-mem serve with: set KATA_MEM_PYTHON (a Python with kata_mem's dependencies), or make %s (scripts/bootstrap.sh)", py)
	}
	return py, nil
}

// Service is a running kata-mem serve.
type Service struct {
	Dir    string // 0755: reachable by every user
	Socket string
	State  string
	Log    string
	cmd    *exec.Cmd
	exited chan error
}

// WorldDir is a new directory every user can reach, removed at the test's end.
func WorldDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "kata-mem-go-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Start runs `kata-mem serve --socket DIR/kata-mem.sock --state-dir DIR/state ARGS`
// and waits until it answers /healthz; it is stopped at the test's end (SIGTERM,
// which it must answer with exit 0).
func Start(t testing.TB, args ...string) *Service {
	t.Helper()
	s, err := Launch(WorldDir(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Launch is Start in the directory dir, for a TestMain (which has no testing.TB):
// the caller stops it.
func Launch(dir string, args ...string) (*Service, error) {
	s := &Service{
		Dir:    dir,
		Socket: filepath.Join(dir, "kata-mem.sock"),
		State:  filepath.Join(dir, "state"),
		Log:    filepath.Join(dir, "serve.log"),
		exited: make(chan error, 1),
	}
	py, err := Python()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(s.Log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	argv := append([]string{"-m", "kata_mem", "-v", "serve", "--socket", s.Socket, "--state-dir", s.State}, args...)
	s.cmd = exec.Command(py, argv...)
	s.cmd.Dir = Repo() // the repository's kata_mem, not an installed one
	s.cmd.Stderr = logFile
	for _, kv := range os.Environ() {
		// As tests/service/conftest.py: no configuration or debug setting of the caller's.
		if !strings.HasPrefix(kv, "KATA_CONF_FILE=") && !strings.HasPrefix(kv, "KATA_MEM_DEBUG=") {
			s.cmd.Env = append(s.cmd.Env, kv)
		}
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.exited <- s.cmd.Wait() }()
	if err := s.waitHealthy(30 * time.Second); err != nil {
		_ = s.cmd.Process.Kill()
		return nil, fmt.Errorf("%v; its log:\n%s", err, s.LogText())
	}
	return s, nil
}

// Stop sends SIGTERM and waits for exit 0.
func (s *Service) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			return fmt.Errorf("kata-mem serve: %v; its log:\n%s", err, s.LogText())
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		return fmt.Errorf("kata-mem serve did not stop within 30 s of SIGTERM; its log:\n%s", s.LogText())
	}
}

// LogText is what serve wrote on stderr so far.
func (s *Service) LogText() string {
	raw, _ := os.ReadFile(s.Log)
	return string(raw)
}

func (s *Service) waitHealthy(timeout time.Duration) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", s.Socket)
		},
	}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-s.exited:
			s.exited <- err
			return fmt.Errorf("kata-mem serve exited: %v", err)
		default:
		}
		resp, err := client.Get("http://kata-mem/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("kata-mem serve did not answer /healthz within " + timeout.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the condition: the socket appears when serve listens
	}
}

// fakeQMP serves tests/support/fake_qmp.py's FakeQemu (a QEMU monitor with DIMM
// slots and a guest, as the Python service tests use) at DIR/qmp.sock, with the
// configuration of its sandbox at DIR/configuration.toml, until stdin closes.
const fakeQMP = `
import sys
from pathlib import Path
from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
where = Path(sys.argv[1])
small_vm_config(where)
with FakeQmpServer(where / "qmp.sock", FakeQemu()):
    print("ready", flush=True)
    sys.stdin.read()
`

// FakeVM is a fake QEMU monitor: 512 MiB at boot, at most 4096 MiB in 4 DIMM slots.
type FakeVM struct {
	Config string // the sandbox's Kata configuration
	Socket string // its QMP socket
}

// StartFakeVM starts a FakeVM in a new directory; it is stopped at the test's end.
func StartFakeVM(t testing.TB) *FakeVM {
	t.Helper()
	py, err := Python()
	if err != nil {
		t.Fatal(err)
	}
	dir := WorldDir(t)
	cmd := exec.Command(py, "-c", fakeQMP, dir)
	cmd.Dir = Repo()
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the fake QMP server: %v", err)
		}
	})
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("the fake QMP server did not start: %q, %v", line, err)
	}
	return &FakeVM{Config: filepath.Join(dir, "configuration.toml"), Socket: filepath.Join(dir, "qmp.sock")}
}
