package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	katamem "kata-mem/clients/go"
	"kata-mem/clients/go/internal/servetest"
)

// The example's create, update and delete, plan-only, against a real kata-mem serve.
func TestTheShimsLifeCycle(t *testing.T) {
	svc := servetest.Start(t)
	c := katamem.New(svc.Socket)
	defer c.Close()
	config := filepath.Join(servetest.Repo(), "tests", "fixtures", "kata-configs", "configuration-qemu.toml")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, c, "sb-example", config, "", &out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "create: target ") ||
		!strings.HasPrefix(lines[1], "update: target ") || !strings.HasPrefix(lines[2], "delete: ") {
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
}
