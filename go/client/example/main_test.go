package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	katamem "kata-mem/client"
	"kata-mem/internal/servetest"
)

// The example's create, update and delete against a real kata-mem serve: plan-only,
// then applied to a fake QEMU monitor (tests/support/fake_qmp.py).
func TestTheShimsLifeCycle(t *testing.T) {
	svc := servetest.Start(t)
	c := katamem.New(svc.Socket)
	defer c.Close()
	config := filepath.Join(servetest.Repo(), "tests", "fixtures", "kata-configs", "configuration-qemu.toml")
	t.Run("plan only", func(t *testing.T) {
		lifeCycle(t, c, config, "")
	})
	t.Run("applied", func(t *testing.T) {
		vm := servetest.StartFakeVM(t)
		out := lifeCycle(t, c, vm.Config, vm.Socket)
		if strings.Count(out, "; Resized: ") != 2 {
			t.Errorf("expected create and update resized, got:\n%s", out)
		}
		node, err := c.Node(context.Background())
		if err != nil || len(node.Sandboxes) != 0 {
			t.Errorf("expected the sandbox forgotten at delete, got %+v (%v)", node, err)
		}
	})
}

func lifeCycle(t *testing.T, c *katamem.Client, config, qmp string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, c, "sb-example", config, qmp, &out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "create: target ") ||
		!strings.HasPrefix(lines[1], "update: target ") || !strings.HasPrefix(lines[2], "delete: done") {
		t.Fatalf("expected create, update and delete, got:\n%s", out.String())
	}
	var create, update int
	if _, err := fmt.Sscanf(lines[0], "create: target %d", &create); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(lines[1], "update: target %d", &update); err != nil {
		t.Fatal(err)
	}
	if update-create != 512 {
		t.Errorf("the update raises the limit by 512 MiB: expected the target to follow, got %d -> %d MiB", create, update)
	}
	return out.String()
}
