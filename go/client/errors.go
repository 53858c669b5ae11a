package katamem

import "fmt"

// The error kinds of kata-mem's error documents ("error.kind"), each with its exit
// code (README, "Exit codes").
const (
	KindInternal           = "internal"            // 1: a bug in kata-mem
	KindConfig             = "config"              // 3
	KindInput              = "input"               // 4 (also a refused peer, 403)
	KindQuantity           = "quantity"            // 4
	KindBackendUnavailable = "backend-unavailable" // 6: the VM is gone or not reachable
	KindBackend            = "backend"             // 7
	KindBackendUnsupported = "backend-unsupported" // 7
	KindMissingDependency  = "missing-dependency"  // 9
)

// Error is an answer of kata-mem serve that is an error document: a shim error
// response (kata-mem/shim-response/v1 with "error") or a refusal of the service
// itself (kata-mem/error/v1: a peer it does not serve, an unknown sandbox, a
// malformed HTTP request). Match it with errors.As.
type Error struct {
	Kind     string
	Message  string
	ExitCode int // what `kata-mem shim` would have exited with
	// HTTPStatus is the answer's status: 400 bad input or configuration, 403 a
	// refused peer, 404 unknown, 503 the backend (exit codes 6-9).
	HTTPStatus int
	// CRI is the response's "cri" object when it has one: what a shim returns to
	// the kubelet verbatim.
	CRI *CRI
	// Response is the whole shim response when the error is one (nil for a
	// refusal of the service itself): its warnings, for one.
	Response *ShimResponse
}

func (e *Error) Error() string {
	return fmt.Sprintf("kata-mem: %s (%s, exit code %d, HTTP %d)", e.Message, e.Kind, e.ExitCode, e.HTTPStatus)
}

// CRICode is the gRPC code to answer the kubelet with: the response's own when
// it gives one, else "Unknown" (kata-mem did not say).
func (e *Error) CRICode() string {
	if e.CRI != nil {
		return e.CRI.Code
	}
	return "Unknown"
}
