package nriplugin

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The Kata runtimes whose VMs the plugin can find, as kata-mem names them
// (the plan's config.runtime).
const (
	RuntimeGo     = "go"
	RuntimeRustVM = "runtime-rs"
)

// DefaultSockets is the QMP monitor kata-mem uses for a sandbox of each Kata
// runtime; {id} is the sandbox id. QEMU serves one QMP client at a time, so it must
// be a monitor Kata's shim does not hold.
//
//   - The Go runtime: its extra monitor, /run/vc/vm/ID/extra-monitor.sock, which it
//     adds with enable_debug = true and extra_monitor_socket = "qmp" in
//     [hypervisor.qemu] (src/runtime/virtcontainers/qemu.go extraMonitorSocketPath,
//     VMStorePath /run/vc/vm). Its own qmp.sock there is connected whenever the
//     shim hotplugs something and kept open (qemu.go qmpSetup).
//   - runtime-rs: qmp.sock in the sandbox's bundle directory, which under
//     containerd is /run/containerd/io.containerd.runtime.v2.task/k8s.io/ID
//     (src/runtime-rs/crates/hypervisor/src/qemu/qmp.rs get_qmp_socket_path: a
//     path relative to the shim's working directory, the bundle). runtime-rs keeps
//     its QMP connection for the VM's life (qemu/inner.rs) and offers no second QMP
//     monitor (its extra_monitor_socket "qmp" binds qmp.sock again, "hmp" is a
//     human monitor), so kata-mem reaches a Kata 4 VM only where that changes:
//     docs/guide/in-place-resize.md says what works.
var DefaultSockets = map[string]string{
	RuntimeGo:     "/run/vc/vm/{id}/extra-monitor.sock",
	RuntimeRustVM: "/run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/qmp.sock",
}

// DefaultBudget is the share of NRI's request timeout the plugin waits for
// kata-mem: a plugin that overruns the timeout is dropped by the runtime and the
// call goes on without it (containerd/nri pkg/adaptation/plugin.go), which would
// let the kubelet lower a pod cgroup under a VM that has not shrunk.
const DefaultBudget = 0.75

// Margin is kept between the plugin's own deadline and NRI's, whatever the
// budget (a quarter of the timeout at most): the answer still has to travel back
// over ttrpc.
const Margin = 150 * time.Millisecond

// Config is what the plugin is told at start.
type Config struct {
	// Handlers maps a RuntimeClass handler (PodSandbox.runtime_handler) to the
	// Kata configuration file its pods run with. Pods of any other handler are
	// answered at once and never reach kata-mem.
	Handlers map[string]string
	// Sockets maps a Kata runtime to its QMP socket path, {id} for the sandbox
	// id (DefaultSockets when nil or for a runtime it does not name).
	Sockets map[string]string
	// AllowShrink lets kata-mem take memory back on a decrease (safe shrink, in
	// verified steps); without it a decrease is refused.
	AllowShrink bool
	// Budget is the share of NRI's request timeout to wait for kata-mem (0:
	// DefaultBudget).
	Budget float64
}

// Check says what is wrong with the configuration, naming the flag's value.
func (c *Config) Check() error {
	if len(c.Handlers) == 0 {
		return fmt.Errorf("no Kata runtime handler given: name at least one (-handler NAME=CONFIG)")
	}
	for name, config := range c.Handlers {
		if name == "" {
			return fmt.Errorf("handler %q: an empty runtime handler name", name+"="+config)
		}
		if !filepath.IsAbs(config) {
			return fmt.Errorf("handler %s=%s: the Kata configuration must be an absolute path (kata-mem serve reads it from its own directory)", name, config)
		}
	}
	for runtime, template := range c.Sockets {
		if _, ok := DefaultSockets[runtime]; !ok {
			return fmt.Errorf("socket %s=%s: unknown Kata runtime %q; expected one of %s", runtime, template, runtime, strings.Join(runtimes(), ", "))
		}
		if !filepath.IsAbs(template) || !strings.Contains(template, "{id}") {
			return fmt.Errorf("socket %s=%s: expected an absolute path with {id} for the sandbox id", runtime, template)
		}
	}
	if c.Budget < 0 || c.Budget >= 1 {
		return fmt.Errorf("budget %g: expected a share of NRI's request timeout between 0 and 1", c.Budget)
	}
	return nil
}

// Socket is the QMP socket of the sandbox id under the Kata runtime.
func (c *Config) Socket(runtime, id string) string {
	template, ok := c.Sockets[runtime]
	if !ok {
		template = DefaultSockets[runtime]
	}
	return strings.ReplaceAll(template, "{id}", id)
}

// Wait is how long to wait for kata-mem within NRI's request timeout.
func (c *Config) Wait(timeout time.Duration) time.Duration {
	budget := c.Budget
	if budget == 0 {
		budget = DefaultBudget
	}
	margin := min(Margin, timeout/4)
	return max(min(time.Duration(float64(timeout)*budget), timeout-margin), 0)
}

func runtimes() []string {
	names := make([]string, 0, len(DefaultSockets))
	for name := range DefaultSockets {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// ParsePair reads a NAME=VALUE flag value.
func ParsePair(flag, value string) (string, string, error) {
	name, rest, ok := strings.Cut(value, "=")
	if !ok || name == "" || rest == "" {
		return "", "", fmt.Errorf("-%s %q: expected NAME=VALUE", flag, value)
	}
	return name, rest, nil
}
