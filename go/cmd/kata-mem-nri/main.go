// Command kata-mem-nri is the NRI plugin that carries in-place pod resizes from
// the container runtime (containerd 2.3+, CRI-O) to kata-mem serve, for the pods
// of the given Kata runtime handlers (package kata-mem/nriplugin).
//
//	kata-mem-nri -handler kata-qemu-runtime-rs=/opt/kata/share/defaults/kata-containers/runtime-rs/configuration-qemu-runtime-rs.toml
//
// It connects to the runtime's NRI socket, and again whenever the runtime
// restarts; the runtime then synchronizes it with the pods that run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	katamem "kata-mem/client"
	"kata-mem/nriplugin"
)

// pairs is a repeatable NAME=VALUE flag.
type pairs struct {
	name   string
	values map[string]string
}

func (p *pairs) String() string { return fmt.Sprint(p.values) }

func (p *pairs) Set(value string) error {
	key, rest, err := nriplugin.ParsePair(p.name, value)
	if err != nil {
		return err
	}
	if _, dup := p.values[key]; dup {
		return fmt.Errorf("-%s %s given twice", p.name, key)
	}
	p.values[key] = rest
	return nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	flags := flag.NewFlagSet("kata-mem-nri", flag.ContinueOnError)
	handlers := &pairs{name: "handler", values: map[string]string{}}
	sockets := &pairs{name: "qmp-socket", values: map[string]string{}}
	flags.Var(handlers, "handler", "a Kata runtime handler and the Kata configuration its pods run with: NAME=/path/configuration.toml (repeatable)")
	flags.Var(sockets, "qmp-socket", "where a Kata runtime keeps a sandbox's QMP socket, {id} for the sandbox id: RUNTIME=PATH (default go="+nriplugin.DefaultSockets[nriplugin.RuntimeGo]+", runtime-rs="+nriplugin.DefaultSockets[nriplugin.RuntimeRustVM]+")")
	service := flags.String("socket", katamem.DefaultSocket, "kata-mem serve's unix socket")
	nriSocket := flags.String("nri-socket", api.DefaultSocketPath, "the runtime's NRI socket")
	name := flags.String("name", "kata-mem", "the plugin's name in NRI")
	index := flags.String("index", "10", "the plugin's index in NRI (its order among plugins)")
	noShrink := flags.Bool("no-shrink", false, "refuse every decrease instead of shrinking the VM safely")
	budget := flags.Float64("budget", nriplugin.DefaultBudget, "the share of NRI's request timeout to wait for kata-mem serve")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kata-mem-nri: unexpected argument %q\n", flags.Arg(0))
		return 2
	}
	cfg := nriplugin.Config{Handlers: handlers.values, Sockets: sockets.values, AllowShrink: !*noShrink, Budget: *budget}
	if err := cfg.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "kata-mem-nri: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	client := katamem.New(*service)
	defer client.Close()
	plugin := nriplugin.New(cfg, client, log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("starting", "nri_socket", *nriSocket, "service", *service, "handlers", strings.Join(handlerNames(cfg), ","))
	// The runtime drops the connection when it restarts: connect again, and the
	// runtime synchronizes the plugin with what runs.
	for wait := time.Second; ; {
		err := serve(ctx, plugin, *nriSocket, *name, *index, log)
		if ctx.Err() != nil {
			log.Info("stopped")
			return 0
		}
		log.Warn("NRI connection ended; connecting again", "error", err, "in", wait.String())
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(wait):
		}
		if wait < 10*time.Second {
			wait *= 2
		}
	}
}

// serve runs one NRI connection to its end.
func serve(ctx context.Context, plugin *nriplugin.Plugin, socket, name, index string, log *slog.Logger) error {
	s, err := stub.New(plugin,
		stub.WithPluginName(name),
		stub.WithPluginIdx(index),
		stub.WithSocketPath(socket),
		stub.WithOnClose(func() { log.Warn("NRI connection closed") }),
		// Where the runtime supports it (NRI v0.12.4 and later), a plugin that
		// overruns a call fails the call instead of letting it go on, and stays
		// registered. containerd 2.3 and 2.4 vendor older NRI and ignore it: there the
		// plugin's own deadline (Config.Wait) is what keeps it in time.
		stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true}),
	)
	if err != nil {
		return err
	}
	plugin.Timeout = s.RequestTimeout
	return s.Run(ctx)
}

func handlerNames(cfg nriplugin.Config) []string {
	names := make([]string, 0, len(cfg.Handlers))
	for n := range cfg.Handlers {
		names = append(names, n)
	}
	return names
}
