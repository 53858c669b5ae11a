// Package katamem is a client of kata-mem serve, the node service that sizes the
// memory of Kata sandboxes, over its unix socket (HTTP/1.1, JSON). Only the
// standard library.
//
//	c := katamem.New("/run/kata-mem/kata-mem.sock")
//	defer c.Close()
//	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
//	defer cancel()
//	resp, err := c.Shim(ctx, &katamem.ShimRequest{SandboxID: id, Event: katamem.EventCreate, ...})
package katamem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// DefaultSocket is where kata-mem serve listens unless told otherwise.
const DefaultSocket = "/run/kata-mem/kata-mem.sock"

// IdleTimeout is how long the client keeps an idle connection for the next call:
// below the service's own (--idle-timeout, 10 s by default), so that the client
// never sends a request on a connection the service is closing.
const IdleTimeout = 5 * time.Second

// maxAnswer bounds what is read of an answer: the largest are a node's status
// and a plan, a few KiB each.
const maxAnswer = 16 << 20

// Client talks to one kata-mem serve. Its connections are kept alive between
// calls; it is safe for concurrent use. Each call's deadline is its context's.
type Client struct {
	http *http.Client
}

// New returns a client of the service listening on the unix socket at path.
func New(path string) *Client {
	dialer := &net.Dialer{}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     IdleTimeout,
		// The service takes bodies as they are (a Content-Encoding is a 415) and
		// sends small documents: nothing to gain from gzip.
		DisableCompression: true,
	}
	return &Client{http: &http.Client{Transport: transport}}
}

// Close closes the idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
}

// Shim sends one shim request (POST /v1/shim) and returns the service's
// response: what `kata-mem shim` prints for it. An error document comes back as
// an *Error (with the response in it); an outcome such as Deferred or
// Infeasible is a response, not an error.
func (c *Client) Shim(ctx context.Context, req *ShimRequest) (*ShimResponse, error) {
	doc := *req
	if doc.Schema == "" {
		doc.Schema = RequestSchema
	}
	body, err := json.Marshal(&doc)
	if err != nil {
		return nil, fmt.Errorf("kata-mem: encoding the request: %w", err)
	}
	var resp ShimResponse
	if err := c.do(ctx, http.MethodPost, "/v1/shim", body, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Node returns the node's status (GET /v1/node): its budget and every sandbox
// of the state directory.
func (c *Client) Node(ctx context.Context) (*Node, error) {
	var node Node
	if err := c.do(ctx, http.MethodGet, "/v1/node", nil, &node); err != nil {
		return nil, err
	}
	return &node, nil
}

// Sandbox returns what the sandbox's VM says now and its journal
// (GET /v1/sandboxes/ID); an unknown sandbox is an *Error with HTTPStatus 404.
func (c *Client) Sandbox(ctx context.Context, id string) (*SandboxStatus, error) {
	var status SandboxStatus
	if err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id), nil, &status); err != nil {
		return nil, err
	}
	return &status, nil
}

// Healthz returns nil when the service can use its state directory (GET
// /healthz), else an *Error saying why.
func (c *Client) Healthz(ctx context.Context) error {
	var ok struct {
		Status string `json:"status"`
	}
	if err := c.do(ctx, http.MethodGet, "/healthz", nil, &ok); err != nil {
		return err
	}
	if ok.Status != "ok" {
		return fmt.Errorf("kata-mem: /healthz answered status %q, expected \"ok\"", ok.Status)
	}
	return nil
}

// envelope is what every error answer has, whichever its schema.
type envelope struct {
	Schema string   `json:"schema"`
	Error  *Failure `json:"error"`
	CRI    *CRI     `json:"cri"`
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, into interface{}) error {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	// The host is a name only: the transport dials the socket.
	req, err := http.NewRequestWithContext(ctx, method, "http://kata-mem"+path, reader)
	if err != nil {
		return fmt.Errorf("kata-mem: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("kata-mem: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("kata-mem: %s %s: reading the answer: %w", method, path, err)
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("kata-mem: %s %s: HTTP %d, not a kata-mem document: %w", method, path, resp.StatusCode, err)
	}
	if env.Error != nil {
		failure := &Error{
			Kind:       env.Error.Kind,
			Message:    env.Error.Message,
			ExitCode:   env.Error.ExitCode,
			HTTPStatus: resp.StatusCode,
			CRI:        env.CRI,
		}
		if env.Schema == ResponseSchema {
			var shim ShimResponse
			if json.Unmarshal(raw, &shim) == nil {
				failure.Response = &shim
			}
		}
		return failure
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kata-mem: %s %s: HTTP %d without an error document", method, path, resp.StatusCode)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("kata-mem: %s %s: %w", method, path, err)
	}
	return nil
}

// IsUnavailable reports whether err says the sandbox's VM is gone or cannot be
// reached (exit code 6), the case a shim may retry or treat as a stopped VM.
func IsUnavailable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindBackendUnavailable
}
