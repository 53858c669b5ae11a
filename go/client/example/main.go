// Command example does what Kata's shim would do with kata-mem serve over a
// container's life: size the sandbox at container create, resize it when the
// container's limits are updated, and let kata-mem forget it at delete.
//
//	go run ./example -sandbox sb-1 -config /etc/kata-containers/configuration.toml \
//	    [-qmp /run/vc/vm/sb-1/qmp.sock]
//
// Without -qmp every request is plan-only: nothing touches a VM.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	katamem "kata-mem/client"
)

func main() {
	socket := flag.String("socket", katamem.DefaultSocket, "kata-mem serve's unix socket")
	sandbox := flag.String("sandbox", "sb-1", "the sandbox id")
	config := flag.String("config", "", "the Kata configuration (default: where Kata looks)")
	qmp := flag.String("qmp", "", "the VM's QMP socket: apply (default: plan only)")
	flag.Parse()
	c := katamem.New(*socket)
	defer c.Close()
	if err := run(context.Background(), c, *sandbox, *config, *qmp, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c *katamem.Client, sandbox, config, qmp string, out io.Writer) error {
	base := katamem.ShimRequest{SandboxID: sandbox}
	if config != "" {
		base.Config = katamem.String(config)
	}
	if qmp != "" {
		base.Apply = true
		base.Backend = &katamem.Backend{Type: "qmp", Socket: qmp}
	}
	app := katamem.Container{ID: "app", MemoryLimitBytes: katamem.Int64(512 << 20),
		CPUQuota: katamem.Int64(100000), CPUPeriod: katamem.Int64(100000)}

	// Container create (the OCI spec's linux.resources): size the VM for it.
	create := base
	create.Event = katamem.EventCreate
	create.Containers = []katamem.Container{app}
	if err := call(ctx, c, &create, out); err != nil {
		return err
	}

	// UpdateContainerResources: a higher limit. A lower one is a shrink: the shim
	// says whether it may (AllowShrink); the guest may still defer it.
	app.MemoryLimitBytes = katamem.Int64(1 << 30)
	update := base
	update.Event = katamem.EventUpdate
	update.Containers = []katamem.Container{app}
	if err := call(ctx, c, &update, out); err != nil {
		return err
	}

	// The sandbox goes away: kata-mem forgets its state. A VM already gone is no error here.
	del := base
	del.Event = katamem.EventDelete
	del.Backend, del.Apply = nil, false
	if err := call(ctx, c, &del, out); err != nil && !katamem.IsUnavailable(err) {
		return err
	}
	return nil
}

// call sends one request with the deadline a shim gives a hook, and prints what came of it.
func call(ctx context.Context, c *katamem.Client, req *katamem.ShimRequest, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resp, err := c.Shim(ctx, req)
	if err != nil {
		return fmt.Errorf("%s: %w", req.Event, err)
	}
	line := fmt.Sprintf("%s: ", req.Event)
	if resp.Plan != nil {
		m := resp.Plan.Memory
		line += fmt.Sprintf("target %d MiB (now %d MiB, %s)", m.TargetMiB, m.CurrentMiB, m.Mechanism)
		if len(m.ClampedBy) > 0 {
			line += fmt.Sprintf(", clamped by %v", m.ClampedBy)
		}
	}
	if o := resp.Outcome; o != nil {
		// Deferred and Infeasible are answers, not failures: the shim carries on.
		line += "; " + o.Status
		if o.Reason != "" {
			line += " (" + o.Reason + ")"
		}
		line += ": " + o.Message
	}
	if resp.Plan == nil && resp.Outcome == nil {
		line += "done" // a delete: kata-mem forgot the sandbox
	}
	for _, w := range resp.Warnings {
		line += "; warning: " + w
	}
	_, err = fmt.Fprintln(out, line)
	return err
}
